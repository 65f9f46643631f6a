"""Read and write the workload JSON (the simulation contract, docs/simulation_contract.md),
and check a workload's configuration as the engine would when it starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model import registry as engines
from model.core.checks import (
    MAX_FILE_BYTES,
    MAX_INT,
    MAX_NESTING,
    MAX_REQUESTS,
    MAX_STEPS,
    check_nesting,
    check_size,
)
from model.core.errors import ConfigError, InputError, refuse_unknown, shown
from model.core.types import (
    DEFAULT_ENGINE,
    AbortEvent,
    AcceptEvent,
    DraftEvent,
    EosEvent,
    ExternalHit,
    KVLoadEvent,
    RequestSpec,
    Workload,
)
from model.vllm.config import ENGINE_VLLM_V1
from model.vllm.startup import start_rejection

_TOP_KEYS = {"engine", "config", "requests", "eos", "steps", "accepted", "drafts", "aborts",
             "kv_hits", "kv_loads"}
_REQUEST_KEYS = {"id", "prompt_len", "max_tokens", "arrival_step", "priority",
                 "cached_prefix_len", "prefix_group", "shared_prefix_len"}


def read_json(path: str | Path, fix: str, what: str = "") -> Any:
    """The JSON document in the file at `path` (`what` names the kind of file in messages:
    "workload"). Every problem (unreadable, not UTF-8, not JSON, NaN or Infinity, a number
    too long to read, nesting deeper than MAX_NESTING, a file over MAX_FILE_BYTES) is a
    one-line InputError naming the file and ending in `fix`."""
    name = f"{what} {path}".strip()
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}; check the path") from None
    except ValueError as exc:  # a path with a NUL byte
        raise InputError(f"cannot read {what} {shown(str(path))}: {exc}; check the "
                         "path") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"{name} is larger than {MAX_FILE_BYTES // 2**20} MiB, more than any "
                         f"batchproof input needs; {fix}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name} is not UTF-8 text (byte {exc.start} is "
                         f"{data[exc.start]:#04x}); {fix}") from None
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except InputError as exc:
        raise InputError(f"{name}: {exc}; {fix}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}); {fix}") from None
    except RecursionError:
        raise InputError(f"{name} nests JSON too deeply (more than {MAX_NESTING} levels, "
                         f"more than any batchproof input has); {fix}") from None
    except ValueError as exc:  # an integer beyond sys.get_int_max_str_digits()
        raise InputError(f"{name} holds a number too long to read ({exc}); numbers must be "
                         f"at most {MAX_INT} (64 bits); {fix}") from None
    check_nesting(doc, name, fix)
    return doc


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not a JSON number; give a finite number")


def load_workload(path: str | Path, need_requests: bool = True) -> Workload:
    """Read a workload file; every problem is an InputError naming the value and the fix.
    `need_requests` False accepts a file that only carries a config (check --config-file)."""
    doc = read_json(path, "pass a workload JSON file (docs/simulation_contract.md)",
                    "workload")
    return parse_workload(doc, need_requests)


def parse_workload(doc: Any, need_requests: bool = True) -> Workload:
    """Build a Workload from the contract's JSON object, checking every field; parsing is
    linear in the size of the document."""
    if not isinstance(doc, dict):
        raise InputError("a workload must be a JSON object with 'config' and 'requests', got "
                         f"{shown(doc)}")
    check_nesting(doc, "the workload", "pass a workload JSON object")
    refuse_unknown(doc, _TOP_KEYS, "unknown workload key", f"known keys: {sorted(_TOP_KEYS)}")
    engine = doc.get("engine", DEFAULT_ENGINE)
    if not isinstance(engine, str):
        raise InputError(f"'engine' must be a string, got {shown(engine)}")
    config = engines.get(engine).parse_config(doc.get("config", {}))
    raw_requests = _list(doc, "requests", MAX_REQUESTS)
    if need_requests and not raw_requests:
        raise InputError("the workload has no requests; a workload needs at least one "
                         "request in 'requests' (docs/simulation_contract.md)")
    requests = tuple(_parse_request(i, r) for i, r in enumerate(raw_requests))
    ids: set[str] = set()
    for r in requests:
        if r.id in ids:
            raise InputError(f"request id {r.id!r} appears twice; give each request its own id")
        ids.add(r.id)
    steps = _int("the workload", "steps", doc.get("steps", 20), 1, MAX_STEPS)
    eos = tuple(_parse_eos(i, e, ids) for i, e in enumerate(_list(doc, "eos", MAX_REQUESTS)))
    accepted = tuple(_parse_count("accepted", i, e, ids, steps, AcceptEvent)
                     for i, e in enumerate(_list(doc, "accepted", MAX_REQUESTS)))
    drafts = tuple(_parse_count("drafts", i, e, ids, steps, DraftEvent)
                   for i, e in enumerate(_list(doc, "drafts", MAX_REQUESTS)))
    aborts = tuple(_parse_abort(i, e, ids, steps)
                   for i, e in enumerate(_list(doc, "aborts", MAX_REQUESTS)))
    if aborts and engine != ENGINE_VLLM_V1:
        raise InputError(f"'aborts' is modelled for {ENGINE_VLLM_V1} only, not {engine}; "
                         "drop the 'aborts' entries")
    prompts = {r.id: r.prompt_len for r in requests}
    kv_hits = tuple(_parse_kv_hit(i, e, prompts)
                    for i, e in enumerate(_list(doc, "kv_hits", MAX_REQUESTS)))
    kv_loads = tuple(_parse_kv_load(i, e, ids, steps)
                     for i, e in enumerate(_list(doc, "kv_loads", MAX_REQUESTS)))
    if (kv_hits or kv_loads) and not getattr(config, "kv_connector", False):
        raise InputError("the workload gives 'kv_hits' or 'kv_loads' but its config has no KV "
                         "connector; set \"kv_connector\": true or drop them")
    if len({h.id for h in kv_hits}) != len(kv_hits):
        raise InputError("'kv_hits' names a request twice; give each request at most one "
                         "external hit")
    workload = Workload(config=config, requests=requests, eos=eos, steps=steps, engine=engine,
                        accepted=accepted, drafts=drafts, aborts=aborts, kv_hits=kv_hits,
                        kv_loads=kv_loads)
    check_size(workload)
    return workload


def _list(doc: dict[str, Any], key: str, most: int) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise InputError(f"'{key}' must be a JSON list, got {type(value).__name__}")
    if len(value) > most:
        raise InputError(f"'{key}' has {len(value)} entries, more than the {most} a workload "
                         "may have (docs/simulation_contract.md, limits); split the workload")
    return value


def _parse_request(index: int, raw: Any) -> RequestSpec:
    where = f"requests[{index}]"
    if not isinstance(raw, dict):
        raise InputError(f"{where} must be an object with id, prompt_len and max_tokens, got "
                         f"{shown(raw)}")
    refuse_unknown(raw, _REQUEST_KEYS, f"{where}: unknown key",
                   f"known keys: {sorted(_REQUEST_KEYS)}")
    for key in ("id", "prompt_len", "max_tokens"):
        if key not in raw:
            raise InputError(
                f"{where} has no {key!r}; every request needs id, prompt_len, max_tokens")
    rid = raw["id"]
    if not isinstance(rid, str) or not rid:
        raise InputError(f"{where}: id must be a non-empty string, got {shown(rid)}")
    prompt_len = _int(where, "prompt_len", raw["prompt_len"], 1)
    cached = _int(where, "cached_prefix_len", raw.get("cached_prefix_len", 0), 0)
    if cached > prompt_len:
        raise InputError(f"{where}: cached_prefix_len {cached} exceeds prompt_len "
                         f"{prompt_len}; a cached prefix is part of the prompt, give at most "
                         f"{prompt_len}")
    group, shared = _prefix_group(where, raw, prompt_len)
    return RequestSpec(
        id=rid,
        prompt_len=prompt_len,
        max_tokens=_int(where, "max_tokens", raw["max_tokens"], 1),
        arrival_step=_int(where, "arrival_step", raw.get("arrival_step", 1), 1),
        priority=_int(where, "priority", raw.get("priority", 0), -MAX_INT),
        cached_prefix_len=cached,
        prefix_group=group,
        shared_prefix_len=shared,
    )


def _prefix_group(where: str, raw: dict[str, Any], prompt_len: int) -> tuple[str | None, int]:
    """A prefix group (requests of one group share their first tokens) and the length of
    this request's shared prefix; absent means the request shares nothing."""
    group = raw.get("prefix_group")
    if group is None:
        if "shared_prefix_len" in raw:
            raise InputError(f"{where}: shared_prefix_len needs a prefix_group; give "
                             "\"prefix_group\": \"<name>\" or drop shared_prefix_len")
        return None, 0
    if not isinstance(group, str) or not group:
        raise InputError(f"{where}: prefix_group must be a non-empty string, got "
                         f"{shown(group)}")
    shared = _int(where, "shared_prefix_len", raw.get("shared_prefix_len", prompt_len), 1)
    if shared > prompt_len:
        raise InputError(f"{where}: shared_prefix_len {shared} exceeds prompt_len "
                         f"{prompt_len}; a shared prefix is part of the prompt, give at most "
                         f"{prompt_len}")
    return group, shared


def _parse_eos(index: int, raw: Any, ids: set[str]) -> EosEvent:
    where = f"eos[{index}]"
    if not isinstance(raw, dict) or set(raw) != {"id", "step"}:
        raise InputError(f"{where} must be an object {{\"id\": ..., \"step\": ...}}, got "
                         f"{shown(raw)}")
    rid = raw["id"]
    if not isinstance(rid, str):
        raise InputError(f"{where}: id must be a request id (a string), got {shown(rid)}")
    return EosEvent(id=_request_id(where, rid, ids),
                    step=_int(where, "step", raw["step"], 1, MAX_INT))


def _request_id(where: str, rid: object, ids: set[str]) -> str:
    """`rid` when it names a request of the workload (one of `ids`), else an InputError."""
    if not isinstance(rid, str) or rid not in ids:
        raise InputError(f"{where}: no request has id {shown(rid)}; name a request of the "
                         "workload")
    return rid


def _parse_count(key: str, index: int, raw: Any, ids: set[str], steps: int,
                 kind: type[AcceptEvent] | type[DraftEvent]) -> AcceptEvent | DraftEvent:
    """One speculative-decoding choice {"id", "step", "count"} (docs/simulation_contract.md)."""
    where = f"{key}[{index}]"
    if not isinstance(raw, dict) or set(raw) != {"id", "step", "count"}:
        raise InputError(f"{where} must be an object {{\"id\": ..., \"step\": ..., "
                         f"\"count\": ...}}, got {shown(raw)}")
    rid = _request_id(where, raw["id"], ids)
    step = _int(where, "step", raw["step"], 1, steps)
    return kind(id=rid, step=step, count=_int(where, "count", raw["count"], 0, MAX_INT))


def _flagged_event(where: str, raw: Any, flag: str, ids: set[str], steps: int
                   ) -> tuple[str, int, bool]:
    """(id, step, flag) of a request event {"id", "step"[, flag]}, the flag false unless
    given as true."""
    if (not isinstance(raw, dict) or not {"id", "step"} <= set(raw)
            or not set(raw) <= {"id", "step", flag}):
        raise InputError(f"{where} must be an object {{\"id\": ..., \"step\": ...}} with an "
                         f"optional \"{flag}\": true, got {shown(raw)}")
    rid = _request_id(where, raw["id"], ids)
    value = raw.get(flag, False)
    if not isinstance(value, bool):
        raise InputError(f"{where}: {flag} must be true or false, got {shown(value)}")
    return rid, _int(where, "step", raw["step"], 1, steps), value


def _parse_abort(index: int, raw: Any, ids: set[str], steps: int) -> AbortEvent:
    """One client abort {"id", "step"[, "after_schedule"]} (docs/simulation_contract.md)."""
    rid, step, after = _flagged_event(f"aborts[{index}]", raw, "after_schedule", ids, steps)
    return AbortEvent(id=rid, step=step, after_schedule=after)


def _parse_kv_hit(index: int, raw: Any, prompts: dict[str, int]) -> ExternalHit:
    """One external hit {"id", "tokens"[, "async"]} (docs/simulation_contract.md)."""
    where = f"kv_hits[{index}]"
    if (not isinstance(raw, dict) or not {"id", "tokens"} <= set(raw)
            or not set(raw) <= {"id", "tokens", "async"}):
        raise InputError(f"{where} must be an object {{\"id\": ..., \"tokens\": ...}} with "
                         f"an optional \"async\": true, got {shown(raw)}")
    rid = _request_id(where, raw["id"], set(prompts))
    load_async = raw.get("async", False)
    if not isinstance(load_async, bool):
        raise InputError(f"{where}: async must be true or false, got {shown(load_async)}")
    tokens = _int(where, "tokens", raw["tokens"], 0)
    if tokens > prompts[rid]:
        raise InputError(f"{where}: tokens {tokens} exceeds request {rid!r}'s prompt_len "
                         f"{prompts[rid]}; an external hit covers prompt tokens, give at most "
                         f"{prompts[rid]}")
    return ExternalHit(id=rid, tokens=tokens, load_async=load_async)


def _parse_kv_load(index: int, raw: Any, ids: set[str], steps: int) -> KVLoadEvent:
    """One KV load report {"id", "step"[, "failed"]} (docs/simulation_contract.md)."""
    rid, step, failed = _flagged_event(f"kv_loads[{index}]", raw, "failed", ids, steps)
    return KVLoadEvent(id=rid, step=step, failed=failed)


def _int(where: str, key: str, value: Any, minimum: int, maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: {key} must be an integer, got {shown(value)}")
    if value < minimum:
        raise InputError(f"{where}: {key} must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise InputError(f"{where}: {key} must be at most {maximum} (docs/"
                         f"simulation_contract.md, limits), got {shown(value)}")
    return value


def config_rejection(engine: str, config: Any) -> ConfigError | None:
    """The first rule by which `engine` refuses `config` as a command receives it: the
    engine's own configuration rules (vLLM: SchedulerConfig's), then for vLLM the checks
    its engine makes at start (the KV pool holds one max_model_len request). Every command
    that runs a configuration a user gave applies this; manifest configurations are
    governed by the manifest's own `validated` flag instead."""
    if engine == ENGINE_VLLM_V1:
        return start_rejection(config)
    return engines.get(engine).rejection(config)


def check_workload(workload: Workload, validate: bool = True) -> ConfigError | None:
    """Check a workload as its engine would before it runs: the config's field types (every
    time), its configuration rules (`config_rejection`: an InputError naming the rule and
    `--no-validate` unless `validate` is False, when the rule is returned instead), and the
    requests the engine refuses before scheduling (every time)."""
    rejected = config_rejection(workload.engine, workload.config)
    if validate and rejected is not None:
        raise InputError(f"{rejected} [rule {rejected.rule}; pass --no-validate to run it "
                         "anyway]")
    engines.get(workload.engine).check_admissible(workload)
    return rejected


def workload_to_json(w: Workload) -> dict[str, Any]:
    """The contract's JSON object for a workload (inverse of parse_workload)."""
    return {
        "engine": w.engine,
        "config": w.config.to_dict(),
        "requests": [_request_json(r) for r in w.requests],
        "eos": [{"id": e.id, "step": e.step} for e in w.eos],
        "steps": w.steps,
        **({"accepted": [{"id": e.id, "step": e.step, "count": e.count} for e in w.accepted]}
           if w.accepted else {}),
        **({"drafts": [{"id": e.id, "step": e.step, "count": e.count} for e in w.drafts]}
           if w.drafts else {}),
        **({"aborts": [{"id": e.id, "step": e.step,
                        **({"after_schedule": True} if e.after_schedule else {})}
                       for e in w.aborts]} if w.aborts else {}),
        **({"kv_hits": [{"id": h.id, "tokens": h.tokens,
                         **({"async": True} if h.load_async else {})}
                        for h in w.kv_hits]} if w.kv_hits else {}),
        **({"kv_loads": [{"id": e.id, "step": e.step, **({"failed": True} if e.failed else {})}
                         for e in w.kv_loads]} if w.kv_loads else {}),
    }


def _request_json(r: RequestSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"id": r.id, "prompt_len": r.prompt_len, "max_tokens": r.max_tokens,
                           "arrival_step": r.arrival_step, "priority": r.priority}
    if r.cached_prefix_len:
        out["cached_prefix_len"] = r.cached_prefix_len
    if r.prefix_group is not None:
        out["prefix_group"] = r.prefix_group
        out["shared_prefix_len"] = r.shared_prefix_len
    return out
