"""Client aborts added to a conformance workload: the real engine's other way for a request
to end (a client that disconnects, a stop string the front end matched), so the
reference's `abort` is tested against `Scheduler.finish_requests` as every other rule is.

`with_aborts(workload, seed)` keeps the workload and adds, for about a third of its
requests, one abort at a step between its arrival and the last step, half of them before
the step's `schedule()` and half after it (docs/simulation_contract.md, `aborts`). Some
land on a request that has already finished, which must do nothing on both sides.
"""

from __future__ import annotations

import random
from dataclasses import replace

from model.core.types import AbortEvent, Workload

ABORT_SHARE = 3  # about one request in this many is aborted


def with_aborts(workload: Workload, seed: int) -> Workload:
    """`workload` with random client aborts (see the module doc), the same for one seed."""
    rng = random.Random(f"aborts-{seed}")
    aborts = []
    for spec in workload.requests:
        if spec.arrival_step > workload.steps or rng.randrange(ABORT_SHARE):
            continue
        step = rng.randint(spec.arrival_step, workload.steps)
        aborts.append(AbortEvent(id=spec.id, step=step, after_schedule=rng.random() < 0.5))
    return replace(workload, aborts=tuple(aborts))
