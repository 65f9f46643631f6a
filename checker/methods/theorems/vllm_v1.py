"""Closed-form theorems, proved for all sizes by induction over the scheduler's loops.

The slot model fixes the number of requests. Seed 000's theorem speaks of any number D of
running decodes, so it is proved on the RUNNING loop itself (scheduler.py:657-887) as a
transition system over (decodes served d, token_budget, input_budget, preempted), with
the loop body's token arithmetic taken from the rules (`running_tokens`), so the proof and
the model cannot drift apart.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import z3

from checker.methods.symbolic import Family
from checker.methods.theorems import Premise, Theorem, TheoremResult, field_range
from model.core.ops import SymbolicOps
from model.core.types import SlotSpec
from model.vllm.rules import (
    _arrive,
    _preempt,
    _serve,
    _update,
    _Work,
    blocks_needed,
    num_tokens,
    running_tokens,
)
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


def _rule_cfg(mml: z3.ArithRef, budget: z3.ArithRef, batched: z3.ArithRef,
              thr: z3.ArithRef) -> RuleConfig:
    return RuleConfig(token_budget=budget, max_num_batched_tokens=batched,
                      max_num_active_reqs=0, max_num_seqs=0, max_model_len=mml,
                      usable_blocks=0, watermark_blocks=0, enable_chunked_prefill=True,
                      long_prefill_token_threshold=thr, scheduler_reserve_full_isl=True,
                      block_size=1, policy_priority=False)


def _valid(claim: z3.BoolRef, timeout_s: float) -> z3.CheckSatResult:
    s = z3.Solver()
    s.set(random_seed=0, timeout=max(1, int(timeout_s * 1000)))
    s.add(z3.Not(claim))
    return s.check()


def decodes_exhaust_budget_unbounded(timeout_s: float) -> TheoremResult:
    """For all B, D, P (and any mix of running prefills): if D running decodes, one token
    each, number at least the budget B, the WAITING loop is not entered, so a waiting
    prefill of any length P gets 0 tokens in that step."""
    start = time.monotonic()
    ops = SymbolicOps()
    big_b, batched, mml, thr = z3.Ints("B max_num_batched_tokens max_model_len threshold")
    d, budget, ib = z3.Ints("d token_budget input_budget")
    p = z3.Bool("preempted")
    cfg = _rule_cfg(mml, big_b, batched, thr)
    ranges = z3.And(big_b >= 1, batched >= 1, thr >= 0, mml >= 2)

    def inv(d: z3.ArithRef, budget: z3.ArithRef, ib: z3.ArithRef, p: z3.BoolRef) -> z3.BoolRef:
        return z3.And(d >= 0, budget >= 0, z3.Or(p, ib <= 0, budget <= z3.If(big_b - d > 0,
                                                                            big_b - d, 0)))

    # One iteration: the next running request, a decode (lacks 1 token) or a prefill chunk
    # (lacks r >= 1), with num_computed_tokens c below max_model_len - 1; its allocation
    # may succeed, or preempt (then preempted is set and the loop may end).
    is_decode, alloc_ok = z3.Bools("is_decode alloc_ok")
    r, c = z3.Ints("remaining num_computed_tokens")
    remaining = z3.If(is_decode, 1, r)
    active = budget > 0
    n = running_tokens(ops, cfg, remaining, c, thr, budget, ib)
    served = z3.And(active, n > 0, alloc_ok)
    d2 = d + z3.If(z3.And(active, is_decode), 1, 0)
    budget2 = z3.If(served, budget - n, budget)
    ib2 = z3.If(served, ib - n, ib)
    p2 = z3.Or(p, z3.And(active, n > 0, z3.Not(alloc_ok)))
    body = z3.And(r >= 1, c >= 0, remaining + c < mml, *ops.take_definitions())

    obligations: list[tuple[str, Callable[[], z3.BoolRef]]] = [
        ("base", lambda: z3.Implies(ranges, inv(z3.IntVal(0), big_b, batched, z3.BoolVal(False)))),
        ("step", lambda: z3.Implies(z3.And(ranges, body, inv(d, budget, ib, p)),
                                    inv(d2, budget2, ib2, p2))),
        ("conclusion", lambda: z3.Implies(z3.And(ranges, inv(d, budget, ib, p), d >= big_b),
                                          z3.Not(z3.And(z3.Not(p), budget > 0, ib > 0)))),
    ]
    for name, claim in obligations:
        result = _valid(claim(), timeout_s - (time.monotonic() - start))
        if result != z3.unsat:
            return TheoremResult(False, time.monotonic() - start, f"{name}: {result}")
    return TheoremResult(True, time.monotonic() - start,
                         "1-induction over the running loop: base, step and conclusion valid "
                         "for all B, D, P")


def exhausting_decodes_fill_max_num_seqs_unbounded(timeout_s: float) -> TheoremResult:
    """When the token budget B is at least max_num_seqs (its premise, checked on the
    family: vLLM's validation gives it for max_num_batched_tokens, not for a
    max_num_scheduled_tokens override), D >= B running decodes forces D = B = max_num_seqs.
    Lemma used: len(running) <= max_num_seqs, which is 1-inductive over the WAITING loop
    (admission only while len(running) < max_num_active_reqs <= max_num_seqs,
    scheduler.py:922-924) and proved on the slot model as running_within_max_num_seqs."""
    start = time.monotonic()
    big_d, running, seqs, active_cap, big_b = z3.Ints("D running max_num_seqs active B")
    admit = z3.Bool("admit")
    lemma_step = z3.Implies(
        z3.And(active_cap <= seqs, running <= seqs, running >= 0),
        z3.If(z3.And(admit, running < active_cap), running + 1, running) <= seqs)
    claim = z3.Implies(z3.And(big_b >= seqs, seqs >= 1, big_d <= running, running <= seqs,
                              big_d >= big_b),
                       z3.And(big_d == big_b, big_b == seqs))
    for name, c in (("lemma", lemma_step), ("claim", claim)):
        result = _valid(c, timeout_s - (time.monotonic() - start))
        if result != z3.unsat:
            return TheoremResult(False, time.monotonic() - start, f"{name}: {result}")
    return TheoremResult(True, time.monotonic() - start,
                         "for all D, B, max_num_seqs: D <= len(running) <= max_num_seqs <= B")


def _budget_covers_seats(family: Family) -> bool:
    # The token budget is max_num_scheduled_tokens when set (scheduler.py:137-141), which
    # SchedulerConfig does not compare with max_num_seqs; otherwise max_num_batched_tokens,
    # which validation keeps >= max_num_seqs (config/scheduler.py:328-333).
    _, seqs_hi = field_range(family, "max_num_seqs")
    if family.base.max_num_scheduled_tokens is not None:
        return family.base.max_num_scheduled_tokens >= seqs_hi
    return family.validated or field_range(family, "max_num_batched_tokens")[0] >= seqs_hi


def _active_within_seats(family: Family) -> bool:
    active = family.base.max_num_active_seqs
    return (active is None or family.validated
            or active <= field_range(family, "max_num_seqs")[0])


BUDGET_COVERS_SEATS = Premise(
    "token_budget_ge_max_num_seqs",
    "the token budget (max_num_scheduled_tokens when set, else max_num_batched_tokens) is "
    "at least max_num_seqs in every config of the family", _budget_covers_seats)
ACTIVE_WITHIN_SEATS = Premise(
    "max_num_active_seqs_le_max_num_seqs",
    "max_num_active_seqs (when set) is at most max_num_seqs (config/scheduler.py:335-342)",
    _active_within_seats)

# --- for every number of requests: invariants of the scheduler's loops -----------------
#
# A step of vLLM V1 runs loops over ALL requests: arrivals (scheduler.py:2616-2634), the
# RUNNING loop with its inner allocate-or-preempt loop (657-887), the WAITING loop
# (899-1180) and the release of finished requests in update_from_output (2220-2240). The
# proofs below are 1-inductions over those loops' iterations. The state of an induction is
# the loops' accumulators over all requests (`_Acc`: budgets left, free blocks, and sums
# and counts over every request); an iteration touches at most two requests (the one it
# serves and a preemption victim), so it is evaluated on the rules' own functions over a
# two-slot `_Work` whose slots are fresh requests, the rest of the requests entering only
# through the accumulators ("the rest", constrained only by being a sum of per-request
# values that the per-request facts `_wf` keep >= 0; each obligation proves `_wf` again
# for the requests it touches, so those facts are inductive as well).

_FRESH = itertools.count()
# The FCFS victim rule, its ablation (running[0]) and PRIORITY: _preempt gives a victim's
# tokens back under the last two only (rules.py:149-156, scheduler.py:796-832).
_VICTIM_RULES = ((False, True), (False, False), (True, True))  # (priority, victim_latest)


@dataclass(frozen=True, slots=True)
class _Req:
    """One request as an iteration sees it: its status now and at the step's start, its
    num_computed_tokens, blocks held, tokens scheduled in this step and num_tokens."""

    status: Any
    before: Any
    ncomp: Any
    blocks: Any
    scheduled: Any
    ntok: Any


@dataclass(frozen=True, slots=True)
class _Acc:
    """The loops' accumulators over every request: token and input budget left, free
    blocks, preempted-in-this-step, and over all requests the tokens scheduled, the blocks
    held, the number RUNNING and the number admitted or resumed in this step (joined)."""

    token_budget: Any
    input_budget: Any
    free: Any
    any_preempted: Any
    scheduled: Any
    blocks: Any
    running: Any
    joined: Any


@dataclass(frozen=True, slots=True)
class _Iter:
    """One RUNNING-loop iteration's locals (rules.py:218-263): num_computed_tokens picked
    at its start, the tokens offered, active, wants, fits, done, and the loop's stopped."""

    ncomp: Any
    n: Any
    active: Any
    wants: Any
    fits: Any
    done: Any
    stopped: Any


def _tag(kind: str) -> str:
    return f"{kind}{next(_FRESH)}"


def _fresh_req() -> _Req:
    t = _tag("req")
    return _Req(*z3.Ints(" ".join(f"{t}.{f}" for f in _Req.__slots__)))


def _fresh_acc() -> _Acc:
    t = _tag("acc")
    tb, ib, free, sched, blocks, running, joined = z3.Ints(
        " ".join(f"{t}.{f}" for f in ("tb", "ib", "free", "sched", "blocks", "running",
                                      "joined")))
    return _Acc(tb, ib, free, z3.Bool(f"{t}.pre"), sched, blocks, running, joined)


def _fresh_iter() -> _Iter:
    t = _tag("it")
    ncomp, n = z3.Ints(f"{t}.ncomp {t}.n")
    return _Iter(ncomp, n, *z3.Bools(f"{t}.active {t}.wants {t}.fits {t}.done {t}.stopped"))


def _is(x: Any, *codes: int) -> z3.BoolRef:
    return z3.Or(*[x == c for c in codes])


def _running(r: _Req) -> z3.BoolRef:
    return r.status == RUNNING


def _joined(r: _Req) -> z3.BoolRef:
    # SlotObs.admitted / .resumed (rules.py _slot_obs): WAITING or PREEMPTED at the step's
    # start, RUNNING after scheduling.
    return z3.And(_is(r.before, WAITING, PREEMPTED), r.status == RUNNING)


def _wf(r: _Req) -> list[z3.BoolRef]:
    """Per-request facts: blocks and scheduled tokens are never negative (each obligation
    re-proves them for the requests it changes), status codes are the five of state.py,
    and num_tokens >= 1 (prompt_len >= 1, symbolic.slot_specs; outputs only grow)."""
    return [r.blocks >= 0, r.scheduled >= 0, r.ntok >= 1,
            _is(r.status, ABSENT, WAITING, RUNNING, PREEMPTED, FINISHED),
            _is(r.before, ABSENT, WAITING, RUNNING, PREEMPTED, FINISHED)]


def _wf_kept(reqs: Sequence[_Req]) -> list[z3.BoolRef]:
    return [c for r in reqs for c in (r.blocks >= 0, r.scheduled >= 0)]


def _rest(acc: _Acc, reqs: Sequence[_Req]) -> list[z3.BoolRef]:
    """The requests an iteration does not touch: each sum and count less the touched
    requests' shares is a sum of per-request values >= 0."""
    return [acc.scheduled - sum(r.scheduled for r in reqs) >= 0,
            acc.blocks - sum(r.blocks for r in reqs) >= 0,
            acc.running - sum(z3.If(_running(r), 1, 0) for r in reqs) >= 0,
            acc.joined - sum(z3.If(_joined(r), 1, 0) for r in reqs) >= 0,
            *[c for r in reqs for c in _wf(r)]]


def _regather(acc: _Acc, old: Sequence[_Req], new: Sequence[_Req], w: _Work) -> _Acc:
    """The accumulators after an iteration changed `old` into `new` (the rest unchanged)."""
    def moved(f: Callable[[_Req], Any]) -> Any:
        return sum(f(r) for r in new) - sum(f(r) for r in old)
    return _Acc(w.token_budget, w.input_budget, w.free, w.any_preempted,
                acc.scheduled + moved(lambda r: r.scheduled),
                acc.blocks + moved(lambda r: r.blocks),
                acc.running + moved(lambda r: z3.If(_running(r), 1, 0)),
                acc.joined + moved(lambda r: z3.If(_joined(r), 1, 0)))


class _Loops:
    """The loop bodies of one step, over a RuleConfig whose fields are all z3 constants
    (every budget, pool, watermark, threshold, max_model_len, block size), with
    speculative decoding, prefix caching and async scheduling off (the premises
    `PLAIN_SYNC` reject families with any of them)."""

    def __init__(self, priority: bool, victim_latest: bool) -> None:
        self.ops = SymbolicOps()
        b, mb, act, seqs, mml, usable, wm, thr, bs = z3.Ints(
            "B max_num_batched_tokens max_num_active_reqs max_num_seqs max_model_len "
            "usable_blocks watermark_blocks threshold block_size")
        chunked, full_isl = z3.Bools("enable_chunked_prefill scheduler_reserve_full_isl")
        self.thr = thr
        self.cfg = RuleConfig(
            token_budget=b, max_num_batched_tokens=mb, max_num_active_reqs=act,
            max_num_seqs=seqs, max_model_len=mml, usable_blocks=usable,
            watermark_blocks=wm, enable_chunked_prefill=chunked,
            long_prefill_token_threshold=thr, scheduler_reserve_full_isl=full_isl,
            block_size=bs, policy_priority=priority, victim_latest=victim_latest)  # type: ignore[arg-type]

    def defs(self) -> list[z3.BoolRef]:
        """The definitions the rules named since the last call."""
        return self.ops.take_definitions()

    def work(self, acc: _Acc, reqs: Sequence[_Req]) -> _Work:
        """The rules' step scratch with the touched requests as its slots and the loop's
        accumulators as its scalars; keys and counters are arbitrary."""
        t = _tag("w")
        n = len(reqs)

        def ints(name: str) -> list[Any]:
            return [z3.Int(f"{t}.{name}{i}") for i in range(n)]
        return _Work(
            status=[r.status for r in reqs], ncomp=[r.ncomp for r in reqs],
            blocks=[r.blocks for r in reqs], run_key=ints("run_key"),
            wait_key=ints("wait_key"), num_preemptions=ints("num_preemptions"),
            scheduled=[r.scheduled for r in reqs], serve_rank=ints("serve_rank"),
            preempted=[z3.Bool(f"{t}.preempted{i}") for i in range(n)],
            visited=[z3.Bool(f"{t}.visited{i}") for i in range(n)], free=acc.free,
            token_budget=acc.token_budget, input_budget=acc.input_budget,
            next_run_key=z3.Int(f"{t}.next_run_key"), wait_head=z3.Int(f"{t}.wait_head"),
            served=z3.Int(f"{t}.served"), any_preempted=acc.any_preempted,
            prefix_hit=[0] * n)

    @staticmethod
    def after(w: _Work, reqs: Sequence[_Req]) -> list[_Req]:
        """The touched requests as the iteration left them."""
        return [replace(r, status=w.status[i], ncomp=w.ncomp[i], blocks=w.blocks[i],
                        scheduled=w.scheduled[i]) for i, r in enumerate(reqs)]

    def step_start(self, state: _Acc) -> _Acc:
        """The accumulators when schedule() starts (rules.py step, scheduler.py:611-614):
        both budgets full, nothing scheduled, preempted or joined; the free blocks, held
        blocks and RUNNING count are the state's."""
        cfg = self.cfg
        return replace(state, token_budget=cfg.token_budget,
                       input_budget=(cfg.max_num_batched_tokens if cfg.separate_input_budget
                                     else cfg.token_budget),
                       any_preempted=False, scheduled=0, joined=0)

    def pick(self, acc: _Acc, sel: _Req, stopped: Any, eligible: Any
             ) -> tuple[_Iter, list[z3.BoolRef]]:
        """A RUNNING-loop iteration starts (rules.py:218-231; scheduler.py:658-661,
        703-721): `sel` is the next RUNNING request not yet visited, if `eligible`."""
        ops, cfg = self.ops, self.cfg
        active = ops.and_(ops.not_(stopped), acc.token_budget > 0, eligible,
                          acc.input_budget > cfg.draft_slots)
        n = running_tokens(ops, cfg, sel.ntok - sel.ncomp, sel.ncomp, self.thr,
                           acc.token_budget, acc.input_budget)
        wants = ops.and_(active, n > 0)
        return (_Iter(sel.ncomp, n, active, wants, False, False, stopped),
                [z3.Implies(eligible, _running(sel))])

    def attempt(self, acc: _Acc, sel: _Req, vic: _Req, it: _Iter, hit_sel: Any, hit_vic: Any
                ) -> tuple[_Acc, _Req, _Iter, list[z3.BoolRef], list[_Req]]:
        """One iteration of the inner allocate-or-preempt loop (rules.py:236-251,
        scheduler.py:777-844): allocation succeeds or the victim, a RUNNING request (the
        selected one or `vic`; which one the victim rule picks is left arbitrary, so every
        victim rule is covered), is preempted by the rules' `_preempt`."""
        ops, cfg = self.ops, self.cfg
        w = self.work(acc, [sel, vic])
        need = blocks_needed(ops, cfg, it.ncomp + it.n + cfg.num_lookahead_tokens, w.blocks[0])
        trying = ops.and_(it.wants, ops.not_(it.done))
        ok = ops.and_(trying, need <= w.free)
        fits, done = ops.or_(it.fits, ok), ops.or_(it.done, ok)
        evict = ops.and_(trying, ops.not_(ok))
        _preempt(ops, cfg, w, [hit_sel, hit_vic], evict)
        done = ops.or_(done, ops.and_(evict, hit_sel))
        new = self.after(w, [sel, vic])
        hyps = [z3.Not(z3.And(hit_sel, hit_vic)), z3.Implies(hit_sel, _running(sel)),
                z3.Implies(hit_vic, _running(vic))]
        return (_regather(acc, [sel, vic], new, w), new[0], replace(it, fits=fits, done=done),
                hyps, new)

    def serve(self, acc: _Acc, sel: _Req, other: _Req, it: _Iter
              ) -> tuple[_Acc, Any, list[_Req]]:
        """The RUNNING-loop iteration ends (rules.py:252-263, scheduler.py:846-858): the
        rules' `_serve` records the tokens when the allocation fitted; the loop stops
        after a failure or when inactive. Returns the accumulators and stopped."""
        ops, cfg = self.ops, self.cfg
        w = self.work(acc, [sel, other])
        need = blocks_needed(ops, cfg, it.ncomp + it.n + cfg.num_lookahead_tokens, w.blocks[0])
        _serve(ops, cfg, w, [True, False], it.fits, it.n, need)
        stopped = ops.or_(it.stopped, ops.and_(it.wants, ops.not_(it.fits)),
                          ops.not_(it.active))
        new = self.after(w, [sel, other])
        return _regather(acc, [sel, other], new, w), stopped, new

    def waiting_start(self, acc: _Acc) -> Any:
        """The WAITING loop's initial stopped (rules.py:293, scheduler.py:900)."""
        return acc.any_preempted if self.cfg.preemption_gate else False

    def admit(self, acc: _Acc, sel: _Req, other: _Req, stopped: Any, eligible: Any
              ) -> tuple[_Acc, Any, list[z3.BoolRef], list[_Req]]:
        """One WAITING-loop iteration (rules.py:294-352; scheduler.py:912-924, 1118-1170,
        1259-1282, 1343-1369) without prefix caching or speculative decoding. The token
        and admission arithmetic is hand-written, a copy of rules.py:304-333 with
        `hit_blocks = evictable = computed = 0` (no prefix cache) and no padding
        (`_padding` gives (False, False) when num_spec_tokens is 0; crash stays False);
        the blocks come from the rules' `blocks_needed`, the accounting from the rules'
        `_serve`. `sel` is the queue's head, if `eligible`."""
        ops, cfg, thr = self.ops, self.cfg, self.thr
        w = self.work(acc, [sel, other])
        num_running = acc.running
        active = ops.and_(ops.not_(stopped), w.token_budget > 0,
                          w.input_budget > cfg.draft_slots, eligible,
                          num_running < cfg.max_num_active_reqs)
        total = sel.ntok
        req_budget = ops.min(w.token_budget, w.input_budget - cfg.draft_slots)  # 1118
        lacks = total  # 1129, num_computed_tokens 0 without a prefix hit
        n = ops.ite(ops.and_(thr > 0, thr < lacks), thr, lacks)  # 1155-1156
        too_long = ops.and_(ops.not_(cfg.enable_chunked_prefill), n > req_budget)  # 1160
        n = ops.min(n, req_budget)  # 1169
        wm = ops.ite(num_running > 0, cfg.watermark_blocks, 0)  # kv_cache_manager 509-516
        full_need = blocks_needed(ops, cfg, total, 0)
        full_ok = ops.or_(ops.not_(cfg.scheduler_reserve_full_isl), full_need + wm <= w.free)
        need = blocks_needed(ops, cfg, n + cfg.num_lookahead_tokens, 0)
        ok = ops.and_(active, ops.not_(too_long), full_ok, need + wm <= w.free)
        _serve(ops, cfg, w, [True, False], ok, n, need, need)
        w.status[0] = ops.ite(ok, RUNNING, w.status[0])  # 1343-1369: RUNNING, appended
        stopped = ops.or_(stopped, ops.not_(ok))  # every failure ends the loop
        new = self.after(w, [sel, other])
        hyps = [z3.Implies(eligible, _is(sel.status, WAITING, PREEMPTED))]
        return _regather(acc, [sel, other], new, w), stopped, hyps, new

    def arrive(self, acc: _Acc, req: _Req) -> tuple[_Acc, _Req]:
        """One request's arrival, by the rules' `_arrive` on a one-slot state
        (rules.py _arrive, scheduler.py:2616-2634)."""
        spec, t = self.spec(), z3.Int(_tag("t"))
        slot = SlotState(status=req.status, num_computed_tokens=req.ncomp, blocks=req.blocks)
        state = SchedState(slots=(slot,), free_blocks=acc.free)
        after = _arrive(self.ops, [spec], state, t)
        s = after.slots[0]
        new = replace(req, status=s.status, before=s.status, ncomp=s.num_computed_tokens,
                      blocks=s.blocks)
        w = self.work(acc, [req])
        w.free = after.free_blocks
        return _regather(acc, [req], [new], w), new

    def release(self, acc: _Acc, req: _Req, eos: Any) -> tuple[_Acc, _Req]:
        """One request's turn in update_from_output, by the rules' `_update` on a one-slot
        step whose free blocks are the release loop's running total (rules.py _update:
        free_end accumulates each finished request's blocks; scheduler.py:2220-2240)."""
        ops, cfg = self.ops, self.cfg
        spec = self.spec()
        slot = SlotState(status=req.before, num_computed_tokens=req.ncomp,
                         num_output_tokens=z3.Int(_tag("out")), blocks=req.blocks)
        state = SchedState(slots=(slot,), free_blocks=acc.free)
        w = self.work(acc, [req])
        nxt, _ = _update(ops, cfg, [spec], state, state.slots, [num_tokens(spec, slot)],
                         [z3.Bool(_tag("held"))], w, [eos])
        s = nxt.slots[0]
        new = replace(req, status=s.status, ncomp=s.num_computed_tokens, blocks=s.blocks)
        w.free = nxt.free_blocks
        return _regather(acc, [req], [new], w), new

    @staticmethod
    def spec() -> SlotSpec:
        """An arbitrary request's fixed parameters."""
        t = _tag("spec")
        return SlotSpec(*z3.Ints(f"{t}.prompt_len {t}.max_tokens {t}.arrival_step "
                                 f"{t}.priority"))


Invariant = Callable[[_Loops, _Acc], Any]
InnerInvariant = Callable[[_Loops, _Acc, _Req, _Iter], Any]


@dataclass(frozen=True, slots=True)
class _Argument:
    """A loop-invariant argument: `inv` over the accumulators at the RUNNING loop's
    iteration boundaries, `inner` within one of its iterations (across the inner
    allocate-or-preempt loop), `waiting` over the WAITING loop (given its stopped flag;
    default `inv`), the `claim` at the step's observation point (after both loops), and,
    for an induction over steps, `between` over the state between steps (kept by the
    release and arrival loops) and `state_claim` after update_from_output."""

    inv: Invariant
    inner: InnerInvariant
    claim: Invariant
    hyps: Callable[[_Loops], list[z3.BoolRef]]
    waiting: Callable[[_Loops, _Acc, Any], Any] | None = None
    between: Invariant | None = None
    state_claim: Invariant | None = None


def _obligations(a: _Argument, loops: _Loops) -> list[tuple[str, Callable[[], z3.BoolRef]]]:
    """The obligations of the argument on one loop body; each is a closure so that its
    terms (and the definitions the rules name) are built when it is discharged."""
    def wait_inv(l_: _Loops, acc: _Acc, stopped: Any) -> Any:
        return a.inv(l_, acc) if a.waiting is None else a.waiting(l_, acc, stopped)

    def valid(hyps: list[Any], concl: Any) -> z3.BoolRef:
        concl = z3.And(*concl) if isinstance(concl, list) else concl
        return z3.Implies(z3.And(*a.hyps(loops), *loops.defs(), *hyps), concl)

    def fresh_pair() -> tuple[_Acc, _Req, _Req, z3.BoolRef, z3.BoolRef]:
        return _fresh_acc(), _fresh_req(), _fresh_req(), z3.Bool(_tag("s")), z3.Bool(_tag("e"))

    def step_start() -> z3.BoolRef:
        state = _fresh_acc()
        pre = [a.between(loops, state)] if a.between else []
        return valid([*pre, state.blocks >= 0, state.running >= 0],
                     a.inv(loops, loops.step_start(state)))

    def inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
        # Every argument's: an allocation fits only for a request that wants tokens,
        # n >= 1, and it ends the inner loop.
        return z3.And(z3.Implies(it.fits, z3.And(it.wants, it.done)),
                      z3.Implies(it.wants, it.n >= 1), a.inner(l_, acc, sel, it))

    def pick() -> z3.BoolRef:
        acc, sel, _, stopped, eligible = fresh_pair()
        it, hyps = loops.pick(acc, sel, stopped, eligible)
        return valid([a.inv(loops, acc), *_rest(acc, [sel]), *hyps],
                     inner(loops, acc, sel, it))

    def attempt() -> z3.BoolRef:
        acc, sel, vic, it = _fresh_acc(), _fresh_req(), _fresh_req(), _fresh_iter()
        t = _tag("victim")
        hs, hv = z3.Bools(f"{t}.sel {t}.vic")
        acc2, sel2, it2, hyps, new = loops.attempt(acc, sel, vic, it, hs, hv)
        return valid([a.inv(loops, acc), inner(loops, acc, sel, it), *_rest(acc, [sel, vic]),
                      *hyps],
                     [a.inv(loops, acc2), inner(loops, acc2, sel2, it2), *_wf_kept(new)])

    def serve() -> z3.BoolRef:
        acc, sel, other, it = _fresh_acc(), _fresh_req(), _fresh_req(), _fresh_iter()
        acc2, _, new = loops.serve(acc, sel, other, it)
        return valid([a.inv(loops, acc), inner(loops, acc, sel, it),
                      *_rest(acc, [sel, other])], [a.inv(loops, acc2), *_wf_kept(new)])

    def waiting_base() -> z3.BoolRef:
        acc = _fresh_acc()
        return valid([a.inv(loops, acc)], wait_inv(loops, acc, loops.waiting_start(acc)))

    def admit() -> z3.BoolRef:
        acc, sel, other, stopped, eligible = fresh_pair()
        acc2, stopped2, hyps, new = loops.admit(acc, sel, other, stopped, eligible)
        return valid([wait_inv(loops, acc, stopped), *_rest(acc, [sel, other]), *hyps],
                     [wait_inv(loops, acc2, stopped2), *_wf_kept(new)])

    def claim() -> z3.BoolRef:
        acc, stopped = _fresh_acc(), z3.Bool(_tag("s"))
        return valid([wait_inv(loops, acc, stopped), *_rest(acc, [])], a.claim(loops, acc))

    out: list[tuple[str, Callable[[], z3.BoolRef]]] = [
        ("base (schedule() starts)", step_start), ("running-loop iteration starts", pick),
        ("allocate-or-preempt iteration", attempt), ("running-loop iteration ends", serve),
        ("waiting loop starts", waiting_base), ("waiting-loop iteration", admit),
        ("conclusion", claim)]
    if a.between is None:
        return out
    between = a.between

    def initial() -> z3.BoolRef:
        return valid([], between(loops, _Acc(0, 0, loops.cfg.usable_blocks, False, 0, 0, 0,
                                             0)))

    def scheduled() -> z3.BoolRef:
        acc, stopped = _fresh_acc(), z3.Bool(_tag("s"))
        return valid([wait_inv(loops, acc, stopped), *_rest(acc, [])], between(loops, acc))

    def release() -> z3.BoolRef:
        acc, req, eos = _fresh_acc(), _fresh_req(), z3.Bool(_tag("eos"))
        acc2, new = loops.release(acc, req, eos)
        return valid([between(loops, acc), *_rest(acc, [req])],
                     [between(loops, acc2), new.blocks >= 0])

    def arrive() -> z3.BoolRef:
        acc, req = _fresh_acc(), _fresh_req()
        acc2, new = loops.arrive(acc, req)
        return valid([between(loops, acc), *_rest(acc, [req])],
                     [between(loops, acc2), new.blocks >= 0])

    out += [("initial state", initial), ("schedule() ends", scheduled),
            ("release iteration", release), ("arrival iteration", arrive)]
    if a.state_claim is not None:
        state_claim = a.state_claim

        def end_claim() -> z3.BoolRef:
            acc = _fresh_acc()
            return valid([between(loops, acc), *_rest(acc, [])], state_claim(loops, acc))
        out.append(("conclusion after update_from_output", end_claim))
    return out


def _satisfiable(hyps: z3.BoolRef, timeout_s: float) -> z3.CheckSatResult:
    s = z3.Solver()
    s.set(random_seed=0, timeout=max(1, int(timeout_s * 1000)))
    s.add(hyps)
    return s.check()


def _prove(a: _Argument, timeout_s: float, kind: str) -> TheoremResult:
    """Discharge every obligation under each victim rule; an obligation whose hypotheses
    are unsatisfiable would be valid for nothing, so that is a failure too."""
    start = time.monotonic()
    count = 0
    for priority, latest in _VICTIM_RULES:
        loops = _Loops(priority, latest)
        rule = "PRIORITY" if priority else ("FCFS" if latest else "FCFS running[0]")
        for name, claim in _obligations(a, loops):
            obligation = claim()
            result = _valid(obligation, timeout_s - (time.monotonic() - start))
            if result == z3.unsat:
                result = _satisfiable(obligation.arg(0), timeout_s - (time.monotonic() - start))
                if result == z3.sat:
                    count += 1
                    continue
                result = "vacuous" if result == z3.unsat else result
            return TheoremResult(False, time.monotonic() - start,
                                 f"{name} ({rule} victim rule): {result}")
    return TheoremResult(True, time.monotonic() - start,
                         f"for every number of requests: {kind} ({count} obligations valid, "
                         "each with satisfiable hypotheses, under the FCFS, running[0] and "
                         "PRIORITY victim rules)")


def _budget_argument() -> _Argument:
    def inv(l_: _Loops, acc: _Acc) -> Any:
        budget = l_.cfg.token_budget
        return z3.And(acc.token_budget >= 0, acc.scheduled + acc.token_budget <= budget)

    def inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
        return it.n <= acc.token_budget

    def claim(l_: _Loops, acc: _Acc) -> Any:
        return z3.And(acc.scheduled <= l_.cfg.token_budget, acc.token_budget >= 0)
    return _Argument(inv, inner, claim, lambda l_: [l_.cfg.token_budget >= 0])


def budget_respected_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests and every budget B >= 0: the tokens scheduled in a
    step sum to at most B and the budget left is >= 0. Invariant of both loops: budget
    left >= 0 and scheduled + budget left <= B; within a RUNNING-loop iteration the
    offered n (`running_tokens`) stays <= the budget left (a PRIORITY victim's tokens
    only raise it) and a fitted request has n >= 1."""
    return _prove(_budget_argument(), timeout_s,
                  "1-induction over the running loop's iterations (and its inner "
                  "allocate-or-preempt loop's) and the waiting loop's iterations (base, "
                  "step, conclusion valid); invariant: budget left >= 0 and tokens "
                  "scheduled + budget left <= B")


def _running_argument() -> _Argument:
    def within(l_: _Loops, acc: _Acc) -> Any:
        return acc.running <= l_.cfg.max_num_seqs

    def claim(l_: _Loops, acc: _Acc) -> Any:
        return acc.running <= l_.cfg.max_num_seqs
    return _Argument(within, lambda *_: True, claim,
                     lambda l_: [l_.cfg.max_num_active_reqs <= l_.cfg.max_num_seqs,
                                 l_.cfg.max_num_seqs >= 0],
                     between=within)


def running_within_max_num_seqs_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: len(running) <= max_num_seqs at every step.
    Invariant over steps and every loop: RUNNING count <= max_num_seqs; only the WAITING
    loop adds a RUNNING request, and only while the count is below max_num_active_reqs
    <= max_num_seqs (premise); preemption, release and arrival never add one."""
    return _prove(_running_argument(), timeout_s,
                  "induction over steps, each step a 1-induction over the arrival, running "
                  "(with allocate-or-preempt), waiting and release loops' iterations "
                  "(base, step, conclusion valid); invariant: RUNNING count <= "
                  "max_num_seqs")


def _kv_argument() -> _Argument:
    def conserved(l_: _Loops, acc: _Acc) -> Any:
        return z3.And(acc.free + acc.blocks == l_.cfg.usable_blocks, acc.free >= 0)

    def inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
        cfg = l_.cfg
        need = blocks_needed(l_.ops, cfg, it.ncomp + it.n + cfg.num_lookahead_tokens,
                             sel.blocks)
        return z3.Implies(it.fits, need <= acc.free)

    def claim(l_: _Loops, acc: _Acc) -> Any:
        # kv_blocks_conserved at the observation point; shared_blocks is 0 without a
        # prefix cache (rules._cache_counts).
        return z3.And(acc.free >= 0, acc.free + acc.blocks == l_.cfg.usable_blocks)

    def end(l_: _Loops, acc: _Acc) -> Any:
        return acc.free <= l_.cfg.usable_blocks  # free_blocks_end
    return _Argument(conserved, inner, claim,
                     lambda l_: [l_.cfg.usable_blocks >= 0, l_.cfg.watermark_blocks >= 0],
                     between=conserved, state_claim=end)


def kv_blocks_conserved_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: free blocks + blocks held = usable blocks, free >= 0,
    and free_blocks_end <= usable, at every step. Invariant over steps and every loop:
    free + held = usable and free >= 0; within a RUNNING-loop iteration, an allocation
    that fitted still fits when the request is served (nothing is preempted after it)."""
    return _prove(_kv_argument(), timeout_s,
                  "induction over steps, each step a 1-induction over the arrival, running "
                  "(with allocate-or-preempt), waiting and release loops' iterations "
                  "(base, step, conclusion valid); invariant: free + held = usable, "
                  "free >= 0")


def _no_admission_argument() -> _Argument:
    def none_joined(l_: _Loops, acc: _Acc) -> Any:
        return acc.joined == 0

    def waiting(l_: _Loops, acc: _Acc, stopped: Any) -> Any:
        return z3.Implies(acc.any_preempted, z3.And(stopped, acc.joined == 0))

    def claim(l_: _Loops, acc: _Acc) -> Any:
        return z3.Implies(acc.any_preempted, acc.joined == 0)
    return _Argument(none_joined, lambda *_: True, claim, lambda l_: [], waiting=waiting)


def no_admission_after_preemption_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: no request is admitted or resumed in a step that
    preempted. Invariants: through the RUNNING loop nobody has joined (preemption only
    makes a RUNNING request PREEMPTED); through the WAITING loop, preempted implies
    stopped and nobody joined (stopped starts as preempted, scheduler.py:900)."""
    return _prove(_no_admission_argument(), timeout_s,
                  "1-induction over the running loop's iterations (nobody joined) and the "
                  "waiting loop's iterations (preempted implies stopped and nobody joined) "
                  "(base, step, conclusion valid)")


def _plain_sync(family: Family) -> bool:
    base = family.base
    return not (base.enable_prefix_caching or base.speculative_method
                or base.async_scheduling)


def _budget_nonnegative(family: Family) -> bool:
    if family.base.max_num_scheduled_tokens is not None:
        return family.base.max_num_scheduled_tokens >= 0
    return field_range(family, "max_num_batched_tokens")[0] >= 0


PLAIN_SYNC = Premise(
    "plain_synchronous_scheduler",
    "prefix caching, speculative decoding and async scheduling are off (the loop bodies "
    "proved are the synchronous Scheduler's without them)", _plain_sync)
BUDGET_NONNEGATIVE = Premise(
    "token_budget_nonnegative", "the token budget is >= 0 in every config of the family",
    _budget_nonnegative)
SEATS_NONNEGATIVE = Premise(
    "max_num_seqs_nonnegative", "max_num_seqs is >= 0 in every config of the family",
    lambda f: field_range(f, "max_num_seqs")[0] >= 0)
POOL_NONEMPTY = Premise(
    "num_gpu_blocks_positive", "num_gpu_blocks is >= 1 (block 0 is the null block) in every "
    "config of the family", lambda f: field_range(f, "num_gpu_blocks")[0] >= 1)
WATERMARK_NONNEGATIVE = Premise(
    "watermark_nonnegative", "the watermark is >= 0 (or its check is switched off)",
    lambda f: f.base.watermark >= 0 or not f.base.rules.watermark_check)
PREEMPTION_GATE = Premise(
    "preemption_gate_on", "the rule 'no admission in a step that preempted' "
    "(scheduler.py:900) is not switched off (rules.preemption_gate)",
    lambda f: f.base.rules.preemption_gate)


# `states`: the fingerprint (checker.methods.theorems.definition) of the catalogue's
# definition each theorem was written against; tests/test_theorems_unbounded.py fails when a
# definition changes, and until the theorem is re-read and the new fingerprint pinned, the
# job does not use it.
THEOREMS: dict[str, Theorem] = {
    # No premise: the proof ranges over every budget B >= 1 (the token budget, whichever
    # field sets it), every input budget and threshold, and every mix of running requests.
    "decodes_exhaust_budget": Theorem(decodes_exhaust_budget_unbounded,
                                      states="53f1ed6e962fa60b"),
    "exhausting_decodes_fill_max_num_seqs": Theorem(
        exhausting_decodes_fill_max_num_seqs_unbounded, (BUDGET_COVERS_SEATS,
                                                         ACTIVE_WITHIN_SEATS),
        states="fdb1d19823172fef"),
    # For every number of requests (loop invariants; docs/parameterised_proofs.md).
    "budget_respected": Theorem(budget_respected_unbounded,
                                (PLAIN_SYNC, BUDGET_NONNEGATIVE), states="0e6d49755612bc27"),
    "running_within_max_num_seqs": Theorem(
        running_within_max_num_seqs_unbounded,
        (PLAIN_SYNC, ACTIVE_WITHIN_SEATS, SEATS_NONNEGATIVE), states="015c2fb3f8cffee1"),
    "kv_blocks_conserved": Theorem(kv_blocks_conserved_unbounded,
                                   (PLAIN_SYNC, POOL_NONEMPTY, WATERMARK_NONNEGATIVE),
                                   states="68fea0a56159ef19"),
    "no_admission_after_preemption": Theorem(no_admission_after_preemption_unbounded,
                                             (PLAIN_SYNC, PREEMPTION_GATE),
                                             states="4801bd76f453ed0c"),
}
