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
- otherwise only the entries whose premises the config meets speak for it
  (`properties.manifest.premises`: its config's switches, the engine's dividing lines at
  its config's side, such as vLLM's long-prefill threshold against 1 + k, and for HOLDS of
  no_engine_assertion that the config turns on no assertion the model knows). When every
  one of them expects HOLDS or PROVED, HOLDS: the model claims it on configs like this one,
  so a violation departs; the reason names each premise with its upstream citation and
  what this config has of it;
- otherwise (one of them records a violation, or no entry's premises hold) no
  expectation: a violation is a known behaviour of the engine, or one the manifest says
  nothing of; reported, never a departure. The reason names the premises the nearest
  entry rests on that this config does not meet.
Only a violation can depart: an expected VIOLATED says some run violates the property,
not that this one does.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from model import registry as engines
from model.core.errors import InputError
from model.core.ops import CONCRETE
from model.core.types import SlotObs, Step, StepRecord, Workload
from properties import catalogue
from properties.catalogue import Property
from properties.manifest import Manifest, NamedConfig, Premise, load, premises

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
    expected_on: tuple[str, ...] = ()  # the manifest configs whose entries give `expected`

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
                "status": self.status, "detail": self.detail,
                "expected_on": list(self.expected_on)}


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


def _in_family(engine: str, nc: NamedConfig, mine: Mapping[str, object]) -> bool:
    """The config whose `config_to_dict` is `mine` is a member of the manifest config
    `nc`: every field equal to its base, ranged fields within their range."""
    if nc.engine != engine:
        return False
    try:
        base = _config_doc(engine, nc)
    except (AttributeError, TypeError):  # a config of another engine's type
        return False
    if set(mine) - set(base):  # a field written only when it is on (groups, a connector)
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


def _config_doc(engine: str, nc: NamedConfig) -> dict[str, object]:
    """`config_to_dict` of a manifest config (cached: every trace's expectation reads each
    entry's)."""
    try:
        return dict(_cached_doc(engine, nc))
    except TypeError:  # a config that cannot be hashed: not cached
        return engines.get(engine).config_to_dict(nc.config)


@functools.lru_cache(maxsize=4096)
def _cached_doc(engine: str, nc: NamedConfig) -> tuple[tuple[str, object], ...]:
    return tuple(engines.get(engine).config_to_dict(nc.config).items())


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the manifest expects of a property on one config (`expected`: a verdict, or
    None for no expectation), why, and the configs of the entries that say so."""

    expected: str | None
    why: str
    configs: tuple[str, ...] = ()


def expectation(engine: str, prop: Property, config: object,
                manifest: Manifest | None = None) -> tuple[str | None, str]:
    """What the manifest expects of `prop` on a trace run under `config`, and why (see
    the module doc)."""
    found = expect(engine, prop, config, manifest)
    return found.expected, found.why


def expect(engine: str, prop: Property, config: object,
           manifest: Manifest | None = None) -> Expectation:
    """`expectation` with the configs of the entries it rests on."""
    manifest = manifest if manifest is not None else load()
    entries = [e for e in manifest.entries
               if e.engine == engine and e.property == prop.name and e.params == prop.params]
    if not entries:
        return Expectation(None, f"the manifest has no entry for it on {engine}")
    try:
        doc = engines.get(engine).config_to_dict(config)
    except (AttributeError, TypeError):  # a config of another engine's type
        return Expectation(None, f"the trace's config is not a {engine} config")
    for e in entries:
        if _in_family(engine, manifest.configs[e.config], doc):
            return Expectation(e.expected, f"the manifest's entry for config {e.config}",
                               (e.config,))
    weighed = [(e, ps, [p for p in ps if not p.holds(doc)])
               for e in entries for ps in (premises(manifest, e),)]
    standing = [(e, ps) for e, ps, unmet in weighed if not unmet]
    if not standing:
        # The nearest claim of a verdict that could depart says most about this config.
        claims = [w for w in weighed if w[0].expected in _HOLDING] or weighed
        e, _, unmet = min(claims, key=lambda w: len(w[2]))
        return Expectation(None, f"no entry's premises hold here: the manifest's "
                           f"{e.expected} on {e.config} is for configs where "
                           f"{_where(unmet, doc)}")
    configs = tuple(dict.fromkeys(e.config for e, _ in standing))
    violated = tuple(dict.fromkeys(e.config for e, _ in standing
                                   if e.expected not in _HOLDING))
    if violated:
        return Expectation(None, "a known violation: the manifest records it VIOLATED on "
                           + ", ".join(violated), violated)
    held = list({p.name: p for _, ps in standing for p in ps}.values())
    return Expectation("HOLDS", f"the manifest expects it to hold on configs where "
                       f"{_where(held, doc)} (its entries for {', '.join(configs)})", configs)


def _where(chosen: Sequence[Premise], doc: Mapping[str, object]) -> str:
    """`P1 (citation) and P2 ...: this workload's config has F1 and F2`: the engine's
    premises with their citations, then the switches (a config's whole set in one clause
    when every one holds, else each unmet one with its citation)."""
    own = [p for p in chosen if not p.name.startswith("switch ")]
    switches = [p for p in chosen if p.name.startswith("switch ")]
    parts = [p.text for p in own]
    facts = [p.has(doc) for p in own]
    if switches and all(p.holds(doc) for p in switches):
        on = [p.where.removesuffix("=True") for p in switches if p.where.endswith("=True")]
        rules = [p.where for p in switches if p.name == "switch rules"]
        parts.append(f"the switches are {', '.join(on) or 'none'} on, the others off"
                     + "".join(f" and {r}" for r in rules))
        facts.append("those switches")
    elif switches:
        parts += [p.text for p in switches]
        facts += [p.has(doc) for p in switches]
    return f"{_and(parts)}: this workload's config has {_and(list(dict.fromkeys(facts)))}"


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


#: Above this many requests a trace's properties are evaluated on the requests that are
#: present around each step only (`_compact_views`): a property evaluated at step t reads
#: steps t - window + 1 .. t (and step t - 1), and a request absent from all of them (not
#: arrived, or gone) has inert observables there, so leaving its slot out changes nothing
#: (tests/test_trace_compact.py checks the verdicts against the full evaluation).
COMPACT_ABOVE = 48


def first_violation(prop: Property, steps: Sequence[object]) -> int | None:
    """The 1-based first step at which `prop` fails on the observables, else None."""
    if steps and len(getattr(steps[0], "slots", ())) > COMPACT_ABOVE:
        return first_violation_compact(prop, steps)  # type: ignore[arg-type]
    for t in range(len(steps)):
        if not prop.holds(CONCRETE, steps, t):  # type: ignore[arg-type]
            return t + 1
    return None


def first_violation_compact(prop: Property, steps: Sequence[Step]) -> int | None:
    """`first_violation` evaluated at each step on the slots present in the steps it
    reads (see COMPACT_ABOVE): linear in the steps times the requests present at once,
    not times every request of the trace."""
    reach = max(prop.window, 1) + 1  # the window, and the step before it
    present = [frozenset(i for i, o in enumerate(s.slots) if _present(o)) for s in steps]
    for t in range(len(steps)):
        lo = max(0, t - reach + 1)
        keep = sorted(set().union(*present[lo:t + 1]))
        view: list[Step | None] = [None] * lo + [
            replace(steps[u], slots=tuple(steps[u].slots[i] for i in keep))
            for u in range(lo, t + 1)]
        if not prop.holds(CONCRETE, view, t):  # type: ignore[arg-type]
            return t + 1
    return None


def _present(o: SlotObs) -> bool:
    """The slot's request takes part in the step: held, queued, scheduled, finishing or
    holding blocks (anything else is a request not arrived or already gone)."""
    return bool(o.held or o.was_running or o.was_waiting or o.scheduled or o.finished
                or o.running_after or o.waiting_after or o.blocks or o.preempted
                or o.admitted or o.resumed)


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
    return tuple(_decide(engine, prop, steps, expect(engine, prop, workload.config, manifest))
                 for prop in props)


def _decide(engine: str, prop: Property, steps: Sequence[object], found: Expectation
            ) -> TraceVerdict:
    def verdict(v: str, at: int | None = None, detail: str = "") -> TraceVerdict:
        return TraceVerdict(engine, prop.name, prop.params, v, len(steps), at, found.expected,
                            found.why, detail, found.configs)

    if prop.kind == "lasso":
        return verdict(NOT_CHECKED, detail="a request that never finishes needs an infinite "
                       "run; `batchproof check` decides it")
    try:
        at = first_violation(prop, steps)
    except (AttributeError, TypeError) as exc:  # a property of another engine's shape
        return verdict(NOT_CHECKED, detail=f"it does not apply to {engine}'s observables "
                       f"({type(exc).__name__}: {exc})")
    return verdict(HOLDS if at is None else VIOLATED, at)
