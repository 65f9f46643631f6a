"""The recorder (checker/live/recorder.py) and the trace reader (checker/live/trace.py)
against the conformance harness, in-process: the harness drives vLLM's real Scheduler or
AsyncScheduler, built as the recorder's subclass, through generated workloads of every
conformance mode (with client aborts); the live trace it writes, read back, must give the
harness's own StepRecords step for step and the workload's arrivals, aborts and stops.
This covers what a CPU server cannot show: the CPU platform runs only the synchronous
Scheduler (platforms/cpu.py:329-331), the harness runs both."""

from __future__ import annotations

import pytest
from test_conformance import needs_vllm

from checker.conformance.aborts import with_aborts
from checker.conformance.modes import MODES
from checker.live.recorder import ENV_TRACE, recording_class
from checker.live.trace import load_live

pytestmark = [needs_vllm, pytest.mark.conformance]


# A live trace cannot carry a KV connector's answers (the environment the connector mode
# draws): the recorder marks a connector run outside the model, as for a real server.
@pytest.mark.parametrize("mode", sorted(m for m in MODES if not m.startswith("connector")))
def test_the_recorded_trace_is_the_harness_run(mode, tmp_path, monkeypatch):
    from checker.conformance import vllm_real

    v = vllm_real._vllm()
    monkeypatch.setattr(v, "Scheduler", recording_class(v.Scheduler))
    monkeypatch.setattr(v, "AsyncScheduler", recording_class(v.AsyncScheduler))
    checked = 0
    for seed in range(25):
        workload = with_aborts(MODES[mode].generate(seed, 30), seed)
        trace = tmp_path / f"{seed}.jsonl"
        monkeypatch.setenv(ENV_TRACE, str(trace))
        held = []
        run = vllm_real.run_real_vllm_detailed(workload, instrument=held.append)
        held[0]._batchproof.writer.close()
        if any(dict(r.extra).get("assertion") for r in run.records):
            continue  # the engine died: the harness records the dead steps, a server has none
        if workload.config.async_scheduling and any(a.after_schedule and a.step == 1
                                                    for a in workload.aborts):
            # After an async engine's first schedule no update is due, so "after step 1's
            # schedule" and "before step 2's" are one moment: the trace names it the
            # second way, the harness the first (the same run either way).
            continue
        if workload.config.hybrid_kv:
            _fits_schema(trace)
        live = load_live(trace)
        effective = run.effective(workload)
        assert not live.recorder_error and not live.cut_short, live.recorder_error
        assert live.records == _dropped_unaccepted(run.records,
                                                   workload.config.async_scheduling), \
            f"seed {seed}"
        arrived = {r.id: (r.prompt_len, r.max_tokens, r.arrival_step, r.priority)
                   for r in effective.requests if r.arrival_step <= len(live.records)}
        assert {r.id: (r.prompt_len, r.max_tokens, r.arrival_step, r.priority)
                for r in live.workload.requests} == arrived
        lag = 1 if workload.config.async_scheduling else 0  # whose output stopped it
        stops = {(rid, rec.step - lag) for rec in run.records for rid, why in rec.finished
                 if why == "stop"}
        assert {(e.id, e.step) for e in live.workload.eos} == stops
        took = {(rid, rec.step) for rec in run.records for rid, why in rec.finished
                if why == "abort"}
        assert {(a.id, a.step) for a in live.workload.aborts} == took
        checked += 1
    assert checked >= 15


def _fits_schema(trace):
    """Every line of a trace fits docs/schema/live_trace.schema.json, and each schedule
    carries the groups' blocks."""
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).parents[1] / "docs" / "schema"
                         / "live_trace.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    lines = [json.loads(t) for t in trace.read_text().splitlines() if t.strip()]
    for line in lines:
        validator.validate(line)
    assert lines[0]["config"]["kv_cache_groups"]
    assert all("group_blocks" in e for e in lines if e["ev"] == "schedule")


def _dropped_unaccepted(records, is_async):
    """The harness's records with no drafts accepted in an output that is dropped
    unprocessed (its request aborted before the update that would process it, or, async,
    finished by the output before): a trace, and the reference, cannot say what the
    harness chose to accept in it."""
    from dataclasses import replace

    out = []
    for i, record in enumerate(records):
        facts = dict(record.extra)
        if "accepted" not in facts:
            out.append(record)
            continue
        processed_in = records[i + 1] if is_async and i + 1 < len(records) else record
        gone = {rid for rid, why in processed_in.finished if why == "abort"}
        if is_async:  # and the last step's output is never processed
            gone |= {rid for rid, _ in record.finished}
            if i + 1 == len(records):
                gone |= set(facts["accepted"])
        accepted = {rid: 0 if rid in gone else n for rid, n in facts["accepted"].items()}
        out.append(replace(record, extra=tuple((k, accepted if k == "accepted" else v)
                                               for k, v in record.extra)))
    return tuple(out)
