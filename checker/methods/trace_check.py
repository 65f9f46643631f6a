"""Catalogue properties decided on one given trace: the StepRecords of a run and the
workload it ran, whatever produced them (a real engine, a log converter, `simulate
--json`). Nothing is re-run: the engine's `observe` turns the records into Step
observables and each property is evaluated on them under ConcreteOps, step by step.

A step or window property is HOLDS over the trace's steps or VIOLATED at its first
failing step; a lasso property (a request never finishes on an infinite run) cannot be
decided on a finite trace and is NOT_CHECKED (`batchproof check` decides it).

What the manifest expects of a property on the trace's config (`expectation`):
- the config is one of a manifest entry's configs (a family's member counts): that entry's
  verdict;
- otherwise, when every entry of the property for this engine expects HOLDS or PROVED,
  HOLDS: the model claims it wherever it was checked, so a violation departs;
- otherwise (the manifest records a violation of it somewhere) no expectation: a violation
  is a known behaviour of the engine, reported, never a departure.
Only a violation can depart: an expected VIOLATED says some run violates the property,
not that this one does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model import registry as engines
from model.core.errors import InputError
from model.core.ops import CONCRETE
from model.core.types import StepRecord, Workload
from properties import catalogue
from properties.catalogue import Property
from properties.manifest import Manifest, NamedConfig, load

HOLDS, VIOLATED, NOT_CHECKED = "HOLDS", "VIOLATED", "NOT_CHECKED"
AS_EXPECTED, DEPARTS = "as_expected", "departs"
_HOLDING = ("HOLDS", "PROVED")


class TraceMismatch(InputError):
    """The records do not fit the workload (they name a request it lacks, ...)."""


@dataclass(frozen=True, slots=True)
class TraceVerdict:
    """One property decided on one trace.

    `violated_at` is the 1-based first failing step; `expected` and `why` are the
    manifest's expectation for the trace's config (`expectation`)."""

    engine: str
    property: str
    params: tuple[tuple[str, int], ...]
    verdict: str  # HOLDS | VIOLATED | NOT_CHECKED
    steps: int
    violated_at: int | None = None
    expected: str | None = None
    why: str = ""
    detail: str = ""

    @property
    def name(self) -> str:
        """`starvation k=3`: the property with its parameters."""
        return " ".join([self.property, *(f"{k}={v}" for k, v in self.params)])

    @property
    def label(self) -> str:
        """HOLDS(steps) / VIOLATED at step t / NOT CHECKED, as the table prints it."""
        if self.verdict == HOLDS:
            return f"HOLDS({self.steps})"
        if self.verdict == VIOLATED:
            return f"VIOLATED at step {self.violated_at}"
        return "NOT CHECKED"

    @property
    def status(self) -> str:
        """`departs` for a violation of a property the manifest expects to hold,
        `not_checked` for a lasso, else `as_expected`."""
        if self.verdict == NOT_CHECKED:
            return NOT_CHECKED.lower()
        if self.verdict == VIOLATED and self.expected in _HOLDING:
            return DEPARTS
        return AS_EXPECTED

    def to_json(self) -> dict[str, object]:
        """The `check-trace --json` object of this verdict."""
        return {"engine": self.engine, "property": self.property, "params": dict(self.params),
                "verdict": self.verdict, "label": self.label, "steps": self.steps,
                "violated_at": self.violated_at, "expected": self.expected, "why": self.why,
                "status": self.status, "detail": self.detail}


def properties_for(engine: str, names: Sequence[str] = (),
                   manifest: Manifest | None = None) -> tuple[Property, ...]:
    """The properties to check on a trace of `engine`: every parameterisation the
    engine's manifest entries name (in manifest order), or only those of `names`. A
    named catalogue property the manifest never names for the engine is taken with
    `catalogue.example`'s parameters. InputError for a name not in the catalogue."""
    manifest = manifest if manifest is not None else load()
    known = set(catalogue.names())
    for name in names:
        if name not in known:
            raise InputError(f"unknown property {name!r}; known: {', '.join(sorted(known))}")
    listed = dict.fromkeys((e.property, e.params) for e in manifest.entries
                           if e.engine == engine)
    chosen = [(p, params) for p, params in listed if not names or p in names]
    chosen += [(name, None) for name in dict.fromkeys(names)
               if not any(p == name for p, _ in chosen)]
    return tuple(catalogue.example(name) if params is None
                 else catalogue.get(name, **dict(params)) for name, params in chosen)


def _in_family(engine: str, nc: NamedConfig, config: object) -> bool:
    """`config` is a member of the manifest config `nc`: every field equal to its base,
    ranged fields within their range."""
    if nc.engine != engine:
        return False
    to_dict = engines.get(engine).config_to_dict
    try:
        mine, base = to_dict(config), to_dict(nc.config)
    except (AttributeError, TypeError):  # a config of another engine's type
        return False
    ranged = {name: (lo, hi) for name, lo, hi in nc.ranges}
    for name, value in base.items():
        got = mine.get(name)
        if name in ranged:
            lo, hi = ranged[name]
            if not (isinstance(got, int) and lo <= got <= hi):
                return False
        elif got != value:
            return False
    return True


def expectation(engine: str, prop: Property, config: object,
                manifest: Manifest | None = None) -> tuple[str | None, str]:
    """What the manifest expects of `prop` on a trace run under `config`, and why (see
    the module doc)."""
    manifest = manifest if manifest is not None else load()
    entries = [e for e in manifest.entries
               if e.engine == engine and e.property == prop.name and e.params == prop.params]
    for e in entries:
        if _in_family(engine, manifest.configs[e.config], config):
            return e.expected, f"the manifest's entry for config {e.config}"
    if not entries:
        return None, f"the manifest has no entry for it on {engine}"
    # A claim generalises only to the scheduler it was checked on: configs with the same
    # switches (every on/off field and the rule switches), e.g. never from synchronous
    # configs to an AsyncScheduler trace, whose outputs are known a step late.
    kind = _switches(engine, config)
    entries = [e for e in entries if _switches(engine, manifest.configs[e.config].config) == kind]
    if not entries:
        return None, (f"the manifest has no entry for it on a config with this trace's "
                      f"switches ({', '.join(f'{k}={v}' for k, v in kind) or 'none'})")
    violated = [e.config for e in entries if e.expected not in _HOLDING]
    if not violated:
        configs = ", ".join(dict.fromkeys(e.config for e in entries))
        return "HOLDS", f"the manifest expects it to hold on every config it lists ({configs})"
    return None, ("a known violation: the manifest records it VIOLATED on "
                  + ", ".join(dict.fromkeys(violated)))


def _switches(engine: str, config: object) -> tuple[tuple[str, object], ...]:
    """The on/off fields and the rule switches of a config, by name."""
    try:
        doc = engines.get(engine).config_to_dict(config)
    except (AttributeError, TypeError):
        return ()
    return tuple(sorted((k, v) for k, v in doc.items() if isinstance(v, bool) or k == "rules"))


def first_violation(prop: Property, steps: Sequence[object]) -> int | None:
    """The 1-based first step at which `prop` fails on the observables, else None."""
    for t in range(len(steps)):
        if not prop.holds(CONCRETE, steps, t):  # type: ignore[arg-type]
            return t + 1
    return None


def observe(engine: str, workload: Workload, records: Sequence[StepRecord]) -> tuple:
    """The engine's Step observables of the records; TraceMismatch when they do not fit
    the workload (they name a request it lacks, or the engine's `observe` fails)."""
    known = {r.id for r in workload.requests}
    for record in records:
        named = (*(r for r, _ in record.scheduled), *(r for r, _ in record.num_computed_tokens),
                 *record.admitted, *record.resumed, *record.preempted, *record.running,
                 *record.waiting, *(r for r, _ in record.finished))
        stranger = next((r for r in named if r not in known), None)
        if stranger is not None:
            raise TraceMismatch(f"step {record.step} names request {stranger!r}, which the "
                                "workload does not have; give the workload the trace ran")
    try:
        return engines.get(engine).observe(workload, records)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise TraceMismatch(f"the trace does not fit its workload ({type(exc).__name__}: "
                            f"{exc}); give the workload the trace ran") from None


def check_trace(engine: str, workload: Workload, records: Sequence[StepRecord],
                props: Sequence[Property] | None = None,
                manifest: Manifest | None = None) -> tuple[TraceVerdict, ...]:
    """Every property of `props` (default `properties_for(engine)`) decided on the
    records of `workload`, each with the manifest's expectation for its config."""
    manifest = manifest if manifest is not None else load()
    props = props if props is not None else properties_for(engine, manifest=manifest)
    steps = observe(engine, workload, records)
    return tuple(_decide(engine, prop, steps, *expectation(engine, prop, workload.config,
                                                           manifest))
                 for prop in props)


def _decide(engine: str, prop: Property, steps: Sequence[object], expected: str | None,
            why: str) -> TraceVerdict:
    def verdict(v: str, at: int | None = None, detail: str = "") -> TraceVerdict:
        return TraceVerdict(engine, prop.name, prop.params, v, len(steps), at, expected, why,
                            detail)

    if prop.kind == "lasso":
        return verdict(NOT_CHECKED, detail="a request that never finishes needs an infinite "
                       "run; `batchproof check` decides it")
    try:
        at = first_violation(prop, steps)
    except (AttributeError, TypeError) as exc:  # a property of another engine's shape
        return verdict(NOT_CHECKED, detail=f"it does not apply to {engine}'s observables "
                       f"({type(exc).__name__}: {exc})")
    return verdict(HOLDS if at is None else VIOLATED, at)
