"""Live traces (docs/live.md) without a server: tests/data/live/tiny_prefix.jsonl was
recorded from the tiny model of tests/data/tiny_llama served by vLLM 0.32.0's CPU build
(60 requests, prefix caching on, aborting clients; checker/live/load.py seed 7). The trace
is checked as recorded, then tampered with, cut, or given what the model does not cover.
The server itself runs in tests/test_live_server.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.live.trace import OutsideModel, is_live_trace, load_live
from checker.live.verdict import check_live, earlier, minimal_workload, without
from model.core.types import FINISH_ABORT

FIXTURE = Path(__file__).parent / "data" / "live" / "tiny_prefix.jsonl"


def _lines() -> list[dict]:
    return [json.loads(x) for x in FIXTURE.read_text().splitlines()]


def _write(tmp_path: Path, lines: list[dict], tail: str = "") -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines) + tail)
    return p


def test_the_recorded_trace_reads_as_the_engine_ran_it():
    t = load_live(FIXTURE)
    assert is_live_trace(FIXTURE) and t.vllm_version == "0.32.0" and t.scheduler == "Scheduler"
    cfg = t.workload.config
    assert cfg.enable_prefix_caching and not cfg.async_scheduling and cfg.block_size == 32
    assert len(t.records) == sum(1 for x in _lines() if x["ev"] == "schedule")
    assert any(r.prefix_group for r in t.workload.requests)  # shared system prompts
    assert t.workload.aborts and t.workload.eos
    assert {r for r in t.ends.values()} <= {"stop", "length", "abort", "held"}
    aborted = {rid for rec in t.records for rid, why in rec.finished if why == FINISH_ABORT}
    assert aborted == {a.id for a in t.workload.aborts}


def test_the_recorded_trace_is_clean():
    report = check_live(load_live(FIXTURE))
    assert report.clean and report.steps_agreeing == len(report.trace.records)
    assert not report.departs and report.lost == ()
    assert {v.verdict for v in report.verdicts} <= {"HOLDS", "VIOLATED", "NOT_CHECKED"}


def test_check_trace_on_a_live_trace(capsys):
    assert main(["check-trace", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    steps = len(load_live(FIXTURE).records)
    assert f"agreement: {steps}/{steps} steps agree" in out and "0 lost" in out
    assert main(["check-trace", str(FIXTURE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["live"] and doc["agreement"]["agreeing"] == steps and doc["exit_code"] == 0


def test_a_tampered_step_diverges_at_that_step(tmp_path, capsys):
    lines = _lines()
    step = next(x for x in lines if x["ev"] == "schedule" and x["step"] == 10)
    step["free_blocks"] -= 1
    assert main(["check-trace", str(_write(tmp_path, lines))]) == 1
    out = capsys.readouterr().out
    assert "DIVERGES at step 10 of the live run (9/" in out and "free_blocks" in out


def test_a_budget_overrun_departs_and_the_reference_says_it_is_the_engine(tmp_path, capsys):
    lines = _lines()
    step = next(x for x in lines if x["ev"] == "schedule" and len(x["scheduled"]) >= 2)
    rid = next(iter(step["scheduled"]))
    step["scheduled"][rid] += 256
    assert main(["check-trace", str(_write(tmp_path, lines))]) == 1
    out = capsys.readouterr().out
    assert "budget_respected" in out and "DEPARTS" in out
    assert "the reference does not violate it" in out


def test_a_trace_cut_mid_step_keeps_its_complete_steps(tmp_path):
    lines = _lines()
    last_update = max(i for i, x in enumerate(lines) if x["ev"] == "update")
    cut = _write(tmp_path, lines[:last_update], tail='{"ev": "upd')
    t = load_live(cut)
    assert t.cut_short and len(t.records) == len(load_live(FIXTURE).records) - 1
    assert check_live(t).steps_agreeing == len(t.records)


def test_outside_the_model_is_unknown(tmp_path, capsys):
    lines = _lines()
    lines[0]["config"]["outside"] = ["a KV connector (--kv-transfer-config)"]
    assert main(["check-trace", str(_write(tmp_path, lines))]) == 3
    assert capsys.readouterr().out.startswith("UNKNOWN: outside the model:")
    lines = _lines()
    tenth = next(i for i, x in enumerate(lines) if x["ev"] == "update" and x["step"] == 10)
    del lines[tenth]  # two schedules in a row: the steps before are checked, then UNKNOWN
    t = load_live(_write(tmp_path, lines))
    assert len(t.records) == 9 and "scheduled before step 10's update" in t.stopped
    assert main(["check-trace", str(_write(tmp_path, lines))]) == 3
    out = capsys.readouterr().out
    assert "UNKNOWN beyond step 9: outside the model" in out and "9/9 steps agree" in out
    lines = _lines()
    next(x for x in lines if x["ev"] == "add")["outside"] = ["structured output"]
    with pytest.raises(OutsideModel, match="structured output"):
        load_live(_write(tmp_path, lines))


def test_prefixes_that_branch_are_refused(tmp_path):
    """A group is a star (every request takes a prefix of one shared prompt); a trie that
    branches twice is not one, and the workload format cannot say it."""
    lines = _lines()
    adds = [x for x in lines if x["ev"] == "add"][:4]
    for x, blocks in zip(adds, (["x", "y", "z"], ["x", "y", "w"], ["x", "q", "r"],
                                ["x", "q", "r"]), strict=True):
        x["blocks"] = blocks
        x["prompt_len"] = max(x["prompt_len"], 96)
    with pytest.raises(OutsideModel, match="share 1 prompt blocks.*branch"):
        load_live(_write(tmp_path, lines))
    adds[2]["blocks"] = adds[3]["blocks"] = ["x", "y", "r"]  # now one prompt's prefixes
    assert load_live(_write(tmp_path, lines)).workload.requests


def test_a_recorder_error_is_reported_and_the_steps_before_are_checked(tmp_path, capsys):
    lines = _lines()
    k = next(i for i, x in enumerate(lines) if x["ev"] == "schedule" and x["step"] == 20)
    lines = lines[:k] + [{"ev": "error", "step": 19, "in": "scheduled",
                          "error": "KeyError: 'x'", "where": ""}] + lines[k:]
    assert main(["check-trace", str(_write(tmp_path, lines))]) == 0
    out = capsys.readouterr().out
    assert "the recorder stopped at step 19" in out and "19/19 steps agree" in out


def test_not_a_live_trace_is_one_line_and_exit_2(tmp_path, capsys):
    p = tmp_path / "t.jsonl"
    p.write_text('{"ev": "header", "format": "batchproof-live-trace", "schema": 99}\n')
    assert main(["check-trace", str(p)]) == 2
    assert "schema 99" in capsys.readouterr().err


def test_minimal_workload_of_a_reference_violation():
    """A property the reference violates on the trace's workload shrinks to a few
    requests: `starvation k=3` with prefix caching (a known violation)."""
    from checker.live.verdict import violates_on_reference

    t = load_live(FIXTURE)
    report = check_live(t, ("starvation",))
    (v,) = report.verdicts
    assert v.verdict == "VIOLATED"
    fails = violates_on_reference("starvation")
    small = minimal_workload(t.workload, fails, v.violated_at)
    assert fails(small) and len(small.requests) <= 4 and small.steps <= v.violated_at
    assert not any(fails(without(small, {r.id})) for r in small.requests)  # 1-minimal


def test_shrinking_moves_keep_events_consistent():
    w = load_live(FIXTURE).workload
    some = {a.id for a in w.aborts[:2]}
    smaller = without(w, some)
    assert not {a.id for a in smaller.aborts} & some
    moved = earlier(w, 3)
    assert moved.steps == w.steps - 3
    assert all(e.step >= 1 for e in (*moved.eos, *moved.aborts))
    assert min(r.arrival_step for r in moved.requests) >= -2


def test_every_line_of_the_recorded_trace_fits_the_schema():
    import jsonschema

    schema = json.loads((Path(__file__).parents[1] / "docs" / "schema"
                         / "live_trace.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    kinds = set()
    for line in _lines():
        validator.validate(line)
        kinds.add(line["ev"])
    assert {"header", "add", "abort", "schedule", "update"} <= kinds
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"ev": "schedule", "step": 0})


def test_clients_and_trace_are_reconciled():
    from checker.live.load import Outcome, unaccounted

    ends = {"cmpl-a-0-1f": "length", "cmpl-b-0-2e": "abort", "cmpl-c-0-3d": "held",
            "cmpl-d-0-4c": "stop"}
    outcomes = [Outcome("a", "finished", "length"), Outcome("b", "aborted"),
                Outcome("c", "aborted"), Outcome("d", "finished", "stop"),
                Outcome("e", "aborted")]  # e never reached the scheduler
    assert unaccounted(outcomes, ends) == []
    wrong = [Outcome("a", "finished", "stop"), Outcome("b", "aborted"),
             Outcome("c", "finished", "length"), Outcome("d", "finished", "stop")]
    assert unaccounted(wrong, ends) == ["a: the client saw 'stop', the trace 'length'",
                                        "c: the client saw 'length', the trace 'held'"]
    assert unaccounted(outcomes[:3], ends) == ["cmpl-d-0-4c: in the trace, sent by no client"]


def _fake_engine(specs, *, caching=False, k=0, max_model_len=64, block_size=16):
    """A scheduler-shaped namespace whose KV cache groups are `specs`."""
    from types import SimpleNamespace as NS

    return NS(vllm_config=NS(
        speculative_config=NS(num_speculative_tokens=k) if k else None,
        model_config=NS(max_model_len=max_model_len),
        cache_config=NS(block_size=block_size, enable_prefix_caching=caching)),
        kv_cache_config=NS(kv_cache_groups=[NS(kv_cache_spec=s) for s in specs]))


def _spec(kind, **fields):
    return type(kind, (), {"block_size": 16, **fields})()


def test_the_recorder_names_the_groups_the_model_has_and_refuses_the_others():
    from checker.live.recorder import engine_kv_groups

    full = _spec("FullAttentionSpec", sliding_window=None, attention_chunk_size=None)
    window = _spec("SlidingWindowSpec", sliding_window=32)
    mamba = _spec("MambaSpec", block_size=64, mamba_cache_mode="none", num_speculative_blocks=2)
    assert engine_kv_groups(_fake_engine([full])) == ([{"kind": "full"}], "")
    assert engine_kv_groups(_fake_engine([full, window])) == (
        [{"kind": "full"}, {"kind": "sliding_window", "sliding_window": 32}], "")
    assert engine_kv_groups(_fake_engine([full, mamba], k=2))[0] == [{"kind": "full"},
                                                                     {"kind": "mamba"}]
    # Prefix caching is the model's with one full group only.
    assert engine_kv_groups(_fake_engine([full], caching=True))[0] == [{"kind": "full"}]
    refused = {
        "align mode": _fake_engine([full, _spec("MambaSpec", block_size=64,
                                                mamba_cache_mode="align",
                                                num_speculative_blocks=0)]),
        "spec blocks unlike k": _fake_engine([full, mamba], k=1),
        "MLA": _fake_engine([_spec("MLAAttentionSpec")]),
        "chunked local": _fake_engine([full, _spec("ChunkedLocalAttentionSpec")]),
        "with prefix caching": _fake_engine([full, window], caching=True),
        "block size": _fake_engine([full, window], block_size=32),
    }
    for what, engine in refused.items():
        groups, why = engine_kv_groups(engine)
        assert groups is None and why.startswith("KV cache groups ["), what
