"""Benchmark: k-induction on vLLM V1 as the number of request slots grows (issue 17,
item 2).

    python bench/induction_scale.py --configs tiny_fcfs --slots 2,3,4,6,8,12,16 \
        --cap 120 --save rows.json --write docs/bench_induction.md --label after
    python bench/induction_scale.py --render rows.json --write docs/bench_induction.md \
        --label after

Every (config, slots) pair runs in its own process, so `prove_well_formed`'s per-process
cache never carries over: the process proves the well-formedness invariant once (timed),
then proves each safety property by `induction.prove` (timed separately), each under a
cap of --cap seconds. A config's sweep stops at the first slot count whose invariant is
not proved within the cap (more slots only cost more). --write replaces only the table
between the page's `induction_scale <label>` markers. Not a test: timings depend on the
machine and its load, which each table records.
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

# properties/manifests/vllm_v1.toml, section "--- safety" (the step properties).
SAFETY = ("budget_respected", "running_within_max_num_seqs", "kv_blocks_conserved",
          "no_admission_after_preemption", "computed_within_tokens", "preempted_requeued",
          "running_before_waiting", "whole_prompt_without_chunking")
MAX_K = 2  # checker/methods/jobs.py's Job.max_k default


def _worker(config: str, slots: int, cap: float, props: list[str]) -> list[dict[str, Any]]:
    """In this process: the invariant once, then every property, each timed."""
    from checker.methods import induction
    from checker.methods.symbolic import Bounds, Family
    from properties import catalogue
    from properties.manifest import load

    nc = load().configs[config]
    family = Family(base=nc.config, ranges=nc.ranges, validated=nc.validated,
                    engine=nc.engine)
    bounds = Bounds(**{**dict(nc.bounds), "slots": slots})
    t0 = time.monotonic()
    wf = induction.prove_well_formed(family, bounds, cap)
    inv_s = time.monotonic() - t0
    rows = []
    for name in props:
        row: dict[str, Any] = {"config": config, "slots": slots, "property": name,
                               "invariant_s": round(inv_s, 2), "property_s": None,
                               "verdict": "invariant " + (wf.reason or "?"), "k": None}
        if wf.proved:
            t1 = time.monotonic()
            res = induction.prove(catalogue.get(name), family, bounds, MAX_K, cap)
            row["property_s"] = round(time.monotonic() - t1, 2)
            row["verdict"] = "PROVED" if res.proved else f"not proved: {res.reason}"
            row["k"] = res.k
        rows.append(row)
    return rows


def _run_pair(config: str, slots: int, cap: float, props: list[str]) -> list[dict[str, Any]]:
    """One (config, slots) pair in a fresh process; a process past its whole budget is
    killed and its rows are reported as over the cap."""
    cmd = [sys.executable, __file__, "--worker", config, str(slots), str(cap), ",".join(props)]
    budget = cap * (1 + len(props)) + 60
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, cwd=ROOT,
                             check=True).stdout
    except subprocess.TimeoutExpired:
        return [{"config": config, "slots": slots, "property": p, "invariant_s": None,
                 "property_s": None, "verdict": f"killed after {budget:.0f} s", "k": None}
                for p in props]
    return json.loads(out.strip().splitlines()[-1])


def measure(configs: list[str], slot_counts: list[int], cap: float,
            props: list[str]) -> list[dict[str, Any]]:
    """Every row, printing each pair as it ends."""
    rows: list[dict[str, Any]] = []
    for config in configs:
        for slots in slot_counts:
            load = os.getloadavg()[0]
            pair = _run_pair(config, slots, cap, props)
            for r in pair:
                r["load"] = round(load, 2)
            rows += pair
            print(render(pair), flush=True)
            if not pair[0]["verdict"] or pair[0]["invariant_s"] is None or \
                    pair[0]["verdict"].startswith(("invariant", "killed")):
                break
    return rows


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def render(rows: list[dict[str, Any]]) -> str:
    """A markdown table of the rows."""
    out = ["| config | slots | property | invariant s | property s | verdict | k | load |",
           "|---|---:|---|---:|---:|---|---:|---:|"]
    for r in rows:
        out.append(f"| {r['config']} | {r['slots']} | {r['property']} | "
                   f"{_fmt(r['invariant_s'])} | {_fmt(r['property_s'])} | {r['verdict']} | "
                   f"{r['k'] if r['k'] is not None else '-'} | {r.get('load', '-')} |")
    return "\n".join(out)


def _header(cap: float) -> str:
    return (f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, "
            f"{os.cpu_count()} cores, per-query cap {cap:.0f} s, max_k {MAX_K}; load = 1-min "
            "load average when the pair started.")


def write(page: Path, label: str, text: str) -> None:
    """Replace the text between the page's `induction_scale <label>` markers (appending
    the markers if the page has none)."""
    begin, end = f"<!-- induction_scale {label} -->", f"<!-- /induction_scale {label} -->"
    doc = page.read_text() if page.exists() else ""
    block = f"{begin}\n{text}\n{end}"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip("\n") + ("\n\n" if doc else "") + block + "\n"
    page.write_text(doc)


def main() -> None:
    """Parse the flags; run the worker, a sweep, or a render."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=4, metavar=("CONFIG", "SLOTS", "CAP", "PROPS"))
    ap.add_argument("--configs", default="tiny_fcfs")
    ap.add_argument("--slots", default="2,3,4,6,8,12,16")
    ap.add_argument("--properties", default=",".join(SAFETY))
    ap.add_argument("--cap", type=float, default=120.0)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--render", type=Path)
    ap.add_argument("--write", type=Path)
    ap.add_argument("--label", default="after")
    a = ap.parse_args()
    if a.worker:
        config, slots, cap, props = a.worker
        print(json.dumps(_worker(config, int(slots), float(cap), props.split(","))))
        return
    if a.render:
        saved = json.loads(a.render.read_text())
        rows, header = saved["rows"], saved["header"]
    else:
        rows = measure(a.configs.split(","), [int(s) for s in a.slots.split(",")], a.cap,
                       a.properties.split(","))
        header = _header(a.cap)
        if a.save:
            a.save.write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    text = f"{header}\n\n{render(rows)}"
    print(text)
    if a.write:
        write(a.write, a.label, text)


if __name__ == "__main__":
    main()
