"""Where two schedulers decide differently, by the array explorer over the product of
their rules: `batchproof diff`'s third search, beside BMC (checker/methods/diff.py) and
the product of the reference schedulers (checker/methods/diff_explore.py).

The product is an engine of its own for the array explorer (checker/methods/array/): its
state is both sides' rule states side by side, request slot by request slot (slot i holds
side A's slot i and side B's slot i, `PairSlot`; each side's other leaves apart), and its
step runs side A's rules and side B's rules on ONE environment: the same request slots
(the menu of kinds `diff.pair_menu`: side A's, cut to the prompts side B admits,
as diff.pair_specs cuts BMC's slots) and the same EOS vector. A slot may sample EOS where
either side samples a token; each side's rules read it only where that side samples
(model/vllm/rules.py `step`: `eos[i]` matters only if slot i samples), which is what BMC's
shared EOS vector and diff_explore's per-side EOS sets give each side.

What the product observes of a step is how the two sides' compared observables differ
(`diff.OBSERVABLES` per request, the step observables `diff.compared_step_observables`
names): a difference of ints (tokens scheduled, free blocks), a disagreement of flags, so
that the value of each side flows into it (the explorer keeps a leaf raw when its value
reaches an observable read); and `sampled`, either side sampling. The property searched is
"no step differs" (`agrees`): the array explorer's least search stops at the first layer
in which some step differs and returns the least such run in checker/methods/minimize.py's
order, the least differing workload at the least depth, which is exactly what
diff_explore's pair search returns.

Every reduction is the explorer's own (analysis.py): equal behaviour keys are
`same_behaviour` of both halves, proved by z3 of the product; a slot swap renames both
halves of the slot at once (the joint symmetry of diff_explore's tagged keys) and a slot
retires when both halves retire (both sides' FINISHED). These two are read off each
side's own proofs (`PairRules.parts`, analysis._joint_facts): each half steps by its own
rules from its own half, and the product's observables are slot by slot functions of the
halves' same observables, so a swap commutes with the product's step where it commutes
with both sides' (the sides' proofs are often stored already, by `check`; the product's
own z3 proof of the same facts takes seconds more, and tests/test_diff_array.py checks
that it agrees).

The answer is replayed as diff_explore's is: the workload is run on both reference
schedulers (model/run.py), each given the EOS choices where its rules sample; they must
agree before the depth and differ at it in exactly what the rules differ in, else the
answer is DIVERGENCE, never a finding.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from checker.methods.array import options_for, unsupported, workload_of
from checker.methods.array.search import Options, Search, Witness
from checker.methods.diff import (
    OBSERVABLES,
    SAME,
    UNKNOWN,
    Difference,
    DiffResult,
    Side,
    compared_step_observables,
    differences,
    on_references,
    pair_menu,
)
from checker.methods.explore import Kind
from checker.methods.symbolic import Bounds, Family
from model import registry as engines
from model.core.engine import EngineModel
from model.core.ops import CONCRETE, Bool, Ops
from model.core.slots import lay_out
from model.core.types import EosEvent, SlotObs, SlotSpec, Step, StepRecord, Workload
from properties.catalogue import Property

METHOD = "array"
# Observables that are counts (their difference is a subtraction); the others are flags.
_COUNTS = frozenset({"scheduled", "free_blocks"})
_SLOT_FIELDS = tuple(f.name for f in fields(SlotObs))
_STEP_FIELDS = tuple(f.name for f in fields(Step) if f.name not in ("step", "slots", "cfg"))


@dataclass(frozen=True, slots=True)
class PairConfig:
    """The product's rule config: each side's rule config, and the step observables
    compared (a question with an equal pair is one question: it keys the stored proofs)."""

    a: Any
    b: Any
    step_observables: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PairSlot:
    """Request slot i of the product: side A's slot i and side B's slot i."""

    a: Any
    b: Any


@dataclass(frozen=True, slots=True)
class PairState:
    """Both sides' rule states: their slots paired, their other leaves (each side's state
    with no slots) apart."""

    slots: tuple[PairSlot, ...]
    a: Any
    b: Any
    step: int = 0


@dataclass(frozen=True)
class PairRules:
    """The product as the array explorer steps an engine (the EngineModel fields it
    reads: name, initial_state, step, same_behaviour)."""

    name: str
    engine_a: EngineModel
    engine_b: EngineModel

    def initial_state(self, slots: int, cfg: PairConfig) -> PairState:
        """Both sides' initial states, paired."""
        return joined(self.engine_a.initial_state(slots, cfg.a),
                      self.engine_b.initial_state(slots, cfg.b), 0)

    def step(self, ops: Ops, cfg: PairConfig, specs: Sequence[SlotSpec], state: PairState,
             eos: Sequence[Bool]) -> tuple[PairState, Step]:
        """Both sides' steps on one environment, and how their observables differ."""
        a, b = split(state)
        next_a, obs_a = self.engine_a.step(ops, cfg.a, specs, a, eos)
        next_b, obs_b = self.engine_b.step(ops, cfg.b, specs, b, eos)
        return joined(next_a, next_b, state.step + 1), apart(ops, cfg, obs_a, obs_b)

    def parts(self, cfg: PairConfig) -> tuple[tuple[EngineModel, Any], ...]:
        """The two engines and their rule configs, in the order a slot holds them: the
        explorer's symmetry and retirement proofs of the product are theirs
        (analysis._joint_facts)."""
        return ((self.engine_a, cfg.a), (self.engine_b, cfg.b))

    @staticmethod
    def slot_fields(read: frozenset[str]) -> frozenset[str]:
        """The parts' SlotObs fields that the product's fields `read` are computed from:
        each compared observable and `sampled` from the same field of both sides (the
        product's other fields are constants)."""
        return read & frozenset((*OBSERVABLES, "sampled"))

    def same_behaviour(self, ops: Ops, x: PairState, y: PairState) -> Bool:
        """Each half behaves the same (the two sides' own `same_behaviour`)."""
        xa, xb = split(x)
        ya, yb = split(y)
        return ops.and_(self.engine_a.same_behaviour(ops, xa, ya),
                        self.engine_b.same_behaviour(ops, xb, yb))


def split(state: PairState) -> tuple[Any, Any]:
    """Each side's own rule state."""
    a = replace(state.a, slots=tuple(s.a for s in state.slots), step=state.step)
    b = replace(state.b, slots=tuple(s.b for s in state.slots), step=state.step)
    return a, b


def joined(a: Any, b: Any, step: int) -> PairState:
    """The product state of two side states of one slot count."""
    return PairState(tuple(PairSlot(x, y) for x, y in zip(a.slots, b.slots, strict=True)),
                     replace(a, slots=(), step=step), replace(b, slots=(), step=step), step)


def _differs(name: str, x: object, y: object) -> object:
    """How one observable differs: a - b for a count, a != b for a flag (0 / False when
    the sides agree)."""
    if name in _COUNTS:
        return x - y  # type: ignore[operator]
    return x != y


def apart(ops: Ops, cfg: PairConfig, a: Step, b: Step) -> Step:
    """The product's observables of one step: per slot the differences of the compared
    observables and whether either side samples; per step the differences of the compared
    step observables. Every other observable is 0 (the product observes nothing else)."""
    slots = []
    for i, (x, y) in enumerate(zip(a.slots, b.slots, strict=True)):
        values: dict[str, object] = {f: 0 for f in _SLOT_FIELDS}
        values.update({name: _differs(name, getattr(x, name), getattr(y, name))
                       for name in OBSERVABLES})
        values["sampled"] = ops.or_(x.sampled, y.sampled)
        values["arrival_time"] = i
        slots.append(SlotObs(**values))
    rest: dict[str, object] = {f: 0 for f in _STEP_FIELDS}
    rest["any_preempted"] = rest["assertion"] = False
    rest.update({name: _differs(name, getattr(a, name), getattr(b, name))
                 for name in cfg.step_observables})
    return Step(step=a.step, slots=tuple(slots), cfg=cfg, **rest)


def agrees(step_observables: Sequence[str]) -> Property:
    """The property the product search refutes: no compared observable differs in a
    step (the negation of diff.differs on the product's observables)."""
    observed = tuple(step_observables)

    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        s = steps[t]
        same: list[Bool] = []
        for o in s.slots:
            for name in OBSERVABLES:
                value = getattr(o, name)
                same.append(value == 0 if name in _COUNTS else ops.not_(value))
        for name in observed:
            value = getattr(s, name)
            same.append(value == 0 if name in _COUNTS else ops.not_(value))
        return ops.and_(*same)

    return Property("no_difference", "step", "the two sides decide every compared "
                    "observable alike in this step", holds)


# ---- which questions it answers -------------------------------------------------------------

def pair_unsupported(a: Side, b: Side, bounds: Bounds) -> str | None:
    """None when the array explorer searches this comparison exactly (each side's rules on
    arrays, in the environment of `bounds`, as `array.unsupported` says of a check), else
    why not."""
    for side in (a, b):
        why = unsupported(Family(base=side.config, engine=side.engine), bounds)
        if why is not None:
            return f"{side.label}: {why}"
        # The product is cross-checked against the reference product search without the
        # cache and the AsyncScheduler only (tests/test_diff_array.py); a check is with
        # them too (tests/test_array_modes.py).
        for name, on in (("prefix caching", getattr(side.config, "enable_prefix_caching",
                                                    False)),
                         ("the AsyncScheduler", getattr(side.config, "async_scheduling",
                                                        False))):
            if on:
                return f"{side.label}: the array product search does not model {name}"
        state = engines.get(side.engine).initial_state(
            1, engines.get(side.engine).rule_config(side.config))
        if not hasattr(state, "slots"):
            return f"{side.label}: its rule state has no request slots to pair"
    return None


# ---- the search -------------------------------------------------------------------------------

def product(a: Side, b: Side) -> tuple[PairRules, PairConfig]:
    """The product engine of two sides and its rule config."""
    ea, eb = engines.get(a.engine), engines.get(b.engine)
    cfg = PairConfig(ea.rule_config(a.config), eb.rule_config(b.config),
                     compared_step_observables(a, b))
    return PairRules(f"{ea.name}*{eb.name}", ea, eb), cfg


def compare(a: Side, b: Side, bounds: Bounds, timeout_s: float, symmetric: bool = True
            ) -> DiffResult:
    """DIFFER at the least depth with the least workload (replayed on both references),
    SAME up to the depth bound (exhaustive), or UNKNOWN (a time or state limit, or a
    comparison this search does not cover)."""

    start = time.monotonic()
    why = pair_unsupported(a, b, bounds)
    if why is not None:
        return DiffResult(UNKNOWN, 0, time.monotonic() - start,
                          reason=f"the array product search does not apply: {why}",
                          method=METHOD)
    rules, cfg = product(a, b)
    kinds = pair_menu(bounds, a, b)
    opts = replace(options_for(bounds, Options(least=True)), symmetric=symmetric)
    out = Search(rules, cfg, [agrees(cfg.step_observables)], kinds,  # type: ignore[arg-type]
                 bounds.slots, bounds.depth, opts, start + timeout_s).run()
    if 0 in out.violated:
        depth, witness = out.violated[0]
        return replayed(a, b, rules, cfg, kinds, bounds.slots, witness, depth, start,
                        out.states)
    if out.complete:
        return DiffResult(SAME, bounds.depth, time.monotonic() - start, method=METHOD,
                          states=out.states)
    return DiffResult(UNKNOWN, out.depth_reached, time.monotonic() - start,
                      reason=f"{out.reason} at depth {out.depth_reached + 1}",
                      method=METHOD, states=out.states)


# ---- the answer -------------------------------------------------------------------------------

def rules_steps(engine: EngineModel, cfg: Any, workload: Workload, slots: int
                ) -> tuple[Step, ...]:
    """One side's rules run concretely on a workload laid on `slots` request slots as every
    rules run lays one (model/core/slots.py: its requests in slots 0.. in arrival order,
    the rest unused; the EOS choices as given), step by step."""
    laid = lay_out(workload, cfg, slots)
    state = engine.initial_state(slots, cfg)
    out = []
    for eos in laid.eos:
        state, obs = engine.step(CONCRETE, cfg, laid.specs, state, eos)
        out.append(obs)
    return tuple(out)


def replayed(a: Side, b: Side, rules: PairRules, cfg: PairConfig, kinds: Sequence[Kind],
             slots: int, witness: Witness, depth: int, start: float, states: int
             ) -> DiffResult:
    """The search's differing run as a DiffResult: the common workload (every EOS choice),
    each side's (the EOS choices where its rules sample), their reference records; DIFFER
    when the references agree before `depth` and differ at it in what the rules differ
    in, else DIVERGENCE (UNKNOWN where a reference asserts)."""
    found_w = workload_of(Family(base=a.config, engine=a.engine), kinds, witness, depth)
    common = replace(found_w, eos=tuple(sorted(found_w.eos, key=lambda e: (e.step, e.id))))
    steps_a = rules_steps(rules.engine_a, cfg.a, common, slots)
    steps_b = rules_steps(rules.engine_b, cfg.b, common, slots)
    wa = replace(common, eos=_sampled_eos(common, steps_a))
    wb = replace(common, config=b.config, engine=b.engine, eos=_sampled_eos(common, steps_b))
    ids = [r.id for r in common.arrival_order()]

    def result(status: str, runs: tuple[tuple[Workload, tuple[StepRecord, ...]], ...] = (),
               found: tuple[Difference, ...] = (), reason: str = "") -> DiffResult:
        return DiffResult(status, depth, time.monotonic() - start, common, runs, found,
                          reason=reason, method=METHOD, states=states)

    by_rules = [differences(x, y, ids, cfg.step_observables)
                for x, y in zip(steps_a, steps_b, strict=True)]
    void = ""
    if any(by_rules[:-1]) or not by_rules[-1]:
        void = (f"the rules run again do not differ first at step {depth}, where the search "
                "found them differ")
    return on_references((rules.engine_a, wa), (rules.engine_b, wb), depth, by_rules[-1],
                         cfg.step_observables, result, void)


def _sampled_eos(w: Workload, steps: Sequence[Step]) -> tuple[EosEvent, ...]:
    """The workload's EOS choices at the steps where the side's rules sample the request."""
    index = {r.id: i for i, r in enumerate(w.arrival_order())}
    return tuple(e for e in w.eos if steps[e.step - 1].slots[index[e.id]].sampled)


__all__ = ["METHOD", "PairConfig", "PairRules", "PairSlot", "PairState", "agrees", "apart",
           "compare", "pair_unsupported", "product", "replayed", "rules_steps"]
