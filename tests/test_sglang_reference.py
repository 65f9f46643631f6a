"""The SGLang reference, rule by rule, against the upstream source (paths relative to
sglang/srt/ of the v0.5.22 wheel) and the observations of the digest's CPU harness
(shared/reference/sglang_mistralrs_rules.md §1.10)."""

from fractions import Fraction
from pathlib import Path

import pytest

from model.core.types import RequestSpec, Workload
from model.run import simulate
from model.sglang.config import Config
from model.sglang.reference import (
    FINISH_ABORT,
    AddReqResult,
    PrefillAdder,
    RatioTracker,
    Req,
    SGLangScheduler,
    estimate_ratio_after_retract,
)
from model.workload import load_workload


def _req(rid, prompt, max_new, out=0, kv=0, cached=0):
    return Req(rid=rid, prompt_len=prompt, max_new_tokens=max_new, cached_prefix_len=cached,
               arrival=0, output_len=out, kv=kv, prefix_len=kv)


# --- new_token_ratio (new_token_ratio_tracker.py:21-49) ----------------------------------

def test_ratio_decays_linearly_from_init_to_014_init_in_600_steps_and_resets():
    tracker = RatioTracker(Config())
    assert tracker.current == Fraction(7, 10)
    for _ in range(599):
        tracker.decay_step()
    assert tracker.current > Fraction(98, 1000)
    tracker.decay_step()
    assert tracker.current == Fraction(98, 1000)  # 0.14 x 0.7
    tracker.decay_step()
    assert tracker.current == Fraction(98, 1000)  # clamped at the floor
    tracker.reset()
    assert tracker.current == Fraction(7, 10)


def test_conservativeness_2_caps_the_initial_ratio_at_1():
    tracker = RatioTracker(Config(schedule_conservativeness=2.0))
    assert tracker.init == 1 and tracker.min == Fraction(14, 100)


def test_ratio_after_retraction_is_outputs_plus_20_per_request_over_max_new_plus_1():
    kept = [_req("C", 100, 1000, out=50), _req("D", 50, 1000, out=200)]
    assert estimate_ratio_after_retract(kept, 20) == Fraction(290, 2001)
    assert estimate_ratio_after_retract([_req("x", 4, 5, out=1)], 20) == 1  # capped
    assert estimate_ratio_after_retract([], 20) == 0


# --- PrefillAdder (schedule_policy.py:581-1584, prefill_budget.py:62-168) -----------------

def _adder(free, running=(), ratio=Fraction(7, 10), rem_input=16384, rem_chunk=4096,
           mixed=0):
    return PrefillAdder(free, list(running), ratio, rem_input, rem_chunk, mixed)


def test_first_prompt_is_whole_second_is_chunked_to_the_chunk_left_and_then_other():
    adder = _adder(20000)
    reqs = [_req(f"r{i}", 3000, 256) for i in range(4)]
    assert adder.add_one_req(reqs[0]) == AddReqResult.CONTINUE
    assert adder.rem_total_tokens == 20000 - (3000 + 1 + 256)  # 16743
    assert adder.add_one_req(reqs[1]) == AddReqResult.OTHER
    assert reqs[1].extend_len == 1096 and adder.new_chunked_req is reqs[1]
    assert adder.can_run_list == reqs[:2]


def test_without_chunking_five_3000_token_prompts_fit_and_the_sixth_is_other():
    adder = _adder(100000, rem_chunk=None)
    reqs = [_req(f"r{i}", 3000, 256) for i in range(6)]
    results = [adder.add_one_req(r) for r in reqs]
    assert results[:5] == [AddReqResult.CONTINUE] * 5
    assert adder.rem_input_tokens == 1384
    assert results[5] == AddReqResult.OTHER and len(adder.can_run_list) == 5


def test_without_chunking_the_first_request_may_exceed_max_prefill_tokens():
    adder = _adder(50000, rem_input=1000, rem_chunk=None)
    assert adder.add_one_req(_req("big", 30000, 16)) == AddReqResult.OTHER
    assert len(adder.can_run_list) == 1  # admitted, P:1533-1539 exempts the first


def test_running_reservation_is_ratio_times_remaining_outputs_and_ends_admission():
    running = [_req(f"d{i}", 10, 2048, out=48, kv=57) for i in range(10)]
    adder = _adder(20000, running=running)
    assert adder.rem_total_tokens == 20000 - 14000  # 10 x 2000 x 0.7
    results = [adder.add_one_req(_req(f"p{i}", 1000, 256)) for i in range(5)]
    assert results == [AddReqResult.CONTINUE] * 4 + [AddReqResult.NO_TOKEN]
    assert len(adder.can_run_list) == 4


def test_at_the_floor_ratio_the_chunk_budget_limits_instead():
    running = [_req(f"d{i}", 10, 2048, out=48, kv=57) for i in range(10)]
    adder = _adder(20000, running=running, ratio=Fraction(98, 1000))
    assert adder.rem_total_tokens == 20000 - 1960
    results = [adder.add_one_req(_req(f"p{i}", 1000, 256)) for i in range(5)]
    assert results[-1] == AddReqResult.OTHER and adder.new_chunked_req is not None


def test_mixed_chunk_starts_every_budget_lower_by_the_running_requests():
    running = [_req(f"d{i}", 10, 20, out=1, kv=10) for i in range(10)]
    adder = _adder(20000, running=running, ratio=Fraction(1), mixed=10)
    assert adder.rem_input_tokens == 16384 - 10 and adder.rem_chunk_tokens == 4096 - 10
    assert adder.rem_total_tokens == 20000 - 10 - 10 * 19 and adder.cur_rem_tokens == 20000 - 10


def test_memory_check_is_strict_extend_plus_outputs_plus_one_below_rem_total():
    adder = _adder(12, rem_chunk=None)
    assert adder.add_one_req(_req("a", 5, 6)) == AddReqResult.NO_TOKEN  # 5+6+1 = 12, not < 12
    assert not adder.can_run_list
    adder = _adder(12, rem_chunk=None)
    adder.add_one_req(_req("b", 5, 5))  # 5+5+1 = 11 < 12
    assert [r.rid for r in adder.can_run_list] == ["b"]


# --- the scheduler loop (scheduler.py) ----------------------------------------------------

def _run(cfg, requests, steps, eos=()):
    return simulate(Workload(config=cfg, requests=tuple(requests), eos=eos, steps=steps,
                             engine="sglang"))


def test_a_long_prompt_is_chunked_4096_4096_1808_and_a_short_one_waits_for_the_last_chunk():
    cfg = Config(max_total_num_tokens=200000, context_length=32768)
    records = _run(cfg, [RequestSpec("long", 10000, 4), RequestSpec("short", 500, 4)], 3)
    assert [r.scheduled for r in records] == [
        (("long", 4096),), (("long", 4096),), (("long", 1808), ("short", 500))]
    assert [dict(r.extra)["chunked_req"] for r in records] == ["long", "long", None]


def test_running_requests_do_not_decode_while_a_prompt_is_chunked():
    cfg = Config(max_total_num_tokens=2000, chunked_prefill_size=32, context_length=512)
    reqs = [RequestSpec(f"d{i}", 2, 50) for i in range(10)] + [RequestSpec("long", 70, 4, 3)]
    records = _run(cfg, reqs, 7)
    kinds = [dict(r.extra)["batch"] for r in records]
    assert kinds == ["prefill", "decode", "prefill", "prefill", "prefill", "decode", "decode"]
    assert [r.scheduled for r in records[2:5]] == [(("long", 32),), (("long", 32),),
                                                   (("long", 6),)]  # ceil(70 / 32) = 3 steps


def test_mixed_chunk_decodes_the_running_requests_inside_the_prefill_batch():
    cfg = Config(max_total_num_tokens=2000, chunked_prefill_size=16, context_length=512,
                 enable_mixed_chunk=True, max_running_requests=8)
    reqs = [RequestSpec(f"d{i}", 2, 50) for i in range(3)] + [RequestSpec("long", 20, 4, 3)]
    records = _run(cfg, reqs, 4)
    assert dict(records[2].extra)["batch"] == "mixed"
    assert records[2].scheduled == (("long", 13), ("d0", 1), ("d1", 1), ("d2", 1))
    assert records[3].running == ("long", "d0", "d1", "d2")  # prefill first, then decodes


def test_retraction_pops_fewest_outputs_then_longest_prompt_and_keeps_the_rest():
    s = SGLangScheduler(Config(max_total_num_tokens=100000, context_length=4096))
    reqs = [_req("A", 100, 1000, out=5, kv=1), _req("B", 500, 1000, out=5, kv=1),
            _req("C", 100, 1000, out=50, kv=1), _req("D", 50, 1000, out=200, kv=1)]
    s.running = list(reqs)
    s.free = 0
    retracted, aborted = s._retract_decode()
    assert [r.rid for r in retracted] == ["B", "A"] and not aborted  # schedule_batch.py:3392
    # The survivors stay in retraction-sort order, most outputs first:
    # filter_batch(keep_indices=sorted_indices), schedule_batch.py:3379.
    assert [r.rid for r in s.running] == ["D", "C"] and s.free == 2


def test_a_lone_request_that_cannot_decode_is_aborted():
    s = SGLangScheduler(Config(max_total_num_tokens=100, context_length=64))
    s.running = [_req("A", 10, 20, out=3, kv=12)]
    s.requests["A"] = s.running[0]
    s.free = 0
    record = s.step()
    assert record.finished == (("A", FINISH_ABORT),) and dict(record.extra)["aborted"] == ["A"]
    assert record.free_blocks == 12 and not record.scheduled


def test_retracted_requests_join_the_waiting_tail_and_resume_by_recomputing_outputs():
    cfg = Config(max_total_num_tokens=12, chunked_prefill_size=4, max_prefill_tokens=8,
                 max_running_requests=3, disable_radix_cache=True, context_length=64,
                 schedule_conservativeness=0.3)
    records = _run(cfg, [RequestSpec("r0", 1, 5, 1), RequestSpec("r1", 4, 5, 2)], 9)
    assert records[5].preempted == ("r1",) and records[5].waiting == ("r1",)
    assert dict(records[5].extra)["new_token_ratio_after"] == 1  # the estimate, capped
    # Recomputed: prompt 4 plus its 4 outputs = 8 tokens, in chunks of 4; the last chunk
    # goes ahead although rem_total is negative (prefill_budget.py:141-144).
    assert [r.scheduled for r in records[6:8]] == [(("r1", 4),), (("r1", 4),)]
    assert records[6].resumed == ("r1",) and dict(records[7].extra)["rem_total_tokens"] < 0


def test_batch_is_full_latches_at_max_running_requests_until_the_batch_shrinks():
    cfg = Config(max_total_num_tokens=200, max_running_requests=2, context_length=64)
    reqs = [RequestSpec("a", 2, 3), RequestSpec("b", 2, 9), RequestSpec("c", 2, 3, 2)]
    records = _run(cfg, reqs, 6)
    assert [dict(r.extra)["batch_is_full"] for r in records[:3]] == [False, True, True]
    assert "c" in records[3].admitted or "c" in records[4].admitted
    joined = next(r.step for r in records if "c" in r.admitted)
    finished_a = next(r.step for r in records if any(rid == "a" for rid, _ in r.finished))
    assert joined == finished_a + 2  # a finishes; next decode filters it and clears the latch


def test_lof_serves_the_longest_output_first_and_lpm_the_longest_cached_prefix():
    reqs = [RequestSpec("a", 4, 2), RequestSpec("b", 4, 9, 1, 0, 0),
            RequestSpec("c", 4, 5, 1, 0, 3)]
    lof = _run(Config(schedule_policy="lof", max_total_num_tokens=200), reqs, 1)
    assert [rid for rid, _ in lof[0].scheduled] == ["b", "c", "a"]
    lpm = _run(Config(schedule_policy="lpm", max_total_num_tokens=200), reqs, 1)
    assert lpm[0].scheduled[0] == ("c", 1)  # 3 cached tokens, extend 1
    off = _run(Config(schedule_policy="lpm", disable_radix_cache=True,
                      max_total_num_tokens=200), reqs, 1)
    assert [rid for rid, _ in off[0].scheduled] == ["a", "b", "c"]  # falls back to fcfs


def test_lpm_does_not_sort_above_128_waiting_requests():
    s = SGLangScheduler(Config(schedule_policy="lpm", max_total_num_tokens=200000))
    for i in range(129):
        s.add_request(RequestSpec(f"r{i}", 4, 2, 1, 0, i % 4))
    s._sort_waiting()
    assert [r.rid for r in s.waiting[:3]] == ["r0", "r1", "r2"]
    s.waiting.pop()
    s._sort_waiting()
    assert [r.cached_prefix_len for r in s.waiting[:2]] == [3, 3]


def test_max_new_tokens_is_clipped_by_context_and_pool():
    cfg = Config(max_total_num_tokens=30, context_length=20)
    assert cfg.clip_max_new_tokens(10, 100) == 8  # max_req_len 19 - 10 - 1
    assert Config(max_total_num_tokens=16, context_length=64).clip_max_new_tokens(4, 100) == 10


def test_ratio_resets_only_when_nothing_is_running_chunked_or_waiting():
    cfg = Config(max_total_num_tokens=200, context_length=64)
    records = _run(cfg, [RequestSpec("a", 2, 3), RequestSpec("b", 2, 2, 6)], 8)
    ratios = [dict(r.extra)["new_token_ratio_after"] for r in records]
    assert ratios[1] < 0.7 and ratios[2] < ratios[1]
    idle = next(r.step for r in records if dict(r.extra)["batch"] == "idle")
    assert ratios[idle - 1] == 0.7


@pytest.mark.parametrize("prompt_len", [0, 10])
def test_prompts_outside_max_req_input_len_are_refused(prompt_len):
    from model.core.errors import InputError
    with pytest.raises(InputError, match="max_req_input_len"):
        _run(Config(max_total_num_tokens=16, context_length=64),
             [RequestSpec("x", prompt_len, 2)], 1)


def test_finished_requests_still_listed_count_against_the_cap_but_not_the_request_slots():
    # After step 2, a and b finished in a decode and stay in running_batch.reqs; at step 4
    # the chunked request holds a slot. allocatable = min(5 - 3, 5 - 1 - 1) = 2, so c joins
    # the last chunk (S:3907-3925; mem_cache/common.py:421 frees a finished request's slot).
    cfg = Config(max_total_num_tokens=200, chunked_prefill_size=8, max_running_requests=5,
                 context_length=64)
    reqs = [RequestSpec("a", 2, 2), RequestSpec("b", 2, 2), RequestSpec("d", 2, 9),
            RequestSpec("long", 10, 3, 3), RequestSpec("c", 2, 3, 4)]
    records = _run(cfg, reqs, 4)
    assert records[1].finished == (("a", "length"), ("b", "length"))
    assert records[3].scheduled == (("long", 2), ("c", 2))


def test_a_retracted_request_waits_behind_requests_already_waiting():
    # vLLM prepends a preempted request (request_queue.py:92-94); SGLang appends a
    # retracted one (scheduler.py:4415-4416, 3353-3368).
    root = Path(__file__).resolve().parents[1]
    records = simulate(load_workload(root / "examples" / "sglang_retracted_to_tail.json"))
    assert records[5].preempted == ("r1",) and records[5].waiting == ("r2", "r1")
    assert records[6].admitted == ("r2",)


def test_a_deep_copy_of_the_scheduler_keeps_one_request_per_id_and_steps_alike():
    """The explorer's copy (Req's hand-written __deepcopy__): no request is the
    original's, a request in several lists (running, the last batch, requests) is one
    object in the copy, and stepping the copy leaves the original as it was."""
    import copy

    cfg = Config(max_total_num_tokens=40, chunked_prefill_size=4, max_prefill_tokens=8,
                 max_running_requests=3, context_length=64)
    s = SGLangScheduler(cfg)
    for spec in (RequestSpec("a", 6, 4), RequestSpec("b", 3, 4), RequestSpec("c", 5, 4)):
        s.add_request(spec)
    s.step()
    s.step()
    twin = copy.deepcopy(s)
    held = [*twin.running, *twin.waiting, *(twin.last_batch.reqs if twin.last_batch else ())]
    assert held and all(twin.requests[r.rid] is r for r in held)
    assert not {id(r) for r in s.requests.values()} & {id(r) for r in twin.requests.values()}
    assert [(r.rid, r.prefix_len, r.output_len) for r in s.running] == [
        (r.rid, r.prefix_len, r.output_len) for r in twin.running]
    before = [(r.rid, r.prefix_len, r.output_len, r.kv) for r in s.requests.values()]
    record = twin.step()
    assert [(r.rid, r.prefix_len, r.output_len, r.kv) for r in s.requests.values()] == before
    assert s.step() == record
