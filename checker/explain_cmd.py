"""`batchproof explain FILE`: a text timeline of a counterexample (ITF) or a workload."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from checker import itf, render
from model.errors import InputError
from model.reference.vllm_v1 import simulate
from model.workload import load_workload
from properties import catalogue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof explain`."""
    parser.add_argument("file", help="an ITF counterexample or a workload JSON")
    parser.add_argument("--format", choices=["text"], default="text",
                        help="output format (text)")


def run(args: argparse.Namespace) -> int:
    """Print the timeline."""
    path = Path(args.file)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; check the path") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if isinstance(doc, dict) and "#meta" in doc:
        cex = itf.read_counterexample(path)
        prop = catalogue.get(cex.property, **dict(cex.params))
        records = simulate(cex.workload)[: cex.violated_at]
        print(f"{cex.property} on {cex.config_name}: {prop.description}")
        print(render.requests_table(cex.workload), end="")
        print(render.timeline(cex.workload, records, highlight=cex.violated_at,
                              loop=cex.loop), end="")
        return 0
    workload = load_workload(path)
    print(render.timeline(workload, simulate(workload)), end="")
    return 0
