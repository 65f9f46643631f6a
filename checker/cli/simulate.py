"""`batchproof simulate WORKLOAD.json`: run a workload through the vLLM V1 reference
scheduler and print one row per step (or the `--json` document of the simulation
contract, docs/simulation_contract.md)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from checker.config.flags import add_config_flags, apply_config_flags
from checker.config.model_kind import model_kind, with_kind
from checker.config.serve_args import (
    CONNECTOR_FLAGS,
    add_config_option,
    add_serve_words,
    ignored_line,
    kind_line,
    kv_transfer_of,
    memory_note,
    merge_yaml,
    model_line,
    print_notes,
    refuse_unmodelled,
    unread_engine_flags,
)
from checker.config.spec_args import spec_decode
from checker.show import text as render
from model.core.errors import ConfigError, InputError
from model.core.types import Simulation, StepRecord, Workload
from model.vllm.config import ENGINE_VLLM_V1, VLLM_VERSION, Config
from model.vllm.reference import PHASE_DECODE, chunk_phase, iter_steps
from model.vllm.startup import STARTUP_RULES
from model.vllm.validation import RULES
from model.workload import check_workload, load_workload, parse_workload, read_json


@dataclass(frozen=True, slots=True)
class SimulatedStep:
    """A step's record and, for each scheduled request, its chunk's phase."""

    record: StepRecord
    phases: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class SimulationRun:
    """A checked simulation: the contract's Simulation plus display-only phases."""

    simulation: Simulation
    steps: tuple[SimulatedStep, ...]
    rejected_by: ConfigError | None  # the rule vLLM would reject the config by, if any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `batchproof simulate`."""
    parser.add_argument("workload", metavar="WORKLOAD.json",
                        help="workload file (docs/simulation_contract.md)")
    add_serve_words(parser)
    parser.add_argument("--json", action="store_true",
                        help="print the simulation JSON document instead of the table")
    parser.add_argument("--no-validate", action="store_true",
                        help="simulate even a config the engine would reject (vLLM: "
                        "SchedulerConfig's rules and the startup KV check); the output "
                        "says it is not validated")
    add_config_option(parser, manifest=False)
    add_config_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Load, check, simulate, print. Bad input raises InputError (exit 2 in the CLI).

    vllm serve flags (the command line over `--config FILE`'s YAML) override the workload's
    config; the flags the model does not read are listed as ignored, in one line (on stderr
    under --json)."""
    args = merge_yaml(args, getattr(args, "config", None))
    model_line(args)  # a pasted `vllm serve MODEL`: one model tag, checked before loading
    workload = _load_with_connector(args)
    if workload.engine != ENGINE_VLLM_V1:
        return _run_engine(args, workload)
    refuse_unmodelled(args, "simulate")
    config = apply_config_flags(args, workload.config)
    spec = spec_decode(args)  # one the model covers (refuse_unmodelled refused the others)
    workload = replace(workload, config=with_kind(
        model_kind(args), spec.on(config) if spec is not None else config))
    notes = [model_line(args), ignored_line(args, unread_engine_flags(args), CONNECTOR_FLAGS),
             memory_note(args, workload.config.num_gpu_blocks, "the workload's pool")]
    result = simulate_checked(workload, validate_config=not args.no_validate)
    if args.json:
        print(json.dumps(result.simulation.to_json(), indent=2))
        print_notes([*notes, kind_line(args)], sys.stderr)
    else:
        print_notes(notes, sys.stdout)
        print(render_text(result))
        print(kind_line(args))  # the KV cache layout the run assumes
    return 0


def _load_with_connector(args: argparse.Namespace) -> Workload:
    """The workload file, its config running a consumer's KV connector when
    --kv-transfer-config names one (before its kv_hits/kv_loads are checked against the
    config); a producer's is refused first, as `check` refuses it."""
    kv = kv_transfer_of(args)
    if kv is None or kv.kv_connector is None:
        return load_workload(args.workload)
    refuse_unmodelled(args, "simulate")
    doc = read_json(args.workload, "pass a workload JSON file (docs/simulation_contract.md)",
                    "workload")
    if not isinstance(doc, dict) or doc.get("engine", ENGINE_VLLM_V1) != ENGINE_VLLM_V1:
        raise InputError("--kv-transfer-config is a vLLM flag; the workload's engine is "
                         f"{doc.get('engine') if isinstance(doc, dict) else doc!r}; drop it")
    config = doc.get("config", {})
    if not isinstance(config, dict):
        return parse_workload(doc)  # its own error names the config
    connector = {"kv_connector": True, "kv_load_failure_policy": kv.kv_load_failure_policy}
    return parse_workload({**doc, "config": {**config, **connector}})


def simulate_workload_dict(doc: dict[str, Any], validate: bool = True) -> dict[str, Any]:
    """The `simulate --json` document for a workload given as its JSON object."""
    workload = parse_workload(doc)
    if workload.engine != ENGINE_VLLM_V1:
        return _engine_simulation(workload, validate)[0].to_json()
    result = simulate_checked(workload, validate_config=validate)
    return result.simulation.to_json()


def simulate_checked(workload: Workload, validate_config: bool = True) -> SimulationRun:
    """Check the workload as vLLM would (model/workload.check_workload), then simulate it.

    Field types and prompt admissibility are always checked; vLLM's SchedulerConfig rules
    and startup KV check only when `validate_config` (otherwise the rule vLLM would reject
    by is reported).
    """
    rejected_by = check_workload(workload, validate_config)
    steps = []
    for before, record in iter_steps(workload):
        views = {v.request_id: v for v in before}
        drafts = dict(record.extra).get("spec_scheduled", {})
        assert isinstance(drafts, dict)
        phases = tuple((rid, chunk_phase(views[rid], n - drafts.get(rid, 0)))
                       for rid, n in record.scheduled)
        steps.append(SimulatedStep(record, phases))
    simulation = Simulation(workload=workload, steps=tuple(s.record for s in steps),
                            validated=validate_config, version=VLLM_VERSION)
    return SimulationRun(simulation, tuple(steps), rejected_by)


# ---------------------------------------------------------------------------------------
# Text rendering
# ---------------------------------------------------------------------------------------

_COLUMNS = ("step", "tokens", "scheduled (id:tokens+phase)", "admitted", "resumed",
            "preempted", "finished", "free_blocks", "running", "waiting")


def render_text(result: SimulationRun) -> str:
    """The human-readable table: a header, then one row per step."""
    sim = result.simulation
    lines = []
    if not sim.validated:
        lines.append(not_validated_line(result.rejected_by))
    cfg = sim.workload.config
    lines.append(f"vLLM V1 {VLLM_VERSION} reference scheduler, {len(sim.steps)} steps "
                 "(one step = schedule + model output + update)")
    lines.append("config: " + config_summary(cfg))
    lines.append("phase: p = prefill chunk (prompt, or recomputation after preemption), "
                 "d = decode; free_blocks, running and waiting are read right after "
                 f"scheduling (queues in order, past {render.QUEUE_SHOWN} ids +N counts the "
                 "rest)" + ("; +N/A: N drafts scheduled, A of them accepted"
                            if cfg.num_spec_tokens else ""))
    rows = [list(_COLUMNS)] + [_row(s, cfg) for s in result.steps]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        cells = [cell.rjust(w) if i in (0, 1, 7) else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    crashed = next((s.record for s in result.steps if "assertion" in dict(s.record.extra)),
                   None)
    if crashed is not None:
        crash = dict(crashed.extra)["assertion"]
        lines.append(f"engine assertion: {crash}; the engine is dead from that step on")
        lines.extend(assertion_site_line(str(crash), crashed.step))
    return "\n".join(lines)


def assertion_site_line(fact: str, step: int) -> list[str]:
    """The assertion the engine died at, by site (file, function, condition; the line as
    information): one line, or none for a fact the reference words in another form."""
    from checker.conformance.audit import reference_assertion_site

    found = reference_assertion_site(fact)
    if found is None:
        return []
    site = found[0]
    where = f"{site.file}:{site.line}" if site.line is not None else site.file
    return [f"assertion site: {where} in {site.function}: assert {site.text} (step {step}; "
            f"the line is vLLM {VLLM_VERSION}'s, the function and condition name it)"]


def not_validated_line(rejected_by: ConfigError | None) -> str:
    """The first output line under --no-validate."""
    if rejected_by is None:
        return "configuration not validated (--no-validate); vLLM would accept it"
    rule = next((r for r in (*RULES, *STARTUP_RULES) if r.name == rejected_by.rule), None)
    if rule is None:
        return (f"configuration not validated (--no-validate); vLLM would reject it by rule "
                f"{rejected_by.rule}")
    return (f"configuration not validated (--no-validate); vLLM would reject it by rule "
            f"{rule.name}: {rule.text} ({rule.upstream})")


def config_summary(cfg: Config) -> str:
    """Every Config field as `name=value`, with the usable block count."""
    parts = []
    for name, value in cfg.to_dict().items():
        if isinstance(value, bool):
            value = "on" if value else "off"
        elif value is None:
            value = "unset"
        parts.append(f"{name}={value}")
        if name == "num_gpu_blocks":
            parts[-1] += f" ({cfg.usable_blocks} usable)"
    return " ".join(parts)


def _row(step: SimulatedStep, cfg: Config) -> list[str]:
    record = step.record
    phases = dict(step.phases)
    total = sum(n for _, n in record.scheduled)
    facts = dict(record.extra)
    drafts, accepted = facts.get("spec_scheduled", {}), facts.get("accepted", {})
    assert isinstance(drafts, dict) and isinstance(accepted, dict)
    scheduled = " ".join(
        f"{rid}:{n}{'d' if phases[rid] == PHASE_DECODE else 'p'}"
        + (f"+{drafts[rid]}/{accepted.get(rid, 0)}" if drafts.get(rid) else "")
        for rid, n in record.scheduled)
    return [
        str(record.step),
        f"{total}/{cfg.token_budget}",
        scheduled or "-",
        _ids(record.admitted),
        _ids(record.resumed),
        _ids(record.preempted),
        _ids(f"{rid}={reason}" for rid, reason in record.finished),
        str(record.free_blocks),
        render.queue(record.running),
        render.queue(record.waiting),
    ]


def _ids(items: Iterable[str]) -> str:
    text = " ".join(items)
    return text or "-"


# ---------------------------------------------------------------------------------------
# Engines other than vLLM V1: their reference through model.engines.run, their own facts
# per step through EngineModel.describe_step
# ---------------------------------------------------------------------------------------


def _engine_simulation(workload: Workload, validate: bool
                       ) -> tuple[Simulation, ConfigError | None]:
    """Check the workload as the engine would, then simulate it on its reference."""
    from model import registry as engines
    from model.run import simulate

    engine = engines.get(workload.engine)
    rejected_by = check_workload(workload, validate)
    return Simulation(workload=workload, steps=simulate(workload), validated=validate,
                      version=engine.version), rejected_by


def _run_engine(args: argparse.Namespace, workload: Workload) -> int:
    from checker.config.flags import _DEST_PREFIX, CONFIG_FLAGS

    given = [f.field for f in CONFIG_FLAGS if getattr(args, _DEST_PREFIX + f.field, None)
             is not None]
    if given:
        raise InputError(f"config flags name vLLM fields ({given[0]}); for engine "
                         f"{workload.engine!r} set the field in the workload's 'config'")
    simulation, rejected_by = _engine_simulation(workload, validate=not args.no_validate)
    if args.json:
        print(json.dumps(simulation.to_json(), indent=2))
    else:
        print(render_engine_text(simulation, rejected_by))
    return 0


def render_engine_text(sim: Simulation, rejected_by: ConfigError | None = None) -> str:
    """The table for a non-vLLM engine: the shared columns, then the engine's own facts."""
    from model import registry as engines

    engine = engines.get(sim.workload.engine)
    lines = []
    if not sim.validated:
        lines.append("configuration not validated (--no-validate)"
                     + (f"; {engine.title} would reject it by rule {rejected_by.rule}"
                        if rejected_by is not None else ""))
    lines.append(f"{engine.title} {engine.version} reference scheduler, {len(sim.steps)} steps "
                 "(one step = one scheduler iteration)")
    lines.append("config: " + " ".join(f"{k}={v}" for k, v in
                                       engine.config_to_dict(sim.workload.config).items()))
    lines.append("phase: p = prefill (extend) tokens, d = decode token of a running request; "
                 "free_blocks, running and waiting are read right after scheduling (queues "
                 f"in order, past {render.QUEUE_SHOWN} ids +N counts the rest)")
    from checker.show.timeline import DECODE, phases

    header = ["step", "tokens", "scheduled (id:tokens+phase)", "admitted", "resumed",
              "preempted", "finished", "free_blocks", "running", "waiting", engine.title]
    rows = [header]
    # The phase of a chunk from the records and prompt lengths alone, as explain draws it:
    # a decode is the one newest sampled token of a request that already has output.
    for record, step_phases in zip(sim.steps, phases(sim.workload, sim.steps), strict=True):
        scheduled = " ".join(f"{rid}:{n}{'d' if step_phases[rid] == DECODE else 'p'}"
                             for rid, n in record.scheduled)
        rows.append([str(record.step), str(sum(n for _, n in record.scheduled)),
                     scheduled or "-", _ids(record.admitted), _ids(record.resumed),
                     _ids(record.preempted),
                     _ids(f"{rid}={reason}" for rid, reason in record.finished),
                     str(record.free_blocks), render.queue(record.running),
                     render.queue(record.waiting),
                     engine.describe_step(record) if engine.describe_step else ""])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = [cell.rjust(w) if i in (0, 1, 7) else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
