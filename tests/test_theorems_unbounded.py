"""The for-every-number-of-requests theorems of vLLM V1 (docs/parameterised_proofs.md):
each is proved in seconds, each premise rejects a family outside its argument (the job
then falls back to k-induction/BMC), and each proof fails on a deliberately wrong body."""

import functools
from dataclasses import replace

import pytest

from checker.methods.jobs import Job, run
from checker.methods.symbolic import Family
from checker.methods.theorems import for_engine
from checker.methods.theorems import vllm_v1 as theorems
from checker.methods.theorems import vllm_v1_loops as loops
from model import registry
from model.core.rule_parts import arrive_at_tail
from model.vllm.config import Config, VllmRules
from model.vllm.state import ABSENT, RUNNING, RuleConfig
from properties.manifest import custom_config, with_bounds

TINY = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
              num_gpu_blocks=5)
PROOFS = {
    "budget_respected": theorems.budget_respected_unbounded,
    "running_within_max_num_seqs": theorems.running_within_max_num_seqs_unbounded,
    "kv_blocks_conserved": theorems.kv_blocks_conserved_unbounded,
    "no_admission_after_preemption": theorems.no_admission_after_preemption_unbounded,
    "computed_within_tokens": theorems.computed_within_tokens_unbounded,
    "whole_prompt_without_chunking": theorems.whole_prompt_without_chunking_unbounded,
    "running_before_waiting": theorems.running_before_waiting_unbounded,
    "preempted_requeued": theorems.preempted_requeued_unbounded,
    "admitted_with_tokens": theorems.admitted_with_tokens_unbounded,
    "prefix_hit_whole_blocks": theorems.prefix_hit_whole_blocks_unbounded,
}


# A mutation test (monkeypatch) must prove its patched rules, not read a stored proof.
pytestmark = pytest.mark.usefixtures("fresh_induction_caches")

def _theorem(prop):
    return for_engine(registry.get("vllm-v1"))[prop]


@pytest.mark.parametrize("prop", sorted(PROOFS))
def test_each_theorem_is_proved_for_every_number_of_requests_in_seconds(prop):
    assert _theorem(prop).prove is PROOFS[prop]
    result = PROOFS[prop](30)
    assert result.proved, result.detail
    assert result.seconds < 10
    assert result.detail.startswith("for every number of requests: ")
    assert "base, step, conclusion valid" in result.detail


@pytest.mark.parametrize("prop", sorted(PROOFS))
@pytest.mark.parametrize("base", [TINY, replace(TINY, policy="priority")])
def test_each_theorem_applies_to_the_plain_synchronous_scheduler(prop, base):
    assert _theorem(prop).broken(Family(base=base)) == ()


def test_async_and_speculative_families_are_outside_as_each_premise_says():
    # tests/test_theorems_deployed.py has the deployed-mode theorems in full.
    spec = replace(TINY, speculative_method="ngram", num_speculative_tokens=2)
    asynchronous = replace(TINY, async_scheduling=True)
    for prop in PROOFS:
        assert _theorem(prop).broken(Family(spec)), prop
    assert [prop for prop in sorted(PROOFS) if _theorem(prop).broken(Family(asynchronous))] == [
        "computed_within_tokens"]


@pytest.mark.parametrize(("prop", "family", "premise"), [
    ("budget_respected", Family(replace(TINY, max_num_scheduled_tokens=-1), validated=False),
     "token_budget_nonnegative"),
    ("budget_respected", Family(TINY, ranges=(("max_num_batched_tokens", -2, 4),),
                                validated=False), "token_budget_nonnegative"),
    ("running_within_max_num_seqs", Family(replace(TINY, max_num_active_seqs=8),
                                           validated=False),
     "max_num_active_seqs_le_max_num_seqs"),
    ("running_within_max_num_seqs", Family(TINY, ranges=(("max_num_seqs", -1, 4),),
                                           validated=False), "max_num_seqs_nonnegative"),
    ("kv_blocks_conserved", Family(replace(TINY, num_gpu_blocks=0), validated=False),
     "num_gpu_blocks_positive"),
    ("kv_blocks_conserved", Family(replace(TINY, watermark=-0.5), validated=False),
     "watermark_nonnegative"),
    ("no_admission_after_preemption",
     Family(replace(TINY, rules=VllmRules(preemption_gate=False))), "preemption_gate_on"),
    ("computed_within_tokens",
     Family(replace(TINY, rules=VllmRules(preemption_gate=False))), "preemption_gate_on"),
    ("running_before_waiting",
     Family(replace(TINY, rules=VllmRules(preemption_gate=False))), "preemption_gate_on"),
    ("preempted_requeued",
     Family(replace(TINY, rules=VllmRules(preemption_gate=False))), "preemption_gate_on"),
    ("whole_prompt_without_chunking",
     Family(replace(TINY, enable_chunked_prefill=False, long_prefill_token_threshold=4)),
     "no_long_prefill_threshold_without_chunking"),
    ("whole_prompt_without_chunking",
     Family(replace(TINY, enable_chunked_prefill=False),
            ranges=(("long_prefill_token_threshold", 0, 2),)),
     "no_long_prefill_threshold_without_chunking"),
])
def test_each_premise_rejects_a_family_outside_its_argument(prop, family, premise):
    assert [p.name for p in _theorem(prop).broken(family)] == [premise]


def _job(prop, cfg):
    nc = with_bounds(custom_config("premise", cfg), slots=2, depth=3, max_prompt_len=3,
                     max_max_tokens=2)
    return Job(engine="vllm-v1", property=prop, params=(), config=nc, expected=None,
               timeout_s=120)


def test_a_job_on_tiny_is_proved_by_the_theorem():
    res = run(_job("kv_blocks_conserved", TINY))
    assert res.verdict.verdict == "PROVED" and res.verdict.method == "theorem"
    assert res.verdict.detail.startswith("for every number of requests")


@pytest.mark.parametrize(("prop", "cfg"), [
    ("computed_within_tokens", TINY),
    ("computed_within_tokens", replace(TINY, policy="priority")),
    ("preempted_requeued", replace(TINY, policy="priority")),
    ("running_before_waiting", TINY),
    ("whole_prompt_without_chunking",
     replace(TINY, enable_chunked_prefill=False, max_num_batched_tokens=16)),
])
def test_jobs_on_the_per_request_properties_are_proved_by_their_theorems(prop, cfg):
    res = run(_job(prop, cfg))
    assert res.verdict.verdict == "PROVED" and res.verdict.method == "theorem"


def test_a_threshold_without_chunking_falls_back_to_a_counterexample():
    # no_chunking_threshold's config: outside the theorem's premise, and BMC finds the
    # prompt split by the threshold.
    cfg = replace(TINY, enable_chunked_prefill=False, max_num_batched_tokens=16,
                  long_prefill_token_threshold=2)
    res = run(_job("whole_prompt_without_chunking", cfg))
    assert res.verdict.verdict == "VIOLATED" and res.verdict.method == "bmc"
    assert "theorem does not apply" in res.verdict.detail


def test_the_ablated_preemption_gate_falls_back_to_the_slot_model():
    # On 2 slots the ablation is harmless (a victim and a waiting request need 3), and the
    # slot model's induction says so; the theorem must not answer for it.
    ablated = replace(TINY, rules=VllmRules(preemption_gate=False))
    res = run(_job("no_admission_after_preemption", ablated))
    assert res.verdict.method == "induction" and res.verdict.verdict == "PROVED"


# Mutations: the same proofs over deliberately wrong bodies must not go through.

def test_budget_proof_fails_when_running_requests_ignore_the_budget(monkeypatch):
    monkeypatch.setattr(loops, "running_tokens",
                        lambda ops, cfg, remaining, ncomp, thr, budget, ib: remaining)
    assert not theorems.budget_respected_unbounded(30).proved


def test_budget_proof_fails_when_serving_undercharges_the_budget(monkeypatch):
    serve = loops._serve

    def cheap(ops, cfg, w, sel, do, n, need, added=None):
        serve(ops, cfg, w, sel, do, n, need, added)
        w.token_budget = ops.ite(do, w.token_budget + 1, w.token_budget)
    monkeypatch.setattr(loops, "_serve", cheap)
    result = theorems.budget_respected_unbounded(30)
    assert not result.proved and "iteration" in result.detail


def test_running_proof_fails_when_arrivals_join_running(monkeypatch):
    monkeypatch.setattr(loops, "_arrive", lambda ops, specs, state, t: arrive_at_tail(
        ops, specs, state, t, ABSENT, RUNNING))
    result = theorems.running_within_max_num_seqs_unbounded(30)
    assert not result.proved and result.detail.startswith("arrival iteration")


# A preemption that leaves its victim's blocks held (freed, yet still held) breaks the KV
# proof; one that leaves its computed tokens breaks the computed-tokens proof.
@pytest.mark.parametrize(("proof", "kept_field"), [
    (theorems.kv_blocks_conserved_unbounded, "blocks"),
    (theorems.computed_within_tokens_unbounded, "ncomp"),
])
def test_the_proofs_fail_when_preemption_keeps_what_it_takes(monkeypatch, proof, kept_field):
    preempt = loops._preempt

    def keeping(ops, cfg, w, victim, do):
        kept = list(getattr(w, kept_field))
        preempt(ops, cfg, w, victim, do)
        setattr(w, kept_field, kept)
    monkeypatch.setattr(loops, "_preempt", keeping)
    result = proof(30)
    assert not result.proved and result.detail.startswith("allocate-or-preempt iteration")


# The synchronous release, and the AsyncScheduler's (tests/test_theorems_deployed.py has
# the rest of the deployed mode): the proof names the mode it fails in.
@pytest.mark.parametrize(("update_name", "where"), [("_update", "release iteration"),
                                                    ("_update_async", "on the AsyncScheduler")],
                         ids=["sync", "async"])
def test_kv_proof_fails_when_the_release_frees_nothing(monkeypatch, update_name, where):
    update = getattr(loops, update_name)

    def hoarding(ops, cfg, specs, state, before, ntok, held, w, eos, *options):
        nxt, step = update(ops, cfg, specs, state, before, ntok, held, w, eos, *options)
        return replace(nxt, free_blocks=w.free), step  # blocks dropped, none freed
    monkeypatch.setattr(loops, update_name, hoarding)
    result = theorems.kv_blocks_conserved_unbounded(30)
    assert not result.proved and result.detail.startswith(where)
    assert "release iteration" in result.detail


# Without the gate a request preempted and re-admitted in one step is scheduled its whole
# sequence (more than num_tokens - num_computed_tokens at the step's start), and a
# preempted running request may be resumed after a waiting one is admitted (under
# PRIORITY, a waiting request of higher priority goes first).
@pytest.mark.parametrize("proof", [theorems.no_admission_after_preemption_unbounded,
                                   theorems.computed_within_tokens_unbounded,
                                   theorems.running_before_waiting_unbounded])
def test_the_proofs_fail_without_the_preemption_gate(monkeypatch, proof):
    monkeypatch.setattr(loops, "RuleConfig",
                        functools.partial(RuleConfig, preemption_gate=False))
    result = proof(30)
    assert not result.proved and result.detail.startswith("waiting loop starts")


# Under FCFS `_preempt` keeps a victim's scheduled tokens (rules.py:149): sound only because
# running[-1] is never served yet. With any RUNNING request as the victim, a served one
# would be preempted with tokens scheduled, so the proofs must not go through.
@pytest.mark.parametrize("proof", [theorems.computed_within_tokens_unbounded,
                                   theorems.preempted_requeued_unbounded])
def test_the_proofs_need_the_fcfs_victim_to_be_the_rules_choice(monkeypatch, proof):
    monkeypatch.setattr(loops, "_victim", lambda ops, cfg, w, specs: [True] * len(w.status))
    result = proof(30)
    assert not result.proved
    assert result.detail == "allocate-or-preempt iteration (FCFS victim rule): sat"


def test_no_admission_proof_fails_when_serving_runs_a_waiting_request(monkeypatch):
    serve = loops._serve

    def admitting(ops, cfg, w, sel, do, n, need, added=None):
        serve(ops, cfg, w, sel, do, n, need, added)
        w.status = [ops.ite(do, RUNNING, s) for s in w.status]  # every slot joins running
    monkeypatch.setattr(loops, "_serve", admitting)
    result = theorems.no_admission_after_preemption_unbounded(30)
    assert not result.proved and result.detail.startswith("running-loop iteration ends")


def test_computed_proof_fails_when_arrivals_share_a_queue_key(monkeypatch):
    # Distinct queue keys are part of the argument (one request per ordered choice): an
    # arrival that does not advance wait_tail gives the next arrival the same key.
    arrive = loops._arrive

    def stuck(ops, specs, state, t):
        return replace(arrive(ops, specs, state, t), wait_tail=state.wait_tail)
    monkeypatch.setattr(loops, "_arrive", stuck)
    result = theorems.computed_within_tokens_unbounded(30)
    assert not result.proved and result.detail.startswith("arrival iteration")


def test_computed_proof_concludes_the_catalogues_property(monkeypatch):
    # The conclusion is the catalogue's definition evaluated on the rules' observation:
    # a stronger (false) statement in its place is not proved.
    from properties import catalogue

    real = catalogue.get

    def stricter(name, **params):
        prop = real(name, **params)
        if name != "computed_within_tokens":
            return prop
        return replace(prop, holds=lambda ops, steps, t: ops.and_(*[
            o.num_computed_tokens < o.num_tokens for o in steps[t].slots]))
    monkeypatch.setattr(loops.catalogue, "get", stricter)
    result = theorems.computed_within_tokens_unbounded(30)
    assert not result.proved and result.detail.startswith("conclusion")


def test_whole_prompt_theorem_applies_with_chunking_off_and_no_threshold():
    no_chunking = replace(TINY, enable_chunked_prefill=False, max_num_batched_tokens=16)
    assert _theorem("whole_prompt_without_chunking").broken(Family(no_chunking)) == ()


def test_whole_prompt_proof_fails_with_a_threshold():
    # no_chunking_threshold's finding: a threshold cuts a prompt before the
    # chunked-prefill-off check, so without its premise the argument does not go through.
    argument = replace(theorems._whole_prompt_argument(), hyps=lambda loops: [])
    result = theorems._prove(argument, 30, "mutated")
    assert not result.proved and result.detail.startswith("waiting-loop iteration")


def test_whole_prompt_proof_fails_when_serving_records_less(monkeypatch):
    serve = loops._serve

    def short(ops, cfg, w, sel, do, n, need, added=None):
        serve(ops, cfg, w, sel, do, n, need, added)
        w.scheduled = [ops.ite(ops.and_(do, s), n - 1, x)
                       for s, x in zip(sel, w.scheduled, strict=True)]
    monkeypatch.setattr(loops, "_serve", short)
    result = theorems.whole_prompt_without_chunking_unbounded(30)
    assert not result.proved and result.detail.startswith("waiting-loop iteration")


def test_rank_proof_fails_when_serving_does_not_advance_the_rank(monkeypatch):
    serve = loops._serve

    def unranked(ops, cfg, w, sel, do, n, need, added=None):
        served = w.served
        serve(ops, cfg, w, sel, do, n, need, added)
        w.served = served  # every request served gets the same rank
    monkeypatch.setattr(loops, "_serve", unranked)
    result = theorems.running_before_waiting_unbounded(30)
    assert not result.proved and result.detail.startswith("running-loop iteration ends")


def test_requeued_proof_fails_when_preemption_appends_to_the_tail(monkeypatch):
    preempt = loops._preempt

    def appending(ops, cfg, w, victim, do):
        head = w.wait_head
        preempt(ops, cfg, w, victim, do)
        w.wait_key = [ops.ite(ops.and_(do, v), head + 1000, k)
                      for v, k in zip(victim, w.wait_key, strict=True)]
    monkeypatch.setattr(loops, "_preempt", appending)
    result = theorems.preempted_requeued_unbounded(30)
    assert not result.proved and result.detail.startswith("allocate-or-preempt iteration")


def test_requeued_proof_fails_when_priority_keys_do_not_scale_with_the_requests(monkeypatch):
    # The PRIORITY order rests on _queue_key = priority * num_requests + arrival index,
    # with num_requests symbolic: a key that ignores it is not an order by priority.
    monkeypatch.setattr(loops, "_queue_key",
                        lambda cfg, specs, w, i, n_slots: specs[i].priority + i)
    result = theorems.preempted_requeued_unbounded(30)
    assert result.detail == "conclusion (PRIORITY victim rule): sat"


def test_every_theorem_speaks_of_the_catalogues_current_definition():
    # Fails when a property's definition is edited: re-read its theorem, then pin the new
    # fingerprint (checker.methods.theorems.definition) in THEOREMS.
    from checker.methods.theorems import definition, for_engine
    from model import registry
    from properties import catalogue

    for engine in ("vllm-v1", "sglang"):
        for name, theorem in for_engine(registry.get(engine)).items():
            prop = catalogue.get(name)
            assert theorem.speaks_of(prop), (engine, name, definition(prop))


def test_a_theorem_does_not_decide_a_property_defined_otherwise():
    from dataclasses import replace

    from checker.methods.theorems import for_engine
    from model import registry
    from properties import catalogue

    theorem = for_engine(registry.get("vllm-v1"))["budget_respected"]
    real = catalogue.get("budget_respected")
    other = replace(real, holds=lambda ops, steps, t: True)
    assert theorem.speaks_of(real) and not theorem.speaks_of(other)
