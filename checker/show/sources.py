"""What `batchproof explain` and the report draw from: an ITF counterexample, a workload
JSON, or a `batchproof simulate --json` document, each turned into a Timeline plus what
the text rendering needs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from checker.methods.verdict import Counterexample
from checker.show import itf
from checker.show import text as render
from checker.show import timeline as tl
from model import registry as engines
from model.core.checks import MAX_INT, MAX_STEPS
from model.core.errors import ConfigError, InputError, shown
from model.core.types import RequestSpec, StepRecord, Workload
from model.run import simulate
from model.workload import check_workload, parse_workload
from model.workload import read_json as read_json_file
from properties import catalogue

KIND_COUNTEREXAMPLE, KIND_WORKLOAD, KIND_SIMULATION = "counterexample", "workload", "simulation"
# Requests x steps a timeline draws: each is a cell of the text table and a block of the
# SVG; a larger run is unreadable as one picture (`simulate` prints one row per step).
MAX_DRAWN_CELLS = 1_000_000
NOT_VALIDATED = "configuration not validated (--no-validate)"


@dataclass(frozen=True, slots=True)
class Source:
    """A file's run: its workload (for a simulation without requests, one whose requests
    are only ids), its records, and the timeline drawn from them. `trace` is the ITF file
    as read (a counterexample); `validated` is False for a workload run under
    --no-validate or a simulation document that says so, and `note` then says what the
    engine would have rejected."""

    kind: str
    workload: Workload
    records: tuple[StepRecord, ...]
    timeline: tl.Timeline
    counterexample: Counterexample | None = None
    trace: itf.Trace | None = None
    validated: bool = True
    note: str = ""


def text_timeline(source: Source) -> str:
    """The text timeline (checker/show/text.py) of any engine's run, after the
    not-validated line when the run was not validated."""
    tl = source.timeline
    head = "" if source.validated else source.note + "\n"
    return head + render.timeline(source.workload, source.records, highlight=tl.violated_at,
                                  loop=tl.loop, budget=tl.budget)


def token_budget(engine: str, config: Any) -> int:
    """The engine's token budget per step, read from its rule config."""
    return int(engines.get(engine).rule_config(config).token_budget)


def engine_label(engine: str) -> str:
    """'vLLM V1 0.32.0' for people."""
    model = engines.get(engine)
    return f"{model.title} {model.version}"


def read_json(path: Path) -> Any:
    """The file's JSON; InputError naming the file and the fix otherwise
    (model/workload.read_json: not UTF-8, not JSON, too deep, too large ...)."""
    return read_json_file(path, "pass an ITF counterexample, a workload or a simulation JSON")


def load(path: str | Path, validate: bool = True) -> Source:
    """Read any of the three kinds of file. A workload is checked as `simulate` checks it
    (model/workload.check_workload); with `validate` False a configuration the engine
    would reject is drawn, marked not validated."""
    path = Path(path)
    doc = read_json(path)
    if isinstance(doc, dict) and "#meta" in doc:
        trace = itf.parse_trace(doc, str(path))
        # A manifest config may be one the engine refuses at start (its `validated`
        # flag governs it), so only what every run needs is checked here.
        check_workload(trace.counterexample.workload, validate=False)
        return replace(counterexample_source(trace.counterexample), trace=trace)
    if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
        return simulation_source(doc, path.name)
    if isinstance(doc, dict) and "requests" in doc:
        return workload_source(parse_workload(doc), path.name, validate)
    raise InputError(f"{path} is neither an ITF counterexample (#meta), a workload (requests) "
                     "nor a simulation document (a 'steps' list); pass one of those")


def not_validated_note(engine: str, rejected_by: ConfigError | None) -> str:
    """The line that marks a run under --no-validate, naming the rule it breaks."""
    title = engines.get(engine).title
    if rejected_by is None:
        return f"{NOT_VALIDATED}; {title} would accept it"
    return f"{NOT_VALIDATED}; {title} would reject it by rule {rejected_by.rule}"


def check_drawable(requests: int, steps: int) -> None:
    """InputError when a run is too large to draw as one timeline (MAX_DRAWN_CELLS)."""
    if requests * steps > MAX_DRAWN_CELLS:
        raise InputError(f"{requests} requests over {steps} steps are {requests * steps} "
                         f"timeline cells, more than the {MAX_DRAWN_CELLS} explain draws "
                         "(docs/simulation_contract.md, limits); lower 'steps', or use "
                         "'batchproof simulate', which prints one row per step")


def counterexample_title(cex: Counterexample) -> str:
    """'starvation k=3 on tiny_fcfs: VIOLATED at step 3'."""
    params = " ".join(f"{k}={v}" for k, v in cex.params)
    name = f"{cex.property} {params}".strip()
    return f"{name} on {cex.config_name}: VIOLATED at step {cex.violated_at}"


def counterexample_source(cex: Counterexample,
                          records: tuple[StepRecord, ...] | None = None) -> Source:
    """A counterexample's run up to its violating step (records of the reference, run
    here unless given)."""
    if records is None:  # only the steps up to the violation are drawn
        records = simulate(replace(cex.workload,
                                   steps=min(cex.workload.steps, max(cex.violated_at, 1))))
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


def workload_source(workload: Workload, name: str, validate: bool = True) -> Source:
    """A workload run on its engine's reference scheduler, checked first as `simulate`
    checks it; with `validate` False a rejected configuration is run and marked."""
    rejected_by = check_workload(workload, validate)
    check_drawable(len(workload.requests), workload.steps)
    records = simulate(workload)
    subtitle = f"{engine_label(workload.engine)} reference scheduler"
    note = "" if validate else not_validated_note(workload.engine, rejected_by)
    if note:
        subtitle += f" ({note})"
    timeline = tl.from_run(workload, records, token_budget(workload.engine, workload.config),
                           title=f"{name}: {len(records)} steps", subtitle=subtitle)
    return Source(KIND_WORKLOAD, workload, records, timeline, validated=validate, note=note)


def simulation_source(doc: dict[str, Any], name: str) -> Source:
    """A `simulate --json` document, drawn as recorded (nothing is re-run). With a
    'requests' list the phases are derived; without it the records alone are drawn."""
    engine = doc.get("engine", engines.names()[0])
    if not isinstance(engine, str):
        raise InputError(f"'engine' must be a string, got {shown(engine)}")
    validated = doc.get("validated", True)
    if not isinstance(validated, bool):
        raise InputError(f"'validated' must be true or false, got {shown(validated)}")
    config = engines.get(engine).parse_config(doc.get("config", {}))
    if not doc["steps"]:
        raise InputError("'steps' is an empty list: a simulation document needs at least one "
                         "step record (simulate --json writes them); for a workload, give "
                         "'steps' as a number")
    if len(doc["steps"]) > MAX_STEPS:
        raise InputError(f"'steps' has {len(doc['steps'])} entries, more than the "
                         f"{MAX_STEPS} a simulation may have; pass a shorter simulation")
    records = tuple(parse_step(i, raw) for i, raw in enumerate(doc["steps"]))
    budget = token_budget(engine, config)
    title = f"{name}: {len(records)} steps"
    subtitle = f"{engine_label(engine)} simulation output"
    note = "" if validated else f"{NOT_VALIDATED} (the document says \"validated\": false)"
    if note:
        subtitle += f" ({note})"
    if "requests" in doc:
        workload = parse_workload({"engine": engine, "config": doc.get("config", {}),
                                   "requests": doc["requests"]})
        check_drawable(len(workload.requests), len(records))
        timeline = tl.from_run(workload, records, budget, title=title, subtitle=subtitle)
    else:
        ids = _ids_seen(records)
        check_drawable(len(ids), len(records))
        timeline = tl.from_records(records, budget, title=title, subtitle=subtitle)
        workload = Workload(config=config,
                            requests=tuple(RequestSpec(i, prompt_len=0, max_tokens=0)
                                           for i in ids),
                            steps=max(len(records), 1), engine=engine)
    return Source(KIND_SIMULATION, workload, records, timeline, validated=validated,
                  note=note)


def _ids_seen(records: tuple[StepRecord, ...]) -> tuple[str, ...]:
    """Every request id the records name, in order of first appearance."""
    seen: dict[str, None] = {}
    for rec in records:
        for rid in (*(r for r, _ in rec.scheduled), *(r for r, _ in rec.num_computed_tokens),
                    *rec.running, *rec.waiting, *rec.preempted, *rec.admitted, *rec.resumed,
                    *(r for r, _ in rec.finished)):
            seen.setdefault(rid, None)
    return tuple(seen)


_STEP_LISTS = ("admitted", "resumed", "preempted", "running", "waiting")
_STEP_MAPS = ("scheduled", "finished", "num_computed_tokens")
_STEP_INTS = ("free_blocks", "token_budget_left")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT


def parse_step(index: int, raw: Any) -> StepRecord:
    """One step object of the simulation contract as a StepRecord."""
    where = f"steps[{index}]"
    if not isinstance(raw, dict) or not _is_int(raw.get("step")):
        raise InputError(f"{where} must be an object with an integer 'step' (the simulation "
                         "contract, docs/simulation_contract.md)")
    for key in _STEP_MAPS:
        if not isinstance(raw.get(key, {}), dict):
            raise InputError(f"{where}.{key} must be an object {{id: value}}, got "
                             f"{shown(raw[key])}")
    for key in _STEP_LISTS:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(f"{where}.{key} must be a list of request ids (strings), got "
                             f"{shown(value)}")
    for key in _STEP_INTS:
        if not _is_int(raw.get(key, 0)):
            raise InputError(f"{where}.{key} must be an integer, got {shown(raw[key])}")
    for key in ("scheduled", "num_computed_tokens"):
        if not all(_is_int(n) and n >= 0 for n in raw.get(key, {}).values()):
            raise InputError(f"{where}.{key} must map request ids to token counts >= 0, got "
                             f"{shown(raw[key])}")
    if not all(v in ("stop", "length") for v in raw.get("finished", {}).values()):
        raise InputError(f"{where}.finished must map request ids to \"stop\" or \"length\", "
                         f"got {shown(raw['finished'])}")
    scheduled = raw.get("scheduled", {})
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
