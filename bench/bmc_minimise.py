"""Benchmark: BMC's minimisation (checker/methods/minimize.py, one objective at a time by
exact solver checks) against z3's Optimize with priority "lex", the alternative a z3 user
would pick, on the same violation formulas.

    python bench/bmc_minimise.py --write docs/bench_minimise.md

Rows: every VIOLATED step or window entry of the vLLM V1 default suite at its manifest
bounds, and issue 17's SPIN setting (FCFS, max_num_batched_tokens 8, max_num_seqs 4,
block_size 4, 6 KV blocks, max_model_len 16, prompts 1..8, max_tokens 1..4, arrivals in steps
1..3, 3 requests) with starvation k=5. For each: the depth BMC finds the violation at, the
seconds to find it, the seconds of each minimiser, the number of objectives, and whether the
two least vectors agree (they must, unless Optimize returns a model that is not least).
Not a test: timings depend on the machine and its load (printed).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import z3
from timing import measured_by, table_parser, write_between

from checker.methods import bmc, minimize
from checker.methods.jobs import family_of, symbolic_bounds
from checker.methods.minimize import objectives
from checker.methods.symbolic import Bounds, Family, extend, new_unrolling
from model.vllm.config import Config
from properties import catalogue, manifest

SPIN_CFG = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=16, block_size=4,
                  num_gpu_blocks=6)
SPIN_BOUNDS = Bounds(slots=3, depth=7, max_prompt_len=8, max_max_tokens=4, arrival_window=3)
BEGIN, END = "<!-- bmc_minimise table: begin -->", "<!-- bmc_minimise table: end -->"


@dataclass(frozen=True, slots=True)
class Row:
    """One violation minimised both ways."""

    case: str
    depth: int
    objectives: int
    find_s: float
    steps_s: float
    optimize_s: float | None
    same: bool | None


def _lex_optimize(u: object, violation: z3.BoolRef, timeout_ms: int) -> z3.ModelRef | None:
    opt = z3.Optimize()
    opt.set(priority="lex", timeout=timeout_ms)
    opt.add(*u.constraints, violation)  # type: ignore[attr-defined]
    for obj in objectives(u):  # type: ignore[arg-type]
        opt.minimize(obj)
    return opt.model() if opt.check() == z3.sat else None


def measure(case: str, prop_name: str, params: dict[str, int], family: Family,
            bounds: Bounds, cap_s: float) -> Row | None:
    """Find the shortest violation, then minimise it with both minimisers."""
    prop = catalogue.get(prop_name, **params)
    u = new_unrolling(family, bounds)
    solver = z3.Solver()
    solver.set(random_seed=0)
    solver.add(*u.constraints)
    start = time.monotonic()
    for depth in range(1, bounds.depth + 1):
        solver.add(*extend(u))
        violation = bmc.violation_at(prop, u, depth)
        if solver.check(violation) == z3.sat:
            break
    else:
        return None
    find_s = time.monotonic() - start
    objs = objectives(u)
    t = time.monotonic()
    ours = minimize.minimal_model(u, violation, int(cap_s * 1000))
    steps_s = time.monotonic() - t
    t = time.monotonic()
    theirs = _lex_optimize(u, violation, int(cap_s * 1000))
    optimize_s = time.monotonic() - t

    def vector(m: z3.ModelRef | None) -> list[int] | None:
        return None if m is None else [m.eval(o, model_completion=True).as_long() for o in objs]
    same = None if ours is None or theirs is None else vector(ours) == vector(theirs)
    return Row(case, depth, len(objs), find_s, steps_s,
               optimize_s if theirs is not None else None, same)


def cases(with_spin: bool) -> list[tuple[str, str, dict[str, int], Family, Bounds]]:
    """The benchmark's violations."""
    m = manifest.load()
    out = []
    for e in m.entries:
        prop = catalogue.get(e.property, **dict(e.params))
        if (e.engine, e.suite, e.expected) != ("vllm-v1", "default", "VIOLATED") \
                or prop.kind == "lasso":
            continue
        nc = manifest.with_bounds(m.configs[e.config], **dict(e.bounds))
        label = prop.name + "".join(f" {k}={v}" for k, v in e.params)
        out.append((f"{label} on {e.config}", e.property, dict(e.params), family_of(nc),
                    symbolic_bounds(nc)))
    if with_spin:
        out.append(("starvation k=5, issue 17's SPIN setting, 3 requests", "starvation",
                    {"k": 5}, Family(SPIN_CFG), SPIN_BOUNDS))
    return out


def table(rows: list[Row]) -> str:
    """The markdown table, with the time ratio Optimize / ours."""
    lines = ["| violation | depth | objectives | find s | ours s | Optimize s | "
             "Optimize / ours | same least vector |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        opt = f"{r.optimize_s:.2f}" if r.optimize_s is not None else "time limit"
        ratio = f"{r.optimize_s / r.steps_s:.2f}x" if r.optimize_s and r.steps_s else "-"
        same = {True: "yes", False: "**no**", None: "-"}[r.same]
        lines.append(f"| {r.case} | {r.depth} | {r.objectives} | {r.find_s:.2f} | "
                     f"{r.steps_s:.2f} | {opt} | {ratio} | {same} |")
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark and print (or write) its table."""
    ap = table_parser(__doc__)
    ap.add_argument("--no-spin", action="store_true", help="skip the SPIN-setting row")
    ap.add_argument("--cap", type=float, default=600.0, help="seconds per minimiser")
    args = ap.parse_args()
    before = os.getloadavg()[0]
    rows = [r for c in cases(not args.no_spin)
            if (r := measure(*c, cap_s=args.cap)) is not None]
    after = os.getloadavg()[0]
    head = measured_by("python bench/bmc_minimise.py", before, after)
    text = f"{head}\n\n{table(rows)}"
    print(text)
    if args.write:
        write_between(args.write, BEGIN, END, text)


if __name__ == "__main__":
    main()
