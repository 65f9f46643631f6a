"""Replay a counterexample on the engine's reference scheduler and re-check the property there.

The engine's reference (model/<engine>/reference.py) is independent of its rules. Its StepRecords
are turned into Step observables and the property is evaluated under ConcreteOps. A
counterexample that does not violate the property on the reference is a DivergenceError,
never a finding. A lasso must repeat on the reference: every observable of the step
records but the step number, twice round the loop.

A stored trace is more than its workload: `check_states` and `check_loop` compare the
states a file stores (any format's states: a mapping of variable names to JSON values per
state, as checker/show/itf.py writes them) with the states of the reference's run, exactly
(a JSON `true` is not `1`), and name the first state and variable that differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from checker.methods.verdict import Counterexample
from model import registry as engines
from model.core.engine import EngineModel
from model.core.ops import CONCRETE
from model.core.types import StepRecord
from model.run import simulate
from properties import catalogue
from properties.catalogue import Property


class DivergenceError(RuntimeError):
    """The rules and the reference disagree about a counterexample."""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What the reference did and where the property failed on it."""

    records: tuple[StepRecord, ...]
    violated_at: int  # 1-based step
    loop: int | None = None


def replay(cex: Counterexample, prop: Property | None = None,
           model: EngineModel | None = None) -> ReplayResult:
    """Run the counterexample's workload on the reference; raise DivergenceError unless
    the property fails there at the same step (or, for a lasso, the run cycles). `prop`
    and `model` are the counterexample's property and engine when the caller has them
    (a job does); otherwise, or when they are not the ones it names, they are looked up."""
    if prop is None or prop.name != cex.property:
        prop = catalogue.get(cex.property, **dict(cex.params))
    if prop.kind == "lasso":
        return _replay_lasso(cex)
    # Steps past the violation decide nothing (the first failure is what is checked), and
    # a workload may ask for up to MAX_STEPS of them.
    workload = replace(cex.workload, steps=min(cex.workload.steps, cex.violated_at))
    records = simulate(workload)
    if model is None or model.name != workload.engine:
        model = engines.get(workload.engine)
    steps = model.observe(workload, records)
    failing = [t for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    if not failing:
        raise DivergenceError(
            f"{cex.property}: the reference satisfies the property on all {len(steps)} steps "
            "of the counterexample; the rules and the reference disagree")
    if failing[0] + 1 != cex.violated_at:
        raise DivergenceError(
            f"{cex.property}: the reference fails at step {failing[0] + 1}, the rules at "
            f"step {cex.violated_at}")
    return ReplayResult(records, failing[0] + 1)


def _replay_lasso(cex: Counterexample) -> ReplayResult:
    """Run the loop twice more and check the reference repeats it with a request that
    never finishes."""
    assert cex.loop is not None
    period = cex.violated_at - cex.loop
    if period < 1:
        raise DivergenceError(f"{cex.property}: loop {cex.loop} is not before the last step "
                              f"{cex.violated_at}")
    longer = replace(cex.workload, steps=cex.violated_at + 2 * period)
    records = simulate(longer)
    finished = {rid for rec in records for rid, _ in rec.finished}
    stuck = [r.id for r in cex.workload.requests if r.id not in finished]
    if not stuck:
        raise DivergenceError(f"{cex.property}: every request finishes on the reference")
    for j in range(cex.loop, cex.violated_at + period):
        a, b = records[j], records[j + period]
        for name in _BEHAVIOUR:
            if getattr(a, name) != getattr(b, name):
                raise DivergenceError(
                    f"{cex.property}: the reference does not repeat step {j + 1} at step "
                    f"{j + 1 + period}: {name} {getattr(a, name)!r} then "
                    f"{getattr(b, name)!r}")
    return ReplayResult(records, cex.violated_at, cex.loop)


# Every observable a trace stores repeats round a loop; the step number never does, and
# the engine-specific extras are not stored.
_BEHAVIOUR = tuple(f.name for f in fields(StepRecord) if f.name not in ("step", "extra"))


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def check_states(stored: Sequence[Mapping[str, Any]],
                 expected: Sequence[Mapping[str, Any]]) -> None:
    """The stored states are exactly the expected ones, key by key; DivergenceError
    naming the first differing state index and field, with both values, otherwise."""
    for i, (have, want) in enumerate(zip(stored, expected, strict=False)):
        for key in [*want, *(k for k in have if k not in want)]:
            if key not in have:
                raise DivergenceError(f"state {i}: field {key} is missing; the reference "
                                      f"has {_json(want[key])}")
            if key not in want:
                raise DivergenceError(f"state {i}: field {key} = {_json(have[key])} is not "
                                      "a variable of the trace; the reference has none")
            if _json(have[key]) != _json(want[key]):
                raise DivergenceError(f"state {i}: field {key} is {_json(have[key])}, the "
                                      f"reference has {_json(want[key])}")
    if len(stored) != len(expected):
        raise DivergenceError(f"state {min(len(stored), len(expected))}: the trace stores "
                              f"states 0..{len(stored) - 1}, the reference's run gives "
                              f"0..{len(expected) - 1}")


def check_loop(states: Sequence[Mapping[str, Any]], loop: int, variables: Sequence[str],
               whose: str) -> None:
    """A lasso's last state repeats state `loop` in every variable; DivergenceError naming
    the first variable that differs otherwise (`whose`: "stored" or "re-simulated")."""
    last = len(states) - 1
    for name in variables:
        a, b = states[loop].get(name), states[last].get(name)
        if _json(a) != _json(b):
            raise DivergenceError(
                f"loop {loop}: {whose} state {loop} is not repeated by the last state "
                f"{last}: field {name} is {_json(a)} in state {loop}, {_json(b)} in state "
                f"{last}")
