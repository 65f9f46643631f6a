"""vLLM V1's well-formedness invariant on the AsyncScheduler and with speculative decoding
(model/vllm/invariant.py: its in-flight facts, and the blocks a request holds beyond its
computed tokens): k-induction proves it inductive on tiny_async and async families around
it, and (the induction step ranging over the drafts accepted and proposed, as BMC's
does) on tiny_spec, tiny_spec_eagle, tiny_spec_async and tiny_spec_threshold_fixed; it
holds on every state of concrete runs that agree with the reference; it proves those
configs' HOLDS entries; and a wrong fact or a wrong rule makes its proof fail."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import cache
from typing import Any

import pytest
import z3
from test_spec_decode import keep_valid_choices

from checker.conformance.generate import (
    random_spec_async_workload,
    random_spec_workload,
    random_workload,
)
from checker.methods import induction
from checker.methods.jobs import family_of, symbolic_bounds
from checker.methods.symbolic import Bounds, Family
from model import registry as engines
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
SPEC_CONFIGS = ("tiny_spec", "tiny_spec_eagle", "tiny_spec_async", "tiny_spec_threshold_fixed")
SEEDS = range(48)  # async workloads checked concretely
SPEC_SEEDS = range(40)  # per speculative mode


def _family(config: str = CONFIG, **changes: Any) -> tuple[Family, Bounds]:
    nc = load().configs[config]
    if changes:
        nc = replace(nc, config=replace(nc.config, **changes))
    return family_of(nc), symbolic_bounds(nc)


# Every test sees the rules and invariant it patches, not a cached proof.
# Every test sees the rules and invariant it patches, not a cached proof; the default
# suite's tests of the module run on one worker (tests/conftest.py, GROUPED).
pytestmark = pytest.mark.usefixtures("fresh_induction_caches")


def _refusal(config: str = CONFIG) -> str:
    """Why the invariant proof on `config` fails ("" when it is proved)."""
    family, bounds = _family(config)
    result = induction.prove_well_formed(family, bounds, 120.0)
    return "" if result.proved else result.reason


# --- proofs ---------------------------------------------------------------------------


@pytest.mark.parametrize("slots", [2, 3])
def test_the_invariant_is_inductive_on_tiny_async(slots: int) -> None:
    family, bounds = _family()
    result = induction.prove_well_formed(family, dataclasses.replace(bounds, slots=slots), 120.0)
    assert result.proved, result.reason


@pytest.mark.slow
def test_the_invariant_is_inductive_on_tiny_async_at_four_slots() -> None:
    family, bounds = _family()  # about 11-16 s
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


@pytest.mark.parametrize("config", SPEC_CONFIGS)
def test_the_engine_covers_speculative_decoding(config: str) -> None:
    engine = engines.get("vllm-v1")
    assert engine.invariant_covers is None or engine.invariant_covers(
        engine.rule_config(load().configs[config].config))


def test_the_induction_step_ranges_over_the_draft_choices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """"No draft in flight is accepted" is false on concrete runs; a step that took the
    engine's default choice alone (no draft accepted) would prove it. The step's choices
    of drafts accepted refuse it."""
    real = invariant._drafts_in_flight
    monkeypatch.setattr(invariant, "_drafts_in_flight", lambda ops, x: ops.and_(
        real(ops, x), x.in_flight[0].pending_accepted == 0))
    assert _refusal("tiny_spec_async").startswith("inductive step: sat")
    assert _concretely_refused("spec_async")


@pytest.mark.parametrize("config", SPEC_CONFIGS)
def test_the_invariant_is_inductive_with_speculative_decoding(config: str) -> None:
    assert _refusal(config) == ""


def test_the_invariant_is_inductive_on_tiny_spec_async_at_three_slots() -> None:
    family, bounds = _family("tiny_spec_async")
    result = induction.prove_well_formed(family, dataclasses.replace(bounds, slots=3), 120.0)
    assert result.proved, result.reason


def test_the_invariant_is_not_inductive_where_the_engine_can_crash() -> None:
    """tiny_spec_threshold reaches scheduler.py:1372 (a padded request cut below 1 + k by
    the threshold); the rules go on from the crash with that request RUNNING and
    num_computed_tokens = threshold - k <= 0 (its k padding drafts rolled back), a state
    the invariant does not describe (properties hold vacuously after a crash)."""
    assert _refusal("tiny_spec_threshold").startswith("inductive step: sat")


def _holds_entries() -> list[tuple[str, str]]:
    return [(e.property, e.config) for e in load().entries
            if e.config in (CONFIG, *SPEC_CONFIGS) and e.expected == "HOLDS"
            and catalogue.get(e.property).kind == "step"]


def test_the_configs_have_holds_entries() -> None:
    by_config: dict[str, set[str]] = {}
    for prop, config in _holds_entries():
        by_config.setdefault(config, set()).add(prop)
    assert by_config[CONFIG] == {"budget_respected", "kv_blocks_conserved",
                                 "running_within_max_num_seqs"}
    assert set(by_config) == {CONFIG, *SPEC_CONFIGS}


@pytest.mark.parametrize("prop,config", _holds_entries())
def test_every_holds_entry_is_proved(prop: str, config: str) -> None:
    family, bounds = _family(config)
    assert induction.prove_well_formed(family, bounds, 120.0).proved
    result = induction.prove(catalogue.get(prop), family, bounds, 2, 120.0)
    assert result.proved, result.reason


@pytest.mark.parametrize("config", [CONFIG, "tiny_spec", "tiny_spec_async"])
def test_the_violated_entry_is_not_proved(config: str) -> None:
    """computed_within_tokens is VIOLATED there: placeholders and drafts count as tokens."""
    family, bounds = _family(config)
    assert induction.prove_well_formed(family, bounds, 120.0).proved
    result = induction.prove(catalogue.get("computed_within_tokens"), family, bounds, 2, 120.0)
    assert not result.proved


# --- concrete runs --------------------------------------------------------------------


def _workload(kind: str, seed: int) -> Workload:
    """The conformance generator's workload `seed`: on the AsyncScheduler ("async"), or
    with speculative decoding, synchronous ("spec") or async ("spec_async")."""
    if kind == "async":
        w = random_workload(seed, steps=20)
        w = replace(w, config=replace(w.config, async_scheduling=True))
        assert is_valid(w.config), f"seed {seed}: the generator drew a config vLLM refuses"
        return without_unsampled_eos(w)
    generate = random_spec_workload if kind == "spec" else random_spec_async_workload
    return keep_valid_choices(generate(seed, steps=20))


@cache
def _run(kind: str, seed: int) -> tuple[tuple[int, Any, Any, Any], ...]:
    """(seed, rule config, specs, state) of every state the rules reach on workload `seed`
    of `kind`, the initial one included, up to a crash (the engine is dead there, and the
    invariant does not describe it); the run is checked against the reference record by
    record, so these are the reference's states."""
    w = _workload(kind, seed)
    sw = to_slots(w)
    state = ENGINE.initial_state(len(sw.specs), sw.cfg)
    states = [(seed, sw.cfg, sw.specs, state)]
    reference = simulate(w)
    for t, eos in enumerate(sw.eos):
        state, observed = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, eos,
                                      spec=sw.spec[t] if sw.spec else None)
        if state.crashed:
            break
        assert to_record(observed, sw.ids) == reference[t], \
            f"{kind} seed {seed} step {t + 1}: the rules left the reference"
        states.append((seed, sw.cfg, sw.specs, state))
    return tuple(states)


def _runs(kind: str) -> Iterator[tuple[int, Any, Any, Any]]:
    """Every state of every run of `kind` (`_run`), seed by seed: a caller that stops
    early pays only for the runs it read."""
    for seed in SEEDS if kind == "async" else SPEC_SEEDS:
        yield from _run(kind, seed)


def _reachable(kind: str) -> tuple[tuple[int, Any, Any, Any], ...]:
    """Every state of every run of `kind`, the initial ones included."""
    return tuple(_runs(kind))


def _counts(kind: str) -> dict[str, int]:
    """Slot-states of the concrete runs the facts are about."""
    seen = {"preempted": 0, "placeholder": 0, "prefill_chunk": 0, "drafts": 0,
            "extra_blocks": 0}
    for _, cfg, _, s in _reachable(kind):
        for x in s.slots:
            seen["preempted"] += x.status == PREEMPTED
            if x.in_flight and x.status == RUNNING:
                f = x.in_flight[0]
                seen["placeholder"] += f.placeholders > 0
                seen["prefill_chunk"] += f.pending_tokens > 0 and not f.pending_sample
            if x.drafts and x.status == RUNNING:
                seen["drafts"] += x.drafts[0].count > 0
                seen["extra_blocks"] += x.blocks > -(-x.num_computed_tokens // cfg.block_size)
    return seen


# The default suite runs the async kind (4 s each); spec and spec_async run in the slow one.
@pytest.mark.parametrize("kind,facts", [
    ("async", ("preempted", "placeholder", "prefill_chunk")),
    pytest.param("spec", ("preempted", "drafts", "extra_blocks"), marks=pytest.mark.slow),
    pytest.param("spec_async", ("preempted", "placeholder", "prefill_chunk", "drafts",
                                "extra_blocks"), marks=pytest.mark.slow)])
def test_the_generated_workloads_reach_the_states_the_facts_are_about(
        kind: str, facts: tuple[str, ...]) -> None:
    seen = _counts(kind)
    assert min(seen[k] for k in facts) > 20, seen


# The default suite runs the async kind; spec and spec_async (4 s) run in the slow one (the
# default suite's wrong spec_async facts each read its runs up to a state they break).
@pytest.mark.parametrize("kind", ["async", pytest.param("spec", marks=pytest.mark.slow),
                                  pytest.param("spec_async", marks=pytest.mark.slow)])
def test_the_invariant_holds_on_every_state_of_concrete_runs(kind: str) -> None:
    states = _reachable(kind)
    for seed, cfg, specs, state in states:
        assert cfg.async_scheduling == ("async" in kind)
        assert bool(cfg.num_spec_tokens) == ("spec" in kind)
        assert invariant.well_formed(CONCRETE, cfg, specs, state), \
            f"{kind} seed {seed} step {state.step}: {state}"
    assert len(states) > (len(SEEDS) if kind == "async" else len(SPEC_SEEDS)) * 15


def _concretely_refused(kind: str = "async") -> bool:
    """Some reachable state of the concrete runs violates the (patched) invariant. It
    stops at the first one: in the default suite the spec kind's runs (4 s) are read by
    one wrong fact alone, which breaks in the first run."""
    return any(not invariant.well_formed(CONCRETE, cfg, specs, state)
               for _, cfg, specs, state in _runs(kind))


# --- wrong facts ----------------------------------------------------------------------


def _held_facts(ops: Ops, x: SlotState, stale: Any, least_sampling_chunk: int) -> Any:
    """invariant._last_schedule_in_flight with its stale fact and its bound on a sampling
    chunk's tokens (> 0) replaced."""
    f = x.in_flight[0]
    held = ops.or_(x.status == WAITING, x.status == RUNNING, x.status == PREEMPTED)
    return ops.implies(held, ops.and_(
        f.tokens == f.pending_tokens, f.pending_tokens >= 0, stale,
        ops.implies(f.pending_sample, f.pending_tokens > least_sampling_chunk)))


# One deliberately wrong form of each fact, with the config it is checked on and the runs
# that reach a state where it is false: each holds initially, so the proof fails in its
# inductive step.
WRONG_FACTS: dict[str, tuple[str, Callable[..., Any], str, str]] = {
    "a victim keeps its placeholder": ("_idle", lambda ops, x: ops.implies(
        ops.or_(x.status == ABSENT, x.status == WAITING, x.status == PREEMPTED), ops.and_(
            x.in_flight[0].placeholders == ops.to_int(x.status == PREEMPTED),
            x.in_flight[0].tokens == 0, x.in_flight[0].stale == 0,
            x.in_flight[0].pending_tokens == 0)), CONFIG, "async"),
    "what is in flight is stale": ("_last_schedule_in_flight", lambda ops, x: _held_facts(
        ops, x, x.in_flight[0].stale == x.in_flight[0].tokens, 0), CONFIG, "async"),
    "a sampling chunk has two tokens or more": ("_last_schedule_in_flight", lambda ops, x: (
        _held_facts(ops, x, x.in_flight[0].stale == 0, 1)), CONFIG, "async"),
    "the synchronous computed bound": ("_last_computed", lambda ntok, x: ntok - 1,
                                       CONFIG, "async"),
    "a computed bound one lower": ("_last_computed", lambda ntok, x: (
        ntok + x.in_flight[0].placeholders - 2), CONFIG, "async"),
    "exactly the computed tokens' blocks, drafts on": ("_blocks_held", lambda ops, cfg, x: (
        x.blocks == ops.cdiv(x.num_computed_tokens, cfg.block_size)), "tiny_spec_eagle",
        "spec"),
    "one placeholder whatever the drafts": ("_running_placeholders", lambda ops, cfg, x: (
        ops.implies(x.status == RUNNING, x.in_flight[0].placeholders
                    == ops.ite(x.in_flight[0].pending_sample, 1, 0))), "tiny_spec_async",
        "spec_async"),
    "a placeholder per scheduled chunk": ("_running_placeholders", lambda ops, cfg, x: (
        ops.implies(x.status == RUNNING, x.in_flight[0].placeholders == ops.ite(
            x.in_flight[0].pending_tokens > 0, 1 + x.in_flight[0].pending_spec, 0))),
        "tiny_spec_async", "spec_async"),
    "a sampled request computes one token less": ("_sampled_computes_all", lambda ops, n, x: (
        ops.implies(ops.and_(x.status == RUNNING, x.in_flight[0].pending_sample),
                    x.num_computed_tokens == n + x.in_flight[0].placeholders - 2)),
        "tiny_spec_async", "spec_async"),
    "no draft in flight is accepted": ("_drafts_in_flight", lambda ops, x: (
        ops.and_(x.in_flight[0].pending_accepted == 0)), "tiny_spec_async", "spec_async"),
}


@pytest.mark.parametrize("fact", WRONG_FACTS)
def test_a_wrong_fact_is_refused(monkeypatch: pytest.MonkeyPatch, fact: str) -> None:
    name, wrong, config, kind = WRONG_FACTS[fact]
    monkeypatch.setattr(invariant, name, wrong)
    assert _refusal(config).startswith("inductive step: sat")
    assert _concretely_refused(kind)


@pytest.mark.parametrize("fact,config", [
    ("_idle", CONFIG), ("_last_schedule_in_flight", CONFIG),
    ("_running_placeholders", "tiny_spec_async"), ("_sampled_computes_all", "tiny_spec_async"),
    ("_drafts_in_flight", "tiny_spec_async")])
def test_each_in_flight_fact_is_needed(monkeypatch: pytest.MonkeyPatch, fact: str,
                                       config: str) -> None:
    monkeypatch.setattr(invariant, fact, lambda *args: True)
    assert _refusal(config).startswith("inductive step: sat")


@pytest.mark.parametrize("config", ["tiny_spec", "tiny_spec_eagle", "tiny_spec_async"])
def test_the_blocks_of_a_running_request_need_a_bound(monkeypatch: pytest.MonkeyPatch,
                                                      config: str) -> None:
    monkeypatch.setattr(invariant, "_blocks_held", lambda *args: True)
    assert _refusal(config).startswith("inductive step: sat")


def test_the_synchronous_invariant_is_not_inductive_under_async(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the in-flight facts (the invariant before them) the proof fails."""
    monkeypatch.setattr(invariant, "_in_flight", lambda *args: [])
    monkeypatch.setattr(invariant, "_last_computed", lambda ntok, x: ntok - 1)
    assert _refusal().startswith("inductive step: sat")


def test_a_synchronous_slot_takes_no_in_flight_fact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without async the invariant's terms are the synchronous ones: no in-flight fact is
    built (a synchronous slot has no InFlight)."""
    def absent(*args: Any) -> Any:
        raise AssertionError("an in-flight fact on a synchronous slot")

    monkeypatch.setattr(invariant, "_in_flight", absent)
    assert _refusal("tiny_fcfs") == ""


# --- wrong rules ----------------------------------------------------------------------


def _ite(c: Any, a: Any, b: Any) -> Any:
    """If-then-else over a concrete or z3 condition (for patched rules)."""
    return z3.If(c, a, b) if isinstance(c, z3.ExprRef) else (a if c else b)


def test_placeholders_that_never_advance_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An async update that forgets the sampled token's placeholder (A:25-56): the next
    schedule would then ask for one token fewer than its known tokens."""
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


def test_rejected_drafts_that_are_not_rolled_back_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A synchronous update that keeps the rejected drafts computed (scheduler.py:2113-2126
    rolls them back): a request would have computed past its last token."""
    monkeypatch.setattr(rules, "_rolled_back", lambda ops, w, i, ncomp, sampled, acc: ncomp)
    assert _refusal("tiny_spec").startswith("inductive step: sat")


def test_more_accepted_drafts_than_scheduled_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Accepting drafts that were never scheduled (the rules cut the choice to those
    scheduled): under async the rollback would take placeholders below 0."""
    k = load().configs["tiny_spec_async"].config.num_speculative_tokens

    def wrong(ops: Ops, cfg: Any, w: Any, i: int, spec: Any) -> tuple[Any, Any]:
        chosen = spec[i][0] if spec is not None else 0
        return ops.min(ops.max(chosen, 0), k), k

    monkeypatch.setattr(rules, "_spec_choice", wrong)
    assert _refusal("tiny_spec_async").startswith("inductive step: sat")
