"""Where two schedulers decide differently: bounded model checking over two transition
systems fed one environment, and a proof of equivalence where one step shows it.

A *side* is an engine (a version, `mistralrs@v0.8.22`) with its configuration; the two
sides of a comparison are two versions of one engine over one configuration, or one
version and the same with a rule switch toggled (`ablate`), or two engines joined by a
config bridge (`bridge_of`: one engine's `EngineModel.extra["bridges"]` says how one
config reaches both, e.g. vLLM V0 and V1). Both sides are unrolled over the same symbolic
request slots (`pair_specs`: each prompt admissible to both, at most the smaller of the
two `longest_prompt`s) and the same EOS choices, each with its own state (`fresh_state`,
tagged a.* and b.*) and its own rules (`EngineModel.step`).

The observables compared are the decisions of the StepRecord contract: per request, the
tokens scheduled, admitted, resumed, preempted, finished (and finished by EOS)
(OBSERVABLES); per step, the free KV blocks right after scheduling (STEP_OBSERVABLES),
between two versions of one engine only: across engines the bridge names the step
observables both count alike (`compared_step_observables`; V0 and V1 count free blocks
differently). Orders inside a step (who is served first, queue positions) are not
decisions a request sees and are not compared.

The first depth at which some workload makes the sides differ gives the shortest one;
it is then minimised by checker/methods/minimize.py's order (fewest requests, then the
smallest numbers, then EOS choices false first) and replayed on both references, which
must differ at the same step and agree before it; otherwise the result is a divergence,
never a difference. Where the two rule sets compute the same step from every state (the
switch is not read in this configuration), a one-step induction on the product proves
them equivalent for every depth and request length: from identical states, the two steps
give the same observables and identical next states. The induction needs one state for
both sides, so it is tried for two versions of one engine only; two engines that agree
within the bounds are SAME, never PROVED.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

import z3

from checker.methods.bmc import gave_up
from checker.methods.explore import Kind
from checker.methods.explore import menu as explore_menu
from checker.methods.minimize import minimal_model, workload_of
from checker.methods.solver import preprocessed
from checker.methods.symbolic import (
    Bounds,
    Family,
    Unrolling,
    as_term,
    bind_state,
    family_config,
    fresh_state,
    longest_prompt,
    slot_specs,
)
from model import registry as engines
from model.core.engine import EngineModel
from model.core.errors import InputError
from model.core.ops import Bool, Ops, SymbolicOps
from model.core.types import EosEvent, SlotObs, SlotSpec, Step, StepRecord, Workload
from model.run import simulate, without_unsampled_eos

OBSERVABLES = ("scheduled", "admitted", "resumed", "preempted", "finished", "finished_stop")
STEP_OBSERVABLES = ("free_blocks",)

DIFFER, SAME, PROVED, UNKNOWN, DIVERGENCE = "differ", "same", "proved", "unknown", "divergence"


@dataclass(frozen=True, slots=True)
class Side:
    """One scheduler of a comparison: a registry name (maybe `NAME@VERSION`), the engine's
    Config, and how the output names it."""

    engine: str
    config: Any
    label: str


@dataclass(frozen=True, slots=True)
class Difference:
    """One observable of one step that the two sides decide differently."""

    step: int
    request: str  # "" for a step observable
    observable: str
    a: object
    b: object

    def line(self, a: str = "A", b: str = "B") -> str:
        """One line: `step 3 r1 preempted: A yes, B no`."""
        who = f" {self.request}" if self.request else ""
        return (f"step {self.step}{who} {self.observable}: {a} {_shown(self.a)}, "
                f"{b} {_shown(self.b)}")


@dataclass(frozen=True, slots=True)
class DiffResult:
    """The outcome of one comparison.

    `status`: DIFFER (a minimal workload, replayed on both references), SAME (no
    difference up to `depth`), PROVED (equivalent for every depth), UNKNOWN (solver or
    time limit) or DIVERGENCE (the references do not confirm the rules' difference).
    `workload` is the common workload (side A's engine and config, the EOS choices of
    either side); `runs` each side's own workload (its engine, config, and the EOS choices
    where it samples) and reference records. `method` says which search answered."""

    status: str
    depth: int
    seconds: float
    workload: Workload | None = None
    runs: tuple[tuple[Workload, tuple[StepRecord, ...]], ...] = ()
    differences: tuple[Difference, ...] = ()
    reason: str = ""
    minimal: bool = True
    # "bmc", "explore" (checker/methods/diff_explore.py), "array" (the array explorer over
    # the product of the rules, checker/methods/array/product.py), "both" or "config"
    method: str = "bmc"
    states: int = 0  # pair states an explicit search visited (0 for BMC)


class ConfigBridge(Protocol):
    """How one configuration reaches two engines (an engine's `extra["bridges"]`, keyed
    by the other engine's name; e.g. model/vllm_v0/v1_bridge.py)."""

    @property
    def engines(self) -> tuple[str, str]:
        """The two engines' registry names."""

    @property
    def into(self) -> Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]]:
        """Target engine name -> its config dict made from the other engine's config dict
        (InputError for a field the target would silently drop)."""

    @property
    def shared(self) -> tuple[str, ...]:
        """The config fields both engines take alike."""

    @property
    def step_observables(self) -> tuple[str, ...]:
        """The STEP_OBSERVABLES both engines count alike."""

    @property
    def not_compared(self) -> str:
        """One line: why the other step observables are not compared."""


def one_rule_system(a: str, b: str) -> bool:
    """The two registry names are versions of one engine (one room, one state shape)."""
    return engines.get(a).folder == engines.get(b).folder


def bridge_of(a: str, b: str) -> ConfigBridge | None:
    """The bridge that joins two different engines, declared by either, or None."""
    for own, other in ((a, b), (b, a)):
        found = (engines.get(own).extra or {}).get("bridges")
        if isinstance(found, Mapping) and engines.base_name(other) in found:
            return cast(ConfigBridge, found[engines.base_name(other)])
    return None


def bridged_pairs() -> list[str]:
    """Every pair of engines a bridge joins, as `A and B`."""
    out = []
    for name in engines.names():
        for other in (engines.get(name).extra or {}).get("bridges") or {}:
            out.append(f"{name} and {other}")
    return out


def engines_joinable(a: str, b: str) -> str:
    """Why two registry names cannot be compared at all, or ''."""
    if one_rule_system(a, b) or bridge_of(a, b) is not None:
        return ""
    pairs = bridged_pairs()
    return (f"{a} and {b} are different engines and no config bridge joins them; diff "
            "compares versions of one engine (or one version with a rule switched)"
            + (f", or bridged engines ({'; '.join(pairs)})" if pairs else ""))


def compared_step_observables(a: Side, b: Side) -> tuple[str, ...]:
    """The step observables compared: all of STEP_OBSERVABLES for one engine, the ones
    the bridge says both count alike across engines."""
    if one_rule_system(a.engine, b.engine):
        return STEP_OBSERVABLES
    bridge = bridge_of(a.engine, b.engine)
    return tuple(bridge.step_observables) if bridge is not None else ()


def sides_compatible(a: Side, b: Side) -> str:
    """Why two sides cannot be compared on one environment, or ''."""
    why = engines_joinable(a.engine, b.engine)
    if why:
        return why
    ea, eb = engines.get(a.engine), engines.get(b.engine)
    ca, cb = ea.rule_config(a.config), eb.rule_config(b.config)
    for name in ("max_model_len", "policy_priority"):
        if getattr(ca, name) != getattr(cb, name):
            return (f"{a.label} and {b.label} admit different requests ({name} "
                    f"{getattr(ca, name)} vs {getattr(cb, name)}); give them one config")
    return ""


def differs(ops: Ops, a: Step, b: Step, step_observables: Sequence[str] = STEP_OBSERVABLES
            ) -> Bool:
    """The two sides' observables of one step differ (over ints or z3 terms)."""
    terms: list[Bool] = []
    for x, y in zip(a.slots, b.slots, strict=True):
        for name in OBSERVABLES:
            terms.append(ops.not_(_eq(ops, getattr(x, name), getattr(y, name))))
    for name in step_observables:
        terms.append(ops.not_(_eq(ops, getattr(a, name), getattr(b, name))))
    return ops.or_(*terms)


def _eq(ops: Ops, x: object, y: object) -> Bool:
    if isinstance(ops, SymbolicOps):
        return as_term(x) == as_term(y)
    return x == y


def differences(a: Step, b: Step, ids: Sequence[str],
                step_observables: Sequence[str] = STEP_OBSERVABLES
                ) -> tuple[Difference, ...]:
    """Every observable that differs between two concrete Steps (slot i = ids[i])."""
    out: list[Difference] = []
    for i, (x, y) in enumerate(zip(a.slots, b.slots, strict=True)):
        if i >= len(ids):
            continue
        for name in OBSERVABLES:
            if getattr(x, name) != getattr(y, name):
                out.append(Difference(a.step, ids[i], name, _value(x, name),
                                      _value(y, name)))
    for name in step_observables:
        if getattr(a, name) != getattr(b, name):
            out.append(Difference(a.step, "", name, getattr(a, name), getattr(b, name)))
    return tuple(out)


def _value(o: SlotObs, name: str) -> object:
    value = getattr(o, name)
    return bool(value) if name != "scheduled" else int(value)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


# ---- the product of the two transition systems -------------------------------------------

@dataclass(slots=True)
class _Pair:
    """Both sides unrolled over one environment; `joint` carries every constraint and side
    A's steps (what minimize.py reads: the specs, the EOS choices, the constraints)."""

    a: EngineModel
    b: EngineModel
    cfg_a: Any
    cfg_b: Any
    joint: Unrolling
    states_b: list[Any] = field(default_factory=list)
    steps_b: list[Step] = field(default_factory=list)
    step_observables: tuple[str, ...] = STEP_OBSERVABLES
    one_system: bool = True  # one engine's versions: one state shape, states may merge


def pair_specs(slots: int, cfg_a: Any, cfg_b: Any, bounds: Bounds | None = None
               ) -> tuple[tuple[SlotSpec, ...], list[Bool]]:
    """The request slots both sides are fed: side A's slot_specs, each prompt also at
    most side B's longest_prompt (the environment must be admissible to both)."""
    specs, cons = slot_specs(slots, cfg_a, bounds)
    cons += [z3.Implies(s.arrival_step > 0, s.prompt_len <= longest_prompt(cfg_b))
             for s in specs]
    return specs, cons


def pair_menu(bounds: Bounds, a: Side, b: Side | None = None) -> tuple[Kind, ...]:
    """The request kinds both sides are fed: side A's menu (explore.menu, BMC's slot
    constraints), cut to the prompts side B admits too (diff.pair_specs)."""
    kinds = explore_menu(bounds, engines.get(a.engine).rule_config(a.config))
    if b is None:
        return kinds
    longest = longest_prompt(engines.get(b.engine).rule_config(b.config))
    return tuple(k for k in kinds if k.prompt_len <= longest)


def _pair(a: Side, b: Side, bounds: Bounds) -> _Pair:
    ea, eb = engines.get(a.engine), engines.get(b.engine)
    cfg_a, _, cons_a = family_config(Family(base=a.config, engine=a.engine))
    cfg_b, _, cons_b = family_config(Family(base=b.config, engine=b.engine))
    specs, spec_cons = pair_specs(bounds.slots, cfg_a, cfg_b, bounds)
    joint = Unrolling(engine=ea, cfg=cfg_a, cfg_vars={}, specs=specs,
                      states=[ea.initial_state(bounds.slots, cfg_a)],
                      constraints=cons_a + cons_b + spec_cons, eos_allowed=not bounds.no_eos)
    return _Pair(ea, eb, cfg_a, cfg_b, joint, states_b=[eb.initial_state(bounds.slots, cfg_b)],
                 step_observables=compared_step_observables(a, b),
                 one_system=one_rule_system(a.engine, b.engine))


def _extend(p: _Pair) -> list[Bool]:
    """One more step of both sides, on one fresh vector of EOS choices."""
    u = p.joint
    t = len(u.steps)
    eos = tuple(z3.Bool(f"eos{t + 1}.{i}") for i in range(len(u.specs)))
    ops = SymbolicOps()
    next_a, obs_a = p.a.step(ops, p.cfg_a, u.specs, u.states[-1], eos)
    next_b, obs_b = p.b.step(ops, p.cfg_b, u.specs, p.states_b[-1], eos)
    fresh_a = fresh_state(f"a.s{t + 1}", u.states[0], t + 1)
    fresh_b = fresh_state(f"b.s{t + 1}", p.states_b[0], t + 1)
    cons = ops.take_definitions() + bind_state(fresh_a, next_a) + bind_state(fresh_b, next_b)
    if not u.eos_allowed:  # Bounds.no_eos, as symbolic.extend (the explicit search too)
        cons += [z3.Not(e) for e in eos]
    u.eos.append(eos)
    u.states.append(fresh_a)
    u.steps.append(obs_a)
    p.states_b.append(fresh_b)
    p.steps_b.append(obs_b)
    u.constraints += cons
    return cons


def _eos_of(model: z3.ModelRef, p: _Pair, steps: Sequence[Step]) -> tuple[EosEvent, ...]:
    """The EOS choices of the model where the side whose `steps` these are samples."""
    out = []
    for t, (choices, observed) in enumerate(zip(p.joint.eos, steps, strict=False)):
        for i, (e, obs) in enumerate(zip(choices, observed.slots, strict=True)):
            if z3.is_true(model.eval(z3.And(e, as_term(obs.sampled)), model_completion=True)):
                out.append(EosEvent(id=f"r{i}", step=t + 1))
    return tuple(out)


def unread_switch(a: Side, b: Side) -> DiffResult | None:
    """PROVED at once when the two sides are one engine whose rules read the same
    configuration (a switch the config does not read), else None."""
    start = time.monotonic()
    if a.engine == b.engine and (engines.get(a.engine).rule_config(a.config)
                                 == engines.get(b.engine).rule_config(b.config)):
        return DiffResult(PROVED, 0, time.monotonic() - start,
                          reason="the rules read the same configuration: what differs is "
                          "not read under this config, so every run is the same")
    return None


def compare(a: Side, b: Side, bounds: Bounds, timeout_s: float, prove: bool = True
            ) -> DiffResult:
    """The shortest (then least) workload on which the sides' observables differ, within
    `bounds`, replayed on both references; or SAME up to the depth, PROVED when the
    one-step product induction shows equivalence (tried first when `prove`), UNKNOWN."""
    start = time.monotonic()
    unread = unread_switch(a, b)
    if unread is not None:
        return unread
    if _other_choices(a, b):
        return DiffResult(UNKNOWN, 0, time.monotonic() - start, reason=NO_SPEC_CHOICES)
    if prove:
        proof = prove_equivalent(a, b, bounds.slots, timeout_s)
        if proof is True:
            return DiffResult(PROVED, 0, time.monotonic() - start,
                              reason=f"one-step induction on the product, {bounds.slots} "
                              "slots, every depth and request length")
    p = _pair(a, b, bounds)
    solver = preprocessed()
    solver.add(*p.joint.constraints)
    for d in range(1, bounds.depth + 1):
        solver.add(*_extend(p))
        remaining = timeout_s - (time.monotonic() - start)
        if remaining <= 0:
            return DiffResult(UNKNOWN, d - 1, time.monotonic() - start,
                              reason=gave_up(None, timeout_s, d, "difference"))
        solver.set(timeout=max(1, int(remaining * 1000)))
        # Every workload agreed on steps 1..d-1 (no shallower depth differed), so a model
        # here differs first at step d.
        differ = differs(SymbolicOps(), p.joint.steps[-1], p.steps_b[-1], p.step_observables)
        result = solver.check(differ)
        if result == z3.unknown:
            return DiffResult(UNKNOWN, d, time.monotonic() - start,
                              reason=gave_up(solver.reason_unknown(), timeout_s, d,
                                              "difference"))
        if result == z3.sat:
            first = solver.model()
            remaining = timeout_s - (time.monotonic() - start)
            model = minimal_model(p.joint, differ, max(1, int(remaining * 1000)))
            minimal = model is not None
            return _replayed(a, b, p, model if model is not None else first, d, start,
                             minimal)
        # No workload differs at step d: a fact, which the deeper queries may use.
        solver.add(z3.Not(_as_bool(differ)))
        if p.one_system:  # two engines' states have different shapes: never merged
            _merge_states(p, solver)
    return DiffResult(SAME, bounds.depth, time.monotonic() - start)


def _merge_states(p: _Pair, solver: z3.Solver) -> None:
    """When no workload gives the two sides different states after the last step, side B
    goes on from side A's state variables: the two rule sets then compute the same terms
    wherever the switch is not read, and the solver sees them equal by congruence instead
    of searching (the states stay apart when some workload tells them apart)."""
    same = z3.And(*bind_state(p.joint.states[-1], p.states_b[-1]))
    if solver.check(z3.Not(same)) == z3.unsat:
        solver.add(same)
        p.states_b[-1] = p.joint.states[-1]


def _replayed(a: Side, b: Side, p: _Pair, model: z3.ModelRef, d: int, start: float,
              minimal: bool) -> DiffResult:
    """The model's workload on both references: they must agree on steps 1..d-1 and differ
    at step d, else DIVERGENCE."""
    base = workload_of(p.joint, model, a.config, d)
    eos_a, eos_b = _eos_of(model, p, p.joint.steps), _eos_of(model, p, p.steps_b)
    common = replace(base, eos=tuple(sorted(set(eos_a) | set(eos_b),
                                            key=lambda e: (e.step, e.id))))
    wa = replace(base, eos=eos_a)
    wb = replace(base, config=b.config, engine=b.engine, eos=eos_b)
    ids = [r.id for r in wa.arrival_order()]

    def result(status: str, runs: tuple[tuple[Workload, tuple[StepRecord, ...]], ...] = (),
               found: tuple[Difference, ...] = (), reason: str = "") -> DiffResult:
        return DiffResult(status, d, time.monotonic() - start, common, runs, found,
                          reason=reason, minimal=minimal)

    return on_references((engines.get(a.engine), wa), (engines.get(b.engine), wb), d,
                         _rules_differences(p, model, d, ids), p.step_observables, result)


def on_references(a: tuple[EngineModel, Workload], b: tuple[EngineModel, Workload],
                  depth: int, predicted: tuple[Difference, ...],
                  step_observables: Sequence[str], result: Callable[..., DiffResult],
                  void: str = "") -> DiffResult:
    """A difference the rules found first at step `depth` (`predicted`: what differs
    there), judged by running each side's workload on its engine's reference scheduler
    (model/run.py): DIFFER when the references agree on steps 1..depth-1 and differ at
    `depth` in exactly `predicted`; UNKNOWN where a reference asserts; else DIVERGENCE,
    never a finding. `void`, when not empty, is why the rules' own prediction does not
    stand (a DIVERGENCE once the references have run). Every answer is built by
    `result(status, runs, found, reason)`, which adds the caller's depth, time and method."""
    (engine_a, wa), (engine_b, wb) = a, b
    try:
        ra, rb = simulate(wa), simulate(wb)
    except AssertionError as e:  # a reference's own consistency check
        return result(UNKNOWN, reason=f"a reference asserts at {assertion_site(e)} replaying "
                      "the rules' difference: the rules so switched reach a path the "
                      "reference does not model")
    except InputError as e:  # an EOS where the reference samples nothing
        return result(DIVERGENCE, reason=f"a reference refuses the rules' workload: {e}")
    runs = ((wa, ra), (wb, rb))
    ids = [r.id for r in wa.arrival_order()]
    found = [differences(x, y, ids, step_observables)
             for x, y in zip(engine_a.observe(wa, ra), engine_b.observe(wb, rb), strict=True)]
    first = next((t for t, f in enumerate(found) if f), None)
    if void:
        return result(DIVERGENCE, runs, reason=void)
    if first != depth - 1:
        where = "agree on every step" if first is None else f"differ first at step {first + 1}"
        return result(DIVERGENCE, runs, reason=f"the rules differ first at step {depth} but "
                      f"the references {where}; the rules and a reference disagree")
    # The rules must predict what the references do at step depth, observable by observable.
    if predicted != found[depth - 1]:
        return result(DIVERGENCE, runs, found[depth - 1],
                      reason=f"at step {depth} the rules differ in {_names(predicted)}, "
                      f"the references in {_names(found[depth - 1])}")
    return result(DIFFER, runs, found[depth - 1])


def assertion_site(e: AssertionError) -> str:
    """Where a reference asserted: `file.py:line (the line's code)`, its innermost frame."""
    frame = traceback.extract_tb(e.__traceback__)[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} ({frame.line})"


def _rules_differences(p: _Pair, model: z3.ModelRef, d: int, ids: Sequence[str]
                       ) -> tuple[Difference, ...]:
    def val(x: object) -> object:
        if isinstance(x, z3.ExprRef):
            v = model.eval(x, model_completion=True)
            return z3.is_true(v) if z3.is_bool(v) else v.as_long()
        return x

    def concrete(s: Step) -> Step:
        slots = tuple(replace(o, **{n: val(getattr(o, n)) for n in OBSERVABLES})
                      for o in s.slots)
        return replace(s, slots=slots, **{n: val(getattr(s, n)) for n in STEP_OBSERVABLES})

    return differences(concrete(p.joint.steps[d - 1]), concrete(p.steps_b[d - 1]), ids,
                       p.step_observables)


def _names(found: Sequence[Difference]) -> str:
    return ", ".join(f"{f.request} {f.observable}".strip() for f in found) or "nothing"


# The symbolic product feeds both sides EOS choices only: a rule config with speculative
# decoding also has drafts accepted and proposed, which it would fix at their defaults.
NO_SPEC_CHOICES = ("BMC's difference search gives both sides EOS choices only, not "
                   "speculative decoding's drafts accepted and proposed; --method explore "
                   "searches those")


def _other_choices(a: Side, b: Side) -> bool:
    """Either side's rules take environment choices besides EOS (speculative decoding)."""
    return any(getattr(engines.get(s.engine).rule_config(s.config), "num_spec_tokens", 0)
               for s in (a, b))


def prove_equivalent(a: Side, b: Side, slots: int, timeout_s: float) -> bool | None:
    """True when the two rule sets agree from every state: the initial states are equal,
    and from any one state, any requests (unbounded lengths) and EOS choices, both steps
    give the same observables and equal next states (a one-step induction on the
    product). False when some state tells them apart (they may still agree on every
    reachable one), None on a solver limit, where the product lacks the sides' other
    environment choices (NO_SPEC_CHOICES), or for two engines: their states have different
    shapes, so "one state" and "equal next states" mean nothing without a state
    correspondence, which no engine pair declares."""
    if _other_choices(a, b) or not one_rule_system(a.engine, b.engine):
        return None
    ea, eb = engines.get(a.engine), engines.get(b.engine)
    cfg_a = ea.rule_config(a.config)
    cfg_b = eb.rule_config(b.config)
    init_a, init_b = ea.initial_state(slots, cfg_a), eb.initial_state(slots, cfg_b)
    specs, spec_cons = pair_specs(slots, cfg_a, cfg_b)
    t = z3.Int("t")
    state = fresh_state("s", init_a, t)
    eos = tuple(z3.Bool(f"eos.{i}") for i in range(slots))
    ops = SymbolicOps()
    next_a, obs_a = ea.step(ops, cfg_a, specs, state, eos)
    next_b, obs_b = eb.step(ops, cfg_b, specs, state, eos)
    apart = z3.Or(_as_bool(differs(ops, obs_a, obs_b)),
                  z3.Not(z3.And(*bind_state(next_a, next_b))))
    solver = preprocessed()
    solver.set(timeout=max(1, int(timeout_s * 1000)))
    solver.add(*ops.take_definitions(), *spec_cons, t >= 0)
    base = z3.simplify(z3.And(*bind_state(init_a, init_b)))
    if not z3.is_true(base):
        return False
    result = solver.check(apart)
    if result == z3.unknown:
        return None
    return result == z3.unsat


def _as_bool(b: Bool) -> z3.BoolRef:
    return z3.BoolVal(b) if isinstance(b, bool) else b


def concrete_differences(a: Side, b: Side, workload: Workload
                         ) -> tuple[tuple[Difference, ...], ...]:
    """Per step, what the two references decide differently on one workload (each side
    drops the EOS choices where it samples nothing): a check of a stored answer."""
    out = []
    wa = replace(workload, engine=a.engine, config=a.config)
    wb = replace(workload, engine=b.engine, config=b.config)
    wa, wb = without_unsampled_eos(wa), without_unsampled_eos(wb)
    sa = engines.get(a.engine).observe(wa, simulate(wa))
    sb = engines.get(b.engine).observe(wb, simulate(wb))
    ids = [r.id for r in wa.arrival_order()]
    observables = compared_step_observables(a, b)
    for x, y in zip(sa, sb, strict=True):
        out.append(differences(x, y, ids, observables))
    return tuple(out)


__all__ = ["DIFFER", "DIVERGENCE", "OBSERVABLES", "PROVED", "SAME",
           "STEP_OBSERVABLES", "UNKNOWN", "ConfigBridge", "DiffResult", "Difference", "Side",
           "assertion_site", "bridge_of", "bridged_pairs", "compare",
           "compared_step_observables", "concrete_differences", "differences", "differs",
           "engines_joinable", "on_references", "one_rule_system", "pair_specs",
           "prove_equivalent", "sides_compatible", "unread_switch"]
