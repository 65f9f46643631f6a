"""The strengthening invariant of vLLM V1's reachable rule states, over Ops.

k-induction (checker/methods/induction.py) proves it inductive first, then uses it to
prove step properties for all request lengths. It says: statuses and their counters are
consistent (a WAITING request has computed nothing, a PREEMPTED one has lost its blocks,
request.py:370-386 and scheduler.py:1571-1614), a RUNNING request holds exactly
cdiv(num_computed_tokens, block_size) blocks (kv_cache_manager.py:541-571 with prefix
caching off; at least that many with speculative decoding), the pool is conserved, queue
keys are distinct, and `running` stays within max_num_active_reqs (scheduler.py:129-136).
On the AsyncScheduler it also says what is in flight: a slot that is not running has
nothing in flight, and a held request's in-flight tokens are exactly the last schedule's,
none stale; a running request's num_computed_tokens counts its output placeholders as
tokens. With speculative decoding on the AsyncScheduler, a running request has 1 + d
placeholders exactly when its last chunk sampled with d drafts, has then computed every
known token but the last, and the output in flight accepts at most the drafts scheduled.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Int, Ops
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
                _blocks_held(ops, cfg, x), x.run_key < s.next_run_key, *live)),
            ops.implies(x.status == FINISHED, x.blocks == 0),
        ]
        if cfg.async_scheduling:
            cons += _in_flight(ops, cfg, ntok, x)
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


def _blocks_held(ops: Ops, cfg: RuleConfig, x: SlotState) -> Bool:
    """A running request's blocks: exactly cdiv(num_computed_tokens, block_size)
    (kv_cache_manager.py:541-571); with speculative decoding at least that many, the
    lookahead slots (541-544) and the rolled-back drafts' slots (scheduler.py:2113-2126)
    keeping theirs."""
    computed = ops.cdiv(x.num_computed_tokens, cfg.block_size)
    if not cfg.num_spec_tokens:
        return x.blocks == computed
    return x.blocks >= computed


def _last_computed(ntok: Int, x: SlotState) -> Int:
    """The most tokens a running request can have computed: all but its last token, and
    under async its placeholders count as tokens (scheduler.py:703-721 offers
    num_tokens + num_output_placeholders - num_computed_tokens)."""
    if not x.in_flight:
        return ntok - 1
    return ntok + x.in_flight[0].placeholders - 1


def _in_flight(ops: Ops, cfg: RuleConfig, ntok: Int, x: SlotState) -> list[Bool]:
    """What the AsyncScheduler has in flight for a slot between two steps (`ntok`: its
    num_tokens). Without drafts the first two facts are inductive on their own; the
    other three, true there too, are stated only with drafts, where they are needed (with
    them the 4-slot proof of tiny_async took 25% longer)."""
    facts = [_idle(ops, x), _last_schedule_in_flight(ops, x)]
    if cfg.num_spec_tokens:
        facts += [_running_placeholders(ops, x), _sampled_computes_all(ops, ntok, x),
                  _drafts_in_flight(ops, x)]
    return facts


def _idle(ops: Ops, x: SlotState) -> Bool:
    """A slot that is not running has nothing in flight: an arrival was never scheduled,
    and a victim's placeholders are dropped (scheduler.py:1597-1607), its in-flight output is
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
    """A running request has placeholders exactly when its last chunk sampled: one for
    the sampled token and one per draft it scheduled. The schedule adds them
    (async_scheduler.py:25-56) and the next step's delivery frees them
    (async_scheduler.py:58-78; rejected drafts, scheduler.py:2108-2128)."""
    f = x.in_flight[0]
    return ops.implies(x.status == RUNNING,
                       f.placeholders == ops.ite(f.pending_sample, 1 + f.pending_spec, 0))


def _sampled_computes_all(ops: Ops, ntok: Int, x: SlotState) -> Bool:
    """A running request whose last chunk sampled has computed every known token but its
    last, placeholders included: it was offered num_tokens + num_output_placeholders -
    num_computed_tokens (scheduler.py:703-721), and a delivery moves tokens from
    placeholders to outputs and rolls rejected drafts back from both (2108-2128)."""
    f = x.in_flight[0]
    return ops.implies(ops.and_(x.status == RUNNING, f.pending_sample),
                       x.num_computed_tokens == ntok + f.placeholders - 1)


def _drafts_in_flight(ops: Ops, x: SlotState) -> Bool:
    """The last schedule's output accepts at most the drafts it scheduled (its other
    drafts are rolled back at delivery, scheduler.py:2108-2128)."""
    f = x.in_flight[0]
    return ops.and_(f.pending_accepted >= 0, f.pending_accepted <= f.pending_spec)
