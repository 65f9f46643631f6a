"""The reference explorer against the array explorer with prefix caching and the
AsyncScheduler on (issue 29 item 3): one group of manifest entries per config (the step
properties sharing one search, as `check` shares them), states and seconds of each
explorer, the array explorer once with an empty proof store (its reduction proofs paid)
and once with them stored. Prints a markdown table (docs/bench_scale.md).

    nice -n 5 .venv/bin/python bench/explore_modes.py [CONFIG ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checker.methods import array as ax  # noqa: E402
from checker.methods import explore  # noqa: E402
from checker.methods.array import analysis  # noqa: E402
from checker.methods.jobs import family_of, symbolic_bounds  # noqa: E402
from properties import catalogue, manifest  # noqa: E402

DEFAULT = ("tiny_cached", "tiny_async")


def group(config: str) -> list:
    """The config's step entries at its own bounds (what one `check` search decides)."""
    m = manifest.load()
    return [e for e in m.entries if e.config == config and not e.bounds
            and catalogue.get(e.property, **dict(e.params)).kind == "step"]


def row(config: str) -> str:
    """One table row: the group's verdicts agree, states and seconds of each search."""
    entries = group(config)
    nc = manifest.load().configs[config]
    props = [catalogue.get(e.property, **dict(e.params)) for e in entries]
    family, bounds = family_of(nc), symbolic_bounds(nc)
    assert ax.unsupported(family, bounds) is None
    with tempfile.TemporaryDirectory() as store:
        os.environ["BATCHPROOF_PROOF_CACHE"] = store
        analysis._shape.cache_clear()
        analysis._permuted.cache_clear()
        t = time.monotonic()
        cold = ax.check_many(props, family, bounds, 1800)
        cold_s = time.monotonic() - t
        analysis._shape.cache_clear()
        analysis._permuted.cache_clear()
        t = time.monotonic()
        warm = ax.check_many(props, family, bounds, 1800)
        warm_s = time.monotonic() - t
    t = time.monotonic()
    ref = explore.check_many(props, family, bounds, 1800)
    ref_s = time.monotonic() - t
    same = all((a.status, a.depth, a.workload) == (b.status, b.depth, b.workload)
               == (r.status, r.depth, r.workload)
               for a, b, r in zip(warm, cold, ref, strict=True))
    verdicts = ", ".join(f"{e.property} {r.status}" for e, r in zip(entries, ref, strict=True))
    return (f"| {config} ({len(entries)} properties, {bounds.slots} slots, depth "
            f"{bounds.depth}) | {ref[0].stats.states} | {ref_s:.1f} | {warm[0].stats.states} | "
            f"{cold_s:.1f} | {warm_s:.1f} | {ref_s / warm_s:.0f}x | "
            f"{'equal' if same else 'DIFFER'}: {verdicts} |")


def main() -> None:
    """Print the table for the configs named (default: tiny_cached and tiny_async)."""
    configs = sys.argv[1:] or DEFAULT
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| question | reference states | reference s | array states | array s, proofs "
          "paid | array s, proofs stored | ratio (stored) | verdicts, depths, least "
          "counterexamples |")
    print("|---|---|---|---|---|---|---|---|")
    for config in configs:
        print(row(config), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
