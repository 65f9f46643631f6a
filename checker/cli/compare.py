"""`batchproof compare WORKLOAD.json --engines vllm-v1,vllm-v0,sglang,...`: run
one workload through several engines' reference schedulers, each under the workload's
engine-neutral config mapped to the engine (docs/compare.md), and print per engine the steps
to finish each request, time to first token in steps, decode stalls, idle slot-steps and
preemptions. The engine x property verdict matrix is checker/docs/property_matrix.py.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from model import registry as engines
from model.core.checks import MAX_INT
from model.core.errors import InputError, shown
from model.core.types import Step, Workload
from model.run import simulate
from model.workload import config_rejection, parse_workload, read_json

DEFAULT_ENGINES = ("vllm-v1", "vllm-v0", "sglang", "mistralrs", "static", "dynamic")
# compare observes every request in every step under each engine (the Step observables),
# a cost per request-step some fifty times the reference's: 10^5 takes seconds.
MAX_COMPARE_REQUEST_STEPS = 100_000
_TOP_KEYS = {"config", "requests", "steps", "engine_config"}


@dataclass(frozen=True, slots=True)
class NeutralConfig:
    """The engine-neutral config of a compare workload (docs/compare.md)."""

    token_budget: int = 2048
    max_seqs: int = 8
    kv_tokens: int = 4096
    block_size: int = 16


NEUTRAL_FIELDS = tuple(NeutralConfig.__dataclass_fields__)


def _vllm(n: NeutralConfig) -> dict[str, object]:
    # The pool holds kv_tokens in usable blocks; vLLM's block 0 is the null block.
    return {"max_num_batched_tokens": n.token_budget, "max_num_seqs": n.max_seqs,
            "block_size": n.block_size, "num_gpu_blocks": n.kv_tokens // n.block_size + 1,
            "max_model_len": n.kv_tokens}


def _vllm_v0(n: NeutralConfig) -> dict[str, object]:
    # V0's chunked-prefill path: its default path needs max_num_batched_tokens >=
    # max_model_len (config/scheduler.py:253-261), which a small budget over a long context
    # breaks. The naive allocator has no null block; the 1 % watermark is the engine's own.
    return {"max_num_batched_tokens": n.token_budget, "max_num_seqs": n.max_seqs,
            "block_size": n.block_size, "num_gpu_blocks": n.kv_tokens // n.block_size,
            "max_model_len": n.kv_tokens, "enable_chunked_prefill": True}


def _sglang(n: NeutralConfig) -> dict[str, object]:
    # SGLang's pool is in tokens (page size 1): block_size does not apply. The budget caps
    # both a prefill batch's input and a chunk; the radix cache is off like the others'.
    return {"max_total_num_tokens": n.kv_tokens, "chunked_prefill_size": n.token_budget,
            "max_prefill_tokens": n.token_budget, "max_running_requests": n.max_seqs,
            "disable_radix_cache": True, "context_length": n.kv_tokens}


def _mistralrs(n: NeutralConfig) -> dict[str, object]:
    return {"max_num_batched_tokens": n.token_budget, "max_num_seqs": n.max_seqs,
            "block_size": n.block_size, "num_gpu_blocks": n.kv_tokens // n.block_size + 1}


def _baseline(n: NeutralConfig) -> dict[str, object]:
    # No per-step token budget: a batch is prefilled whole in one forward.
    return {"max_batch_size": n.max_seqs, "block_size": n.block_size,
            "num_kv_blocks": n.kv_tokens // n.block_size}


MAPPINGS: dict[str, Callable[[NeutralConfig], dict[str, object]]] = {
    "vllm-v1": _vllm, "vllm-v0": _vllm_v0, "sglang": _sglang, "mistralrs": _mistralrs,
    "static": _baseline, "dynamic": _baseline,
}


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """One request under one engine. Steps are 1-based; None: not within the run."""

    id: str
    finish_step: int | None
    steps_to_finish: int | None  # finish_step - arrival_step + 1
    ttft_steps: int | None  # first sampled token's step - arrival_step + 1
    decode_stalls: int  # steps after its first token, unfinished, without a new token


@dataclass(frozen=True, slots=True)
class EngineRun:
    """One engine's run of the workload, or why it was skipped."""

    engine: str
    config: dict[str, object] | None
    requests: tuple[RequestMetrics, ...] = ()
    idle_slot_steps: int = 0
    padded_rows: int = 0
    preemptions: int = 0
    skipped: str | None = None

    @property
    def makespan(self) -> int | None:
        """The step at which the last request finished (None if one never did)."""
        steps = [r.finish_step for r in self.requests]
        return None if not steps or None in steps else max(s for s in steps if s is not None)


# ---- loading ----------------------------------------------------------------------------


def load_compare_workload(path: str | Path) -> tuple[NeutralConfig, dict[str, Any], Workload]:
    """The neutral config, per-engine overrides and the requests of a compare workload."""
    return parse_compare_workload(read_json(
        path, "pass a compare workload JSON file (docs/compare.md)", "workload"))


def parse_compare_workload(doc: Any) -> tuple[NeutralConfig, dict[str, Any], Workload]:
    """Check a compare workload's JSON object (docs/compare.md)."""
    if not isinstance(doc, dict):
        raise InputError("a compare workload must be a JSON object with 'config' and "
                         "'requests'")
    if "eos" in doc:
        raise InputError("a compare workload takes no 'eos': an EOS at a fixed step is a "
                         "different token under each engine; set each request's max_tokens "
                         "to the output length it should have")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise InputError(f"unknown compare workload key {unknown[0]!r}; known keys: "
                         f"{sorted(_TOP_KEYS)} (an 'engine' key belongs to simulate "
                         "workloads; compare picks engines with --engines)")
    neutral = _neutral(doc.get("config", {}))
    overrides = doc.get("engine_config", {})
    if not isinstance(overrides, dict) or not all(isinstance(v, dict)
                                                  for v in overrides.values()):
        raise InputError("'engine_config' must map engine names to JSON objects of that "
                         "engine's config fields")
    for name, fields in overrides.items():
        engine = engines.get(name)  # InputError naming the engines if unknown
        try:
            engine.parse_config(fields)  # a misspelt or mistyped field is an error, not a skip
        except InputError as exc:
            raise InputError(f"engine_config[{name!r}]: {exc}") from None
        # So is a value the engine refuses (vLLM: max_num_seqs 0, policy 'lifo'), which its
        # parse_config leaves to its rules: only a refusal of the mapped config is a skip.
        refused = override_rejection(name, neutral, fields)
        if refused is not None:
            raise InputError(f"engine_config[{name!r}]: {engine.title} refuses the mapped "
                             f"config with {shown(fields)} over it: {refused}")
    body = {k: doc[k] for k in ("requests", "steps") if k in doc}
    workload = parse_workload({"engine": "dynamic", "config": {}, **body})
    arriving = sum(r.arrival_step <= workload.steps for r in workload.requests)
    if arriving * workload.steps > MAX_COMPARE_REQUEST_STEPS:
        raise InputError(f"compare runs {arriving} requests for {workload.steps} steps on "
                         f"each engine, {arriving * workload.steps} request-steps, more than "
                         f"the {MAX_COMPARE_REQUEST_STEPS} compare takes "
                         "(docs/simulation_contract.md, limits); lower 'steps' or compare "
                         "fewer requests")
    return neutral, overrides, workload


def override_rejection(name: str, neutral: NeutralConfig, fields: dict[str, Any]
                       ) -> str | None:
    """The rule by which engine `name` refuses its mapped config with `fields` (its
    engine_config) over it, when the mapped config alone does not fail that way; None when
    the engine takes it, or refuses the mapped config alone just the same (a skip at run
    time, as for an engine without an override)."""
    if name not in MAPPINGS:
        return None  # refused at run time: no mapping
    mapped = MAPPINGS[name](neutral)
    with_fields = _rejection(name, {**mapped, **fields})
    if with_fields is None or with_fields == _rejection(name, mapped):
        return None
    return with_fields


def _rejection(name: str, raw: dict[str, Any]) -> str | None:
    """Why engine `name` refuses config `raw` (as run_engine would), or None."""
    try:
        rejected = config_rejection(name, engines.get(name).parse_config(raw))
    except InputError as exc:  # a rule some engines raise rather than return
        return str(exc)
    return None if rejected is None else str(rejected)


def _neutral(raw: Any) -> NeutralConfig:
    if not isinstance(raw, dict):
        raise InputError("'config' must be a JSON object with token_budget, max_seqs, "
                         "kv_tokens, block_size")
    unknown = sorted(set(raw) - set(NEUTRAL_FIELDS))
    if unknown:
        raise InputError(f"unknown compare config field {unknown[0]!r}; known fields: "
                         f"{', '.join(NEUTRAL_FIELDS)} (engine-specific fields go in "
                         "'engine_config')")
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
            raise InputError(f"compare config {name} must be a positive integer of at most "
                             f"64 bits, got {shown(value)}")
    neutral = replace(NeutralConfig(), **raw)
    if neutral.kv_tokens < neutral.block_size:
        raise InputError(f"kv_tokens {neutral.kv_tokens} is below one block of "
                         f"{neutral.block_size} tokens; enlarge kv_tokens")
    return neutral


def parse_engines(text: str) -> tuple[str, ...]:
    """The --engines list; InputError for an unknown or repeated name. A name this brief
    knows but the registry does not yet have (sglang until it is registered) is kept and
    skipped with a note at run time."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise InputError("--engines is empty; name engines separated by commas, e.g. "
                         f"{','.join(DEFAULT_ENGINES)}")
    known = set(engines.names()) | set(MAPPINGS)
    for name in names:
        if name not in known:
            raise InputError(f"unknown engine {name!r} in --engines; supported engines: "
                             f"{', '.join(sorted(known))}")
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise InputError(f"engine {dup!r} appears twice in --engines; name it once")
    return names


# ---- running ----------------------------------------------------------------------------


def engine_workload(name: str, neutral: NeutralConfig, overrides: dict[str, Any],
                    workload: Workload) -> Workload:
    """The workload under engine `name`: the neutral config mapped, then the engine's own
    overrides. InputError if the engine refuses the config or a request."""
    engine = engines.get(name)
    if name not in MAPPINGS:
        raise InputError(f"no neutral-config mapping for engine {name!r}; add one to "
                         "checker/cli/compare.py MAPPINGS")
    raw = {**MAPPINGS[name](neutral), **overrides.get(name, {})}
    cfg = engine.parse_config(raw)
    rejected = config_rejection(name, cfg)
    if rejected is not None:
        raise InputError(f"{engine.title} rejects the mapped config: {rejected}")
    w = replace(workload, config=cfg, engine=name)
    engine.check_admissible(w)
    return w


def run_engine(name: str, neutral: NeutralConfig, overrides: dict[str, Any],
               workload: Workload) -> EngineRun:
    """Simulate the workload on one engine and measure it; a missing engine or a refused
    config or request is a skip with its reason, never a failure of the other engines."""
    if name not in engines.names():
        return EngineRun(name, None, skipped="not registered yet (model.engines.names())")
    try:
        w = engine_workload(name, neutral, overrides, workload)
        steps = engines.get(name).observe(w, simulate(w))
    except InputError as exc:
        return EngineRun(name, None, skipped=str(exc))
    return measure(name, w, steps)


def measure(name: str, workload: Workload, steps: Sequence[Step]) -> EngineRun:
    """The metrics of one run from its Step observables (slot i = i-th arrival)."""
    ordered = workload.arrival_order()
    metrics = []
    for i, spec in enumerate(ordered):
        finish = first = None
        stalls = 0
        for s in steps:
            o = s.slots[i]
            if first is not None and finish is None and not o.sampled:
                stalls += 1
            if o.sampled and first is None:
                first = s.step
            if o.finished and finish is None:
                finish = s.step
        metrics.append(RequestMetrics(
            spec.id, finish, None if finish is None else finish - spec.arrival_step + 1,
            None if first is None else first - spec.arrival_step + 1, stalls))
    return EngineRun(
        name, engines.get(name).config_to_dict(workload.config), tuple(metrics),
        idle_slot_steps=sum(int(s.idle_slots) for s in steps),
        padded_rows=sum(int(s.padded_rows) for s in steps),
        preemptions=sum(int(bool(o.preempted)) for s in steps for o in s.slots))


def compare(neutral: NeutralConfig, overrides: dict[str, Any], workload: Workload,
            names: Sequence[str]) -> tuple[EngineRun, ...]:
    """Every engine's run of the workload, in the order given."""
    return tuple(run_engine(n, neutral, overrides, workload) for n in names)


# ---- output -----------------------------------------------------------------------------


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_text(neutral: NeutralConfig, workload: Workload, runs: Sequence[EngineRun]) -> str:
    """The comparison as text: a header, two request tables, one engine table, notes."""
    ids = [r.id for r in workload.arrival_order()]
    done = [r for r in runs if r.skipped is None]
    lines = [f"compare: {len(workload.requests)} requests, {workload.steps} steps; neutral "
             f"config token_budget={neutral.token_budget} max_seqs={neutral.max_seqs} "
             f"kv_tokens={neutral.kv_tokens} block_size={neutral.block_size}", ""]
    for title, attr in (("steps to finish (finish step - arrival step + 1; - = not "
                         "within the run)", "steps_to_finish"),
                        ("time to first token, in steps", "ttft_steps"),
                        ("decode stalls (steps without a new token after the first)",
                         "decode_stalls")):
        lines.append(title)
        rows = [["engine", *ids]] + [
            [r.engine, *(_cell(getattr(m, attr)) for m in r.requests)] for r in done]
        lines += _table(rows) + [""]
    lines.append("per engine")
    rows = [["engine", "makespan", "decode stalls", "idle slot-steps", "padded rows",
             "preemptions"]]
    rows += [[r.engine, _cell(r.makespan), str(sum(m.decode_stalls for m in r.requests)),
              str(r.idle_slot_steps), str(r.padded_rows), str(r.preemptions)] for r in done]
    lines += _table(rows)
    for r in runs:
        if r.skipped is not None:
            lines.append(f"note: {r.engine} skipped: {r.skipped}")
    return "\n".join(lines)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                      for k, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in rows]


def to_json(neutral: NeutralConfig, runs: Sequence[EngineRun]) -> dict[str, object]:
    """The `--json` document."""
    out: dict[str, object] = {"neutral_config": {f: getattr(neutral, f) for f in NEUTRAL_FIELDS},
                              "engines": {}, "skipped": {}}
    for r in runs:
        if r.skipped is not None:
            out["skipped"][r.engine] = r.skipped  # type: ignore[index]
            continue
        out["engines"][r.engine] = {  # type: ignore[index]
            "config": r.config, "makespan": r.makespan, "idle_slot_steps": r.idle_slot_steps,
            "padded_rows": r.padded_rows, "preemptions": r.preemptions,
            "requests": {m.id: {"finish_step": m.finish_step,
                                "steps_to_finish": m.steps_to_finish,
                                "ttft_steps": m.ttft_steps, "decode_stalls": m.decode_stalls}
                         for m in r.requests}}
    return out


# ---- CLI --------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `batchproof compare`."""
    parser.add_argument("workload", metavar="WORKLOAD.json",
                        help="compare workload: requests plus an engine-neutral config "
                             "(docs/compare.md)")
    parser.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                        help=f"engines, comma-separated (default {','.join(DEFAULT_ENGINES)})")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run(args: argparse.Namespace) -> int:
    """Load, run every engine, print. Bad input raises InputError (exit 2 in the CLI)."""
    names = parse_engines(args.engines)
    neutral, overrides, workload = load_compare_workload(args.workload)
    runs = compare(neutral, overrides, workload, names)
    if all(r.skipped is not None for r in runs):
        reasons = "; ".join(f"{r.engine}: {r.skipped}" for r in runs)
        raise InputError(f"no engine ran the workload, so there is nothing to compare "
                         f"({reasons}); fix the config or the requests")
    if args.json:
        print(json.dumps(to_json(neutral, runs), indent=2))
    else:
        print(render_text(neutral, workload, runs))
    return 0
