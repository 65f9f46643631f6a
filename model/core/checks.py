"""Checks of a workload that every engine's reference makes before it simulates, and the
size limits of every input (docs/simulation_contract.md, "Limits"): each keeps a run's
time and memory bounded, so that no input makes a command hang."""

from __future__ import annotations

from typing import Any

from model.core.errors import InputError
from model.core.types import Workload

MAX_INT = 2**63 - 1  # every integer of a workload, config or flag fits in 64 bits
MAX_STEPS = 100_000  # steps of one simulation
MAX_REQUESTS = 10_000  # requests (and eos entries) of one workload
# Requests x steps of one run: the reference's records hold every queue of every step, so
# time and memory grow with the product (10^6: a few seconds and a few hundred MB).
MAX_REQUEST_STEPS = 1_000_000
MAX_NESTING = 32  # JSON/YAML nesting; the deepest batchproof document nests 6 levels
MAX_FILE_BYTES = 64 * 2**20  # an input file


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


def check_size(workload: Workload) -> None:
    """The workload is within MAX_REQUEST_STEPS: requests that arrive within the run times
    the steps it runs."""
    arriving = sum(r.arrival_step <= workload.steps for r in workload.requests)
    if arriving * workload.steps > MAX_REQUEST_STEPS:
        raise InputError(
            f"the workload runs {arriving} requests for {workload.steps} steps, "
            f"{arriving * workload.steps} request-steps, more than the {MAX_REQUEST_STEPS} "
            "one run may have (docs/simulation_contract.md, limits); lower 'steps' or split "
            "the requests")


def check_nesting(doc: Any, where: str, fix: str, syntax: str = "JSON") -> None:
    """InputError when lists and objects in `doc` (read from `syntax`, JSON or YAML) nest
    deeper than MAX_NESTING (walked without recursion, so any depth is refused cleanly)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list | tuple | set | frozenset):
            children = value
        else:
            continue
        if depth > MAX_NESTING:
            raise InputError(f"{where} nests {syntax} too deeply (lists and objects more than "
                             f"{MAX_NESTING} levels deep, more than any batchproof input "
                             f"has); {fix}")
        stack.extend((child, depth + 1) for child in children)
