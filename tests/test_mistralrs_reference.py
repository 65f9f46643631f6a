"""The mistral.rs reference, rule by rule. S: is mistralrs-core/src/paged_attention/
scheduler.rs at commit 9e922623f24b; upstream test names are cited where we mirror one."""

from dataclasses import replace

import pytest

from model.core.errors import InputError
from model.core.types import EosEvent, RequestSpec, Workload
from model.mistralrs.config import MistralrsConfig, parse_config
from model.mistralrs.reference import (
    DECODE,
    KIND_DECODE,
    KIND_PROMPT,
    PROMPT,
    MistralrsScheduler,
    Seq,
)
from model.run import simulate


def kinds(records):
    return [dict(r.extra)["kind"] for r in records]


def run(cfg, requests, steps, eos=()):
    return simulate(Workload(config=cfg, requests=tuple(requests), eos=tuple(eos), steps=steps,
                             engine="mistralrs"))


def test_defaults_are_upstreams():
    # scheduler/mod.rs:21-22; mistralrs-cli args/mod.rs:573-576; paged_attention/mod.rs:44; S:48
    cfg = MistralrsConfig()
    assert (cfg.max_num_batched_tokens, cfg.max_decode_steps_before_prefill, cfg.max_num_seqs,
            cfg.block_size, cfg.waiting_timeout) == (4096, 8, 32, 32, 64)


@pytest.mark.parametrize("prompts,chunk", [(1, 4096), (8, 512), (16, 256), (7, 585)])
def test_chunk_is_the_budget_over_the_number_of_prompts(prompts, chunk):
    # S:136-138 and its test at S:2014-2025
    sched = MistralrsScheduler(MistralrsConfig(max_num_seqs=64, num_gpu_blocks=4096))
    for i in range(prompts):
        sched.add_request(RequestSpec(f"q{i}", 5000, 2))
    record = sched.step()
    assert dict(record.extra)["chunk_size"] == chunk


def test_long_prompt_runs_in_exact_ranges():
    # S:2177-2197 (scheduler_visible_prefill_uses_exact_long_prompt_ranges): 10 tokens, B=4
    cfg = MistralrsConfig(max_num_batched_tokens=4, block_size=2, num_gpu_blocks=20)
    records = run(cfg, [RequestSpec("a", 10, 3)], 3)
    assert [r.scheduled for r in records] == [(("a", 4),), (("a", 4),), (("a", 2),)]


def test_whole_prompt_is_allocated_at_admission_even_when_chunked():
    # S:676-681 allocates num_tokens = the whole sequence before the first chunk
    cfg = MistralrsConfig(max_num_batched_tokens=4, block_size=2, num_gpu_blocks=20)
    first = run(cfg, [RequestSpec("a", 10, 3)], 1)[0]
    assert first.scheduled == (("a", 4),)
    assert dict(dict(first.extra)["blocks"])["a"] == 5
    assert first.free_blocks == 19 - 5


def test_one_decode_turn_then_a_fitting_prompt_is_admitted():
    # S:262-269 and the test at S:1883-1905: P, D, P while the waiting prompt fits
    cfg = MistralrsConfig(max_num_batched_tokens=16, block_size=2, num_gpu_blocks=40)
    records = run(cfg, [RequestSpec("a", 4, 9), RequestSpec("b", 7, 9, arrival_step=2)], 3)
    assert kinds(records) == [KIND_PROMPT, KIND_DECODE, KIND_PROMPT]
    assert records[2].admitted == ("b",)


def test_a_running_prompt_tail_above_the_budget_waits_k_decode_turns():
    # S:255-258 and 271-272; the test at S:2199-2231 (K = 3, budget 4, prompt at 4 of 12)
    cfg = MistralrsConfig(max_num_batched_tokens=4, max_decode_steps_before_prefill=3,
                          block_size=2, num_gpu_blocks=40)
    sched = MistralrsScheduler(cfg)
    done = Seq("c", 8, 20, 0, state=DECODE, num_output_tokens=1, num_computed_tokens=8,
               blocks=5)
    prompt = Seq("p", 12, 20, 1, state=PROMPT, num_computed_tokens=4, blocks=6)
    sched.running.extend([done, prompt])
    sched.free_blocks -= 11
    records = [sched.step() for _ in range(4)]
    assert kinds(records) == [KIND_DECODE] * 3 + [KIND_PROMPT]
    assert records[3].scheduled == (("p", 4),)


def test_decode_steps_since_prefill_saturates_at_k():
    # S:361-366 (min with K) and S:786 (reset by a prompt turn)
    cfg = MistralrsConfig(max_decode_steps_before_prefill=2, block_size=2, num_gpu_blocks=40)
    records = run(cfg, [RequestSpec("a", 2, 9)], 5)
    assert [dict(r.extra)["decode_steps_since_prefill"] for r in records] == [0, 1, 2, 2, 2]


def test_decode_preempts_the_newest_and_pushes_it_to_the_front():
    # S:834-836 pops the newest pending decoder; S:1071 pushes it to the front of waiting
    cfg = MistralrsConfig(max_num_batched_tokens=8, block_size=2, num_gpu_blocks=5)
    records = run(cfg, [RequestSpec("a", 2, 9), RequestSpec("b", 2, 9)], 4)
    preempting = next(r for r in records if r.preempted)
    assert preempting.preempted == ("b",)
    assert preempting.waiting[0] == "b"
    assert dict(preempting.extra)["kind"] == KIND_DECODE


def test_head_of_line_break_until_the_escape():
    # S:729-731 breaks while the count is within WAITING_TIMEOUT; above it S:693-718
    # preempts running.pop_back() and admits the head in the same call
    cfg = MistralrsConfig(max_num_batched_tokens=4, block_size=2, num_gpu_blocks=5,
                          waiting_timeout=1)
    records = run(cfg, [RequestSpec("r0", 5, 1), RequestSpec("r1", 3, 1)], 2)
    assert records[0].admitted == ("r0",) and records[0].waiting == ("r1",)
    assert records[1].preempted == ("r0",) and records[1].admitted == ("r1",)
    assert records[1].waiting == ("r0",)


def test_round_robin_rotates_when_decoders_exceed_the_budget():
    # S:298-326 (cost 1 per decoding row, the cursor moves past the last row taken)
    cfg = MistralrsConfig(max_num_batched_tokens=2, max_num_seqs=3, block_size=4,
                          num_gpu_blocks=40)
    records = run(cfg, [RequestSpec(f"q{i}", 1, 9) for i in range(3)], 6)
    # S:589-593: the third prompt waits (|candidates| reached the budget), joins at step 3
    assert records[0].waiting == ("q2",) and records[2].admitted == ("q2",)
    decodes = [tuple(rid for rid, _ in r.scheduled) for r in records
               if dict(r.extra)["kind"] == KIND_DECODE]
    assert decodes == [("q0", "q1"), ("q0", "q1"), ("q2", "q0"), ("q1", "q2")]


def test_eos_must_name_a_sampling_request():
    cfg = MistralrsConfig(max_num_batched_tokens=4, block_size=2, num_gpu_blocks=20)
    with pytest.raises(InputError, match="samples no token"):
        run(cfg, [RequestSpec("a", 10, 3)], 2, eos=[EosEvent("a", 1)])


@pytest.mark.parametrize("raw,fix", [({"max_seqs": 3}, "unknown mistralrs config field"),
                                     ({"block_size": 0}, ">= 1"),
                                     ({"waiting_timeout": 0}, ">= 1"),
                                     ({"max_num_seqs": True}, "integer")])
def test_bad_config_is_one_line_input_error(raw, fix):
    with pytest.raises(InputError, match=fix):
        parse_config(raw)


def test_a_sequence_that_outgrows_the_pool_is_rejected_not_left_spinning():
    # S:837-840 a lone decoder that cannot grow preempts itself; S:676-681 its whole
    # sequence no longer fits; after WAITING_TIMEOUT failures the escape finds nothing to
    # preempt and rejects it with an error (S:722-737)
    cfg = MistralrsConfig(max_num_batched_tokens=4, block_size=2, num_gpu_blocks=5,
                          waiting_timeout=1)
    records = run(cfg, [RequestSpec("a", 3, 7)], 9)
    assert [r.step for r in records if r.preempted == ("a",)] == [7]
    assert records[-1].finished == (("a", "error"),)
    assert records[-1].free_blocks == cfg.usable_blocks


def test_the_explorers_copy_shares_no_mutable_object():
    """Seq's field-by-field copy: part-way through a run that preempts, a deep copy of
    the scheduler reaches no mutable object the original reaches and steps alike."""
    import copy

    from test_reference_vllm_v1 import _mutables

    from model.run import iter_records

    cfg = replace(MistralrsConfig(), max_num_seqs=3, block_size=2, num_gpu_blocks=6)
    requests = [RequestSpec(f"r{i}", 3 + i, 4, arrival_step=1 + i // 2) for i in range(4)]
    run = iter_records(Workload(config=cfg, requests=tuple(requests), steps=10,
                                engine="mistralrs"))
    for _ in range(4):
        sched, _ = next(run)
    twin = copy.deepcopy(sched)
    assert not set(_mutables(sched)) & set(_mutables(twin))
    assert twin.step(frozenset()) == sched.step(frozenset())
