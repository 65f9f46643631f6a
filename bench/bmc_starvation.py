"""Benchmark: BMC on issue 17's SPIN setting, starvation k=5 (VIOLATED at depth 5: find it,
then minimise it) and k=6 (HOLDS: the proof up to a depth), one row per solver variant.

    python bench/bmc_starvation.py --write docs/bench_bmc_starvation.md

The setting is vLLM V1, FCFS, max_num_batched_tokens 8, max_num_seqs 4, block_size 4,
6 KV blocks, max_model_len 16, chunked prefill, prompts 1..8, max_tokens 1..4, arrivals in
steps 1..3, 3 requests: the command

    batchproof check --property starvation:k=5 --max-num-batched-tokens 8 \\
        --max-num-seqs 4 --block-size 4 --num-gpu-blocks-override 6 --max-model-len 16 \\
        --enable-chunked-prefill --no-enable-prefix-caching --no-async-scheduling \\
        --scheduling-policy fcfs --requests 3 --max-prompt-len 8 --max-tokens 4 \\
        --arrival-window 3 --depth 7

Every variant answers the same three questions on the same unrolling, one after the other
in one process, so that they share the machine's load. The row "after" is
`checker.methods.bmc.check` itself (the preprocessing solver of minimize.py, the minimiser
seeded with the witness, the proved invariant once a check takes 0.5 s); "before" is a
copy of the code it replaced; the others are the candidates measured. Wall and CPU seconds
are both printed: the machine is shared, and CPU seconds are less disturbed by its load.
Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import z3
from timing import measured_by, table_parser, write_between

from checker.methods import bmc, induction, minimize
from checker.methods.minimize import check_with, minimal_model, new_solver, objectives
from checker.methods.symbolic import Z3_SEED, Bounds, Family, Unrolling, extend, new_unrolling
from model.core.ops import Bool, SymbolicOps
from model.vllm.config import Config
from properties import catalogue

# Every proof timed here is proved, not read back from a cache of an earlier run
# (checker/methods/proof_cache.py); subprocesses inherit the setting.
os.environ.setdefault("BATCHPROOF_PROOF_CACHE", "off")

SPIN_CFG = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=16, block_size=4,
                  num_gpu_blocks=6)
#: the markers of the table of one k=6 proof depth in the page --write updates
MARKERS = "<!-- bmc_starvation table, k=6 to depth {}: begin -->", \
    "<!-- bmc_starvation table, k=6 to depth {}: end -->"
#: the least vector of the k=5 witness (minimize.py's order), as the code before measured it
LEAST = [3, 1, 6, 4, 1, 7, 3, 1, 5, 1] + [0] * 15

Find = Callable[[Unrolling, int, int, float], tuple[Bool, z3.ModelRef | None]]
Minimise = Callable[[Unrolling, Bool, z3.ModelRef, float], z3.ModelRef | None]


def bounds(depth: int) -> Bounds:
    """The SPIN setting's bounds at `depth`."""
    return Bounds(slots=3, depth=depth, max_prompt_len=8, max_max_tokens=4, arrival_window=3)


def _incremental(arith: int | None = None) -> z3.Solver:
    """z3's default (incremental) solver, as bmc.py and minimize.py used before."""
    s = z3.Solver()
    s.set(random_seed=Z3_SEED)
    if arith is not None:
        s.set("arith.solver", arith)
    return s


def _well_formed(u: Unrolling, state: object) -> list[Bool]:
    """The engine's invariant on one state with its definitions (sound once proved)."""
    ops = SymbolicOps()
    inv = u.engine.well_formed(ops, u.cfg, u.specs, state)  # type: ignore[misc]
    return [*ops.take_definitions(), z3.BoolVal(inv) if isinstance(inv, bool) else inv]


def find_with(make: Callable[[], z3.Solver], strengthen: bool = False) -> Find:
    """Iterative deepening on one solver from `make`, each depth's violation checked in a
    push/pop scope; with `strengthen`, every state also asserts the proved invariant."""
    def find(u: Unrolling, k: int, depth: int, cap_s: float) -> tuple[Bool, z3.ModelRef | None]:
        prop = catalogue.get("starvation", k=k)
        s = make()
        s.add(*u.constraints)
        deadline = time.monotonic() + cap_s
        violation: Bool = z3.BoolVal(False)
        for d in range(len(u.steps) + 1, depth + 1):
            s.add(*extend(u))
            if strengthen:
                s.add(*_well_formed(u, u.states[-1]))
            violation = bmc.violation_at(prop, u, d)
            answer = check_with(s, deadline, violation)
            if answer.result == z3.unknown:
                raise TimeoutError(f"depth {d}: {answer.reason}")
            if answer.model is not None:
                return violation, answer.model
        return violation, None
    return find


def _lowered_by_assumptions(s: z3.Solver, u: Unrolling,
                            model: z3.ModelRef) -> z3.ModelRef | None:
    """Each objective in turn lowered on the incremental solver `s` (its value in `model`,
    then in each better model), the objective below its value as an assumption, until
    unsat; then fixed there (a bit already 0 fixed at once). None if a check gives up."""
    for objective in objectives(u):
        value = model.eval(objective, model_completion=True).as_long()
        if not (value == 0 and minimize._is_bit(objective)):
            while (answer := s.check(objective < value)) == z3.sat:
                model = s.model()
                value = model.eval(objective, model_completion=True).as_long()
            if answer != z3.unsat:
                return None
        s.add(objective == value)
    return model


def minimise_before(u: Unrolling, violation: Bool, first: z3.ModelRef,
                    cap_s: float) -> z3.ModelRef | None:
    """minimize.minimal_model before this benchmark: z3's incremental solver, objectives
    as assumptions, and a first check that finds a witness again."""
    s = _incremental()
    s.add(*u.constraints, violation)
    s.set(timeout=int(cap_s * 1000))
    if s.check() != z3.sat:
        return None
    return _lowered_by_assumptions(s, u, s.model())


def minimise_kept(u: Unrolling, violation: Bool, first: z3.ModelRef,
                  cap_s: float) -> z3.ModelRef | None:
    """minimize.minimal_model as bmc.check calls it, seeded with the witness."""
    return minimal_model(u, violation, int(cap_s * 1000), first)


def minimise_unseeded(u: Unrolling, violation: Bool, first: z3.ModelRef,
                      cap_s: float) -> z3.ModelRef | None:
    """minimize.minimal_model without the witness: its first check finds one again."""
    return minimal_model(u, violation, int(cap_s * 1000))


def minimise_binary(u: Unrolling, violation: Bool, first: z3.ModelRef,
                    cap_s: float) -> z3.ModelRef | None:
    """The preprocessing solver with a binary search per objective between its least
    possible value (0) and the model's: fewer sat steps, more unsat ones."""
    s = new_solver()
    s.add(*u.constraints, violation)
    deadline, model = time.monotonic() + cap_s, first
    for objective in objectives(u):
        value = model.eval(objective, model_completion=True).as_long()
        low = 0  # nothing below `low`; `value` is reached
        while low < value:
            mid = (low + value) // 2
            answer = check_with(s, deadline, objective <= mid)
            if answer.model is not None:
                model = answer.model
                value = model.eval(objective, model_completion=True).as_long()
            elif answer.result == z3.unsat:
                low = mid + 1
            else:
                return None
        s.add(objective == value)
    return model


def minimise_strengthened(u: Unrolling, violation: Bool, first: z3.ModelRef,
                          cap_s: float) -> z3.ModelRef | None:
    """minimize.minimal_model with the proved invariant asserted on every state."""
    saved = u.constraints
    u.constraints = [*saved, *(c for st in u.states[1:] for c in _well_formed(u, st))]
    try:
        return minimal_model(u, violation, int(cap_s * 1000), first)
    finally:
        u.constraints = saved


def minimise_preprocessed_once(u: Unrolling, violation: Bool, first: z3.ModelRef,
                               cap_s: float) -> z3.ModelRef | None:
    """The preprocessing tactic applied once, then z3's incremental solver (arith.solver=2)
    on its result, objectives as assumptions: learnt clauses kept across checks, fixed
    values not propagated. Only the objectives' values are read off its models (they
    survive the preprocessing here; a general version would need the goal's model
    converter)."""
    goal = z3.Goal()
    goal.add(*u.constraints, violation)
    pre = z3.Then("simplify", "propagate-values", "solve-eqs", "elim-term-ite")(goal)[0]
    s = _incremental(2)
    s.add(*list(pre))
    s.set(timeout=int(cap_s * 1000))
    return _lowered_by_assumptions(s, u, first)


Seconds = tuple[float, float]  # wall, CPU


def _timed(fn: Callable[[], object]) -> tuple[object, Seconds]:
    wall, cpu = time.monotonic(), time.process_time()
    out = fn()
    return out, (time.monotonic() - wall, time.process_time() - cpu)


def _vector(u: Unrolling, model: z3.ModelRef | None) -> list[int] | None:
    return None if model is None else [model.eval(o, model_completion=True).as_long()
                                       for o in objectives(u)]


@dataclass(frozen=True, slots=True)
class Outcome:
    """The k=5 witness found and minimised, and the k=6 proof."""

    find: Seconds
    minimise: Seconds
    vector: list[int] | None
    proof: Seconds


def steps(find: Find, minimise: Minimise, invariant: bool = False
          ) -> Callable[[int, float], Outcome]:
    """A variant made of a find and a minimise function; with `invariant`, the proof of
    the invariant is counted in the find and in the k=6 proof."""
    def prove_invariant() -> Seconds:
        if not invariant:
            return (0.0, 0.0)
        induction.prove_well_formed.cache_clear()
        proved, spent = _timed(lambda: induction.prove_well_formed(Family(SPIN_CFG),
                                                                   bounds(7), 900))
        assert proved.proved  # type: ignore[attr-defined]
        return spent

    def run(proof_depth: int, cap_s: float) -> Outcome:
        extra = prove_invariant()
        u = new_unrolling(Family(SPIN_CFG), bounds(7))
        (violation, first), found = _timed(lambda: find(u, 5, 7, cap_s))  # type: ignore[misc]
        assert first is not None and len(u.steps) == 5, "k=5 is violated at depth 5"
        least, spent = _timed(lambda: minimise(u, violation, first, cap_s))
        extra6 = prove_invariant()
        u6 = new_unrolling(Family(SPIN_CFG), bounds(proof_depth))
        (_, witness), proof = _timed(lambda: find(u6, 6, proof_depth, cap_s))  # type: ignore[misc]
        assert witness is None, "k=6 holds"
        return Outcome((found[0] + extra[0], found[1] + extra[1]), spent,
                       _vector(u, least), (proof[0] + extra6[0], proof[1] + extra6[1]))  # type: ignore[arg-type]
    return run


def batchproof_bmc(proof_depth: int, cap_s: float) -> Outcome:
    """`checker.methods.bmc.check` itself, as `batchproof check` runs it (its invariant
    proof not cached: each question proves it again); the minimiser's share is timed by
    wrapping bmc.minimal_model."""
    spent: list[Seconds] = []
    vectors: list[list[int] | None] = []
    original = bmc.minimal_model

    def timed_minimal_model(u: Unrolling, *args: object) -> z3.ModelRef | None:
        model, t = _timed(lambda: original(u, *args))  # type: ignore[arg-type]
        spent.append(t)
        vectors.append(_vector(u, model))  # type: ignore[arg-type]
        return model  # type: ignore[return-value]

    bmc.minimal_model = timed_minimal_model  # type: ignore[assignment]
    try:
        induction.prove_well_formed.cache_clear()
        found, total = _timed(lambda: bmc.check(catalogue.get("starvation", k=5),
                                                Family(SPIN_CFG), bounds(7), cap_s))
        assert found.status == "violated" and found.depth == 5  # type: ignore[attr-defined]
        induction.prove_well_formed.cache_clear()
        proof6, proof = _timed(lambda: bmc.check(catalogue.get("starvation", k=6),
                                                 Family(SPIN_CFG), bounds(proof_depth), cap_s))
        assert proof6.status == "holds"  # type: ignore[attr-defined]
    finally:
        bmc.minimal_model = original  # type: ignore[assignment]
    return Outcome((total[0] - spent[0][0], total[1] - spent[0][1]), spent[0], vectors[0],
                   proof)


@dataclass(frozen=True, slots=True)
class Variant:
    """A way to answer the questions, and whether batchproof keeps it."""

    name: str
    run: Callable[[int, float], Outcome]
    kept: str


VARIANTS = (
    Variant("before: z3.Solver() incremental, minimiser finds a witness again",
            steps(find_with(_incremental), minimise_before), "replaced"),
    Variant("incremental solver, arith.solver=2",
            steps(find_with(lambda: _incremental(2)), minimise_before), "dropped"),
    Variant("preprocessing solver, minimiser finds a witness again",
            steps(find_with(new_solver), minimise_unseeded), "kept (part)"),
    Variant("preprocessing solver, minimiser seeded with the witness",
            steps(find_with(new_solver), minimise_kept), "kept (part)"),
    Variant("preprocessing once, then the incremental solver (arith.solver=2)",
            steps(find_with(new_solver), minimise_preprocessed_once), "dropped"),
    Variant("preprocessing solver, binary search per objective",
            steps(find_with(new_solver), minimise_binary), "dropped"),
    Variant("preprocessing solver, proved invariant on every state from depth 1, "
            "in the minimiser too",
            steps(find_with(new_solver, strengthen=True), minimise_strengthened,
                  invariant=True), "dropped"),
    Variant("after: bmc.check (preprocessing solver, seeded minimiser, invariant once a "
            "depth's check takes 0.5 s)", batchproof_bmc, "**kept**"),
)


@dataclass(frozen=True, slots=True)
class Row:
    """One variant's figures."""

    variant: Variant
    outcome: Outcome
    depth: int


def measure(v: Variant, proof_depth: int, cap_s: float) -> Row:
    """Find and minimise the k=5 witness, then prove k=6 up to `proof_depth`."""
    return Row(v, v.run(proof_depth, cap_s), proof_depth)


def _s(pair: tuple[float, float]) -> str:
    return f"{pair[0]:.1f} ({pair[1]:.1f})"


def table(rows: list[Row]) -> str:
    """The markdown table: wall seconds with CPU seconds in brackets."""
    lines = ["| variant | find s | minimise s | find + minimise s | k=6 HOLDS s (depth) | "
             "same least vector | |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        o = r.outcome
        total = (o.find[0] + o.minimise[0], o.find[1] + o.minimise[1])
        same = {True: "yes", False: "**no**"}[o.vector == LEAST]
        lines.append(f"| {r.variant.name} | {_s(o.find)} | {_s(o.minimise)} | {_s(total)} | "
                     f"{_s(o.proof)} ({r.depth}) | {same} | {r.variant.kept} |")
    return "\n".join(lines)


def main() -> None:
    """Run every variant and print (or write) the table."""
    ap = table_parser(__doc__)
    ap.add_argument("--proof-depth", type=int, default=7, help="depth of the k=6 proof")
    ap.add_argument("--cap", type=float, default=900.0, help="seconds per question")
    ap.add_argument("--only", help="comma-separated variant numbers (1-based) to run")
    args = ap.parse_args()
    chosen = [VARIANTS[int(i) - 1] for i in args.only.split(",")] if args.only else VARIANTS
    before = os.getloadavg()[0]
    rows = []
    for v in chosen:
        rows.append(measure(v, args.proof_depth, args.cap))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    after = os.getloadavg()[0]
    only = f" --only {args.only}" if args.only else ""
    head = measured_by(f"python bench/bmc_starvation.py --proof-depth {args.proof_depth}"
                       f"{only}", before, after) + " Wall seconds, CPU seconds in brackets."
    text = f"{head}\n\n{table(rows)}"
    print(text)
    if args.write:
        write_between(args.write, *(m.format(args.proof_depth) for m in MARKERS), text)


if __name__ == "__main__":
    main()
