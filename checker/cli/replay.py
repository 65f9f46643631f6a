"""`batchproof replay FILE`: run a stored counterexample on the reference scheduler, confirm
the property fails there, and confirm the file's states are exactly the reference's
states (for a lasso, that its `loop` state is the one the run repeats). Exit 0
confirmed, 1 divergence (one line: the first differing state and field), 2 bad input."""

from __future__ import annotations

import argparse

from checker.methods.replay import DivergenceError
from checker.show import itf, sources
from checker.show import text as render
from model.workload import check_workload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof replay`."""
    parser.add_argument("file", help="an ITF counterexample (counterexamples/<engine>/*.itf.json)")


def run(args: argparse.Namespace) -> int:
    """Replay and report."""
    trace = itf.parse_trace(sources.read_json(args.file), args.file)
    cex = trace.counterexample
    # What every run needs (field types, requests the engine admits); a manifest config
    # the engine refuses at start is studied as the manifest says, so no more than that.
    check_workload(cex.workload, validate=False)
    try:
        result = itf.replay_trace(trace)
    except DivergenceError as exc:
        print(f"DIVERGENCE: {exc}")
        return 1
    where = (f"loops from step {result.loop + 1} to {cex.violated_at} and repeats"
             if result.loop is not None else f"fails at step {result.violated_at}")
    print(f"confirmed: {cex.property} {where} on the reference scheduler "
          f"({cex.engine}, config {cex.config_name}); all {len(trace.states)} stored states "
          "match it")
    print(render.timeline(cex.workload, result.records[: cex.violated_at],
                          highlight=cex.violated_at, loop=result.loop), end="")
    return 0
