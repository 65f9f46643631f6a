"""Benchmark: workloads per second through `batchproof audit` on the installed vLLM, and the
share of that time spent inside the real engine against inside batchproof (the reference,
the step-by-step comparison and the properties on the real trace).

    .venv-vllm/bin/python bench/audit_throughput.py --runs 3 --count 200

Each run is a fresh `python -m checker.cli audit --json` subprocess (so start-up, mostly
importing vLLM and torch, is measured too); its report's `timing` gives the engine's and
batchproof's seconds per workload source. Rows: the random workloads of each mode alone
(`--modes`, default every mode of checker/conformance/modes.py), then the audit of the CI
example (all sources, modes off and prefix, `--count` / 2 workloads per mode) twice in a
fresh cache directory: the BMC witnesses searched (a cold cache, as in every CI job), then
read from the cache the first run wrote (the other caches under $XDG_CACHE_HOME linked in
unchanged). An audit with findings (exit 1) is still timed, its findings listed under the
table (the random rows run with `--shrink-calls 0`, so they are not shrunk). Not a test:
the figures depend on the machine and its load; docs/bench_audit.md has a run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_mutations import run_audit  # noqa: E402 - a sibling script, not a package

ALL_MODES = "off,prefix,async,async+prefix"
CI_MODES = "off,prefix"  # docs/examples/audit-workflow.yml


def _row(label: str, docs: Sequence[dict], seconds: Sequence[float]) -> str:
    t = [d["timing"] for d in docs]
    rate = [x["workloads_per_s"] for x in t]
    share = [100.0 * x["engine_share"] for x in t]
    audited = docs[0]["summary"]["audited"]
    steps = docs[0]["summary"]["steps"]

    def med(key: str) -> float:
        return statistics.median(x[key] for x in t)

    return (f"| {label} | {audited} ({steps} steps) | {statistics.median(rate):.1f} "
            f"({min(rate):.1f}-{max(rate):.1f}) | {statistics.median(share):.0f}% | "
            f"{med('engine_s'):.1f} | {med('batchproof_s'):.1f} | {med('witnesses_s'):.1f} | "
            f"{med('startup_s'):.1f} | {statistics.median(seconds):.0f} |")


def _findings(docs: Sequence[dict]) -> str:
    """The findings of the runs: each group (kind and signature) with the workloads of all
    runs it was seen on."""
    seen: dict[str, int] = {}
    for d in docs:
        for f in d["findings"]:
            key = str(f["signature"])  # "violation:computed_within_tokens", ...
            seen[key] = seen.get(key, 0) + int(f["count"])
    audited = sum(int(d["summary"]["audited"]) for d in docs)
    return "; ".join(f"{key} on {n} of {audited} workloads" for key, n in seen.items())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the audits and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per random row (default 3)")
    parser.add_argument("--count", type=int, default=200,
                        help="random workloads per mode (default 200)")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--modes", default=ALL_MODES,
                        help=f"comma-separated modes, a random row each (default {ALL_MODES})")
    args = parser.parse_args(argv)
    rows = []
    notes = []
    for mode in args.modes.split(","):
        results = [run_audit(None, ["--seed", str(args.seed + r), "--count", str(args.count),
                                    "--modes", mode, "--sources", "random",
                                    "--shrink-calls", "0"])
                   for r in range(args.runs)]
        bad = [code for code, _, _ in results if code not in (0, 1)]
        assert not bad, f"mode {mode}: audit exited {bad}"
        docs = [d for _, d, _ in results]
        label = f"random, mode {mode}"
        if any(code == 1 for code, _, _ in results):
            notes.append(f"mode {mode}: {_findings(docs)}")
            label += f" (findings, note {len(notes)})"
        rows.append(_row(label, docs, [s for _, _, s in results]))
        print(rows[-1], flush=True)
    full = ["--seed", str(args.seed), "--count", str(args.count // 2), "--modes", CI_MODES]
    # A cache of its own: empty for the first run (every witness searched, as in a CI job),
    # written by it and read by the second. (--no-cache would neither read nor write it.)
    # The other tools' caches (vLLM's, matplotlib's font cache, ...) are linked in, so that
    # only batchproof's is cold: a cold matplotlib cache alone adds seconds to the first
    # workload.
    with tempfile.TemporaryDirectory(prefix="audit-bench-cache-") as cache:
        home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        for entry in home.iterdir() if home.is_dir() else ():
            if entry.name != "batchproof":
                (Path(cache) / entry.name).symlink_to(entry)
        for label, cached in (("all sources, witnesses searched", False),
                              ("all sources, witnesses cached", True)):
            code, doc, seconds = run_audit(None, full, extra_env={"XDG_CACHE_HOME": cache})
            assert code in (0, 1, 3), doc["summary"]
            if code == 1:  # still timed: the findings are noted, not fatal
                notes.append(f"{label}: {_findings([doc])} (the installed vLLM should "
                             "audit clean here: look at this with `batchproof audit`)")
                label += f" (findings, note {len(notes)})"
            got = doc["witnesses"]["cached"]  # type: ignore[index]
            if got != cached:
                notes.append(f"{label}: the witnesses were {'' if got else 'not '}read from "
                             "the cache (batchproof's sources changed between the runs?)")
                label += f" (note {len(notes)})"
            rows.append(_row(f"{label}, modes {CI_MODES}", [doc], [seconds]))
            print(rows[-1], flush=True)
    load = os.getloadavg()
    print(f"\n{platform.python_version()}, {os.cpu_count()} cores (shared), load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end; {args.runs} runs per random "
          f"row, {args.count} workloads of 30 steps per mode; the all-sources rows one run, "
          f"{args.count // 2} random workloads per mode.\n")
    print("| audit | workloads audited | workloads/s (median, range) | in the real engine | "
          "engine s | batchproof s | witnesses s | start-up s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if notes:
        print()
    for k, note in enumerate(notes, start=1):
        print(f"{k}. {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
