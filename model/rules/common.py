"""Rule pieces every engine's scheduler shares, written once over Ops."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

from model.ops import Ops
from model.state import SlotSpec

State = TypeVar("State")


def arrive_at_tail(ops: Ops, specs: Sequence[SlotSpec], state: State, t: Any, absent: int,
                   waiting: int) -> State:
    """Requests whose arrival step is `t` join the waiting queue's tail in slot order: an
    absent slot becomes `waiting` with the tail counter as its queue key. `state` has
    `slots` (each with `status` and `wait_key`) and `wait_tail`, as every engine's does."""
    tail = state.wait_tail  # type: ignore[attr-defined]
    slots = []
    for spec, s in zip(specs, state.slots, strict=True):  # type: ignore[attr-defined]
        arrives = ops.and_(s.status == absent, spec.arrival_step == t)
        slots.append(replace(s, status=ops.ite(arrives, waiting, s.status),
                             wait_key=ops.ite(arrives, tail, s.wait_key)))
        tail = ops.ite(arrives, tail + 1, tail)
    return replace(state, slots=tuple(slots), wait_tail=tail)  # type: ignore[type-var]
