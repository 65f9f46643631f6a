"""Benchmark: what the live recorder (checker/live/recorder.py) costs a real `vllm serve`.

    .venv-vllm/bin/python bench/live_overhead.py --requests 500

Two figures from one run of the tiny model (tests/data/tiny_llama) on vLLM's CPU build,
the load of checker/live/load.py:
- **in the engine**: the recorder times its own handlers; the trace gives every step's
  start, so the recorder's seconds per step are set against the engine's step time (the
  wall time from one schedule() to the next while the engine is busy, gaps over a second
  left out as idle);
- **end to end**: the same load (same seed) on the same server flags with and without
  BATCHPROOF_TRACE, wall seconds for all requests to be answered; the alternative a user
  would pick is no recorder at all.
Not a test: the figures depend on the machine and its load; docs/bench_live.md has a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from checker.live import load, server  # noqa: E402 - run as a script from bench/

IDLE_GAP_S = 1.0


def _serve(trace: Path | None, plan: load.LoadPlan, out: Path) -> float:
    """Wall seconds to answer the load, with the recorder on (`trace`) or off (None)."""
    s = server.start(trace, server.ServeOptions(), out / "serve.log")
    try:
        t0 = time.monotonic()
        load.send(s.url, plan)
        return time.monotonic() - t0
    finally:
        s.stop()


def _in_engine(trace: Path) -> tuple[int, float, float]:
    """(steps, median busy step seconds, recorder seconds per step) from the trace."""
    starts, spent = [], 0.0
    for text in trace.read_text().splitlines():
        e = json.loads(text)
        if e["ev"] == "schedule":
            starts.append(e["t"])
            spent = e["recorder_s"]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False) if b - a < IDLE_GAP_S]
    return len(starts), statistics.median(gaps), spent / max(len(starts), 1)


def main() -> int:
    """Run the benchmark; print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    plan = load.LoadPlan(requests=args.requests, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="batchproof-live-bench-") as tmp:
        out = Path(tmp)
        trace = out / "trace.jsonl"
        on = _serve(trace, plan, out)
        steps, step_s, rec_s = _in_engine(trace)
        size = trace.stat().st_size
        off = _serve(None, plan, out)
    print(f"{args.requests} requests, concurrency {plan.concurrency}, seed {args.seed}; "
          f"{steps} steps recorded, {size / 1e6:.2f} MB ({size / steps * 1000 / 1e6:.2f} MB "
          "per 1,000 steps)\n")
    print("| measure | without recorder | with recorder | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| engine step, median (ms) | {1000 * (step_s - rec_s):.2f} | {1000 * step_s:.2f} | "
          f"{step_s / (step_s - rec_s):.3f} |")
    print(f"| recorder per step (ms) | - | {1000 * rec_s:.3f} | "
          f"{100 * rec_s / (step_s - rec_s):.1f}% of a step |")
    print(f"| load answered (s) | {off:.2f} | {on:.2f} | {on / off:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
