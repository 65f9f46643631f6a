"""The solver set-up of the methods' one-shot z3 queries: BMC, k-induction, the array
explorer's reduction proofs (first, before z3's default solver), `diff` and `worst`. The
theorems keep z3's default solver: on their claims this set-up took 8x longer."""

from __future__ import annotations

import z3

from checker.methods.symbolic import Z3_SEED

#: What the solver names itself by in a stored proof's key: a result left undecided under
#: one set-up is not an answer under another.
SETUP = "preprocessed+arith2"


def preprocessed(ctx: z3.Context | None = None) -> z3.Solver:
    """A solver that preprocesses its assertions on every check (named definitions
    substituted away, fixed values propagated, if-then-else terms lifted) before the SMT
    core with the legacy arithmetic solver, with z3's seed fixed. Our queries are one-shot
    (or a few checks under push/pop), where z3's default solver, being incremental, skips
    that preprocessing: on issue 17's SPIN setting this measured 2-4x faster for BMC
    (docs/bench_bmc_starvation.md), 2-9x for k-induction, and 2-10x on the array
    explorer's reduction proofs (the small prefix cache's: 21 s of CPU down to 9 s)."""
    tactic = z3.Then(z3.Tactic("simplify", ctx=ctx), z3.Tactic("propagate-values", ctx=ctx),
                     z3.Tactic("solve-eqs", ctx=ctx), z3.Tactic("elim-term-ite", ctx=ctx),
                     z3.With(z3.Tactic("smt", ctx=ctx),
                             **{"arith.solver": 2, "random_seed": Z3_SEED}),
                     ctx=ctx)
    return tactic.solver()
