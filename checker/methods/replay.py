"""Replay a counterexample on the engine's reference scheduler and re-check the property there.

The engine's reference (model/<engine>/reference.py) is independent of its rules. Its StepRecords
are turned into Step observables and the property is evaluated under ConcreteOps. A
counterexample that does not violate the property on the reference is a DivergenceError,
never a finding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from checker.methods.verdict import Counterexample
from model import registry as engines
from model.core.ops import CONCRETE
from model.core.types import StepRecord
from model.run import simulate
from properties import catalogue


class DivergenceError(RuntimeError):
    """The rules and the reference disagree about a counterexample."""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What the reference did and where the property failed on it."""

    records: tuple[StepRecord, ...]
    violated_at: int  # 1-based step
    loop: int | None = None


def replay(cex: Counterexample) -> ReplayResult:
    """Run the counterexample's workload on the reference; raise DivergenceError unless
    the property fails there at the same step (or, for a lasso, the run cycles)."""
    prop = catalogue.get(cex.property, **dict(cex.params))
    if prop.kind == "lasso":
        return _replay_lasso(cex)
    records = simulate(cex.workload)
    steps = engines.get(cex.workload.engine).observe(cex.workload, records)
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
    longer = replace(cex.workload, steps=cex.violated_at + 2 * period)
    records = simulate(longer)
    finished = {rid for rec in records for rid, _ in rec.finished}
    stuck = [r.id for r in cex.workload.requests if r.id not in finished]
    if not stuck:
        raise DivergenceError(f"{cex.property}: every request finishes on the reference")
    for j in range(cex.loop, cex.violated_at + period):
        a, b = records[j], records[j + period]
        if _behaviour(a) != _behaviour(b):
            raise DivergenceError(
                f"{cex.property}: the reference does not repeat step {j + 1} at step "
                f"{j + 1 + period}")
    return ReplayResult(records, cex.violated_at, cex.loop)


def _behaviour(rec: StepRecord) -> tuple[object, ...]:
    return (rec.scheduled, rec.admitted, rec.resumed, rec.preempted, rec.finished,
            rec.free_blocks, rec.num_computed_tokens, rec.running, rec.waiting)
