"""Drive any engine's reference scheduler through a workload."""

from __future__ import annotations

from collections.abc import Iterator

from model.engines import get
from model.engines.base import ReferenceScheduler
from model.reference.vllm_v1 import check_eos_steps
from model.state import RequestSpec, StepRecord, Workload


def iter_records(workload: Workload) -> Iterator[tuple[ReferenceScheduler, StepRecord]]:
    """Run `workload.steps` steps on the workload's engine, yielding the scheduler (after
    the step) and the step's record. Before step s the requests with `arrival_step == s`
    are added in arrival order; the eos entries of step s are passed to that step."""
    check_eos_steps(workload)
    scheduler = get(workload.engine).scheduler(workload.config)
    arrivals: dict[int, list[RequestSpec]] = {}
    for spec in workload.arrival_order():
        arrivals.setdefault(spec.arrival_step, []).append(spec)
    eos_by_step: dict[int, set[str]] = {}
    for e in workload.eos:
        eos_by_step.setdefault(e.step, set()).add(e.id)
    for step in range(1, workload.steps + 1):
        for spec in arrivals.get(step, ()):
            scheduler.add_request(spec)
        yield scheduler, scheduler.step(frozenset(eos_by_step.get(step, ())))


def simulate(workload: Workload) -> tuple[StepRecord, ...]:
    """The reference's records of the workload, whatever its engine."""
    return tuple(record for _, record in iter_records(workload))
