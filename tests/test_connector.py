"""KV connectors (model/vllm/connector.py): the workload's external hits and load reports,
the reference's WAITING_FOR_REMOTE_KVS path (async load, N-1 cut, failure under the default
policy "fail", an abort that keeps its blocks until the load ends, a synchronous hit of the
whole prompt that reaches scheduler.py:1170), and, with vLLM installed, agreement with the
real Scheduler driving the harness's own connector."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_conformance import needs_vllm

from checker.conformance.modes import MODES
from model.core.errors import InputError
from model.core.types import FINISH_ERROR
from model.vllm.config import Config, parse_config
from model.vllm.reference import simulate
from model.workload import parse_workload, workload_to_json

CONFIG = {"max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 128,
          "block_size": 16, "num_gpu_blocks": 9, "kv_connector": True}


def _run(requests: list[dict], hits: list[dict], loads: list[dict] = (), steps: int = 6,
         aborts: list[dict] = (), **config: object):
    doc = {"config": {**CONFIG, **config}, "requests": requests, "kv_hits": hits,
           "kv_loads": list(loads), "aborts": list(aborts), "steps": steps}
    return simulate(parse_workload(doc))


def test_a_config_without_a_connector_writes_no_connector_field():
    assert "kv_connector" not in Config().to_dict()
    assert parse_config({"kv_connector": True}).to_dict()["kv_connector"] is True


def test_an_async_load_holds_its_blocks_until_reported_then_runs_one_token_short():
    records = _run([{"id": "a", "prompt_len": 64, "max_tokens": 2}],
                   [{"id": "a", "tokens": 64, "async": True}], [{"id": "a", "step": 3}])
    # Steps 1-3: loading, nothing scheduled, its 4 blocks held (8 usable).
    for rec in records[:3]:
        assert rec.scheduled == () and rec.waiting == ("a",)
        assert rec.free_blocks == 4 and dict(rec.num_computed_tokens) == {"a": 64}
    # Step 4: promoted, cut to 63 computed (scheduler.py:3171-3172), 1 token scheduled.
    assert records[3].admitted == ("a",) and records[3].scheduled == (("a", 1),)


def test_a_failed_load_ends_the_request_with_an_error_and_frees_its_blocks():
    records = _run([{"id": "a", "prompt_len": 40, "max_tokens": 2}],
                   [{"id": "a", "tokens": 32, "async": True}],
                   [{"id": "a", "step": 2, "failed": True}])
    assert records[1].finished == (("a", FINISH_ERROR),)
    assert records[2].free_blocks == 8 and records[2].waiting == ()


def test_under_recompute_a_failed_load_is_asked_for_again_and_loaded_again():
    records = _run([{"id": "a", "prompt_len": 40, "max_tokens": 2}],
                   [{"id": "a", "tokens": 32, "async": True}],
                   [{"id": "a", "step": 2, "failed": True}, {"id": "a", "step": 4}],
                   kv_load_failure_policy="recompute")
    assert all(rec.finished == () for rec in records[:4])
    # Step 3 takes the failure up (blocks freed, scheduler.py:3131-3147) and the connector's
    # answer starts a second load in the same pass; its report in step 4 admits it in 5.
    assert [dict(r.num_computed_tokens)["a"] for r in records[:4]] == [32, 32, 32, 32]
    assert records[4].admitted == ("a",) and records[4].scheduled == (("a", 8),)
    failing = _run([{"id": "a", "prompt_len": 40, "max_tokens": 2}],
                   [{"id": "a", "tokens": 32, "async": True}],
                   [{"id": "a", "step": 2, "failed": True}])
    assert failing[1].finished == (("a", FINISH_ERROR),)  # the default policy "fail"


def test_under_async_scheduling_a_victim_still_in_flight_is_not_preempted():
    # One request, one usable block: its second token needs a second block. Without a
    # connector the AsyncScheduler preempts it in step 2; with a consumer connector its
    # blocks may still be written by step 1's batch, so their free would be deferred
    # (scheduler.py:186-191, 2759-2776) and the running loop stops instead (803-806); the
    # preemption comes a step later, once step 1's output has been processed.
    doc = {"config": {"max_num_batched_tokens": 1, "max_num_seqs": 1, "max_model_len": 3,
                      "block_size": 1, "num_gpu_blocks": 2, "async_scheduling": True},
           "requests": [{"id": "a", "prompt_len": 1, "max_tokens": 2}], "steps": 3}
    plain = simulate(parse_workload(doc))
    doc["config"]["kv_connector"] = True
    deferred = simulate(parse_workload(doc))
    assert [r.preempted for r in plain] == [(), ("a",), ()]
    assert [r.preempted for r in deferred] == [(), (), ("a",)]
    assert deferred[1].running == ("a",) and deferred[1].scheduled == ()


def test_an_abort_during_a_load_keeps_the_blocks_until_the_load_is_reported():
    records = _run([{"id": "a", "prompt_len": 40, "max_tokens": 2}],
                   [{"id": "a", "tokens": 32, "async": True}], [{"id": "a", "step": 4}],
                   aborts=[{"id": "a", "step": 2}])
    assert records[1].finished == (("a", "abort"),)
    assert [r.free_blocks for r in records[1:5]] == [6, 6, 6, 8]


def test_a_report_for_a_request_with_no_load_in_flight_does_nothing():
    plain = _run([{"id": "a", "prompt_len": 40, "max_tokens": 2}],
                 [{"id": "a", "tokens": 32}])
    reported = _run([{"id": "a", "prompt_len": 40, "max_tokens": 2}],
                    [{"id": "a", "tokens": 32}], [{"id": "a", "step": 1, "failed": True}])
    assert plain == reported
    assert plain[0].scheduled == (("a", 8),)  # a synchronous hit: computed at once


def test_a_synchronous_hit_of_the_whole_prompt_reaches_the_zero_token_assertion():
    records = _run([{"id": "a", "prompt_len": 32, "max_tokens": 2}],
                   [{"id": "a", "tokens": 32}])
    assertion = dict(records[0].extra)["assertion"]
    assert assertion.startswith("scheduler.py:1170 AssertionError: request 'a'")
    assert "an external KV hit covers all 32" in assertion
    assert records[0].admitted == ("a",) and records[0].scheduled == (("a", 0),)


def test_an_async_load_of_a_one_token_prompt_reloads_forever():
    # Cut to N-1 = 0 computed, the request asks the connector again in the same pass and
    # starts a new load (scheduler.py:960-1042 after 3175-3193): it is never scheduled.
    loads = [{"id": "a", "step": s} for s in range(1, 9)]
    records = _run([{"id": "a", "prompt_len": 1, "max_tokens": 2}],
                   [{"id": "a", "tokens": 1, "async": True}], loads, steps=8)
    assert all(rec.scheduled == () and rec.waiting == ("a",) for rec in records)


def test_the_workload_round_trips_its_connector_entries():
    doc = {"config": CONFIG, "requests": [{"id": "a", "prompt_len": 4, "max_tokens": 1}],
           "kv_hits": [{"id": "a", "tokens": 3, "async": True}],
           "kv_loads": [{"id": "a", "step": 2, "failed": True}], "steps": 3}
    w = parse_workload(doc)
    assert parse_workload(workload_to_json(w)) == w


@pytest.mark.parametrize("change, words", [
    ({"config": {**CONFIG, "kv_connector": False}}, "has no KV connector"),
    ({"kv_hits": [{"id": "a", "tokens": 5}]}, "exceeds request 'a'"),
    ({"kv_hits": [{"id": "z", "tokens": 1}]}, "no request has id"),
    ({"kv_loads": [{"id": "a", "step": 1, "failed": "yes"}]}, "failed must be true or false"),
    ({"config": {**CONFIG, "speculative_method": "ngram", "num_speculative_tokens": 2}},
     "is not modelled"),
])
def test_bad_connector_input_is_refused_in_one_line(change, words):
    doc = {"config": CONFIG, "requests": [{"id": "a", "prompt_len": 4, "max_tokens": 1}],
           "kv_hits": [{"id": "a", "tokens": 3}], "steps": 3, **change}
    with pytest.raises(InputError, match=words):
        simulate(parse_workload(doc))


@needs_vllm
@pytest.mark.conformance
@pytest.mark.parametrize("mode", ["connector", "connector+prefix", "connector+async"])
def test_real_scheduler_agrees_in_connector_mode(mode):
    from checker.conformance.compare import compare

    for seed in range(60):
        divergence = compare(MODES[mode].generate(seed, 30))
        assert divergence is None, f"seed {seed}: {divergence.render()}"


# --- the front door: batchproof config --kv-transfer-config ---------------------------------

from checker.config.connector import (  # noqa: E402 - the config half of this file
    HAZARD,
    decide_connector_hazard,
    parse_kv_transfer,
)
from model.core.types import StepRecord  # noqa: E402
from model.vllm.deployment import Deployment  # noqa: E402
from properties.connector import waits_behind_loads, zero_tokens_after_load  # noqa: E402

SERVED = Config(max_num_batched_tokens=256, max_num_seqs=8, max_model_len=512, block_size=16,
                num_gpu_blocks=70)
CONSUMER = '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}'


@pytest.mark.parametrize("text, words", [
    ("nope", "not valid JSON"),
    ("[1]", "must be a JSON object"),
    ('{"kv_connector": "X"}', "kv_role is required"),
    ('{"kv_connector": "X", "kv_role": "both"}', "unsupported kv_role 'both'"),
    ('{"kv_connector": "X", "kv_role": "kv_both", "kv_load_failure_policy": "retry"}',
     "must be 'fail' or 'recompute'"),
    ('{"kv_connector": "X", "kv_role": "kv_both", "port": 1}', "unknown field 'port'"),
])
def test_a_kv_transfer_config_vllm_refuses_is_refused_in_one_line(text, words):
    with pytest.raises(InputError, match=words):
        parse_kv_transfer(text)


@pytest.mark.parametrize("text, reason", [
    (CONSUMER, None),
    ('{"kv_connector": "X", "kv_role": "kv_both"}', "producer"),
    ('{"kv_connector": "X", "kv_role": "kv_producer"}', "producer"),
    ('{"kv_connector": "X", "kv_role": "kv_consumer", "kv_load_failure_policy": "recompute"}',
     None),
])
def test_the_model_covers_a_consumer_under_either_failure_policy(text, reason):
    why = parse_kv_transfer(text).outside()
    assert (why is None) if reason is None else reason in why
    result = decide_connector_hazard(SERVED, parse_kv_transfer(text), Deployment(), True, 3)
    assert result.verdict == ("WITNESSED" if reason is None else "UNKNOWN")


def test_the_connector_hazard_is_witnessed_by_the_fewest_loads_that_leave_no_room():
    result = decide_connector_hazard(SERVED, parse_kv_transfer(CONSUMER), Deployment(), True, 3)
    assert result.name == HAZARD and result.witness is not None
    # vllm serve's defaults on a GPU: prefix caching and the AsyncScheduler, replayed so.
    served = decide_connector_hazard(SERVED, parse_kv_transfer(CONSUMER), Deployment(
        prefix_caching=True, async_scheduling=True), True, 3)
    assert served.verdict == "WITNESSED"
    assert "(AsyncScheduler, prefix caching on)" in served.detail
    assert served.witness is not None and served.witness.workload.config.async_scheduling
    w = result.witness
    # 69 usable blocks, a load holds at most cdiv(511, 16) = 32: two loads leave 5 blocks,
    # fewer than the 32 a late prompt of 511 tokens asks; one load would leave it room.
    assert [r.prompt_len for r in w.workload.requests] == [511, 511, 511]
    assert all(h.load_async for h in w.workload.kv_hits) and not w.workload.kv_loads
    records = w.replayed.records
    assert [rec.free_blocks for rec in records] == [5, 5, 5]
    assert all(rec.scheduled == () for rec in records) and w.violated_at == 3
    # Replayed independently: the reference shows the same wait.
    assert waits_behind_loads(w.workload, simulate(w.workload), 3) == 3


def test_an_unknown_pool_or_an_unmodelled_feature_leaves_the_hazard_unknown():
    kv = parse_kv_transfer(CONSUMER)
    assert "pool size" in decide_connector_hazard(SERVED, kv, Deployment(), False, 3).detail
    spec = replace(SERVED, speculative_method="ngram", num_speculative_tokens=2)
    assert decide_connector_hazard(spec, kv, Deployment(), True, 3).verdict == "UNKNOWN"


def test_a_request_admitted_after_its_load_always_gets_a_token():
    records = _run([{"id": "a", "prompt_len": 64, "max_tokens": 2}],
                   [{"id": "a", "tokens": 64, "async": True}], [{"id": "a", "step": 1}])
    assert zero_tokens_after_load(records) is None
    fake = (*records[:1], StepRecord(step=2, scheduled=(("a", 0),), admitted=("a",),
                                     resumed=(), preempted=(), finished=(), free_blocks=4,
                                     num_computed_tokens=(("a", 64),)))
    assert zero_tokens_after_load(fake) == 2


# --- liveness: a request blocked on its KV load forever ------------------------------------

import itertools  # noqa: E402

from model.core.types import ExternalHit, KVLoadEvent, RequestSpec, Workload  # noqa: E402
from properties.connector import never_admitted_after_load  # noqa: E402


def _fair_family(two: bool, reported: bool = True):
    """Small workloads (block size 2, pools of 3 or 5 usable blocks, 1 or 2 seats), every
    external hit of every prompt of 1..5 tokens, sync or async; with `two`, a second request
    of 1 or 3 tokens (an async hit of none or all of it) arriving in step 1 or 2. Fairness:
    the worker reports every load in flight from `d` (0 or 2) steps after its request's
    arrival on, so each load ends within 2 steps; `reported` False: no load ever ends."""
    for budget, seats, blocks, d in itertools.product((4, 8), (1, 2), (4, 6), (0, 2)):
        cfg = Config(max_num_batched_tokens=budget, max_num_seqs=seats, max_model_len=8,
                     block_size=2, num_gpu_blocks=blocks, kv_connector=True)
        seconds = [None] if not two else [None, *((p, t, a) for p in (1, 3) for t in (0, p)
                                                  for a in (1, 2))]
        for p0, a0, second in itertools.product(range(1, 6), (True, False), seconds):
            for t0 in range(p0 + 1):
                reqs = [RequestSpec("r0", p0, 2)]
                hits = [ExternalHit("r0", t0, a0)]
                if second is not None:
                    reqs.append(RequestSpec("r1", second[0], 2, arrival_step=second[2]))
                    hits.append(ExternalHit("r1", second[1], True))
                loads = tuple(KVLoadEvent(r.id, s) for s in range(1, 31) for r in reqs
                              if reported and s >= r.arrival_step + d)
                yield Workload(cfg, tuple(reqs), steps=30, kv_hits=tuple(hits),
                               kv_loads=loads)


def _blocked(workloads) -> dict[tuple[int, int], int]:
    """(prompt_len, hit tokens) of each request blocked on its load for a whole run."""
    out: dict[tuple[int, int], int] = {}
    for w in workloads:
        rid = never_admitted_after_load(simulate(w))
        if rid is not None:
            key = (next(r.prompt_len for r in w.requests if r.id == rid),
                   next(h.tokens for h in w.kv_hits if h.id == rid))
            out[key] = out.get(key, 0) + 1
    return out


def test_with_every_load_ending_only_a_one_token_prompt_is_blocked_forever():
    # Under the fairness premise every request with an async hit is admitted, except a
    # 1-token prompt whose one token the connector offers again and again: cut to 0 after
    # each load (scheduler.py:3171-3172), it looks new and starts another (960-1042).
    blocked = _blocked(_fair_family(two=False))
    assert set(blocked) == {(1, 1)}


def test_with_loads_that_never_end_every_async_hit_is_blocked_forever():
    workloads = [w for w in _fair_family(two=False, reported=False)
                 if w.kv_hits[0].load_async and w.kv_hits[0].tokens > 0]
    assert sum(_blocked(workloads).values()) == len(workloads) == 15 * 16


@pytest.mark.slow
def test_with_every_load_ending_only_one_token_prompts_are_blocked_forever_two_requests():
    # The quick test's family with a second request competing for seats and blocks:
    # 5760 runs of 30 steps; still only the 1-token reload.
    assert set(_blocked(_fair_family(two=True))) == {(1, 1)}


@needs_vllm
@pytest.mark.conformance
def test_the_real_scheduler_shows_the_hazard_witness_and_the_one_token_reload():
    from checker.config.connector import minimal_witness
    from checker.conformance.vllm_real import run_real_vllm

    workload, records, at = minimal_witness(SERVED, 3)
    real = run_real_vllm(workload)
    assert real == records and waits_behind_loads(workload, real, 3) == at == 3
    one = Workload(Config(max_num_batched_tokens=8, max_num_seqs=2, max_model_len=8,
                          block_size=2, num_gpu_blocks=6, kv_connector=True),
                   (RequestSpec("a", 1, 2),), steps=12,
                   kv_hits=(ExternalHit("a", 1, True),),
                   kv_loads=tuple(KVLoadEvent("a", s) for s in range(1, 13)))
    assert never_admitted_after_load(run_real_vllm(one)) == "a"


def test_the_pool_and_progress_invariants_hold_on_connector_runs():
    # The step observables count the blocks a request holds outside `running` (the record's
    # kv_held) and what a step gave back, so the invariants read a connector run as they
    # read any other; the hazards and the properties of the engine without a connector
    # (a preempted request at the very head, a whole prompt with chunking off) are not
    # claimed here.
    from checker.methods.trace_check import check_trace, properties_for

    names = ("kv_blocks_conserved", "computed_within_tokens", "budget_respected",
             "running_within_max_num_seqs", "no_admission_after_preemption")
    props = properties_for("vllm-v1", names)
    loads = 0
    for seed in range(80):
        mode = "connector+prefix" if seed % 2 else "connector"
        w = replace(MODES[mode].generate(seed, 30), eos=())
        records = simulate(w)
        loads += sum(1 for step in (records or ()) for rid, n in step.num_computed_tokens
                     if rid in step.waiting and n > 0)
        for verdict in check_trace("vllm-v1", w, records, props):
            assert verdict.verdict == "HOLDS", (seed, verdict)
    assert loads > 100  # the runs do hold blocks while loading


def test_config_takes_the_kv_transfer_config_flag_and_shows_the_witness(capsys):
    from checker.cli.main import main

    base = ["config", "--num-gpu-blocks-override", "70", "--max-model-len", "512",
            "--max-num-batched-tokens", "256", "--max-num-seqs", "8", "--device", "h100",
            "--hazard", HAZARD]
    code = main([*base, "--kv-transfer-config", CONSUMER, "--strict"])
    out, _ = capsys.readouterr()
    assert code == 1  # --strict: a hazard witnessed
    assert "kv connector (--kv-transfer-config): NixlConnector, kv_role kv_consumer" in out
    assert f"[WITNESSED] {HAZARD}" in out
    assert "external KV hits (tokens): load0=511 async, load1=511 async" in out
    assert "ignored vLLM flags" not in out
    code = main([*base, "--kv-transfer-config", '{"kv_connector": "X"}'])
    _, err = capsys.readouterr()
    assert code == 2 and "kv_role is required" in err and len(err.strip().splitlines()) == 1


def _simulate_cli(tmp_path, *flags: str):
    import json
    import subprocess
    import sys

    doc = {"config": {k: v for k, v in CONFIG.items() if k != "kv_connector"},
           "requests": [{"id": "a", "prompt_len": 64, "max_tokens": 2}],
           "kv_hits": [{"id": "a", "tokens": 64, "async": True}],
           "kv_loads": [{"id": "a", "step": 3}], "steps": 5}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    return subprocess.run([sys.executable, "-m", "checker.cli", "simulate", str(path),
                           "--json", *flags], capture_output=True, text=True)


def test_simulate_runs_a_consumers_kv_transfer_config_on_the_reference(tmp_path):
    kv = '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer"}'
    # The reference runs a connector beside async scheduling and prefix caching (the
    # conformance modes connector+async, connector+prefix), so simulate needs neither off.
    done = _simulate_cli(tmp_path, "--kv-transfer-config", kv)
    assert done.returncode == 0, done.stderr
    assert "ignored" not in done.stderr  # the flag is read, not passed over
    import json

    steps = json.loads(done.stdout)["steps"]
    assert [s["scheduled"] for s in steps[:3]] == [{}, {}, {}]  # loading until step 3
    assert steps[3]["admitted"] == ["a"]
    # Without a connector the workload's kv_hits name nothing to answer them: exit 2.
    plain = _simulate_cli(tmp_path)
    assert plain.returncode == 2 and "kv_connector" in plain.stderr
    assert "Traceback" not in plain.stderr


def test_simulate_refuses_a_producers_kv_transfer_config(tmp_path):
    kv = '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}'
    done = _simulate_cli(tmp_path, "--kv-transfer-config", kv)
    assert done.returncode == 2 and "kv-transfer-config" in done.stderr
    assert done.stderr.count("\n") == 1
