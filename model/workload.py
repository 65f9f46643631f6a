"""Read and write the workload JSON (the simulation contract, docs/simulation_contract.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model import registry as engines
from model.core.errors import InputError
from model.core.types import DEFAULT_ENGINE, EosEvent, RequestSpec, Workload

_TOP_KEYS = {"engine", "config", "requests", "eos", "steps"}
_REQUEST_KEYS = {"id", "prompt_len", "max_tokens", "arrival_step", "priority",
                 "cached_prefix_len"}


def load_workload(path: str | Path) -> Workload:
    """Read a workload file; every problem is an InputError naming the value and the fix."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read workload {path}: {exc.strerror}; check the path") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"workload {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}); fix the file") from None
    return parse_workload(doc)


def parse_workload(doc: Any) -> Workload:
    """Build a Workload from the contract's JSON object, checking every field."""
    if not isinstance(doc, dict):
        raise InputError("a workload must be a JSON object with 'config' and 'requests'")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise InputError(f"unknown workload key {unknown[0]!r}; known keys: {sorted(_TOP_KEYS)}")
    engine = doc.get("engine", DEFAULT_ENGINE)
    if not isinstance(engine, str):
        raise InputError(f"'engine' must be a string, got {engine!r}")
    config = engines.get(engine).parse_config(doc.get("config", {}))
    requests = tuple(_parse_request(i, r) for i, r in enumerate(_list(doc, "requests")))
    ids = [r.id for r in requests]
    dup = next((x for x in ids if ids.count(x) > 1), None)
    if dup is not None:
        raise InputError(f"request id {dup!r} appears twice; give each request its own id")
    steps = doc.get("steps", 20)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"steps must be a positive integer, got {steps!r}")
    eos = tuple(_parse_eos(i, e, set(ids)) for i, e in enumerate(_list(doc, "eos")))
    return Workload(config=config, requests=requests, eos=eos, steps=steps, engine=engine)



def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise InputError(f"'{key}' must be a JSON list, got {type(value).__name__}")
    return value


def _parse_request(index: int, raw: Any) -> RequestSpec:
    where = f"requests[{index}]"
    if not isinstance(raw, dict):
        raise InputError(f"{where} must be an object with id, prompt_len and max_tokens")
    unknown = sorted(set(raw) - _REQUEST_KEYS)
    if unknown:
        raise InputError(
            f"{where}: unknown key {unknown[0]!r}; known keys: {sorted(_REQUEST_KEYS)}")
    for key in ("id", "prompt_len", "max_tokens"):
        if key not in raw:
            raise InputError(
                f"{where} has no {key!r}; every request needs id, prompt_len, max_tokens")
    rid = raw["id"]
    if not isinstance(rid, str) or not rid:
        raise InputError(f"{where}: id must be a non-empty string, got {rid!r}")
    spec = RequestSpec(
        id=rid,
        prompt_len=_int(where, "prompt_len", raw["prompt_len"], 1),
        max_tokens=_int(where, "max_tokens", raw["max_tokens"], 1),
        arrival_step=_int(where, "arrival_step", raw.get("arrival_step", 1), 1),
        priority=_int(where, "priority", raw.get("priority", 0), None),
        cached_prefix_len=_int(where, "cached_prefix_len", raw.get("cached_prefix_len", 0), 0),
    )
    return spec


def _parse_eos(index: int, raw: Any, ids: set[str]) -> EosEvent:
    where = f"eos[{index}]"
    if not isinstance(raw, dict) or set(raw) != {"id", "step"}:
        raise InputError(f"{where} must be an object {{\"id\": ..., \"step\": ...}}")
    if raw["id"] not in ids:
        raise InputError(
            f"{where}: no request has id {raw['id']!r}; name a request of the workload")
    return EosEvent(id=raw["id"], step=_int(where, "step", raw["step"], 1))


def _int(where: str, key: str, value: Any, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: {key} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InputError(f"{where}: {key} must be >= {minimum}, got {value}")
    return value



def workload_to_json(w: Workload) -> dict[str, Any]:
    """The contract's JSON object for a workload (inverse of parse_workload)."""
    return {
        "engine": w.engine,
        "config": w.config.to_dict(),
        "requests": [_request_json(r) for r in w.requests],
        "eos": [{"id": e.id, "step": e.step} for e in w.eos],
        "steps": w.steps,
    }


def _request_json(r: RequestSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"id": r.id, "prompt_len": r.prompt_len, "max_tokens": r.max_tokens,
                           "arrival_step": r.arrival_step, "priority": r.priority}
    if r.cached_prefix_len:
        out["cached_prefix_len"] = r.cached_prefix_len
    return out
