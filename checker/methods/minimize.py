"""Minimal counterexamples, by one documented order (the `sort_key`):

1. fewest steps (iterative deepening in bmc.py finds the first violating depth);
2. then fewest requests;
3. then smallest numbers, shortlex over the vector
   (per slot in arrival order: arrival_step, prompt_len, max_tokens, priority,
    cached_prefix_len, prefix_group, shared_prefix_len; then the ranged config fields in
    the engine's `ranged_fields` order; then the EOS choices, step by step and slot by
    slot, false before true; with speculative decoding, then the accepted drafts and the
    drafts not proposed, step by step and slot by slot; with a KV connector, then each
    slot's hit tokens and async flag, then the load reports and their failures, step by
    step and slot by slot, false before true).

Every free choice of the run is in that vector, so the minimum is one run: the same
question gives the same file.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, NamedTuple

import z3

from checker.methods.solver import preprocessed
from checker.methods.symbolic import Unrolling, present
from model.core.ops import Bool
from model.core.types import (
    AcceptEvent,
    DraftEvent,
    EosEvent,
    ExternalHit,
    KVLoadEvent,
    RequestSpec,
    Workload,
)


def objectives(u: Unrolling) -> list[z3.ArithRef]:
    """The shortlex vector after the step count, most significant first."""
    objs: list[z3.ArithRef] = [z3.Sum([z3.If(p, 1, 0) for p in present(u.specs)])]
    for spec in u.specs:
        for value in (spec.arrival_step, spec.prompt_len, spec.max_tokens, spec.priority,
                      spec.cached_prefix_len, spec.prefix_group, spec.shared_prefix_len):
            if isinstance(value, z3.ArithRef):
                objs.append(value)
    objs += [u.cfg_vars[name] for name in u.engine.ranged_fields if name in u.cfg_vars]
    for eos in u.eos:
        objs += [z3.If(e, 1, 0) for e in eos]
    k = getattr(u.cfg, "num_spec_tokens", 0)
    for choices in u.spec:
        objs += [a for a, _ in choices] + [k - d for _, d in choices]
    for tokens, load_async in u.kv_hits:
        objs += [tokens, z3.If(load_async, 1, 0)]
    for reports in u.kv_reports:
        objs += [z3.If(b, 1, 0) for pair in reports for b in pair]
    return objs


def new_solver() -> z3.Solver:
    """The methods' solver (solver.py's `preprocessed`); push/pop scope each check's extra
    assertions."""
    return preprocessed()


class Answer(NamedTuple):
    """One check: sat/unsat/unknown, the model when sat, z3's reason when unknown (None
    when the deadline had passed before the check)."""

    result: z3.CheckSatResult
    model: z3.ModelRef | None = None
    reason: str | None = None


def check_with(s: z3.Solver, deadline: float, *extra: Bool) -> Answer:
    """Check the solver's assertions plus `extra` (removed again afterwards) before
    `deadline` (a time.monotonic() value)."""
    left = deadline - time.monotonic()
    if left <= 0:
        return Answer(z3.unknown)
    s.set(timeout=max(1, int(left * 1000)))
    s.push()
    s.add(*extra)
    result = s.check()
    answer = Answer(result, s.model() if result == z3.sat else None,
                    s.reason_unknown() if result == z3.unknown else None)
    s.pop()
    return answer


def minimal_model(u: Unrolling, violation: Bool, timeout_ms: int,
                  first: z3.ModelRef | None = None) -> z3.ModelRef | None:
    """The lexicographically least model of the unrolling plus `violation`, or None when
    the solver gives up (the caller then keeps the first witness, marked not minimal).
    `first`, a model of the same formula (BMC's witness), spares the first check.

    One objective at a time, most significant first: while some model has it below the
    current model's value, take that model; then fix it at its least value and go on.
    Each answer is an exact sat/unsat, so the result is the least vector (z3's Optimize
    with priority "lex" was 5.5x slower on the SPIN setting's starvation k=5 witness and
    once kept an EOS choice it did not need). Fixed values are assertions, which the
    solver's preprocessing propagates: each later check is on a smaller formula."""
    deadline = time.monotonic() + timeout_ms / 1000
    s = new_solver()
    s.add(*u.constraints, violation)
    model = first
    if model is None:
        model = check_with(s, deadline).model
        if model is None:
            return None
    for objective in objectives(u):
        value = model.eval(objective, model_completion=True).as_long()
        if not (value == 0 and _is_bit(objective)):  # a bit at 0 is already least
            while (found := check_with(s, deadline, objective < value)).model is not None:
                model = found.model
                value = model.eval(objective, model_completion=True).as_long()
            if found.result != z3.unsat:
                return None
        s.add(objective == value)
    return model


def _is_bit(term: z3.ArithRef) -> bool:
    """Whether `term` is If(c, 1, 0) (an EOS choice), which is never below 0."""
    if not z3.is_app_of(term, z3.Z3_OP_ITE):
        return False
    _, then, other = term.children()
    return z3.is_int_value(then) and z3.is_int_value(other) and \
        (then.as_long(), other.as_long()) == (1, 0)


def group_fields(group: int, shared: int) -> dict[str, object]:
    """A slot's prefix group number as the workload names it: g1, g2, ...; 0 is none."""
    if group == 0:
        return {}
    return {"prefix_group": f"g{group}", "shared_prefix_len": shared}


def workload_of(u: Unrolling, model: z3.ModelRef, base: Any, depth: int) -> Workload:
    """The concrete workload a model describes. Request ids are r0, r1, ... in arrival
    order; EOS choices are kept only where the request samples a token."""
    def val(x: object) -> int:
        return model.eval(x, model_completion=True).as_long() if isinstance(x, z3.ExprRef) else x

    cfg = replace(base, **{name: val(v) for name, v in u.cfg_vars.items()})
    requests = []
    for i, spec in enumerate(u.specs):
        arrival = val(spec.arrival_step)
        if arrival == 0:
            continue
        requests.append(RequestSpec(id=f"r{i}", prompt_len=val(spec.prompt_len),
                                    max_tokens=val(spec.max_tokens), arrival_step=arrival,
                                    priority=val(spec.priority),
                                    cached_prefix_len=val(spec.cached_prefix_len),
                                    **group_fields(val(spec.prefix_group),
                                                   val(spec.shared_prefix_len))))
    eos = []
    for t, (choices, observed) in enumerate(zip(u.eos, u.steps, strict=False)):
        for i, (e, obs) in enumerate(zip(choices, observed.slots, strict=True)):
            if z3.is_true(model.eval(z3.And(e, obs.sampled), model_completion=True)):
                eos.append(EosEvent(id=f"r{i}", step=t + 1))
    accepted, drafts = _spec_events(u, model)
    hits, loads = _kv_events(u, model)
    return Workload(config=cfg, requests=tuple(requests), eos=tuple(eos), steps=depth,
                    engine=u.engine.name, accepted=accepted, drafts=drafts, kv_hits=hits,
                    kv_loads=loads)


def _kv_events(u: Unrolling, model: z3.ModelRef
               ) -> tuple[tuple[ExternalHit, ...], tuple[KVLoadEvent, ...]]:
    """A KV connector's choices in a model: each used slot's hit of 1+ tokens, and each
    load report of a used slot (one for a request with no load in flight does nothing)."""
    if not u.kv_hits:
        return (), ()
    hits = []
    for i, ((tokens, load_async), spec) in enumerate(zip(u.kv_hits, u.specs, strict=True)):
        count = _int(model, tokens)
        if count and _int(model, spec.arrival_step):
            hits.append(ExternalHit(id=f"r{i}", tokens=count,
                                    load_async=z3.is_true(model.eval(load_async,
                                                                     model_completion=True))))
    loads = []
    for t, reports in enumerate(u.kv_reports):
        for i, (report, failed) in enumerate(reports):
            if z3.is_true(model.eval(z3.And(report, u.specs[i].arrival_step > 0),
                                     model_completion=True)):
                loads.append(KVLoadEvent(id=f"r{i}", step=t + 1, failed=z3.is_true(
                    model.eval(failed, model_completion=True))))
    return tuple(hits), tuple(loads)


def _int(model: z3.ModelRef, x: object) -> int:
    """The value of an int term (or a Python int) in the model."""
    if isinstance(x, z3.ExprRef):
        return model.eval(x, model_completion=True).as_long()
    return int(x)  # type: ignore[call-overload]


def _spec_events(u: Unrolling, model: z3.ModelRef
                 ) -> tuple[tuple[AcceptEvent, ...], tuple[DraftEvent, ...]]:
    """The speculative-decoding choices of a model that change the run: drafts accepted
    where drafts were scheduled, and fewer drafts than k proposed for a request that
    sampled and goes on (for proposers that may find fewer)."""
    k = getattr(u.cfg, "num_spec_tokens", 0)
    accepted: list[AcceptEvent] = []
    drafts: list[DraftEvent] = []
    for t, (choices, observed) in enumerate(zip(u.spec, u.steps, strict=False)):
        for i, ((_, d), obs) in enumerate(zip(choices, observed.slots, strict=True)):
            count = _int(model, obs.spec_accepted)
            if count:
                accepted.append(AcceptEvent(id=f"r{i}", step=t + 1, count=count))
            goes_on = z3.And(obs.sampled, z3.Not(obs.finished))
            proposed = _int(model, d)
            if (getattr(u.cfg, "drafts_vary", False) and proposed != k
                    and not getattr(u.cfg, "async_scheduling", False)
                    and z3.is_true(model.eval(goes_on, model_completion=True))):
                drafts.append(DraftEvent(id=f"r{i}", step=t + 1, count=proposed))
    return tuple(accepted), tuple(drafts)
