"""Drive any engine's reference scheduler through a workload."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from model.core.checks import check_eos_steps
from model.core.engine import ReferenceScheduler
from model.core.errors import InputError
from model.core.types import EosEvent, StepRecord, Workload
from model.registry import get


def iter_records(workload: Workload) -> Iterator[tuple[ReferenceScheduler, StepRecord]]:
    """Run `workload.steps` steps on the workload's engine, yielding the scheduler (after
    the step) and the step's record. Before step s the requests with `arrival_step == s`
    are added in arrival order; the eos entries of step s are passed to that step, and its
    accepted counts as `accepted` to a scheduler whose `takes_accepted` is true."""
    check_eos_steps(workload)
    scheduler = get(workload.engine).scheduler(workload.config)
    takes_accepted = getattr(scheduler, "takes_accepted", False)
    passed_over = [name for name, given in (("aborts", workload.aborts),
                                            ("drafts", workload.drafts),
                                            ("accepted", workload.accepted and not takes_accepted))
                   if given]
    if passed_over:
        # Never drop an environment choice in silence: a replay without it is another run.
        raise InputError(f"the workload gives {', '.join(passed_over)} and the "
                         f"{workload.engine} reference takes none; drop them")
    arrivals, eos = workload.arrivals_by_step(), workload.eos_ids_by_step()
    accepted = workload.accepted_by_step()
    kv_loads = workload.kv_loads_by_step()
    if workload.kv_hits or workload.kv_loads:
        # A KV connector's environment (vLLM's, model/vllm/connector.py): its answers
        # for the requests, and each step's load reports passed to that step.
        connector = getattr(scheduler, "connector", None)
        if connector is None:
            raise InputError("the workload gives kv_hits or kv_loads and its config runs no "
                             "KV connector; set kv_connector or drop them")
        connector.hits.update({hit.id: hit for hit in workload.kv_hits})
    for step in range(1, workload.steps + 1):
        for spec in arrivals.get(step, ()):
            scheduler.add_request(spec)
        loads = {"kv_loads": kv_loads[step]} if step in kv_loads else {}
        if step in accepted and takes_accepted:
            # speculative decoding's verify outcomes, for a reference that reads them here
            # (SGLang's EAGLE; vLLM's reference is driven by its own iter_steps)
            yield scheduler, scheduler.step(eos.get(step, frozenset()),
                                            accepted=accepted[step])  # type: ignore[call-arg]
        else:
            yield scheduler, scheduler.step(eos.get(step, frozenset()),
                                            **loads)  # type: ignore[call-arg]


def simulate(workload: Workload) -> tuple[StepRecord, ...]:
    """The reference's records of the workload, whatever its engine (through the engine's
    own driver where it has one, which passes every environment choice it models)."""
    own = get(workload.engine).simulate
    if own is not None:
        return own(workload)
    return tuple(record for _, record in iter_records(workload))


def without_unsampled_eos(workload: Workload) -> Workload:
    """The workload less the EOS entries of steps in which their request samples no token
    (the reference rejects those as bad input): random workloads are made valid this way."""
    kept: list[EosEvent] = []
    for e in workload.eos:
        try:
            simulate(replace(workload, eos=(*kept, e)))
        except InputError:
            continue
        kept.append(e)
    return replace(workload, eos=tuple(kept))
