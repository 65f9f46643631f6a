"""Benchmark: `batchproof worst` against the loop a user would write without it,

    for K in 1 2 3 ...; do batchproof check --property starvation:k=$K ...; done

(until a K HOLDS), on one small config. Each is timed as the user runs it: a fresh
`batchproof` process per command, wall clock, best of --repeat runs.

    python bench/worst_vs_loop.py [--config tiny_fcfs --requests 2 --depth 5]

Not a test: timings depend on the machine. The loop asks BMC only; `worst` also asks a
second method to confirm both ends (the witness and the bound), so it does more work; the
`worst` rows with `--strategy` say how the ladder was climbed (explore: every rung in one
array-explorer search, then BMC at both ends; scan or binary: BMC's ladder, then the
explorer at both ends). The reference figure of issue 18 item 4 (3 requests) is
bench/worst_reference_figure.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCHPROOF = [sys.executable, "-m", "checker.cli"]


def _timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return time.monotonic() - start, done


def hand_loop(bounds: list[str], out: str) -> tuple[float, int, int]:
    """Seconds, checks run and the worst K found by the one-bound-at-a-time loop."""
    total, worst, k = 0.0, 0, 1
    while True:
        seconds, done = _timed([*BATCHPROOF, "check", "--property", f"starvation:k={k}",
                                *bounds, "--json", "-q", "--out", out])
        total += seconds
        verdict = json.loads(done.stdout)["verdicts"][0]["verdict"]
        if verdict != "VIOLATED":
            return total, k, worst
        worst, k = k, k + 1


def worst_cmd(bounds: list[str], strategy: str) -> tuple[float, int, int, float]:
    """Seconds, checks run (both methods), the value, and the seconds of the ladder (the
    BMC rungs of scan/binary; the one array search of explore)."""
    seconds, done = _timed([*BATCHPROOF, "worst", "--metric", "starvation_steps", *bounds,
                            "--strategy", strategy, "--json"])
    doc = json.loads(done.stdout)
    if doc["strategy"] == "explore":
        ladder = max((r["seconds"] for r in doc["rungs"] if r["search"]), default=0.0)
    else:
        ladder = sum(r["seconds"] for r in doc["rungs"] if r["method"] == "bmc")
    return seconds, len(doc["rungs"]), doc["value"], ladder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default="tiny_fcfs")
    parser.add_argument("--requests", default="2")
    parser.add_argument("--depth", default="5")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    bounds = ["--manifest-config", args.config, "--requests", args.requests, "--depth", args.depth]
    rows = []
    with tempfile.TemporaryDirectory() as out:
        runs = [hand_loop(bounds, str(Path(out))) for _ in range(args.repeat)]
        s, n, v = min(runs)
        rows.append(("shell loop of `check --property starvation:k=K` (bmc)", s, n, v, None))
    how = {"explore": "array search of every rung + bmc both ends",
           "scan": "bmc ladder + array explorer both ends",
           "binary": "bmc ladder + array explorer both ends"}
    for strategy in ("explore", "scan", "binary"):
        s, n, v, ladder = min(worst_cmd(bounds, strategy) for _ in range(args.repeat))
        rows.append((f"`worst --strategy {strategy}` ({how[strategy]})", s, n, v, ladder))
    print(f"config {args.config}, {args.requests} requests, depth {args.depth}; "
          f"best of {args.repeat}, wall clock per command line")
    print()
    print("| how | seconds | checks | worst starvation_steps | of which the ladder |")
    print("|---|---:|---:|---:|---:|")
    for how, s, n, v, ladder in rows:
        print(f"| {how} | {s:.2f} | {n} | {v} | "
              + ("-" if ladder is None else f"{ladder:.2f}") + " |")


if __name__ == "__main__":
    main()
