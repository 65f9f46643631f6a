"""vLLM V1's well-formedness invariant on the AsyncScheduler (model/vllm/invariant.py, its
in-flight facts): k-induction proves it inductive on tiny_async and on async families
around it; it holds on every state of concrete async runs that agree with the reference;
it proves tiny_async's HOLDS entries; and a wrong in-flight fact or a wrong async rule
makes its proof fail."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import cache
from typing import Any

import pytest
import z3

from checker.conformance.generate import random_workload
from checker.methods import induction
from checker.methods.symbolic import Bounds, Family
from model.core.ops import CONCRETE, Ops
from model.core.types import Workload
from model.run import without_unsampled_eos
from model.slots import to_slots
from model.vllm import invariant, rules
from model.vllm.config import VllmRules
from model.vllm.engine import ENGINE
from model.vllm.records import to_record
from model.vllm.reference import simulate
from model.vllm.state import ABSENT, PREEMPTED, RUNNING, WAITING, SlotState
from model.vllm.validation import is_valid
from properties import catalogue
from properties.manifest import load

CONFIG = "tiny_async"


def _family(config: str = CONFIG, **changes: Any) -> tuple[Family, Bounds]:
    nc = load().configs[config]
    base = replace(nc.config, **changes) if changes else nc.config
    family = Family(base=base, ranges=nc.ranges, validated=nc.validated, engine=nc.engine)
    return family, Bounds(**dict(nc.bounds))


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Every test sees the rules and invariant it patches, not a cached proof."""
    induction.clear_caches()
    yield
    induction.clear_caches()


def _refusal(config: str = CONFIG) -> str:
    """Why the invariant proof on `config` fails ("" when it is proved)."""
    family, bounds = _family(config)
    result = induction.prove_well_formed(family, bounds, 120.0)
    return "" if result.proved else result.reason


@pytest.mark.parametrize("slots", [2, 3])
def test_the_invariant_is_inductive_on_tiny_async(slots: int) -> None:
    family, bounds = _family()
    result = induction.prove_well_formed(family, dataclasses.replace(bounds, slots=slots), 120.0)
    assert result.proved, result.reason


@pytest.mark.slow
def test_the_invariant_is_inductive_on_tiny_async_at_four_slots() -> None:
    family, bounds = _family()  # about 11 s
    assert induction.prove_well_formed(family, dataclasses.replace(bounds, slots=4), 300.0).proved


@pytest.mark.parametrize("changes", [
    dict(policy="priority"),
    dict(enable_chunked_prefill=False, max_num_batched_tokens=16),
    dict(long_prefill_token_threshold=2, long_prefill_token_threshold_adaptive=True),
    dict(watermark=0.3, num_gpu_blocks=9),
    dict(max_num_scheduled_tokens=3),
    dict(rules=VllmRules(preemption_gate=False)),
], ids=["priority", "no_chunking", "threshold", "watermark", "scheduled_cap", "no_gate"])
def test_the_invariant_is_inductive_on_async_variants(changes: dict[str, Any]) -> None:
    family, bounds = _family(**changes)
    result = induction.prove_well_formed(family, bounds, 120.0)
    assert result.proved, result.reason


def test_the_invariant_is_inductive_on_a_ranged_async_family() -> None:
    """budget_family (every budget and max_num_seqs 1..64 vLLM accepts) on the
    AsyncScheduler."""
    family, bounds = _family("budget_family", async_scheduling=True)
    result = induction.prove_well_formed(family, dataclasses.replace(bounds, slots=2), 120.0)
    assert result.proved, result.reason


def _holds_entries() -> list[str]:
    return [e.property for e in load().entries
            if e.config == CONFIG and e.expected == "HOLDS"
            and catalogue.get(e.property).kind == "step"]


def test_tiny_async_has_holds_entries() -> None:
    assert sorted(_holds_entries()) == ["budget_respected", "kv_blocks_conserved",
                                        "running_within_max_num_seqs"]


@pytest.mark.parametrize("prop", _holds_entries())
def test_every_holds_entry_of_tiny_async_is_proved(prop: str) -> None:
    family, bounds = _family()
    assert induction.prove_well_formed(family, bounds, 120.0).proved
    result = induction.prove(catalogue.get(prop), family, bounds, 2, 120.0)
    assert result.proved, result.reason


def test_the_violated_entry_of_tiny_async_is_not_proved() -> None:
    """computed_within_tokens is VIOLATED under async (placeholders count as tokens)."""
    family, bounds = _family()
    assert induction.prove_well_formed(family, bounds, 120.0).proved
    result = induction.prove(catalogue.get("computed_within_tokens"), family, bounds, 2, 120.0)
    assert not result.proved


def _async_workload(seed: int) -> Workload | None:
    """The conformance generator's workload `seed` on the AsyncScheduler, its EOS entries
    cut to steps in which their request samples; None if vLLM refuses the config."""
    w = random_workload(seed, steps=20)
    w = replace(w, config=replace(w.config, async_scheduling=True))
    return without_unsampled_eos(w) if is_valid(w.config) else None


SEEDS = range(48)


@cache
def _reachable() -> tuple[tuple[int, Any, Any, Any], ...]:
    """(seed, rule config, specs, state) of every state the rules reach on the workloads
    of SEEDS, the initial ones included; each run is checked against the reference record
    by record, so these are the reference's states."""
    states = []
    for seed in SEEDS:
        w = _async_workload(seed)
        assert w is not None, f"seed {seed}: the generator drew a config vLLM refuses"
        sw = to_slots(w)
        state = ENGINE.initial_state(len(sw.specs), sw.cfg)
        states.append((seed, sw.cfg, sw.specs, state))
        records = []
        for eos in sw.eos:
            state, observed = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, eos)
            records.append(to_record(observed, sw.ids))
            states.append((seed, sw.cfg, sw.specs, state))
        assert records == list(simulate(w)), f"seed {seed}: the rules left the reference"
    return tuple(states)


def test_the_generated_async_workloads_preempt_and_sample() -> None:
    """The concrete check below sees the in-flight states the facts are about."""
    seen = {"preempted": 0, "placeholder": 0, "prefill_chunk": 0}
    for _, _, _, s in _reachable():
        for x in s.slots:
            f = x.in_flight[0]
            seen["preempted"] += x.status == PREEMPTED
            seen["placeholder"] += x.status == RUNNING and f.placeholders == 1
            seen["prefill_chunk"] += (x.status == RUNNING and f.pending_tokens > 0
                                      and not f.pending_sample)
    assert all(n > 20 for n in seen.values()), seen


def test_the_invariant_holds_on_every_state_of_concrete_async_runs() -> None:
    states = _reachable()
    for seed, cfg, specs, state in states:
        assert cfg.async_scheduling
        assert invariant.well_formed(CONCRETE, cfg, specs, state), \
            f"seed {seed} step {state.step}: {state}"
    assert len(states) == len(SEEDS) * 21


def _concretely_refused() -> bool:
    """Some reachable state of the concrete runs violates the (patched) invariant."""
    return any(not invariant.well_formed(CONCRETE, cfg, specs, state)
               for _, cfg, specs, state in _reachable())


def _ite(c: Any, a: Any, b: Any) -> Any:
    """If-then-else over a concrete or z3 condition (for patched rules)."""
    return z3.If(c, a, b) if isinstance(c, z3.ExprRef) else (a if c else b)


# One deliberately wrong form of each in-flight fact: each is false on reachable states
# but holds initially, so the proof fails in its inductive step and a concrete run finds
# a state where it is false.
WRONG_FACTS: dict[str, tuple[str, Callable[[Ops, SlotState], Any]]] = {
    "a victim keeps its placeholder": ("_idle", lambda ops, x: ops.implies(
        ops.or_(x.status == ABSENT, x.status == WAITING, x.status == PREEMPTED), ops.and_(
            x.in_flight[0].placeholders == ops.to_int(x.status == PREEMPTED),
            x.in_flight[0].tokens == 0, x.in_flight[0].stale == 0,
            x.in_flight[0].pending_tokens == 0))),
    "what is in flight is stale": ("_last_schedule_in_flight", lambda ops, x: _held_facts(
        ops, x, x.in_flight[0].stale == x.in_flight[0].tokens, 0)),
    "a sampling chunk has two tokens or more": ("_last_schedule_in_flight", lambda ops, x: (
        _held_facts(ops, x, x.in_flight[0].stale == 0, 1))),
    "a placeholder per scheduled chunk": ("_running_placeholders", lambda ops, x: (
        ops.implies(x.status == RUNNING, x.in_flight[0].placeholders
                    == ops.ite(x.in_flight[0].pending_tokens > 0, 1, 0)))),
}


def _held_facts(ops: Ops, x: SlotState, stale: Any, least_sampling_chunk: int) -> Any:
    """invariant._last_schedule_in_flight with its stale fact and its bound on a sampling
    chunk's tokens (> 0) replaced."""
    f = x.in_flight[0]
    held = ops.or_(x.status == WAITING, x.status == RUNNING, x.status == PREEMPTED)
    return ops.implies(held, ops.and_(
        f.tokens == f.pending_tokens, f.pending_tokens >= 0, stale,
        ops.implies(f.pending_sample, f.pending_tokens > least_sampling_chunk)))


@pytest.mark.parametrize("fact", WRONG_FACTS)
def test_a_wrong_in_flight_fact_is_refused(monkeypatch: pytest.MonkeyPatch, fact: str) -> None:
    name, wrong = WRONG_FACTS[fact]
    monkeypatch.setattr(invariant, name, wrong)
    assert _refusal().startswith("inductive step: sat")
    assert _concretely_refused()


def test_a_wrong_computed_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The synchronous bound num_computed_tokens <= num_tokens - 1: under async a sampling
    chunk also computes the placeholder's token."""
    monkeypatch.setattr(invariant, "_last_computed", lambda ntok, x: ntok - 1)
    assert _refusal().startswith("inductive step: sat")
    assert _concretely_refused()


def test_an_off_by_one_computed_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invariant, "_last_computed",
                        lambda ntok, x: ntok + x.in_flight[0].placeholders - 2)
    assert _refusal().startswith("inductive step: sat")
    assert _concretely_refused()


@pytest.mark.parametrize("fact", ["_idle", "_last_schedule_in_flight"])
def test_each_in_flight_fact_is_needed(monkeypatch: pytest.MonkeyPatch, fact: str) -> None:
    monkeypatch.setattr(invariant, fact, lambda ops, x: True)
    assert _refusal().startswith("inductive step: sat")


def test_the_placeholder_count_is_true_but_not_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """_running_placeholders is not needed for the proof (the other facts never bound a
    running request's placeholders, and nothing else needs them bounded); it is kept as
    the fact that makes _last_computed say num_computed_tokens <= num_tokens, and a wrong
    form of it is refused above."""
    monkeypatch.setattr(invariant, "_running_placeholders", lambda ops, x: True)
    assert _refusal() == ""


def test_the_synchronous_invariant_is_not_inductive_under_async(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the in-flight facts (the invariant before them) the proof fails."""
    monkeypatch.setattr(invariant, "_in_flight", lambda ops, x: [])
    monkeypatch.setattr(invariant, "_last_computed", lambda ntok, x: ntok - 1)
    assert _refusal().startswith("inductive step: sat")


def test_placeholders_that_never_advance_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An async update that forgets the sampled token's placeholder (A:25-56): the next
    delivery takes it below 0."""
    real = rules.InFlight

    def wrong(**fields: Any) -> Any:
        fields["placeholders"] = fields["placeholders"] - _ite(fields["pending_sample"], 1, 0)
        return real(**fields)

    monkeypatch.setattr(rules, "InFlight", wrong)
    assert _refusal().startswith("inductive step: sat")


def test_a_preemption_that_leaves_nothing_stale_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A preemption that does not turn the victim's in-flight tokens stale
    (scheduler.py:1597-1607): its token in flight is then delivered as fresh and frees a
    placeholder the victim no longer has."""
    real = rules._preempt

    def wrong(ops: Ops, cfg: Any, w: Any, victim: Any, do: Any) -> None:
        stale = list(w.stale)
        real(ops, cfg, w, victim, do)
        w.stale = stale

    monkeypatch.setattr(rules, "_preempt", wrong)
    assert _refusal().startswith("inductive step: sat")


def test_a_synchronous_slot_takes_no_in_flight_fact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without async the invariant's terms are the synchronous ones: no in-flight fact is
    built (a synchronous slot has no InFlight)."""
    def absent(ops: Ops, x: SlotState) -> Any:
        raise AssertionError("an in-flight fact on a synchronous slot")

    monkeypatch.setattr(invariant, "_in_flight", absent)
    family, bounds = _family("tiny_fcfs")
    result = induction.prove_well_formed(family, dataclasses.replace(bounds, slots=2), 120.0)
    assert result.proved, result.reason
