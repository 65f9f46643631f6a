"""Properties that make seed 000's Table 1 concrete (static batching, request-level dynamic
batching, continuous batching), over Ops and the Step observables only. For the baselines
the evidence is the concept definition (seed 000 Table 1;
/work/shared/reference/sglang_mistralrs_rules.md §3)."""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Ops
from model.core.types import Step
from properties.catalogue import Property


def finished_slot_released(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A finished request's batch slot is free for another request from the next step on:
    no step has slots held by requests that finished earlier (idle slot-steps)."""
    del ops
    return steps[t].idle_slots == 0


def no_padded_compute(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """No compute is spent on rows whose request has already finished (padding)."""
    del ops
    return steps[t].padded_rows == 0


def no_join_mid_batch(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """No request joins while others are running: a step that admits or resumes a request
    began with no request running (request-level batching; continuous batching joins
    mid-flight)."""
    s = steps[t]
    joins = ops.or_(*[ops.or_(o.admitted, o.resumed) for o in s.slots])
    return ops.implies(joins, ops.not_(ops.or_(*[o.was_running for o in s.slots])))


PROPERTIES: tuple[Property, ...] = tuple(
    Property(f.__name__, "step", f.__doc__ or "", f)
    for f in (finished_slot_released, no_padded_compute, no_join_mid_batch))
