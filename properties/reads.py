"""Which observables a property reads, and how many steps back. A property is a function
of the Step observables (properties/catalogue.py). Running it once on recording stand-ins
tells which fields it reads at which lag (0: the current step, 1: the step before, ...).
Properties are branch-free over values, so one run sees every read; the window a property
declares is not trusted, since a `step` property may also read `steps[t - 1]`
(properties/mistralrs.py, properties/sglang.py).

The array explorer sizes the history its states carry by it (checker/methods/array/
history.py); the reference explorer asks it whether a property reads a request's
preemption count (checker/methods/explore.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from model.core.ops import CONCRETE
from model.core.types import SlotObs, Step
from properties.catalogue import Property

SLOT_FIELDS = tuple(f.name for f in fields(SlotObs))
STEP_FIELDS = tuple(f.name for f in fields(Step) if f.name not in ("slots", "cfg"))


@dataclass(frozen=True, slots=True)
class Reads:
    """Per lag, the SlotObs fields and the Step fields a property reads."""

    slot: tuple[frozenset[str], ...]  # index = lag
    step: tuple[frozenset[str], ...]

    @property
    def lags(self) -> int:
        """The largest lag read (0: only the current step)."""
        return len(self.slot) - 1

    def past_slot_fields(self) -> tuple[str, ...]:
        """SlotObs fields read at some lag >= 1, in SlotObs order."""
        wanted = set().union(*self.slot[1:]) if len(self.slot) > 1 else set()
        return tuple(f for f in SLOT_FIELDS if f in wanted)

    def past_step_fields(self) -> tuple[str, ...]:
        """Step fields read at some lag >= 1, in Step order."""
        wanted = set().union(*self.step[1:]) if len(self.step) > 1 else set()
        return tuple(f for f in STEP_FIELDS if f in wanted)

    def all_slot_fields(self) -> frozenset[str]:
        """SlotObs fields read at any lag."""
        return frozenset().union(*self.slot)

    def all_step_fields(self) -> frozenset[str]:
        """Step fields read at any lag."""
        return frozenset().union(*self.step)


class _Log:
    def __init__(self) -> None:
        self.seen: set[tuple[int, str, str]] = set()


class _SlotProbe:
    def __init__(self, log: _Log, lag: int, index: int) -> None:
        self._log, self._lag, self._index = log, lag, index

    def __getattr__(self, name: str) -> Any:
        if name not in SLOT_FIELDS:
            raise AttributeError(name)
        self._log.seen.add((self._lag, "slot", name))
        return self._index if name == "arrival_time" else 0


class _StepProbe:
    def __init__(self, log: _Log, lag: int, cfg: Any, n: int, index: int) -> None:
        self._log, self._lag, self._cfg = log, lag, cfg
        self.slots = tuple(_SlotProbe(log, lag, i) for i in range(n))
        self._index = index

    def __getattr__(self, name: str) -> Any:
        if name == "cfg":
            return self._cfg
        if name not in STEP_FIELDS:
            raise AttributeError(name)
        self._log.seen.add((self._lag, "step", name))
        return self._index + 1 if name == "step" else 0


def reads(prop: Property, rule_cfg: Any, slots: int) -> Reads:
    """The fields `prop` reads at each lag, found by evaluating it once at the last of
    window + 2 recording steps."""
    log = _Log()
    length = max(prop.window, 1) + 2
    probes: Sequence[Any] = [_StepProbe(log, length - 1 - u, rule_cfg, slots, u)
                             for u in range(length)]
    prop.holds(CONCRETE, probes, length - 1)
    lags = max((lag for lag, _, _ in log.seen), default=0)
    if lags >= length - 1:
        raise ValueError(f"property {prop.name} reads {lags} steps back, beyond its window "
                         f"{prop.window}")
    slot = tuple(frozenset(f for lag, kind, f in log.seen if lag == u and kind == "slot")
                 for u in range(lags + 1))
    step = tuple(frozenset(f for lag, kind, f in log.seen if lag == u and kind == "step")
                 for u in range(lags + 1))
    return Reads(slot, step)


def merged(all_reads: Sequence[Reads]) -> Reads:
    """What several properties read together."""
    lags = max(r.lags for r in all_reads)
    slot = tuple(frozenset().union(*(r.slot[u] for r in all_reads if u <= r.lags))
                 for u in range(lags + 1))
    step = tuple(frozenset().union(*(r.step[u] for r in all_reads if u <= r.lags))
                 for u in range(lags + 1))
    return Reads(slot, step)
