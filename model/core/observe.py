"""What every engine's `observe` shares: one StepRecord's step-level observables."""

from __future__ import annotations

from collections.abc import Sequence

from model.core.types import SlotObs, Step, StepRecord


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
