"""What every engine's `observe` shares: one StepRecord's step-level observables."""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from model.core.types import FINISH_STOP, RequestSpec, SlotObs, Step, StepRecord


def observed_step(rec: StepRecord, slots: Sequence[SlotObs], rule_cfg: object, released: int,
                  **engine_fields: object) -> Step:
    """The Step of a reference record: the engine's per-request observables `slots`, the
    pool right after scheduling, and after the step's finished requests gave back
    `released` blocks (each engine says which blocks a finished request releases);
    `engine_fields` are the Step fields only some engines fill (step_kind, idle_slots...)."""
    finished = dict(rec.finished)
    return Step(
        step=rec.step, slots=tuple(slots), free_blocks=rec.free_blocks,
        free_blocks_end=rec.free_blocks + released, token_budget_left=rec.token_budget_left,
        num_running=len(rec.running),
        num_running_end=len(rec.running) - sum(1 for r in rec.running if r in finished),
        any_preempted=bool(rec.preempted), cfg=rule_cfg, **engine_fields)


class StepFold:
    """An engine's `observe` one record at a time (`EngineModel.observer`): `advance(record)`
    gives the next record's Step and moves past it, and `copy()` forks the fold, so that a
    search extending a run by one step observes that step alone (checker/methods/explore.py).
    A subclass names in `FORKED` the attributes `advance` changes in place; a fork copies
    those (`copy.copy`) and shares the rest, which `advance` only rebinds."""

    FORKED: ClassVar[tuple[str, ...]] = ()

    def advance(self, rec: StepRecord) -> Step:
        """The observables of the next record's step."""
        raise NotImplementedError

    def copy(self) -> Self:
        """An independent fold at the same point."""
        twin = copy.copy(self)
        for name in self.FORKED:
            setattr(twin, name, copy.copy(getattr(self, name)))
        return twin


@dataclass(slots=True)
class QueuedProgress:
    """What an engine's `observe` carries from record to record for `queued_slots`, per
    request id: computed tokens, outputs and preemptions so far."""

    ncomp: dict[str, int]
    outputs: dict[str, int]
    preemptions: dict[str, int]

    @staticmethod
    def start(ordered: Sequence[RequestSpec]) -> QueuedProgress:
        """Before the first step: nothing computed, output or preempted."""
        return QueuedProgress(ncomp={r.id: 0 for r in ordered},
                              outputs={r.id: 0 for r in ordered},
                              preemptions={r.id: 0 for r in ordered})

    def __copy__(self) -> QueuedProgress:
        """A copy with counters of its own (a fork of the fold that carries it)."""
        return QueuedProgress(dict(self.ncomp), dict(self.outputs), dict(self.preemptions))


def queued_slots(rec: StepRecord, ordered: Sequence[RequestSpec], progress: QueuedProgress,
                 *, running: Collection[str], was_waiting: Collection[str],
                 blocks: Mapping[str, int], also_held: Collection[str] = (),
                 rank_finishes: bool = False) -> list[SlotObs]:
    """The `queued_slot` of every request of one record (slot i = `ordered[i]`), moving
    `progress` past the record: a request is held if it was `running` or `was_waiting`
    when the step began (or is in `also_held`, e.g. V0's swapped queue); its computed
    tokens are the record's, else 0 if it was preempted, else unchanged; `blocks` by id
    (0 when absent); with `rank_finishes` its finish rank is its place in `finished`."""
    after = dict(rec.num_computed_tokens)
    finish_rank = ({rid: k for k, (rid, _) in enumerate(rec.finished)} if rank_finishes
                   else {})
    slots = []
    for i, spec in enumerate(ordered):
        rid = spec.id
        now = after.get(rid, 0 if rid in rec.preempted else progress.ncomp[rid])
        progress.preemptions[rid] += rec.preempted.count(rid)
        obs = queued_slot(
            rec, spec, i, held=rid in running or rid in was_waiting or rid in also_held,
            was_running=rid in running, was_waiting=rid in was_waiting,
            before=progress.ncomp[rid], now=now, outputs=progress.outputs[rid],
            blocks=blocks.get(rid, 0), preemptions=progress.preemptions[rid],
            finish_rank=finish_rank.get(rid, 0))
        slots.append(obs)
        progress.outputs[rid] += int(obs.sampled)
        progress.ncomp[rid] = now
    return slots


def queued_slot(rec: StepRecord, spec: RequestSpec, i: int, *, held: bool,
                was_running: bool, was_waiting: bool, before: int, now: int, outputs: int,
                blocks: int, preemptions: int, finish_rank: int = 0) -> SlotObs:
    """The SlotObs of request `spec` (slot i) in a record of an engine whose reference
    names its queues by id (mistral.rs, vLLM V0): tokens, service rank and events from the
    record, queue and run keys as positions in its `waiting` and `running`; the engine
    supplies what the record does not say (whether it held the request, its computed
    tokens before and after the step, its outputs so far, blocks, preemptions). It samples
    when its chunk reaches the end of its sequence."""
    rid = spec.id
    finished = dict(rec.finished)
    n = dict(rec.scheduled).get(rid, 0)
    ntok = spec.prompt_len + outputs
    sampled = n > 0 and now >= ntok
    return SlotObs(
        held=held, was_running=was_running, was_waiting=was_waiting, scheduled=n,
        serve_rank=next((k for k, (r, _) in enumerate(rec.scheduled) if r == rid), 0),
        admitted=rid in rec.admitted, resumed=rid in rec.resumed,
        preempted=rid in rec.preempted, finished=rid in finished,
        finished_stop=finished.get(rid) == FINISH_STOP, sampled=sampled, num_tokens=ntok,
        num_computed_tokens_before=before, num_computed_tokens=now,
        num_output_tokens=outputs + int(sampled), blocks=blocks, num_preemptions=preemptions,
        running_after=rid in rec.running, waiting_after=rid in rec.waiting,
        queue_key=rec.waiting.index(rid) if rid in rec.waiting else 0,
        run_key=rec.running.index(rid) if rid in rec.running else 0,
        prompt_len=spec.prompt_len, max_tokens=spec.max_tokens, priority=spec.priority,
        arrival_time=i, finish_rank=finish_rank)
