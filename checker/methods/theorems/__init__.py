"""Closed-form theorems per engine, proved for all sizes (one module per engine room,
named by the engine's `folder`: vllm_v1.py, sglang.py). Each module defines THEOREMS:
property name -> Theorem, a proof attempt and the premises it assumes of the
configuration. A theorem decides a check only on a family that meets every premise; on
any other the job says which premise fails and goes on to the other methods.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from checker.methods.symbolic import Family
from model.core.engine import EngineModel


@dataclass(frozen=True, slots=True)
class TheoremResult:
    """Proved, or not (with the failing obligation)."""

    proved: bool
    seconds: float
    detail: str


@dataclass(frozen=True, slots=True)
class Premise:
    """A condition the proof assumes of every configuration of the family."""

    name: str
    text: str
    holds: Callable[[Family], bool]


@dataclass(frozen=True, slots=True)
class Theorem:
    """A proof attempt (taking a time limit in seconds) and its premises."""

    prove: Callable[[float], TheoremResult]
    premises: tuple[Premise, ...] = ()

    def broken(self, family: Family) -> tuple[Premise, ...]:
        """The premises the family does not meet (empty: the theorem applies)."""
        return tuple(p for p in self.premises if not p.holds(family))


def field_range(family: Family, name: str) -> tuple[int, int]:
    """The least and greatest value of a config field over the family."""
    for field, lo, hi in family.ranges:
        if field == name:
            return lo, hi
    value = getattr(family.base, name)
    return value, value


def for_engine(engine: EngineModel) -> Mapping[str, Theorem]:
    """The engine's theorems (none when its room has no theorem module)."""
    module = f"{__name__}.{engine.folder}"
    try:
        return importlib.import_module(module).THEOREMS
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return {}
