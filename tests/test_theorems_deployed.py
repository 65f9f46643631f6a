"""The for-every-number-of-requests theorems in the deployed mode
(docs/parameterised_proofs.md, "With prefix caching on" and "On the AsyncScheduler"): the
cache is abstracted (any hit the exact lookup can return, any free-block count) and so is
the AsyncScheduler's in-flight state; the exact lookup is checked to refine the abstract
hit, and each proof fails on a deliberately wrong abstraction or rule."""

from dataclasses import replace

import pytest
import z3

from checker.methods.jobs import Job, run
from checker.methods.symbolic import Family
from checker.methods.theorems import for_engine
from checker.methods.theorems import vllm_v1 as theorems
from checker.methods.theorems import vllm_v1_loops as loops
from model import registry
from model.core.rule_parts import arrive_at_tail
from model.vllm import cache_rules
from model.vllm.config import VERSIONS, Config, VllmRules
from model.vllm.state import ABSENT, RUNNING
from properties.manifest import custom_config, with_bounds

CACHED = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
                num_gpu_blocks=5, enable_prefix_caching=True)
SERVE_DEFAULTS = replace(CACHED, async_scheduling=True)
EVERY_MODE = ("budget_respected", "running_within_max_num_seqs",
              "no_admission_after_preemption", "whole_prompt_without_chunking",
              "running_before_waiting", "preempted_requeued", "admitted_with_tokens",
              "prefix_hit_whole_blocks", "kv_blocks_conserved", "no_engine_assertion",
              "sampled_within_max_model_len")


# A mutation test (monkeypatch) must prove its patched rules, not read a stored proof.
pytestmark = pytest.mark.usefixtures("fresh_induction_caches")

def _theorem(prop):
    return for_engine(registry.get("vllm-v1"))[prop]


@pytest.mark.parametrize("prop", EVERY_MODE)
def test_each_theorem_covers_the_serve_defaults(prop):
    # Prefix caching and the AsyncScheduler on, as vllm serve runs them.
    assert _theorem(prop).broken(Family(base=SERVE_DEFAULTS)) == ()
    result = _theorem(prop).prove(60)
    assert result.proved, result.detail
    assert result.detail.startswith("for every number of requests: ")
    for mode in ("with prefix caching on (the cache abstracted", "on the AsyncScheduler",
                 "with both", "the exact lookup refines the abstract hit",
                 "the exact release refines the abstract freeing"):
        assert mode in result.detail


def test_computed_tokens_is_claimed_with_the_cache_not_on_the_async_scheduler():
    # tiny_async: VIOLATED (placeholders are computed before their tokens exist).
    theorem = _theorem("computed_within_tokens")
    assert theorem.broken(Family(CACHED)) == ()
    assert [p.name for p in theorem.broken(Family(SERVE_DEFAULTS))] == [
        "synchronous_scheduler_without_drafts"]
    result = loops._prove(theorems._computed_argument(), 30, "mutated", asynchronous=True)
    assert not result.proved


def test_the_release_refinement_holds_and_fails_for_a_release_that_ignores_sharing(
        monkeypatch):
    assert loops.release_refines_abstract_freeing(120).proved
    # A release that frees every position, shared or not (block_pool.py:774-805 frees a
    # block only when its last holder lets go).
    monkeypatch.setattr(cache_rules, "release",
                        lambda ops, cfg, c, slot, num_blocks, do: num_blocks)
    result = loops.release_refines_abstract_freeing(120)
    assert not result.proved and result.detail.startswith("release refinement")


def test_the_kv_proof_with_the_cache_needs_the_shared_references(monkeypatch):
    # Without "a position not freed names a block another request holds", the blocks
    # in use could exceed the table positions: the KV argument must not go through.
    moved = loops._Loops.moved

    def forgetful(self, old, acc, released=(), held=0):
        out = moved(self, old, acc, released, held)
        if self.cached and released:
            self.ops.definitions.pop()  # the shared-references fact
        return out
    monkeypatch.setattr(loops._Loops, "moved", forgetful)
    assert loops._prove(theorems._kv_argument(), 30, "exact").proved
    result = loops._prove(theorems._kv_argument(), 30, "mutated", cached=True)
    assert not result.proved and result.detail.endswith(": sat")


@pytest.mark.parametrize("prop", sorted(for_engine(registry.get("vllm-v1"))))
def test_speculative_families_stay_outside_the_loop_theorems(prop):
    spec = replace(SERVE_DEFAULTS, speculative_method="ngram", num_speculative_tokens=2)
    broken = [p.name for p in _theorem(prop).broken(Family(spec))]
    loop_theorem = prop not in ("decodes_exhaust_budget", "exhausting_decodes_fill_max_num_seqs")
    assert bool(broken) == loop_theorem
    assert all("speculative" in name or "drafts" in name for name in broken)


def test_the_async_offer_counts_placeholders():
    # On the AsyncScheduler what a running request lacks counts its output placeholders
    # (rules.py:225-229): "offered <= num_tokens - num_computed_tokens" holds on the
    # synchronous bodies and must fail on the async ones, or they would be the same.
    def inner(l_, acc, sel, it):
        return z3.And(theorems._order_inner(l_, acc, sel, it), it.n <= sel.ntok - it.ncomp)
    argument = replace(theorems._requeued_argument(), inner=inner)
    assert loops._prove(argument, 30, "exact").proved
    result = loops._prove(argument, 30, "mutated", asynchronous=True)
    assert not result.proved and result.detail.startswith("running-loop iteration starts")


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


def test_the_assertion_proof_fails_without_the_cap_and_is_outside_it_with_drafts():
    # tiny_cached_uncapped reaches scheduler.py:1170 at step 1: a hit of the whole prompt
    # offers 0 tokens; with drafts 1372 is reachable (tiny_spec_threshold), so the theorem
    # does not speak of either family.
    result = loops._prove(theorems._no_assertion_argument(), 30, "mutated", cached=True,
                          capped=False)
    assert not result.proved
    assert result.detail.startswith("waiting-loop offer >= 1 token (scheduler.py:1170)")
    uncapped = replace(CACHED, rules=VllmRules(cap_prefix_hit=False))
    theorem = _theorem("no_engine_assertion")
    assert [p.name for p in theorem.broken(Family(uncapped))] == ["prefix_hit_capped"]
    drafts = replace(SERVE_DEFAULTS, speculative_method="ngram", num_speculative_tokens=2)
    assert [p.name for p in theorem.broken(Family(drafts))] == ["no_speculative_decoding"]


def test_the_assertion_proof_fails_on_an_offer_one_token_short(monkeypatch):
    # A WAITING-loop rule that offered one token less would reach 1170 on a one-token ask.
    offer = loops._Loops.offer

    def short(self, *args):
        o = offer(self, *args)
        return replace(o, n=o.n - 1)
    monkeypatch.setattr(loops._Loops, "offer", short)
    result = loops._prove(theorems._no_assertion_argument(), 30, "mutated", cached=True,
                          capped=True, asynchronous=True)
    assert not result.proved and result.detail.endswith(": sat"), result.detail


def test_the_sampled_position_proof_needs_the_running_cap(monkeypatch):
    # vllm-project/vllm#53962: a running request offered past max_model_len - 1 -
    # num_computed_tokens samples a token with no position (scheduler.py:714-721).
    def uncapped(ops, cfg, remaining, ncomp, threshold, token_budget, input_budget):
        n = ops.ite(ops.and_(threshold > 0, threshold < remaining), threshold, remaining)
        return ops.min(n, ops.min(token_budget, input_budget - cfg.draft_slots))
    monkeypatch.setattr(loops, "running_tokens", uncapped)
    result = loops._prove(theorems._sampled_argument(), 30, "mutated", cached=True,
                          asynchronous=True)
    assert not result.proved and result.detail.startswith("running-loop iteration starts")
    assert result.detail.endswith(": sat")


def test_the_sampled_position_proof_needs_prompts_below_max_model_len():
    # A prompt of max_model_len tokens (refused by vLLM V1's input processor) would be
    # admitted whole and leave no position for its sampled token.
    argument = replace(theorems._sampled_argument(), fixed=None)
    result = loops._prove(argument, 30, "mutated")
    assert not result.proved and result.detail.startswith("initial state")
    drafts = replace(SERVE_DEFAULTS, speculative_method="ngram", num_speculative_tokens=2)
    theorem = _theorem("sampled_within_max_model_len")
    assert [p.name for p in theorem.broken(Family(drafts))] == ["no_speculative_decoding"]


@pytest.mark.parametrize("prop", EVERY_MODE)
def test_the_loop_theorems_stay_outside_0_27_1s_priority_victim_index(prop):
    # The loop bodies proved move the RUNNING loop's index back for every victim ahead of
    # it (0.28.0+); 0.27.1 passes over one more request, so a PRIORITY family of that
    # release is left to k-induction and BMC. Under FCFS running[-1] the switch is not read.
    older = replace(CACHED, rules=VERSIONS["0.27.1"], version="0.27.1")
    theorem = _theorem(prop)
    assert "priority_victim_reindex" in [
        p.name for p in theorem.broken(Family(replace(older, policy="priority")))]
    assert "priority_victim_reindex" not in [p.name for p in theorem.broken(Family(older))]
    # FCFS's running[0] ablation reads the index fix-up too (RuleConfig pins it otherwise)
    first = replace(older, rules=replace(older.rules, victim_latest=False))
    assert "priority_victim_reindex" in [p.name for p in theorem.broken(Family(first))]


@pytest.mark.slow
def test_the_whole_block_proof_needs_the_abstractions_whole_block_fact(monkeypatch):
    # A hit of any number of tokens (not whole blocks) must not pass for one.
    abstract = loops._Loops._abstract_hit

    def ragged(self, total):
        blocks, evictable, computed, facts = abstract(self, total)
        return blocks, evictable, computed, facts[:-1]
    monkeypatch.setattr(loops._Loops, "_abstract_hit", ragged)
    result = theorems.prefix_hit_whole_blocks_unbounded(30)
    assert not result.proved and result.detail.startswith("with prefix caching on")


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
    assert "the cache abstracted" in res.verdict.detail


# Each argument in the serve-defaults mode (cache and async, both abstracted) fails on a
# deliberately wrong rule, as it does on the exact bodies (tests/test_theorems_unbounded.py).

def _undercharging(serve):
    def cheap(ops, cfg, w, sel, do, n, need, added=None):
        serve(ops, cfg, w, sel, do, n, need, added)
        w.token_budget = ops.ite(do, w.token_budget + 1, w.token_budget)
    return cheap


def _admitting(serve):
    def admitting(ops, cfg, w, sel, do, n, need, added=None):
        serve(ops, cfg, w, sel, do, n, need, added)
        w.status = [ops.ite(do, RUNNING, s) for s in w.status]
    return admitting


def _unranked(serve):
    def unranked(ops, cfg, w, sel, do, n, need, added=None):
        served = w.served
        serve(ops, cfg, w, sel, do, n, need, added)
        w.served = served
    return unranked


def _short(serve):
    def short(ops, cfg, w, sel, do, n, need, added=None):
        serve(ops, cfg, w, sel, do, n, need, added)
        w.scheduled = [ops.ite(ops.and_(do, s), n - 1, x)
                       for s, x in zip(sel, w.scheduled, strict=True)]
    return short


def _appending(preempt):
    def appending(ops, cfg, w, victim, do):
        head = w.wait_head
        preempt(ops, cfg, w, victim, do)
        w.wait_key = [ops.ite(ops.and_(do, v), head + 1000, k)
                      for v, k in zip(victim, w.wait_key, strict=True)]
    return appending


def _zero_offer(serve):
    def zero(ops, cfg, w, sel, do, n, need, added=None):
        serve(ops, cfg, w, sel, do, 0, need, added)
    return zero


def _free_taking_nothing(serve):
    def hoarding(ops, cfg, w, sel, do, n, need, added=None):
        free = w.free
        serve(ops, cfg, w, sel, do, n, need, added)
        w.free = free  # the blocks given are not taken from the free count
    return hoarding


def _joining_arrival(arrive):
    def joining(ops, specs, state, t):
        return arrive_at_tail(ops, specs, state, t, ABSENT, RUNNING)
    return joining


@pytest.mark.parametrize(("argument", "name", "wrong"), [
    (theorems._budget_argument, "_serve", _undercharging),
    (theorems._running_argument, "_arrive", _joining_arrival),
    (theorems._no_admission_argument, "_serve", _admitting),
    (theorems._whole_prompt_argument, "_serve", _short),
    (theorems._rank_argument, "_serve", _unranked),
    (theorems._requeued_argument, "_preempt", _appending),
    (theorems._admitted_argument, "_serve", _zero_offer),
    (theorems._whole_blocks_argument, "_serve", _admitting),
    (theorems._kv_argument, "_serve", _free_taking_nothing),
])
def test_each_argument_fails_on_a_wrong_rule_with_the_serve_defaults(monkeypatch, argument,
                                                                     name, wrong):
    monkeypatch.setattr(loops, name, wrong(getattr(loops, name)))
    result = loops._prove(argument(), 30, "mutated", cached=True, capped=True,
                          asynchronous=True)
    assert not result.proved and result.detail.endswith(": sat"), result.detail
