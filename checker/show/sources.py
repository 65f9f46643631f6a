"""What `batchproof explain` and the report draw from: an ITF counterexample, a workload
JSON, or a `batchproof simulate --json` document, each turned into a Timeline plus what
the text rendering needs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.methods.verdict import Counterexample
from checker.show import itf
from checker.show import text as render
from checker.show import timeline as tl
from model import registry as engines
from model.core.errors import InputError
from model.core.types import RequestSpec, StepRecord, Workload
from model.run import simulate
from model.workload import parse_workload
from properties import catalogue

KIND_COUNTEREXAMPLE, KIND_WORKLOAD, KIND_SIMULATION = "counterexample", "workload", "simulation"


@dataclass(frozen=True, slots=True)
class Source:
    """A file's run: its workload (for a simulation without requests, one whose requests
    are only ids), its records, and the timeline drawn from them."""

    kind: str
    workload: Workload
    records: tuple[StepRecord, ...]
    timeline: tl.Timeline
    counterexample: Counterexample | None = None


def text_timeline(source: Source) -> str:
    """The text timeline (checker/show/text.py) of any engine's run."""
    tl = source.timeline
    return render.timeline(source.workload, source.records, highlight=tl.violated_at,
                           loop=tl.loop, budget=tl.budget)


def token_budget(engine: str, config: Any) -> int:
    """The engine's token budget per step, read from its rule config."""
    return int(engines.get(engine).rule_config(config).token_budget)


def engine_label(engine: str) -> str:
    """'vLLM V1 0.32.0' for people."""
    model = engines.get(engine)
    return f"{model.title} {model.version}"


def read_json(path: Path) -> Any:
    """The file's JSON; InputError naming the file and the fix otherwise."""
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; check the path") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not a text file; pass a JSON file") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); pass an "
                         "ITF counterexample, a workload or a simulation JSON") from None


def load(path: str | Path) -> Source:
    """Read any of the three kinds of file."""
    path = Path(path)
    doc = read_json(path)
    if isinstance(doc, dict) and "#meta" in doc:
        return counterexample_source(itf.read_counterexample(path))
    if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        return simulation_source(doc, path.name)
    if isinstance(doc, dict) and "requests" in doc:
        return workload_source(parse_workload(doc), path.name)
    raise InputError(f"{path} is neither an ITF counterexample (#meta), a workload (requests) "
                     "nor a simulation document (a 'steps' list); pass one of those")


def counterexample_title(cex: Counterexample) -> str:
    """'starvation k=3 on tiny_fcfs: VIOLATED at step 3'."""
    params = " ".join(f"{k}={v}" for k, v in cex.params)
    name = f"{cex.property} {params}".strip()
    return f"{name} on {cex.config_name}: VIOLATED at step {cex.violated_at}"


def counterexample_source(cex: Counterexample,
                          records: tuple[StepRecord, ...] | None = None) -> Source:
    """A counterexample's run up to its violating step (records of the reference, run
    here unless given)."""
    if records is None:
        records = simulate(cex.workload)
    shown = tuple(records[: cex.violated_at])
    try:
        description = catalogue.get(cex.property, **dict(cex.params)).description
    except (KeyError, TypeError):
        description = "(property not in the catalogue)"
    timeline = tl.from_run(
        cex.workload, shown, token_budget(cex.engine, cex.workload.config),
        title=counterexample_title(cex),
        subtitle=f"{engine_label(cex.engine)}: " + " ".join(description.split()),
        violated_at=cex.violated_at, loop=cex.loop)
    return Source(KIND_COUNTEREXAMPLE, cex.workload, shown, timeline, cex)


def workload_source(workload: Workload, name: str) -> Source:
    """A workload run on its engine's reference scheduler."""
    records = simulate(workload)
    timeline = tl.from_run(workload, records, token_budget(workload.engine, workload.config),
                           title=f"{name}: {len(records)} steps",
                           subtitle=f"{engine_label(workload.engine)} reference scheduler")
    return Source(KIND_WORKLOAD, workload, records, timeline)


def simulation_source(doc: dict[str, Any], name: str) -> Source:
    """A `simulate --json` document, drawn as recorded (nothing is re-run). With a
    'requests' list the phases are derived; without it the records alone are drawn."""
    engine = doc.get("engine", engines.names()[0])
    if not isinstance(engine, str):
        raise InputError(f"'engine' must be a string, got {engine!r}")
    config = engines.get(engine).parse_config(doc.get("config", {}))
    records = tuple(parse_step(i, raw) for i, raw in enumerate(doc["steps"]))
    budget = token_budget(engine, config)
    title = f"{name}: {len(records)} steps"
    subtitle = f"{engine_label(engine)} simulation output"
    if "requests" in doc:
        workload = parse_workload({"engine": engine, "config": doc.get("config", {}),
                                   "requests": doc["requests"]})
        timeline = tl.from_run(workload, records, budget, title=title, subtitle=subtitle)
    else:
        timeline = tl.from_records(records, budget, title=title, subtitle=subtitle)
        ids = tuple(RequestSpec(r.id, prompt_len=0, max_tokens=0)
                    for r in timeline.requests)
        workload = Workload(config=config, requests=ids, steps=max(len(records), 1),
                            engine=engine)
    return Source(KIND_SIMULATION, workload, records, timeline)


_STEP_LISTS = ("admitted", "resumed", "preempted", "running", "waiting")
_STEP_MAPS = ("scheduled", "finished", "num_computed_tokens")
_STEP_INTS = ("free_blocks", "token_budget_left")


def parse_step(index: int, raw: Any) -> StepRecord:
    """One step object of the simulation contract as a StepRecord."""
    where = f"steps[{index}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("step"), int):
        raise InputError(f"{where} must be an object with an integer 'step' (the simulation "
                         "contract, docs/simulation_contract.md)")
    for key in _STEP_MAPS:
        if not isinstance(raw.get(key, {}), dict):
            raise InputError(f"{where}.{key} must be an object {{id: value}}")
    for key in _STEP_LISTS:
        if not isinstance(raw.get(key, []), list):
            raise InputError(f"{where}.{key} must be a list of request ids")
    for key in _STEP_INTS:
        if not isinstance(raw.get(key, 0), int):
            raise InputError(f"{where}.{key} must be an integer, got {raw[key]!r}")
    scheduled = raw.get("scheduled", {})
    if not all(isinstance(n, int) and n >= 0 for n in scheduled.values()):
        raise InputError(f"{where}.scheduled must map request ids to token counts >= 0")
    known = {"step", *_STEP_LISTS, *_STEP_MAPS, *_STEP_INTS}
    return StepRecord(
        step=raw["step"], scheduled=tuple(scheduled.items()),
        admitted=tuple(raw.get("admitted", [])), resumed=tuple(raw.get("resumed", [])),
        preempted=tuple(raw.get("preempted", [])),
        finished=tuple(raw.get("finished", {}).items()),
        free_blocks=raw.get("free_blocks", 0),
        num_computed_tokens=tuple(raw.get("num_computed_tokens", {}).items()),
        running=tuple(raw.get("running", [])), waiting=tuple(raw.get("waiting", [])),
        token_budget_left=raw.get("token_budget_left", 0),
        extra=tuple((k, v) for k, v in raw.items() if k not in known))
