"""Benchmark: the array explorer against SPIN (and the reference explorer) on issue 17's
setting, side by side in one run.

    python bench/explore_speed.py --write docs/bench_scale.md --save rows.json \
        --max-n 5 --cap 900 --big-cap 150 --ref-cap 300     # about 25 minutes on 2 cores
    python bench/explore_speed.py --render rows.json --write docs/bench_scale.md

--write replaces only the tables between the page's two `explore_speed tables` markers
(the prose around them stays); --save keeps the measured rows, --render redraws from them.

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
from collections.abc import Iterable, Sequence
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


_PROGRESS: dict[str, Any] = {"states": None, "depth": 0}


def _track_layers() -> None:
    """Record the states and depth after every layer of every Search (so that a run that
    runs out of memory still says how far it got)."""
    from checker.methods.array.search import Search
    layer = Search._layer

    def tracked(self: Any, front: Any, meta: Any, d: int, pending: Any) -> Any:
        out = layer(self, front, meta, d, pending)
        _PROGRESS.update(states=self.visited.count, depth=d)
        return out

    Search._layer = tracked  # type: ignore[method-assign]


def array_case(n: int, props: list[list[Any]], symmetric: bool, retire: bool,
               cap: float, arrival_steps: int | None = 3, depth: int = 200,
               exact: bool = True, prune_eos: bool = True) -> dict[str, Any]:
    """One array-explorer run (in this process)."""
    _track_layers()
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
    from checker.methods import proof_cache
    from checker.methods.array import analysis
    t = time.monotonic()
    with proof_cache.disabled():  # the proofs paid, not read back from an earlier run
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
    verdicts = sorted({f"{r.status}@{r.depth}" if r.status == "violated" else
                       f"unknown ({r.reason})" if r.status == "unknown" else r.status
                       for r in results})
    first = results[0]
    return {"states": first.stats.states, "transitions": first.stats.transitions,
            "seconds": seconds, "proof_s": proofs, "verdict": ", ".join(verdicts),
            "depth": first.stats.depth_reached, "kinds": first.stats.kinds}


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
    verdicts = sorted({f"unknown ({r.reason})" if r.status == "unknown" else r.status
                       for r in results})
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
    memlim = args.pop("memlim_mb", None)
    if memlim:  # the explorers have no memory bound of their own (pan has -DMEMLIM)
        resource.setrlimit(resource.RLIMIT_AS, (memlim << 20, memlim << 20))
    start = time.monotonic()
    try:
        if kind == "array":
            result = array_case(**args)
        elif kind == "reference":
            result = reference_case(**args)
        else:
            raise SystemExit(f"unknown case {kind}")
    except MemoryError:
        result = {"states": _PROGRESS["states"], "transitions": None,
                  "seconds": time.monotonic() - start,
                  "verdict": f"out of memory ({memlim} MB address space)",
                  "depth": _PROGRESS["depth"]}
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def _spin(n: int, starve: int, retire: bool, cap: float, memlim: int,
          twins: bool = False) -> dict[str, Any]:
    r = spin.measure(n, starve=starve, timeout_s=cap, memlim_mb=memlim, retire=retire,
                     twins=twins)
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


def _done(r: dict[str, Any]) -> bool:
    """The run reached its verdict (not stopped by a limit or a failure)."""
    v = str(r.get("verdict", ""))
    return bool(v) and not any(w in v for w in ("unknown", "memory", "time limit", "failed",
                                                 "depth limit", "not completed"))


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> str:
    """a's time / b's time: exact when both finished; a bound when only one did (a run
    stopped by a limit would have taken longer); "-" when neither did."""
    try:
        x = f"{a['seconds'] / b['seconds']:.2f}x"
    except (KeyError, TypeError, ZeroDivisionError):
        return "-"
    if _done(a) and _done(b):
        return x
    if _done(b):
        return f"> {x}"
    if _done(a):
        return f"< {x}"
    return "-"


def main() -> None:
    """Run every row and write the page."""
    p = argparse.ArgumentParser(description="array explorer vs SPIN on issue 17's setting")
    p.add_argument("--write", type=Path)
    p.add_argument("--max-n", type=int, default=5)
    p.add_argument("--cap", type=float, default=1800, help="seconds per run")
    p.add_argument("--memlim", type=int, default=8192,
                   help="pan's memory limit and the explorers' address-space limit, MB")
    p.add_argument("--big-cap", type=float, default=None,
                   help="seconds per run at N >= 5 (default: --cap)")
    p.add_argument("--ref-cap", type=float, default=600,
                   help="seconds per reference-explorer run")
    p.add_argument("--save", type=Path, help="also write the measured rows as JSON here")
    p.add_argument("--render", type=Path, metavar="JSON",
                   help="write the page from rows saved by --save (no measuring)")
    p.add_argument("--case", nargs=2, metavar=("KIND", "JSON"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        _case_main(args.case[0], json.loads(args.case[1]))
        return
    if args.render:
        saved = json.loads(args.render.read_text())
        _emit(render(saved["rows"], saved["meta"]), args.write)
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
                                      "prune_eos": False, "memlim_mb": args.memlim},
                            args.cap)
            label = f"N={n}, finished slots {'forgotten' if retire else 'kept'}"
            rows["cross"].append((label, s, a))
            log(label, s, a)
            if s.get("states") != a.get("states"):
                raise SystemExit(f"state counts differ at {label}: SPIN {s.get('states')}, "
                                 f"array {a.get('states')}")
    for n in range(2, args.max_n + 1):
        cap = args.cap if n < 5 or args.big_cap is None else args.big_cap
        s_full = _spin(n, 0, False, cap, args.memlim)
        s_ret = _spin(n, 0, True, cap, args.memlim)
        s_twins = _spin(n, 0, True, cap, args.memlim, twins=True)
        a = _subprocess("array", {"n": n, "props": safety, "symmetric": True, "retire": True,
                                  "cap": cap, "memlim_mb": args.memlim}, cap)
        rows["safety"].append((f"N={n}", {"full": s_full, "retire": s_ret, "twins": s_twins},
                               a))
        log(f"N={n}", s_full, s_ret, s_twins, a)
    for k in (5, 6):
        s_full = _spin(3, k, False, args.cap, args.memlim)
        s_ret = _spin(3, k, True, args.cap, args.memlim)
        a = _subprocess("array", {"n": 3, "props": [["starvation", [["k", k]]]],
                                  "symmetric": True, "retire": True, "cap": args.cap,
                                  "memlim_mb": args.memlim}, args.cap)
        rows["starve"].append((f"N=3, k={k}", {"full": s_full, "retire": s_ret}, a))
        log(f"starve k={k}", s_full, s_ret, a)
    for n, depth in ((2, 4), (2, 6), (3, 3), (3, 4)):
        ref = _subprocess("reference", {"n": n, "depth": depth, "props": safety,
                                        "cap": args.ref_cap, "memlim_mb": args.memlim},
                          args.ref_cap)
        a = _subprocess("array", {"n": n, "props": safety, "symmetric": True, "retire": True,
                                  "cap": args.ref_cap, "arrival_steps": None, "depth": depth,
                                  "memlim_mb": args.memlim}, args.ref_cap)
        rows["reference"].append((f"N={n}, depth {depth}", ref, a))
        log(f"reference N={n} d={depth}", ref, a)
    meta = {"platform": platform.platform(), "cores": os.cpu_count(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "load_before": load_before, "load_after": os.getloadavg(), "cap": args.cap,
            "big_cap": args.big_cap, "ref_cap": args.ref_cap, "memlim": args.memlim}
    if args.save:
        args.save.write_text(json.dumps({"rows": rows, "meta": meta}, indent=1))
    _emit(render(rows, meta), args.write)


def _emit(page: str, write: Path | None) -> None:
    if write:
        write.write_text(_splice(write, page))
    else:
        print(page)


BEGIN, END = "<!-- explore_speed tables: begin -->", "<!-- explore_speed tables: end -->"


def _splice(path: Path, tables: str) -> str:
    """The page with its measured tables replaced (the prose around them kept)."""
    block = f"{BEGIN}\n{tables}{END}\n"
    if not path.exists():
        return block
    text = path.read_text()
    if BEGIN not in text or END not in text:
        return block
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1].lstrip("\n")
    return head + block + ("\n" + tail if tail else "")


def _table(title: str, columns: Sequence[str],
           rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table under its heading: the head row, the rule, a line per row."""
    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"

    return [title, "", line(columns), "|" + "---|" * len(columns), *map(line, rows)]


def _array_cells(a: dict[str, Any]) -> tuple[str, ...]:
    """An array run's states, seconds, z3 seconds and peak MB."""
    return (_fmt(a.get("states")), _fmt(a.get("seconds")), _fmt(a.get("proof_s")),
            _fmt(a.get("peak_mb"), 0))


def _safety_cells(label: object, f: dict[str, Any], r: dict[str, Any], t: dict[str, Any],
                  a: dict[str, Any]) -> tuple[object, ...]:
    """A safety row: SPIN in full (`f`), with RETIRE (`r`), with RETIRE on the twins only
    (`t`), the array explorer (`a`)."""
    spin_cells = [cell for run in (f, r, t)
                  for cell in (f"{_fmt(run.get('states'))} ({run.get('verdict', '-')})",
                               _fmt(run.get("seconds")), _fmt(run.get("peak_mb"), 0))]
    return (label, *spin_cells, _fmt(a.get("kinds")), *_array_cells(a),
            f"{a.get('verdict')} ({'depth' if _done(a) else 'layers finished:'} "
            f"{a.get('depth')})", _ratio(f, a), _ratio(r, a), _ratio(t, a))


def _starve_cells(label: object, f: dict[str, Any], r: dict[str, Any],
                  a: dict[str, Any]) -> tuple[object, ...]:
    """A starvation row: SPIN in full (`f`), SPIN with RETIRE (`r`), the array explorer."""
    return (label, f.get("verdict"), _fmt(f.get("states")), _fmt(f.get("seconds")),
            r.get("verdict"), _fmt(r.get("seconds")), a.get("verdict"),
            *_array_cells(a), _ratio(f, a), _ratio(r, a))


def render(rows: dict[str, Any], meta: dict[str, Any]) -> str:
    """The measured tables (docs/bench_scale.md keeps them between the prose)."""
    big = meta.get("big_cap")
    out = [f"Measured by `python bench/explore_speed.py` on {meta['date']}, "
           f"{meta['platform']}, {meta['cores']} cores, Python {meta['python']}; load "
           f"average (1 min) {meta['load_before'][0]:.1f} before and "
           f"{meta['load_after'][0]:.1f} after the run; cap {meta['cap']:.0f} s per run"
           f"{'' if big is None else f' ({big:.0f} s at N >= 5)'}, "
           f"{meta['ref_cap']:.0f} s per reference-explorer row; pan limited to "
           f"{meta['memlim']} MB (-DMEMLIM), the explorers to {meta['memlim']} MB of address "
           f"space. A ratio with `>` or `<` is a bound: one side was stopped by a limit.", ""]
    for note in meta.get("notes", ()):
        out += [note, ""]
    out += _table("### Cross-check: the same state space",
                  ("state space", "SPIN states", "array states", "SPIN transitions",
                   "array transitions", "SPIN s", "array s"),
                  ((label, _fmt(s.get("states")), _fmt(a.get("states")),
                    _fmt(s.get("transitions")), _fmt(a.get("transitions")),
                    _fmt(s.get("seconds")), _fmt(a.get("seconds")))
                   for label, s, a in rows["cross"]))
    out += ["", *_table("### Exhaustive safety (arrivals in steps 1..3)",
                        ("N", "SPIN states", "SPIN s", "SPIN MB", "SPIN (RETIRE) states",
                         "SPIN (RETIRE) s", "SPIN (RETIRE) MB", "SPIN (RETIRE, twins) states",
                         "SPIN (RETIRE, twins) s", "SPIN (RETIRE, twins) MB", "array kinds",
                         "array states", "array s", "array z3 s", "array MB", "array verdict",
                         "time SPIN / array", "time SPIN (RETIRE) / array",
                         "time SPIN (RETIRE, twins) / array"),
                        (_safety_cells(label, s["full"], s["retire"], s.get("twins", {}), a)
                         for label, s, a in rows["safety"]))]
    out += ["", *_table("### Starvation at N = 3 (a request waits k steps in a row with 0 "
                        "tokens)",
                        ("bound", "SPIN verdict", "SPIN states", "SPIN s",
                         "SPIN (RETIRE) verdict", "SPIN (RETIRE) s", "array verdict",
                         "array states", "array s", "array z3 s", "array MB",
                         "time SPIN / array", "time SPIN (RETIRE) / array"),
                        (_starve_cells(label, s["full"], s["retire"], a)
                         for label, s, a in rows["starve"]))]
    out += ["", *_table("### The reference explorer beside the array explorer (arrivals in "
                        "any step up to the depth)",
                        ("bounds", "reference verdict", "reference states", "reference s",
                         "reference MB", "array verdict", "array states", "array s",
                         "array z3 s", "array MB", "time reference / array"),
                        ((label, f"{ref.get('verdict')} (depth {ref.get('depth')})",
                          _fmt(ref.get("states")), _fmt(ref.get("seconds")),
                          _fmt(ref.get("peak_mb"), 0), a.get("verdict"),
                          *_array_cells(a), _ratio(ref, a))
                         for label, ref, a in rows["reference"]))]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
