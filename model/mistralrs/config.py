"""mistral.rs paged-attention scheduler configuration (commit 9e922623, after v0.9.2).

Defaults are upstream's: 4096 tokens per step (`mistralrs-core/src/scheduler/mod.rs:21`),
8 decode steps before a prefill is due (mod.rs:22), 32 sequences (CLI `--max-seqs`,
`mistralrs-cli/src/args/mod.rs:573-576`), block size 32 (`paged_attention/mod.rs:44`), and
the 64-failed-attempts starvation escape (`paged_attention/scheduler.rs:48`). The number of
KV blocks comes from memory profiling upstream; 4096 is our default.

Scope (model/mistralrs/reference.py): a text model on CUDA with packed prefill, so prompt
chunks are scheduler-visible (engine/mod.rs:385) and uniform query length is not required
(pipeline/normal.rs:266-273); prefix caching off (`no_prefix_cache`, engine/mod.rs:418-420);
no speculative decoding, media, X-LoRA or hybrid cache.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from model.core.checks import MAX_INT
from model.core.errors import ConfigError, InputError, shown

ENGINE_MISTRALRS = "mistralrs"
MISTRALRS_COMMIT = "9e922623f24b"


@dataclass(frozen=True, slots=True)
class MistralrsConfig:
    """The knobs the paged-attention scheduler reads (names as upstream spells them).

    `waiting_timeout` is upstream's constant WAITING_TIMEOUT (scheduler.rs:48); it is a
    field so that bounded checks can reach the starvation escape in a few steps; it must be
    at least 1 (with 0, two sequences that cannot fit together would preempt each other
    forever inside one schedule() call; upstream's 64 never does).
    `num_gpu_blocks` includes the null block (kv_cache_manager.rs:107-110).
    """

    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 32
    max_decode_steps_before_prefill: int = 8
    block_size: int = 32
    num_gpu_blocks: int = 4096
    waiting_timeout: int = 64

    @property
    def token_budget(self) -> int:
        """Tokens per step (scheduler/mod.rs:21)."""
        return self.max_num_batched_tokens

    @property
    def usable_blocks(self) -> int:
        """Allocatable blocks: the pool less the null block (kv_cache_manager.rs:107-110)."""
        return self.num_gpu_blocks - 1

    @property
    def token_capacity(self) -> int:
        """The up-front size check's capacity, num_gpu_blocks * block_size
        (scheduler.rs:605-619); one block more than can ever be allocated."""
        return self.num_gpu_blocks * self.block_size

    def to_dict(self) -> dict[str, object]:
        """The config as workload JSON spells it."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MistralrsConfig))
_MINIMUM = {"max_num_batched_tokens": 1, "max_num_seqs": 1, "max_decode_steps_before_prefill": 1,
            "block_size": 1, "num_gpu_blocks": 2, "waiting_timeout": 1}


def parse_config(raw: Any) -> MistralrsConfig:
    """Overlay a JSON object of mistral.rs field names on the defaults."""
    if not isinstance(raw, dict):
        raise InputError("'config' must be a JSON object of mistral.rs field names, got "
                         f"{shown(raw)}")
    unknown = sorted(set(raw) - set(FIELDS), key=str)
    if unknown:
        raise InputError(f"unknown mistralrs config field {shown(unknown[0])}; known fields: "
                         f"{', '.join(FIELDS)}")
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"mistralrs config {name} must be an integer, got {shown(value)}")
        if value < _MINIMUM[name]:
            raise InputError(f"mistralrs config {name} must be >= {_MINIMUM[name]}, got "
                             f"{value}; use a larger value")
        if value > MAX_INT:
            raise InputError(f"mistralrs config {name} must be at most {MAX_INT} (64 bits), "
                             f"got {shown(value)}")
    return replace(MistralrsConfig(), **raw)


def rejection(cfg: MistralrsConfig) -> ConfigError | None:
    """The scheduler's own asserts (scheduler.rs:105-107): every knob positive. parse_config
    already refuses non-positive values, so a parsed config is never rejected."""
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_decode_steps_before_prefill"):
        if getattr(cfg, name) < 1:
            return ConfigError("positive_fields", f"{name} must be > 0 (scheduler.rs:105-107)")
    return None
