"""`vllm serve` input for the commands besides `config` (check, simulate, worst, diff):
`--config FILE` (the YAML `vllm serve --config` reads, parsed as `batchproof config` parses
it: model/vllm/serve_yaml.py), a pasted `vllm serve MODEL ...` line, the flags the model
does not read (listed as ignored, one line), and the assumptions an answer rests on when a
vLLM value that depends on the machine or the model is not given.

A custom vLLM configuration is resolved as `batchproof config` resolves it: by vLLM's
EngineArgs rules (model/vllm/engine_args.resolve: unset batch sizes from the device's tier,
the clamps of arg_utils.py:3097-3186) and the deployment `vllm serve` runs
(model/vllm/deployment.serve_deployment: prefix caching on, the AsyncScheduler on a GPU).
Where `config` needs the device (unset max_num_batched_tokens or max_num_seqs), these
commands assume SchedulerConfig's own defaults and say so; where it needs max_model_len
or the KV pool (batchproof reads no config.json and profiles no memory), they assume the
model's defaults and say so too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from checker.config.argtypes import read_number
from checker.config.flags import (
    CONFIG_FLAGS,
    ENGINE_ONLY_FLAGS,
    IGNORED_PREFIX,
    add_config_flags,
    apply_config_flags,
    ignored_flags,
)
from checker.config.model_kind import model_kind, with_kind
from checker.config.spec_args import spec_decode
from model.core.errors import InputError
from model.vllm.config import Config
from model.vllm.deployment import (
    CUSTOM_SCHEDULER,
    KV_CONNECTOR,
    QUEUE_LIMITS,
    Feature,
    serve_deployment,
)
from model.vllm.engine_args import (
    DEVICE_KEYS,
    PLATFORM_CPU,
    USAGE_ENGINE,
    USAGE_SERVE,
    Device,
    EngineArgs,
    device_named,
    device_with_memory,
    resolve,
)
from model.vllm.serve_yaml import MEMORY_DEFAULT, MEMORY_FLAG, NOT_MODELLED, yaml_tokens

if TYPE_CHECKING:  # checker.config.connector imports the hazards, which import this module
    from checker.config.connector import KvTransfer

YAML_SUFFIXES = (".yaml", ".yml")
SERVE_DEST = "serve"  # the positional words of a pasted `vllm serve MODEL` line

# Ignored value flags that turn on a scheduling feature the model leaves out
# (model/vllm/deployment.py): a verdict on the configuration would not be about what
# `vllm serve` runs, so the commands that run the model refuse them, and `config` lists
# the feature in the deployment it reports.
FEATURE_FLAGS: tuple[tuple[str, Feature], ...] = (
    ("kv_transfer_config", KV_CONNECTOR), ("max_num_queued_reqs", QUEUE_LIMITS),
    ("max_num_queued_tokens", QUEUE_LIMITS), ("scheduler_cls", CUSTOM_SCHEDULER))


# --- the options ---------------------------------------------------------------------------


def add_config_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                      manifest: bool) -> None:
    """`--config FILE` (vLLM's YAML); with `manifest`, also `--manifest-config NAME`, and
    `--config NAME` still names a manifest configuration (deprecated) when NAME is one and
    not a file."""
    if manifest:
        parser.add_argument("--manifest-config", metavar="NAME",
                            help="a manifest configuration (see --list)")
        parser.add_argument("--config", dest="config", metavar="FILE.yaml",
                            help="the YAML file `vllm serve --config` reads (its keys are "
                            "vllm serve flags; flags on the command line win); a manifest "
                            "configuration's NAME here is the deprecated spelling of "
                            "--manifest-config NAME")
    else:
        parser.add_argument("--config", dest="config", metavar="FILE.yaml",
                            help="the YAML file `vllm serve --config` reads: its vllm serve "
                            "flags override the workload's config; flags on the command line "
                            "win over the file")


def add_serve_words(parser: argparse.ArgumentParser) -> None:
    """The positional words of a pasted `vllm serve MODEL ...` line."""
    parser.add_argument(SERVE_DEST, nargs="*", metavar="vllm serve MODEL", default=[],
                        help="optional: a pasted `vllm serve MODEL` (the model tag is only "
                        "printed; its flags follow as usual)")


def add_machine_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--device / --gpu-memory-gib: the machine whose memory picks vLLM's default batch
    sizes (engine/arg_utils.py:2893-2985), as `batchproof config` takes them."""
    parser.add_argument("--device", metavar="NAME",
                        help=f"the device vLLM's default batch sizes depend on: "
                        f"{', '.join(DEVICE_KEYS)} (default: SchedulerConfig's defaults, "
                        "said in the output)")
    parser.add_argument("--gpu-memory-gib", type=_gib, metavar="G",
                        help="device memory in GiB instead of --device")


def positive_number(unit: str) -> Callable[[str], float]:
    """An argparse type: a number in (0, 1e6) of `unit`, errors naming the unit."""
    def parse(text: str) -> float:
        return read_number(text, float, lambda v: 0 < v < 1e6,
                           f"{text!r} is not a number of {unit}",
                           f"{text!r} must be a positive number of {unit}")
    return parse


_gib = positive_number("GiB")


def split_config_option(args: argparse.Namespace, manifest_names: Sequence[str]) -> None:
    """Decide what `--config X` names: a YAML file (a path ending .yaml/.yml, or a file that
    exists) goes to `args.serve_yaml`; a manifest configuration's name (deprecated) to
    `args.manifest_config`, with one line on stderr. Anything else is an InputError."""
    value = getattr(args, "config", None)
    args.serve_yaml = None
    if not hasattr(args, "manifest_config"):
        args.manifest_config = None
    if value is None:
        return
    if Path(value).suffix in YAML_SUFFIXES or Path(value).is_file():
        args.serve_yaml = value
        return
    if value in manifest_names:
        if args.manifest_config is not None:
            raise InputError(f"--config {value} and --manifest-config "
                             f"{args.manifest_config} both name a manifest configuration; "
                             "give --manifest-config once")
        sys.stderr.write(f"batchproof: --config NAME is deprecated for a manifest "
                         f"configuration; write --manifest-config {value} (--config now "
                         "takes the YAML file of vllm serve --config)\n")
        args.manifest_config = value
        return
    raise InputError(f"unknown config {value!r}: no such file, and no manifest configuration "
                     "of that name; give the YAML file of `vllm serve --config` (FILE.yaml), or "
                     f"--manifest-config NAME (one of {', '.join(manifest_names)})")


# --- the YAML file ---------------------------------------------------------------------------


class _FileParser(argparse.ArgumentParser):
    """Parses a YAML file's tokens; errors name the file, in one line."""

    path = ""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.path}: {message}; use vllm serve flag names as keys")


def long_flags(parser: argparse.ArgumentParser) -> frozenset[str]:
    """The long flags (--max-num-seqs, --no-enable-prefix-caching, ...) `parser` reads: the
    keys a YAML file parsed with it may have (serve_yaml.yaml_tokens)."""
    return frozenset(s for s in parser._option_string_actions if s.startswith("--"))


def merge_yaml(args: argparse.Namespace, path: str | None) -> argparse.Namespace:
    """`args` with the vllm serve flags of the YAML file at `path` under those given on the
    command line (cli > config file > defaults, utils/argparse_utils.py:526-531). The file
    is read as `batchproof config --config` reads it (serve_yaml.yaml_tokens); a key that is
    no vllm serve flag is a one-line error naming the file."""
    if not path:
        return args
    parser = _FileParser(prog="--config", add_help=False, allow_abbrev=False)
    parser.path = path
    add_config_flags(parser)
    from_file = parser.parse_args(yaml_tokens(path, long_flags(parser)))
    merged = argparse.Namespace(**vars(args))
    for dest, value in vars(from_file).items():
        if value is None or value == []:
            continue
        if getattr(args, dest, None) is None:
            setattr(merged, dest, value)
    return merged


# --- what was given -----------------------------------------------------------------------


def serve_model(args: argparse.Namespace) -> str:
    """The model tag of a pasted `vllm serve MODEL` line (or --model), '' if none. The
    words must start with `vllm serve` (or `serve`): a stray word is a mistake, not a
    model (`batchproof check starvation` for `--property starvation`)."""
    words = list(getattr(args, SERVE_DEST, None) or [])
    if words and words[:2] != ["vllm", "serve"] and words[:1] != ["serve"]:
        raise InputError(f"unexpected argument {words[0]!r}; a pasted vLLM command line "
                         "starts with `vllm serve MODEL`, and options start with -- (e.g. "
                         "--property NAME)")
    return pasted_model(words, getattr(args, "model", None), "after `vllm serve`, then flags")


def pasted_model(words: Sequence[str], model: str | None, then: str) -> str:
    """`model` (--model) if given, else the model tag of the words of a pasted `vllm serve
    MODEL` line (a leading `vllm`, then `serve`, dropped), '' if none; InputError on more
    than one word left (the message says: give one model tag, then `then`)."""
    rest = list(words)
    if rest[:1] == ["vllm"]:
        rest = rest[1:]
    if rest[:1] == ["serve"]:
        rest = rest[1:]
    if len(rest) > 1:
        raise InputError(f"unexpected arguments {' '.join(rest[1:])!r}; give one model tag "
                         f"{then}")
    return model or (rest[0] if rest else "")


def model_line(args: argparse.Namespace) -> str | None:
    """The line naming the model of a pasted `vllm serve MODEL` (or --model), if any."""
    model = serve_model(args)
    return (f"model: {model} (only named: batchproof reads neither its weights nor its "
            "config.json)") if model else None


def vllm_input_given(args: argparse.Namespace) -> bool:
    """Whether the command line describes a vLLM deployment of its own: a Config flag, a
    pasted `vllm serve MODEL`, or one of the other flags `vllm serve` reads that shape the
    configuration (performance mode, parallelism, speculative decoding, LoRA)."""
    if apply_config_flags(args, Config()) != Config() or serve_model(args):
        return True
    return any(getattr(args, dest, None) is not None for _, dest, _ in ENGINE_ONLY_FLAGS)


def refuse_unmodelled(args: argparse.Namespace, command: str) -> None:
    """InputError when the vLLM flags turn on what this command does not run: speculative
    decoding the model does not cover (dspark, multi-module MTP, dynamic k, ...), LoRA,
    pipeline parallelism, a KV connector, queue limits, a custom scheduler, a prefill
    interval (model/vllm/deployment.py); `batchproof config` reports them."""
    spec = spec_decode(args)
    why = None
    if spec is not None and spec.outside() is not None:
        why = f"--speculative-config turns on {spec.outside()}"
    elif getattr(args, "enable_lora", None):
        why = "--enable-lora turns on LoRA"
    elif (getattr(args, "pipeline_parallel_size", None) or 1) > 1:
        why = "--pipeline-parallel-size above 1 runs several batches at once"
    else:
        for name, feature in FEATURE_FLAGS:
            if name == "kv_transfer_config" and command in CONNECTOR_COMMANDS:
                kv = kv_transfer_of(args)
                if kv is not None and kv.outside() is not None:
                    why = (f"--kv-transfer-config turns on {feature.name} ({feature.effect}) "
                           f"with {kv.outside()}")
                    break
                continue  # a consumer: check runs it (model/vllm/connector_rules.py)
            if getattr(args, IGNORED_PREFIX + name, None) is not None:
                why = f"--{name.replace('_', '-')} turns on {feature.name} ({feature.effect})"
                break
        interval = getattr(args, IGNORED_PREFIX + "prefill_schedule_interval", None)
        if why is None and interval is not None and interval != ["1"]:
            why = "--prefill-schedule-interval above 1 schedules prefills only every N steps"
    if why is not None:
        raise InputError(f"{why}, which `batchproof {command}` does not run (outside the "
                         "model, model/vllm/deployment.py); drop it, or check the deployment's "
                         "rules with `batchproof config`")
    kind = model_kind(args)
    if kind.feature() is not None and command not in KIND_COMMANDS:
        # check and simulate run the groups (model/vllm/kv_cache.py); the other commands
        # would run one full-attention group's blocks, another engine's run.
        raise InputError(f"--model-kind {kind.kind} is not modelled by {command} (its KV "
                         "cache groups are run by check and simulate, see docs/scope.md); "
                         "`batchproof config` checks its startup rule")
    with_kind(kind, Config())  # vLLM cannot group Mamba layers without the hybrid manager


# The commands that run a model kind's KV cache groups (model/vllm/kv_cache.py).
KIND_COMMANDS = ("check", "simulate")
# The commands that run a consumer's KV connector (--kv-transfer-config): check's BMC over
# the rules (model/vllm/connector_rules.py), simulate's reference (model/vllm/connector.py).
CONNECTOR_COMMANDS = ("check", "simulate")
# The rules run the connector on the synchronous Scheduler without prefix caching only;
# the reference runs it beside both (conformance modes connector+prefix, connector+async).
CONNECTOR_SYNC_ONLY = ("check",)
CONNECTOR_FLAGS = ("kv_transfer_config",)


def kv_transfer_of(args: argparse.Namespace) -> KvTransfer | None:
    """--kv-transfer-config parsed as vLLM parses it (checker/config/connector.py), None
    when not given; InputError on bad JSON or a field vLLM refuses."""
    given = getattr(args, IGNORED_PREFIX + "kv_transfer_config", None)
    if given is None:
        return None
    from checker.config.connector import parse_kv_transfer  # it imports the hazards

    return parse_kv_transfer(" ".join(given))


def kind_line(args: argparse.Namespace) -> str:
    """The KV cache layout line check and simulate print beside their bounds: the model
    kind given, or that the answer assumes one full-attention group."""
    return "kv cache: " + model_kind(args).describe()


def ignored_line(args: argparse.Namespace, read: Sequence[str] = (),
                 known: Sequence[str] = ()) -> str | None:
    """The one line listing the vllm serve flags given that the command does not read
    (`read`: other dests it does not use, e.g. --performance-mode on a workload's config;
    `known`: flags it reads although the model's flag set leaves them out, e.g. check's
    --kv-transfer-config)."""
    names = [n for n in (*ignored_flags(args), *read) if n not in known]
    if not names:
        return None
    return ("ignored vLLM flags (not read by the scheduler model): "
            + " ".join("--" + n.replace("_", "-") for n in sorted(set(names))))


def unread_engine_flags(args: argparse.Namespace) -> list[str]:
    """The engine flags that only shape unset defaults (performance mode, tensor
    parallelism), given where the configuration is complete (simulate's workload)."""
    return [dest for dest in ("performance_mode", "tensor_parallel_size")
            if getattr(args, dest, None) is not None]


def memory_note(args: argparse.Namespace, blocks: int | str, where: str) -> str | None:
    """What the answer assumes about the KV pool when --gpu-memory-utilization is given
    without --num-gpu-blocks-override (vLLM sizes the pool by profiling)."""
    fraction = getattr(args, IGNORED_PREFIX + MEMORY_FLAG, None)
    if fraction is None or getattr(args, "config_num_gpu_blocks", None) is not None:
        return None
    return (f"assumed: num_gpu_blocks {blocks} ({where}); --gpu-memory-utilization "
            f"{fraction:g} does not change it: {NOT_MODELLED[MEMORY_FLAG]}")


def print_notes(lines: Sequence[str | None], stream: TextIO) -> None:
    """Print each line that is not None."""
    for line in lines:
        if line:
            stream.write(line + "\n")


# --- the configuration ------------------------------------------------------------------


def device_of(args: argparse.Namespace) -> Device | None:
    """The device --device or --gpu-memory-gib names (one of them at most), or None."""
    name, gib = getattr(args, "device", None), getattr(args, "gpu_memory_gib", None)
    if name and gib:
        raise InputError("give --device or --gpu-memory-gib, not both")
    if name:
        return device_named(name)
    if gib:
        return device_with_memory(gib)
    return None


#: The config flags EngineArgs takes as given, under the same name (None: not given).
ENGINE_ARG_FLAGS: tuple[str, ...] = (
    "max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "block_size",
    "num_gpu_blocks", "long_prefill_token_threshold", "long_prefill_token_threshold_adaptive",
    "policy", "watermark", "scheduler_reserve_full_isl", "max_num_active_seqs",
    "max_num_scheduled_tokens",
)


def engine_args(given: Mapping[str, object], max_model_len: int, performance_mode: str,
                usage: str, world_size: int) -> EngineArgs:
    """The EngineArgs of the config flags `given` (field -> value, None when not given:
    `ENGINE_ARG_FLAGS`) and of what the caller decided (the context length, the
    performance mode, the usage context, tensor x pipeline parallel size)."""
    return EngineArgs(max_model_len=max_model_len, performance_mode=performance_mode,
                      usage=usage, world_size=world_size,
                      **{name: given[name] for name in ENGINE_ARG_FLAGS})


def serve_config(args: argparse.Namespace, command: str) -> tuple[Config, list[str]]:
    """The Config `vllm serve` runs for the vLLM flags in `args` (command line over the YAML
    file), resolved as `batchproof config` resolves it, and the assumption lines for the
    values it needs and was not given."""
    refuse_unmodelled(args, command)
    given = {f.field: getattr(args, "config_" + f.field, None) for f in CONFIG_FLAGS}
    notes: list[str] = [line for line in [model_line(args)] if line]
    model_len = given["max_model_len"]
    if model_len is None:
        model_len = Config().max_model_len
        notes.append(f"assumed: max_model_len {model_len} (vLLM reads it from the model's "
                     "config.json, which batchproof does not read; give --max-model-len N)")
    device = device_of(args)
    pp = getattr(args, "pipeline_parallel_size", None) or 1
    tp = getattr(args, "tensor_parallel_size", None) or 1
    ea = engine_args(given, max_model_len=model_len,
                     performance_mode=getattr(args, "performance_mode", None) or "balanced",
                     usage=USAGE_SERVE if device is not None else USAGE_ENGINE,
                     world_size=tp * pp)
    # Without a device: SchedulerConfig's own defaults (the usage context without a tier,
    # engine/arg_utils.py:3117-3127), then vLLM's clamps as on any device.
    eff = resolve(ea, device if device is not None else device_with_memory(0.0))
    cfg = eff.to_config()
    if device is None and (given["max_num_batched_tokens"] is None
                           or given["max_num_seqs"] is None):
        notes.append(f"assumed: no --device or --gpu-memory-gib, so max_num_batched_tokens "
                     f"{cfg.max_num_batched_tokens} and max_num_seqs {cfg.max_num_seqs} come "
                     "from SchedulerConfig's defaults 2048 and 128 (config/scheduler.py:41-43, "
                     "then vLLM's clamps, engine/arg_utils.py:3140-3180); vllm serve picks them "
                     "by the device's memory (engine/arg_utils.py:2893-2985): give --device "
                     "NAME or set both flags")
    if given["num_gpu_blocks"] is None:
        fraction = getattr(args, IGNORED_PREFIX + MEMORY_FLAG, None) or MEMORY_DEFAULT
        notes.append(f"assumed: num_gpu_blocks {cfg.num_gpu_blocks} (batchproof's default "
                     "pool; vLLM sizes it by memory profiling with gpu_memory_utilization "
                     f"{fraction:g}): {NOT_MODELLED[MEMORY_FLAG]}")
    spec = spec_decode(args)
    dep = serve_deployment(
        prefix_caching=given["enable_prefix_caching"],
        async_scheduling=given["async_scheduling"], speculative=spec, lora=False,
        cpu_platform=device is not None and device.platform == PLATFORM_CPU,
        pipeline_parallel=pp)
    cfg = replace(cfg, enable_prefix_caching=dep.prefix_caching,
                  async_scheduling=dep.async_scheduling)
    if spec is not None:  # inside the model (refuse_unmodelled refused the others)
        cfg = spec.on(cfg)
    kv = kv_transfer_of(args) if command in CONNECTOR_COMMANDS else None
    if kv is not None and kv.kv_connector is not None:  # a consumer (refuse_unmodelled)
        cfg = replace(cfg, kv_connector=True, kv_load_failure_policy=kv.kv_load_failure_policy)
        beside = [flag for flag, on in (("--no-async-scheduling", cfg.async_scheduling),
                                        ("--no-enable-prefix-caching",
                                         cfg.enable_prefix_caching)) if on]
        if beside and command in CONNECTOR_SYNC_ONLY:
            raise InputError(
                f"--kv-transfer-config: `batchproof {command}` runs a KV connector on the "
                "synchronous Scheduler with prefix caching off (model/vllm/connector_rules.py)"
                f"; add {' '.join(beside)}, or check the deployment with `batchproof config`")
    cfg = with_kind(model_kind(args), cfg)  # the served model's KV cache groups
    if getattr(args, IGNORED_PREFIX + "data_parallel_size", None) is not None:
        notes.append("note: " + NOT_MODELLED["data_parallel_size"])
    return cfg, notes

