"""k-induction for unbounded proofs of step properties.

The strengthening invariant `well_formed` describes every reachable state (statuses and
their counters, blocks held = cdiv(num_computed_tokens, block_size) for running requests,
the pool conserved, queue keys distinct, `running` within max_num_active_reqs). It is
proved inductive first (it holds initially and every step preserves it); then a property
is PROVED when, from any k consecutive well-formed steps on which it held, it holds on
the next. Request lengths are unbounded in these proofs: only the number of request
slots is fixed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import z3

from checker.bmc import Z3_SEED
from checker.symbolic import Bounds, Family, family_config, fresh_state, slot_specs
from model.ops import SymbolicOps
from model.rules import vllm_v1 as rules
from model.state import (
    ABSENT,
    FINISHED,
    PREEMPTED,
    RUNNING,
    WAITING,
    RuleConfig,
    SchedState,
    SlotSpec,
    Step,
)
from properties.catalogue import Property


@dataclass(frozen=True, slots=True)
class InductionResult:
    """`proved` with the k that closed the induction, or not proved (with why)."""

    proved: bool
    k: int
    seconds: float
    reason: str = ""


def well_formed(cfg: RuleConfig, specs: tuple[SlotSpec, ...], s: SchedState) -> z3.BoolRef:
    """The strengthening invariant of every reachable state (see the module docstring)."""
    ops = SymbolicOps()
    cons = [s.free_blocks >= 0, s.step >= 0, s.wait_head < s.wait_tail]
    held_blocks = []
    for spec, x in zip(specs, s.slots, strict=True):
        ntok = spec.prompt_len + x.num_output_tokens
        live = [x.num_output_tokens >= 0, x.num_output_tokens < spec.max_tokens,
                ntok < cfg.max_model_len]
        cons += [
            x.status >= ABSENT, x.status <= FINISHED, x.num_preemptions >= 0,
            z3.Implies(x.status == ABSENT, z3.And(
                x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
                x.num_preemptions == 0,
                z3.Or(spec.arrival_step == 0, spec.arrival_step > s.step))),
            z3.Implies(x.status != ABSENT, z3.And(spec.arrival_step >= 1,
                                                  spec.arrival_step <= s.step)),
            z3.Implies(x.status == WAITING, z3.And(
                x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
                x.num_preemptions == 0, x.wait_key > s.wait_head, x.wait_key < s.wait_tail)),
            z3.Implies(x.status == PREEMPTED, z3.And(
                x.num_computed_tokens == 0, x.blocks == 0, x.num_preemptions >= 1,
                x.wait_key > s.wait_head, x.wait_key < s.wait_tail, *live)),
            z3.Implies(x.status == RUNNING, z3.And(
                x.num_computed_tokens >= 1, x.num_computed_tokens <= ntok - 1,
                x.blocks == ops.cdiv(x.num_computed_tokens, cfg.block_size),
                x.run_key < s.next_run_key, *live)),
            z3.Implies(x.status == FINISHED, x.blocks == 0),
        ]
        held_blocks.append(x.blocks)
    cons.append(s.free_blocks + z3.Sum(held_blocks) == cfg.usable_blocks)
    n = len(specs)
    waiting = [z3.Or(x.status == WAITING, x.status == PREEMPTED) for x in s.slots]
    running = [x.status == RUNNING for x in s.slots]
    for i in range(n):
        for j in range(i + 1, n):
            a, b = s.slots[i], s.slots[j]
            cons.append(z3.Implies(z3.And(running[i], running[j]), a.run_key != b.run_key))
            cons.append(z3.Implies(z3.And(waiting[i], waiting[j]), a.wait_key != b.wait_key))
    cons.append(z3.Sum([z3.If(r, 1, 0) for r in running]) <= cfg.max_num_active_reqs)
    return z3.And(*cons)


def _initial(cfg: RuleConfig, n: int) -> SchedState:
    return SchedState.initial(n, cfg.usable_blocks)


def _transition(cfg: RuleConfig, specs: tuple[SlotSpec, ...], s: SchedState, tag: str,
                defs: list) -> tuple[SchedState, Step]:
    ops = SymbolicOps()
    eos = tuple(z3.Bool(f"{tag}.eos{i}") for i in range(len(specs)))
    nxt, observed = rules.step(ops, cfg, specs, s, eos)
    defs += ops.take_definitions()
    return nxt, observed


def _solver(timeout_s: float) -> z3.Solver:
    solver = z3.Solver()
    solver.set(random_seed=Z3_SEED, timeout=max(1, int(timeout_s * 1000)))
    return solver


@lru_cache(maxsize=32)
def prove_well_formed(family: Family, bounds: Bounds, timeout_s: float) -> InductionResult:
    """Prove `well_formed` inductive: it holds initially and every step preserves it.
    Cached per process: every step property of a family reuses the proof."""
    start = time.monotonic()
    cfg, _, cfg_cons = family_config(family)
    specs, spec_cons = slot_specs(bounds.slots, cfg)
    base = _solver(timeout_s)
    base.add(*cfg_cons, *spec_cons, z3.Not(well_formed(cfg, specs, _initial(cfg, bounds.slots))))
    r = base.check()
    if r != z3.unsat:
        return InductionResult(False, 0, time.monotonic() - start, f"base case: {r}")
    s0 = fresh_state("w0", _initial(cfg, bounds.slots), z3.Int("w0.step"))
    defs: list = []
    s1, _ = _transition(cfg, specs, s0, "w0", defs)
    step = _solver(timeout_s - (time.monotonic() - start))
    step.add(*cfg_cons, *spec_cons, *defs, well_formed(cfg, specs, s0),
             z3.Not(well_formed(cfg, specs, s1)))
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
    cfg, _, cfg_cons = family_config(family)
    specs, spec_cons = slot_specs(bounds.slots, cfg)
    for k in range(1, max_k + 1):
        remaining = timeout_s - (time.monotonic() - start)
        if remaining <= 0:
            return InductionResult(False, k, time.monotonic() - start, "time limit")
        defs: list = []
        state = fresh_state(f"k{k}s0", _initial(cfg, bounds.slots), z3.Int(f"k{k}s0.step"))
        assumptions = [well_formed(cfg, specs, state)]
        steps: list[Step] = []
        for j in range(k):
            state, observed = _transition(cfg, specs, state, f"k{k}s{j}", defs)
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
