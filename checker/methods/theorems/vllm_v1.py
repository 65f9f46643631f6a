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

import z3

from checker.methods.symbolic import Family
from checker.methods.theorems import Premise, Theorem, TheoremResult, field_range
from model.core.ops import SymbolicOps
from model.vllm.rules import running_tokens
from model.vllm.state import RuleConfig


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

THEOREMS: dict[str, Theorem] = {
    # No premise: the proof ranges over every budget B >= 1 (the token budget, whichever
    # field sets it), every input budget and threshold, and every mix of running requests.
    "decodes_exhaust_budget": Theorem(decodes_exhaust_budget_unbounded),
    "exhausting_decodes_fill_max_num_seqs": Theorem(
        exhausting_decodes_fill_max_num_seqs_unbounded, (BUDGET_COVERS_SEATS,
                                                         ACTIVE_WITHIN_SEATS)),
}
