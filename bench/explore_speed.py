"""Benchmark: the array explorer against SPIN (and the reference explorer) on issue 17's
setting, side by side in one run.

    python bench/explore_speed.py --write docs/bench_scale.md

The setting: vLLM V1 FCFS, max_num_batched_tokens 8, max_num_seqs 4, block_size 4, 6 KV
blocks (5 usable), max_model_len 16, chunked prefill on, prompts 1..8, max_tokens 1..4,
requests arrive before steps 1..3, N requests. SPIN runs bench/spin/vllm_v1.pml (see
bench/spin/run.py); the array explorer runs model/vllm/rules.py on arrays
(checker/methods/array/). Every measurement is its own process, so that its peak memory
(maximum resident set) is its own. Not a test: timings depend on the machine and its load,
which the page records.

Rows:
- cross-check: the two state spaces defined alike (no symmetry; finished slots kept, or
  forgotten by both: SPIN's RETIRE=1 and the explorer's retired slots) must have the same
  number of states; the script fails if they do not;
- exhaustive safety, N = 2..5: SPIN's assertions against the same step properties of the
  catalogue, the explorer with every reduction z3 proves sound;
- starvation at N = 3: a request waits k steps with 0 tokens, k = 5 (violated) and 6;
- the reference explorer (checker/methods/explore.py) where it finishes within the cap:
  it cannot restrict arrivals to steps 1..3, so it runs at the manifest's environment
  (arrivals in any step up to the depth), beside the array explorer at the same bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "spin"))

import run as spin  # noqa: E402  (bench/spin/run.py)

# The step properties bench/spin/vllm_v1.pml asserts (the others of the catalogue hold by
# the model's construction there: one deque, running first, chunked prefill on).
SAFETY = ("budget_respected", "running_within_max_num_seqs", "kv_blocks_conserved",
          "computed_within_tokens", "no_admission_after_preemption",
          "decodes_exhaust_budget", "exhausting_decodes_fill_max_num_seqs")


def array_case(n: int, props: list[list[Any]], symmetric: bool, retire: bool,
               cap: float, arrival_steps: int | None = 3, depth: int = 200,
               exact: bool = True, prune_eos: bool = True) -> dict[str, Any]:
    """One array-explorer run (in this process)."""
    from checker.methods import array as ax
    from checker.methods.array import Options
    from checker.methods.array.search import Search
    from checker.methods.explore import menu
    from checker.methods.symbolic import Bounds, Family
    from model import registry
    from model.vllm.config import Config
    from properties import catalogue

    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=16, block_size=4,
                 num_gpu_blocks=6)
    bounds = Bounds(slots=n, depth=depth, max_prompt_len=8, max_max_tokens=4)
    opts = Options(symmetric=symmetric, retire=retire, arrival_steps=arrival_steps,
                   exhaustive=arrival_steps is not None, exact=exact, prune_eos=prune_eos)
    ps = [catalogue.get(name, **dict(params)) for name, params in props]
    engine = registry.get("vllm-v1")
    rule_cfg = engine.rule_config(cfg)
    from checker.methods.array import analysis
    t = time.monotonic()
    analysis.shape("vllm-v1", rule_cfg, n)  # the z3 proofs, reported apart
    proofs = time.monotonic() - t
    t = time.monotonic()
    if not ps:
        out = Search(engine, rule_cfg, [], menu(bounds, rule_cfg), n, depth, opts,
                     time.monotonic() + cap).run()
        return {"states": out.states, "transitions": out.transitions,
                "seconds": time.monotonic() - t, "proof_s": proofs,
                "verdict": "complete" if out.complete else out.reason,
                "depth": out.depth_reached}
    results = ax.check_many(ps, Family(cfg), bounds, cap, symmetric, opts)
    seconds = time.monotonic() - t
    verdicts = sorted({f"{r.status}@{r.depth}" if r.status == "violated" else r.status
                       for r in results})
    first = results[0]
    return {"states": first.stats.states, "transitions": first.stats.transitions,
            "seconds": seconds, "proof_s": proofs, "verdict": ", ".join(verdicts),
            "depth": first.stats.depth_reached}


def reference_case(n: int, depth: int, props: list[list[Any]], cap: float) -> dict[str, Any]:
    """The reference explorer at the manifest's environment (arrivals in any step)."""
    from checker.methods import explore
    from checker.methods.symbolic import Bounds, Family
    from model.vllm.config import Config
    from properties import catalogue

    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=16, block_size=4,
                 num_gpu_blocks=6)
    bounds = Bounds(slots=n, depth=depth, max_prompt_len=8, max_max_tokens=4)
    ps = [catalogue.get(name, **dict(params)) for name, params in props]
    t = time.monotonic()
    results = explore.check_many(ps, Family(cfg), bounds, cap)
    seconds = time.monotonic() - t
    first = results[0]
    verdicts = sorted({r.status for r in results})
    return {"states": first.stats.states, "transitions": first.stats.transitions,
            "seconds": seconds, "verdict": ", ".join(verdicts),
            "depth": first.stats.depth_reached}


def _subprocess(kind: str, args: dict[str, Any], cap: float) -> dict[str, Any]:
    """Run one case in a fresh interpreter (which reports its own peak memory)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", kind, json.dumps(args)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=cap + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    wall = time.monotonic() - start
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (err or out).strip().splitlines()[-1:] or ["no output"]
        return {"verdict": f"failed: {tail[0][:120]}", "seconds": wall}
    return json.loads(lines[-1])  # the case reports its own peak memory


def _case_main(kind: str, args: dict[str, Any]) -> None:
    import resource
    if kind == "array":
        result = array_case(**args)
    elif kind == "reference":
        result = reference_case(**args)
    else:
        raise SystemExit(f"unknown case {kind}")
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def _spin(n: int, starve: int, retire: bool, cap: float, memlim: int) -> dict[str, Any]:
    r = spin.measure(n, starve=starve, timeout_s=cap, memlim_mb=memlim, retire=retire)
    if r.errors > 0:
        verdict = "violated"
    elif r.complete:
        verdict = "holds"
    else:
        verdict = r.note
    return {"states": r.states, "transitions": r.transitions, "seconds": r.seconds,
            "peak_mb": r.peak_mb, "verdict": verdict}


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _ratio(a: Any, b: Any) -> str:
    try:
        return f"{a / b:.2f}x"
    except (TypeError, ZeroDivisionError):
        return "-"


def main() -> None:
    """Run every row and write the page."""
    p = argparse.ArgumentParser(description="array explorer vs SPIN on issue 17's setting")
    p.add_argument("--write", type=Path)
    p.add_argument("--max-n", type=int, default=5)
    p.add_argument("--cap", type=float, default=1800, help="seconds per run")
    p.add_argument("--memlim", type=int, default=8192, help="pan's memory limit, MB")
    p.add_argument("--case", nargs=2, metavar=("KIND", "JSON"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        _case_main(args.case[0], json.loads(args.case[1]))
        return
    load_before = os.getloadavg()
    safety = [[name, []] for name in SAFETY]
    rows: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {
        "cross": [], "safety": [], "starve": [], "reference": []}

    def log(*parts: object) -> None:
        print(*parts, flush=True)

    for n in (2, 3):
        for retire in (False, True):
            s = _spin(n, 0, retire, args.cap, args.memlim)
            a = _subprocess("array", {"n": n, "props": [], "symmetric": False,
                                      "retire": retire, "cap": args.cap,
                                      "prune_eos": False}, args.cap)
            label = f"N={n}, finished slots {'forgotten' if retire else 'kept'}"
            rows["cross"].append((label, s, a))
            log(label, s, a)
            if s.get("states") != a.get("states"):
                raise SystemExit(f"state counts differ at {label}: SPIN {s.get('states')}, "
                                 f"array {a.get('states')}")
    for n in range(2, args.max_n + 1):
        s_full = _spin(n, 0, False, args.cap, args.memlim)
        s_ret = _spin(n, 0, True, args.cap, args.memlim)
        a = _subprocess("array", {"n": n, "props": safety, "symmetric": True, "retire": True,
                                  "cap": args.cap}, args.cap)
        rows["safety"].append((f"N={n}", {"full": s_full, "retire": s_ret}, a))
        log(f"N={n}", s_full, s_ret, a)
    for k in (5, 6):
        s_full = _spin(3, k, False, args.cap, args.memlim)
        s_ret = _spin(3, k, True, args.cap, args.memlim)
        a = _subprocess("array", {"n": 3, "props": [["starvation", [["k", k]]]],
                                  "symmetric": True, "retire": True, "cap": args.cap},
                        args.cap)
        rows["starve"].append((f"N=3, k={k}", {"full": s_full, "retire": s_ret}, a))
        log(f"starve k={k}", s_full, s_ret, a)
    for n, depth in ((2, 4), (2, 6), (3, 3), (3, 4)):
        ref = _subprocess("reference", {"n": n, "depth": depth, "props": safety,
                                        "cap": min(args.cap, 600)}, min(args.cap, 600))
        a = _subprocess("array", {"n": n, "props": safety, "symmetric": True, "retire": True,
                                  "cap": 600, "arrival_steps": None, "depth": depth}, 600)
        rows["reference"].append((f"N={n}, depth {depth}", ref, a))
        log(f"reference N={n} d={depth}", ref, a)
    page = render(rows, load_before, os.getloadavg(), args)
    if args.write:
        args.write.write_text(page)
    else:
        print(page)


def render(rows: dict[str, Any], load_before: tuple[float, ...],
           load_after: tuple[float, ...], args: argparse.Namespace) -> str:
    """The measured tables (docs/bench_scale.md keeps them between the prose)."""
    out = [f"Measured by `python bench/explore_speed.py --write docs/bench_scale.md` on "
           f"{platform.platform()}, {os.cpu_count()} cores, Python "
           f"{platform.python_version()}; load average {load_before[0]:.1f} before and "
           f"{load_after[0]:.1f} after the run; cap {args.cap:.0f} s per run, pan limited "
           f"to {args.memlim} MB.", ""]
    out += ["### Cross-check: the same state space", "",
            "| state space | SPIN states | array states | SPIN transitions | array "
            "transitions | SPIN s | array s |", "|---|---|---|---|---|---|---|"]
    for label, s, a in rows["cross"]:
        out.append(f"| {label} | {_fmt(s.get('states'))} | {_fmt(a.get('states'))} | "
                   f"{_fmt(s.get('transitions'))} | {_fmt(a.get('transitions'))} | "
                   f"{_fmt(s.get('seconds'))} | {_fmt(a.get('seconds'))} |")
    out += ["", "### Exhaustive safety (arrivals in steps 1..3)", "",
            "| N | SPIN states | SPIN s | SPIN MB | SPIN (RETIRE) states | SPIN (RETIRE) s | "
            "SPIN (RETIRE) MB | array states | array s | array MB | array verdict | "
            "time SPIN / array | time SPIN (RETIRE) / array |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, s, a in rows["safety"]:
        f, r = s["full"], s["retire"]
        out.append(f"| {label} | {_fmt(f.get('states'))} ({f.get('verdict')}) | "
                   f"{_fmt(f.get('seconds'))} | {_fmt(f.get('peak_mb'), 0)} | "
                   f"{_fmt(r.get('states'))} ({r.get('verdict')}) | {_fmt(r.get('seconds'))} | "
                   f"{_fmt(r.get('peak_mb'), 0)} | {_fmt(a.get('states'))} | "
                   f"{_fmt(a.get('seconds'))} | {_fmt(a.get('peak_mb'), 0)} | "
                   f"{a.get('verdict')} | {_ratio(f.get('seconds'), a.get('seconds'))} | "
                   f"{_ratio(r.get('seconds'), a.get('seconds'))} |")
    out += ["", "### Starvation at N = 3 (a request waits k steps in a row with 0 tokens)", "",
            "| bound | SPIN verdict | SPIN states | SPIN s | SPIN (RETIRE) s | array verdict | "
            "array states | array s | array MB | time SPIN / array |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for label, s, a in rows["starve"]:
        f, r = s["full"], s["retire"]
        out.append(f"| {label} | {f.get('verdict')} | {_fmt(f.get('states'))} | "
                   f"{_fmt(f.get('seconds'))} | {_fmt(r.get('seconds'))} | {a.get('verdict')} | "
                   f"{_fmt(a.get('states'))} | {_fmt(a.get('seconds'))} | "
                   f"{_fmt(a.get('peak_mb'), 0)} | {_ratio(f.get('seconds'), a.get('seconds'))} |")
    out += ["", "### The reference explorer beside the array explorer (arrivals in any step "
            "up to the depth)", "",
            "| bounds | reference verdict | reference states | reference s | array verdict | "
            "array states | array s | time reference / array |",
            "|---|---|---|---|---|---|---|---|"]
    for label, ref, a in rows["reference"]:
        out.append(f"| {label} | {ref.get('verdict')} | {_fmt(ref.get('states'))} | "
                   f"{_fmt(ref.get('seconds'))} | {a.get('verdict')} | {_fmt(a.get('states'))} | "
                   f"{_fmt(a.get('seconds'))} | {_ratio(ref.get('seconds'), a.get('seconds'))} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
