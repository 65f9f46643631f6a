"""vLLM V1's well-formedness invariant with prefix caching on (model/vllm/invariant.py:
the pool's ref counts, free count, free-queue and cache orders): it holds on every state
of concrete runs that agree with the reference, synchronous and async; k-induction proves
it inductive on a small cached family here (both schedulers) and on tiny_cached in the
slow suite, where it proves every HOLDS entry of tiny_cached; a wrong rule of the pool or
a missing fact makes its proof fail, naming the conjunct that breaks."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from typing import Any

import pytest

from checker.conformance.generate import random_async_prefix_workload, random_prefix_workload
from checker.methods import induction, proof_cache
from checker.methods.jobs import family_of, symbolic_bounds
from checker.methods.symbolic import Bounds, Family
from model.core.ops import CONCRETE
from model.run import without_unsampled_eos
from model.slots import to_slots
from model.vllm import cache_rules, invariant
from model.vllm.engine import ENGINE
from model.vllm.records import to_record
from model.vllm.reference import simulate
from properties import catalogue
from properties.manifest import load

CONFIG = "tiny_cached"
# tiny_cached cut to a pool of 3 blocks and 3-entry tables: the same rules, a proof in
# seconds rather than minutes.
SMALL = dict(num_gpu_blocks=4, max_model_len=6)
SEEDS = {"sync": range(12), "async": range(6)}  # the async runs cost twice as much

# Every test sees the rules and invariant it patches, not a cached proof; the default
# suite's tests of the module run on one worker (tests/conftest.py, GROUPED).
pytestmark = pytest.mark.usefixtures("fresh_induction_caches")


def _family(config: str = CONFIG, **changes: Any) -> tuple[Family, Bounds]:
    nc = load().configs[config]
    if changes:
        nc = replace(nc, config=replace(nc.config, **changes))
    return family_of(nc), symbolic_bounds(nc)


def _refusal(**changes: Any) -> str:
    """Why the invariant proof on the small cached family fails ("" when proved)."""
    family, bounds = _family(**{**SMALL, **changes})
    result = induction.prove_well_formed(family, bounds, 300.0)
    return "" if result.proved else result.reason


# --- proofs ---------------------------------------------------------------------------


def test_the_engine_covers_prefix_caching_on_small_pools_only() -> None:
    configs = load().configs
    assert ENGINE.invariant_covers(ENGINE.rule_config(configs[CONFIG].config))
    # 8-block pools: the proof is not finished in minutes (three of its 46 conjuncts are
    # undecided after a minute each); BMC, which would strengthen with it, and the explorer
    # decide. (Taking them in made BMC spend its time limit on the proof: 3.6 s -> over
    # 300 s for sampled_within_max_model_len on tiny_spec_cached.)
    assert not ENGINE.invariant_covers(ENGINE.rule_config(configs["tiny_spec_cached"].config))


def test_an_undecided_step_names_every_conjunct_it_could_not_decide(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each conjunct gets its share of the time, the undecided ones a second try with what
    is left, and the reason lists all of them: one hard conjunct does not hide the rest."""
    hard = {"r0: block table", "free blocks = blocks nobody holds"}
    asked: list[str] = []
    real_after = induction._after_facts

    def after(engine, rel, defs):
        facts = real_after(engine, rel, defs)
        by_term = {fact.get_id(): name for name, fact in facts}
        monkeypatch.setattr(induction, "_unsat", lambda t, *a: unsat(by_term, t, *a))
        return facts

    def unsat(by_term, timeout_s, *assertions):
        name = by_term.get(assertions[-1].arg(0).get_id())
        if name is None:
            return True, ""  # the base case
        asked.append(name)
        return (False, "unknown (timeout)") if name in hard else (True, "")

    monkeypatch.setattr(induction, "_after_facts", after)
    family, bounds = _family(**SMALL)
    result = induction._prove_well_formed(family, bounds, 60.0)
    assert not result.proved
    assert result.reason.startswith("inductive step: unknown (timeout) on 2 of ")
    assert "(r0: block table; free blocks = blocks nobody holds)" in result.reason
    assert "none shown broken" in result.reason and " sat" not in result.reason
    assert asked.count("r0: block table") == 2 and asked.count("r1: block table") == 1


# The async proof (20 s) is deep: its fast siblings are this proof on the synchronous
# Scheduler and the async proofs without the cache (tests/test_vllm_invariant_async.py).
@pytest.mark.parametrize("async_scheduling", [
    False, pytest.param(True, marks=pytest.mark.slow)], ids=["sync", "async"])
def test_the_invariant_is_inductive_on_a_small_cached_family(async_scheduling: bool) -> None:
    assert _refusal(async_scheduling=async_scheduling) == ""


def test_a_proof_out_of_time_is_undecided_not_refuted() -> None:
    family, bounds = _family()  # tiny_cached: its free-count query alone takes a minute
    with proof_cache.disabled():  # the proof itself, not a run's stored one
        result = induction.prove_well_formed(family, bounds, 2.0)
    assert not result.proved
    assert result.reason.startswith("inductive step: ") and "sat" not in result.reason, \
        result.reason


def _holds_entries() -> list[str]:
    return [e.property for e in load().entries
            if e.config == CONFIG and e.expected == "HOLDS"
            and catalogue.get(e.property).kind == "step"]


def test_tiny_cached_has_holds_entries() -> None:
    assert set(_holds_entries()) == {
        "kv_blocks_conserved", "budget_respected", "computed_within_tokens",
        "no_admission_after_preemption", "admitted_with_tokens", "prefix_hit_whole_blocks"}


def test_holds_entries_are_proved_on_the_small_family() -> None:
    family, bounds = _family(**SMALL)  # one proof of the invariant for the three
    for prop in ("kv_blocks_conserved", "prefix_hit_whole_blocks", "admitted_with_tokens"):
        result = induction.prove(catalogue.get(prop), family, bounds, 2, 300.0)
        assert result.proved, (prop, result.reason)


def _check_json(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, list[dict]]:
    from checker.cli.main import main

    code = main(["check", "--manifest-config", CONFIG, "--json", "-q", "--jobs", "1", *flags])
    return code, json.loads(capsys.readouterr().out)["verdicts"]


# Two tests, not one: a test that patches gets an empty proof store (tests/conftest.py),
# and the theorem's proof, which the store holds, took 6 s of CPU in the patched one.
def test_auto_decides_the_row_by_the_loop_theorem(capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    # The loop theorem decides this row first (tests/test_theorems_deployed.py).
    code, (row,) = _check_json(capsys, "--property", "no_admission_after_preemption")
    assert code == 0 and row["verdict"] == "PROVED" and row["method"] == "theorem"


@pytest.mark.slow
def test_auto_proves_the_row_over_the_counted_cache_without_the_theorem(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the loop theorem, k-induction over the counted pool (Family.counted, whose
    # invariant proves in seconds at any pool size) decides it.
    from checker.methods import jobs
    monkeypatch.setattr(jobs.theorems, "for_engine", lambda engine: {})
    code, (row,) = _check_json(capsys, "--property", "no_admission_after_preemption")
    assert code == 0 and row["verdict"] == "PROVED" and row["method"] == "induction"
    assert "over the engine's abstracted rules (the prefix cache is counted" in row["detail"]


def test_auto_leaves_a_slow_invariant_proof_untried_and_says_so(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the loop theorem (test_auto_decides_the_row_by_the_loop_theorem) and the
    # counted cache's induction, auto must skip the minutes-long invariant proof over the
    # exact pool, say so, and run BMC.
    from checker.methods import jobs
    monkeypatch.setattr(jobs.theorems, "for_engine", lambda engine: {})
    monkeypatch.setattr(jobs, "_counted_induction", lambda *args: None)
    code, (row,) = _check_json(capsys, "--property", "no_admission_after_preemption")
    assert code == 0 and row["verdict"] == "HOLDS" and row["depth"] == 3 and row["method"] == "bmc"
    assert "induction not tried: the invariant's proof over this prefix-cache pool takes " \
        "minutes (--method induction tries it)" in row["detail"]


@pytest.mark.slow
def test_check_method_induction_proves_every_holds_entry_of_tiny_cached(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every HOLDS entry by k-induction over the counted cache (the loop theorems, which
    decide these rows first, are hidden: this is k-induction's test); the VIOLATED entry
    by auto's BMC (under --method induction it would first pay the exact pool's invariant,
    about 150 s, which the 3-block family above proves in the default suite)."""
    from checker.methods import jobs
    monkeypatch.setattr(jobs.theorems, "for_engine", lambda engine: {})
    rows = []
    for prop in _holds_entries():
        code, (row,) = _check_json(capsys, "--method", "induction", "--property", prop,
                                   "--timeout", "900")
        assert code == 0 and row["verdict"] == "PROVED", row
        assert row["method"] == "induction" and "abstracted rules" in row["detail"], row
        rows.append(row)
    assert len(rows) == 6
    code, (row,) = _check_json(capsys, "--property", "resumed_recomputes_all")
    assert code == 0 and row["verdict"] == "VIOLATED"


def test_the_violated_entry_is_not_proved() -> None:
    """resumed_recomputes_all is VIOLATED with the cache: a victim hits its own blocks."""
    family, bounds = _family(**SMALL)
    result = induction.prove(catalogue.get("resumed_recomputes_all"), family, bounds, 2,
                             300.0)
    assert not result.proved


# --- concrete runs --------------------------------------------------------------------


@cache
def _reachable(kind: str = "sync") -> tuple[tuple[int, Any, Any, Any], ...]:
    """(seed, rule config, specs, state) of every state the rules reach on the prefix
    mode's conformance workloads, synchronous or on the AsyncScheduler, each run checked
    against the reference record by record (so these are the reference's states)."""
    generate = random_prefix_workload if kind == "sync" else random_async_prefix_workload
    states = []
    for seed in SEEDS[kind]:
        w = without_unsampled_eos(generate(seed, steps=16))
        sw = to_slots(w)
        state = ENGINE.initial_state(len(sw.specs), sw.cfg)
        states.append((seed, sw.cfg, sw.specs, state))
        reference = simulate(w)
        for t, eos in enumerate(sw.eos):
            state, observed = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, eos)
            assert to_record(observed, sw.ids) == reference[t], \
                f"seed {seed} step {t + 1}: the rules left the reference"
            states.append((seed, sw.cfg, sw.specs, state))
    return tuple(states)


@pytest.mark.slow  # about 10 s each: long conformance runs (the small family stays fast)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_runs_reach_shared_and_evictable_blocks(kind: str) -> None:
    shared = evictable = 0
    for _, _, _, s in _reachable(kind):
        shared += any(b.ref_cnt > 1 for b in s.pool)
        evictable += any(b.ref_cnt == 0 and b.block_hash != 0 for b in s.pool)
    assert shared > 20 and evictable > 20, (shared, evictable)


@pytest.mark.slow  # about 10 s each: long conformance runs (the small family stays fast)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_invariant_holds_on_every_state_of_concrete_runs(kind: str) -> None:
    states = _reachable(kind)
    for seed, cfg, specs, state in states:
        assert cfg.prefix_caching and cfg.async_scheduling == (kind == "async")
        broken = [name for name, fact in invariant.facts(CONCRETE, cfg, specs, state)
                  if not fact]
        assert not broken, f"seed {seed} step {state.step}: {broken}"
    assert len(states) > len(SEEDS[kind]) * 12


# --- wrong rules and missing facts ----------------------------------------------------


@pytest.mark.slow
def test_a_release_that_frees_a_shared_block_is_refused(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A release that drops a shared block's ref_cnt to 0 (as if one holder were all)."""
    real = cache_rules.release

    def wrong(ops: Any, cfg: Any, c: Any, slot: int, num_blocks: Any, do: Any) -> Any:
        for b in range(len(c.ref)):
            mine = ops.or_(*[ops.and_(do, j < num_blocks, e == b + 1)
                             for j, e in enumerate(c.table[slot])])
            c.ref[b] = ops.ite(ops.and_(mine, c.ref[b] > 1), 1, c.ref[b])
        return real(ops, cfg, c, slot, num_blocks, do)

    monkeypatch.setattr(cache_rules, "release", wrong)
    assert "ref_cnt = table positions naming it" in _refusal()


def test_the_pool_facts_are_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without them the block tables' facts are not inductive: a table names blocks the
    pool may give to another request."""
    monkeypatch.setattr(invariant, "_pool", lambda *args: [])
    assert _refusal().startswith("inductive step: sat (breaks: r0: block table")


@pytest.mark.slow  # about 45 s; the async proof on the small family stays in the default
@pytest.mark.parametrize("fact", ["_delivery_order", "_running_placeholders"])
def test_each_in_flight_fact_is_needed_with_the_cache(monkeypatch: pytest.MonkeyPatch,
                                                      fact: str) -> None:
    """On the AsyncScheduler the cache caches up to the computed tokens less the
    placeholders, in delivery order: the facts about both are needed."""
    monkeypatch.setattr(invariant, fact, lambda *args: True)
    assert _refusal(async_scheduling=True).startswith("inductive step: sat")


@pytest.mark.slow
def test_the_order_facts_are_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of one hash entered the cache in a total order: without it a lookup may
    adopt two copies of one block at once, and the free count breaks."""
    real = invariant._pool
    monkeypatch.setattr(invariant, "_pool", lambda ops, cfg, s: [
        (name, fact) for name, fact in real(ops, cfg, s) if "cache order" not in name])
    assert _refusal().startswith("inductive step: sat")
