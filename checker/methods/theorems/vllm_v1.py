"""Closed-form theorems, proved for all sizes by induction over the scheduler's loops.

The slot model fixes the number of requests. Seed 000's theorem speaks of any number D of
running decodes, so it is proved on the RUNNING loop itself (scheduler.py:657-887) as a
transition system over (decodes served d, token_budget, input_budget, preempted), with
the loop body's token arithmetic taken from the rules (`running_tokens`), so the proof and
the model cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import z3

from checker.methods import proof_cache
from checker.methods.symbolic import Family, longest_prompt
from checker.methods.theorems import (
    Premise,
    Theorem,
    TheoremResult,
    discharge,
    field_range,
    stored,
)
from checker.methods.theorems.vllm_v1_loops import (
    _Acc,
    _Argument,
    _fresh_acc,
    _fresh_req,
    _is,
    _Iter,
    _joined,
    _Loops,
    _prove,
    _Req,
    _running,
    _tag,
    _wf,
    lookup_refines_abstract_hit,
    release_refines_abstract_freeing,
)
from model.core.ops import SymbolicOps
from model.vllm.rules import (
    _threshold,
    blocks_needed,
    running_tokens,
)
from model.vllm.state import (
    ABSENT,
    FINISHED,
    PREEMPTED,
    RUNNING,
    WAITING,
    RuleConfig,
)


def _rule_cfg(mml: z3.ArithRef, budget: z3.ArithRef, batched: z3.ArithRef,
              thr: z3.ArithRef) -> RuleConfig:
    return RuleConfig(token_budget=budget, max_num_batched_tokens=batched,
                      max_num_active_reqs=0, max_num_seqs=0, max_model_len=mml,
                      usable_blocks=0, watermark_blocks=0, enable_chunked_prefill=True,
                      long_prefill_token_threshold=thr, scheduler_reserve_full_isl=True,
                      block_size=1, policy_priority=False)


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
    return discharge(obligations, timeout_s, start,
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
    return discharge([("lemma", lambda: lemma_step), ("claim", lambda: claim)], timeout_s,
                     start, "for all D, B, max_num_seqs: D <= len(running) <= max_num_seqs <= B")


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
# for the requests it touches, so those facts are inductive as well). Properties of each
# request (or each two) add a per-request invariant (and a pairwise one): every iteration
# is checked on the requests it touches and two unchanged bystanders, so the invariants
# hold for every request (and every two), and the conclusion is the catalogue's own
# definition on the rules' observation of two arbitrary requests.
# (The framework is in vllm_v1_loops.py.)


#: How the proofs below argue, as their results say it: the induction over steps of the
#: loops of one step, and the per-request form (the requests an iteration touches and two
#: bystanders).
_OVER_STEPS = ("induction over steps, each step a 1-induction over the arrival, running (with "
               "allocate-or-preempt), waiting and release loops' iterations")
_ON_TOUCHED = "on the requests each touches and two bystanders (base, step, conclusion valid)"


#: The modes a loop proof is run in, as (prefix caching, async scheduling), and how a
#: result names them.
EVERY_MODE = ((False, False), (True, False), (False, True), (True, True))
SYNCHRONOUS = ((False, False), (True, False))  # computed_within_tokens: VIOLATED on async
_MODE_NAMES = {(True, False): "with prefix caching on (the cache abstracted: any hit the "
                              "exact lookup can return, blocks in use and free counted, a "
                              "release freeing any of its blocks no other request holds)",
               (False, True): "on the AsyncScheduler (its in-flight state abstracted: any "
                              "placeholders, stale tokens and previous output)",
               (True, True): "with both"}


def _in_modes(argument: Callable[[], _Argument], timeout_s: float, kind: str,
              modes: tuple[tuple[bool, bool], ...] = EVERY_MODE,
              capped: bool = False) -> TheoremResult:
    """The argument proved on the exact synchronous loop bodies without the prefix cache,
    then in each further mode of `modes` (`_Loops.cached`, `_Loops.asynchronous`); a mode
    with the cache first checks that the exact lookup refines the abstract hit
    (`lookup_refines_abstract_hit`, the hit capped at num_tokens - 1 when `capped`). One
    result for every mode; the first that fails is named. A proved result is kept on disk
    (checker/methods/proof_cache.py, keyed on the argument, the modes and the sources),
    so a later job reads it back with 0 seconds; a failure is never kept."""
    return stored(proof_cache.key("theorem", argument.__qualname__, modes, capped, kind),
                  lambda: _each_mode(argument, timeout_s, kind, modes, capped))


def _each_mode(argument: Callable[[], _Argument], timeout_s: float, kind: str,
               modes: tuple[tuple[bool, bool], ...], capped: bool) -> TheoremResult:
    start = time.monotonic()
    exact = _prove(argument(), timeout_s, kind)
    if not exact.proved:
        return exact
    said = []
    for cached, asynchronous in modes[1:]:
        left = timeout_s - (time.monotonic() - start)
        name = _MODE_NAMES[(cached, asynchronous)]
        if cached:
            refined = _refinement(capped, left)
            if not refined.proved:
                return TheoremResult(False, time.monotonic() - start, f"{name}: {refined.detail}")
            left = timeout_s - (time.monotonic() - start)
        result = _prove(argument(), left, kind, cached=cached, capped=capped,
                        asynchronous=asynchronous)
        if not result.proved:
            return TheoremResult(False, time.monotonic() - start, f"{name}: {result.detail}")
        said.append(name)
    if not said:
        return exact
    refinement = (f"; {_refinement(capped, timeout_s).detail}" if any(c for c, _ in modes)
                  else "")
    return TheoremResult(True, time.monotonic() - start,
                         f"{exact.detail}; the same argument {', '.join(said)}{refinement}")


_REFINED: dict[object, TheoremResult] = {}  # proved refinements (once a process)


def _refinement(capped: bool, timeout_s: float) -> TheoremResult:
    """The cache abstraction's two refinement checks: the exact lookup (its hit capped
    when `capped`) and the exact release. Proved ones are kept for the process."""
    start = time.monotonic()
    checks = ((("lookup", capped), lambda left: lookup_refines_abstract_hit(left, capped)),
              (("release",), release_refines_abstract_freeing))
    for name, check in checks:
        if name not in _REFINED:
            result = check(timeout_s - (time.monotonic() - start))
            if not result.proved:
                return result
            _REFINED[name] = result
    return TheoremResult(True, time.monotonic() - start,
                         "; ".join(_REFINED[name].detail for name, _ in checks))


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
    return _in_modes(_budget_argument, timeout_s,
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
    return _in_modes(_running_argument, timeout_s,
                     f"{_OVER_STEPS} (base, step, conclusion valid); invariant: RUNNING count "
                     "<= max_num_seqs")


def _kv_argument() -> _Argument:
    # With the abstracted cache (`_Loops.moved`): the blocks in use (ref_cnt > 0) and the
    # free ones make up the pool, and the references beyond the first to a shared block,
    # the table positions less the blocks in use, are >= 0 (the property's shared_blocks).
    def conserved(l_: _Loops, acc: _Acc) -> Any:
        if l_.cached:
            return z3.And(acc.free + acc.inuse == l_.cfg.usable_blocks, acc.free >= 0,
                          acc.inuse >= 0, acc.inuse <= acc.blocks)
        return z3.And(acc.free + acc.blocks == l_.cfg.usable_blocks, acc.free >= 0)

    def inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
        cfg = l_.cfg
        need = blocks_needed(l_.ops, cfg, it.ncomp + it.n + cfg.num_lookahead_tokens,
                             sel.blocks)
        return z3.Implies(it.fits, need <= acc.free)

    def claim(l_: _Loops, acc: _Acc) -> Any:
        # kv_blocks_conserved at the observation point: free + held - shared = usable;
        # shared_blocks is 0 without a prefix cache (rules._cache_counts).
        shared = acc.blocks - acc.inuse if l_.cached else 0
        return z3.And(acc.free >= 0, shared >= 0,
                      acc.free + acc.blocks - shared == l_.cfg.usable_blocks)

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
    return _in_modes(_kv_argument, timeout_s,
                     f"{_OVER_STEPS} (base, step, conclusion valid); invariant: free + held "
                     "= usable, free >= 0 (with the cache: free + in use = usable)")


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
    return _in_modes(_no_admission_argument, timeout_s,
                     "1-induction over the running loop's iterations (nobody joined) and the "
                     "waiting loop's iterations (preempted implies stopped and nobody joined) "
                     "(base, step, conclusion valid)")


# --- per-request invariants (for every number of requests) ------------------------------

def _queued(r: _Req) -> z3.BoolRef:
    return _is(r.status, WAITING, PREEMPTED)


def _unstarted(r: _Req) -> z3.BoolRef:
    return _is(r.status, ABSENT, WAITING, PREEMPTED)


def _key_order(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> list[Any]:
    """The queues' order, per request: a waiting request's wait_key is between wait_head
    and wait_tail (preemption keys at the head and moves it down, arrival at the tail and
    moves it up); a RUNNING request's run key is >= 0 and below next_run_key. Within the
    RUNNING loop, with `cut` the current request's run_key, a visited RUNNING request's
    key is <= cut, an unvisited one's >= cut, and one scheduled in this step is visited.
    With distinct run keys (`_distinct_keys`) this is what makes the FCFS victim, the
    RUNNING request with the largest key (rules.py _victim, scheduler.py:802), one not yet
    served in this step, which is why `_preempt` need not give its tokens back under FCFS
    (rules.py:149)."""
    facts: list[Any] = [acc.nrk >= 0, acc.head < acc.tail,
                        z3.Implies(_queued(r), z3.And(acc.head < r.wkey, r.wkey < acc.tail)),
                        z3.Implies(_running(r), z3.And(r.rkey >= 0, r.rkey < acc.nrk))]
    if stage == "running":
        facts += [z3.Implies(z3.And(_running(r), z3.Not(r.vis)), r.rkey >= acc.cut),
                  z3.Implies(z3.And(_running(r), r.vis), r.rkey <= acc.cut),
                  z3.Implies(z3.And(_running(r), r.scheduled > 0), r.vis)]
    return facts


def _distinct_keys(l_: _Loops, acc: _Acc, p: _Req, q: _Req) -> Any:
    """Two RUNNING requests have distinct run keys (each is next_run_key when admitted,
    rules.py:348, 352) and two waiting ones distinct wait keys: the rules' ordered
    choices (`select_min`) then pick one request, as the loop bodies proved assume."""
    return z3.And(z3.Implies(z3.And(_running(p), _running(q)), p.rkey != q.rkey),
                  z3.Implies(z3.And(_queued(p), _queued(q)), p.wkey != q.wkey))


def _order_inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
    """Within a RUNNING-loop iteration: the current request's key is `cut`; while it is
    being allocated it is RUNNING and unvisited; a fitted one is RUNNING; its offered
    tokens are at most what it lacks (`running_tokens` caps at `remaining`; on the
    AsyncScheduler what it lacks counts its placeholders, so that fact is not stated)."""
    lacks = [] if l_.asynchronous else [it.n <= sel.ntok - it.ncomp]
    return z3.And(z3.Implies(it.wants, it.active), z3.Implies(it.active, sel.rkey == acc.cut),
                  z3.Implies(z3.And(it.wants, z3.Not(it.done)),
                             z3.And(_running(sel), z3.Not(sel.vis))),
                  z3.Implies(it.fits, _running(sel)), *lacks)


def _gated(l_: _Loops, acc: _Acc, stopped: Any) -> Any:
    # The WAITING loop starts stopped after a preemption (scheduler.py:900, rules.py:293).
    return z3.Implies(acc.any_preempted, stopped)


def _computed_each(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> Any:
    common = [r.ncomp >= 0, r.out >= 0, *_key_order(l_, acc, r, stage)]
    if stage == "between":
        return z3.And(*common, z3.Implies(_unstarted(r), r.ncomp == 0), r.ncomp <= r.ntok)
    # A request admitted in this step starts from its prefix hit (0 without the cache),
    # one RUNNING at the step's start had none (_Loops.start resets it).
    return z3.And(
        *common, r.ncomp0 >= 0, r.ncomp + r.scheduled <= r.ntok,
        r.scheduled <= r.ntok - r.ncomp0, l_.hit(r) >= 0,
        z3.Implies(stage == "running", l_.hit(r) == 0),
        z3.Implies(_unstarted(r), z3.And(r.ncomp == 0, r.scheduled == 0)),
        z3.Implies(_running(r), r.ncomp == r.ncomp0 + l_.hit(r)),
        z3.Implies(z3.And(_queued(r), z3.Not(r.pre)), r.ncomp0 == 0),
        z3.Implies(r.pre, acc.any_preempted))


def _computed_argument() -> _Argument:
    def inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
        return z3.And(_order_inner(l_, acc, sel, it),
                      z3.Implies(it.active, it.ncomp == sel.ncomp0))
    return _Argument(lambda *_: True, inner, lambda *_: True, lambda l_: [],
                     waiting=_gated, between=lambda *_: True, each=_computed_each,
                     pair=_distinct_keys, observed="computed_within_tokens")


def computed_within_tokens_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: num_computed_tokens <= num_tokens, and no request is
    scheduled more than num_tokens - num_computed_tokens (at the step's start). Per-request
    invariant over steps: a request not started (ABSENT, WAITING, PREEMPTED) has computed
    nothing, and num_computed_tokens <= num_tokens; within a step, a RUNNING request keeps
    the num_computed_tokens it started with, the tokens offered are at most what it lacks,
    a request waiting since the step's start computed nothing, and a preempted one is reset
    and (FCFS: the victim is not yet served; PRIORITY: it gives its tokens back) has
    nothing scheduled."""
    return _in_modes(_computed_argument, timeout_s,
                     f"{_OVER_STEPS} {_ON_TOUCHED}; per-request invariant: a request not "
                     "started has computed nothing, num_computed_tokens + scheduled <= "
                     "num_tokens", SYNCHRONOUS)


def _whole_prompt_each(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> Any:
    if stage == "running":  # nobody joins in the RUNNING loop
        return z3.Not(_joined(r))
    if stage == "waiting":  # all it lacks beyond its prefix hit (0 without the cache)
        return z3.Or(l_.cfg.enable_chunked_prefill,
                     z3.Implies(_joined(r), r.scheduled == r.ntok - l_.hit(r)))
    return True


def _threshold_off(l_: _Loops) -> list[tuple[str, Callable[[], z3.BoolRef]]]:
    """The premise speaks of the configured threshold, the argument of the effective one
    (`thr`): the rules' `_threshold` keeps a configured threshold <= 0 at <= 0 under
    every switch (its adaptive floor applies only to a threshold > 0, rules.py:117, so
    the slot count, 4 here, does not matter)."""
    def claim(adaptive: bool, alone: bool) -> Callable[[], z3.BoolRef]:
        def build() -> z3.BoolRef:
            cfg = replace(l_.cfg, long_prefill_token_threshold_adaptive=adaptive,
                          threshold_off_when_alone=alone)
            held = z3.Int(_tag("num_held"))
            thr = _threshold(l_.ops, cfg, held, 4)
            return z3.Implies(z3.And(*l_.defs(), cfg.long_prefill_token_threshold <= 0,
                                     held >= 0), thr <= 0)
        return build
    return [(f"threshold <= 0 stays <= 0 (adaptive {adaptive}, off when alone {alone})",
             claim(adaptive, alone)) for adaptive in (False, True) for alone in (False, True)]


def _whole_prompt_argument() -> _Argument:
    return _Argument(lambda *_: True, lambda *_: True, lambda *_: True,
                     lambda l_: [z3.Or(l_.cfg.enable_chunked_prefill, l_.thr <= 0)],
                     each=_whole_prompt_each, observed="whole_prompt_without_chunking",
                     side=_threshold_off)


def whole_prompt_without_chunking_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: with chunked prefill off and no long-prefill
    threshold, a request admitted or resumed is scheduled its whole sequence (num_tokens;
    no prefix hit without a prefix cache). Per-request invariant: nobody joins in the
    RUNNING loop; in the WAITING loop an admission happens only if the threshold-capped
    chunk fits the budget (scheduler.py:1155-1167), which with no threshold is all it
    lacks, num_tokens (num_computed_tokens 0, 1129), and nothing changes it later."""
    return _in_modes(_whole_prompt_argument, timeout_s,
                     "1-induction over the running loop's iterations (nobody joined) and the "
                     f"waiting loop's iterations {_ON_TOUCHED}; per-request invariant: a "
                     "request joined is scheduled num_tokens")


def _rank_each(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> Any:
    # A request RUNNING at the step's start and now waiting was preempted in this step.
    preempted = z3.Implies(z3.And(_queued(r), r.before == RUNNING), acc.any_preempted)
    if stage == "running":
        return z3.And(z3.Not(_joined(r)), z3.Implies(r.scheduled > 0, r.rank < acc.served),
                      preempted)
    if stage == "waiting":
        return z3.And(acc.mark <= acc.served, preempted,
                      z3.Implies(z3.And(r.before == RUNNING, r.scheduled > 0),
                                 r.rank < acc.mark),
                      z3.Implies(_joined(r), r.rank >= acc.mark))
    return True


def _rank_argument() -> _Argument:
    return _Argument(lambda *_: True, lambda *_: True, lambda *_: True, lambda l_: [],
                     waiting=_gated, each=_rank_each, observed="running_before_waiting")


def running_before_waiting_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: a request RUNNING at the step's start and served in
    it is served before every request admitted or resumed in it. `_serve` ranks each
    request served by the counter `served`; per-request invariant: in the RUNNING loop,
    a request served has a rank below `served` and nobody has joined; in the WAITING loop
    (mark = `served` when it starts), one served by the RUNNING loop has a rank below
    mark and one joined a rank >= mark. A request RUNNING at the start is never admitted
    in the WAITING loop: it is waiting only if preempted, and then the loop admits
    nobody (scheduler.py:900)."""
    return _in_modes(_rank_argument, timeout_s,
                     "1-induction over the running loop's iterations and the waiting loop's "
                     f"iterations {_ON_TOUCHED}; per-request invariant: a running request "
                     "served has a rank below the waiting loop's first, a request joined one "
                     "at or above")


def _requeued_each(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> Any:
    common = _key_order(l_, acc, r, stage)
    if stage == "between":  # a waiting request's key is above the queue's head
        return z3.And(*common, z3.Implies(_queued(r), r.wkey > acc.head))
    return z3.And(
        *common, acc.head <= acc.head0,
        # _preempt: PREEMPTED, num_computed_tokens 0, nothing scheduled (FCFS: the victim
        # was not served yet; PRIORITY and running[0]: it gives its tokens back), and
        # the key of the head it is prepended at, which then moves down.
        z3.Implies(r.pre, z3.And(r.status == PREEMPTED, r.ncomp == 0, r.scheduled == 0,
                                 acc.any_preempted, acc.head < r.wkey, r.wkey <= acc.head0)),
        z3.Implies(z3.And(_queued(r), z3.Not(r.pre)), r.wkey > acc.head0))


def _requeued_argument() -> _Argument:
    def queue(l_: _Loops, acc: _Acc) -> Any:
        return z3.And(acc.head <= acc.head0, acc.head0 < acc.tail)

    def waiting(l_: _Loops, acc: _Acc, stopped: Any) -> Any:
        return z3.And(queue(l_, acc), _gated(l_, acc, stopped))
    return _Argument(queue, _order_inner, lambda *_: True, lambda l_: [], waiting=waiting,
                     between=lambda l_, acc: acc.head < acc.tail, each=_requeued_each,
                     pair=_distinct_keys, observed="preempted_requeued")


def preempted_requeued_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: a request preempted in a step has
    num_computed_tokens 0 and, under FCFS, a smaller queue key than every request
    waiting after the step and not preempted in it; under PRIORITY waiting requests are
    in (priority, arrival_time) order. Per-request invariant over steps: a waiting
    request's key is above wait_head (arrivals take wait_tail > wait_head); within a
    step, a preempted one is reset, has nothing scheduled (the FCFS victim is not served
    yet: run-key order), and has a key in (wait_head, wait_head at the step's start],
    and one waiting and not preempted a key above the latter. Under PRIORITY the rules'
    `_queue_key` over any number of requests orders by (priority, arrival index)."""
    return _in_modes(_requeued_argument, timeout_s,
                     f"{_OVER_STEPS} {_ON_TOUCHED}; per-request invariant: a preempted request "
                     "is reset and keyed below every waiting request not preempted")


def _admitted_each(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> Any:
    if stage == "running":  # nobody joins in the RUNNING loop
        return z3.Not(_joined(r))
    if stage == "waiting":
        return z3.Implies(_joined(r), r.scheduled >= 1)
    return True


def _admitted_argument() -> _Argument:
    return _Argument(lambda *_: True, lambda *_: True, lambda *_: True, lambda l_: [],
                     each=_admitted_each, observed="admitted_with_tokens")


def admitted_with_tokens_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests, prefix caching on or off: a request admitted or
    resumed is scheduled at least one token (`assert num_new_tokens > 0`,
    scheduler.py:1170). Per-request invariant: nobody joins in the RUNNING loop; the
    WAITING loop admits only with budget left (918-919) and a hit of at most
    num_tokens - 1 (kv_cache_manager.py:289-300), so what it lacks is >= 1 and so is the
    chunk a threshold >= 1 or the budget cuts it to (1155-1169)."""
    return _in_modes(_admitted_argument, timeout_s,
                     "1-induction over the running loop's iterations (nobody "
                     f"joined) and the waiting loop's iterations {_ON_TOUCHED}; "
                     "per-request invariant: a request joined is scheduled "
                     ">= 1 token", capped=True)


def _whole_blocks_each(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> Any:
    if stage == "running":  # nobody joins in the RUNNING loop
        return z3.Not(_joined(r))
    if stage == "waiting":
        hit, bs = l_.hit(r), l_.cfg.block_size
        return z3.Implies(_joined(r), z3.And(hit >= 0, hit <= r.ntok - 1,
                                             l_.ops.floordiv(hit, bs) * bs == hit))
    return True


def _whole_blocks_argument() -> _Argument:
    return _Argument(lambda *_: True, lambda *_: True, lambda *_: True,
                     lambda l_: [l_.cfg.block_size >= 1],
                     each=_whole_blocks_each, observed="prefix_hit_whole_blocks")


def prefix_hit_whole_blocks_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests: a request admitted or resumed starts from a prefix
    hit of whole blocks, at most num_tokens - 1 tokens (0 without the cache). Per-request
    invariant: nobody joins in the RUNNING loop; in the WAITING loop a request joined
    has such a hit, the lookup's (single_type_kv_cache_manager.py:733-828 whole blocks,
    kv_cache_manager.py:289-300 the cap), which nothing changes later in the step."""
    return _in_modes(_whole_blocks_argument, timeout_s,
                     "1-induction over the running loop's iterations (nobody joined) and the "
                     f"waiting loop's iterations {_ON_TOUCHED}; per-request invariant: a "
                     "request joined has a hit of whole blocks below num_tokens", capped=True)


def offers_tokens(l_: _Loops) -> list[tuple[str, Callable[[], z3.BoolRef]]]:
    """The obligation that no WAITING-loop iteration reaches scheduler.py:1170 (`assert
    num_new_tokens > 0`, checked before any block is allocated, 1259-1282): an active
    iteration offers >= 1 token, whatever the accumulators, the head request and its hit."""
    def build() -> z3.BoolRef:
        acc, sel, other = _fresh_acc(), _fresh_req(), _fresh_req()
        o = l_.offer(acc, sel, other, z3.Bool(_tag("s")), z3.Bool(_tag("e")))
        return z3.Implies(z3.And(*l_.defs(), *_wf(sel), *o.hit_hyps),
                          z3.Implies(o.active, o.n >= 1))
    return [("waiting-loop offer >= 1 token (scheduler.py:1170)", build)]


def _no_assertion_argument() -> _Argument:
    return _Argument(lambda *_: True, lambda *_: True, lambda *_: True, lambda l_: [],
                     side=offers_tokens)


def no_engine_assertion_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests, without speculative decoding and with the prefix hit
    capped: the engine reaches none of its assertions. Of those on a step's path, two are
    reachable in scope (docs/engine_assertions.md): scheduler.py:1372 only pads with
    drafts (1131-1153), and 1170 needs a WAITING-loop offer of 0 tokens, which no
    iteration makes: the budget left is >= 1 (918-919), the hit leaves >= 1 token
    (kv_cache_manager.py:289-300) and a threshold cuts only above 0 (1155-1156). The rules
    carry no crash flag under these premises (state.RuleConfig.can_crash); this is why."""
    return _in_modes(_no_assertion_argument, timeout_s,
                     "every WAITING-loop iteration offers >= 1 token, so scheduler.py:1170 "
                     "is never reached, and 1372 pads only with drafts", capped=True)


def _prompt_fits(l_: _Loops, r: _Req) -> Any:
    # The workload contract: vLLM V1's input processor refuses prompt_len >= max_model_len.
    return r.prompt + 1 <= l_.cfg.max_model_len


def _sampled_each(l_: _Loops, acc: _Acc, r: _Req, stage: str) -> Any:
    mml = l_.cfg.max_model_len
    facts = [_prompt_fits(l_, r), r.out >= 0, r.ncomp >= 0, *_key_order(l_, acc, r, stage),
             # check_stop (sched/utils.py:98-119) finishes a request that reaches
             # max_model_len tokens, so one not finished has room for one more.
             z3.Implies(r.status != FINISHED, r.ntok + 1 <= mml),
             z3.Implies(_unstarted(r), r.ncomp == 0)]
    if stage == "between":
        return z3.And(*facts)
    # A preempted request is reset with nothing scheduled (FCFS: the victim is not served
    # yet, by the run-key order; PRIORITY and running[0]: it gives its tokens back).
    return z3.And(*facts, z3.Implies(r.scheduled > 0, r.ncomp + r.scheduled + 1 <= mml),
                  z3.Implies(_unstarted(r), r.scheduled == 0),
                  z3.Implies(r.pre, acc.any_preempted))


def _sampled_argument() -> _Argument:
    def inner(l_: _Loops, acc: _Acc, sel: _Req, it: _Iter) -> Any:
        # scheduler.py:714-721: a running request is offered at most max_model_len -
        # num_computed_tokens - 1 (`running_tokens`), from what it had at the pick.
        return z3.And(_order_inner(l_, acc, sel, it),
                      it.ncomp + it.n + 1 <= l_.cfg.max_model_len,
                      z3.Implies(_running(sel), it.ncomp == sel.ncomp))
    return _Argument(lambda *_: True, inner, lambda *_: True, lambda l_: [],
                     waiting=_gated, between=lambda *_: True, each=_sampled_each,
                     pair=_distinct_keys,
                     fixed=_prompt_fits,
                     observed="sampled_within_max_model_len")


def sampled_within_max_model_len_unbounded(timeout_s: float) -> TheoremResult:
    """For every number of requests, without speculative decoding: a request scheduled in
    a step has num_computed_tokens + 1 <= max_model_len afterwards (its sampled token has
    a position). Per-request invariant over steps: every prompt is below max_model_len
    (vLLM V1's input processor refuses longer ones), a request not finished has num_tokens
    below it (check_stop ends one that reaches it), one not started has computed nothing;
    within a step, a running request is offered at most max_model_len -
    num_computed_tokens - 1 (scheduler.py:714-721), a waiting one at most what it lacks
    beyond its hit (1129-1169), and a preemption only lowers num_computed_tokens."""
    return _in_modes(_sampled_argument, timeout_s,
                     f"{_OVER_STEPS} {_ON_TOUCHED}; per-request invariant: a request not "
                     "finished has num_tokens < max_model_len, one scheduled "
                     "num_computed_tokens + scheduled < max_model_len")


def _synchronous(family: Family) -> bool:
    base = family.base
    return not (base.speculative_method or base.async_scheduling)


def _budget_nonnegative(family: Family) -> bool:
    if family.base.max_num_scheduled_tokens is not None:
        return family.base.max_num_scheduled_tokens >= 0
    return field_range(family, "max_num_batched_tokens")[0] >= 0


WITHOUT_DRAFTS = Premise(
    "no_speculative_decoding",
    "speculative decoding is off (prefix caching and async scheduling on or off: the "
    "loop bodies are proved synchronous and on the AsyncScheduler, without and with the "
    "cache abstracted, docs/parameterised_proofs.md)",
    lambda f: not f.base.speculative_method)
SYNC_WITHOUT_DRAFTS = Premise(
    "synchronous_scheduler_without_drafts",
    "speculative decoding and async scheduling are off (the loop bodies proved are the "
    "synchronous Scheduler's, prefix caching on or off; the property is VIOLATED on the "
    "AsyncScheduler: tiny_async)", _synchronous)
PREFIX_HIT_CAPPED = Premise(
    "prefix_hit_capped",
    "with prefix caching on, a hit is capped at num_tokens - 1 (kv_cache_manager.py:289-300; "
    "rules.cap_prefix_hit; without it admitted_with_tokens is VIOLATED on "
    "tiny_cached_uncapped, and a hit may reach num_tokens)",
    lambda f: f.base.rules.cap_prefix_hit or not f.base.enable_prefix_caching)
BLOCKS_POSITIVE = Premise(
    "block_size_positive", "block_size is >= 1 in every config of the family",
    lambda f: field_range(f, "block_size")[0] >= 1)
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
NO_THRESHOLD_WITHOUT_CHUNKING = Premise(
    "no_long_prefill_threshold_without_chunking",
    "with chunked prefill off, the long-prefill threshold is 0 in every config of the "
    "family (a threshold cuts a prompt before the chunked-prefill check, "
    "scheduler.py:1155-1167; on no_chunking_threshold the property is VIOLATED)",
    lambda f: (f.base.enable_chunked_prefill or not f.base.rules.long_prefill_cap
               or field_range(f, "long_prefill_token_threshold")[1] <= 0))
PROMPTS_BELOW_MAX_MODEL_LEN = Premise(
    "prompts_below_max_model_len",
    "every prompt is shorter than max_model_len (vLLM V1's input processor refuses the "
    "rest; symbolic.longest_prompt)",
    lambda f: longest_prompt(f.base) == f.base.max_model_len - 1)
PRIORITY_VICTIM_REINDEX = Premise(
    "priority_victim_reindex",
    "a victim taken from before the RUNNING loop's index (PRIORITY, or FCFS's running[0] "
    "ablation) moves it back (0.28.0 and later, scheduler.py:808-812; the loop bodies "
    "proved are these; 0.27.1's rule, rules.priority_victim_reindex off, passes over one "
    "more request)",
    lambda f: RuleConfig.from_config(f.base).victim_reindex)
ONE_KV_GROUP = Premise(
    "one_full_attention_kv_group",
    "the KV cache is one full-attention group (the loop bodies proved allocate and free one "
    "group's blocks; with sliding-window or Mamba groups, Config.kv_cache_groups, k-induction "
    "and the bounded search decide)",
    lambda f: not f.base.hybrid_kv)
NO_KV_CONNECTOR = Premise(
    "no_kv_connector",
    "no KV connector (the loop bodies proved have no WAITING_FOR_REMOTE_KVS request holding "
    "blocks while it waits, scheduler.py:1320-1341; with one, Config.kv_connector, "
    "k-induction and the bounded search decide)",
    lambda f: not f.base.kv_connector)
#: The premises of every loop proof: the loop bodies proved are 0.32.0's without drafts,
#: over one full-attention KV cache group, without a KV connector.
LOOP_BODIES = (WITHOUT_DRAFTS, PRIORITY_VICTIM_REINDEX, ONE_KV_GROUP, NO_KV_CONNECTOR)
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
                                      (PRIORITY_VICTIM_REINDEX, ONE_KV_GROUP, NO_KV_CONNECTOR),
                                      states="53f1ed6e962fa60b"),
    "exhausting_decodes_fill_max_num_seqs": Theorem(
        exhausting_decodes_fill_max_num_seqs_unbounded,
        (BUDGET_COVERS_SEATS, ACTIVE_WITHIN_SEATS, ONE_KV_GROUP, NO_KV_CONNECTOR),
        states="fdb1d19823172fef"),
    # For every number of requests (loop invariants; docs/parameterised_proofs.md).
    "budget_respected": Theorem(budget_respected_unbounded,
                                (*LOOP_BODIES, BUDGET_NONNEGATIVE),
                                states="0e6d49755612bc27"),
    "running_within_max_num_seqs": Theorem(
        running_within_max_num_seqs_unbounded,
        (*LOOP_BODIES, ACTIVE_WITHIN_SEATS, SEATS_NONNEGATIVE), states="015c2fb3f8cffee1"),
    "kv_blocks_conserved": Theorem(kv_blocks_conserved_unbounded,
                                   (*LOOP_BODIES, POOL_NONEMPTY, WATERMARK_NONNEGATIVE),
                                   states="68fea0a56159ef19"),
    "no_admission_after_preemption": Theorem(no_admission_after_preemption_unbounded,
                                             (*LOOP_BODIES, PREEMPTION_GATE),
                                             states="4801bd76f453ed0c"),
    "computed_within_tokens": Theorem(computed_within_tokens_unbounded,
                                      (SYNC_WITHOUT_DRAFTS, PRIORITY_VICTIM_REINDEX,
                                       PREEMPTION_GATE, ONE_KV_GROUP, NO_KV_CONNECTOR),
                                      states="62fbe5613fdb2e41"),
    "whole_prompt_without_chunking": Theorem(whole_prompt_without_chunking_unbounded,
                                             (*LOOP_BODIES, NO_THRESHOLD_WITHOUT_CHUNKING),
                                             states="0c20ba639b9f514b"),
    "running_before_waiting": Theorem(running_before_waiting_unbounded,
                                      (*LOOP_BODIES, PREEMPTION_GATE),
                                      states="2975efd1180e086c"),
    "admitted_with_tokens": Theorem(admitted_with_tokens_unbounded,
                                    (*LOOP_BODIES, PREFIX_HIT_CAPPED),
                                    states="4c33f8af6746634a"),
    "prefix_hit_whole_blocks": Theorem(prefix_hit_whole_blocks_unbounded,
                                       (*LOOP_BODIES, PREFIX_HIT_CAPPED, BLOCKS_POSITIVE),
                                       states="066ef673c9550608"),
    "preempted_requeued": Theorem(preempted_requeued_unbounded,
                                  (*LOOP_BODIES, PREEMPTION_GATE),
                                  states="aae4e6bee51a6d9a"),
    "sampled_within_max_model_len": Theorem(sampled_within_max_model_len_unbounded,
                                            (*LOOP_BODIES, PROMPTS_BELOW_MAX_MODEL_LEN),
                                            states="94ab51faf616fe3d"),
    "no_engine_assertion": Theorem(no_engine_assertion_unbounded,
                                   (*LOOP_BODIES, PREFIX_HIT_CAPPED),
                                   states="84e6d95d7f184b1b"),
}
