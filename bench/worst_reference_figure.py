"""Benchmark: `batchproof worst --metric starvation_steps` on issue 18's reference figure
(item 4) against what a user would otherwise run.

The figure: FCFS, max_num_batched_tokens 8, max_num_seqs 4, block_size 4, 6 KV blocks
(5 usable), max_model_len 16, chunked prefill on, 3 requests with prompts 1..8 and
max_tokens 1..4 arriving in steps 1..3: a waiting request can get 0 tokens for 5 steps
in a row and never for 6 (SPIN, docs/bench_scale.md). Rows, each a fresh process, wall
clock and the process's user+system CPU (the machine is shared: CPU is the steadier
figure):

- `worst` with each `--strategy` (auto = explore here: one array-explorer search of every
  rung, then BMC at both ends; scan and binary: the BMC ladder, the array explorer at both
  ends);
- the shell loop `batchproof check --property starvation:k=K` for K = 1, 2, ... until a K
  HOLDS (BMC, one process per K), which proves the same two ends but with BMC alone;
- SPIN (bench/spin/run.py, pan on bench/spin/vllm_v1.pml, a hand-written Promela model of
  the same rules) for k=5 and k=6, with finished slots kept and with RETIRE; SPIN's trail
  is neither minimised nor replayed, and needs the bound given, so a user runs it twice.

    python bench/worst_reference_figure.py [--depth 6] [--skip-loop] [--skip-spin]

Not a test: timings depend on the machine and its load (printed with the table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import timed_run

ROOT = Path(__file__).resolve().parents[1]
BATCHPROOF = [sys.executable, "-m", "checker.cli"]
FIGURE = ["--max-num-batched-tokens", "8", "--max-num-seqs", "4", "--block-size", "4",
          "--num-gpu-blocks-override", "6", "--max-model-len", "16",
          "--no-enable-prefix-caching", "--no-async-scheduling", "--requests", "3",
          "--max-prompt-len", "8", "--max-tokens", "4", "--arrival-window", "3"]


def _timed(argv: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds, CPU seconds of the child, and its result (run in the repository)."""
    return timed_run(argv, ROOT)


def worst_row(depth: int, strategy: str, timeout: float, out: str) -> dict[str, object]:
    """One `worst` run."""
    wall, cpu, done = _timed([*BATCHPROOF, "worst", "--metric", "starvation_steps", *FIGURE,
                              "--depth", str(depth), "--strategy", strategy, "--timeout",
                              str(timeout), "--json", "--out", out, "--confirm"])
    doc = json.loads(done.stdout)
    value = doc["value"] if doc["value"] is not None else f">={doc['at_least']}"
    bound = doc["bound"] or {}
    witness = doc["witness"] or {}
    return {"how": f"`worst --strategy {strategy} --confirm` ({doc['strategy']}, explorer "
                   f"{doc['explorer']})",
            "wall": wall, "cpu": cpu, "checks": len(doc["rungs"]),
            "answer": f"{doc['status']} {value}",
            "ends": f"witness {witness.get('bmc')}/{witness.get('explore')}, bound "
                    f"{bound.get('bmc')}/{bound.get('explore')}"}


def loop_row(depth: int, timeout: float, out: str) -> dict[str, object]:
    """The one-bound-at-a-time loop over `check`."""
    wall = cpu = 0.0
    k, worst, said = 1, 0, ""
    while k <= depth + 1:
        w, c, done = _timed([*BATCHPROOF, "check", "--property", f"starvation:k={k}",
                             *FIGURE, "--depth", str(depth), "--timeout", str(timeout),
                             "--json", "-q", "--out", out])
        wall, cpu = wall + w, cpu + c
        v = json.loads(done.stdout)["verdicts"][0]
        said = f"{v['verdict']}" + (f"({v['depth']})" if v["verdict"] == "HOLDS" else "")
        if v["verdict"] != "VIOLATED":
            break
        worst, k = k, k + 1
    return {"how": "shell loop of `check --property starvation:k=K` (bmc), K = 1.."
                   f"{k}", "wall": wall, "cpu": cpu, "checks": k,
            "answer": f"{worst} (k={k} {said})", "ends": "bmc only"}


def spin_rows(timeout: float) -> list[dict[str, object]]:
    """SPIN k=5 and k=6 at N=3, as docs/bench_scale.md runs them."""
    sys.path.insert(0, str(ROOT / "bench" / "spin"))
    import run as spin  # bench/spin/run.py

    rows = []
    for retire in (False, True):
        runs = [spin.measure(3, k, timeout, retire=retire) for k in (5, 6)]
        said = ", ".join(f"k={k} {'violated' if r.errors else 'holds' if r.complete else r.note}"
                         for k, r in zip((5, 6), runs, strict=True))
        rows.append({"how": f"SPIN{' (RETIRE)' if retire else ''}, k=5 then k=6 "
                            "(pan search only; build not counted)",
                     "wall": sum(r.seconds for r in runs), "cpu": None, "checks": 2,
                     "answer": said, "ends": "trail not minimised, not replayed"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--strategies", default="auto,scan,binary")
    parser.add_argument("--skip-loop", action="store_true")
    parser.add_argument("--skip-spin", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for strategy in args.strategies.split(","):
            rows.append(worst_row(args.depth, strategy, args.timeout, out))
            print(rows[-1], file=sys.stderr)
        if not args.skip_loop:
            rows.append(loop_row(args.depth, args.timeout, out))
            print(rows[-1], file=sys.stderr)
    if not args.skip_spin:
        rows += spin_rows(args.timeout)
    base = rows[0]["wall"]
    print(f"reference figure, depth {args.depth}; {os.cpu_count()} cores, load average "
          f"(1 min) {load_before:.1f} before and {os.getloadavg()[0]:.1f} after")
    print()
    print("| how | wall s | CPU s | checks | answer | the two ends | wall / first row |")
    print("|---|---:|---:|---:|---|---|---:|")
    for r in rows:
        cpu = "-" if r["cpu"] is None else f"{r['cpu']:.1f}"
        print(f"| {r['how']} | {r['wall']:.1f} | {cpu} | {r['checks']} | {r['answer']} | "
              f"{r['ends']} | {r['wall'] / base:.2f}x |")


if __name__ == "__main__":
    main()
