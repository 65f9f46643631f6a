"""`batchproof check-trace`: catalogue properties decided on a given trace (the
simulation contract), with no engine installed: traces of `simulate --json`, the
document `audit --save` writes, a list of steps with its workload, and forged ones."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.methods.trace_check import (
    DEPARTS,
    HOLDS,
    NOT_CHECKED,
    VIOLATED,
    TraceMismatch,
    check_trace,
    expectation,
    properties_for,
)
from model.core.errors import InputError
from model.core.types import RequestSpec, Workload
from model.run import simulate
from model.vllm.config import Config
from model.workload import load_workload, workload_to_json
from properties import catalogue
from properties.manifest import load

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "seed_group_a.json"
# Two requests in tiny_fcfs: r1 waits behind r0's prefill (starvation k=3 is VIOLATED
# on tiny_fcfs in the manifest, so its violation here is a known one).
TINY = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
              num_gpu_blocks=5)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check-trace", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _simulate_json(capsys: pytest.CaptureFixture[str], workload: Path, dest: Path) -> Path:
    assert main(["simulate", "--json", str(workload)]) == 0
    dest.write_text(capsys.readouterr().out)
    return dest


def test_simulate_json_with_its_workload_holds_every_property(tmp_path, capsys):
    trace = _simulate_json(capsys, SEED, tmp_path / "sim.json")
    code, out, _ = _cli(capsys, str(trace), "--workload", str(SEED), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == 1 and doc["command"] == "check-trace"
    assert doc["engine"] == "vllm-v1" and doc["steps"] == 8
    names = {v["property"] for v in doc["verdicts"]}
    assert {"budget_respected", "kv_blocks_conserved", "starvation"} <= names
    by = {v["property"]: v for v in doc["verdicts"]}
    assert by["budget_respected"]["verdict"] == HOLDS
    assert by["budget_respected"]["label"] == "HOLDS(8)"
    assert by["never_finishes"]["verdict"] == NOT_CHECKED  # a lasso needs an infinite run
    assert doc["summary"]["departs"] == 0 and doc["summary"]["exit_code"] == 0


def test_the_text_table_reads_like_check(tmp_path, capsys):
    trace = _simulate_json(capsys, SEED, tmp_path / "sim.json")
    code, out, _ = _cli(capsys, str(trace), "--workload", str(SEED))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"check-trace {trace}: vLLM V1 0.32.0, 8 steps, 11 requests")
    assert lines[1].split() == ["property", "verdict", "expected", "status"]
    assert any(line.split()[:2] == ["budget_respected", "HOLDS(8)"] for line in lines)
    assert "not checked: never_finishes" in out


def test_a_trace_without_requests_names_the_fix(tmp_path, capsys):
    trace = _simulate_json(capsys, SEED, tmp_path / "sim.json")
    code, _, err = _cli(capsys, str(trace))
    assert code == 2
    assert err.count("\n") == 1 and "--workload" in err and "requests" in err


def _starving() -> Workload:
    return Workload(config=TINY, requests=(RequestSpec("r0", 8, 2), RequestSpec("r1", 2, 2)),
                    steps=5)


def _document(workload: Workload, records: list[dict[str, object]] | None = None
              ) -> dict[str, object]:
    doc = workload_to_json(workload)
    steps = records if records is not None else [r.to_json() for r in simulate(workload)]
    return {"engine": "vllm-v1", "version": "0.32.0", "validated": True,
            "config": doc["config"], "requests": doc["requests"], "eos": doc["eos"],
            "steps": steps}


def test_a_known_violation_is_reported_with_its_step_and_exits_0(tmp_path, capsys):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_document(_starving())))
    code, out, _ = _cli(capsys, str(path))
    assert code == 0
    assert any(line.split()[:6] == ["starvation", "k=3", "VIOLATED", "at", "step", "3"]
               for line in out.splitlines())
    assert "violated: starvation k=3 at step 3" in out
    assert "step 3: {" in out  # the violating step's record
    assert _cli(capsys, str(path), "--strict")[0] == 1


def test_a_forged_budget_overrun_departs_and_exits_1(tmp_path, capsys):
    w = _starving()
    steps = [r.to_json() for r in simulate(w)]
    steps[1]["scheduled"] = {"r0": 5}  # over the budget of 4
    steps[1]["token_budget_left"] = -1
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(_document(w, steps)))
    code, out, _ = _cli(capsys, str(path), "--json")
    assert code == 1
    by = {v["property"]: v for v in json.loads(out)["verdicts"]}
    assert by["budget_respected"]["verdict"] == VIOLATED
    assert by["budget_respected"]["violated_at"] == 2
    assert by["budget_respected"]["status"] == DEPARTS
    assert by["budget_respected"]["expected"] == "HOLDS"


def test_workload_and_steps_and_a_bare_list_of_steps(tmp_path, capsys):
    w = _starving()
    steps = [r.to_json() for r in simulate(w)]
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"workload": workload_to_json(w), "steps": steps}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(steps))
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps(workload_to_json(w)))
    assert _cli(capsys, str(both), "--property", "starvation")[0] == 0
    code, out, _ = _cli(capsys, str(bare), "--workload", str(workload), "--property",
                        "starvation", "--json")
    assert code == 0
    [verdict] = json.loads(out)["verdicts"]
    assert verdict["violated_at"] == 3


@pytest.mark.parametrize("change, words", [
    (lambda steps: steps[1].update(step=7), "steps[1].step is 7, expected 2"),
    (lambda steps: steps[0].update(scheduled=[1]), "scheduled must be an object"),
])
def test_a_malformed_trace_is_one_line(tmp_path, capsys, change, words):
    steps = [r.to_json() for r in simulate(_starving())]
    change(steps)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_document(_starving(), steps)))
    code, _, err = _cli(capsys, str(path))
    assert code == 2 and err.count("\n") == 1 and words in err


def test_property_choice_unknown_property_and_an_undecidable_one(tmp_path, capsys):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_document(_starving())))
    code, _, err = _cli(capsys, str(path), "--property", "no_such_property")
    assert code == 2 and "unknown property 'no_such_property'" in err
    assert _cli(capsys, str(path), "--property", "never_finishes")[0] == 3
    code, out, _ = _cli(capsys, str(path), "--property", "budget_respected", "--json")
    assert [v["property"] for v in json.loads(out)["verdicts"]] == ["budget_respected"]


def test_the_engine_flag_must_match_the_document(tmp_path, capsys):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_document(_starving())))
    code, _, err = _cli(capsys, str(path), "--engine", "sglang")
    assert code == 2 and "vllm-v1 trace but --engine is sglang" in err


def test_another_engines_simulation(tmp_path, capsys):
    example = ROOT / "examples" / "sglang_overcommit_default_ratio.json"
    trace = _simulate_json(capsys, example, tmp_path / "sglang.json")
    code, out, _ = _cli(capsys, str(trace), "--workload", str(example), "--json")
    doc = json.loads(out)
    assert doc["engine"] == "sglang"
    by = {v["property"]: v for v in doc["verdicts"]}
    assert by["admission_never_overcommits"]["verdict"] == VIOLATED  # the example's point
    assert code == (1 if doc["summary"]["departs"] else 0)


# ------------------------------------------------------------------ the method

def test_expectation_follows_the_manifest():
    manifest = load()
    starvation = catalogue.get("starvation", k=3)
    assert expectation("vllm-v1", starvation, TINY, manifest)[0] == "VIOLATED"
    other = replace(TINY, num_gpu_blocks=40)
    assert expectation("vllm-v1", starvation, other, manifest)[0] is None  # a known hazard
    budget = catalogue.get("budget_respected")
    assert expectation("vllm-v1", budget, other, manifest)[0] == "HOLDS"
    # budget_family's ranges hold this budget: its entry (PROVED) answers
    member = Config(max_num_batched_tokens=40, max_num_seqs=20, max_model_len=32,
                    block_size=4, num_gpu_blocks=9)
    expected, why = expectation("vllm-v1", catalogue.get("decodes_exhaust_budget"), member,
                                manifest)
    assert (expected, why) == ("PROVED", "the manifest's entry for config budget_family")


def test_properties_for_takes_the_manifests_parameterisations():
    names = [(p.name, p.params) for p in properties_for("vllm-v1")]
    assert ("starvation", (("k", 3),)) in names
    assert len(names) == len(set(names))
    with pytest.raises(InputError, match="unknown property"):
        properties_for("vllm-v1", ("nope",))


def test_a_trace_that_does_not_fit_its_workload():
    w = load_workload(SEED)
    records = simulate(w)
    fewer = replace(w, requests=w.requests[:1])
    with pytest.raises(TraceMismatch, match="step 1 names request 'd1', which the workload "
                       "does not have"):
        check_trace("vllm-v1", fewer, records)


def test_a_claim_checked_on_synchronous_configs_does_not_extend_to_an_async_trace():
    """computed_within_tokens holds on every synchronous config the manifest lists; the
    AsyncScheduler computes a token a step before it is known (an output placeholder), so
    an async trace gets no expectation from them, and a violation there is not a
    departure (the audit of vLLM 0.32.0 in the async modes)."""
    manifest = load()
    prop = catalogue.get("computed_within_tokens")
    other = replace(TINY, num_gpu_blocks=40)
    assert expectation("vllm-v1", prop, other, manifest)[0] == "HOLDS"
    expected, why = expectation("vllm-v1", prop, replace(other, async_scheduling=True),
                                manifest)
    assert expected is None and "tiny_async" in why  # the manifest's async entry
    # With no async entry at all, the synchronous ones still say nothing of it.
    sync_only = replace(manifest, entries=tuple(
        e for e in manifest.entries if e.config != "tiny_async"))
    expected, why = expectation("vllm-v1", prop, replace(other, async_scheduling=True),
                                sync_only)
    assert expected is None and "async_scheduling=True" in why
