"""The strengthening invariant of vLLM V1's reachable rule states, over Ops.

k-induction (checker/methods/induction.py) proves it inductive first, then uses it to
prove step properties for all request lengths. It says: statuses and their counters are
consistent (a WAITING request has computed nothing, a PREEMPTED one has lost its blocks,
request.py:370-386 and scheduler.py:1571-1614), a RUNNING request holds exactly
cdiv(num_computed_tokens, block_size) blocks (kv_cache_manager.py:541-571 with prefix
caching off), the pool is conserved, queue keys are distinct, and `running` stays within
max_num_active_reqs (scheduler.py:129-136). On the AsyncScheduler it also says what is in
flight: a slot that is not running has nothing in flight, a held request's in-flight
tokens are exactly the last schedule's and none is stale, and a running request has one
output placeholder exactly when its last chunk sampled, which its num_computed_tokens
counts as a token.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Ops
from model.core.types import SlotSpec
from model.vllm.state import (
    ABSENT,
    FINISHED,
    PREEMPTED,
    RUNNING,
    WAITING,
    RuleConfig,
    SchedState,
    SlotState,
)


def well_formed(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], s: SchedState) -> Bool:
    """Every reachable state satisfies this (see the module docstring)."""
    cons: list[Bool] = [s.free_blocks >= 0, s.step >= 0, s.wait_head < s.wait_tail]
    held_blocks = []
    for spec, x in zip(specs, s.slots, strict=True):
        ntok = spec.prompt_len + x.num_output_tokens
        live = [x.num_output_tokens >= 0, x.num_output_tokens < spec.max_tokens,
                ntok < cfg.max_model_len]
        queued = [x.wait_key > s.wait_head, x.wait_key < s.wait_tail]
        cons += [
            x.status >= ABSENT, x.status <= FINISHED, x.num_preemptions >= 0,
            ops.implies(x.status == ABSENT, ops.and_(
                x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
                x.num_preemptions == 0,
                ops.or_(spec.arrival_step == 0, spec.arrival_step > s.step))),
            ops.implies(x.status != ABSENT, ops.and_(spec.arrival_step >= 1,
                                                     spec.arrival_step <= s.step)),
            ops.implies(x.status == WAITING, ops.and_(
                x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
                x.num_preemptions == 0, *queued)),
            ops.implies(x.status == PREEMPTED, ops.and_(
                x.num_computed_tokens == 0, x.blocks == 0, x.num_preemptions >= 1,
                *queued, *live)),
            ops.implies(x.status == RUNNING, ops.and_(
                x.num_computed_tokens >= 1,
                x.num_computed_tokens <= _last_computed(ntok, x),
                x.blocks == ops.cdiv(x.num_computed_tokens, cfg.block_size),
                x.run_key < s.next_run_key, *live)),
            ops.implies(x.status == FINISHED, x.blocks == 0),
        ]
        if cfg.async_scheduling:
            cons += _in_flight(ops, x)
        held_blocks.append(x.blocks)
    cons.append(s.free_blocks + ops.sum(held_blocks) == cfg.usable_blocks)
    n = len(specs)
    waiting = [ops.or_(x.status == WAITING, x.status == PREEMPTED) for x in s.slots]
    running = [x.status == RUNNING for x in s.slots]
    for i in range(n):
        for j in range(i + 1, n):
            a, b = s.slots[i], s.slots[j]
            cons.append(ops.implies(ops.and_(running[i], running[j]), a.run_key != b.run_key))
            cons.append(ops.implies(ops.and_(waiting[i], waiting[j]), a.wait_key != b.wait_key))
    cons.append(ops.sum([ops.to_int(r) for r in running]) <= cfg.max_num_active_reqs)
    return ops.and_(*cons)


def _last_computed(ntok: object, x: SlotState) -> object:
    """The most tokens a running request can have computed: all but its last token, and
    under async its placeholders count as tokens (scheduler.py:703-707 asks for
    num_tokens + num_output_placeholders - num_computed_tokens)."""
    if not x.in_flight:
        return ntok - 1  # type: ignore[operator]
    return ntok + x.in_flight[0].placeholders - 1  # type: ignore[operator]


def _in_flight(ops: Ops, x: SlotState) -> list[Bool]:
    """What the AsyncScheduler has in flight for a slot between two steps."""
    return [_idle(ops, x), _last_schedule_in_flight(ops, x), _running_placeholders(ops, x)]


def _idle(ops: Ops, x: SlotState) -> Bool:
    """A slot that is not running has nothing in flight: an arrival was never scheduled,
    and a victim's placeholders are dropped (scheduler.py:1605), its in-flight output is
    delivered (as stale) in the step that preempted it, and that step does not re-admit
    it (scheduler.py:900, and 934-939 while stale output is in flight)."""
    f = x.in_flight[0]
    return ops.implies(
        ops.or_(x.status == ABSENT, x.status == WAITING, x.status == PREEMPTED),
        ops.and_(f.placeholders == 0, f.tokens == 0, f.stale == 0, f.pending_tokens == 0))


def _last_schedule_in_flight(ops: Ops, x: SlotState) -> Bool:
    """A held request's in-flight tokens are exactly the last schedule's, none stale: each
    step delivers the previous schedule's output (core.py:698-792), stale output included
    (scheduler.py:2080-2103); a token is sampled only by a scheduled chunk
    (scheduler.py:1634-1636)."""
    f = x.in_flight[0]
    held = ops.or_(x.status == WAITING, x.status == RUNNING, x.status == PREEMPTED)
    return ops.implies(held, ops.and_(
        f.tokens == f.pending_tokens, f.pending_tokens >= 0, f.stale == 0,
        ops.implies(f.pending_sample, f.pending_tokens > 0)))


def _running_placeholders(ops: Ops, x: SlotState) -> Bool:
    """A running request has one placeholder exactly when its last chunk sampled: the
    schedule adds it (async_scheduler.py:25-56) and the next step's delivery frees it
    (async_scheduler.py:58-78)."""
    f = x.in_flight[0]
    return ops.implies(x.status == RUNNING,
                       f.placeholders == ops.ite(f.pending_sample, 1, 0))
