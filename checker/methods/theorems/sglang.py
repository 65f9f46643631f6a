"""SGLang's chunked-prefill decode stall, proved for every prompt length L and chunk size C.

The slot model fixes lengths and the chunk size; the theorem speaks of all of them, so it
is proved by induction over the chunk steps of one prompt, as a transition system over
(computed, n, n*C) whose chunk arithmetic is the rules' own (`new_chunk_len`,
`continuation_len`, `decode_runs` of model/sglang/rules.py), so the proof and the model
cannot drift apart. The step in which the prompt's prefill is still unfinished always forms
a prefill batch (managers/scheduler.py:3973-4004 skip every early exit while chunked_req is
set, and add_chunked_req always admits it, schedule_policy.py:1092-1173); the slot model
checks that premise as `decode_stall_ceil_l_over_c` and `at_most_one_chunked`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import z3

from checker.methods.theorems import Premise, Theorem, TheoremResult, discharge
from model.core.ops import SymbolicOps
from model.sglang.rules import continuation_len, decode_runs, new_chunk_len


def decode_stall_unbounded(timeout_s: float) -> TheoremResult:
    """For all L >= 1 and C >= 1, with mixed chunk off: from the step a prompt of L uncached
    tokens is admitted until the step its last chunk runs, no running request decodes;
    that takes n steps with n*C >= L (so n >= ceil(L/C)), and (n-1)*C < L (so
    n = ceil(L/C)) when the prompt was served first in its first step (its chunk budget
    was the whole C) and memory never cut a continuing chunk (int(rem_total) >= C)."""
    start = time.monotonic()
    ops = SymbolicOps()
    big_l, big_c = z3.Ints("L C")
    done, n, nc = z3.Ints("computed n nC")
    exact = z3.Bool("exact")  # served first, memory never cut a chunk
    first_budget, mem = z3.Ints("rem_chunk_at_admission int_rem_total")
    fits = z3.Bool("decode_fits")
    ranges = z3.And(big_l >= 1, big_c >= 1)

    def inv(done: z3.ArithRef, n: z3.ArithRef, nc: z3.ArithRef) -> z3.BoolRef:
        return z3.And(n >= 1, nc >= 1, done >= 1, done <= big_l, done <= nc,
                      z3.Implies(exact, z3.Or(done == nc, z3.And(done == big_l,
                                                                 nc - big_c < big_l))))

    # Admission (P:1549-1575): a budget of at most C, the whole C when served first; an
    # extend of 0 would be refused (OTHER), so the budget is >= 1.
    chunked, e1 = new_chunk_len(ops, big_l, first_budget)
    admit = z3.And(first_budget >= 1, first_budget <= big_c,
                   z3.Implies(exact, first_budget == big_c))
    # A continuing chunk (P:1092-1173): rem_chunk is C (mixed off, it goes first).
    e = continuation_len(ops, big_l - done, big_c, mem)
    cont = z3.And(done < big_l, z3.Implies(exact, mem >= big_c))
    no_decode = z3.Not(decode_runs(ops, z3.BoolVal(True), z3.BoolVal(False), fits))

    obligations: list[tuple[str, Callable[[], z3.BoolRef]]] = [
        ("admission", lambda: z3.Implies(z3.And(ranges, admit),
                                         z3.And(e1 >= 1, inv(e1, z3.IntVal(1), big_c),
                                                chunked == (e1 < big_l)))),
        ("progress", lambda: z3.Implies(z3.And(ranges, inv(done, n, nc), cont),
                                        z3.And(e >= 1, inv(done + e, n + 1, nc + big_c)))),
        ("no decode", lambda: no_decode),
        ("count", lambda: z3.Implies(z3.And(ranges, inv(done, n, nc), done == big_l),
                                     z3.And(nc >= big_l,
                                            z3.Implies(exact, nc - big_c < big_l)))),
    ]
    return discharge(obligations, timeout_s, start,
                     "induction over the chunk steps: admission, progress, no decode and "
                     "count valid for all L and C (n steps, nC >= L, and nC - C < L when "
                     "served first with memory to spare)")


MIXED_CHUNK_OFF = Premise(
    "mixed_chunk_off", "enable_mixed_chunk is off: a chunk step runs no decode beside it "
    "(managers/scheduler.py:3870-3883)", lambda f: not f.base.mixed_chunk)
CHUNKED_PREFILL_ON = Premise(
    "chunked_prefill_on", "chunked_prefill_size C >= 1 (chunked prefill on, "
    "managers/scheduler.py:1335-1336)", lambda f: f.base.chunking)

THEOREMS: dict[str, Theorem] = {
    # `states`: the property's definition it proves (see vllm_v1.py's THEOREMS).
    "decode_stall_ceil_l_over_c": Theorem(decode_stall_unbounded,
                                          (MIXED_CHUNK_OFF, CHUNKED_PREFILL_ON),
                                          states="07e1f10ef5677ab5"),
}
