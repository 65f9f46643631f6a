"""Check a live trace: what the real server did against the catalogue and the reference.

Three questions, each answered on the trace as recorded:
- **properties**: every property of the engine's catalogue that its manifest lists, on the
  real StepRecords (checker/methods/trace_check.py), with the manifest's expectation for
  the trace's config;
- **agreement**: the reference scheduler replayed on the same arrivals, aborts, stop
  tokens and drafts gives the same StepRecord at every step (checker/conformance/
  compare.py, field by field as the conformance harness compares);
- **accounting**: every request the engine took ended in the trace (stop, length, abort) or
  is still held at its end; none is lost.

On a finding, `minimal_workload` shrinks the trace's workload to a small one that still
shows it: for a property violation, on the reference (the reference run must violate the
same property); for a disagreement, with vLLM's real Scheduler in this process (the code
the server ran, the same overlay on sys.path) against the reference.
"""

from __future__ import annotations

import os
import random
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from checker.conformance.compare import Divergence, first_divergence, reference_records
from checker.conformance.shrink import shrink, tidy
from checker.live.trace import LiveTrace
from checker.methods.trace_check import DEPARTS, TraceVerdict, check_trace, properties_for
from model.core.types import StepRecord, Workload

MINIMAL_CALLS = 1500  # predicate runs the greedy shrink may spend in one round


@dataclass(frozen=True, slots=True)
class LiveReport:
    """The three answers for one live trace (see the module doc)."""

    trace: LiveTrace
    verdicts: tuple[TraceVerdict, ...]
    divergence: Divergence | None
    reference_error: str = ""

    @property
    def departs(self) -> tuple[TraceVerdict, ...]:
        """Violations of properties the manifest expects to hold on this config."""
        return tuple(v for v in self.verdicts if v.status == DEPARTS)

    @property
    def steps_agreeing(self) -> int:
        """Steps before the first disagreement (all of them without one)."""
        if self.divergence is None and not self.reference_error:
            return len(self.trace.records)
        return (self.divergence.step - 1) if self.divergence is not None else 0

    @property
    def lost(self) -> tuple[str, ...]:
        """Requests the engine took that neither ended nor are held at the end: always
        empty for a trace `load_live` accepted, kept as the accounting's answer."""
        return tuple(rid for rid, end in self.trace.ends.items()
                     if end not in ("stop", "length", "abort", "held"))

    @property
    def clean(self) -> bool:
        """No departing violation, every step agrees, nothing lost."""
        return not self.departs and self.divergence is None and not self.reference_error \
            and not self.lost


def check_live(trace: LiveTrace, names: Sequence[str] = ()) -> LiveReport:
    """Properties, agreement and accounting of `trace` (see the module doc)."""
    w = trace.workload
    verdicts = tuple(check_trace(w.engine, w, trace.records, properties_for(w.engine, names)))
    reference: list[StepRecord] = []
    error = ""
    try:
        for record in reference_records(w):
            reference.append(record)
    except Exception as exc:  # noqa: BLE001 - a refusal of the replay is a finding
        error = f"the reference refused the replay at step {len(reference) + 1}: " \
                f"{type(exc).__name__}: {exc}"
    divergence = first_divergence(w, trace.records[: len(reference)], tuple(reference)) \
        if reference or not error else None
    return LiveReport(trace=trace, verdicts=verdicts, divergence=divergence,
                      reference_error=error if divergence is None else "")


def violates_on_reference(prop_name: str) -> Callable[[Workload], bool]:
    """The predicate "the reference's run of the workload violates `prop_name`"."""
    from model.vllm.reference import simulate

    (prop,) = properties_for("vllm-v1", (prop_name,))

    def fails(w: Workload) -> bool:
        try:
            records = simulate(w)
        except Exception:  # noqa: BLE001 - a workload the reference refuses shows nothing
            return False
        verdicts = check_trace(w.engine, w, records, (prop,))
        return any(v.verdict == "VIOLATED" for v in verdicts)

    return fails


def real_disagrees() -> Callable[[Workload], bool]:
    """The predicate "vLLM's real Scheduler in this process and the reference disagree
    on the workload" (needs vLLM importable: the code the server ran)."""
    from checker.conformance.compare import compare

    def fails(w: Workload) -> bool:
        try:
            return compare(w) is not None
        except Exception as exc:  # noqa: BLE001 - a workload the driver refuses shows nothing
            if raised_in_vllm(exc) and _reference_runs(w):
                # The real Scheduler's own code raised (an assertion, as a live engine
                # dies at) where the reference runs on: they disagree.
                return True
            fails.refused = f"{type(exc).__name__}: {exc}"  # type: ignore[attr-defined]
            return False

    fails.refused = ""  # type: ignore[attr-defined]
    return fails


def raised_in_vllm(exc: BaseException) -> bool:
    """The exception's innermost frame is vLLM's own code, not batchproof's driver."""
    import vllm

    home = os.path.dirname(vllm.__file__) + os.sep
    frames = list(traceback.walk_tb(exc.__traceback__))
    return bool(frames) and frames[-1][0].f_code.co_filename.startswith(home)


def _reference_runs(w: Workload) -> bool:
    try:
        for _ in reference_records(w):
            pass
    except Exception:  # noqa: BLE001 - the reference refusing it too shows no disagreement
        return False
    return True


def minimal_workload(workload: Workload, fails: Callable[[Workload], bool], at_step: int,
                     seed: int = 0, rounds: int = 4) -> Workload:
    """A small workload on which `fails` still holds, from the trace's: cut to the
    finding's step, then, round after round until nothing changes: chunks of requests
    dropped (halves, quarters, ... as delta debugging does), the run moved earlier to
    start at its first arrival, and the conformance shrinker's greedy moves
    (checker/conformance/shrink.py; MINIMAL_CALLS a round). Events naming a dropped
    request go with it. `workload` must fail on entry."""
    current = cut_at(workload, at_step)
    if not fails(current):
        current = workload
    rng = random.Random(seed)
    for _ in range(rounds):
        before = current
        current = _drop_chunks(current, fails, rng)
        moved = earlier(current, min(r.arrival_step for r in current.requests) - 1)
        if moved != current and fails(moved):
            current = moved
        current = tidy(shrink(current, lambda w: fails(tidy(w)), MINIMAL_CALLS))
        if current == before:
            break
    return current


def _drop_chunks(w: Workload, fails: Callable[[Workload], bool], rng: random.Random
                 ) -> Workload:
    """Delta debugging over the requests: drop chunks while `fails` holds, halving the
    chunk size when no chunk can go."""
    chunk = max(len(w.requests) // 2, 1)
    while chunk >= 1 and len(w.requests) > 1:
        ids = [r.id for r in w.requests]
        rng.shuffle(ids)
        dropped = False
        for start in range(0, len(ids), chunk):
            candidate = without(w, set(ids[start:start + chunk]))
            if candidate.requests and fails(candidate):
                w, dropped = candidate, True
        if not dropped:
            chunk //= 2
    for events in ("aborts", "eos"):
        for e in getattr(w, events):
            candidate = replace(w, **{events: tuple(
                x for x in getattr(w, events) if x != e)})
            if fails(candidate):
                w = candidate
    return w


def earlier(w: Workload, by: int) -> Workload:
    """`w` with every arrival and event `by` steps earlier and `by` fewer steps."""
    if by <= 0:
        return w

    def moved(events: tuple) -> tuple:
        return tuple(replace(e, step=e.step - by) for e in events if e.step > by)

    return tidy(replace(
        w, steps=max(w.steps - by, 1),
        requests=tuple(replace(r, arrival_step=r.arrival_step - by) for r in w.requests),
        eos=moved(w.eos), accepted=moved(w.accepted), drafts=moved(w.drafts),
        aborts=moved(w.aborts)))


def cut_at(w: Workload, step: int) -> Workload:
    """`w` run to `step` only, without the requests that arrive after it."""
    w = replace(w, steps=max(step, 1))
    return without(w, {r.id for r in w.requests if r.arrival_step > w.steps})


def without(w: Workload, ids: set[str]) -> Workload:
    """`w` without the requests `ids` and every event that names one of them."""
    return tidy(replace(w, requests=tuple(r for r in w.requests if r.id not in ids)))
