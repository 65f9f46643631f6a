"""Client aborts (docs/simulation_contract.md, `aborts`): the workload format, the
reference's `abort` (Scheduler.finish_requests with FINISHED_ABORTED), the observation of
an aborted request, and, with vLLM installed, agreement with the real Scheduler in every
conformance mode on generated workloads with aborts (checker/conformance/aborts.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_conformance import needs_vllm

from checker.conformance.aborts import with_aborts
from checker.conformance.modes import MODES
from checker.methods.trace_check import check_trace, properties_for
from model.core.errors import InputError
from model.core.types import FINISH_ABORT
from model.vllm.reference import simulate
from model.workload import parse_workload, workload_to_json

CONFIG = {"max_num_batched_tokens": 16, "max_num_seqs": 4, "num_gpu_blocks": 9,
          "block_size": 4, "max_model_len": 32}


def _workload(aborts: list[dict], **config: object) -> dict:
    return {"config": {**CONFIG, **config},
            "requests": [{"id": "a", "prompt_len": 6, "max_tokens": 8},
                         {"id": "b", "prompt_len": 6, "max_tokens": 8, "arrival_step": 2}],
            "aborts": aborts, "steps": 8}


def test_an_abort_before_the_schedule_frees_the_request_at_once():
    w = parse_workload(_workload([{"id": "a", "step": 3}]))
    records = simulate(w)
    assert records[2].finished[0] == ("a", FINISH_ABORT)
    assert "a" not in dict(records[2].scheduled) and "a" not in records[2].running
    # b alone holds blocks from step 3 on: 8 usable blocks minus b's 2 (6 + 1 tokens)
    assert records[2].free_blocks == 8 - 2
    assert all("a" not in dict(r.scheduled) for r in records[3:])


def test_an_abort_after_the_schedule_drops_its_output():
    w = parse_workload(_workload([{"id": "a", "step": 3, "after_schedule": True}]))
    records = simulate(w)
    assert dict(records[2].scheduled)["a"] == 1  # scheduled, then aborted
    assert records[2].finished[0] == ("a", FINISH_ABORT)
    assert "a" in records[2].running  # read right after scheduling
    assert all("a" not in dict(r.scheduled) for r in records[3:])


def test_an_abort_of_a_finished_or_unknown_request_does_nothing():
    base = simulate(parse_workload(_workload([])))
    late = simulate(parse_workload(_workload([{"id": "b", "step": 1}])))  # b not arrived
    assert late == base


def test_async_abort_with_output_in_flight_finishes_nothing_later():
    w = parse_workload(_workload([{"id": "a", "step": 4, "after_schedule": True}],
                                 async_scheduling=True))
    records = simulate(w)
    ends = [(r.step, rid, why) for r in records for rid, why in r.finished if rid == "a"]
    assert ends == [(4, "a", FINISH_ABORT)]


def test_properties_hold_on_a_reference_run_with_aborts():
    w = replace(with_aborts(MODES["prefix"].generate(7, 30), 7), eos=())
    assert w.aborts
    verdicts = check_trace(w.engine, w, simulate(w), properties_for(w.engine, ()))
    assert [v.name for v in verdicts if v.verdict == "VIOLATED" and v.status == "departs"] == []


def test_aborts_round_trip_and_bad_entries_are_refused():
    doc = _workload([{"id": "a", "step": 3, "after_schedule": True}, {"id": "b", "step": 4}])
    assert workload_to_json(parse_workload(doc))["aborts"] == doc["aborts"]
    for bad, words in (({"id": "z", "step": 2}, "no request has id"),
                       ({"id": "a", "step": 0}, "step must be >= 1"),
                       ({"id": "a", "step": 99}, "at most 8"),
                       ({"id": "a", "step": 2, "after_schedule": 1}, "true or false"),
                       ({"id": "a"}, "must be an object")):
        with pytest.raises(InputError, match=words):
            parse_workload(_workload([bad]))


@needs_vllm
@pytest.mark.conformance
@pytest.mark.parametrize("mode", sorted(MODES))
def test_real_scheduler_agrees_with_aborts(mode):
    from checker.conformance.compare import compare

    aborted = 0
    for seed in range(60):
        w = with_aborts(MODES[mode].generate(seed, 30), seed)
        aborted += len(w.aborts)
        divergence = compare(w)
        assert divergence is None, f"seed {seed}: {divergence.render()}"
    assert aborted >= 60
