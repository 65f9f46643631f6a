"""k-induction for unbounded proofs of step properties.

The strengthening invariant is the engine's `EngineModel.well_formed` (vLLM V1's is
model/vllm/invariant.py): a description of every reachable state. It is
proved inductive first (it holds initially and every step preserves it); then a property
is PROVED when, from any k consecutive well-formed steps on which it held, it holds on
the next. Request lengths are unbounded in these proofs: only the number of request
slots is fixed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import z3

from checker.methods.bmc import Z3_SEED
from checker.methods.symbolic import Bounds, Family, family_config, fresh_state, slot_specs
from model import registry as engines
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


def _transition(engine: EngineModel, cfg: Any, specs: tuple[SlotSpec, ...], s: Any, tag: str,
                defs: list) -> tuple[Any, Step]:
    ops = SymbolicOps()
    eos = tuple(z3.Bool(f"{tag}.eos{i}") for i in range(len(specs)))
    nxt, observed = engine.step(ops, cfg, specs, s, eos)
    defs += ops.take_definitions()
    return nxt, observed


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
    solver = z3.Solver()
    solver.set(random_seed=Z3_SEED, timeout=max(1, int(timeout_s * 1000)))
    return solver


@lru_cache(maxsize=32)
def prove_well_formed(family: Family, bounds: Bounds, timeout_s: float) -> InductionResult:
    """Prove `well_formed` inductive: it holds initially and every step preserves it.
    Cached per process: every step property of a family reuses the proof."""
    start = time.monotonic()
    engine = engines.get(family.engine)
    cfg, _, cfg_cons = family_config(family)
    if engine.invariant_covers is not None and not engine.invariant_covers(cfg):
        return InductionResult(False, 0, 0.0, "the engine's invariant does not describe "
                               "this configuration")
    specs, spec_cons = slot_specs(bounds.slots, cfg)
    initial = engine.initial_state(bounds.slots, cfg)
    defs: list = []
    base = _solver(timeout_s)
    base.add(*cfg_cons, *spec_cons,
             z3.Not(_well_formed(engine, cfg, specs, initial, defs)), *defs)
    r = base.check()
    if r != z3.unsat:
        return InductionResult(False, 0, time.monotonic() - start, f"base case: {r}")
    s0 = fresh_state("w0", initial, z3.Int("w0.step"))
    defs = []
    s1, _ = _transition(engine, cfg, specs, s0, "w0", defs)
    before = _well_formed(engine, cfg, specs, s0, defs)
    after = _well_formed(engine, cfg, specs, s1, defs)
    step = _solver(timeout_s - (time.monotonic() - start))
    step.add(*cfg_cons, *spec_cons, *defs, before, z3.Not(after))
    r = step.check()
    if r != z3.unsat:
        return InductionResult(False, 1, time.monotonic() - start, f"inductive step: {r}")
    return InductionResult(True, 1, time.monotonic() - start)


def prove(prop: Property, family: Family, bounds: Bounds, max_k: int,
          timeout_s: float) -> InductionResult:
    """k-induction for a step property, strengthened by `well_formed` (which must itself
    be proved first; the caller does that once per family)."""
    start = time.monotonic()
    if prop.kind != "step":
        return InductionResult(False, 0, 0.0, "only step properties are proved by induction")
    engine = engines.get(family.engine)
    cfg, _, cfg_cons = family_config(family)
    specs, spec_cons = slot_specs(bounds.slots, cfg)
    for k in range(1, max_k + 1):
        remaining = timeout_s - (time.monotonic() - start)
        if remaining <= 0:
            return InductionResult(False, k, time.monotonic() - start, "time limit")
        defs: list = []
        state = fresh_state(f"k{k}s0", engine.initial_state(bounds.slots, cfg),
                            z3.Int(f"k{k}s0.step"))
        assumptions = [_well_formed(engine, cfg, specs, state, defs)]
        steps: list[Step] = []
        for j in range(k):
            state, observed = _transition(engine, cfg, specs, state, f"k{k}s{j}", defs)
            steps.append(observed)
        ops = SymbolicOps()
        for j in range(k - 1):
            assumptions.append(_z3(prop.holds(ops, steps, j)))
        goal = _z3(prop.holds(ops, steps, k - 1))
        solver = _solver(remaining)
        solver.add(*cfg_cons, *spec_cons, *defs, *ops.take_definitions(), *assumptions,
                   z3.Not(goal))
        r = solver.check()
        if r == z3.unsat:
            return InductionResult(True, k, time.monotonic() - start)
        if r == z3.unknown:
            return InductionResult(False, k, time.monotonic() - start,
                                   solver.reason_unknown())
    return InductionResult(False, max_k, time.monotonic() - start,
                           f"not {max_k}-inductive with the well-formedness invariant")


def _z3(b: object) -> z3.BoolRef:
    return z3.BoolVal(b) if isinstance(b, bool) else b
