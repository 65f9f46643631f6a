"""Rule pieces every engine's scheduler shares, written once over Ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from model.core.ops import Bool, ConcreteOps, Int, Ops
from model.core.types import SlotSpec

State = TypeVar("State")
Slot = TypeVar("Slot")


@dataclass(frozen=True, slots=True)
class RuleLimits:
    """The limits the shared properties (properties/) read of a rule config, first in an
    engine's rule config that derives from this: the step's token budget, the most running
    requests, the usable KV blocks, the longest sequence, the block size, the blocks kept
    free, whether prompts are chunked and whether the policy is by priority. Each engine
    gives each its nearest meaning (its rule config's docstring says which)."""

    token_budget: int
    max_num_seqs: int
    usable_blocks: int
    max_model_len: int
    block_size: int
    watermark_blocks: int
    enable_chunked_prefill: bool
    policy_priority: bool


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


@dataclass(frozen=True, slots=True)
class SlotProgress:
    """What a request slot of vLLM V1's, V0's and mistral.rs's state holds first: its status
    code (0, the default, is absent: nothing has arrived in the slot, in every engine), the
    tokens computed for it and the tokens it has output. Each engine's slot adds its own
    fields after these."""

    status: object = 0
    num_computed_tokens: object = 0
    num_output_tokens: object = 0


@dataclass(frozen=True, slots=True)
class QueueState(Generic[Slot]):
    """What the state of a scheduler that keys its queues (vLLM V1's and V0's, mistral.rs's)
    holds first, between two steps: its request slots, the free KV blocks and the queue-key
    counters: `next_run_key` the next request appended to `running`, `wait_head` the next
    one pushed to the front of `waiting`, `wait_tail` the next arrival at its tail; `step`
    the steps taken. Each engine's state adds its own fields after these."""

    slots: tuple[Slot, ...]
    free_blocks: object
    next_run_key: object = 0
    wait_head: object = 0
    wait_tail: object = 1
    step: int = 0


# Ordered choices over slots as ite folds: the one-hot selection of the least key.


def lt_key(ops: Ops, a: tuple[Int, ...], b: tuple[Int, ...]) -> Bool:
    """Lexicographic a < b over tuples of ints."""
    if len(a) == 1:
        return a[0] < b[0]
    return ops.or_(a[0] < b[0], ops.and_(a[0] == b[0], lt_key(ops, a[1:], b[1:])))

def select_min(ops: Ops, eligible: Sequence[Bool], keys: Sequence[tuple[Int, ...]]) -> list[Bool]:
    """One-hot selection of the eligible slot with the smallest key (keys are distinct
    among eligible slots)."""
    n = len(eligible)
    if isinstance(ops, ConcreteOps):
        # The same selection on Python values, without the n x n fold: slot i is chosen
        # exactly when it is eligible and no eligible key is less, i.e. its key is the
        # least eligible one (tuples compare lexicographically, as lt_key does). The
        # fold was 3 % of the test suite's CPU in the simulator's steps.
        least = min((tuple(k) for k, e in zip(keys, eligible, strict=True) if e),
                    default=None)
        return [bool(e) and tuple(k) == least for k, e in zip(keys, eligible, strict=True)]
    return [
        ops.and_(eligible[i], *[ops.not_(ops.and_(eligible[j], lt_key(ops, keys[j], keys[i])))
                                for j in range(n) if j != i])
        for i in range(n)
    ]

def pick(ops: Ops, sel: Sequence[Bool], values: Sequence[Int]) -> Int:
    """The value of the selected slot (0 when none is selected)."""
    return ops.sum([ops.ite(s, v, 0) for s, v in zip(sel, values, strict=True)])


def pick_flag(ops: Ops, sel: Sequence[Bool], flags: Sequence[Bool]) -> Bool:
    """The flag of the selected slot (False when none is selected)."""
    return ops.or_(*[ops.and_(s, f) for s, f in zip(sel, flags, strict=True)])


# Behavioural equality of two states: queue keys matter only relative to each other.

Queue = tuple[Callable[[Any], Bool], Callable[[Any], Int]]
"""A queue of slots, as `same_queue_orders` reads it: (in the queue, its order key), both
read on one slot."""


def same_queue_orders(ops: Ops, a: Sequence[Any], b: Sequence[Any],
                      queues: Sequence[Queue]) -> list[Bool]:
    """Two states' slots `a` and `b` hold their queues in the same relative order: for every
    two distinct slots both in a queue in `a`, their key order there is their key order in
    `b`. The constraints come slot pair by slot pair (i, then j), queue by queue, the part
    of every engine's `same_behaviour` that compares queues."""
    cons: list[Bool] = []
    n = len(a)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            x, y, u, v = a[i], a[j], b[i], b[j]
            for in_queue, key in queues:
                both = ops.and_(in_queue(x), in_queue(y))
                cons.append(ops.implies(both, (key(x) < key(y)) == (key(u) < key(v))))
    return cons
