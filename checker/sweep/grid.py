"""The grid file of `batchproof sweep` (docs/sweeps.md): parse it, expand it into configs,
skip the configs the engine refuses (each with its rule), and make one keyed job per
(config, check, method).

    engine: vllm-v1                    # a registry name; a version as vllm-v1@X
    config:                            # vLLM flags (vllm serve spelling, - or _)
      max-model-len: 16                #   a scalar: fixed
      max-num-batched-tokens: [8, 16]  #   a list: swept
      max-num-seqs: {from: 2, to: 8, step: 2}   # a range (or times: 2, geometric)
    properties: [budget_respected, {starvation: {k: 3}}]   # the catalogue, with params
    hazards: [starvation]              # checker/config/hazards.py, or all
    worst: [starvation_steps]          # metrics of `batchproof worst`
    bounds: {slots: 2, depth: 4}       # checker/methods/symbolic.Bounds fields
    method: bmc                        # bmc | explore | [bmc, explore]
    timeout: 60                        # seconds per job
    plot: [max-num-batched-tokens, max-num-seqs]   # heatmap x, y (default: first two swept)
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from checker.config import hazards
from checker.config.flags import CONFIG_FLAGS, ConfigFlag
from checker.methods import worst
from checker.methods.symbolic import Bounds
from model import registry as engines
from model.core.checks import MAX_INT, check_nesting, load_yaml, read_input
from model.core.errors import ConfigError, InputError, shown
from model.vllm.config import ENGINE_VLLM_V1, Config
from model.workload import config_rejection
from properties import catalogue

PROPERTY, HAZARD, METRIC = "property", "hazard", "metric"
METHODS = ("bmc", "explore")
HAZARD_METHOD, METRIC_METHOD = "hazard", "worst"
# The sizes `check` allows (checker/cli/check.py, docs/simulation_contract.md "Limits"):
# the same rules are unrolled here, so the same sizes are the honest limit.
MAX_SLOTS, MAX_DEPTH, MAX_TIMEOUT_S = 16, 1000, 86_400.0
# One sweep's jobs: each row is kept in memory and in the journal (about 1 KB each).
MAX_JOBS = 1_000_000
DEFAULT_TIMEOUT_S = 60.0
_KEYS = ("engine", "description", "config", "properties", "hazards", "worst", "bounds",
         "method", "timeout", "plot")
_FIX = "see docs/sweeps.md for the grid format"


@dataclass(frozen=True, slots=True)
class Check:
    """One thing evaluated at every point of the grid: a catalogue property, a hazard of
    checker/config/hazards.py, or a metric of `batchproof worst`."""

    kind: str  # PROPERTY | HAZARD | METRIC
    name: str
    params: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        """'starvation k=3', 'hazard head_of_line', 'worst starvation_steps'."""
        prefix = {PROPERTY: "", HAZARD: "hazard ", METRIC: "worst "}[self.kind]
        return (prefix + self.name + "".join(f" {k}={v}" for k, v in self.params)).strip()


@dataclass(frozen=True, slots=True)
class Axis:
    """A config field and the values the grid gives it (one value: fixed)."""

    field: str
    name: str  # as the grid spells it (the vLLM flag without --)
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Grid:
    """A parsed grid file."""

    path: str
    engine: str  # as written, passed to the registry (vllm-v1@X included)
    engine_name: str  # the registry's EngineModel.name
    axes: tuple[Axis, ...]
    checks: tuple[Check, ...]
    bounds: tuple[tuple[str, int], ...]  # every Bounds field
    methods: tuple[str, ...]
    timeout_s: float
    plot: tuple[str, ...]  # the heatmap's x and y fields (0 to 2)
    pool_known: bool  # the grid gives the KV pool (hazards need it, as `config` does)
    description: str = ""

    @property
    def swept(self) -> tuple[Axis, ...]:
        """The axes with more than one value."""
        return tuple(a for a in self.axes if len(a.values) > 1)

    def points(self) -> int:
        """How many configurations the grid names, before any is refused."""
        return math.prod(len(a.values) for a in self.axes)

    def jobs_per_point(self) -> int:
        """Jobs at one configuration: properties x methods, plus hazards and metrics."""
        props = sum(c.kind == PROPERTY for c in self.checks)
        return props * len(self.methods) + sum(c.kind != PROPERTY for c in self.checks)

    def axis(self, name: str) -> Axis:
        """The axis of field (or flag) `name`."""
        return next(a for a in self.axes if name in (a.field, a.name))


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration of the grid."""

    values: tuple[tuple[str, Any], ...]  # field -> value, every axis
    config: Any  # the engine's Config

    def name(self, grid: Grid) -> str:
        """The swept values as the grid spells them: 'max-num-seqs=4 block-size=8'."""
        swept = {a.field: a.name for a in grid.swept}
        return " ".join(f"{swept[f]}={_text(v)}" for f, v in self.values if f in swept) \
            or "fixed"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A configuration the engine refuses, with the rule."""

    values: tuple[tuple[str, Any], ...]
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class SweepJob:
    """One row to compute: a check at one point with one method, keyed by what decides it
    (engine, config, check and params, bounds, method); the timeout is not in the key."""

    key: str
    engine: str
    config: Any
    config_name: str
    values: tuple[tuple[str, Any], ...]
    check: Check
    method: str  # bmc | explore | HAZARD_METHOD | METRIC_METHOD
    bounds: tuple[tuple[str, int], ...]
    timeout_s: float
    pool_known: bool = True


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# --- reading ------------------------------------------------------------------------------

def load(path: str | Path) -> Grid:
    """Read and check a grid file; every problem is one InputError naming the key."""
    return parse(_read_yaml(Path(path)), str(path))


def _read_yaml(path: Path) -> Any:
    data = read_input(path, _FIX)
    try:
        # aliases and expanded size capped while loading
        doc = load_yaml(data.decode("utf-8"), str(path), _FIX)
    except InputError:
        raise
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}); {_FIX}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise InputError(f"{path} is not valid YAML{line}: {problem}; fix the file") from None
    except (RecursionError, ValueError):
        raise InputError(f"{path} nests too deeply or holds a number too long; {_FIX}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path} must be a YAML mapping (engine, config, properties, ...), "
                         f"got {type(doc).__name__}; {_FIX}")
    check_nesting(doc, str(path), _FIX, "YAML")
    return doc


def parse(doc: dict[str, Any], where: str = "the grid") -> Grid:
    """The Grid of a grid document (see the module docstring)."""
    unknown = [k for k in doc if k not in _KEYS]
    if unknown:
        raise InputError(f"{where}: unknown key {shown(unknown[0])}; known keys: "
                         f"{', '.join(_KEYS)}")
    engine = doc.get("engine", ENGINE_VLLM_V1)
    if not isinstance(engine, str):
        raise InputError(f"{where}: engine must be a string such as vllm-v1, got {shown(engine)}")
    model = engines.get(engine)  # the registry's one-line error for an unknown name
    # Only an absent config (or `config:` with nothing) means the defaults: `config: []`,
    # `0` or `""` is a mistake, not one configuration.
    raw_config = {} if doc.get("config") is None else doc["config"]
    if not isinstance(raw_config, dict):
        raise InputError(f"{where}: config is {shown(raw_config)}, not a mapping; give flag: "
                         "value, list or range, e.g. config: {max-num-seqs: [4, 8]}")
    axes = (_vllm_axes(raw_config, where) if model.name == ENGINE_VLLM_V1
            else _engine_axes(model, raw_config, where))
    checks = _checks(doc, model.name, where)
    if not checks:
        raise InputError(f"{where}: nothing to check; give properties, hazards or worst")
    methods = _methods(doc.get("method", "bmc"), where)
    bounds = _bounds({} if doc.get("bounds") is None else doc["bounds"], where)
    timeout = _timeout(doc.get("timeout", DEFAULT_TIMEOUT_S), where)
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise InputError(f"{where}: description must be a string")
    grid = Grid(path=where, engine=engine, engine_name=model.name, axes=axes,
                checks=checks, bounds=bounds, methods=methods, timeout_s=timeout, plot=(),
                pool_known=any(a.field == "num_gpu_blocks" for a in axes),
                description=description)
    grid = replace(grid, plot=_plot(grid, doc.get("plot"), where))
    jobs = grid.points() * grid.jobs_per_point()
    if jobs > MAX_JOBS:
        raise InputError(f"{where}: {grid.points()} configs x {grid.jobs_per_point()} checks "
                         f"are {jobs} jobs, more than the {MAX_JOBS} one sweep runs; "
                         "narrow a range or split the grid")
    return grid


def _flags() -> dict[str, ConfigFlag]:
    """Every spelling of a vLLM flag (and the field's own name), without '--', with -."""
    out: dict[str, ConfigFlag] = {}
    for flag in CONFIG_FLAGS:
        out[flag.field.replace("_", "-")] = flag
        for spelling in flag.flags:
            out[spelling.removeprefix("--")] = flag
    return out


def _vllm_axes(raw: dict[Any, Any], where: str) -> tuple[Axis, ...]:
    known = _flags()
    axes: dict[str, Axis] = {}
    for key, value in raw.items():
        name = str(key).removeprefix("--").replace("_", "-")
        flag = known.get(name)
        if flag is None:
            names = sorted({f.flags[0].removeprefix("--") for f in CONFIG_FLAGS})
            raise InputError(f"{where}: config: {shown(key)} is not a vLLM flag the model "
                             f"reads; known: {', '.join(names)}")
        if flag.field in axes:
            raise InputError(f"{where}: config: {flag.field} is given twice "
                             f"({axes[flag.field].name} and {name})")
        values = tuple(_flag_value(flag, v, f"{where}: config: {name}")
                       for v in _values(value, f"{where}: config: {name}", flag.kind == "int"))
        axes[flag.field] = Axis(flag.field, name, values)
    return tuple(axes.values())


def _flag_value(flag: ConfigFlag, value: Any, where: str) -> Any:
    """A grid value read as the flag reads its text (vLLM's 8k / 8K forms included)."""
    if value is None and getattr(Config(), flag.field) is None:
        return None  # an optional field left at its default
    if flag.kind == "bool":
        if not isinstance(value, bool):
            raise InputError(f"{where}: {shown(value)} is not true or false")
        return value
    if flag.kind == "choice":
        if value not in flag.choices:
            raise InputError(f"{where}: {shown(value)} is not one of {', '.join(flag.choices)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InputError(f"{where}: {shown(value)} is not a number")
    assert flag.parse is not None
    try:
        return flag.parse(str(value))
    except argparse.ArgumentTypeError as exc:
        raise InputError(f"{where}: {exc}") from None


def _engine_axes(model: engines.EngineModel, raw: dict[Any, Any], where: str
                 ) -> tuple[Axis, ...]:
    """Another engine's config: its own workload field names (the engine parses them)."""
    known = list(model.config_to_dict(model.parse_config({})))
    axes = []
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise InputError(f"{where}: config: {shown(key)} is not a {model.name} config "
                             f"field; known: {', '.join(known)}")
        values = _values(value, f"{where}: config: {name}", True)
        for v in values:
            model.parse_config({name: v})  # the engine's own one-line error for a bad value
        axes.append(Axis(name, name, values))
    return tuple(axes)


def _values(value: Any, where: str, ranged: bool) -> tuple[Any, ...]:
    """A scalar, a list, or (integers only) a range {from, to, step | times}."""
    if isinstance(value, list):
        if not value:
            raise InputError(f"{where}: an empty list; give at least one value")
        return tuple(value)
    if not isinstance(value, dict):
        return (value,)
    if not ranged:
        raise InputError(f"{where}: a range needs an integer field; give a list")
    extra = set(value) - {"from", "to", "step", "times"}
    if extra or not {"from", "to"} <= set(value) or {"step", "times"} <= set(value):
        raise InputError(f"{where}: a range is {{from: A, to: B}} with step: S or times: F "
                         f"(one of them), got {shown(value)}")
    ends = {}
    for k in ("from", "to", "step", "times"):
        v = value.get(k)
        if k in value and (isinstance(v, bool) or not isinstance(v, int)
                           or not 0 <= v <= MAX_INT):
            raise InputError(f"{where}: range {k} must be an integer >= 0, got {shown(v)}")
        ends[k] = v
    low, high = ends["from"], ends["to"]
    if low > high:
        raise InputError(f"{where}: range from {low} is above to {high}")
    if ends["times"] is not None:
        factor = ends["times"]
        if factor < 2 or low < 1:
            raise InputError(f"{where}: a geometric range needs times >= 2 and from >= 1")
        count = int(math.log(high / low, factor)) + 2  # bounded even for huge ends
        out = [low * factor**i for i in range(count)]
        return tuple(v for v in out if v <= high)
    step = ends["step"] if ends["step"] is not None else 1
    if step < 1:
        raise InputError(f"{where}: range step must be >= 1")
    count = (high - low) // step + 1
    if count > MAX_JOBS:
        raise InputError(f"{where}: the range has {count} values, more than the {MAX_JOBS} "
                         "jobs one sweep runs; raise step or narrow it")
    return tuple(range(low, high + 1, step))


def _named_entries(raw: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A list of names or {name: {param: value}} (one key each), or a mapping of them."""
    if raw is None:
        return
    items: list[Any] = list(raw.items()) if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise InputError(f"{where} must be a list of names or {{name: {{param: value}}}}")
    for item in items:
        if isinstance(item, tuple):
            name, params = item
        elif isinstance(item, dict) and len(item) == 1:
            name, params = next(iter(item.items()))
        elif isinstance(item, str):
            name, params = item, {}
        else:
            raise InputError(f"{where}: {shown(item)} is neither a name nor {{name: params}}")
        params = params or {}
        if not isinstance(name, str) or not isinstance(params, dict):
            raise InputError(f"{where}: {shown(item)}: the params of a name are a mapping")
        yield name, params


def _int_params(params: dict[str, Any], where: str) -> tuple[tuple[str, int], ...]:
    out = []
    for k, v in sorted(params.items(), key=lambda kv: str(kv[0])):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10_000:
            raise InputError(f"{where}: param {shown(k)} must be an integer in 0..10000, "
                             f"got {shown(v)}")
        out.append((str(k), v))
    return tuple(out)


def _checks(doc: dict[str, Any], engine_name: str, where: str) -> tuple[Check, ...]:
    out: list[Check] = []
    known = set(catalogue.names())
    for name, params in _named_entries(doc.get("properties"), f"{where}: properties"):
        if name not in known:
            raise InputError(f"{where}: properties: unknown property {shown(name)}; known: "
                             f"{', '.join(sorted(known))}")
        values = _int_params(params, f"{where}: properties: {name}")
        try:
            catalogue.get(name, **dict(values))
        except TypeError as exc:
            raise InputError(f"{where}: properties: {name}: bad params ({exc})") from None
        out.append(Check(PROPERTY, name, values))
    raw_hazards = doc.get("hazards")
    if raw_hazards == "all":
        raw_hazards = list(hazards.HAZARD_NAMES)
    if raw_hazards and engine_name != ENGINE_VLLM_V1:
        raise InputError(f"{where}: hazards are vLLM V1's (checker/config/hazards.py), not "
                         f"{engine_name}'s; check properties instead")
    for name, params in _named_entries(raw_hazards, f"{where}: hazards"):
        out.append(Check(HAZARD, name, hazard_params(name, params, f"{where}: hazards")))
    for name, params in _named_entries(doc.get("worst"), f"{where}: worst"):
        if params and set(params) != {"metric"}:
            raise InputError(f"{where}: worst: a metric takes no params, got {shown(params)}")
        if name not in worst.METRICS:
            raise InputError(f"{where}: worst: unknown metric {shown(name)}; metrics: "
                             f"{', '.join(worst.METRICS)}")
        out.append(Check(METRIC, name, ()))
    seen = set()
    for c in out:
        if c in seen:
            raise InputError(f"{where}: {c.label} is listed twice")
        seen.add(c)
    return tuple(out)


def hazard(name: str) -> hazards.Hazard:
    """The hazard called `name`; InputError naming the hazards otherwise."""
    for h in hazards.HAZARDS:
        if h.name == name:
            return h
    raise InputError(f"unknown hazard {shown(name)}; known: {', '.join(hazards.HAZARD_NAMES)}")


# The Envelope fields that bound the search; every other field sets a hazard's params.
_ENVELOPE_BOUNDS = {"slots", "depth", "max_prompt_len", "max_max_tokens", "max_priority",
                    "timeout_s"}


def _param_fields(h: hazards.Hazard) -> dict[str, str]:
    """The hazard's params (k, m) -> the Envelope field that sets each, found by moving
    each field and watching the params change: no second table to keep in step."""
    base = hazards.Envelope()
    out = {}
    for f in fields(hazards.Envelope):
        if f.name in _ENVELOPE_BOUNDS:
            continue
        moved = dict(h.params(replace(base, **{f.name: getattr(base, f.name) + 1})))
        for k, v in h.params(base):
            if moved.get(k) != v:
                out[k] = f.name
    return out


def hazard_params(name: str, params: dict[str, Any], where: str) -> tuple[tuple[str, int], ...]:
    """The hazard's params (its property's, e.g. k=3), the defaults of Envelope for any
    not given."""
    h = hazard(name)
    given = dict(_int_params(params, f"{where}: {name}"))
    allowed = _param_fields(h)
    extra = sorted(set(given) - set(allowed))
    if extra:
        raise InputError(f"{where}: {name} takes " + (
            f"params {', '.join(allowed)}" if allowed else "no params") + f", not {extra[0]}")
    env = replace(hazards.Envelope(), **{allowed[k]: v for k, v in given.items()})
    return tuple(h.params(env))


def envelope(job: SweepJob) -> hazards.Envelope:
    """The hazard search's envelope for a job: its bounds, timeout and params."""
    h = hazard(job.check.name)
    b = dict(job.bounds)
    fields_of = _param_fields(h)
    return replace(hazards.Envelope(), slots=b["slots"], depth=b["depth"],
                   max_prompt_len=b["max_prompt_len"], max_max_tokens=b["max_max_tokens"],
                   max_priority=b["max_priority"], timeout_s=job.timeout_s,
                   **{fields_of[k]: v for k, v in job.check.params})


def _methods(raw: Any, where: str) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    for m in items:
        if m not in METHODS:
            raise InputError(f"{where}: method {shown(m)} is not one of {', '.join(METHODS)}")
    if not items or len(set(items)) != len(items):
        raise InputError(f"{where}: method: give bmc, explore, or both once each")
    return tuple(items)


def _bounds(raw: Any, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: bounds is {shown(raw)}, not a mapping; give one such as "
                         "{slots: 2, depth: 4}")
    names = [f.name for f in fields(Bounds)]
    given = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in names:
            raise InputError(f"{where}: bounds: unknown bound {shown(key)}; known: "
                             f"{', '.join(names)}")
        most = {"slots": MAX_SLOTS, "depth": MAX_DEPTH}.get(name, 10_000)
        least = 1 if name in ("slots", "depth") else 0
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise InputError(f"{where}: bounds: {name} must be an integer in {least}..{most}, "
                             f"got {shown(value)}")
        given[name] = value
    b = Bounds(**given)
    return tuple((n, getattr(b, n)) for n in names)


def _timeout(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not (
            math.isfinite(raw) and 0 < raw <= MAX_TIMEOUT_S):
        raise InputError(f"{where}: timeout must be a number of seconds in (0, "
                         f"{MAX_TIMEOUT_S:g}], got {shown(raw)}")
    return float(raw)


def _plot(grid: Grid, raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return tuple(a.field for a in grid.swept[:2])
    items = raw if isinstance(raw, list) else [raw]
    if not 1 <= len(items) <= 2:
        raise InputError(f"{where}: plot names one or two swept fields (x, y)")
    out = []
    for name in items:
        axis = next((a for a in grid.swept if str(name).replace("_", "-") in (
            a.name, a.field.replace("_", "-"))), None)
        if axis is None:
            raise InputError(f"{where}: plot: {shown(name)} is not a swept field; swept: "
                             f"{', '.join(a.name for a in grid.swept) or 'none'}")
        out.append(axis.field)
    if len(set(out)) != len(out):
        raise InputError(f"{where}: plot names the same field twice")
    return tuple(out)


# --- expanding ----------------------------------------------------------------------------

def expand(grid: Grid) -> tuple[list[Point], list[Skipped]]:
    """Every configuration of the grid, in grid order, and those the engine refuses
    (model/workload.config_rejection: vLLM's SchedulerConfig rules, then its startup KV
    check), each with the rule."""
    model = engines.get(grid.engine)
    points, skipped = [], []
    for combo in itertools.product(*(a.values for a in grid.axes)):
        values = tuple((a.field, v) for a, v in zip(grid.axes, combo, strict=True))
        cfg = _config(grid, model, dict(values))
        rejected = _rejection(grid.engine_name, cfg)
        if rejected is not None:
            skipped.append(Skipped(values, rejected.rule, str(rejected)))
        else:
            points.append(Point(values, cfg))
    return points, skipped


def _config(grid: Grid, model: engines.EngineModel, values: dict[str, Any]) -> Any:
    if grid.engine_name == ENGINE_VLLM_V1:
        return replace(Config(), **values)
    return model.parse_config(values)


def _rejection(engine_name: str, cfg: Any) -> ConfigError | None:
    try:
        return config_rejection(engine_name, cfg)
    except ConfigError as exc:
        return exc


def jobs(grid: Grid, points: list[Point]) -> list[SweepJob]:
    """One job per (point, check, method): properties with each method, hazards and
    metrics once."""
    model = engines.get(grid.engine)
    out = []
    for point in points:
        cfg_dict = model.config_to_dict(point.config)
        for check in grid.checks:
            if check.kind == PROPERTY:
                methods = grid.methods
            else:
                methods = (HAZARD_METHOD if check.kind == HAZARD else METRIC_METHOD,)
            for method in methods:
                out.append(SweepJob(
                    key=job_key(grid.engine, cfg_dict, check, grid.bounds, method),
                    engine=grid.engine, config=point.config, config_name=point.name(grid),
                    values=point.values, check=check, method=method, bounds=grid.bounds,
                    timeout_s=grid.timeout_s, pool_known=grid.pool_known))
    return out


def job_key(engine: str, config: dict[str, Any], check: Check,
            bounds: tuple[tuple[str, int], ...], method: str) -> str:
    """The row's key: a hash of what decides its verdict."""
    doc = {"engine": engine, "config": config, "kind": check.kind, "name": check.name,
           "params": dict(check.params), "bounds": dict(bounds), "method": method}
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def batches(todo: list[SweepJob]) -> list[tuple[SweepJob, ...]]:
    """Jobs grouped by configuration, in grid order: a batch shares the invariant proof
    and the explorer's walk (checker/methods/jobs.run_batch), and is one task."""
    groups: dict[tuple[Any, ...], list[SweepJob]] = {}
    for job in todo:
        groups.setdefault((job.engine, job.config, job.bounds), []).append(job)
    return [tuple(g) for g in groups.values()]
