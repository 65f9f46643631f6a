"""Counterexamples as ITF JSON (the Informal Trace Format of Apalache and Quint).

`#meta` names the engine, its pinned version, the property, the config, the method that
found it, the bounds, and the workload that drives the run (so `replay` needs nothing
else). State 0 is the initial state; state k is what step k did (the simulation
contract's step object, with maps as ITF `#map`). A lasso has `loop`: the index of the
state the run returns to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checker.methods.verdict import Counterexample
from model import registry as engines
from model.core.errors import InputError
from model.core.types import StepRecord
from model.workload import parse_workload, workload_to_json

VARS = ["step", "scheduled", "admitted", "resumed", "preempted", "finished", "free_blocks",
        "num_computed_tokens", "running", "waiting", "token_budget_left"]


def _map(pairs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {"#map": [[k, v] for k, v in pairs]}


def _state(rec: StepRecord) -> dict[str, Any]:
    return {
        "step": rec.step, "scheduled": _map(rec.scheduled), "admitted": list(rec.admitted),
        "resumed": list(rec.resumed), "preempted": list(rec.preempted),
        "finished": _map(rec.finished), "free_blocks": rec.free_blocks,
        "num_computed_tokens": _map(rec.num_computed_tokens), "running": list(rec.running),
        "waiting": list(rec.waiting), "token_budget_left": rec.token_budget_left,
    }


def to_itf(cex: Counterexample, records: tuple[StepRecord, ...]) -> dict[str, Any]:
    """The ITF document of a counterexample and the reference's run of it."""
    engine = engines.get(cex.workload.engine)
    rcfg = engine.rule_config(cex.workload.config)
    initial = {"step": 0, "scheduled": {"#map": []}, "admitted": [], "resumed": [],
               "preempted": [], "finished": {"#map": []},
               "free_blocks": rcfg.usable_blocks,
               "num_computed_tokens": {"#map": []}, "running": [], "waiting": [],
               "token_budget_left": rcfg.token_budget}
    states = [initial] + [_state(r) for r in records[: cex.violated_at]]
    doc: dict[str, Any] = {
        "#meta": {
            "format": "ITF", "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
            "source": "batchproof", "engine": cex.engine, "engine_version": engine.version,
            "property": cex.property, "params": dict(cex.params), "config": cex.config_name,
            "method": cex.method, "bounds": dict(cex.bounds), "violated_at": cex.violated_at,
            "workload": workload_to_json(cex.workload),
        },
        "vars": VARS,
        "states": [{"#meta": {"index": i}, **s} for i, s in enumerate(states)],
    }
    if cex.loop is not None:
        doc["loop"] = cex.loop
    if not cex.minimal:
        doc["#meta"]["minimal"] = False
    return doc


def dumps(doc: dict[str, Any]) -> str:
    """Canonical JSON text: the same counterexample gives the same bytes."""
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def read_counterexample(path: str | Path) -> Counterexample:
    """Read an ITF counterexample written by batchproof."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; check the path") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    meta = doc.get("#meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or "workload" not in meta or "property" not in meta:
        raise InputError(f"{path} is not a batchproof ITF counterexample (no #meta.workload); "
                         "pass a file written by 'batchproof check --write'")
    return Counterexample(
        engine=meta.get("engine", "vllm-v1"), property=meta["property"],
        params=tuple(sorted(meta.get("params", {}).items())),
        config_name=meta.get("config", "?"), workload=parse_workload(meta["workload"]),
        method=meta.get("method", "?"), bounds=tuple(meta.get("bounds", {}).items()),
        violated_at=int(meta.get("violated_at", meta["workload"].get("steps", 1))),
        loop=doc.get("loop"), minimal=bool(meta.get("minimal", True)))
