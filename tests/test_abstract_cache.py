"""The counted prefix cache (model/vllm/abstract_cache.py) over-approximates the exact pool:
every run of the exact rules is a run of the counted rules. Checked by replaying exact runs
through the counted rules with the choices the exact pool made (each lookup's hit and
evictable blocks, each release's freed blocks): the counted rules must take every one of
them unclamped and agree on every observable but the two the counts do not know (cached
and evictable blocks). Mutations of the abstraction that forget something the exact pool
does must fail that replay."""

import json
from dataclasses import fields, replace

import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rules_refinement import cached_workloads

from checker.cli.main import main
from checker.methods import jobs
from model.core.ops import CONCRETE
from model.core.types import RequestSpec, Workload
from model.run import without_unsampled_eos
from model.slots import to_slots
from model.vllm import abstract_cache, cache_rules, rules
from model.vllm.config import Config
from model.vllm.engine import ENGINE
from model.vllm.state import counted_cache

_UNKNOWN_TO_COUNTS = ("cached_blocks", "evictable_blocks", "cfg")

# a test that patches the counted rules proves them anew, not from a cached proof
pytestmark = pytest.mark.usefixtures("fresh_induction_caches")


def _record_choices(monkeypatch, choices):
    """Wrap the rules' cache calls to record, per slot, what the exact pool decided."""
    lookup, release = rules._lookup, rules._release

    def recording_lookup(ops, cfg, w, specs, sel, total):
        hit = lookup(ops, cfg, w, specs, sel, total)
        if isinstance(hit, cache_rules.Hit) and True in sel:
            slot = sel.index(True)
            got = {"hit": hit.blocks, "evictable": hit.evictable}
            assert choices[slot].get("hit", got["hit"]) == got["hit"], "two lookups differ"
            choices[slot].update(got)
        return hit

    finishing = []  # inside the release of the step's finished requests

    def recording_release(ops, cfg, w, i, do):
        freed = release(ops, cfg, w, i, do)
        if do and not cfg.abstract_cache:
            key = "freed_finished" if finishing else "freed_preempted"
            assert key not in choices[i], "a slot released twice in one step"
            choices[i][key] = freed
        return freed

    def finishing_in(f):
        def wrapped(*args):
            finishing.append(True)
            try:
                return f(*args)
            finally:
                finishing.pop()
        return wrapped

    monkeypatch.setattr(rules, "_lookup", recording_lookup)
    monkeypatch.setattr(rules, "_release", recording_release)
    for name in ("_release_finished", "_deliver_to_cache"):
        monkeypatch.setattr(rules, name, finishing_in(getattr(rules, name)))


def _state_view(state):
    slots = tuple(replace(s, table=(), num_cached=0) for s in state.slots)
    return replace(state, slots=slots, pool=(), queue_tail=0, next_cached_at=0)


def _step_view(observed):
    return {f.name: getattr(observed, f.name) for f in fields(observed)
            if f.name not in _UNKNOWN_TO_COUNTS}


def replay_counted(w: Workload, monkeypatch) -> None:
    """Run `w` on the exact rules and, step by step, on the counted rules with the exact
    pool's choices; assert both agree."""
    sw = to_slots(without_unsampled_eos(w))
    assert sw.cfg.prefix_caching and not sw.cfg.abstract_cache
    counted = counted_cache(sw.cfg)
    n = len(sw.specs)
    exact_state = ENGINE.initial_state(n, sw.cfg)
    counted_state = ENGINE.initial_state(n, counted)
    for t, eos in enumerate(sw.eos, start=1):
        choices: list[dict[str, int]] = [{} for _ in range(n)]
        with monkeypatch.context() as m:
            _record_choices(m, choices)
            exact_state, exact_obs = ENGINE.step(CONCRETE, sw.cfg, sw.specs, exact_state, eos)
        pool = [tuple(c.get(k, 0) for k in counted.pool_choices) for c in choices]
        counted_state, counted_obs = ENGINE.step(CONCRETE, counted, sw.specs, counted_state,
                                                 eos, pool=pool)  # type: ignore[call-arg]
        assert _step_view(counted_obs) == _step_view(exact_obs), f"step {t}, choices {pool}"
        assert _state_view(counted_state) == _state_view(exact_state), f"after step {t}"


@settings(max_examples=examples(60))  # the default suite's share: both rules per example
@given(cached_workloads())
def test_every_exact_run_is_a_counted_run(w):
    with pytest.MonkeyPatch.context() as monkeypatch:
        replay_counted(w, monkeypatch)


@settings(max_examples=examples(60))  # the default suite's share: both rules per example
@given(cached_workloads())
def test_every_exact_run_is_a_counted_run_under_async_scheduling(w):
    w = replace(w, config=replace(w.config, async_scheduling=True))
    with pytest.MonkeyPatch.context() as monkeypatch:
        replay_counted(w, monkeypatch)


def _group_workload() -> Workload:
    """r0 computes a shared prefix of 4 blocks; r1 of the same group arrives later and hits
    it while r0 still holds it; r0 finishes first, so its release frees only its own
    blocks."""
    cfg = Config(max_num_batched_tokens=32, max_num_seqs=4, max_model_len=32, block_size=2,
                 num_gpu_blocks=30, enable_prefix_caching=True)
    reqs = (RequestSpec(id="r0", prompt_len=9, max_tokens=2, arrival_step=1,
                        prefix_group="a", shared_prefix_len=8),
            RequestSpec(id="r1", prompt_len=9, max_tokens=4, arrival_step=2,
                        prefix_group="a", shared_prefix_len=8))
    return Workload(config=cfg, requests=reqs, eos=(), steps=6)


def test_the_group_workload_shares_blocks_on_the_exact_pool(monkeypatch):
    # the premise of the mutation tests below: a hit on held blocks, a partial release
    replay_counted(_group_workload(), monkeypatch)
    sw = to_slots(_group_workload())
    state, hits, shared = ENGINE.initial_state(2, sw.cfg), [], []
    for eos in sw.eos:
        state, observed = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, eos)
        hits += [o.prefix_hit for o in observed.slots]
        shared.append(observed.shared_blocks)
    assert max(hits) == 8 and max(shared) == 4


@pytest.mark.parametrize("mutation", ["no group hits", "no held hits", "release frees all",
                                      "nothing cached"])
def test_an_abstraction_that_forgets_what_the_pool_allows_fails_the_replay(
        mutation, monkeypatch):
    if mutation == "no group hits":
        monkeypatch.setattr(abstract_cache, "_from_group", lambda ops, *a: 0)
    elif mutation == "no held hits":
        lookup = abstract_cache.lookup
        monkeypatch.setattr(abstract_cache, "lookup", lambda ops, cfg, c, specs, sel, n, h:
                            lookup(ops, cfg, c, specs, sel, n, [0] * len(h)))
    elif mutation == "release frees all":
        give_up = abstract_cache._give_up
        monkeypatch.setattr(abstract_cache, "_give_up",
                            lambda ops, c, raw, n: give_up(ops, c, 10**6, n))
    else:
        monkeypatch.setattr(abstract_cache, "cache", lambda *a: None)
    with pytest.raises(AssertionError):
        replay_counted(_group_workload(), monkeypatch)


# The serve defaults at a deployment's size: 26,000 blocks of 16 tokens, 32k context.
_DEPLOYED = ["--max-num-batched-tokens", "8192", "--max-num-seqs", "256", "--block-size",
             "16", "--num-gpu-blocks-override", "26000", "--max-model-len", "32768",
             "--requests", "2", "--depth", "6", "--timeout", "60"]


def test_a_question_at_deployment_size_is_answered_over_the_counted_cache(capsys):
    # a window property: BMC over the counted pool (k-induction takes step properties)
    code = main(["check", *_DEPLOYED, "--property", "starvation:k=3", "--json"])
    out, err = capsys.readouterr()
    assert "the prefix cache is counted, not carried block by block" in err
    assert code == 0, out + err
    [row] = json.loads(out)["verdicts"]
    assert row["verdict"] == "HOLDS" and row["depth"] == 6 and row["method"] == "bmc"
    assert "over-approximation" in row["detail"]


@pytest.mark.slow
def test_a_step_property_at_deployment_size_is_proved_over_the_counted_cache(capsys,
                                                                            monkeypatch):
    # The loop theorem decides this property first (for every number of requests, c9a42fe);
    # hidden, k-induction over the counted cache proves it on the job's slots.
    args = ["check", *_DEPLOYED, "--property", "sampled_within_max_model_len", "--json"]
    code = main(args)
    [row] = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 0 and row["verdict"] == "PROVED" and row["method"] == "theorem"
    monkeypatch.setattr(jobs.theorems, "for_engine", lambda engine: {})
    code = main(args)
    [row] = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 0 and row["verdict"] == "PROVED" and row["method"] == "induction"
    assert "over the engine's abstracted rules (the prefix cache is counted" in row["detail"]


def test_a_counted_witness_is_kept_only_once_the_exact_reference_confirms_it(capsys):
    code = main(["check", *_DEPLOYED, "--property", "computed_within_tokens", "--json"])
    out, _ = capsys.readouterr()
    [row] = json.loads(out)["verdicts"]
    assert code == 1 and row["verdict"] == "VIOLATED"
    assert "replayed on the reference with the exact pool" in row["detail"]


# --- k-induction over the counted cache ------------------------------------------------

def _counted_family(asynchronous: bool = False):
    from checker.methods.symbolic import Bounds, Family
    cfg = Config(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64, block_size=2,
                 num_gpu_blocks=64, enable_prefix_caching=True, async_scheduling=asynchronous)
    return Family(base=cfg, counted=True), Bounds(slots=2)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_counted_invariant_proves_and_so_do_the_pool_properties(asynchronous):
    from checker.methods import induction
    from properties import catalogue
    family, bounds = _counted_family(asynchronous)
    assert induction.prove_well_formed(family, bounds, 120).proved
    for prop in ("kv_blocks_conserved", "prefix_hit_whole_blocks", "admitted_with_tokens"):
        result = induction.prove(catalogue.get(prop), family, bounds, 2, 120)
        assert result.proved, (prop, result.reason)
    # not vacuous: a property the cache breaks is not proved over the counted pool either
    assert not induction.prove(catalogue.get("resumed_recomputes_all"), family, bounds, 2,
                               120).proved


def test_a_release_that_frees_what_others_hold_breaks_the_counted_invariant(monkeypatch):
    from checker.methods import induction
    give_up = abstract_cache._give_up
    # frees the positions themselves, shared or not: the pool's in-use count can go
    # below zero (freeing a block twice)
    monkeypatch.setattr(abstract_cache, "_give_up",
                        lambda ops, c, raw, n: give_up(ops, c, raw, n) * 0 + n)
    family, bounds = _counted_family()
    result = induction.prove_well_formed(family, bounds, 120)
    assert not result.proved and "in use <= table positions" in result.reason, result.reason


def test_a_hit_that_ignores_the_cap_is_not_proved_admitted_with_tokens(monkeypatch):
    from checker.methods import induction
    from properties import catalogue
    lookup = abstract_cache.lookup

    def uncapped(ops, cfg, c, specs, sel, n, holders):
        return lookup(ops, replace(cfg, cap_prefix_hit=False), c, specs, sel, n, holders)
    monkeypatch.setattr(abstract_cache, "lookup", uncapped)
    family, bounds = _counted_family()
    # a hit of every token leaves a running request with nothing left to compute: the
    # invariant's RUNNING conjunct breaks, and the property is not proved either
    wf = induction.prove_well_formed(family, bounds, 120)
    assert not wf.proved and "r0: RUNNING" in wf.reason, wf.reason
    assert not induction.prove(catalogue.get("admitted_with_tokens"), family, bounds, 2,
                               120).proved


@settings(max_examples=examples(40))  # each run twice over with drafts: the slowest
@given(cached_workloads(), st.sampled_from([("ngram", 2), ("eagle", 1), ("eagle3", 3)]),
       st.booleans())
def test_every_exact_run_is_a_counted_run_with_speculative_decoding(w, spec, asynchronous):
    # lookahead slots and rejected drafts keep their blocks; EAGLE drops a hit's last block
    method, k = spec
    w = replace(w, config=replace(w.config, speculative_method=method,
                                  num_speculative_tokens=k, async_scheduling=asynchronous))
    with pytest.MonkeyPatch.context() as monkeypatch:
        replay_counted(w, monkeypatch)


@pytest.mark.parametrize("group", [1, 3, 16])
def test_a_group_number_beyond_the_slots_names_no_other_requests_blocks(group):
    # cache_rules.block_hash once numbered group g's blocks into slot g-N-1's own chain:
    # with 2 slots, r1 in group 3 hit r0's unrelated blocks (found by the counted cache's
    # refinement proof). Any group number gives the hits the reference gives.
    cfg = Config(max_num_batched_tokens=32, max_num_seqs=4, max_model_len=8, block_size=2,
                 num_gpu_blocks=9, enable_prefix_caching=True)
    reqs = (RequestSpec(id="r0", prompt_len=5, max_tokens=1, arrival_step=1),
            RequestSpec(id="r1", prompt_len=5, max_tokens=1, arrival_step=3,
                        prefix_group="a", shared_prefix_len=4))
    sw = to_slots(Workload(config=cfg, requests=reqs, eos=(), steps=4))
    specs = [sw.specs[0], replace(sw.specs[1], prefix_group=group)]
    state, hits = ENGINE.initial_state(2, sw.cfg), []
    for eos in sw.eos:
        state, observed = ENGINE.step(CONCRETE, sw.cfg, specs, state, eos)
        hits.append([o.prefix_hit for o in observed.slots])
    assert hits == [[0, 0]] * 4  # r0 shares nothing: no hit for r1, in any step
