"""Bounded model checking with iterative deepening: the first depth at which the property
can fail gives the shortest counterexample, which minimize.py then makes canonical."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import z3

from checker.methods import induction
from checker.methods.minimize import check_with, minimal_model, new_solver, workload_of
from checker.methods.symbolic import (
    Bounds,
    Family,
    Unrolling,
    extend,
    new_unrolling,
    same_behaviour,
)
from model.core.ops import SYMBOLIC, Bool, SymbolicOps
from model.core.types import Workload
from properties.catalogue import Property


@dataclass(frozen=True, slots=True)
class BmcResult:
    """HOLDS up to `depth`, VIOLATED at `depth` with a workload, or UNKNOWN."""

    status: str  # "holds" | "violated" | "unknown"
    depth: int
    seconds: float
    workload: Workload | None = None
    loop: int | None = None
    reason: str = ""
    minimal: bool = True  # False: minimisation hit the time limit


def violation_at(prop: Property, u: Unrolling, d: int) -> Bool:
    """The property fails at depth d (after d steps)."""
    if prop.kind == "lasso":
        return _lasso(u, d)
    return z3.Not(_as_z3(prop.holds(SYMBOLIC, u.steps, d - 1)))


def _as_z3(b: object) -> z3.BoolRef:
    return z3.BoolVal(b) if isinstance(b, bool) else b


def _lasso(u: Unrolling, d: int) -> Bool:
    """The run returns at depth d to the behaviour of an earlier state i with a request
    still unfinished, every request having arrived by step i: the loop i..d repeats
    forever and that request never finishes. A dead engine (an assertion of its own,
    absorbing) is no livelock, as the explorer has it (explore.py `_add_edge`)."""
    final = u.states[d]
    alive = z3.Not(_as_z3(u.steps[d - 1].assertion))  # dead from a crash on: not at d
    options = []
    for i in range(d):
        start = u.states[i]
        arrived = [z3.Or(s.arrival_step == 0, s.arrival_step <= i) for s in u.specs]
        # held in step i+1 and arrived by step i: unfinished in state i.
        stuck = [z3.And(_as_z3(obs.held), spec.prompt_len + spec.max_tokens
                        <= u.cfg.max_model_len)
                 for obs, spec in zip(u.steps[i].slots, u.specs, strict=True)]
        options.append(z3.And(same_behaviour(u, start, final), *arrived, z3.Or(*stuck)))
    return z3.And(alive, z3.Or(*options))


def _loop_index(u: Unrolling, model: z3.ModelRef, d: int) -> int:
    for i in range(d):
        start = u.states[i]
        arrived = [z3.Or(s.arrival_step == 0, s.arrival_step <= i) for s in u.specs]
        if z3.is_true(model.eval(z3.And(same_behaviour(u, start, u.states[d]), *arrived),
                                 model_completion=True)):
            return i
    raise AssertionError("lasso model without a loop")


def gave_up(z3_reason: str | None, timeout_s: float, depth: int,
            what: str = "violation") -> str:
    """Why a search stopped without a verdict, in the user's terms: z3 says "canceled" or
    "timeout" when the time limit interrupts it."""
    done = f"no {what} up to depth {depth - 1}" if depth > 1 else "no depth finished"
    if z3_reason is None or z3_reason in ("canceled", "timeout"):
        return f"time limit of {timeout_s:.3g} s reached at depth {depth} ({done})"
    return f"z3 returned unknown at depth {depth} ({z3_reason}; {done})"


#: a depth's check that took this long (wall seconds) turns the invariant on (`_strengthen`)
STRENGTHEN_AFTER_S = 0.5


def _invariant(u: Unrolling, state: Any) -> list[Bool]:
    """The engine's `well_formed` on one state, with its definitions."""
    assert u.engine.well_formed is not None
    ops = SymbolicOps()
    inv = u.engine.well_formed(ops, u.cfg, u.specs, state)
    return [*ops.take_definitions(), _as_z3(inv)]


def _strengthen(family: Family, bounds: Bounds, limit_s: float, cfg: Any) -> bool:
    """Whether the engine's invariant is proved inductive for the family (induction.py's
    proof, cached per process and shared with the k-induction of step properties; keyed
    by the user's whole time limit for that). Every reachable state satisfies a proved
    invariant, so asserting it on the unrolling's states removes no run: verdicts, depths
    and least counterexamples stay the same, and deeper unsat checks get 2-3x faster
    (docs/bench_bmc_starvation.md)."""
    engine = family.model
    if engine.well_formed is None:
        return False
    # The proof is over the family's rule config; `within_bounds` changes that config only
    # under prefix caching: a pool too large for the exact rules is counted (`cfg`, the
    # unrolling's), and then the counted family's invariant is the one asserted.
    if engine.abstraction is not None and engine.abstraction(cfg) is not None:
        family = replace(family, counted=True)
    elif engine.invariant_quick is not None and not engine.invariant_quick(cfg):
        # A proof of minutes (the exact pool's) is not made on BMC's clock: only one
        # already made is used, so the verdict and its time do not hang on the load.
        return induction.stored_well_formed(family, bounds)
    return induction.prove_well_formed(family, bounds, limit_s).proved


def check(prop: Property, family: Family, bounds: Bounds, timeout_s: float,
          stated_limit_s: float | None = None) -> BmcResult:
    """Search depths 1..bounds.depth for a violation of `prop` within `timeout_s`; a time
    limit is reported as `stated_limit_s` (the user's whole limit, of which `timeout_s` is
    what an earlier method left) when given. Once a depth's check takes
    STRENGTHEN_AFTER_S, every state also asserts the engine's proved invariant (the cheap
    queries of the first depths do not repay its proof)."""
    start = time.monotonic()
    limit = timeout_s if stated_limit_s is None else stated_limit_s
    if prop.kind == "lasso" and bounds.kv_load_steps:
        # The premise reads the last d step boundaries, which a state does not carry, so a
        # loop back to a state need not respect it; and a witness's reports end with it.
        return BmcResult("unknown", 0, 0.0, reason="a lasso under the premise that every "
                         "KV load ends within d steps (kv_load_steps) is not searched: the "
                         "premise is not part of the state a loop returns to")
    u = new_unrolling(family, bounds)
    solver = new_solver()
    solver.add(*u.constraints)
    strengthened = False
    for d in range(1, bounds.depth + 1):
        solver.add(*extend(u))
        if strengthened:
            solver.add(*_invariant(u, u.states[-1]))
        if time.monotonic() - start >= timeout_s:
            return BmcResult("unknown", d - 1, time.monotonic() - start,
                             reason=gave_up(None, limit, d))
        violation = violation_at(prop, u, d)
        asked = time.monotonic()
        answer = check_with(solver, start + timeout_s, violation)
        if answer.result == z3.unknown:
            return BmcResult("unknown", d, time.monotonic() - start,
                             reason=gave_up(answer.reason, limit, d))
        if answer.model is not None:
            return _violated(prop, family, u, violation, answer.model, d,
                             start, timeout_s)
        if not strengthened and time.monotonic() - asked >= STRENGTHEN_AFTER_S \
                and d < bounds.depth and _strengthen(family, bounds, limit, u.cfg):
            strengthened = True
            for state in u.states[1:]:
                solver.add(*_invariant(u, state))
    return BmcResult("holds", bounds.depth, time.monotonic() - start)


def _violated(prop: Property, family: Family, u: Unrolling, violation: Bool,
              first: z3.ModelRef, d: int, start: float, timeout_s: float) -> BmcResult:
    """VIOLATED at depth d: the least counterexample, or the first witness (marked not
    minimal) when minimising runs out of time."""
    remaining = timeout_s - (time.monotonic() - start)
    model = minimal_model(u, violation, max(1, int(remaining * 1000)), first)
    minimal = model is not None
    # A witness the solver found is still a witness when minimising runs out of
    # time: report it, replayed like any other, marked as not minimal.
    model = model if model is not None else first
    loop = _loop_index(u, model, d) if prop.kind == "lasso" else None
    workload = workload_of(u, model, family.base, d)
    return BmcResult("violated", d, time.monotonic() - start, workload, loop,
                     minimal=minimal)
