"""The loop-invariant framework of `vllm_v1.py`'s theorems for every number of
requests.


A step of vLLM V1 runs loops over ALL requests: arrivals (scheduler.py:2616-2634), the
RUNNING loop with its inner allocate-or-preempt loop (657-887), the WAITING loop
(899-1180) and the release of finished requests in update_from_output (2220-2240). The
proofs below are 1-inductions over those loops' iterations. The state of an induction is
the loops' accumulators over all requests (`_Acc`: budgets left, free blocks, and sums
and counts over every request); an iteration touches at most two requests (the one it
serves and a preemption victim), so it is evaluated on the rules' own functions over a
two-slot `_Work` whose slots are fresh requests, the rest of the requests entering only
through the accumulators ("the rest", constrained only by being a sum of per-request
values that the per-request facts `_wf` keep >= 0; each obligation proves `_wf` again
for the requests it touches, so those facts are inductive as well). Properties of each
request (or each two) add a per-request invariant (and a pairwise one): every iteration
is checked on the requests it touches and two unchanged bystanders, so the invariants
hold for every request (and every two), and the conclusion is the catalogue's own
definition on the rules' observation of two arbitrary requests.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import z3

from checker.methods.theorems import TheoremResult, discharge, valid
from model.core.ops import SymbolicOps
from model.core.rule_parts import select_min
from model.core.types import SlotSpec, Step
from model.vllm.rules import (
    _arrive,
    _preempt,
    _queue_key,
    _serve,
    _update,
    _update_async,
    _victim,
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
    InFlight,
    RuleConfig,
    SchedState,
    SlotState,
)
from properties import catalogue

_FRESH = itertools.count()
# The FCFS victim rule, its ablation (running[0]) and PRIORITY: _preempt gives a victim's
# tokens back under the last two only (rules.py:149-156, scheduler.py:796-832).
_VICTIM_RULES = ((False, True), (False, False), (True, True))  # (priority, victim_latest)


_REQ_INTS = ("status", "before", "ncomp", "blocks", "scheduled", "prompt", "out", "ncomp0",
             "rank", "wkey", "rkey", "prio", "idx", "hit")
_REQ_BOOLS = ("pre", "vis", "upd")


@dataclass(frozen=True, slots=True)
class _Req:
    """One request as an iteration sees it: its status now and at the step's start, its
    num_computed_tokens, blocks held, tokens scheduled in this step, prompt_len and
    num_output_tokens (num_tokens is their sum), num_computed_tokens at the step's start,
    serve_rank, wait_key, run_key, priority, arrival index (its slot index, arrival_time),
    the prefix-cache hit it was admitted with in this step (the rules' `prefix_hit`),
    preempted and visited in this step, and (a ghost) whether update_from_output has
    processed it yet."""

    status: Any
    before: Any
    ncomp: Any
    blocks: Any
    scheduled: Any
    prompt: Any
    out: Any
    ncomp0: Any
    rank: Any
    wkey: Any
    rkey: Any
    prio: Any
    idx: Any
    hit: Any
    pre: Any
    vis: Any
    upd: Any

    @property
    def ntok(self) -> Any:
        """num_tokens, by the rules' `num_tokens`."""
        return num_tokens(self.spec(0, 0), SlotState(num_output_tokens=self.out))

    def spec(self, max_tokens: Any, arrival_step: Any) -> SlotSpec:
        """The request's fixed parameters."""
        return SlotSpec(self.prompt, max_tokens, arrival_step, self.prio)


@dataclass(frozen=True, slots=True)
class _Acc:
    """The loops' accumulators over every request: token and input budget left, free
    blocks, preempted-in-this-step, and over all requests the tokens scheduled, the blocks
    held, the number RUNNING and the number admitted or resumed in this step (joined); the
    rules' counters served, wait_head, wait_tail and next_run_key; and three ghosts:
    wait_head at the step's start (head0), served when the WAITING loop starts (mark), and
    the run_key of the RUNNING loop's current request (cut)."""

    token_budget: Any
    input_budget: Any
    free: Any
    any_preempted: Any
    scheduled: Any
    blocks: Any
    running: Any
    joined: Any
    served: Any = 0
    head: Any = 0
    tail: Any = 1
    nrk: Any = 0
    head0: Any = 0
    mark: Any = 0
    cut: Any = 0
    inuse: Any = 0


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


@dataclass(frozen=True, slots=True)
class _Offer:
    """A WAITING-loop iteration up to its allocation (`_Loops.offer`): its step scratch,
    whether it is active, the request's num_tokens, its prefix hit (blocks, the evictable
    ones, tokens, and what is known of them), the tokens offered and whether they are too
    long for the budget with chunked prefill off."""

    w: _Work
    active: Any
    total: Any
    hit_blocks: Any
    evictable: Any
    computed: Any
    hit_hyps: list[z3.BoolRef]
    n: Any
    too_long: Any


def _tag(kind: str) -> str:
    return f"{kind}{next(_FRESH)}"


def _fresh_req() -> _Req:
    t = _tag("req")
    return _Req(**{f: z3.Int(f"{t}.{f}") for f in _REQ_INTS},
                **{f: z3.Bool(f"{t}.{f}") for f in _REQ_BOOLS})


_ACC_INTS = ("token_budget", "input_budget", "free", "scheduled", "blocks", "running",
             "joined", "served", "head", "tail", "nrk", "head0", "mark", "cut", "inuse")


def _fresh_acc() -> _Acc:
    t = _tag("acc")
    return _Acc(any_preempted=z3.Bool(f"{t}.pre"),
                **{f: z3.Int(f"{t}.{f}") for f in _ACC_INTS})


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
    return [r.blocks >= 0, r.scheduled >= 0, r.ntok >= 1, r.prompt >= 1,
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
    return replace(acc, token_budget=w.token_budget, input_budget=w.input_budget,
                   free=w.free, any_preempted=w.any_preempted,
                   scheduled=acc.scheduled + moved(lambda r: r.scheduled),
                   blocks=acc.blocks + moved(lambda r: r.blocks),
                   running=acc.running + moved(lambda r: z3.If(_running(r), 1, 0)),
                   joined=acc.joined + moved(lambda r: z3.If(_joined(r), 1, 0)),
                   served=w.served, head=w.wait_head, nrk=w.next_run_key)


class _ByIndex:
    """Request specs looked up by a request's symbolic arrival index, for the rules'
    `_queue_key` (which reads `specs[i]` for slot index i)."""

    def __init__(self, pairs: Sequence[tuple[Any, SlotSpec]]) -> None:
        self.pairs = list(pairs)

    def __getitem__(self, i: Any) -> SlotSpec:
        return next(spec for idx, spec in self.pairs if idx.eq(i))


class _Loops:
    """The loop bodies of one step, over a RuleConfig whose fields are all z3 constants
    (every budget, pool, watermark, threshold, max_model_len, block size), with
    speculative decoding and async scheduling off (premises in vllm_v1.py).

    `cached`: prefix caching on, abstracted (the rules' symbolic pool stops at a few
    blocks, cache_rules.py): a lookup's result is any hit the exact lookup could return
    (`_abstract_hit`), and the free-block count, which shared and evictable blocks make
    depend on the whole pool, is a fresh value after every iteration that moves it. Every
    behaviour of the exact rules is one of the abstraction's, so an argument proved on it
    holds with the cache; an argument that reads the free count cannot be proved on it
    (kv_blocks_conserved is proved without the cache only). `capped`: the hit leaves at
    least one token to compute (the rules' `cap_prefix_hit`); without it the abstraction
    allows a hit of the whole sequence, so a proof that does not need the cap holds
    without it too.

    `asynchronous`: the AsyncScheduler, its in-flight state abstracted: each request's
    output placeholders, tokens in flight, stale share and the previous schedule's output
    (state.InFlight) are any values wherever the rules read them (the RUNNING loop's
    offer and its last-token guard, the WAITING loop's skip of a request with stale
    output, update_from_output's delivery), so an argument proved here holds for every
    in-flight state the engine can reach."""

    def __init__(self, priority: bool, victim_latest: bool, cached: bool = False,
                 capped: bool = False, asynchronous: bool = False) -> None:
        self.cached, self.capped, self.asynchronous = cached, capped, asynchronous
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
            block_size=bs, policy_priority=priority, victim_latest=victim_latest,
            async_scheduling=asynchronous)  # type: ignore[arg-type]

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
            blocks=[r.blocks for r in reqs], run_key=[r.rkey for r in reqs],
            wait_key=[r.wkey for r in reqs], num_preemptions=ints("num_preemptions"),
            scheduled=[r.scheduled for r in reqs], serve_rank=[r.rank for r in reqs],
            preempted=[r.pre for r in reqs], visited=[r.vis for r in reqs], free=acc.free,
            token_budget=acc.token_budget, input_budget=acc.input_budget,
            next_run_key=acc.nrk, wait_head=acc.head, served=acc.served,
            any_preempted=acc.any_preempted,
            prefix_hit=[self.hit(r) for r in reqs],
            **(self._in_flight(t, n) if self.asynchronous else {}))

    @staticmethod
    def _in_flight(t: str, n: int) -> dict[str, list[Any]]:
        """The AsyncScheduler's per-request scratch (rules.py step): any values."""
        return {f: [z3.Int(f"{t}.{f}{i}") for i in range(n)]
                for f in ("placeholders", "in_flight", "stale")}

    def hit(self, r: _Req) -> Any:
        """The request's prefix hit in this step: 0 without the cache."""
        return r.hit if self.cached else z3.IntVal(0)

    def moved(self, old: _Acc, acc: _Acc, released: Sequence[tuple[Any, Any]] = (),
              held: Any = 0) -> _Acc:
        """The accumulators after an iteration (`acc`, the cache-free accounting's) from
        `old`. With the abstracted cache the pool is the count of blocks in use (ref_cnt
        > 0; `inuse`) beside the free count: the table positions an allocation adds join
        those in use, less the hit blocks another request already `held` (the free count
        is the rules' own, which take the fresh and evictable ones from it); a request that gives
        up d table positions (`released`: its blocks before and after) frees any f of
        them with 0 <= f <= d, f <= the blocks in use, and d - f <= the shared references
        (a position not freed names a block another request holds; block_pool.py:774-805,
        kv_cache_manager.py:620-629). `release_refines_abstract_freeing` checks that on
        the exact release."""
        if not self.cached:
            return acc
        if not released:  # an allocation, or nothing moved
            return replace(acc, inuse=old.inuse + acc.blocks - old.blocks - held)
        t = _tag("freed")
        given = [z3.If(b - a > 0, b - a, 0) for b, a in released]
        freed = [z3.Int(f"{t}{i}") for i in range(len(released))]
        self.ops.definitions += [*[z3.And(f >= 0, f <= d) for f, d in zip(freed, given,
                                                                          strict=True)],
                                 sum(freed) <= old.inuse,
                                 sum(given) - sum(freed) <= old.blocks - old.inuse]
        return replace(acc, free=old.free + sum(freed), inuse=old.inuse - sum(freed))

    @staticmethod
    def after(w: _Work, reqs: Sequence[_Req]) -> list[_Req]:
        """The touched requests as the iteration left them."""
        return [replace(r, status=w.status[i], ncomp=w.ncomp[i], blocks=w.blocks[i],
                        scheduled=w.scheduled[i], rank=w.serve_rank[i], wkey=w.wait_key[i],
                        rkey=w.run_key[i], hit=w.prefix_hit[i], pre=w.preempted[i],
                        vis=w.visited[i])
                for i, r in enumerate(reqs)]

    def step_start(self, state: _Acc) -> _Acc:
        """The accumulators when schedule() starts (rules.py step, scheduler.py:611-614):
        both budgets full, nothing scheduled, preempted or joined; the free blocks, held
        blocks and RUNNING count are the state's."""
        cfg = self.cfg
        return replace(state, token_budget=cfg.token_budget,
                       input_budget=(cfg.max_num_batched_tokens if cfg.separate_input_budget
                                     else cfg.token_budget),
                       any_preempted=False, scheduled=0, joined=0, served=0,
                       head0=state.head, cut=0)

    @staticmethod
    def start(r: _Req) -> _Req:
        """A request when schedule() starts (rules.py step, the `_Work` it builds): its
        status and num_computed_tokens are the step's `before`, nothing scheduled,
        preempted or visited, serve_rank 0."""
        return replace(r, before=r.status, ncomp0=r.ncomp, scheduled=0, rank=0, hit=0,
                       pre=False, vis=False, upd=False)

    def pick(self, acc: _Acc, sel: _Req, stopped: Any, eligible: Any,
             others: Sequence[_Req] = ()) -> tuple[_Acc, _Iter, list[z3.BoolRef]]:
        """A RUNNING-loop iteration starts (rules.py:218-231; scheduler.py:658-661,
        703-721): `sel` is the next RUNNING request not yet visited, if `eligible`: by the
        rules' `select_min`, no other unvisited RUNNING request (of `others`) has a smaller
        run_key. The ghost `cut` becomes its run_key."""
        ops, cfg = self.ops, self.cfg
        active = ops.and_(ops.not_(stopped), acc.token_budget > 0, eligible,
                          acc.input_budget > cfg.draft_slots)
        # Async: what it lacks counts its output placeholders, any number here, and the
        # last-token guard (rules.py:230-233, scheduler.py:664-677) is any condition.
        t = _tag("flight")
        ph = z3.Int(f"{t}.placeholders") if self.asynchronous else 0
        n = running_tokens(ops, cfg, sel.ntok + ph - sel.ncomp, sel.ncomp, self.thr,
                           acc.token_budget, acc.input_budget)
        wants = ops.and_(active, n > 0)
        if self.asynchronous:
            wants = ops.and_(wants, z3.Bool(f"{t}.not_last"))
        unvisited = [z3.And(_running(r), z3.Not(r.vis)) for r in (sel, *others)]
        first = select_min(ops, unvisited, [(r.rkey,) for r in (sel, *others)])[0]
        return (replace(acc, cut=z3.If(active, sel.rkey, acc.cut)),
                _Iter(sel.ncomp, n, active, wants, False, False, stopped),
                [z3.Implies(eligible, z3.And(unvisited[0], first))])

    def attempt(self, acc: _Acc, sel: _Req, vic: _Req, it: _Iter, hit_sel: Any, hit_vic: Any,
                others: Sequence[_Req] = ()
                ) -> tuple[_Acc, _Req, _Iter, list[z3.BoolRef], list[_Req]]:
        """One iteration of the inner allocate-or-preempt loop (rules.py:236-251,
        scheduler.py:777-844): allocation succeeds or the victim, a RUNNING request (the
        selected one or `vic`), is preempted by the rules' `_preempt`. Under PRIORITY which
        one is left arbitrary; under FCFS and its running[0] ablation the victim is the
        one the rules' `_victim` picks among these requests and `others` (the last or
        first run_key), as it is among all requests."""
        ops, cfg = self.ops, self.cfg
        among = self.work(acc, [sel, vic, *others])
        chosen = ([True, True] if cfg.policy_priority
                  else _victim(ops, cfg, among, [])[:2])
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
                z3.Implies(hit_vic, _running(vic)), z3.Implies(hit_sel, chosen[0]),
                z3.Implies(hit_vic, chosen[1])]
        released = [(r.blocks, n.blocks) for r, n in zip([sel, vic], new, strict=True)]
        return (self.moved(acc, _regather(acc, [sel, vic], new, w), released), new[0],
                replace(it, fits=fits, done=done), hyps, new)

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
        w.visited[0] = ops.or_(w.visited[0], it.active)  # rules.py:264-265
        new = self.after(w, [sel, other])
        return self.moved(acc, _regather(acc, [sel, other], new, w)), stopped, new

    def waiting_start(self, acc: _Acc) -> Any:
        """The WAITING loop's initial stopped (rules.py:293, scheduler.py:900)."""
        return acc.any_preempted if self.cfg.preemption_gate else False

    def offer(self, acc: _Acc, sel: _Req, other: _Req, stopped: Any, eligible: Any
              ) -> _Offer:
        """A WAITING-loop iteration up to its allocation (rules.py:294-333;
        scheduler.py:912-924, 1118-1169) without speculative decoding: whether it is
        active, the prefix hit and the tokens offered. The arithmetic is hand-written, a
        copy of rules.py's with no padding (`_padding` gives (False, False) when
        num_spec_tokens is 0) and the hit `_abstract_hit` (`hit_blocks = evictable =
        computed = 0` without a cache). `sel` is the queue's head, if `eligible`."""
        ops, cfg, thr = self.ops, self.cfg, self.thr
        w = self.work(acc, [sel, other])
        active = ops.and_(ops.not_(stopped), w.token_budget > 0,
                          w.input_budget > cfg.draft_slots, eligible,
                          acc.running < cfg.max_num_active_reqs)
        total = sel.ntok
        hit_blocks, evictable, computed, hit_hyps = self._abstract_hit(total)
        req_budget = ops.min(w.token_budget, w.input_budget - cfg.draft_slots)  # 1118
        lacks = total - computed  # 1129
        n = ops.ite(ops.and_(thr > 0, thr < lacks), thr, lacks)  # 1155-1156
        too_long = ops.and_(ops.not_(cfg.enable_chunked_prefill), n > req_budget)  # 1160
        return _Offer(w, active, total, hit_blocks, evictable, computed, hit_hyps,
                      ops.min(n, req_budget), too_long)  # 1169

    def admit(self, acc: _Acc, sel: _Req, other: _Req, stopped: Any, eligible: Any
              ) -> tuple[_Acc, Any, list[z3.BoolRef], list[_Req]]:
        """One WAITING-loop iteration (rules.py:294-352; scheduler.py:912-924, 1118-1170,
        1259-1282, 1343-1369) without speculative decoding: its `offer` (crash stays
        False: `offers_tokens` proves the offer >= 1 where the cap holds), the blocks from
        the rules' `blocks_needed`, the accounting from the rules' `_serve`."""
        ops, cfg = self.ops, self.cfg
        o = self.offer(acc, sel, other, stopped, eligible)
        w, n, total, hit_blocks, evictable = o.w, o.n, o.total, o.hit_blocks, o.evictable
        computed, active, too_long = o.computed, o.active, o.too_long
        num_running = acc.running
        wm = ops.ite(num_running > 0, cfg.watermark_blocks, 0)  # kv_cache_manager 509-516
        full_need = blocks_needed(ops, cfg, total, hit_blocks) + evictable
        full_ok = ops.or_(ops.not_(cfg.scheduler_reserve_full_isl), full_need + wm <= w.free)
        fresh = blocks_needed(ops, cfg, computed + n + cfg.num_lookahead_tokens, hit_blocks)
        need = fresh + evictable
        ok = ops.and_(active, ops.not_(too_long), full_ok, need + wm <= w.free)
        _serve(ops, cfg, w, [True, False], ok, n, need, fresh + hit_blocks)
        w.status[0] = ops.ite(ok, RUNNING, w.status[0])  # 1343-1369: RUNNING, appended
        w.run_key[0] = ops.ite(ok, w.next_run_key, w.run_key[0])  # rules.py:348, 352
        if self.cached:  # rules.py:346-350: it starts from its hit
            w.ncomp[0] = ops.ite(ok, computed, w.ncomp[0])
            w.prefix_hit[0] = ops.ite(ok, computed, w.prefix_hit[0])
        w.next_run_key = ops.ite(ok, w.next_run_key + 1, w.next_run_key)
        stopped = ops.or_(stopped, ops.not_(ok))  # every failure ends the loop
        new = self.after(w, [sel, other])
        hyps = [z3.Implies(eligible, _is(sel.status, WAITING, PREEMPTED)), *o.hit_hyps]
        held = ops.ite(ok, hit_blocks - evictable, 0)  # hit blocks another request holds
        return self.moved(acc, _regather(acc, [sel, other], new, w), held=held), stopped, hyps, new

    def _abstract_hit(self, total: Any) -> tuple[Any, Any, Any, list[z3.BoolRef]]:
        """The prefix hit of a request of `total` tokens as (hit blocks, evictable hit
        blocks, computed tokens, what is known of them). Without the cache: 0, 0, 0. With
        it, any hit the exact lookup (cache_rules.lookup, over any pool) can return: whole
        blocks, each evictable or not, and at most num_tokens tokens, num_tokens - 1 when
        `capped` (kv_cache_manager.py:289-300; the premise `prefix_hit_capped`), a whole
        number of blocks (c // block_size x block_size = c). That the tokens are the hit
        blocks times block_size is left out (a weaker fact, so still sound);
        `lookup_refines_abstract_hit` proves the exact lookup within these facts."""
        if not self.cached:
            return 0, 0, 0, []
        t = _tag("hit")
        blocks, evictable, computed = z3.Ints(f"{t}.blocks {t}.evictable {t}.computed")
        bs = self.cfg.block_size
        return blocks, evictable, computed, [
            blocks >= 0, evictable >= 0, evictable <= blocks, computed >= 0,
            computed <= total - (1 if self.capped else 0),
            # Whole blocks, stated only where a block has a size (the refinement's sizes).
            z3.Implies(bs >= 1, self.ops.floordiv(computed, bs) * bs == computed)]

    def arrive(self, acc: _Acc, req: _Req) -> tuple[_Acc, _Req]:
        """One request's arrival, by the rules' `_arrive` on a one-slot state
        (rules.py _arrive, scheduler.py:2616-2634)."""
        t = z3.Int(_tag("t"))
        slot = SlotState(status=req.status, num_computed_tokens=req.ncomp, blocks=req.blocks,
                         wait_key=req.wkey, run_key=req.rkey)
        state = SchedState(slots=(slot,), free_blocks=acc.free, wait_tail=acc.tail)
        after = _arrive(self.ops, [req.spec(*z3.Ints(f"{t}.max_tokens {t}.arrival"))], state,
                        t)
        s = after.slots[0]
        new = replace(req, status=s.status, before=s.status, ncomp=s.num_computed_tokens,
                      blocks=s.blocks, wkey=s.wait_key)
        w = self.work(acc, [req])
        w.free = after.free_blocks
        return replace(_regather(acc, [req], [new], w), tail=after.wait_tail), new

    def _one_step(self, acc: _Acc, reqs: Sequence[_Req], eos: Sequence[Any]
                  ) -> tuple[SchedState, Step, _Work]:
        """The rules' `_update` on a step of these requests, as schedule() left them."""
        t = _tag("upd")
        specs = [r.spec(z3.Int(f"{t}.max_tokens{i}"), z3.Int(f"{t}.arrival{i}"))
                 for i, r in enumerate(reqs)]
        before = tuple(SlotState(status=r.before, num_computed_tokens=r.ncomp0,
                                 num_output_tokens=r.out, blocks=r.blocks, run_key=r.rkey,
                                 wait_key=r.wkey, in_flight=self._flight(f"{t}.{i}"))
                       for i, r in enumerate(reqs))
        state = SchedState(slots=before, free_blocks=acc.free, next_run_key=acc.nrk,
                           wait_head=acc.head, wait_tail=acc.tail)
        w = self.work(acc, reqs)
        update = _update_async if self.asynchronous else _update
        nxt, step = update(self.ops, self.cfg, specs, state, before,
                           [num_tokens(sp, b) for sp, b in zip(specs, before, strict=True)],
                           [z3.Bool(f"{t}.held{i}") for i in range(len(reqs))], w, eos)
        return nxt, step, w

    def _flight(self, t: str) -> tuple[InFlight, ...]:
        """A request's in-flight state as update_from_output reads it: none when
        synchronous; under async any values (the previous schedule's output included)."""
        if not self.asynchronous:
            return ()
        ints = ("placeholders", "tokens", "stale", "pending_tokens", "pending_rank",
                "pending_spec", "pending_accepted")
        bools = ("prefill_chunk", "pending_sample", "pending_eos")
        return (InFlight(**{f: z3.Int(f"{t}.{f}") for f in ints},
                         **{f: z3.Bool(f"{t}.{f}") for f in bools}),)

    def release(self, acc: _Acc, req: _Req, eos: Any) -> tuple[_Acc, _Req]:
        """One request's turn in update_from_output, by the rules' `_update` on a one-slot
        step whose free blocks are the release loop's running total (rules.py _update:
        free_end accumulates each finished request's blocks; scheduler.py:2220-2240)."""
        nxt, _, w = self._one_step(acc, [req], [eos])
        s = nxt.slots[0]
        new = replace(req, status=s.status, ncomp=s.num_computed_tokens, blocks=s.blocks,
                      out=s.num_output_tokens, rkey=s.run_key, wkey=s.wait_key, upd=True)
        w.free = nxt.free_blocks
        return self.moved(acc, _regather(acc, [req], [new], w), [(req.blocks, new.blocks)]), new

    def observe(self, acc: _Acc, reqs: Sequence[_Req], num_requests: Any) -> Step:
        """The step's observation of these requests (rules.py `_update`, `_slot_obs`).
        Under PRIORITY their queue keys are the rules' `_queue_key` over `num_requests`
        slots, each request at its arrival index."""
        _, step, w = self._one_step(acc, reqs, [z3.Bool(_tag("eos")) for _ in reqs])
        slots = [replace(o, arrival_time=r.idx) for o, r in zip(step.slots, reqs, strict=True)]
        if self.cfg.policy_priority:
            specs = _ByIndex([(r.idx, r.spec(0, 0)) for r in reqs])
            slots = [replace(o, queue_key=_queue_key(self.cfg, specs, w, r.idx, num_requests))
                     for o, r in zip(slots, reqs, strict=True)]
        step = replace(step, slots=tuple(slots))
        if not self.cached:
            return step
        # The pool's counts depend on every request's blocks and the pool's history: any
        # value, so a property reading them is not proved on the abstraction.
        t = _tag("pool")
        return replace(step, **{f: z3.Int(f"{t}.{f}") for f in (
            "free_blocks", "free_blocks_end", "shared_blocks", "cached_blocks",
            "evictable_blocks")})


Invariant = Callable[[_Loops, _Acc], Any]
InnerInvariant = Callable[[_Loops, _Acc, _Req, _Iter], Any]
# A per-request invariant (loops, accumulators, request, stage). The stage is "running"
# (the RUNNING loop and its inner loop), "waiting" (the WAITING loop, and schedule() has
# ended) or "between" (update_from_output has processed the request; the arrivals).
Each = Callable[[_Loops, _Acc, _Req, str], Any]
Pair = Callable[[_Loops, _Acc, _Req, _Req], Any]


@dataclass(frozen=True, slots=True)
class _Argument:
    """A loop-invariant argument: `inv` over the accumulators at the RUNNING loop's
    iteration boundaries, `inner` within one of its iterations (across the inner
    allocate-or-preempt loop), `waiting` over the WAITING loop (given its stopped flag;
    default `inv`), the `claim` at the step's observation point (after both loops), and,
    for an induction over steps, `between` over the state between steps (kept by the
    release and arrival loops) and `state_claim` after update_from_output.

    With `each`, a per-request invariant, and `pair`, one over two distinct requests:
    every iteration is checked on the requests it touches and two bystanders (which it
    leaves unchanged while the accumulators move), so they hold for every request and
    every two; `observed` names the catalogue property then evaluated, as the conclusion,
    on the rules' observation of two arbitrary requests (the four properties so proved
    are conjunctions over one request or over two distinct requests). `fixed`: facts of
    a request's fixed parameters that the workload's contract gives (assumed of the
    initial state's requests; `each` must state them to keep them)."""

    inv: Invariant
    inner: InnerInvariant
    claim: Invariant
    hyps: Callable[[_Loops], list[z3.BoolRef]]
    waiting: Callable[[_Loops, _Acc, Any], Any] | None = None
    between: Invariant | None = None
    state_claim: Invariant | None = None
    each: Each | None = None
    pair: Pair | None = None
    observed: str | None = None
    side: Callable[[_Loops], list[tuple[str, Callable[[], z3.BoolRef]]]] | None = None
    fixed: Callable[[_Loops, _Req], Any] | None = None


def _bool(x: Any) -> z3.BoolRef:
    return x if isinstance(x, z3.BoolRef) else z3.BoolVal(bool(x))


def _initial_req() -> _Req:
    """A request slot in the initial state (rules' `SchedState.initial`: `SlotState()`)."""
    s = SlotState()
    return replace(_fresh_req(), status=s.status, ncomp=s.num_computed_tokens,
                   out=s.num_output_tokens, blocks=s.blocks, rkey=s.run_key, wkey=s.wait_key)


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

    def bystanders() -> list[_Req]:
        return [_fresh_req() for _ in range(2 if a.each is not None else 0)]

    def form(acc: _Acc, r: _Req, stage: str) -> Any:
        assert a.each is not None
        if stage == "update":  # update_from_output processes the requests one by one
            return z3.If(r.upd, _bool(a.each(loops, acc, r, "between")),
                         _bool(a.each(loops, acc, r, "waiting")))
        if stage == "between":
            return a.each(loops, acc, r, stage)
        return z3.And(z3.Not(r.upd), _bool(a.each(loops, acc, r, stage)))

    def each(acc: _Acc, reqs: Sequence[_Req], stage: str) -> list[Any]:
        if a.each is None:
            return []
        out = [form(acc, r, stage) for r in reqs]
        if a.pair is not None:
            out += [a.pair(loops, acc, p, q) for p in reqs for q in reqs if p is not q]
        return out

    def rest(acc: _Acc, reqs: Sequence[_Req]) -> list[z3.BoolRef]:
        return _rest(acc, reqs) if reqs else []

    def step_start() -> z3.BoolRef:
        state, reqs = _fresh_acc(), bystanders()
        acc = loops.step_start(state)
        pre = [a.between(loops, state)] if a.between else []
        return valid([*pre, state.blocks >= 0, state.running >= 0, *rest(state, reqs),
                      *each(state, reqs, "between")],
                     [a.inv(loops, acc), *each(acc, [loops.start(r) for r in reqs],
                                               "running")])

    def inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
        # Every argument's: an allocation fits only for a request that wants tokens,
        # n >= 1, and it ends the inner loop.
        return z3.And(z3.Implies(it.fits, z3.And(it.wants, it.done)),
                      z3.Implies(it.wants, it.n >= 1), a.inner(l_, acc, sel, it))

    def pick() -> z3.BoolRef:
        acc, sel, _, stopped, eligible = fresh_pair()
        others = bystanders()
        acc2, it, hyps = loops.pick(acc, sel, stopped, eligible, others)
        return valid([a.inv(loops, acc), *_rest(acc, [sel, *others]), *hyps,
                      *each(acc, [sel, *others], "running")],
                     [inner(loops, acc2, sel, it), *each(acc2, [sel, *others], "running")])

    def attempt() -> z3.BoolRef:
        acc, sel, vic, it = _fresh_acc(), _fresh_req(), _fresh_req(), _fresh_iter()
        others = bystanders()
        t = _tag("victim")
        hs, hv = z3.Bools(f"{t}.sel {t}.vic")
        acc2, sel2, it2, hyps, new = loops.attempt(acc, sel, vic, it, hs, hv, others)
        return valid([a.inv(loops, acc), inner(loops, acc, sel, it),
                      *_rest(acc, [sel, vic, *others]), *hyps,
                      *each(acc, [sel, vic, *others], "running")],
                     [a.inv(loops, acc2), inner(loops, acc2, sel2, it2), *_wf_kept(new),
                      *each(acc2, [*new, *others], "running")])

    def serve() -> z3.BoolRef:
        acc, sel, other, it = _fresh_acc(), _fresh_req(), _fresh_req(), _fresh_iter()
        others = bystanders()
        acc2, _, new = loops.serve(acc, sel, other, it)
        return valid([a.inv(loops, acc), inner(loops, acc, sel, it),
                      *_rest(acc, [sel, other, *others]),
                      *each(acc, [sel, other, *others], "running")],
                     [a.inv(loops, acc2), *_wf_kept(new),
                      *each(acc2, [*new, *others], "running")])

    def waiting_base() -> z3.BoolRef:
        acc, reqs = _fresh_acc(), bystanders()
        acc2 = replace(acc, mark=acc.served)  # the ghost: served when the loop starts
        return valid([a.inv(loops, acc), *rest(acc, reqs), *each(acc, reqs, "running")],
                     [wait_inv(loops, acc2, loops.waiting_start(acc)),
                      *each(acc2, reqs, "waiting")])

    def admit() -> z3.BoolRef:
        acc, sel, other, stopped, eligible = fresh_pair()
        others = bystanders()
        acc2, stopped2, hyps, new = loops.admit(acc, sel, other, stopped, eligible)
        return valid([wait_inv(loops, acc, stopped), *_rest(acc, [sel, other, *others]),
                      *hyps, *each(acc, [sel, other, *others], "waiting")],
                     [wait_inv(loops, acc2, stopped2), *_wf_kept(new),
                      *each(acc2, [*new, *others], "waiting")])

    def claim() -> z3.BoolRef:
        acc, stopped, reqs = _fresh_acc(), z3.Bool(_tag("s")), bystanders()
        hyps = [wait_inv(loops, acc, stopped), *_rest(acc, reqs), *each(acc, reqs, "waiting")]
        concl = [a.claim(loops, acc)]
        if a.observed is not None:
            # Any number of requests, these two at distinct arrival indices among them.
            n = z3.Int(_tag("num_requests"))
            hyps += [z3.Distinct(*[r.idx for r in reqs]),
                     *[z3.And(r.idx >= 0, r.idx < n) for r in reqs]]
            step = loops.observe(acc, reqs, n)
            concl.append(catalogue.get(a.observed).holds(loops.ops, [step], 0))
        return valid(hyps, concl)

    out: list[tuple[str, Callable[[], z3.BoolRef]]] = [
        ("base (schedule() starts)", step_start), ("running-loop iteration starts", pick),
        ("allocate-or-preempt iteration", attempt), ("running-loop iteration ends", serve),
        ("waiting loop starts", waiting_base), ("waiting-loop iteration", admit),
        ("conclusion", claim)]
    if a.between is None:
        return out + (a.side(loops) if a.side is not None else [])
    between = a.between

    def initial() -> z3.BoolRef:
        init = SchedState(slots=(), free_blocks=loops.cfg.usable_blocks)
        acc = _Acc(0, 0, init.free_blocks, False, 0, 0, 0, 0, head=init.wait_head,
                   tail=init.wait_tail, nrk=init.next_run_key)
        reqs = [_initial_req() for _ in bystanders()]
        # `fixed`: what the workload's contract says of every request's parameters (the
        # prompt never changes, so `each` keeps it once it holds here).
        fixed = [a.fixed(loops, r) for r in reqs] if a.fixed is not None else []
        return valid([c for r in reqs for c in _wf(r)] + fixed,
                     [between(loops, acc), *each(acc, reqs, "between")])

    def scheduled() -> z3.BoolRef:
        acc, stopped, reqs = _fresh_acc(), z3.Bool(_tag("s")), bystanders()
        return valid([wait_inv(loops, acc, stopped), *_rest(acc, reqs),
                      *each(acc, reqs, "waiting")],
                     [between(loops, acc), *each(acc, reqs, "update")])

    def release() -> z3.BoolRef:
        acc, req, eos = _fresh_acc(), _fresh_req(), z3.Bool(_tag("eos"))
        others = bystanders()
        acc2, new = loops.release(acc, req, eos)
        return valid([between(loops, acc), *_rest(acc, [req, *others]),
                      *each(acc, [req, *others], "update"),
                      *([z3.Not(req.upd)] if others else [])],
                     [between(loops, acc2), new.blocks >= 0,
                      *each(acc2, [new, *others], "update")])

    def arrive() -> z3.BoolRef:
        acc, req = _fresh_acc(), _fresh_req()
        others = bystanders()
        acc2, new = loops.arrive(acc, req)
        return valid([between(loops, acc), *_rest(acc, [req, *others]),
                      *each(acc, [req, *others], "between")],
                     [between(loops, acc2), new.blocks >= 0,
                      *each(acc2, [new, *others], "between")])

    out += [("initial state", initial), ("schedule() ends", scheduled),
            ("release iteration", release), ("arrival iteration", arrive)]
    out += a.side(loops) if a.side is not None else []
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


def _prove(a: _Argument, timeout_s: float, kind: str, cached: bool = False,
           capped: bool = False, asynchronous: bool = False) -> TheoremResult:
    """Discharge every obligation under each victim rule (with the abstracted prefix
    cache when `cached`, its hit capped when `capped`, on the AsyncScheduler when
    `asynchronous`); an obligation whose hypotheses are unsatisfiable would be valid for
    nothing, so that is a failure too."""
    start = time.monotonic()
    count = 0
    for priority, latest in _VICTIM_RULES:
        loops = _Loops(priority, latest, cached, capped, asynchronous)
        rule = "PRIORITY" if priority else ("FCFS" if latest else "FCFS running[0]")
        for name, claim in _obligations(a, loops):
            obligation = claim()
            result = valid(obligation, timeout_s - (time.monotonic() - start))
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



#: The sizes at which `lookup_refines_abstract_hit` checks the exact lookup: table lengths
#: and pools up to the symbolic cache's own limits (state.MAX_SYMBOLIC_TABLE / _POOL and
#: beyond), block sizes 1..3, two requests of any prefix groups.
REFINEMENT_SIZES = tuple((table, pool, bs) for table in (1, 2, 4, 6) for pool in (1, 3, 8)
                         for bs in (1, 2, 3))


def lookup_refines_abstract_hit(timeout_s: float, capped: bool) -> TheoremResult:
    """The exact prefix lookup (cache_rules.lookup) returns only hits `_abstract_hit`
    allows: hit blocks >= 0, evictable ones between 0 and the hit blocks, and hit tokens
    (blocks x block_size) at most num_tokens (num_tokens - 1 with the cap), for every pool
    content, every request (prompt, prefix group) and every num_tokens >= 1, at each of
    `REFINEMENT_SIZES`. At any other size the same holds by lookup's form: position j
    counts only while every earlier one did and j < cap = (num_tokens - cap) //
    block_size, the same guard at every j."""
    claims = [(f"lookup refinement (table {table}, pool {pool}, block size {bs})",
               functools.partial(_lookup_claim, table, pool, bs, capped))
              for table, pool, bs in REFINEMENT_SIZES]
    return discharge(claims, timeout_s, time.monotonic(),
                     f"the exact lookup refines the abstract hit at {len(claims)} sizes")


def _cache_rule_config(slots: int, table: int, pool: int, bs: int,
                       capped: bool = True) -> RuleConfig:
    """A concrete rule config with the symbolic prefix cache at these sizes."""
    return RuleConfig(token_budget=1, max_num_batched_tokens=1, max_num_active_reqs=slots,
                      max_num_seqs=slots, max_model_len=table * bs, usable_blocks=pool,
                      watermark_blocks=0, enable_chunked_prefill=True,
                      long_prefill_token_threshold=0, scheduler_reserve_full_isl=True,
                      block_size=bs, policy_priority=False, prefix_caching=True,
                      cap_prefix_hit=capped, pool_blocks=pool, table_len=table)


def _lookup_claim(table: int, pool: int, bs: int, capped: bool) -> z3.BoolRef:
    from model.vllm.cache_rules import CacheWork, lookup

    ops = SymbolicOps()
    t = _tag("lookup")
    cfg = _cache_rule_config(2, table, pool, bs, capped)
    ints = {f: [z3.Int(f"{t}.{f}{b}") for b in range(pool)]
            for f in ("ref", "hash", "queue_key", "cached_at")}
    work = CacheWork(**ints, table=[[0] * table for _ in range(2)], num_cached=[0, 0],
                     queue_tail=z3.Int(f"{t}.tail"), next_cached_at=z3.Int(f"{t}.next"))
    specs = [SlotSpec(z3.Int(f"{t}.prompt{i}"), 1, 1, 0, z3.Int(f"{t}.cached{i}"),
                      z3.Int(f"{t}.group{i}"), z3.Int(f"{t}.shared{i}"))
             for i in range(2)]
    sel = z3.Bool(f"{t}.sel")
    num_tokens = z3.Int(f"{t}.num_tokens")
    hit = lookup(ops, cfg, work, specs, [sel, z3.Not(sel)], num_tokens)
    facts = [hit.blocks >= 0, hit.evictable >= 0, hit.evictable <= hit.blocks,
             hit.blocks * bs <= num_tokens - (1 if capped else 0),
             (hit.blocks * bs) / bs * bs == hit.blocks * bs]  # whole blocks
    return z3.Implies(z3.And(*ops.take_definitions(), num_tokens >= 1,
                             *[r >= 0 for r in ints["ref"]]), z3.And(*facts))


#: The sizes at which `release_refines_abstract_freeing` checks the exact release: request
#: slots, table lengths and pools.
RELEASE_SIZES = tuple((slots, table, pool) for slots in (2, 3) for table in (1, 2, 4)
                      for pool in (1, 3, 6))


def release_refines_abstract_freeing(timeout_s: float) -> TheoremResult:
    """The exact release of a request's blocks (cache_rules.release) frees only what
    `_Loops.moved` allows: f blocks with 0 <= f <= its b table positions, f <= the blocks
    in use (ref_cnt > 0), and b - f <= the shared references (RUNNING requests' table
    positions less the blocks in use), in every state the pool invariant describes (each
    block's ref_cnt is the number of RUNNING table positions naming it, each RUNNING
    table names pool blocks at its first `blocks` positions: invariant.py `_pool`,
    `_block_table`), at each of `RELEASE_SIZES`. At any other size the same holds by
    counting: a position whose block's ref_cnt drops to 0 is that block's last holder, so
    the others name blocks another position also names."""
    claims = [(f"release refinement ({slots} slots, table {table}, pool {pool})",
               functools.partial(_release_claim, slots, table, pool))
              for slots, table, pool in RELEASE_SIZES]
    return discharge(claims, timeout_s, time.monotonic(),
                     f"the exact release refines the abstract freeing at {len(claims)} sizes")


def _release_claim(slots: int, table: int, pool: int) -> z3.BoolRef:
    from checker.methods.symbolic import fresh_state
    from model.vllm.cache_rules import CacheWork, release
    from model.vllm.invariant import _block_table, _pool

    ops = SymbolicOps()
    cfg = _cache_rule_config(slots, table, pool, 1)
    s = fresh_state(_tag("pool"), SchedState.initial(slots, cfg), 0)
    facts = [f for _, f in _pool(ops, cfg, s)]
    facts += [f for x in s.slots for _, f in _block_table(ops, cfg, x)]
    in_use = sum(z3.If(b.ref_cnt > 0, 1, 0) for b in s.pool)
    positions = sum(z3.If(x.status == RUNNING, x.blocks, 0) for x in s.slots)
    victim = s.slots[0]
    freed = release(ops, cfg, CacheWork.of(s), 0, victim.blocks, True)
    return z3.Implies(
        z3.And(*facts, *ops.take_definitions(), victim.status == RUNNING),
        z3.And(freed >= 0, freed <= victim.blocks, freed <= in_use,
               victim.blocks - freed <= positions - in_use))
