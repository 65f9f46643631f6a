"""Between a workload (request ids) and the rules' fixed slots (indices), both ways.

Slot i holds the i-th request in arrival order, so a slot's index is its `arrival_time`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from model import engines
from model.ops import CONCRETE
from model.state import (
    ENGINE_VLLM_V1,
    SlotSpec,
    Step,
    StepRecord,
    Workload,
)
from model.state import FINISH_LENGTH as LENGTH
from model.state import FINISH_STOP as STOP


@dataclass(frozen=True, slots=True)
class SlotWorkload:
    """A workload laid out on slots: specs, the EOS matrix eos[t][i], and the ids."""

    cfg: Any  # the engine's rule config
    specs: tuple[SlotSpec, ...]
    eos: tuple[tuple[bool, ...], ...]
    ids: tuple[str, ...]
    engine: str = ENGINE_VLLM_V1


def to_slots(workload: Workload, num_slots: int | None = None) -> SlotWorkload:
    """Lay a workload on slots in arrival order, under its engine's rule config; extra slots
    stay unused."""
    ordered = workload.arrival_order()
    n = len(ordered) if num_slots is None else num_slots
    if n < len(ordered):
        raise ValueError(f"{len(ordered)} requests do not fit in {n} slots")
    specs = [SlotSpec(r.prompt_len, r.max_tokens, r.arrival_step, r.priority, r.cached_prefix_len)
             for r in ordered]
    specs += [SlotSpec(1, 1, 0, 0)] * (n - len(ordered))
    ids = tuple(r.id for r in ordered)
    eos_steps = workload.eos_steps()
    eos = tuple(
        tuple(i < len(ids) and t in eos_steps.get(ids[i], ()) for i in range(n))
        for t in range(1, workload.steps + 1)
    )
    cfg = engines.get(workload.engine).rule_config(workload.config)
    return SlotWorkload(cfg, tuple(specs), eos, ids, workload.engine)


def run_rules(sw: SlotWorkload) -> tuple[Step, ...]:
    """Run the engine's rules under ConcreteOps: the rules as a simulator."""
    engine = engines.get(sw.engine)
    state = engine.initial_state(len(sw.specs), sw.cfg)
    out = []
    for eos in sw.eos:
        state, observed = engine.step(CONCRETE, sw.cfg, sw.specs, state, eos)
        out.append(observed)
    return tuple(out)


def to_record(observed: Step, ids: Sequence[str]) -> StepRecord:
    """The contract's StepRecord of a concrete rules Step (slots -> request ids)."""
    slots = list(enumerate(observed.slots))[: len(ids)]
    served = sorted((o.serve_rank, i) for i, o in slots if o.scheduled > 0)
    running = [i for i, o in slots if o.running_after]
    running.sort(key=lambda i: _run_key(observed, i))
    waiting = [i for i, o in slots if o.waiting_after]
    if observed.cfg.policy_priority:
        waiting.sort(key=lambda i: (observed.slots[i].priority, i))
    else:
        waiting.sort(key=lambda i: observed.slots[i].queue_key)
    victims = [i for i, o in slots if o.preempted]
    if observed.cfg.policy_priority:
        # Each victim is the maximum (priority, arrival_time) left in `running`.
        victims.sort(key=lambda i: (observed.slots[i].priority, i), reverse=True)
    else:
        # Each victim is running[-1]: the latest-admitted first.
        victims.sort(key=lambda i: _run_key(observed, i), reverse=True)
    held_order = running + waiting
    return StepRecord(
        step=observed.step,
        scheduled=tuple((ids[i], observed.slots[i].scheduled) for _, i in served),
        admitted=tuple(ids[i] for _, i in served if observed.slots[i].admitted),
        resumed=tuple(ids[i] for _, i in served if observed.slots[i].resumed),
        preempted=tuple(ids[i] for i in victims),
        finished=tuple((ids[i], STOP if observed.slots[i].finished_stop else LENGTH)
                       for _, i in served if observed.slots[i].finished),
        free_blocks=observed.free_blocks,
        num_computed_tokens=tuple((ids[i], observed.slots[i].num_computed_tokens)
                                  for i in held_order),
        running=tuple(ids[i] for i in running),
        waiting=tuple(ids[i] for i in waiting),
        token_budget_left=observed.token_budget_left,
    )


def _run_key(observed: Step, i: int) -> object:
    return observed.slots[i].run_key
