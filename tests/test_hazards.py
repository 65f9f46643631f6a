"""Hazards (checker/config/hazards.py, properties/hazards.py): each one witnessed where vLLM shows
it and proved absent (or bounded) where it cannot happen; witnesses fail the property on
the reference; closed-form arguments agree with the checker."""

from dataclasses import replace

import pytest

from checker.config.hazards import (
    ABSENT,
    BOUNDED,
    HAZARDS,
    UNKNOWN_LABEL,
    WITNESSED,
    Envelope,
    ample_pool,
    capacity_lemma,
    decide,
    per_request_blocks,
)
from checker.config.rule_reasons import explain_rules
from model.core.ops import CONCRETE
from model.vllm.config import Config
from model.vllm.engine import records_to_steps
from model.vllm.reference import simulate
from properties import catalogue

H = {h.name: h for h in HAZARDS}
# 8 usable blocks of 2 tokens: one 15-token prompt fills the pool
SMALL = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
               num_gpu_blocks=9)
# room for max_num_seqs = 2 requests of the largest size: the capacity lemma holds
ROOMY = replace(SMALL, max_num_seqs=2, num_gpu_blocks=17)
NO_CHUNK = Config(max_num_batched_tokens=16, max_num_seqs=4, max_model_len=16, block_size=2,
                  num_gpu_blocks=33, enable_chunked_prefill=False)
ENV = Envelope(slots=3, depth=4, timeout_s=60)


def fails_on_reference(result):
    """The witness's workload, run on the reference, violates the property where stated."""
    w = result.witness
    h = H[result.name]
    prop = catalogue.get(h.property, **dict(h.params(ENV)))
    steps = records_to_steps(w.workload, simulate(w.workload))
    failing = [t + 1 for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    return failing and failing[0] == w.violated_at


# --- witnessed -----------------------------------------------------------------------------

def test_head_of_line_is_witnessed_when_a_long_prompt_does_not_fit():
    r = decide(H["head_of_line"], SMALL, ENV, pool_known=True)
    assert r.verdict == WITNESSED and r.witness.minimal
    assert fails_on_reference(r)
    prompts = sorted(q.prompt_len for q in r.witness.workload.requests)
    assert prompts[-1] > prompts[0]  # a big head and a small request behind it


def test_unchunked_blocking_is_witnessed_with_chunked_prefill_off():
    r = decide(H["unchunked_blocking"], NO_CHUNK, ENV, pool_known=True)
    assert r.verdict == WITNESSED
    assert fails_on_reference(r)


def test_priority_inversion_beyond_the_bound_gets_a_constructed_witness():
    cfg = Config(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=64, block_size=4,
                 num_gpu_blocks=400, policy="priority")
    r = decide(H["priority_inversion"], cfg, ENV, pool_known=True)
    assert r.verdict == WITNESSED and not r.witness.minimal
    assert len(r.witness.workload.requests) == 17
    assert fails_on_reference(r)


def test_head_of_line_beyond_the_bound_gets_a_constructed_witness():
    cfg = Config(max_num_batched_tokens=64, max_num_seqs=32, max_model_len=256, block_size=16,
                 num_gpu_blocks=101)
    r = decide(H["head_of_line"], cfg, ENV, pool_known=True)
    assert r.verdict == WITNESSED and not r.witness.minimal
    assert fails_on_reference(r)


@pytest.mark.slow
def test_starvation_is_witnessed_by_a_prompt_that_fills_the_budget():
    r = decide(H["starvation"], SMALL, replace(ENV, depth=3), pool_known=True)
    assert r.verdict == WITNESSED and fails_on_reference(r)


@pytest.mark.slow
def test_priority_inversion_is_witnessed_by_the_checker_when_seats_are_few():
    cfg = replace(ROOMY, policy="priority")
    r = decide(H["priority_inversion"], cfg, replace(ENV, depth=3), pool_known=True)
    assert r.verdict == WITNESSED and r.witness.minimal and fails_on_reference(r)


@pytest.mark.slow
def test_repeated_preemption_is_witnessed_in_a_tiny_pool():
    cfg = replace(SMALL, num_gpu_blocks=5, max_model_len=16)
    env = replace(ENV, depth=4, max_prompt_len=8, max_max_tokens=6, timeout_s=120)
    r = decide(H["repeated_preemption"], cfg, env, pool_known=True)
    assert r.verdict == WITNESSED and fails_on_reference(r)


# --- proved absent, and the argument agrees with the checker ---------------------------------

def test_capacity_lemma_holds_exactly_at_the_boundary():
    c = per_request_blocks(ROOMY)  # cdiv(15, 2) = 8
    assert capacity_lemma(replace(ROOMY, num_gpu_blocks=2 * c + 1)) is not None
    assert capacity_lemma(replace(ROOMY, num_gpu_blocks=2 * c)) is None
    with_wm = replace(ROOMY, num_gpu_blocks=2 * c + 1, watermark=0.1)  # 1 watermark block
    assert capacity_lemma(with_wm) is None


def test_ample_pool_satisfies_the_capacity_lemma():
    for cfg in (ROOMY, replace(ROOMY, watermark=0.5), replace(SMALL, max_num_seqs=3)):
        assert capacity_lemma(replace(cfg, num_gpu_blocks=ample_pool(cfg))) is not None


def test_kv_hazards_are_proved_absent_when_the_pool_holds_every_seat():
    for name in ("head_of_line", "repeated_preemption"):
        r = decide(H[name], ROOMY, ENV, pool_known=True)
        assert r.verdict == ABSENT and "z3" in r.detail


@pytest.mark.slow
def test_the_capacity_argument_agrees_with_the_checker():
    # ROOMY is PROVED absent by the lemma; the BMC must find no witness there either
    from checker.config.hazards import _check
    for name in ("head_of_line", "repeated_preemption"):
        assert _check(H[name], ROOMY, replace(ENV, depth=4)).verdict == BOUNDED


def test_self_preemption_is_absent_once_the_startup_check_passes():
    r = decide(H["self_preemption"], SMALL, ENV, pool_known=True)
    assert r.verdict == ABSENT and "kv_cache_utils.py" in r.detail


def test_without_the_startup_check_a_lone_request_can_livelock():
    # 5 blocks (4 usable) < cdiv(16, 2): vLLM refuses this pool at startup; the checker
    # shows why: a lone request outgrows the pool, preempts itself and never finishes
    from checker.config.hazards import _check
    tiny = replace(SMALL, num_gpu_blocks=5)
    r = _check(H["self_preemption"], tiny, replace(ENV, depth=6, max_prompt_len=8,
                                                   max_max_tokens=6))
    assert r.verdict == WITNESSED and r.witness.loop is not None


def test_chunked_prefill_on_rules_out_unchunked_blocking():
    assert decide(H["unchunked_blocking"], SMALL, ENV, True).verdict == ABSENT
    assert decide(H["unchunked_blocking"], NO_CHUNK, replace(ENV, depth=1), True
                  ).verdict != ABSENT


def test_fcfs_rules_out_priority_inversion():
    assert decide(H["priority_inversion"], SMALL, ENV, True).verdict == ABSENT


# --- bounded and unknown ----------------------------------------------------------------------

def test_a_pool_too_big_for_the_bound_holds_within_bounds_and_says_why():
    # 16 seats: fewer than the 17 the constructed run asks (the 14 long requests the pool
    # holds, a short one, the victim and one more), enough for the pool to run out.
    big = Config(max_num_batched_tokens=8192, max_num_seqs=16, max_model_len=32768,
                 block_size=16, num_gpu_blocks=30000)
    r = decide(H["repeated_preemption"], big, ENV, pool_known=True)
    assert r.verdict == BOUNDED
    assert "3 request(s)" in r.detail and "holds 14 requests" in r.detail


def test_kv_hazards_need_the_pool_size():
    r = decide(H["head_of_line"], replace(SMALL, num_gpu_blocks=ample_pool(SMALL)), ENV,
               pool_known=False)
    assert r.verdict == UNKNOWN_LABEL and "--num-gpu-blocks" in r.detail


# --- why each rule exists ----------------------------------------------------------------------

@pytest.mark.slow
def test_explain_rules_shows_what_each_rule_prevents():
    reasons = {r.rule: r for r in explain_rules(60)}
    assert reasons["batched_tokens_ge_num_seqs"].verdict == WITNESSED
    assert reasons["active_seqs_le_num_seqs"].verdict == WITNESSED
    assert reasons["batched_tokens_ge_model_len_without_chunking"].verdict == WITNESSED
    assert reasons["long_prefill_threshold_le_model_len"].verdict == "NO CHANGE"
    assert reasons["policy_known"].verdict == "NOT MODELLED"
