"""Benchmark: which bounded search is faster on each manifest config (issue 17: "the
default suite uses the fastest method that is sound for each entry").

    python bench/suite_methods.py                       # every engine's default suite
    python bench/suite_methods.py --engines vllm-v1 --repeat 2 --write docs/bench_suite_methods.md

`batchproof check` runs `--method auto`: the unbounded proofs first (theorem, then
k-induction), and for what they leave undecided the bounded search the manifest config
names in `bounded_method` (BMC unless it says "explore"). Both searches are sound and
reach the same verdicts, depths and least counterexamples (`check --method both`), so the
choice is only about time. This script measures it: for every group of default-suite
entries that `check` runs as one batch (a config and its bounds), one process runs the
group with the BMC search and another with the explorer, both after the same proofs, and
the table says which was faster and whether the manifest records it. A config is worth
`bounded_method = "explore"` when the explorer is at least FASTER times faster (below that,
two runs on a loaded machine can disagree). Not a test: timings depend on the machine and
its load, which the table records.
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

# Every proof timed here is proved, not read back from a cache of an earlier run
# (checker/methods/proof_cache.py); subprocesses inherit the setting.
os.environ.setdefault("BATCHPROOF_PROOF_CACHE", "off")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FASTER = 1.5  # the explorer's speed-up over BMC that a recorded "explore" needs
BEGIN, END = "<!-- suite_methods table: begin -->", "<!-- suite_methods table: end -->"


def _groups(engines: list[str], suite: str) -> list[tuple[str, str, dict[str, int]]]:
    """(engine, config, bounds) of each batch `check` runs, for entries both methods check."""
    from properties.manifest import load, with_bounds

    manifest = load()
    seen: dict[tuple[str, str], tuple[str, str, dict[str, int]]] = {}
    for e in manifest.entries:
        if e.engine not in engines or e.suite != suite or "explore" not in e.methods:
            continue
        nc = with_bounds(manifest.configs[e.config], **dict(e.bounds))
        seen.setdefault((nc.name, repr(nc.bounds)), (e.engine, nc.name, dict(nc.bounds)))
    return list(seen.values())


def _worker(engine: str, config: str, bounds: dict[str, int], search: str,
            suite: str, timeout: float) -> dict[str, Any]:
    """In this process: the group's jobs by `check --method auto` with `search`."""
    from checker.methods.jobs import Job, run_batch
    from properties.manifest import load, with_bounds

    manifest = load()
    jobs = []
    for e in manifest.entries:
        nc = with_bounds(manifest.configs[e.config], **dict(e.bounds))
        if (e.engine, nc.name, dict(nc.bounds), e.suite) != (engine, config, bounds, suite) \
                or "explore" not in e.methods:
            continue
        jobs.append(Job(e.engine, e.property, e.params, nc, e.expected, timeout,
                        method="auto", search=search))
    start = time.monotonic()
    results = run_batch(jobs)
    seconds = time.monotonic() - start
    return {"seconds": round(seconds, 2),
            "verdicts": [[j.property, list(j.params), r.verdict.verdict, r.verdict.depth,
                          r.verdict.method] for j, r in zip(jobs, results, strict=True)]}


def _run(engine: str, config: str, bounds: dict[str, int], search: str, suite: str,
         timeout: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps([engine, config, bounds, search]),
         "--suite", suite, "--timeout", str(timeout)],
        capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(engines: list[str], suite: str, repeat: int, timeout: float
            ) -> list[dict[str, Any]]:
    """One row per group: the least of `repeat` runs of each search."""
    from properties.manifest import load

    configs = load().configs
    rows = []
    for engine, config, bounds in _groups(engines, suite):
        runs: dict[str, list[dict[str, Any]]] = {"bmc": [], "explore": []}
        for r in range(repeat):
            order = ("bmc", "explore") if r % 2 == 0 else ("explore", "bmc")
            for search in order:
                runs[search].append(_run(engine, config, bounds, search, suite, timeout))
                if search == "bmc" and all(v[4] in ("theorem", "induction")
                                           for v in runs["bmc"][-1]["verdicts"]):
                    break  # every entry proved: no bounded search runs at all
        bmc_best = min(runs["bmc"], key=lambda x: x["seconds"])
        row: dict[str, Any] = {
            "engine": engine, "config": config, "entries": len(bmc_best["verdicts"]),
            "proved": sum(v[4] in ("theorem", "induction") for v in bmc_best["verdicts"]),
            "bmc_s": bmc_best["seconds"], "recorded": configs[config].bounded_method}
        if runs["explore"]:
            exp_best = min(runs["explore"], key=lambda x: x["seconds"])
            row["explore_s"] = exp_best["seconds"]
            row["same"] = [v[:4] for v in bmc_best["verdicts"]] == \
                [v[:4] for v in exp_best["verdicts"]]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def faster(row: dict[str, Any]) -> str:
    """The search the measurement recommends for the row's config."""
    if "explore_s" not in row:
        return "-"
    return "explore" if row["bmc_s"] >= FASTER * max(row["explore_s"], 0.01) else "bmc"


def table(rows: list[dict[str, Any]], header: str) -> str:
    """The markdown table of `rows`."""
    lines = [header, "",
             "| engine | config | entries | proved | BMC search s | explorer s | BMC / explorer "
             "| same verdicts | faster | manifest | |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in rows:
        has = "explore_s" in r
        ratio = f"{r['bmc_s'] / max(r['explore_s'], 0.01):.2f}x" if has else "-"
        want = faster(r)
        ok = "" if want in ("-", r["recorded"]) else "update"
        lines.append(
            f"| {r['engine']} | {r['config']} | {r['entries']} | {r['proved']} | "
            f"{r['bmc_s']:.2f} | {r['explore_s']:.2f} | {ratio} | "
            f"{'yes' if r['same'] else 'NO'} | {want} | {r['recorded']} | {ok} |" if has else
            f"| {r['engine']} | {r['config']} | {r['entries']} | {r['proved']} | "
            f"{r['bmc_s']:.2f} | - | - | - | - (all proved) | {r['recorded']} | |")
    return "\n".join(lines)


def _header(load_before: float, repeat: int) -> str:
    import z3

    load_after = os.getloadavg()[0]
    return (f"Measured by `python bench/suite_methods.py` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.platform()}, "
            f"{os.cpu_count()} cores, z3 {z3.get_version_string()}; the least of {repeat} "
            f"run(s) per search, each group in its own process; load average (1 min) "
            f"{load_before:.1f} before and {load_after:.1f} after. Seconds include the "
            "proofs that run first in both columns.")


def main() -> int:
    """Measure, print the table, and with --write replace it in the page."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="all",
                    help="comma-separated engine names (default: every engine)")
    ap.add_argument("--suite", default="default")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--write", metavar="PAGE")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        engine, config, bounds, search = json.loads(args.worker)
        print(json.dumps(_worker(engine, config, bounds, search, args.suite, args.timeout)))
        return 0
    from model import registry

    names = list(registry.names()) if args.engines == "all" else args.engines.split(",")
    load_before = os.getloadavg()[0]
    rows = measure(names, args.suite, args.repeat, args.timeout)
    text = table(rows, _header(load_before, args.repeat))
    print(text)
    if args.write:
        page = Path(args.write)
        old = page.read_text()
        head, rest = old.split(BEGIN, 1)
        page.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
    return 1 if any(not r.get("same", True) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
