"""The digest's Part 2 scenarios (A, B, C, C2, D, E, F), observed on vLLM v0.32.0's real
`Scheduler` on a CPU (/work/shared/reference/vllm_v1_rules.md), replayed step for step on
the reference scheduler.

Step numbering. The driver admits the ten one-token decodes in a `schedule()` call it
numbers "step 0", and P24 arrives after it. We model that call as our step 1: the decodes
arrive at step 1 and P24 at step 2, so the driver's step k is our step k + 1. Scenario F
has no step 0 (its first requests are admitted at the driver's step 1), so there the
numbers are the same.

Values the digest does not state are chosen so that they do not matter: decodes have
max_tokens 100 (20 in E, as stated there), max_model_len is 128 (32 in D, as stated),
max_num_seqs is 16, and "ample" KV is 40 blocks. Preemption lists are asserted in
preemption order; the digest prints them sorted (the driver reads a set), so the sorted
list is asserted against the digest's too.
"""

from model.core.types import RequestSpec, StepRecord
from model.vllm.config import POLICY_PRIORITY, Config
from model.vllm.reference import VllmV1Scheduler

TEN = tuple(f"d{i}" for i in range(10))


def decodes(n, max_tokens=100, priorities=None):
    return [RequestSpec(f"d{i}", prompt_len=1, max_tokens=max_tokens, arrival_step=1,
                        priority=0 if priorities is None else priorities[i])
            for i in range(n)]


def run(cfg, requests, steps, eos=None):
    """Drive the scheduler; return (records by step number, the scheduler)."""
    eos = eos or {}
    sched = VllmV1Scheduler(cfg)
    records: dict[int, StepRecord] = {}
    for step in range(1, steps + 1):
        for spec in requests:
            if spec.arrival_step == step:
                sched.add_request(spec)
        records[step] = sched.step(frozenset(eos.get(step, ())))
    return records, sched


def total(record):
    return sum(n for _, n in record.scheduled)


def ones(*ids):
    return {rid: 1 for rid in ids}


def p24(max_tokens=100, priority=0):
    return RequestSpec("P24", prompt_len=24, max_tokens=max_tokens, arrival_step=2,
                       priority=priority)


CFG = Config(max_num_batched_tokens=16, max_num_seqs=16, max_model_len=128, block_size=16,
             num_gpu_blocks=40)


def test_step_zero_of_the_driver_is_our_step_one_admitting_the_ten_decodes():
    records, _ = run(CFG, [*decodes(10), p24()], steps=1)
    assert records[1].admitted == TEN
    assert dict(records[1].scheduled) == ones(*TEN)


def test_scenario_a_ample_kv_gives_the_prompt_six_tokens_for_four_steps_then_a_decode():
    records, _ = run(CFG, [*decodes(10), p24()], steps=6)
    ncomp = {s: dict(records[s].num_computed_tokens)["P24"] for s in range(2, 6)}
    assert dict(records[2].scheduled) == {**ones(*TEN), "P24": 6}
    assert records[2].admitted == ("P24",)
    assert records[2].free_blocks == 28
    assert ncomp == {2: 6, 3: 12, 4: 18, 5: 24}
    assert records[4].free_blocks == 27
    for s in range(2, 6):
        assert total(records[s]) == 16
        assert dict(records[s].scheduled)["P24"] == 6
    assert total(records[6]) == 11
    assert dict(records[6].scheduled) == {**ones(*TEN), "P24": 1}


def test_scenario_b_sixteen_decodes_eat_the_whole_budget_and_the_prompt_gets_nothing():
    records, _ = run(CFG, [*decodes(16), p24()], steps=4)
    for s in (2, 3, 4):
        r = records[s]
        assert total(r) == 16
        assert dict(r.scheduled) == ones(*(f"d{i}" for i in range(16)))
        assert r.admitted == ()
        assert len(r.running) == 16
        assert r.waiting == ("P24",)
        assert dict(r.num_computed_tokens)["P24"] == 0


SCARCE = Config(max_num_batched_tokens=16, max_num_seqs=16, max_model_len=128,
                block_size=16, num_gpu_blocks=12)


def test_scenario_c_scarce_kv_blocks_the_prompt_then_decodes_preempt_the_tail():
    records, _ = run(SCARCE, [*decodes(10), p24()], steps=23)
    for s in range(2, 17):  # driver steps 1..15
        r = records[s]
        assert total(r) == 10
        assert r.waiting == ("P24",)
        assert r.free_blocks == 1
        assert dict(r.num_computed_tokens)["P24"] == 0
    r = records[17]  # driver step 16
    assert total(r) == 5
    assert dict(r.scheduled) == ones("d0", "d1", "d2", "d3", "d4")
    assert r.preempted == ("d9", "d8", "d7", "d6", "d5")  # d5 preempted itself, last
    assert sorted(r.preempted) == ["d5", "d6", "d7", "d8", "d9"]  # as the digest prints
    assert len(r.running) == 5 and len(r.waiting) == 6
    assert r.waiting == ("d5", "d6", "d7", "d8", "d9", "P24")
    assert r.free_blocks == 1
    assert r.admitted == ()
    for s in range(18, 24):  # driver steps 17..22: head d5 needs 2 blocks, 1 is free
        assert total(records[s]) == 5
        assert records[s].admitted == () and records[s].resumed == ()


def test_scenario_c2_priority_admits_in_heap_order_and_preempts_the_largest_keys():
    cfg = Config(**{**SCARCE.to_dict(), "policy": POLICY_PRIORITY})
    prios = [i % 3 for i in range(10)]
    records, _ = run(cfg, [*decodes(10, priorities=prios), p24(priority=1)], steps=17)
    assert records[1].admitted == ("d0", "d3", "d6", "d9", "d1", "d4", "d7", "d2", "d5", "d8")
    r = records[17]  # driver step 16
    assert dict(r.scheduled) == ones("d0", "d3", "d6", "d9", "d1")
    assert r.preempted == ("d8", "d5", "d2", "d7", "d4")  # d4 = itself, then break
    assert sorted(r.preempted) == ["d2", "d4", "d5", "d7", "d8"]


def test_scenario_d_chunking_off_the_prompt_never_fits_the_remaining_budget():
    cfg = Config(max_num_batched_tokens=32, max_num_seqs=16, max_model_len=32,
                 block_size=16, num_gpu_blocks=40, enable_chunked_prefill=False)
    records, _ = run(cfg, [*decodes(10, max_tokens=20), p24()], steps=5)
    for s in range(2, 6):  # driver steps 1..4
        assert total(records[s]) == 10
        assert dict(records[s].scheduled) == ones(*TEN)
        assert dict(records[s].num_computed_tokens)["P24"] == 0
        assert records[s].waiting == ("P24",)


def test_scenario_e_eos_frees_room_then_preemption_and_recompute_in_chunks():
    requests = [*decodes(10, max_tokens=20), p24(max_tokens=4)]
    records, _ = run(SCARCE, requests, steps=28, eos={4: {"d1"}})
    others = [f"d{i}" for i in range(10) if i != 1]
    assert records[4].finished == (("d1", "stop"),)  # driver step 3
    assert total(records[5]) == 16
    assert dict(records[5].scheduled) == {**ones(*others), "P24": 7}
    assert records[5].admitted == ("P24",)
    assert dict(records[8].scheduled)["P24"] == 3  # driver step 7
    for s in (9, 10, 11):  # driver steps 8..10: P24 decodes
        assert dict(records[s].scheduled)["P24"] == 1
    assert records[11].finished == (("P24", "length"),)
    assert records[17].preempted == ("d9", "d8", "d7", "d6")  # driver step 16
    assert sorted(records[17].preempted) == ["d6", "d7", "d8", "d9"]
    assert records[20].finished == tuple((d, "length") for d in ("d0", "d2", "d3", "d4", "d5"))
    assert total(records[21]) == 16
    assert records[21].scheduled == (("d6", 16),) and records[21].resumed == ("d6",)
    assert dict(records[22].scheduled) == {"d6": 1, "d7": 15}
    assert records[22].resumed == ("d7",)
    assert dict(records[23].scheduled) == {"d6": 1, "d7": 2, "d8": 13}
    assert records[23].resumed == ("d8",)
    assert dict(records[24].scheduled) == {"d6": 1, "d7": 1, "d8": 4, "d9": 10}
    assert records[24].resumed == ("d9",)
    finished_late = {rid: s for s in range(25, 29) for rid, _ in records[s].finished}
    assert finished_late == {"d6": 25, "d7": 26, "d8": 27, "d9": 28}
    assert all(reason == "length" for s in range(25, 29) for _, reason in records[s].finished)


def test_scenario_f_a_step_that_preempts_admits_nobody_even_if_the_head_fits():
    cfg = Config(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=128,
                 block_size=16, num_gpu_blocks=5, policy=POLICY_PRIORITY)
    requests = [
        RequestSpec("d0", prompt_len=15, max_tokens=100, arrival_step=1, priority=0),
        RequestSpec("L", prompt_len=40, max_tokens=100, arrival_step=1, priority=1),
        RequestSpec("W", prompt_len=4, max_tokens=100, arrival_step=2, priority=0),
    ]
    records, sched = run(cfg, requests, steps=4)
    assert dict(records[1].scheduled) == {"d0": 15, "L": 40}
    assert records[1].admitted == ("d0", "L") and records[1].free_blocks == 0
    assert dict(records[2].scheduled) == {"d0": 1, "L": 1}
    assert records[2].waiting == ("W",) and records[2].free_blocks == 0
    assert dict(records[3].scheduled) == {"d0": 1}
    assert records[3].preempted == ("L",)
    assert records[3].waiting == ("W", "L") and records[3].free_blocks == 2
    assert records[3].admitted == ()
    assert dict(records[4].scheduled) == {"d0": 1, "W": 4}
    assert records[4].admitted == ("W",)
    assert records[4].waiting == ("L",) and records[4].free_blocks == 1
    view = sched.view("L")
    assert (view.status, view.num_computed_tokens, view.num_tokens, view.num_preemptions) == (
        "PREEMPTED", 0, 42, 1)
