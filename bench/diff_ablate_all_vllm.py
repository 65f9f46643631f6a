"""Time of `batchproof diff vllm-v1 --ablate-all` on the default vLLM families, by the
default method (auto: the explicit-state search, checker/methods/diff_explore.py) and by
BMC alone (--method bmc), with each switch's answer and seconds.

    .venv/bin/python bench/diff_ablate_all_vllm.py --jobs 2
    .venv/bin/python bench/diff_ablate_all_vllm.py --configs tiny_fcfs --methods auto

The families are the manifest configs of the pinned vllm-v1 that the default suite checks
and that run without speculative decoding (tiny_fcfs, tiny_priority, tiny_cached,
tiny_async: FCFS, PRIORITY, prefix caching, the AsyncScheduler), each with its own bounds.
Each run is one `python -m checker.cli diff ... --ablate-all --json` subprocess, timed wall
clock (process start and imports included) and in CPU seconds of the children; the load
average before and after is printed because the machine is shared. Not a test:
tests/test_diff_explore.py checks the answers on small bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from timing import timed_run

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIGS = ("tiny_fcfs", "tiny_priority", "tiny_cached", "tiny_async")


def ablate_all(config: str, method: str, jobs: int, timeout: float
               ) -> tuple[float, float, dict]:
    """Wall seconds, CPU seconds and the JSON document of one --ablate-all run."""
    cmd = [sys.executable, "-m", "checker.cli", "diff", "vllm-v1", "--ablate-all",
           "--manifest-config", config, "--jobs", str(jobs), "--timeout", str(timeout),
           "--method", method, "--json"]
    seconds, cpu, done = timed_run(cmd, ROOT)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return seconds, cpu, json.loads(done.stdout)


def cell(row: dict) -> str:
    """One switch's answer, short."""
    if row["status"] == "differ":
        return f"DIFFER at {row['depth']}"
    if row["status"] == "same":
        return f"same ({row['depth']} steps)"
    return row["status"].upper() if row["status"] != "proved" else "PROVED"


def main() -> int:
    """Run the benchmark and print the markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--methods", default="auto,bmc",
                        help="comma-separated --method values; the first is the one timed "
                        "against the others")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    methods = args.methods.split(",")
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; --jobs {args.jobs}, --timeout {args.timeout}")
    print()
    family_rows, switch_rows = [], []
    for config in args.configs.split(","):
        runs = {}
        for method in methods:
            load_before = os.getloadavg()[0]
            wall, cpu, doc = ablate_all(config, method, args.jobs, args.timeout)
            runs[method] = (wall, cpu, doc, load_before, os.getloadavg()[0])
            print(f"{config} --method {method}: {wall:.1f} s wall, {cpu:.1f} s CPU, exit "
                  f"{doc['exit_code']}", flush=True)
        first = methods[0]
        b = runs[first][2]["bounds"]
        row = [config, f"{b['slots']}/{b['depth']}/{b['max_prompt_len']}/{b['max_tokens']}"]
        for method in methods:
            wall, cpu, _, lb, la = runs[method]
            row += [f"{wall:.1f}", f"{cpu:.1f}", f"{lb:.1f} / {la:.1f}"]
        for method in methods[1:]:
            row.append(f"{runs[method][0] / runs[first][0]:.1f}x")
        family_rows.append(row)
        for i, sw in enumerate(runs[first][2]["switches"]):
            if sw["method"] == "config":
                continue  # not read under this config: PROVED at once by every method
            cells = [config, sw["switch"], cell(sw), sw["method"], f"{sw['seconds']:.1f}"]
            for method in methods[1:]:
                other = runs[method][2]["switches"][i]
                ratio = other["seconds"] / sw["seconds"] if sw["seconds"] else float("inf")
                same = "-"
                if sw["status"] == other["status"] == "differ":
                    same = "yes" if _least(sw) == _least(other) else "NO"
                cells += [cell(other), f"{other['seconds']:.1f}", f"{ratio:.1f}x", same]
            switch_rows.append(cells)
    header = ["config", "slots/depth/prompt/max_tokens"]
    for method in methods:
        header += [f"{method} wall s", f"{method} CPU s", f"{method} load before / after"]
    header += [f"{m} / {methods[0]} (wall)" for m in methods[1:]]
    _table(header, family_rows)
    print()
    header = ["config", "switch", f"{methods[0]} answer", "method", f"{methods[0]} s"]
    for m in methods[1:]:
        header += [f"{m} answer", f"{m} s", f"{m} / {methods[0]}", "same least workload"]
    _table(header, switch_rows)
    return 0


def _least(row: dict) -> object:
    """A difference's depth and common workload (requests and EOS choices)."""
    w = row.get("workload") or {}
    return (row["status"], row["depth"], w.get("requests"), w.get("eos"))


def _table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
