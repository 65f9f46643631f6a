"""k-induction for unbounded proofs of step properties.

The strengthening invariant is the engine's `EngineModel.well_formed` (vLLM V1's is
model/vllm/invariant.py): a description of every reachable state. It is
proved inductive first (it holds initially and every step preserves it); then a property
is PROVED when it holds on the first k-1 steps from the initial state and, from any k
consecutive well-formed steps on which it held, it holds on the next. Request lengths are
unbounded in these proofs: only the number of request slots is fixed.

Every query is given, besides the step, the valid identities `_complement_lemmas` finds
among the step's if-then-else terms (docs/bench_induction.md has the measurements).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import z3

from checker.methods import proof_cache
from checker.methods.solver import preprocessed
from checker.methods.symbolic import (
    Bounds,
    Family,
    choice_kwargs,
    family_config,
    fresh_state,
    slot_specs,
)
from model.core.engine import EngineModel
from model.core.ops import SymbolicOps
from model.core.types import SlotSpec, Step
from properties.catalogue import Property


@dataclass(frozen=True, slots=True)
class InductionResult:
    """`proved` with the k that closed the induction, or not proved (with why)."""

    proved: bool
    k: int
    seconds: float
    reason: str = ""


class _RecordingOps(SymbolicOps):
    """SymbolicOps that keep every integer if-then-else they build, for the lemmas."""

    def __init__(self) -> None:
        super().__init__()
        self.ites: list[tuple[Any, Any, Any, Any]] = []

    def ite(self, cond: Any, then: Any, other: Any) -> Any:
        """z3 If, recorded when it is an integer term on a symbolic condition."""
        term = super().ite(cond, then, other)
        if not isinstance(cond, bool) and z3.is_app_of(term, z3.Z3_OP_ITE) \
                and z3.is_int(term):
            self.ites.append((cond, then, other, term))
        return term


def _complement_lemmas(ites: list[tuple[Any, Any, Any, Any]]) -> list[z3.BoolRef]:
    """Identities If(c, a1, b1) + If(c, a2, b2) == b1 + b2 for pairs on one condition whose
    changes cancel (a1 - b1 == b2 - a2 after z3.simplify): what moves a block from a slot
    to the free pool, for instance. Each is valid (both branches give b1 + b2), so adding
    it changes no verdict; it spares the solver a case split per slot, without which
    proving a sum of n such terms conserved takes 2^n conflicts."""
    by_cond: dict[int, dict[int, list[tuple[Any, Any]]]] = {}
    lemmas: list[z3.BoolRef] = []
    alive: list[Any] = []  # an AST's id is reused once it is freed: keep the keys alive
    for cond, then, other, term in ites:
        delta = z3.simplify(z3.IntVal(0) + then - other)
        if z3.is_int_value(delta):
            continue  # a constant change has no complement worth a lemma
        opposite = z3.simplify(-delta)
        alive += [cond, delta, opposite]
        seen = by_cond.setdefault(cond.get_id(), {})
        for other2, term2 in seen.get(opposite.get_id(), ()):
            lemmas.append(term + term2 == other + other2)
        seen.setdefault(delta.get_id(), []).append((other, term))
    return lemmas


def _transition(engine: EngineModel, cfg: Any, specs: tuple[SlotSpec, ...], s: Any, tag: str,
                defs: list) -> tuple[Any, Step]:
    """One step from `s`; its definitions and lemmas are appended to `defs`. With
    speculative decoding the step ranges over every choice of drafts accepted and proposed
    (0..k per slot), as BMC's unrolling does (symbolic.extend): a step with the engine's
    default choice alone would prove facts that other choices break."""
    ops = _RecordingOps()
    eos = tuple(z3.Bool(f"{tag}.eos{i}") for i in range(len(specs)))
    k = getattr(cfg, "num_spec_tokens", 0)
    choices = choice_kwargs(cfg, specs, f"{tag}.pool")  # an abstracted pool's, as BMC's
    if k:
        spec = tuple((z3.Int(f"{tag}.acc{i}"), z3.Int(f"{tag}.drafts{i}"))
                     for i in range(len(specs)))
        defs += [c for a, d in spec for c in (a >= 0, a <= k, d >= 0, d <= k)]
        choices["spec"] = spec
    if getattr(cfg, "kv_connector", False):
        # A KV connector's hits and load reports, any in each step (a hit fixed per
        # request is one of them: the relation over-approximates, so a proof stands).
        hits = tuple((z3.Int(f"{tag}.kv_hit{i}"), z3.Bool(f"{tag}.kv_async{i}"))
                     for i in range(len(specs)))
        defs += [c for (n, _), sp in zip(hits, specs, strict=True)
                 for c in (n >= 0, n <= sp.prompt_len)]
        choices["kv"] = (hits, tuple((z3.Bool(f"{tag}.kv_report{i}"),
                                      z3.Bool(f"{tag}.kv_failed{i}"))
                                     for i in range(len(specs))))
    nxt, observed = engine.step(ops, cfg, specs, s, eos, **choices)  # type: ignore[call-arg]
    defs += ops.take_definitions()
    defs += _complement_lemmas(ops.ites)
    return nxt, observed


@dataclass(frozen=True, slots=True)
class _Relation:
    """One symbolic step from a fresh state: what every query over it asserts."""

    cfg: Any
    specs: tuple[SlotSpec, ...]
    premises: tuple[Any, ...]  # config and slot constraints, the step's definitions, lemmas
    before: Any
    after: Any
    observed: Step


@lru_cache(maxsize=8)
def _relation(family: Family, bounds: Bounds) -> _Relation:
    """The step relation, built once per process: building it is most of a proof's time
    at many slots, and every query over one family and bounds shares it."""
    engine = family.model
    cfg, _, cfg_cons = family_config(family)
    specs, spec_cons = slot_specs(bounds.slots, cfg)
    s0 = fresh_state("w0", engine.initial_state(bounds.slots, cfg), z3.Int("w0.step"))
    defs: list = []
    s1, observed = _transition(engine, cfg, specs, s0, "w0", defs)
    return _Relation(cfg, specs, (*cfg_cons, *spec_cons, *defs), s0, s1, observed)


def clear_caches() -> None:
    """Forget the cached step relations and invariant proofs (tests that change the rules
    or the invariant call this)."""
    _relation.cache_clear()
    prove_well_formed.cache_clear()
    _proved_here.clear()


def _well_formed(engine: EngineModel, cfg: Any, specs: tuple[SlotSpec, ...], s: Any,
                 defs: list) -> z3.BoolRef:
    """The engine's invariant as one z3 term (True when the engine states none)."""
    if engine.well_formed is None:
        return z3.BoolVal(True)
    ops = SymbolicOps()
    inv = engine.well_formed(ops, cfg, specs, s)
    defs += ops.take_definitions()
    return _z3(inv)


def _solver(timeout_s: float) -> z3.Solver:
    """A one-shot solver (solver.py's `preprocessed`) limited to `timeout_s`."""
    solver = preprocessed()
    solver.set(timeout=max(1, int(timeout_s * 1000)))
    return solver


def _unsat(timeout_s: float, *assertions: Any) -> tuple[bool, str]:
    """(True, "") when the assertions are unsatisfiable within the time; else (False, the
    solver's answer and, for unknown, its reason)."""
    if timeout_s <= 0:
        return False, "time limit"
    solver = _solver(timeout_s)
    solver.add(*assertions)
    r = solver.check()
    if r == z3.unsat:
        return True, ""
    return False, f"{r} ({solver.reason_unknown()})" if r == z3.unknown else str(r)


def stored_well_formed(family: Family, bounds: Bounds) -> bool:
    """Whether `well_formed` is already known proved for the family (in this process or
    in the proof store), without proving it."""
    if _proved_here.get((family, bounds)):
        return True
    stored = proof_cache.load(proof_cache.key("invariant", family, bounds))
    return stored is not None and bool(stored["proved"])


# (family, bounds) -> proved, of the proofs this process made or read (`stored_well_formed`)
_proved_here: dict[tuple[Family, Bounds], bool] = {}


@lru_cache(maxsize=32)
def prove_well_formed(family: Family, bounds: Bounds, timeout_s: float) -> InductionResult:
    """Prove `well_formed` inductive: it holds initially and every step preserves it.
    Cached per process (every step property of a family reuses the proof) and on disk
    (checker/methods/proof_cache.py: a decided result, keyed on the family, the bounds and
    the sources, so another worker or a later run reads it back instead of proving it
    again; its `seconds` are then 0)."""
    name = proof_cache.key("invariant", family, bounds)
    stored = proof_cache.load(name)
    if stored is not None:
        _proved_here[(family, bounds)] = bool(stored["proved"])
        return InductionResult(bool(stored["proved"]), int(stored["k"]), 0.0,
                               str(stored["reason"]))
    result = _prove_well_formed(family, bounds, timeout_s)
    _proved_here[(family, bounds)] = result.proved
    if result.proved or result.reason.startswith(("base case: sat", "inductive step: sat")):
        # decided: proved, or refuted with the conjuncts that break; never a time limit
        proof_cache.store(name, {"proved": result.proved, "k": result.k,
                                 "reason": result.reason})
    return result


def _prove_well_formed(family: Family, bounds: Bounds, timeout_s: float) -> InductionResult:
    start = time.monotonic()
    engine = family.model
    cfg, _, cfg_cons = family_config(family)
    if engine.invariant_covers is not None and not engine.invariant_covers(cfg):
        return InductionResult(False, 0, 0.0, "the engine's invariant does not describe "
                               "this configuration")
    specs, spec_cons = slot_specs(bounds.slots, cfg)
    initial = engine.initial_state(bounds.slots, cfg)
    defs: list = []
    ok, why = _unsat(timeout_s, *cfg_cons, *spec_cons,
                     z3.Not(_well_formed(engine, cfg, specs, initial, defs)), *defs)
    if not ok:
        return InductionResult(False, 0, time.monotonic() - start, f"base case: {why}")
    rel = _relation(family, bounds)
    defs = []
    before = _well_formed(engine, rel.cfg, rel.specs, rel.before, defs)
    facts = _after_facts(engine, rel, defs)
    broken, undecided = [], []
    # Each conjunct gets a fair share of the time left, what a quick one leaves passing to
    # the next; those still undecided then share what remains. So a hard conjunct (the free
    # count on an 8-block pool) cannot keep the others from being decided, and an undecided
    # proof names every conjunct it could not decide.
    for attempt in (0, 1):
        todo = facts if attempt == 0 else [(n, f) for n, f in facts if n in dict(undecided)]
        if attempt == 1:
            undecided = []
        for i, (name, fact) in enumerate(todo):
            left = timeout_s - (time.monotonic() - start)
            share = left if attempt == 1 else left / (len(todo) - i)
            ok, why = _unsat(share, *rel.premises, *defs, before, z3.Not(fact))
            if ok:
                continue
            if why == "sat":
                broken.append(name)
            else:
                undecided.append((name, why))
        if not undecided or broken or timeout_s - (time.monotonic() - start) <= 0:
            break
    seconds = time.monotonic() - start
    if broken:
        also = "".join(f"; {name} undecided: {why}" for name, why in undecided)
        return InductionResult(False, 1, seconds,
                               f"inductive step: sat (breaks: {'; '.join(broken)}){also}")
    if undecided:  # no conjunct shown broken: the step is undecided, not refuted
        names = "; ".join(name for name, _ in undecided)
        return InductionResult(False, 1, seconds, (
            f"inductive step: {undecided[0][1]} on {len(undecided)} of {len(facts)} "
            f"conjuncts ({names}); the other {len(facts) - len(undecided)} proved, none "
            "shown broken"))
    return InductionResult(True, 1, seconds)


def _after_facts(engine: EngineModel, rel: _Relation, defs: list
                 ) -> list[tuple[str, z3.BoolRef]]:
    """The invariant of the state after the step, as the conjuncts to prove one query
    each (an engine that names its conjuncts), else as one. One query per conjunct is
    the same proof (before and not-this-one unsatisfiable for each), is faster on the
    prefix cache's pool (125 s against 200 s on tiny_cached), and names what breaks."""
    if engine.invariant_facts is None:
        return [("the invariant", _well_formed(engine, rel.cfg, rel.specs, rel.after, defs))]
    ops = SymbolicOps()
    named = engine.invariant_facts(ops, rel.cfg, rel.specs, rel.after)
    defs += ops.take_definitions()
    return [(name, _z3(fact)) for name, fact in named]


def _base_case(prop: Property, family: Family, bounds: Bounds, k: int,
               timeout_s: float) -> tuple[bool, str]:
    """The property holds on the first k-1 steps from the initial state (the k-inductive
    step proves the steps after those)."""
    if k <= 1:
        return True, ""
    engine = family.model
    cfg, _, cfg_cons = family_config(family)
    specs, spec_cons = slot_specs(bounds.slots, cfg)
    state = engine.initial_state(bounds.slots, cfg)
    defs: list = []
    steps: list[Step] = []
    for j in range(k - 1):
        state, observed = _transition(engine, cfg, specs, state, f"b{k}s{j}", defs)
        steps.append(observed)
    ops = SymbolicOps()
    holds = z3.And(*[_z3(prop.holds(ops, steps, j)) for j in range(k - 1)])
    return _unsat(timeout_s, *cfg_cons, *spec_cons, *defs, *ops.take_definitions(),
                  z3.Not(holds))


def _inductive_step(prop: Property, family: Family, bounds: Bounds, k: int,
                    timeout_s: float) -> tuple[bool, str]:
    """From k well-formed states in a row, k steps of which the first k-1 satisfy the
    property: the k-th does too. The first step is the cached relation."""
    engine = family.model
    rel = _relation(family, bounds)
    defs: list = []
    assumptions = [_well_formed(engine, rel.cfg, rel.specs, rel.before, defs)]
    state, steps = rel.after, [rel.observed]
    for j in range(1, k):
        # Every state of a reachable window is well-formed (the invariant is inductive):
        # assuming it of the later states too cut the 2-inductive step 8x at 4 slots.
        assumptions.append(_well_formed(engine, rel.cfg, rel.specs, state, defs))
        state, observed = _transition(engine, rel.cfg, rel.specs, state, f"k{k}s{j}", defs)
        steps.append(observed)
    ops = SymbolicOps()
    assumptions += [_z3(prop.holds(ops, steps, j)) for j in range(k - 1)]
    goal = _z3(prop.holds(ops, steps, k - 1))
    return _unsat(timeout_s, *rel.premises, *defs, *ops.take_definitions(), *assumptions,
                  z3.Not(goal))


def prove(prop: Property, family: Family, bounds: Bounds, max_k: int,
          timeout_s: float) -> InductionResult:
    """k-induction for a step property, strengthened by `well_formed` (which must itself
    be proved first; the caller does that once per family)."""
    start = time.monotonic()
    if prop.kind != "step":
        return InductionResult(False, 0, 0.0, "only step properties are proved by induction")
    for k in range(1, max_k + 1):
        remaining = timeout_s - (time.monotonic() - start)
        if remaining <= 0:
            return InductionResult(False, k, time.monotonic() - start, "time limit")
        ok, why = _inductive_step(prop, family, bounds, k, remaining)
        if ok:
            ok, why = _base_case(prop, family, bounds, k,
                                 timeout_s - (time.monotonic() - start))
            if ok:
                return InductionResult(True, k, time.monotonic() - start)
            return InductionResult(False, k, time.monotonic() - start, f"base case: {why}")
        if why != "sat":
            return InductionResult(False, k, time.monotonic() - start, why)
    return InductionResult(False, max_k, time.monotonic() - start,
                           f"not {max_k}-inductive with the well-formedness invariant")


def _z3(b: object) -> z3.BoolRef:
    return z3.BoolVal(b) if isinstance(b, bool) else b
