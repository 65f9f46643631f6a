"""Counterexamples as ITF JSON (the Informal Trace Format of Apalache and Quint).

`#meta` names the engine, its pinned version, the property, the config, the method that
found it, the bounds, the 1-based step where the property fails (`violated_at`), and the
workload that drives the run (so `replay` needs nothing else). State 0 is the initial
state; state k is what step k did (the simulation contract's step object, with maps as
ITF `#map`), one variable per name in `vars`.

A trace of a step or window property stores states 0..violated_at, with the `step`
counter among its variables.

A lasso (`never_finishes`) follows ITF's lasso reading (Apalache ADR-015): with `loop` =
l and last state s_n, the run goes on s_{l+1}, s_{l+2}, ... forever, so s_l == s_n in
every variable. The methods find a loop i < d = violated_at: the scheduler after step i
behaves as after step d, so steps i+1, i+2, ... repeat as steps d+1, d+2, .... Step
records carry no scheduler state, so the file stores one step more, states 0..d+1, and
`loop` = i+1: the record of step d+1 is the record of step i+1 (the first step of the
repetition), and after it the run goes round again. The `step` counter is not a
variable of a lasso (a counter never repeats). In memory `Counterexample.loop` stays
the methods' i (the run repeats from step i+1); only the file says i+1.

Reading a file checks every `#meta` field, `vars`, `states` and `loop` for type and range
(InputError naming the value and the fix); `replay_trace` then checks the stored states
against the reference's run of the workload, state by state and variable by variable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.methods import replay as replaying
from checker.methods.verdict import Counterexample
from model import registry as engines
from model.core.errors import InputError
from model.core.types import StepRecord
from model.workload import parse_workload, workload_to_json
from properties import catalogue

VARS = ["step", "scheduled", "admitted", "resumed", "preempted", "finished", "free_blocks",
        "num_computed_tokens", "running", "waiting", "token_budget_left"]
LASSO_VARS = [v for v in VARS if v != "step"]


@dataclass(frozen=True, slots=True)
class Trace:
    """An ITF file as read: its counterexample, and the variables, states and loop index
    exactly as stored (`loop` is the file's index, Counterexample.loop + 1)."""

    counterexample: Counterexample
    vars: tuple[str, ...]
    states: tuple[Mapping[str, Any], ...]
    loop: int | None = None


def variables(lasso: bool) -> list[str]:
    """The state variables of a trace: a lasso's have no step counter."""
    return LASSO_VARS if lasso else VARS


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


def states(cex: Counterexample, records: tuple[StepRecord, ...]) -> list[dict[str, Any]]:
    """The ITF states of a counterexample from the reference's records of its run: 0..d,
    or 0..d+1 for a lasso (see the module docstring)."""
    engine = engines.get(cex.workload.engine)
    rcfg = engine.rule_config(cex.workload.config)
    lasso = cex.loop is not None
    stored = cex.violated_at + 1 if lasso else cex.violated_at
    if len(records) < stored:
        raise ValueError(f"{cex.property}: {len(records)} records, the trace needs {stored}")
    initial = {"step": 0, "scheduled": {"#map": []}, "admitted": [], "resumed": [],
               "preempted": [], "finished": {"#map": []},
               "free_blocks": rcfg.usable_blocks,
               "num_computed_tokens": {"#map": []}, "running": [], "waiting": [],
               "token_budget_left": rcfg.token_budget}
    names = variables(lasso)
    raw = [initial] + [_state(r) for r in records[:stored]]
    return [{"#meta": {"index": i}, **{v: s[v] for v in names}} for i, s in enumerate(raw)]


def to_itf(cex: Counterexample, records: tuple[StepRecord, ...]) -> dict[str, Any]:
    """The ITF document of a counterexample and the reference's run of it (for a lasso,
    the records must reach step violated_at + 1)."""
    engine = engines.get(cex.workload.engine)
    doc: dict[str, Any] = {
        "#meta": {
            "format": "ITF", "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
            "source": "batchproof", "engine": cex.engine, "engine_version": engine.version,
            "property": cex.property, "params": dict(cex.params), "config": cex.config_name,
            "method": cex.method, "bounds": dict(cex.bounds), "violated_at": cex.violated_at,
            "workload": workload_to_json(cex.workload),
        },
        "vars": variables(cex.loop is not None),
        "states": states(cex, records),
    }
    if cex.loop is not None:
        doc["loop"] = cex.loop + 1
    if not cex.minimal:
        doc["#meta"]["minimal"] = False
    return doc


def dumps(doc: dict[str, Any]) -> str:
    """Canonical JSON text: the same counterexample gives the same bytes."""
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def read_trace(path: str | Path) -> Trace:
    """Read an ITF counterexample written by batchproof, every field checked."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; check the path") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; pass an ITF JSON file") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(f"{path} nests JSON too deeply to be an ITF trace; pass a file "
                         "written by 'batchproof check --write'") from None
    return parse_trace(doc, str(path))


def read_counterexample(path: str | Path) -> Counterexample:
    """Read an ITF counterexample written by batchproof (see read_trace)."""
    return read_trace(path).counterexample


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_dict(meta: dict[str, Any], key: str, where: str) -> dict[str, int]:
    value = meta.get(key, {})
    if not isinstance(value, dict) or not all(_is_int(v) for v in value.values()):
        raise InputError(f"{where}: #meta.{key} must be an object of integers (e.g. "
                         f'{{"k": 3}} or {{}}), got {json.dumps(value)}')
    return value


def _string(meta: dict[str, Any], key: str, default: str, where: str) -> str:
    value = meta.get(key, default)
    if not isinstance(value, str):
        raise InputError(f"{where}: #meta.{key} must be a string, got {json.dumps(value)}")
    return value


def parse_trace(doc: Any, where: str = "the trace") -> Trace:
    """Check an ITF document's `#meta`, `vars`, `states` and `loop`; InputError (one
    line, the value and the fix) on the first field that is wrong."""
    meta = doc.get("#meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or "workload" not in meta or "property" not in meta:
        raise InputError(f"{where} is not a batchproof ITF counterexample (no #meta.workload); "
                         "pass a file written by 'batchproof check --write'")
    name = meta["property"]
    if not isinstance(name, str) or name not in catalogue.names():
        raise InputError(f"{where}: #meta.property {json.dumps(name)} is not a known property; "
                         f"known: {', '.join(catalogue.names())}")
    params = _int_dict(meta, "params", where)
    try:
        prop = catalogue.get(name, **params)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: #meta.params {json.dumps(params)} do not fit {name} "
                         f"({exc}); see 'batchproof check --list'") from None
    if dict(prop.params) != params:
        wanted = ", ".join(k for k, _ in prop.params) or "none"
        raise InputError(f"{where}: #meta.params {json.dumps(params)} do not fit {name}: "
                         f"its parameters are {wanted}")
    bounds = _int_dict(meta, "bounds", where)
    workload = parse_workload(meta["workload"])
    engine = _string(meta, "engine", workload.engine, where)
    if engine != workload.engine:
        raise InputError(f"{where}: #meta.engine {json.dumps(engine)} is not the workload's "
                         f"engine {json.dumps(workload.engine)}; make them the same")
    minimal = meta.get("minimal", True)
    if not isinstance(minimal, bool):
        raise InputError(f"{where}: #meta.minimal must be true or false, got "
                         f"{json.dumps(minimal)}")
    names = doc.get("vars")
    if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
        raise InputError(f"{where}: 'vars' must be a list of variable names, got "
                         f"{json.dumps(names)}")
    stored = doc.get("states")
    if not isinstance(stored, list) or len(stored) < 2:
        raise InputError(f"{where}: 'states' must be a list of at least two states (the "
                         "initial one and a step); pass a file written by 'batchproof check "
                         "--write'")
    bad = next((i for i, s in enumerate(stored) if not isinstance(s, dict)), None)
    if bad is not None:
        raise InputError(f"{where}: states[{bad}] must be an object of variables, got "
                         f"{json.dumps(stored[bad])}")
    last = len(stored) - 1
    violated_at = meta.get("violated_at")
    if not _is_int(violated_at) or not 1 <= violated_at <= last:
        raise InputError(f"{where}: #meta.violated_at must be the step where {name} fails, "
                         f"an integer in 1..{last} (the trace's states), got "
                         f"{json.dumps(violated_at)}")
    loop = doc.get("loop")
    if prop.kind == "lasso":
        if "loop" not in doc:
            raise InputError(f"{where}: {name} is a lasso property but the trace has no "
                             "'loop'; add the index of the state the last state repeats")
        if not _is_int(loop) or not 1 <= loop <= min(violated_at, last - 1):
            raise InputError(f"{where}: 'loop' must be the index of the state the last state "
                             f"repeats, an integer in 1..{min(violated_at, last - 1)}, got "
                             f"{json.dumps(loop)}")
    elif "loop" in doc:
        raise InputError(f"{where}: {name} is a {prop.kind} property, not a lasso, but the "
                         f"trace has 'loop' {json.dumps(loop)}; remove it")
    cex = Counterexample(
        engine=engine, property=name, params=tuple(sorted(params.items())),
        config_name=_string(meta, "config", "?", where), workload=workload,
        method=_string(meta, "method", "?", where), bounds=tuple(bounds.items()),
        violated_at=violated_at, loop=None if loop is None else loop - 1, minimal=minimal)
    return Trace(cex, tuple(names), tuple(stored), loop)


def check_stored(trace: Trace) -> None:
    """What a trace must satisfy before any run: the vars of its kind and, for a lasso,
    states[loop] == states[-1] in every variable; DivergenceError otherwise."""
    cex = trace.counterexample
    names = variables(cex.loop is not None)
    if list(trace.vars) != names:
        raise replaying.DivergenceError(
            f"vars: stored {json.dumps(list(trace.vars))}, a {cex.property} trace has "
            f"{json.dumps(names)}")
    if trace.loop is not None:
        replaying.check_loop(trace.states, trace.loop, names, "stored")


def verify(trace: Trace, records: tuple[StepRecord, ...]) -> None:
    """The stored states are exactly the states the reference's records give (and, for a
    lasso, the re-simulated states[loop] == states[-1] too); DivergenceError naming the
    first differing state and field otherwise."""
    expected = states(trace.counterexample, records)
    replaying.check_states(trace.states, expected)
    if trace.loop is not None:
        replaying.check_loop(expected, trace.loop, variables(True), "re-simulated")


def replay_trace(trace: Trace) -> replaying.ReplayResult:
    """Replay a stored trace: its own shape first (check_stored), then the reference's
    run of the workload (the property fails there at violated_at, or the run repeats
    from the loop), then every stored state against the reference's (verify);
    DivergenceError on the first disagreement."""
    check_stored(trace)
    result = replaying.replay(trace.counterexample)
    verify(trace, result.records)
    return result
