"""Serving hazards that `batchproof config` looks for, over Ops and the Step observables.

Each property holds when the hazard does not occur; a violation is a run that shows it.
They read only observables (model/core/types.py Step/SlotObs), so the reference replays them.
Lines are relative to vllm/ in v0.32.0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from model.core.ops import Bool, Int, Ops
from model.core.types import SlotObs, Step
from properties.catalogue import Property


def _all(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.and_(*xs) if xs else True


def _any(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.or_(*xs) if xs else False


def _left_waiting(o: SlotObs, ops: Ops) -> Bool:
    """Waiting when the step began, still waiting after it, 0 tokens in it."""
    return ops.and_(o.was_waiting, o.waiting_after, o.scheduled == 0)


def _would_be_admitted(ops: Ops, s: Step, o: SlotObs) -> Bool:
    """After the WAITING loop stopped, `o` would pass every admission check if it were
    tried: a free seat (scheduler.py:922-924), budget left, the whole prompt within it
    when chunked prefill is off (1160-1167), and its whole current sequence in the free
    blocks plus the watermark (kv_cache_manager.py:509-539, 575-579)."""
    cfg = s.cfg
    seat = s.num_running < cfg.max_num_active_reqs
    budget = ops.and_(s.token_budget_left > 0,
                      ops.or_(cfg.enable_chunked_prefill, o.num_tokens <= s.token_budget_left))
    wm = ops.ite(s.num_running > 0, cfg.watermark_blocks, 0)
    need = ops.cdiv(ops.min(o.num_tokens, cfg.max_model_len), cfg.block_size)
    return ops.and_(seat, budget, need + wm <= s.free_blocks)


def _window(ops: Ops, steps: Sequence[Step], t: int, k: int,
            at: Callable[[Ops, Step, int], Bool]) -> Bool:
    """Some slot i satisfies `at(step, i)` in each of the k steps ending at t."""
    n = len(steps[t].slots)
    return _any(ops, [_all(ops, [at(ops, steps[u], i) for u in range(t - k + 1, t + 1)])
                      for i in range(n)])


def _never_in_a_row(name: str, k: int, at: Callable[[Ops, Step, int], Bool],
                    text: str) -> Property:
    """The window property `name` (parameter k): no slot satisfies `at` in each of k
    consecutive steps (`_window`); it holds trivially before the k-th step."""
    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        if t < k - 1:
            return True
        return ops.not_(_window(ops, steps, t, k, at))
    return Property(name, "window", text, holds, window=k, params=(("k", k),))


def _blocked_behind(ops: Ops, s: Step, i: int) -> Bool:
    """Slot i fits now but waits behind a request that is itself left waiting (the head
    whose failure ended admission, scheduler.py:1160-1167, 1275-1282)."""
    q = s.slots[i]
    ahead = [ops.and_(_left_waiting(h, ops), h.queue_key < q.queue_key)
             for j, h in enumerate(s.slots) if j != i]
    return ops.and_(_left_waiting(q, ops), ops.not_(s.any_preempted),
                    _would_be_admitted(ops, s, q), _any(ops, ahead))


def make_head_of_line_blocking(k: int) -> Property:
    """A waiting request that would be admitted is never held for k consecutive steps
    behind one that is not (strict head-of-line, scheduler.py:1275-1282)."""
    return _never_in_a_row("head_of_line_blocking", k, _blocked_behind,
                           f"no request that fits waits {k} step(s) behind one that does not")


def _unchunked_head_refused(ops: Ops, s: Step, i: int) -> Bool:
    """Chunked prefill is off and slot i, first in the waiting queue, gets nothing although
    a seat and its blocks are free, budget is left and its prompt fits the full budget:
    only the budget already spent on running requests stops it (scheduler.py:1160-1167)."""
    o = s.slots[i]
    cfg = s.cfg
    first = _all(ops, [ops.implies(p.waiting_after, o.queue_key <= p.queue_key)
                       for j, p in enumerate(s.slots) if j != i])
    wm = ops.ite(s.num_running > 0, cfg.watermark_blocks, 0)
    need = ops.cdiv(ops.min(o.num_tokens, cfg.max_model_len), cfg.block_size)
    return ops.and_(ops.not_(cfg.enable_chunked_prefill), _left_waiting(o, ops), first,
                    ops.not_(s.any_preempted), s.num_running < cfg.max_num_active_reqs,
                    s.token_budget_left > 0, o.num_tokens > s.token_budget_left,
                    o.num_tokens <= cfg.token_budget, need + wm <= s.free_blocks)


def make_unchunked_prefill_blocked(k: int) -> Property:
    """With chunked prefill off, the waiting head is never refused k steps in a row only
    because the running requests left too little of the budget."""
    return _never_in_a_row("unchunked_prefill_blocked", k, _unchunked_head_refused,
                           f"with chunked prefill off, the waiting head is not refused {k} "
                           "step(s) in a row for lack of the budget the running requests "
                           "used")


def _fold_max(ops: Ops, xs: Sequence[Int], floor: int) -> Int:
    out: Int = floor
    for x in xs:
        out = ops.max(out, x)
    return out


def _priority_inverted(ops: Ops, s: Step, i: int) -> Bool:
    """PRIORITY policy, every seat taken (scheduler.py:922-924), and slot i waits with 0
    tokens although its priority is better (smaller) than a running request's: the
    RUNNING loop preempts only for KV blocks (777-844), never for a better priority."""
    cfg = s.cfg
    if not cfg.policy_priority:
        return False
    # Priorities are >= 0, so -1 stands for "no running request".
    worst_running = _fold_max(ops, [ops.ite(o.running_after, o.priority, -1)
                                    for o in s.slots], -1)
    o = s.slots[i]
    return ops.and_(s.num_running >= cfg.max_num_active_reqs, _left_waiting(o, ops),
                    o.priority < worst_running)


def make_priority_inversion(k: int) -> Property:
    """Under the PRIORITY policy, a request is never left waiting k steps in a row behind
    running requests of worse priority while every seat is taken."""
    return _never_in_a_row("priority_inversion", k, _priority_inverted,
                           f"no better-priority request waits {k} step(s) while "
                           "worse-priority ones hold every seat")


def make_repeated_preemption(m: int) -> Property:
    """No request is preempted more than m times (scheduler.py:777-844 preempts on every
    allocation failure; num_preemptions has no cap, 1608). The catalogue's
    preemption_storm as a one-step window: the config checker wants a witness, and a
    proof over a few request slots says nothing about a real pool, so no k-induction."""
    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        return _all(ops, [o.num_preemptions <= m for o in steps[t].slots])
    return Property("repeated_preemption", "window", f"no request is preempted more than "
                    f"{m} time(s)", holds, window=1, params=(("m", m),))


PROPERTIES: tuple[Property, ...] = ()

FACTORIES: dict[str, Callable[..., Property]] = {
    "head_of_line_blocking": make_head_of_line_blocking,
    "unchunked_prefill_blocked": make_unchunked_prefill_blocked,
    "priority_inversion": make_priority_inversion,
    "repeated_preemption": make_repeated_preemption,
}
