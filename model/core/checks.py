"""Checks of a workload that every engine's reference makes before it simulates."""

from __future__ import annotations

from model.core.errors import InputError
from model.core.types import Workload


def check_eos_steps(workload: Workload) -> None:
    """An eos entry must name a step that is simulated and not precede the request's
    arrival; whether the request samples in that step is checked while simulating."""
    arrival = {r.id: r.arrival_step for r in workload.requests}
    for index, e in enumerate(workload.eos):
        if e.step > workload.steps:
            raise InputError(
                f"eos[{index}] names step {e.step} for request {e.id!r}, but the workload "
                f"runs {workload.steps} steps; raise 'steps' or drop the entry")
        if e.step < arrival[e.id]:
            raise InputError(
                f"eos[{index}] names step {e.step} for request {e.id!r}, which arrives at "
                f"step {arrival[e.id]}; the request samples no token before it arrives")
