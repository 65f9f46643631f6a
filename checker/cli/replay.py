"""`batchproof replay FILE`: run a stored counterexample on the reference scheduler and
confirm the property fails there. Exit 0 confirmed, 1 divergence, 2 bad input."""

from __future__ import annotations

import argparse

from checker.methods.replay import DivergenceError, replay
from checker.show import itf
from checker.show import text as render


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof replay`."""
    parser.add_argument("file", help="an ITF counterexample (counterexamples/<engine>/*.itf.json)")


def run(args: argparse.Namespace) -> int:
    """Replay and report."""
    cex = itf.read_counterexample(args.file)
    try:
        result = replay(cex)
    except DivergenceError as exc:
        print(f"DIVERGENCE: {exc}")
        return 1
    where = (f"loops from step {result.loop + 1} to {cex.violated_at} and repeats"
             if result.loop is not None else f"fails at step {result.violated_at}")
    print(f"confirmed: {cex.property} {where} on the reference scheduler "
          f"({cex.engine}, config {cex.config_name})")
    print(render.timeline(cex.workload, result.records[: cex.violated_at],
                          highlight=cex.violated_at, loop=result.loop), end="")
    return 0
