"""`batchproof check-trace TRACE.json`: decide catalogue properties on a trace given in
the simulation contract (docs/simulation_contract.md), whatever produced it: a real
engine (`audit --save`), a log converter, or `batchproof simulate --json`. Nothing is
re-run (checker/methods/trace_check.py).

The trace is one of:
- a live trace, recorded from a running `vllm serve` (BATCHPROOF_TRACE, docs/live.md):
  besides the properties, every step is compared with the reference replayed on the same
  arrivals and aborts, and every request is accounted for (checker/live/verdict.py);
- a simulation document (`engine`, `config`, `steps`) with the workload's `requests` (and
  `eos`) beside its steps, as `audit --save` writes it;
- a simulation document (the output of `simulate --json`) with `--workload W.json`, the
  workload it ran: properties read each request's prompt, max_tokens, arrival and
  priority, which the steps do not carry;
- `{"workload": {...}, "steps": [...]}`, or a bare list of steps with `--workload`.

Exit codes: 0 no violation departs from the manifest (a property the manifest expects to
hold on the trace's config is violated: 1; with --strict any violation is 1); 2 bad
input; 3 a property named with --property could not be decided on a finite trace."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from checker.live.trace import is_live_trace
from checker.methods.trace_check import (
    DEPARTS,
    NOT_CHECKED,
    VIOLATED,
    TraceVerdict,
    check_trace,
    properties_for,
)
from checker.show.sources import parse_step
from checker.show.trace_table import render_text
from model import registry as engines
from model.core.checks import MAX_STEPS
from model.core.errors import InputError, shown
from model.core.types import StepRecord, Workload
from model.workload import check_workload, load_workload, parse_workload, read_json

JSON_SCHEMA = 1  # bump it when the --json shape changes meaning
_FIX = "pass a simulation document (simulate --json), with --workload or its 'requests'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof check-trace`."""
    parser.add_argument("trace", metavar="TRACE.json",
                        help="steps in the simulation contract (see the command's help)")
    parser.add_argument("--workload", metavar="W.json",
                        help="the workload the trace ran (needed when the trace has no "
                        "'requests', as simulate --json output)")
    parser.add_argument("--engine", help="the trace's engine (default: the document's "
                        f"'engine', else {engines.names()[0]})")
    parser.add_argument("--property", action="append", metavar="NAME",
                        help="check only this property (repeatable; default every property "
                        "the engine's manifest names, each parameterisation it lists)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 on any violation, also one the manifest records")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")


def load_trace(path: str, workload_path: str | None = None, engine: str | None = None
               ) -> tuple[Workload, tuple[StepRecord, ...]]:
    """The trace's workload (its config the one the trace ran under) and records."""
    doc = read_json(path, _FIX, "trace")
    head: dict[str, Any] = {}
    if isinstance(doc, list):
        raw_steps = doc
    elif isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        head, raw_steps = doc, doc["steps"]
    else:
        raise InputError(f"{path} is not a trace: it needs a 'steps' list (or is one); "
                         f"{_FIX}")
    if len(raw_steps) > MAX_STEPS:
        raise InputError(f"{path} has {len(raw_steps)} steps, more than the {MAX_STEPS} a "
                         "trace may have")
    records = tuple(parse_step(i, raw) for i, raw in enumerate(raw_steps))
    for i, r in enumerate(records):
        if r.step != i + 1:
            raise InputError(f"steps[{i}].step is {r.step}, expected {i + 1}: a trace "
                             "starts at step 1 and has every step")
    named = head.get("engine")
    if named is not None and not isinstance(named, str):
        raise InputError(f"'engine' must be a string, got {shown(named)}")
    workload = _workload(path, head, workload_path)
    engine = engine or named or workload.engine
    if named is not None and engine != named:
        raise InputError(f"{path} is a {named} trace but --engine is {engine}")
    if workload.engine != engine:
        raise InputError(f"the workload is a {workload.engine} workload, the trace {engine}'s")
    model = engines.get(engine)
    config = model.parse_config(head["config"]) if "config" in head else workload.config
    workload = replace(workload, config=config, steps=max(len(records), 1), engine=engine)
    check_workload(workload, validate=False)
    return workload, records


def _workload(path: str, head: dict[str, Any], workload_path: str | None) -> Workload:
    if workload_path is not None:
        return load_workload(workload_path)
    if isinstance(head.get("workload"), dict):
        return parse_workload(head["workload"])
    if "requests" in head:
        keys = ("engine", "config", "requests", "eos")
        return parse_workload({k: head[k] for k in keys if k in head})
    raise InputError(f"{path} has no requests: properties read each request's prompt_len, "
                     "max_tokens, arrival_step and priority, which the steps do not carry; "
                     "pass --workload W.json (the workload the trace ran) or add its "
                     "'requests'")


def exit_code(verdicts: list[TraceVerdict], named: bool, strict: bool) -> int:
    """1 a violation departs (any violation with `strict`); else 3 when a property named
    on the command line was not checked; else 0."""
    if any(v.status == DEPARTS or (strict and v.verdict == VIOLATED) for v in verdicts):
        return 1
    if named and any(v.verdict == NOT_CHECKED for v in verdicts):
        return 3
    return 0


def run(args: argparse.Namespace) -> int:
    """Check the trace; print the table or JSON; return the exit code."""
    if is_live_trace(args.trace):
        from checker.cli.live import run_live

        return run_live(args)
    workload, records = load_trace(args.trace, args.workload, args.engine)
    verdicts = list(check_trace(workload.engine, workload, records,
                                properties_for(workload.engine, args.property or ())))
    code = exit_code(verdicts, bool(args.property), args.strict)
    if args.json:
        json.dump(json_document(args.trace, workload, verdicts, code), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render_text(args.trace, workload, records, verdicts))
    return code


def json_document(path: str, workload: Workload, verdicts: list[TraceVerdict], code: int
                  ) -> dict[str, object]:
    """The `--json` document, schema 1."""
    model = engines.get(workload.engine)
    return {"schema": JSON_SCHEMA, "command": "check-trace", "trace": path,
            "engine": workload.engine, "version": model.version,
            "steps": workload.steps, "requests": len(workload.requests),
            "verdicts": [v.to_json() for v in verdicts],
            "summary": {"properties": len(verdicts),
                        **{k.lower(): sum(v.verdict == k for v in verdicts)
                           for k in ("HOLDS", VIOLATED, NOT_CHECKED)},
                        "departs": sum(v.status == DEPARTS for v in verdicts),
                        "exit_code": code}}
