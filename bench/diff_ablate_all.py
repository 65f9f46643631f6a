"""Time of `batchproof diff mistralrs --ablate-all` on the default mistral.rs configurations:
the manifest's configs of the pinned engine (mr_tiny, mr_escape, mr_outgrow, mr_budget2),
each with its own bounds, every rule switch toggled in turn (checker/methods/diff.py).

    .venv/bin/python bench/diff_ablate_all.py --jobs 2
    .venv/bin/python bench/diff_ablate_all.py --versions 9e922623,v0.9.0 --configs mr_tiny

Each run is one `python -m checker.cli diff ... --ablate-all --json` subprocess, timed
wall clock (process start and imports included); the table gives each switch's answer and
the load average before and after, because the time depends on what else the machine
runs. Not a test: tests/test_diff.py checks the answers on small bounds.
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

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIGS = ("mr_tiny", "mr_escape", "mr_outgrow", "mr_budget2")


def ablate_all(version: str, config: str, jobs: int, timeout: float) -> tuple[float, dict]:
    """Wall seconds and the JSON document of one --ablate-all run."""
    engine = "mistralrs" if version == "pinned" else f"mistralrs@{version}"
    cmd = [sys.executable, "-m", "checker.cli", "diff", engine, "--ablate-all", "--manifest-config",
           config, "--jobs", str(jobs), "--timeout", str(timeout), "--json"]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return seconds, json.loads(done.stdout)


def _cell(row: dict) -> str:
    if row["status"] == "differ":
        return f"differs at step {row['depth']}"
    if row["status"] == "same":
        return f"same ({row['depth']} steps)"
    return row["status"]


def main() -> int:
    """Run the benchmark and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--versions", default="pinned",
                        help="comma-separated mistral.rs versions ('pinned' = the bare name)")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; --jobs {args.jobs}")
    print()
    rows = []
    switches: list[str] = []
    for version in args.versions.split(","):
        for config in args.configs.split(","):
            load_before = os.getloadavg()[0]
            seconds, doc = ablate_all(version, config, args.jobs, args.timeout)
            load_after = os.getloadavg()[0]
            switches = [r["switch"] for r in doc["switches"]]
            b = doc["bounds"]
            rows.append((version, config, f"{b['slots']}/{b['depth']}/{b['max_prompt_len']}/"
                         f"{b['max_tokens']}", f"{seconds:.1f}",
                         f"{load_before:.1f} / {load_after:.1f}",
                         *(_cell(r) for r in doc["switches"])))
    header = ("version", "config", "slots/depth/prompt/max_tokens", "wall s",
              "load before / after", *switches)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
