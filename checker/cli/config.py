"""`batchproof config [vllm serve flags]`: check a vLLM serving configuration.

Prints the effective configuration (each value with its origin, resolved as vLLM's
EngineArgs resolves it), applies vLLM's validation and startup rules, then decides each
serving hazard (checker/config/hazards.py). `--explain-rules` shows what each SchedulerConfig
rule prevents. Exit codes: 0 valid and no hazard witnessed; 1 a hazard witnessed (only
with --strict); 2 invalid configuration or input; 3 inconclusive (UNKNOWN).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from checker.config.connector import HAZARD as CONNECTOR_HAZARD
from checker.config.connector import KvTransfer, decide_connector_hazard, parse_kv_transfer
from checker.config.flags import (
    CONFIG_FLAGS,
    IGNORED_PREFIX,
    add_config_flags,
    add_serve_vocabulary,
    apply_config_flags,
    positive_int,
)
from checker.config.hazards import (
    HAZARD_NAMES,
    UNKNOWN_LABEL,
    WITNESSED,
    Envelope,
    decide_all,
)
from checker.config.model_kind import KIND_DESTS, ModelKind, kv_premise, model_kind
from checker.config.report import print_invalid, print_reasons, print_report
from checker.config.resolve import Request, check_config
from checker.config.rule_reasons import explain_rules
from checker.config.serve_args import (
    FEATURE_FLAGS,
    device_of,
    engine_args,
    long_flags,
    pasted_model,
    positive_number,
)
from checker.config.spec_args import spec_decode
from model.core.errors import InputError
from model.vllm.config import Config
from model.vllm.deployment import (
    PREFILL_INTERVAL,
    Deployment,
    Feature,
    serve_deployment,
)
from model.vllm.engine_args import (
    DEVICE_KEYS,
    PERFORMANCE_MODES,
    PLATFORM_CPU,
    USAGES,
    Device,
)
from model.vllm.serve_yaml import (
    IGNORED_BOOL_FLAGS,
    IGNORED_VALUE_FLAGS,
    MEMORY_FLAG,
    NOT_MODELLED,
    yaml_tokens,
)
from model.vllm.startup import SPEC_METHODS, SpecDecode

EXIT_OK, EXIT_HAZARD, EXIT_INVALID, EXIT_INCONCLUSIVE = 0, 1, 2, 3
_IGNORED = "ignored_"

# vLLM flags this command reads besides the Config fields (engine/arg_utils.py).
_ENGINE_FLAGS: tuple[tuple[tuple[str, ...], str, dict[str, object]], ...] = (
    (("--performance-mode",), "performance_mode",
     {"choices": PERFORMANCE_MODES, "help": "throughput doubles unset batch sizes"}),
    (("--tensor-parallel-size", "-tp"), "tensor_parallel_size",
     {"type": positive_int, "metavar": "N", "help": "world size factor (CPU defaults)"}),
    (("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size",
     {"type": positive_int, "metavar": "N", "help": "world size factor (CPU defaults)"}),
    (("--speculative-config", "-sc"), "speculative_config",
     {"metavar": "JSON", "help": "method and num_speculative_tokens (budget rules)"}),
    (("--spec-tokens",), "spec_tokens",
     {"type": positive_int, "metavar": "N", "help": "num_speculative_tokens"}),
    (("--spec-method",), "spec_method", {"choices": SPEC_METHODS, "metavar": "METHOD",
                                          "help": "speculative method"}),
    (("--model",), "model", {"help": "the model tag (printed only)"}),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof config`: vLLM's own, the machine, the workload envelope."""
    parser.allow_abbrev = False  # a misspelt vLLM flag must be an error, not a prefix match
    parser.add_argument("serve", nargs="*", metavar="MODEL",
                        help="optional: the model tag of `vllm serve MODEL` (a pasted "
                        "'vllm serve' prefix is dropped)")
    add_config_flags(parser, vocabulary=False)  # the vocabulary below, with config's own
    vllm = parser.add_argument_group("other vLLM flags read by the checker")
    for flags, dest, extra in _ENGINE_FLAGS:
        vllm.add_argument(*flags, dest=dest, default=None, **extra)  # type: ignore[arg-type]
    vllm.add_argument("--enable-lora", dest="enable_lora", default=None,
                      action=argparse.BooleanOptionalAction,
                      help="LoRA on (a speculative-decoding budget rule)")
    draft = parser.add_argument_group("the draft model (batchproof reads no config.json)")
    draft.add_argument("--mtp-layers", dest="mtp_layers", type=positive_int, metavar="N",
                       help="num_nextn_predict_layers of an MTP draft (needed when k > 1)")
    vllm.add_argument("--config", dest="file", metavar="CONFIG.yaml",
                      help="the YAML file `vllm serve --config` reads: its keys are vllm "
                      "serve flags, the command line wins (utils/argparse_utils.py:479-567)")
    vllm.add_argument("--file", dest="file_deprecated", metavar="CONFIG.yaml",
                      help="deprecated spelling of --config CONFIG.yaml")
    machine = parser.add_argument_group("the machine")
    machine.add_argument("--gpu-memory-gib", type=_gib, metavar="G",
                         help="device memory in GiB (picks vLLM's default tier)")
    machine.add_argument("--device", metavar="NAME",
                         help=f"a device name instead: {', '.join(DEVICE_KEYS)}")
    machine.add_argument("--usage", choices=USAGES, default=None,
                         help="serve (`vllm serve`, default), llm (`vllm.LLM`), engine")
    env = parser.add_argument_group("workload envelope and hazard search")
    for flag, dest, text in (
            ("--concurrency", "slots", "requests in a witness (default 3)"),
            ("--depth", "depth", "steps searched (default 5)"),
            ("--max-prompt-len", "max_prompt_len", "longest prompt (default max_model_len-1)"),
            ("--max-tokens", "max_max_tokens", "largest max_tokens (default depth+1)"),
            ("--starvation-steps", "starvation_steps", "K for starvation (default 3)"),
            ("--hol-steps", "hol_steps", "K for head-of-line blocking (default 1)"),
            ("--preemptions", "max_preemptions", "M for repeated preemption (default 1)")):
        env.add_argument(flag, dest=dest, type=positive_int, metavar="N", help=text)
    env.add_argument("--timeout", type=_seconds, metavar="S",
                     help="seconds per hazard before UNKNOWN (default 40)")
    env.add_argument("--hazard", action="append", choices=(*HAZARD_NAMES, CONNECTOR_HAZARD),
                     help="decide only this hazard (repeatable)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON document")
    out.add_argument("--strict", action="store_true", help="exit 1 when a hazard is witnessed")
    out.add_argument("--explain-rules", action="store_true",
                     help="show what each SchedulerConfig rule prevents (minimal traces)")
    # vLLM flags the model does not read (accepted, then listed as ignored),
    # --gpu-memory-utilization, and the flags 0.32.0 no longer has (one-line errors).
    add_serve_vocabulary(parser)


_gib = positive_number("GiB")
_seconds = positive_number("seconds")


class _FileParser(argparse.ArgumentParser):
    """Parses a YAML file's tokens; errors name the file, in one line."""

    path = ""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.path}: {message}; use vLLM flag names as keys")


# The vLLM flags a YAML file may hold (batchproof's own flags may not).
_VLLM_DESTS = frozenset(
    ["config_" + f.field for f in CONFIG_FLAGS] + [d for _, d, _ in _ENGINE_FLAGS]
    + ["enable_lora"] + [IGNORED_PREFIX + n for n in
                         (*IGNORED_BOOL_FLAGS, *IGNORED_VALUE_FLAGS, MEMORY_FLAG)])
# batchproof's keys a YAML file may hold too: the served model's KV cache layout, which
# vLLM reads from the model's config.json (`vllm serve --config` refuses these keys: keep
# them in a copy of the file, or give the layout as vLLM's own hf-overrides key).
_KIND_DESTS = frozenset(KIND_DESTS)
# vLLM flags read only by the KV startup check (not by the scheduler model).
_KV_LAYOUT_FLAGS = ("hf_overrides", "disable_hybrid_kv_cache_manager")


def merged_args(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with the YAML file's values under those given on the command line
    (cli > config > defaults, utils/argparse_utils.py:526-531). `--file` is the old
    spelling of `--config`: it still works, with a deprecation line on stderr."""
    if getattr(args, "file_deprecated", None):
        if args.file:
            raise InputError("give the YAML file once: --config FILE (--file is its "
                             "deprecated spelling)")
        sys.stderr.write("batchproof: --file is deprecated; write --config "
                         f"{args.file_deprecated} (as vllm serve does)\n")
        args = argparse.Namespace(**{**vars(args), "file": args.file_deprecated,
                                     "file_deprecated": None})
    if not args.file:
        return args
    parser = _FileParser(prog="config", add_help=False)
    parser.path = args.file
    add_arguments(parser)
    from_file = parser.parse_args(yaml_tokens(args.file, long_flags(parser)))
    merged = argparse.Namespace(**vars(args))
    for dest, value in vars(from_file).items():
        if value is None or value == [] or (value is False and dest not in _VLLM_DESTS):
            continue
        if dest not in _VLLM_DESTS and dest not in _KIND_DESTS:
            key = dest.replace("config_", "")
            raise InputError(f"{args.file}: {key!r} is a batchproof option, not a vLLM flag; "
                             "give it on the command line")
        if getattr(args, dest, None) is None:
            setattr(merged, dest, value)
    return merged



def parse_request(args: argparse.Namespace) -> Request:
    """Build the request from the (merged) arguments; InputError on bad input."""
    overrides = apply_config_flags(args, Config())
    given = {f.field: getattr(args, "config_" + f.field) for f in CONFIG_FLAGS}
    if given["max_model_len"] is None:
        raise InputError("give --max-model-len N: the model's context length (batchproof "
                         "does not read the model's config.json)")
    ea = engine_args(
        given, max_model_len=overrides.max_model_len,
        performance_mode=args.performance_mode or "balanced", usage=args.usage or "serve",
        world_size=(args.tensor_parallel_size or 1) * (args.pipeline_parallel_size or 1))
    device, spec = device_of(args), spec_decode(args)
    kind = model_kind(args)
    return Request(engine_args=ea, device=device, spec=spec, lora=bool(args.enable_lora),
                   model=_model(args), ignored=_ignored(args, kind), envelope=_envelope(args),
                   deployment=_deployment(args, device, spec, kind),
                   async_flag=args.config_async_scheduling, kind=kind,
                   pipeline_parallel=args.pipeline_parallel_size or 1)


def _deployment(args: argparse.Namespace, device: Device | None,
                spec: SpecDecode | None, kind: ModelKind) -> Deployment:
    """The features `vllm serve` runs with these flags. Without --device the platform is
    taken to be a GPU's, where vLLM serves with the AsyncScheduler. A model whose KV cache
    vLLM splits into several groups (sliding-window or Mamba layers) is one of them with
    prefix caching on: the model runs the groups only with it off."""
    others: list[Feature] = []
    layout = kind.feature()
    # The model runs the kind's groups with prefix caching off (model/vllm/kv_cache.py);
    # beside prefix caching they stay outside it.
    if layout is not None and args.config_enable_prefix_caching is not False \
            and not kind.align_modelled:
        others.append(layout)
    for flag, feature in FEATURE_FLAGS:
        if getattr(args, _IGNORED + flag) is not None and feature not in others:
            others.append(feature)
    interval = getattr(args, _IGNORED + "prefill_schedule_interval")
    if interval is not None and interval != ["1"]:
        others.append(PREFILL_INTERVAL)
    return serve_deployment(
        prefix_caching=args.config_enable_prefix_caching,
        async_scheduling=args.config_async_scheduling, speculative=spec,
        lora=bool(args.enable_lora),
        cpu_platform=device is not None and device.platform == PLATFORM_CPU,
        pipeline_parallel=args.pipeline_parallel_size or 1, others=tuple(others))


def _model(args: argparse.Namespace) -> str:
    return pasted_model(args.serve, args.model, "and flags")


def kv_transfer(args: argparse.Namespace) -> KvTransfer | None:
    """--kv-transfer-config parsed as vLLM parses it (checker/config/connector.py), None
    when not given; InputError on bad JSON or a field vLLM refuses."""
    given = getattr(args, _IGNORED + "kv_transfer_config", None)
    return None if given is None else parse_kv_transfer(" ".join(given))


def _ignored(args: argparse.Namespace, kind: ModelKind) -> tuple[str, ...]:
    read = (*(_KV_LAYOUT_FLAGS if kind.stated else ()), "kv_transfer_config")
    return tuple(sorted(dest[len(_IGNORED):] for dest, value in vars(args).items()
                        if dest.startswith(_IGNORED) and value is not None
                        and dest[len(_IGNORED):] not in read))


def _envelope(args: argparse.Namespace) -> Envelope:
    fields = {name: getattr(args, name) for name in (
        "slots", "depth", "max_prompt_len", "max_max_tokens", "starvation_steps",
        "hol_steps", "max_preemptions") if getattr(args, name) is not None}
    if args.timeout is not None:
        fields["timeout_s"] = args.timeout
    return replace(Envelope(), **fields)



def run(args: argparse.Namespace) -> int:
    """Parse, resolve, validate, decide the hazards, print; return the exit code."""
    args = merged_args(args)
    if args.explain_rules:
        reasons = explain_rules(_envelope(args).timeout_s)
        print_reasons(reasons, args.json)
        return EXIT_INCONCLUSIVE if any(r.verdict == UNKNOWN_LABEL for r in reasons) else 0
    kv = kv_transfer(args)
    req = parse_request(args)
    checked = check_config(req)
    pool_notes = ("gpu_memory_utilization", "kv_cache_memory_bytes")
    notes = tuple(NOT_MODELLED[n] for n in req.ignored if n in NOT_MODELLED
                  and not (checked.pool_known and n in pool_notes))
    if kv is not None:
        notes += ("kv connector (--kv-transfer-config): " + kv.describe(),)
    if checked.error is not None:
        print_invalid(req, checked, notes, args.json)
        return EXIT_INVALID
    assert checked.config is not None
    results = decide_all(checked.config, req.envelope, checked.pool_known,
                         tuple(args.hazard or ()), req.deployment, kv_premise(req.kind))
    if kv is not None and kv.kv_connector is not None and (
            not args.hazard or CONNECTOR_HAZARD in args.hazard):
        results += (decide_connector_hazard(checked.config, kv, req.deployment,
                                            checked.pool_known,
                                            req.envelope.starvation_steps),)
    print_report(req, checked, notes, results, args.json)
    if args.strict and any(r.verdict == WITNESSED for r in results):
        return EXIT_HAZARD
    if any(r.verdict == UNKNOWN_LABEL for r in results):
        return EXIT_INCONCLUSIVE
    return EXIT_OK
