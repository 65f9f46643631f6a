"""The two pre-continuous baselines of seed 000's Table 1 as settings of ONE batching system.

Static batching and request-level dynamic batching differ only in
- when a batch is launched: `launch = "full"` (the queue holds `max_batch_size` requests, or
  the oldest queued request has waited `flush_timeout` steps: a flush) versus
  `launch = "idle"` (whatever is queued, as soon as no batch runs);
- whether finished rows still cost compute: `pad_finished` (static: the batch is a padded
  tensor, every row is computed until the batch ends) versus not (dynamic: finished rows
  are dropped from compute but their slots are not refilled).
(`/work/shared/reference/sglang_mistralrs_rules.md` §3, seed 000 Table 1.) There is no
upstream source: these are the concept definitions, and the defaults below are ours.

KV: each batch member reserves blocks for its worst case, prompt + max_tokens, at launch
(§3.1, "reserve worst case up front"), released only when the whole batch ends.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from model.core.checks import check_config_int
from model.core.errors import ConfigError, InputError, refuse_unknown, shown

ENGINE_STATIC = "static"
ENGINE_DYNAMIC = "dynamic"
BASELINES_VERSION = "concept (seed 000 Table 1)"
LAUNCH_FULL = "full"
LAUNCH_IDLE = "idle"


@dataclass(frozen=True, slots=True)
class BaselineConfig:
    """One batching baseline. `flush_timeout` 0 means never flush (launch only when full)."""

    launch: str = LAUNCH_FULL
    pad_finished: bool = True
    flush_timeout: int = 4
    max_batch_size: int = 32
    block_size: int = 16
    num_kv_blocks: int = 4096

    def to_dict(self) -> dict[str, object]:
        """The config as workload JSON spells it."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def token_capacity(self) -> int:
        """KV tokens of the pool."""
        return self.num_kv_blocks * self.block_size

    @property
    def token_budget(self) -> int:
        """No per-step budget: one forward prefills the whole batch. The most it can take,
        max_batch_size rows of the pool's length, stands in where a budget is shown."""
        return self.max_batch_size * self.token_capacity


STATIC_DEFAULTS = BaselineConfig()
DYNAMIC_DEFAULTS = BaselineConfig(launch=LAUNCH_IDLE, pad_finished=False, flush_timeout=0)
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(BaselineConfig))
_MINIMUM = {"flush_timeout": 0, "max_batch_size": 1, "block_size": 1, "num_kv_blocks": 1}


def parse_config(raw: Any, base: BaselineConfig) -> BaselineConfig:
    """Overlay a JSON object of baseline field names on `base` (the engine's defaults)."""
    if not isinstance(raw, dict):
        raise InputError(f"'config' must be a JSON object of baseline field names, got "
                         f"{shown(raw)}")
    refuse_unknown(raw, FIELDS, "unknown baseline config field",
                   f"known fields: {', '.join(FIELDS)}")
    for name, value in raw.items():
        if name == "launch":
            if value not in (LAUNCH_FULL, LAUNCH_IDLE):
                raise InputError(f"launch must be {LAUNCH_FULL!r} or {LAUNCH_IDLE!r}, got "
                                 f"{shown(value)}")
        elif name == "pad_finished":
            if not isinstance(value, bool):
                raise InputError(f"pad_finished must be true or false, got {shown(value)}")
        else:
            check_config_int("baseline", name, value, _MINIMUM[name])
    return replace(base, **raw)


def rejection(cfg: BaselineConfig) -> ConfigError | None:
    """The baselines are concepts with no validation of their own beyond parse_config's
    field checks, so no parsed configuration is rejected. (A `launch = "full"` batch with no
    flush that never fills is a finding about static batching, not a config error.)"""
    del cfg
    return None
