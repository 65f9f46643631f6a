"""Command-line overrides for every Config field, spelled as vLLM spells them.

vLLM's flags are in vllm/engine/arg_utils.py: --max-model-len (966), --block-size (1355),
--num-gpu-blocks-override (1367), and the SchedulerConfig group (1703-1764):
--max-num-batched-tokens, --max-num-scheduled-tokens, --max-num-seqs,
--max-num-active-seqs, --long-prefill-token-threshold,
--[no-]long-prefill-token-threshold-adaptive, --scheduling-policy,
--[no-]enable-chunked-prefill, --[no-]scheduler-reserve-full-isl, --watermark. Boolean
fields use argparse's BooleanOptionalAction, as vLLM does (arg_utils.py:380).

Flags reject garbage (non-numbers, NaN, negatives, zero sizes, integers beyond 64 bits) at
parse time, so the CLI prints one line and exits 2. Rules that relate two fields
(max_num_batched_tokens >= max_num_seqs ...) are vLLM's validation, left to
model/vllm/validation.validate.

Besides the Config fields, every command that takes a config accepts the rest of `vllm
serve`'s vocabulary (`add_serve_vocabulary`): the flags the model does not read
(model/vllm/serve_yaml.py's IGNORED lists, listed as ignored), --gpu-memory-utilization
(validated, then ignored: it sizes the KV pool by memory profiling, not modelled), and the
flags earlier releases had and 0.32.0 does not (REMOVED_FLAGS: one-line errors saying when
they went and what replaces them, as `vllm serve` 0.32.0 refuses them too). The spellings
vLLM's FlexibleArgumentParser accepts besides argparse's own are in checker/cli/main.py
(`--max_num_seqs` for `--max-num-seqs`, utils/argparse_utils.py:289-311).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from checker.config.argtypes import read_number
from checker.config.model_kind import add_model_kind_flags
from model.core.checks import MAX_INT
from model.core.errors import InputError
from model.vllm.config import (
    CONFIG_FIELDS,
    CONNECTOR_FIELDS,
    POLICY_FCFS,
    POLICY_PRIORITY,
    SPEC_FIELDS,
    Config,
)
from model.vllm.engine_args import PERFORMANCE_MODES
from model.vllm.serve_yaml import (
    IGNORED_BOOL_FLAGS,
    IGNORED_VALUE_FLAGS,
    MEMORY_FLAG,
    MEMORY_FLAG_ALIASES,
    REMOVED_FLAGS,
)

_DEST_PREFIX = "config_"


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int_at_least(text, 1)


_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(text: str) -> int:
    """An integer >= 1, also written as vLLM's human-readable form: '8k' = 8000,
    '8K' = 8192, '25.6k' = 25600 (utils/argparse_utils.py:29-73, used for
    --max-num-batched-tokens, --max-num-scheduled-tokens and --max-model-len,
    engine/arg_utils.py:390-403)."""
    value = text.strip()
    if value.lower() == "auto":
        raise argparse.ArgumentTypeError(
            f"{text!r} (fit max_model_len to memory) is not modelled; give a number")
    match = re.fullmatch(r"(\d{1,30}(?:\.\d{1,30})?)([kmgtKMGT])", value)
    if match is None:
        return _int_at_least(text, 1)
    number, suffix = match.groups()
    if suffix in _BINARY:
        if "." in number:
            raise argparse.ArgumentTypeError(
                f"{text!r}: no decimals with a binary suffix; write {number}{suffix.lower()}")
        return _in_range(text, int(number) * _BINARY[suffix], 1)
    # vLLM's own float arithmetic (1.005k is 1004); the digit cap keeps it finite.
    return _in_range(text, int(float(number) * _DECIMAL[suffix]), 1)


def _in_range(text: str, value: int, minimum: int, maximum: int = MAX_INT) -> int:
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be an integer >= {minimum}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be at most {maximum}")
    return value


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def bounded_int(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type: an integer in [minimum, maximum], errors naming both ends."""
    def parse(text: str) -> int:
        return _int_in(text, minimum, maximum)
    parse.__name__ = f"integer in {minimum}..{maximum}"
    return parse


def bounded_seconds(maximum: float) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds in (0, maximum]."""
    def parse(text: str) -> float:
        return read_number(text, float, lambda v: math.isfinite(v) and 0 < v <= maximum,
                           f"{_shown(text)} is not a number of seconds",
                           f"{_shown(text)} must be a number of seconds in (0, {maximum:g}]")
    parse.__name__ = "seconds"
    return parse


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return _int_at_least(text, 0)


def blocks_int(text: str) -> int:
    """A KV pool size: an integer >= 2 (block 0 is vLLM's null block)."""
    return _int_at_least(text, 2)


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    return read_number(text, float, lambda v: v >= 0.0 and v != float("inf"),
                       f"{_shown(text)} is not a number",
                       f"{_shown(text)} must be a finite number >= 0")


def _int_at_least(text: str, minimum: int) -> int:
    return _int_in(text, minimum, MAX_INT)


def _int_in(text: str, minimum: int, maximum: int) -> int:
    # More digits than any 64-bit integer has is refused before int() reads them.
    if len(text.strip().lstrip("+-").lstrip("0")) > 19:
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be at most {maximum}")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not an integer") from None
    return _in_range(text, value, minimum, maximum)


@dataclass(frozen=True, slots=True)
class ConfigFlag:
    """One Config field's command-line flag."""

    field: str
    flags: tuple[str, ...]
    kind: str  # "int", "float", "bool" or "choice"
    help: str
    parse: Callable[[str], int | float] | None = None
    choices: tuple[str, ...] = ()


CONFIG_FLAGS: tuple[ConfigFlag, ...] = (
    ConfigFlag("max_num_batched_tokens", ("--max-num-batched-tokens",), "int",
               "token budget per step (input side)", human_int),
    ConfigFlag("max_num_seqs", ("--max-num-seqs",), "int",
               "max running requests", positive_int),
    ConfigFlag("max_model_len", ("--max-model-len",), "int",
               "max tokens per request (prompt + output)", human_int),
    ConfigFlag("block_size", ("--block-size",), "int",
               "tokens per KV block", positive_int),
    ConfigFlag("num_gpu_blocks", ("--num-gpu-blocks-override", "--num-gpu-blocks"), "int",
               "KV blocks in the pool, including vLLM's null block 0", blocks_int),
    ConfigFlag("enable_chunked_prefill", ("--enable-chunked-prefill",), "bool",
               "split prompts to fit the remaining budget"),
    ConfigFlag("long_prefill_token_threshold", ("--long-prefill-token-threshold",), "int",
               "cap on one request's tokens per step (0 = off)", non_negative_int),
    ConfigFlag("long_prefill_token_threshold_adaptive",
               ("--long-prefill-token-threshold-adaptive",), "bool",
               "floor the threshold at max_num_batched_tokens // requests"),
    ConfigFlag("policy", ("--scheduling-policy",), "choice",
               "waiting order and preemption victim", None, (POLICY_FCFS, POLICY_PRIORITY)),
    ConfigFlag("watermark", ("--watermark",), "float",
               "fraction of KV blocks kept free when admitting", non_negative_float),
    ConfigFlag("scheduler_reserve_full_isl", ("--scheduler-reserve-full-isl",), "bool",
               "admit only if the whole current sequence fits in free blocks"),
    ConfigFlag("max_num_active_seqs", ("--max-num-active-seqs",), "int",
               "admission cap on running (default: max_num_seqs)", positive_int),
    ConfigFlag("max_num_scheduled_tokens", ("--max-num-scheduled-tokens",), "int",
               "tokens the scheduler may issue per step (default: max_num_batched_tokens)",
               human_int),
    ConfigFlag("enable_prefix_caching", ("--enable-prefix-caching",), "bool",
               "reuse cached KV blocks of shared prompt prefixes (vllm serve: on)"),
    ConfigFlag("async_scheduling", ("--async-scheduling",), "bool",
               "the AsyncScheduler: schedule a step before the last output is known "
               "(vllm serve on a GPU: on)"),
)

FLAG_FOR_FIELD: dict[str, str] = {f.field: f.flags[0] for f in CONFIG_FLAGS}
# The speculative-decoding fields come from one JSON flag, --speculative-config, as vLLM
# spells them (engine/arg_utils.py), not one flag per field.
# kv_connector comes from --kv-transfer-config (checker/config/connector.py), as vLLM reads it.
assert set(FLAG_FOR_FIELD) == set(CONFIG_FIELDS) - set(SPEC_FIELDS) - set(CONNECTOR_FIELDS), \
    "every Config field needs a flag"


def add_config_flags(parser: argparse.ArgumentParser, vocabulary: bool = True) -> None:
    """Add one override flag per Config field (vLLM spelling); unset flags leave the
    workload's or default value alone. With `vocabulary`, also the rest of `vllm serve`'s
    flags (`add_serve_vocabulary`, ENGINE_ONLY_FLAGS), hidden from --help."""
    group = parser.add_argument_group(
        "vLLM configuration overrides",
        "override the workload's config; names as in vllm serve")
    for flag in CONFIG_FLAGS:
        dest = _DEST_PREFIX + flag.field
        if flag.kind == "bool":
            group.add_argument(*flag.flags, dest=dest, default=None,
                               action=argparse.BooleanOptionalAction, help=flag.help)
        elif flag.kind == "choice":
            group.add_argument(*flag.flags, dest=dest, default=None,
                               choices=flag.choices, help=flag.help)
        else:
            group.add_argument(*flag.flags, dest=dest, default=None, type=flag.parse,
                               metavar="N" if flag.kind == "int" else "X", help=flag.help)
    add_model_kind_flags(parser)
    if vocabulary:
        add_serve_vocabulary(parser)
        for names, dest, extra in ENGINE_ONLY_FLAGS:
            parser.add_argument(*names, dest=dest, default=None,  # type: ignore[arg-type]
                                help=argparse.SUPPRESS, **extra)


IGNORED_PREFIX = "ignored_"  # the argparse dest of a flag the model does not read


def memory_fraction(text: str) -> float:
    """--gpu-memory-utilization: a number in (0, 1], as CacheConfig requires
    (config/cache.py:102, Field(gt=0, le=1))."""
    return read_number(text, float, lambda v: 0.0 < v <= 1.0,
                       f"{_shown(text)} is not a number; give a fraction of device memory "
                       "in (0, 1], e.g. 0.9",
                       f"{_shown(text)} must be in (0, 1], as vLLM requires "
                       "(config/cache.py:102); e.g. 0.9")


class _Removed(argparse.Action):
    """A flag vLLM 0.32.0 no longer has: one line saying when it went (exit 2)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        name = self.dest[len("removed_"):]
        raise InputError(f"{option_string}: vllm serve 0.32.0 has no such flag and refuses "
                         f"it too; {REMOVED_FLAGS[name]}")


def add_serve_vocabulary(parser: argparse.ArgumentParser) -> None:
    """The rest of `vllm serve`'s flags: those the model does not read (accepted, hidden
    from --help, listed by `ignored_flags`), --gpu-memory-utilization (validated, then
    ignored) and the flags 0.32.0 no longer has (an error naming the release that dropped
    them and the replacement)."""
    for name in IGNORED_BOOL_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), dest=IGNORED_PREFIX + name,
                            default=None, action=argparse.BooleanOptionalAction,
                            help=argparse.SUPPRESS)
    shorts = {"quantization": "-q", "data_parallel_size": "-dp", "compilation_config": "-O"}
    taken = parser._option_string_actions  # a command's own short flag wins (check's -q)
    for name in IGNORED_VALUE_FLAGS:
        short = shorts.get(name)
        flags = ["--" + name.replace("_", "-")] + ([short] if short and short not in taken
                                                    else [])
        parser.add_argument(*flags, dest=IGNORED_PREFIX + name, default=None, nargs="+",
                            help=argparse.SUPPRESS)
    parser.add_argument(*MEMORY_FLAG_ALIASES, dest=IGNORED_PREFIX + MEMORY_FLAG,
                        default=None, type=memory_fraction, metavar="F",
                        help="vLLM's fraction of device memory for the engine, in (0, 1] "
                        "(default 0.92); accepted, validated and ignored: it sizes the KV "
                        "pool by memory profiling, which is not modelled; give "
                        "--num-gpu-blocks-override N (vLLM logs it as '# GPU blocks')")
    for name in REMOVED_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), dest="removed_" + name, nargs="?",
                            action=_Removed, help=argparse.SUPPRESS)


# The flags `batchproof config` reads besides the Config fields (checker/cli/config.py);
# the other commands accept them too, under the same dests, and say what they do with them
# (checker/config/serve_args.py).
ENGINE_ONLY_FLAGS: tuple[tuple[tuple[str, ...], str, dict[str, object]], ...] = (
    (("--performance-mode",), "performance_mode", {"choices": PERFORMANCE_MODES}),
    (("--tensor-parallel-size", "-tp"), "tensor_parallel_size",
     {"type": positive_int, "metavar": "N"}),
    (("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size",
     {"type": positive_int, "metavar": "N"}),
    (("--speculative-config", "-sc"), "speculative_config", {"metavar": "JSON"}),
    (("--spec-tokens",), "spec_tokens", {"type": positive_int, "metavar": "N"}),
    (("--spec-method",), "spec_method", {"metavar": "METHOD"}),
    (("--model",), "model", {}),
    (("--enable-lora",), "enable_lora", {"action": argparse.BooleanOptionalAction}),
)


def ignored_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The vLLM flags given that the model does not read, by name (sorted)."""
    return tuple(sorted(dest[len(IGNORED_PREFIX):] for dest, value in vars(args).items()
                        if dest.startswith(IGNORED_PREFIX) and value is not None))


def apply_config_flags(args: argparse.Namespace, cfg: Config) -> Config:
    """`cfg` with every flag that was given on the command line applied."""
    overrides = {}
    for flag in CONFIG_FLAGS:
        value = getattr(args, _DEST_PREFIX + flag.field, None)
        if value is not None:
            overrides[flag.field] = value
    return replace(cfg, **overrides)
