"""The baselines' reference, rule by rule. The evidence is the concept definition: seed 000
Table 1 and /work/shared/reference/sglang_mistralrs_rules.md §3.1 (static) and §3.2
(request-level dynamic)."""

from dataclasses import replace

import pytest

from model.baselines.config import DYNAMIC_DEFAULTS, STATIC_DEFAULTS, parse_config
from model.core.errors import InputError
from model.core.types import RequestSpec, Workload
from model.registry import get
from model.run import simulate

STATIC = replace(STATIC_DEFAULTS, max_batch_size=2, block_size=2, num_kv_blocks=8,
                 flush_timeout=3)
DYNAMIC = replace(DYNAMIC_DEFAULTS, max_batch_size=2, block_size=2, num_kv_blocks=8)


def run(cfg, engine, requests, steps):
    return simulate(Workload(config=cfg, requests=tuple(requests), steps=steps, engine=engine))


def test_static_launches_only_when_full_or_flushed():
    # §3.1: |Q| >= S, or the flush rule (here: the head waited flush_timeout steps)
    lone = run(STATIC, "static", [RequestSpec("a", 2, 2)], 4)
    assert [r.admitted for r in lone] == [(), (), (), ("a",)]
    full = run(STATIC, "static", [RequestSpec("a", 2, 2), RequestSpec("b", 2, 2)], 1)
    assert full[0].admitted == ("a", "b")


def test_dynamic_launches_whatever_is_queued_when_idle():
    # §3.2: B == empty and |Q| >= 1
    records = run(DYNAMIC, "dynamic", [RequestSpec("a", 2, 2)], 1)
    assert records[0].admitted == ("a",)


def test_no_join_while_a_batch_runs_and_finished_slots_stay_idle():
    # §3.1-3.2 invariants: no admission while B runs; slots freed only at batch end
    # c arrives at 2; dynamic launches it as soon as the batch ends (step 4), static only
    # when its wait reaches the flush timeout of 3 (step 5)
    for cfg, engine, padded, launch in ((STATIC, "static", 2, 5), (DYNAMIC, "dynamic", 0, 4)):
        records = run(cfg, engine, [RequestSpec("a", 2, 1), RequestSpec("b", 2, 3),
                                    RequestSpec("c", 2, 1, arrival_step=2)], 5)
        assert records[0].admitted == ("a", "b")
        assert records[0].finished == (("a", "length"),)
        assert [dict(r.extra)["idle_slots"] for r in records[:4]] == [0, 1, 1, 0]
        assert sum(dict(r.extra)["padded_rows"] for r in records) == padded
        assert [r.admitted for r in records[1:3]] == [(), ()]
        assert [r.step for r in records if r.admitted == ("c",)] == [launch]


def test_launch_reserves_the_worst_case_and_stops_at_the_first_misfit():
    # §3.1: first min(S, |Q|) requests whose sum of (in_len + max_new) fits M, FIFO
    cfg = replace(DYNAMIC, max_batch_size=3, num_kv_blocks=5)
    records = run(cfg, "dynamic", [RequestSpec("a", 3, 3), RequestSpec("b", 4, 4),
                                   RequestSpec("c", 1, 1)], 1)
    assert records[0].admitted == ("a",)  # b needs 4 blocks, 2 are left; c waits behind b
    assert records[0].free_blocks == 2


def test_a_request_larger_than_the_pool_is_bad_input():
    w = Workload(config=STATIC, requests=(RequestSpec("a", 10, 10),), steps=2, engine="static")
    with pytest.raises(InputError, match="num_kv_blocks"):
        get("static").check_admissible(w)


@pytest.mark.parametrize("raw,fix", [({"launch": "soon"}, "launch must be"),
                                     ({"pad_finished": 1}, "true or false"),
                                     ({"max_batch_size": 0}, ">= 1"),
                                     ({"batch": 2}, "unknown baseline config field")])
def test_bad_config_is_one_line_input_error(raw, fix):
    with pytest.raises(InputError, match=fix):
        parse_config(raw, STATIC_DEFAULTS)


@pytest.mark.parametrize("engine,cfg", [("static", STATIC), ("dynamic", DYNAMIC)])
def test_the_explorers_copy_shares_no_mutable_object(engine, cfg):
    """Member's field-by-field copy: part-way through a run, a deep copy of the scheduler
    reaches no mutable object the original reaches and steps as the original does."""
    import copy

    from test_reference_vllm_v1 import _mutables

    from model.run import iter_records

    requests = [RequestSpec(f"r{i}", 2 + i % 3, 2 + i % 2, arrival_step=1 + i // 2)
                for i in range(5)]
    run = iter_records(Workload(config=cfg, requests=tuple(requests), steps=8, engine=engine))
    for _ in range(3):
        sched, _ = next(run)
    twin = copy.deepcopy(sched)
    assert not set(_mutables(sched)) & set(_mutables(twin))
    assert twin.step(frozenset()) == sched.step(frozenset())
