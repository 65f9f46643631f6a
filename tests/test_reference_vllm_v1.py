"""One test (or a few) per rule of the vLLM V1 reference scheduler. Each names the upstream
rule it pins; line numbers are in model/vllm/reference.py."""

from dataclasses import replace

import pytest

from model.core.arith import cdiv
from model.core.errors import InputError
from model.core.types import EosEvent, RequestSpec, Workload
from model.vllm.config import POLICY_PRIORITY, Config
from model.vllm.reference import (
    PHASE_DECODE,
    PHASE_PREFILL,
    Request,
    RequestView,
    VllmV1Scheduler,
    chunk_phase,
    effective_long_prefill_threshold,
    running_num_new_tokens,
    simulate,
)


def req(rid, prompt_len, max_tokens=100, arrival_step=1, priority=0):
    return RequestSpec(rid, prompt_len=prompt_len, max_tokens=max_tokens,
                       arrival_step=arrival_step, priority=priority)


def sim(cfg, requests, steps, eos=()):
    workload = Workload(config=cfg, requests=tuple(requests),
                        eos=tuple(EosEvent(rid, s) for rid, s in eos), steps=steps)
    return {r.step: r for r in simulate(workload)}


def sched(record):
    return dict(record.scheduled)


def ncomp(record):
    return dict(record.num_computed_tokens)


SMALL = Config(max_num_batched_tokens=16, max_num_seqs=8, max_model_len=256, block_size=4,
               num_gpu_blocks=64)


# ---- token budget ------------------------------------------------------------------


def test_the_token_budget_caps_the_sum_of_scheduled_tokens_and_the_rest_waits():
    records = sim(SMALL, [req("a", 10), req("b", 10)], steps=1)
    assert sched(records[1]) == {"a": 10, "b": 6}
    assert records[1].token_budget_left == 0


def test_max_num_scheduled_tokens_is_the_budget_when_it_is_set():
    cfg = Config(**{**SMALL.to_dict(), "max_num_scheduled_tokens": 5})
    records = sim(cfg, [req("a", 10)], steps=1)
    assert sched(records[1]) == {"a": 5}


def test_max_num_batched_tokens_still_caps_the_input_when_the_scheduled_budget_is_larger():
    cfg = Config(**{**SMALL.to_dict(), "max_num_scheduled_tokens": 40})
    records = sim(cfg, [req("a", 30)], steps=1)
    assert sched(records[1]) == {"a": 16}
    assert records[1].token_budget_left == 24


# ---- long_prefill_token_threshold --------------------------------------------------


def test_the_long_prefill_threshold_is_zero_when_only_one_request_exists():
    cfg = Config(long_prefill_token_threshold=4)
    assert effective_long_prefill_threshold(cfg, 1) == 0
    assert effective_long_prefill_threshold(cfg, 0) == 0
    assert effective_long_prefill_threshold(cfg, 2) == 4


def test_the_adaptive_threshold_is_floored_at_a_fair_share_of_the_input_budget():
    cfg = Config(max_num_batched_tokens=100, long_prefill_token_threshold=4,
                 long_prefill_token_threshold_adaptive=True)
    assert effective_long_prefill_threshold(cfg, 2) == 50
    assert effective_long_prefill_threshold(cfg, 40) == 4
    off = Config(max_num_batched_tokens=100, long_prefill_token_threshold=0,
                 long_prefill_token_threshold_adaptive=True)
    assert effective_long_prefill_threshold(off, 2) == 0


def test_a_lone_long_prompt_is_not_capped_but_two_prompts_are():
    cfg = Config(**{**SMALL.to_dict(), "long_prefill_token_threshold": 4})
    alone = sim(cfg, [req("a", 12)], steps=1)
    assert sched(alone[1]) == {"a": 12}
    two = sim(cfg, [req("a", 12), req("b", 12)], steps=2)
    assert sched(two[1]) == {"a": 4, "b": 4}
    assert sched(two[2]) == {"a": 4, "b": 4}


# ---- running loop --------------------------------------------------------------------


def make_request(prompt, outputs=0, computed=0):
    return Request("r", num_prompt_tokens=prompt, max_tokens=100, priority=0, arrival_time=0,
                   num_output_tokens=outputs, num_computed_tokens=computed)


def test_a_running_request_asks_for_its_gap_cut_to_threshold_and_budgets():
    r = make_request(prompt=30, computed=10)
    assert running_num_new_tokens(r, 0, 100, 100, 1000) == 20
    assert running_num_new_tokens(r, 8, 100, 100, 1000) == 8
    assert running_num_new_tokens(r, 0, 5, 100, 1000) == 5
    assert running_num_new_tokens(r, 0, 100, 7, 1000) == 7


def test_a_running_request_keeps_one_position_below_max_model_len_for_the_sampled_token():
    r = make_request(prompt=10, outputs=2, computed=9)  # gap 3
    assert running_num_new_tokens(r, 0, 100, 100, 11) == 1  # 11 - 9 - 1
    assert running_num_new_tokens(r, 0, 100, 100, 10) == 0


def test_a_running_request_with_nothing_to_schedule_is_skipped_and_the_loop_goes_on():
    # Unreachable without spec decode / async scheduling (the max_model_len cap never
    # binds), so the state is set by hand: 'a' has num_tokens == max_model_len.
    cfg = Config(**{**SMALL.to_dict(), "max_model_len": 8})
    s = VllmV1Scheduler(cfg)
    s.add_request(req("a", 4))
    s.add_request(req("b", 4))
    s.step()
    a = s.requests["a"]
    a.num_output_tokens, a.num_computed_tokens = 4, 7
    record = s.step()
    assert sched(record) == {"b": 1}


def test_the_running_loop_serves_requests_in_list_order_before_any_admission():
    records = sim(SMALL, [req("a", 2), req("b", 2), req("c", 20, arrival_step=2)], steps=2)
    assert records[2].scheduled == (("a", 1), ("b", 1), ("c", 14))
    assert records[2].running == ("a", "b", "c")


# ---- KV blocks -----------------------------------------------------------------------


def test_block_zero_is_the_null_block_so_one_block_is_never_usable():
    records = sim(Config(**{**SMALL.to_dict(), "num_gpu_blocks": 10}), [], steps=1)
    assert records[1].free_blocks == 9


def test_a_request_holds_cdiv_of_its_computed_tokens_in_blocks():
    assert cdiv(9, 4) == 3 and cdiv(8, 4) == 2 and cdiv(0, 4) == 0
    records = sim(SMALL, [req("a", 9)], steps=2)
    assert records[1].free_blocks == 63 - 3
    assert records[2].free_blocks == 63 - 3  # 10 tokens still fit in 3 blocks


def test_the_full_sequence_check_keeps_out_a_prompt_whose_first_chunk_would_fit():
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=256, block_size=4,
                 num_gpu_blocks=3)  # 2 usable blocks
    records = sim(cfg, [req("a", 12)], steps=1)
    assert sched(records[1]) == {}
    assert records[1].waiting == ("a",)
    lax = Config(**{**cfg.to_dict(), "scheduler_reserve_full_isl": False})
    records = sim(lax, [req("a", 12)], steps=1)
    assert sched(records[1]) == {"a": 4}


def test_the_watermark_is_int_of_the_fraction_of_the_whole_pool():
    assert Config(num_gpu_blocks=11, watermark=0.5).watermark_blocks == 5
    assert Config(num_gpu_blocks=10, watermark=0.19).watermark_blocks == 1


def test_the_watermark_does_not_apply_while_nothing_is_running():
    cfg = Config(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=256, block_size=4,
                 num_gpu_blocks=11, watermark=0.5)  # 10 usable, watermark 5
    records = sim(cfg, [req("a", 24), req("b", 4)], steps=1)
    # a (6 blocks) is admitted into an empty running list; b then needs 1 + 5 > 4 free.
    assert records[1].admitted == ("a",)
    assert records[1].waiting == ("b",)
    assert records[1].free_blocks == 4


def test_the_watermark_applies_only_to_waiting_or_preempted_requests_not_running_ones():
    cfg = Config(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=256, block_size=4,
                 num_gpu_blocks=11, watermark=0.5)
    records = sim(cfg, [req("a", 36)], steps=2)  # 9 blocks, running alone
    assert sched(records[2]) == {"a": 1}  # grows into the 10th block despite the watermark
    assert records[2].free_blocks == 0


# ---- preemption ----------------------------------------------------------------------


TIGHT = Config(max_num_batched_tokens=16, max_num_seqs=8, max_model_len=256, block_size=4,
               num_gpu_blocks=3)  # 2 usable blocks


def test_fcfs_preempts_the_tail_of_running_and_puts_it_at_the_head_of_waiting():
    records = sim(TIGHT, [req("a", 3), req("b", 3), req("c", 1, arrival_step=2)], steps=3)
    assert sched(records[1]) == {"a": 3, "b": 3}
    assert records[2].preempted == () and records[2].waiting == ("c",)  # c: no free block
    r = records[3]  # a and b have 5 tokens: a needs a 2nd block -> b (running[-1]) goes
    assert sched(r) == {"a": 1}
    assert r.preempted == ("b",)
    assert r.waiting == ("b", "c")
    assert ncomp(r)["b"] == 0


def test_a_preempted_request_keeps_its_outputs_and_counts_the_preemption():
    s = VllmV1Scheduler(TIGHT)
    s.add_request(req("a", 3))
    s.add_request(req("b", 3))
    for _ in range(3):
        s.step()
    b = s.view("b")
    assert (b.status, b.num_computed_tokens, b.num_output_tokens, b.num_tokens,
            b.num_preemptions, b.blocks_held) == ("PREEMPTED", 0, 2, 5, 1, 0)


def test_a_step_that_preempts_admits_nothing():
    records = sim(TIGHT, [req("a", 3), req("b", 3), req("c", 1, arrival_step=3)], steps=3)
    assert records[3].preempted == ("b",)
    assert records[3].admitted == () and records[3].resumed == ()
    assert records[3].free_blocks == 0


def test_priority_preempts_the_largest_priority_key_in_running():
    cfg = Config(**{**TIGHT.to_dict(), "policy": POLICY_PRIORITY})
    requests = [req("a", 3, priority=5), req("b", 3, priority=0)]
    records = sim(cfg, requests, steps=3)
    assert records[1].admitted == ("b", "a")  # heap order
    assert records[3].preempted == ("a",)  # b needs a block; a has the largest key
    assert sched(records[3]) == {"b": 1}


def test_a_request_that_preempts_itself_ends_the_running_loop():
    cfg = Config(**{**TIGHT.to_dict(), "policy": POLICY_PRIORITY})
    requests = [req("y", 3, priority=9), req("x", 1, arrival_step=2, priority=0)]
    records = sim(cfg, requests, steps=3)
    assert records[2].running == ("y", "x")
    r = records[3]  # y needs a 2nd block; the largest key in running is y itself
    assert r.preempted == ("y",)
    assert sched(r) == {}  # x needed no new block, but the loop has ended
    assert r.free_blocks == 1


def test_priority_victim_already_scheduled_in_the_step_gives_its_tokens_back():
    cfg = Config(max_num_batched_tokens=16, max_num_seqs=8, max_model_len=256, block_size=4,
                 num_gpu_blocks=3, policy=POLICY_PRIORITY)  # 2 usable
    requests = [req("a", 1, priority=5), req("b", 3, arrival_step=2, priority=0)]
    records = sim(cfg, requests, steps=4)
    assert records[3].scheduled == (("a", 1), ("b", 1))
    r = records[4]  # a scheduled first (fits), then b needs a 2nd block: victim a
    assert r.scheduled == (("b", 1),)
    assert r.preempted == ("a",)
    assert r.token_budget_left == 15
    assert r.running == ("b",) and r.waiting == ("a",)
    assert r.free_blocks == 0


def test_priority_waiting_queue_is_reported_in_heap_order():
    cfg = Config(**{**SMALL.to_dict(), "policy": POLICY_PRIORITY, "max_num_seqs": 1,
                    "max_num_batched_tokens": 16})
    requests = [req("a", 2, priority=1), req("b", 2, priority=3), req("c", 2, priority=2),
                req("d", 2, priority=3)]
    records = sim(cfg, requests, steps=1)
    assert records[1].admitted == ("a",)
    assert records[1].waiting == ("c", "b", "d")


def test_a_priority_tie_is_broken_by_arrival_order_not_by_list_order():
    cfg = Config(**{**SMALL.to_dict(), "policy": POLICY_PRIORITY, "max_num_seqs": 1})
    requests = [req("late", 2, arrival_step=2), req("early", 2, arrival_step=1),
                req("blocker", 2, arrival_step=1, priority=-1)]
    records = sim(cfg, requests, steps=2)
    assert records[1].admitted == ("blocker",)
    assert records[2].waiting == ("early", "late")


# ---- waiting loop --------------------------------------------------------------------


def test_admission_stops_at_max_num_seqs():
    cfg = Config(**{**SMALL.to_dict(), "max_num_seqs": 2})
    records = sim(cfg, [req("a", 1), req("b", 1), req("c", 1)], steps=1)
    assert records[1].admitted == ("a", "b")
    assert records[1].waiting == ("c",)


def test_max_num_active_seqs_caps_admission_below_max_num_seqs():
    cfg = Config(**{**SMALL.to_dict(), "max_num_active_seqs": 1})
    records = sim(cfg, [req("a", 1), req("b", 1)], steps=2)
    assert records[1].admitted == ("a",)
    assert records[2].admitted == ()


def test_without_chunked_prefill_a_prompt_larger_than_the_remaining_budget_blocks_the_queue():
    cfg = Config(max_num_batched_tokens=16, max_num_seqs=8, max_model_len=16, block_size=4,
                 num_gpu_blocks=64, enable_chunked_prefill=False)
    records = sim(cfg, [req("a", 10), req("b", 10), req("c", 2)], steps=1)
    assert sched(records[1]) == {"a": 10}  # b (10 > 6 left) breaks; c is never looked at
    assert records[1].waiting == ("b", "c")


def test_with_chunked_prefill_the_head_takes_what_is_left_of_the_budget():
    records = sim(SMALL, [req("a", 10), req("b", 10), req("c", 2)], steps=1)
    assert records[1].scheduled == (("a", 10), ("b", 6))


def test_a_block_allocation_failure_at_the_head_stops_all_admission():
    cfg = Config(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=256, block_size=4,
                 num_gpu_blocks=5)  # 4 usable
    records = sim(cfg, [req("a", 8), req("big", 12), req("small", 1)], steps=1)
    assert records[1].admitted == ("a",)  # big needs 3 > 2 free; small would fit
    assert records[1].waiting == ("big", "small")


def test_a_resumed_request_recomputes_its_prompt_and_outputs():
    records = sim(TIGHT, [req("a", 3, max_tokens=3), req("b", 3)], steps=6)
    resumed = [(s, r) for s, r in records.items() if r.resumed]
    step, r = resumed[0]
    assert r.resumed == ("b",)
    assert sched(r)["b"] == 5  # prompt 3 + the 2 outputs sampled before preemption


# ---- schedule-time progress and finishing --------------------------------------------


def test_num_computed_tokens_advances_at_schedule_time():
    records = sim(SMALL, [req("a", 20)], steps=2)
    assert ncomp(records[1]) == {"a": 16}
    assert ncomp(records[2]) == {"a": 20}


def test_a_partial_prefill_chunk_samples_nothing_and_the_last_chunk_samples():
    s = VllmV1Scheduler(SMALL)
    s.add_request(req("a", 20))
    s.step()
    assert s.view("a").num_output_tokens == 0
    s.step()
    assert s.view("a").num_output_tokens == 1


def test_max_tokens_finishes_a_request_with_length():
    records = sim(SMALL, [req("a", 4, max_tokens=2)], steps=3)
    assert records[1].finished == ()
    assert records[2].finished == (("a", "length"),)
    assert ncomp(records[3]) == {}


def test_max_model_len_finishes_a_request_with_length():
    cfg = Config(**{**SMALL.to_dict(), "max_model_len": 8})
    records = sim(cfg, [req("a", 5, max_tokens=100)], steps=4)
    assert records[3].finished == (("a", "length"),)  # 5 + 3 outputs = 8 tokens


def test_eos_finishes_with_stop_even_when_length_is_reached_in_the_same_step():
    records = sim(SMALL, [req("a", 4, max_tokens=1)], steps=1, eos=[("a", 1)])
    assert records[1].finished == (("a", "stop"),)


def test_finished_requests_release_their_blocks_after_the_step():
    records = sim(SMALL, [req("a", 8, max_tokens=1), req("b", 1, arrival_step=2)], steps=2)
    assert records[1].finished == (("a", "length"),)
    assert records[1].free_blocks == 61  # read before a releases its 2 blocks
    assert records[2].free_blocks == 62  # a released; b holds 1


def test_finished_lists_requests_in_scheduled_order():
    records = sim(SMALL, [req("a", 2, max_tokens=1), req("b", 2, max_tokens=1)], steps=1,
                  eos=[("b", 1)])
    assert records[1].finished == (("a", "length"), ("b", "stop"))


# ---- arrival and the record ----------------------------------------------------------


def test_requests_arrive_just_before_their_step_and_not_earlier():
    records = sim(SMALL, [req("a", 2), req("b", 2, arrival_step=3)], steps=3)
    assert "b" not in ncomp(records[2])
    assert records[3].admitted == ("b",)


def test_the_record_lists_running_then_waiting_including_requests_finishing_now():
    cfg = Config(**{**SMALL.to_dict(), "max_num_seqs": 1})
    records = sim(cfg, [req("a", 2, max_tokens=1), req("b", 2)], steps=1)
    assert records[1].num_computed_tokens == (("a", 2), ("b", 0))
    assert records[1].running == ("a",) and records[1].waiting == ("b",)
    assert records[1].finished == (("a", "length"),)


def test_an_eos_for_a_request_that_was_not_scheduled_names_it():
    cfg = Config(**{**SMALL.to_dict(), "max_num_seqs": 1})
    with pytest.raises(InputError, match="'b'.*step 1.*not scheduled"):
        sim(cfg, [req("a", 2), req("b", 2)], steps=1, eos=[("b", 1)])


def test_an_eos_for_a_partial_prefill_chunk_names_the_request():
    with pytest.raises(InputError, match="'a'.*partial prefill"):
        sim(SMALL, [req("a", 20)], steps=1, eos=[("a", 1)])


def test_an_eos_before_arrival_or_after_the_last_step_or_after_finishing_is_rejected():
    with pytest.raises(InputError, match="arrives at step 2"):
        sim(SMALL, [req("a", 2, arrival_step=2)], steps=2, eos=[("a", 1)])
    with pytest.raises(InputError, match="runs 2 steps"):
        sim(SMALL, [req("a", 2)], steps=2, eos=[("a", 3)])
    with pytest.raises(InputError, match="already finished"):
        sim(SMALL, [req("a", 2, max_tokens=1)], steps=2, eos=[("a", 2)])


def test_a_prompt_as_long_as_max_model_len_is_rejected_on_arrival():
    with pytest.raises(InputError, match="max_model_len"):
        VllmV1Scheduler(Config(max_model_len=8)).add_request(req("a", 8))


def test_a_chunk_is_a_decode_only_when_it_is_the_newest_sampled_token():
    def view(prompt, outputs, computed):
        return RequestView("r", "RUNNING", prompt, outputs, prompt + outputs, computed, 0, 0,
                           0, 0)
    assert chunk_phase(view(4, 1, 4), 1) == PHASE_DECODE
    assert chunk_phase(view(1, 0, 0), 1) == PHASE_PREFILL  # one-token prompt
    assert chunk_phase(view(4, 3, 0), 7) == PHASE_PREFILL  # recomputation after preemption


def _blocks_of(sched: VllmV1Scheduler) -> list:
    """Every block the scheduler reaches: the pool's free queue and cache, the tables."""
    pool, table = sched.pool, sched.table
    out = list(pool.evictable.values())
    out += [b for copies in pool.cached.values() for b in copies.values()]
    out += [b for held in table.blocks.values() for b in held]
    return out


@pytest.mark.parametrize("policy", ["fcfs", POLICY_PRIORITY])
def test_a_deep_copy_of_the_scheduler_shares_nothing_and_keeps_its_sharing(policy):
    """The copy the explorer branches on (hand-written __deepcopy__ and __copy__ of the
    scheduler, pool, table, block and request): no block, request, queue or table is the
    original's; a block the original reaches twice (a shared prefix, cached and held) is
    one block in the copy; stepping the copy leaves the original as it was, and both step
    alike."""
    import copy

    cfg = Config(max_num_batched_tokens=16, max_num_seqs=4, max_model_len=32, block_size=2,
                 num_gpu_blocks=12, enable_prefix_caching=True, policy=policy)
    sched = VllmV1Scheduler(cfg)
    for i, prompt in enumerate((6, 7, 5)):
        sched.add_request(RequestSpec(f"r{i}", prompt, 3, arrival_step=1, prefix_group="g",
                                      shared_prefix_len=4, priority=i % 2))
    sched.step(frozenset())
    sched.step(frozenset({"r0"}))
    twin = copy.deepcopy(sched)
    mine, theirs = _blocks_of(sched), _blocks_of(twin)
    assert len({id(b) for b in mine}) < len(mine)  # the original shares blocks
    assert [(b.block_id, b.ref_cnt, b.block_hash) for b in mine] == [
        (b.block_id, b.ref_cnt, b.block_hash) for b in theirs]
    assert not {id(b) for b in mine} & {id(b) for b in theirs}
    # the same sharing: positions that hold one block in the original hold one in the copy
    assert [[i for i, c in enumerate(mine) if c is b] for b in mine] == [
        [i for i, c in enumerate(theirs) if c is b] for b in theirs]
    assert twin.table.pool is twin.pool and twin.pool is not sched.pool
    assert not {id(r) for r in sched.requests.values()} & {id(r) for r in twin.requests.values()}
    assert all(twin.requests[r.request_id] is r for r in [*twin.running, *twin.waiting])
    before = sched.state_key()
    assert twin.state_key() == before
    record = twin.step(frozenset({"r1"}))
    assert sched.state_key() == before
    assert sched.step(frozenset({"r1"})) == record


def _mutables(root) -> dict[int, object]:
    """Every mutable object reachable from `root` (containers and objects with a
    `__dict__` or slots), by id; frozen dataclasses, enums, numbers, strings and
    tuples' items are walked through or skipped as immutable."""
    import dataclasses
    from collections import deque
    from enum import Enum

    out: dict[int, object] = {}
    stack = [root]
    while stack:
        x = stack.pop()
        if x is None or isinstance(x, (bool, int, float, str, Enum, frozenset, type)) \
                or callable(x) or id(x) in out:
            continue
        if isinstance(x, tuple):
            stack.extend(x)
            continue
        if dataclasses.is_dataclass(x) and type(x).__dataclass_params__.frozen:
            continue
        out[id(x)] = x
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, set, deque)):
            stack.extend(x)
        else:
            stack.extend(getattr(x, "__dict__", {}).values())
            for cls in type(x).__mro__:
                stack.extend(getattr(x, s) for s in getattr(cls, "__slots__", ())
                             if hasattr(x, s))
    return out


@pytest.mark.parametrize("mode", ["off", "prefix", "async+prefix", "spec-prefix",
                                  "hybrid-swa", "hybrid-mamba", "hybrid-mamba-align",
                                  "hybrid-mamba-align-async-spec", "connector+prefix"])
def test_the_explorers_copy_shares_no_mutable_object_in_any_mode(mode):
    """In every mode the conformance runs (KV cache groups, Mamba align tables, the KV
    connector), a deep copy of the scheduler part-way through a run reaches no mutable
    object the original reaches, and steps as the original does."""
    import copy

    from checker.conformance.modes import MODES
    from model.vllm.reference import iter_steps

    for seed in range(3):
        # the generator's EOS and speculative choices are the real run's to apply
        # (checker/conformance/__main__.py, compare_effective): none here
        w = replace(MODES[mode].generate(seed, 30), eos=(), accepted=(), drafts=())
        run = iter_steps(w)
        for _ in range(6):
            next(run)
        sched = run.gi_frame.f_locals["scheduler"]
        twin = copy.deepcopy(sched)
        shared = set(_mutables(sched)) & set(_mutables(twin))
        assert not shared, [type(_mutables(sched)[i]).__name__ for i in shared]
        assert twin.state_key() == sched.state_key()
        assert twin.step(frozenset()) == sched.step(frozenset())
