"""The for-every-number-of-requests theorems with prefix caching on
(docs/parameterised_proofs.md, "With prefix caching on"): the cache is abstracted (any hit
the exact lookup can return, any free-block count), the exact lookup is checked to refine
that abstraction, and each proof fails on a deliberately wrong abstraction or rule."""

from dataclasses import replace

import pytest
import z3

from checker.methods.jobs import Job, run
from checker.methods.symbolic import Family
from checker.methods.theorems import for_engine
from checker.methods.theorems import vllm_v1 as theorems
from checker.methods.theorems import vllm_v1_loops as loops
from model import registry
from model.vllm import cache_rules
from model.vllm.config import Config, VllmRules
from properties.manifest import custom_config, with_bounds

CACHED = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
                num_gpu_blocks=5, enable_prefix_caching=True)
WITH_CACHE = ("budget_respected", "running_within_max_num_seqs",
              "no_admission_after_preemption", "computed_within_tokens",
              "whole_prompt_without_chunking", "running_before_waiting",
              "preempted_requeued", "admitted_with_tokens")


def _theorem(prop):
    return for_engine(registry.get("vllm-v1"))[prop]


@pytest.mark.parametrize("prop", WITH_CACHE)
def test_each_theorem_covers_prefix_caching(prop):
    assert _theorem(prop).broken(Family(base=CACHED)) == ()
    result = _theorem(prop).prove(60)
    assert result.proved, result.detail
    assert "with prefix caching on, the same argument on the abstracted cache" in result.detail
    assert "the exact lookup refines the abstract hit" in result.detail


def test_kv_conservation_is_not_claimed_with_the_cache():
    # The abstraction forgets the free count, so the KV argument cannot go through on it:
    # the theorem keeps its premise and leaves cached families to the slot model.
    assert [p.name for p in _theorem("kv_blocks_conserved").broken(Family(CACHED))] == [
        "plain_synchronous_scheduler"]
    result = loops._prove(theorems._kv_argument(), 30, "mutated", cached=True)
    assert not result.proved


@pytest.mark.parametrize("base", [replace(CACHED, async_scheduling=True),
                                  replace(CACHED, speculative_method="ngram",
                                          num_speculative_tokens=2)])
@pytest.mark.parametrize("prop", WITH_CACHE)
def test_async_and_speculative_families_stay_outside(prop, base):
    assert "synchronous_scheduler_without_drafts" in [
        p.name for p in _theorem(prop).broken(Family(base=base))]


def test_an_uncapped_hit_is_outside_the_admission_theorem():
    uncapped = replace(CACHED, rules=VllmRules(cap_prefix_hit=False))
    assert [p.name for p in _theorem("admitted_with_tokens").broken(Family(uncapped))] == [
        "prefix_hit_capped"]
    # ... and the other theorems do not need the cap.
    assert _theorem("computed_within_tokens").broken(Family(uncapped)) == ()


def test_the_admission_proof_fails_without_the_cap():
    # tiny_cached_uncapped's finding (vllm-project/vllm#30320): a hit of the whole prompt
    # leaves 0 tokens to schedule.
    result = loops._prove(theorems._admitted_argument(), 30, "mutated", cached=True,
                          capped=False)
    assert not result.proved and result.detail.startswith("waiting-loop iteration")


@pytest.mark.parametrize("capped", [True, False])
def test_the_exact_lookup_refines_the_abstract_hit(capped):
    result = loops.lookup_refines_abstract_hit(60, capped)
    assert result.proved, result.detail


def test_the_refinement_fails_for_a_lookup_past_the_cap(monkeypatch):
    real = cache_rules.lookup

    def greedy(ops, cfg, c, specs, sel, num_tokens):  # one more block than it found
        hit = real(ops, cfg, c, specs, sel, num_tokens)
        return replace(hit, blocks=hit.blocks + 1)
    monkeypatch.setattr(cache_rules, "lookup", greedy)
    result = loops.lookup_refines_abstract_hit(60, True)
    assert not result.proved and result.detail.startswith("lookup refinement")


def test_the_computed_proof_fails_when_the_hit_is_not_charged(monkeypatch):
    # An admission that starts from its hit must ask only for what it lacks beyond it: a
    # rule that asks for the whole sequence again computes past num_tokens.
    admit = loops._Loops.admit

    def whole_again(self, acc, sel, other, stopped, eligible):
        acc2, stopped2, hyps, new = admit(self, acc, sel, other, stopped, eligible)
        # The admitted request is scheduled its hit's tokens again.
        again = replace(new[0], scheduled=new[0].scheduled + new[0].hit)
        return acc2, stopped2, hyps, [again, new[1]]
    monkeypatch.setattr(loops._Loops, "admit", whole_again)
    result = loops._prove(theorems._computed_argument(), 30, "mutated", cached=True)
    assert not result.proved and result.detail.startswith("waiting-loop iteration")


def test_the_whole_prompt_proof_reads_the_hit():
    # Without the hit in its invariant the cached argument does not go through: the
    # property is "all it lacks beyond its prefix hit".
    def each(l_, acc, r, stage):
        if stage == "waiting":
            return z3.Or(l_.cfg.enable_chunked_prefill,
                         z3.Implies(loops._joined(r), r.scheduled == r.ntok))
        return theorems._whole_prompt_each(l_, acc, r, stage)
    argument = replace(theorems._whole_prompt_argument(), each=each)
    assert loops._prove(argument, 30, "exact").proved
    result = loops._prove(argument, 30, "mutated", cached=True)
    assert not result.proved and result.detail.startswith("waiting-loop iteration")


def test_a_job_on_a_cached_family_is_proved_by_the_theorem():
    nc = with_bounds(custom_config("cached", CACHED), slots=2, depth=3, max_prompt_len=3,
                     max_max_tokens=2)
    job = Job(engine="vllm-v1", property="admitted_with_tokens", params=(), config=nc,
              expected=None, timeout_s=120)
    res = run(job)
    assert res.verdict.verdict == "PROVED" and res.verdict.method == "theorem"
    assert "abstracted cache" in res.verdict.detail
