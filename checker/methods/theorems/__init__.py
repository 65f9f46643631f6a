"""Closed-form theorems per engine, proved for all sizes (one module per engine room,
named by the engine's `folder`: vllm_v1.py, sglang.py). Each module defines THEOREMS:
property name -> Theorem, a proof attempt and the premises it assumes of the
configuration. A theorem decides a check only on a family that meets every premise; on
any other the job says which premise fails and goes on to the other methods.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import z3

from checker.methods import proof_cache
from checker.methods.symbolic import Family
from model.core.engine import EngineModel
from model.core.modules import optional_module
from properties.catalogue import Property

Subject = TypeVar("Subject")


@dataclass(frozen=True, slots=True)
class TheoremResult:
    """Proved, or not (with the failing obligation)."""

    proved: bool
    seconds: float
    detail: str


def valid(claim: z3.BoolRef, timeout_s: float) -> z3.CheckSatResult:
    """unsat when `claim` is valid (its negation has no model), within `timeout_s`; z3's
    seed is fixed, so the answer does not vary from run to run."""
    s = z3.Solver()
    s.set(random_seed=0, timeout=max(1, int(timeout_s * 1000)))
    s.add(z3.Not(claim))
    return s.check()


def discharge(obligations: Sequence[tuple[str, Callable[[], z3.BoolRef]]], timeout_s: float,
              start: float, proved: str) -> TheoremResult:
    """Each obligation (name, claim) shown `valid` in turn, within what is left of
    `timeout_s` since `start` (a time.monotonic() reading): the first that is not fails the
    theorem, named with z3's answer (sat, unknown); all valid: proved, saying `proved`."""
    for name, claim in obligations:
        result = valid(claim(), timeout_s - (time.monotonic() - start))
        if result != z3.unsat:
            return TheoremResult(False, time.monotonic() - start, f"{name}: {result}")
    return TheoremResult(True, time.monotonic() - start, proved)


def stored(name: str, prove: Callable[[], TheoremResult]) -> TheoremResult:
    """`prove()`'s result, kept on disk once proved (checker/methods/proof_cache.py, under
    `name`, a key made by proof_cache.key over what the proof reads), so a later call
    reads it back with 0 seconds; a failure is never kept."""
    kept = proof_cache.load(name)
    if kept is not None and kept.get("proved") is True:
        return TheoremResult(True, 0.0, str(kept["detail"]))
    result = prove()
    if result.proved:
        proof_cache.store(name, {"proved": True, "detail": result.detail})
    return result


@dataclass(frozen=True, slots=True)
class Premise(Generic[Subject]):
    """A condition an argument assumes of what it speaks of: a theorem's premises are of
    every configuration of the family (`Premise[Family]`), a hazard's closed-form
    argument's of one configuration (checker/config/hazards.py)."""

    name: str
    text: str
    holds: Callable[[Subject], bool]


def definition(prop: Property) -> str:
    """A fingerprint of what `prop` states: its kind, parameters and the source of its
    evaluation function (under the catalogue's after-crash wrapper)."""
    holds = inspect.unwrap(prop.holds)
    try:
        source = inspect.getsource(holds)
    except (OSError, TypeError):  # defined where no source is kept
        source = repr(getattr(holds, "__code__", holds))
    text = f"{prop.kind}|{prop.window}|{prop.params}|{source}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Theorem:
    """A proof attempt (taking a time limit in seconds), its premises and `states`, the
    `definition` of the property it was written against: a theorem's claim is its own
    formula, so it decides a check only while the property says what it said then (an
    edited definition needs its theorem re-read, then the new fingerprint pinned)."""

    prove: Callable[[float], TheoremResult]
    premises: tuple[Premise[Family], ...] = ()
    states: str = ""

    def speaks_of(self, prop: Property) -> bool:
        """Whether `prop` is the definition this theorem proves."""
        return definition(prop) == self.states

    def broken(self, family: Family) -> tuple[Premise[Family], ...]:
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
    found = optional_module(module)
    return {} if found is None else found.THEOREMS
