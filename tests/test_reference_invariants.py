"""Hypothesis: the invariants upstream asserts (scheduler.py:1404-1415) and the block
bookkeeping hold on the reference for random vLLM-accepted configs and workloads."""

import copy

from hypothesis import assume, given
from hypothesis import strategies as st

from model.core.arith import cdiv
from model.core.types import RequestSpec
from model.vllm.config import POLICY_FCFS, POLICY_PRIORITY, Config
from model.vllm.reference import VllmV1Scheduler
from model.vllm.validation import is_valid


@st.composite
def configs(draw):
    budget = draw(st.integers(1, 48))
    max_model_len = draw(st.integers(2, 48))
    chunked = draw(st.booleans())
    if not chunked:
        budget = max(budget, max_model_len)
    max_num_seqs = draw(st.integers(1, min(budget, 8)))
    cfg = Config(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        block_size=draw(st.sampled_from([1, 2, 4, 8, 16])),
        num_gpu_blocks=draw(st.integers(2, 40)),
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.integers(0, max_model_len)),
        long_prefill_token_threshold_adaptive=draw(st.booleans()),
        policy=draw(st.sampled_from([POLICY_FCFS, POLICY_PRIORITY])),
        watermark=draw(st.sampled_from([0.0, 0.1, 0.3])),
        scheduler_reserve_full_isl=draw(st.booleans()),
        max_num_active_seqs=draw(st.none() | st.integers(1, max_num_seqs)),
        max_num_scheduled_tokens=draw(st.none() | st.integers(1, 2 * budget)),
    )
    assume(is_valid(cfg))
    return cfg


@st.composite
def request_lists(draw, max_model_len):
    n = draw(st.integers(1, 6))
    return [
        RequestSpec(f"r{i}", prompt_len=draw(st.integers(1, max_model_len - 1)),
                    max_tokens=draw(st.integers(1, 12)), arrival_step=draw(st.integers(1, 5)),
                    priority=draw(st.integers(0, 2)))
        for i in range(n)
    ]


def samplers(scheduler):
    """Ids that sample a token in the next step (found on a copy)."""
    trial = copy.deepcopy(scheduler)
    trial.step()
    out = []
    for rid in scheduler.requests:
        after = trial.view(rid)
        if after is None or after.num_output_tokens > scheduler.view(rid).num_output_tokens:
            out.append(rid)
    return sorted(out)


def check_step(cfg, scheduler, record):
    total = sum(n for _, n in record.scheduled)
    assert all(n > 0 for _, n in record.scheduled)
    assert total <= cfg.token_budget
    assert total <= cfg.max_num_batched_tokens
    assert record.token_budget_left == cfg.token_budget - total
    assert len(record.running) <= cfg.max_num_seqs
    assert len(record.running) <= cfg.max_num_active_reqs
    assert record.free_blocks >= 0
    ncomp = dict(record.num_computed_tokens)
    held = sum(cdiv(ncomp[rid], cfg.block_size) for rid in record.running)
    assert record.free_blocks + held == cfg.num_gpu_blocks - 1
    if record.preempted:
        assert record.admitted == () and record.resumed == ()
    for rid in record.preempted:
        assert ncomp[rid] == 0 and rid in record.waiting
    for rid in record.waiting:
        assert ncomp[rid] == 0  # prefix caching off: waiting requests hold nothing
    views = scheduler.views()
    assert all(v.num_computed_tokens <= v.num_tokens for v in views)
    assert all(v.num_tokens < cfg.max_model_len for v in views)
    after = scheduler.pool.num_free_blocks + sum(v.blocks_held for v in views)
    assert after == cfg.num_gpu_blocks - 1


@given(data=st.data())
def test_upstream_invariants_hold_for_random_configs_and_workloads(data):
    cfg = data.draw(configs())
    requests = data.draw(request_lists(cfg.max_model_len))
    scheduler = VllmV1Scheduler(cfg)
    for step in range(1, 13):
        for spec in requests:
            if spec.arrival_step == step:
                scheduler.add_request(spec)
        candidates = samplers(scheduler)
        eos = data.draw(st.sets(st.sampled_from(candidates)) if candidates else st.just(set()))
        record = scheduler.step(frozenset(eos))
        check_step(cfg, scheduler, record)
        assert {rid for rid, reason in record.finished if reason == "stop"} == eos


@given(data=st.data())
def test_every_request_finishes_when_the_pool_holds_its_longest_sequence(data):
    cfg = data.draw(configs())
    # Chunking off and a scheduled-token budget below the prompt: see the next test.
    assume(cfg.enable_chunked_prefill or cfg.token_budget >= cfg.max_model_len)
    requests = data.draw(request_lists(cfg.max_model_len))
    longest = max(min(r.prompt_len + r.max_tokens, cfg.max_model_len) for r in requests)
    assume(cdiv(longest, cfg.block_size) <= cfg.num_gpu_blocks - 1)
    scheduler = VllmV1Scheduler(cfg)
    finished = set()
    for step in range(1, 400):
        for spec in requests:
            if spec.arrival_step == step:
                scheduler.add_request(spec)
        finished |= {rid for rid, _ in scheduler.step().finished}
        if len(finished) == len(requests):
            break
    assert finished == {r.id for r in requests}


def test_chunking_off_with_a_scheduled_budget_below_the_prompt_starves_it_though_vllm_accepts():
    # vLLM checks max_num_batched_tokens >= max_model_len when chunking is off
    # (config/scheduler.py:315-326) but not max_num_scheduled_tokens, and the waiting loop
    # breaks when the prompt exceeds min(token_budget, input_budget) (scheduler.py:1160-1167).
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=1, max_model_len=8,
                 enable_chunked_prefill=False, max_num_scheduled_tokens=1)
    assert is_valid(cfg)
    scheduler = VllmV1Scheduler(cfg)
    scheduler.add_request(RequestSpec("r0", prompt_len=2, max_tokens=1))
    records = [scheduler.step() for _ in range(20)]
    assert all(r.scheduled == () and r.waiting == ("r0",) for r in records)
