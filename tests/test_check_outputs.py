"""What `batchproof check` hands to CI (issue 14): exit codes of `--method both` when a
method is inconclusive, and the versioned `--json` (validated by its JSON Schema)."""

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from checker.cli import check
from checker.cli.main import main
from checker.methods import agreement
from checker.methods.jobs import JobResult
from checker.methods.verdict import HOLDS, UNKNOWN, VIOLATED, Verdict

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "schema" / "check.schema.json").read_text())
STATIC = ["check", "--engine", "static", "--method", "both", "--jobs", "1"]
CEX = "counterexamples/baselines/{}__st_tiny.itf.json"


def validate(doc):
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


def perturb(monkeypatch, change):
    """Run the real jobs, then pass each result through `change(result)`."""
    real = check.run_batch
    monkeypatch.setattr(check, "run_batch", lambda jobs: [change(r) for r in real(jobs)])


def unknown(res):
    return JobResult(replace(res.verdict, verdict=UNKNOWN, depth=0, detail="time limit"))


def mixed(res):
    """starvation: the explorer times out; no_padded_compute: the explorer finds it one
    step later; finished_slot_released: the manifest (as the verdicts see it) expects
    HOLDS, so both methods depart with their counterexample."""
    v = res.verdict
    if v.property == "starvation" and v.method == "explore":
        return unknown(res)
    if v.property == "no_padded_compute" and v.method == "explore":
        return replace(res, verdict=replace(v, depth=v.depth + 1))
    if v.property == "finished_slot_released":
        return replace(res, verdict=replace(v, expected=HOLDS))
    return res


# --- 1. --method both: inconclusive is exit 3, a disagreement exit 1 ------------------------


def test_both_methods_timing_out_is_inconclusive_exit_3_not_a_disagreement(capsys):
    code = main(["check", "--property", "head_of_line", "--method", "both",
                 "--timeout", "0.001", "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 3
    assert "methods disagree" not in out
    assert ("methods inconclusive: head_of_line on tiny_fcfs: bmc UNKNOWN (depth 0), "
            "explore UNKNOWN (depth 0): neither method decided") in out
    assert "bmc and explore: 0 of 1 checks agree, 1 inconclusive" in out


def test_one_method_unknown_leaves_the_other_verdict_unconfirmed_exit_3(monkeypatch, capsys):
    perturb(monkeypatch, lambda r: unknown(r) if r.verdict.method == "explore" else r)
    code = main([*STATIC, "--property", "starvation"])
    out = capsys.readouterr().out
    assert code == 3
    assert "methods disagree" not in out
    assert ("methods inconclusive: starvation on st_tiny: bmc VIOLATED (depth 3), explore "
            "UNKNOWN (depth 0): the bmc verdict VIOLATED is unconfirmed") in out


def test_decided_verdicts_at_different_depths_disagree_exit_1(monkeypatch, capsys):
    perturb(monkeypatch, mixed)
    code = main([*STATIC, "--property", "no_padded_compute"])
    out = capsys.readouterr().out
    assert code == 1
    assert ("methods disagree: no_padded_compute on st_tiny: bmc VIOLATED (depth 2), "
            "explore VIOLATED (depth 3)") in out
    assert "bmc and explore: 0 of 1 checks agree\n" in out


def test_a_disagreement_wins_over_an_inconclusive_pair(monkeypatch, capsys):
    perturb(monkeypatch, mixed)
    assert main([*STATIC, "--property", "no_padded_compute", "--property", "starvation"]) == 1
    capsys.readouterr()


def test_agreement_compares_counterexamples_only_between_decided_verdicts():
    def res(method, verdict, depth):
        return JobResult(Verdict("e", "p", "c", method, verdict, depth, 0.0))
    assert agreement.compare(res("bmc", HOLDS, 3), res("explore", HOLDS, 5)).status == "agree"
    assert agreement.compare(res("bmc", HOLDS, 3), res("explore", VIOLATED, 2)).status \
        == "disagree"
    both = agreement.compare(res("bmc", UNKNOWN, 0), res("explore", UNKNOWN, 0))
    assert (both.status, both.line.endswith("neither method decided")) \
        == ("inconclusive", True)
    one = agreement.compare(res("bmc", UNKNOWN, 0), res("explore", VIOLATED, 2))
    assert one.status == "inconclusive"
    assert one.line.endswith("the explore verdict VIOLATED is unconfirmed")


# --- 2. --json, schema 1 --------------------------------------------------------------------


def test_json_is_a_schema_1_document_with_status_and_agreement(monkeypatch, capsys):
    perturb(monkeypatch, mixed)
    code = main([*STATIC, "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert doc["schema"] == 1 and code == 1 == doc["summary"]["exit_code"]
    rows = {(r["property"], r["method"]): r for r in doc["verdicts"]}
    assert len(rows) == 16
    assert rows["starvation", "explore"]["status"] == "inconclusive"
    assert rows["starvation", "bmc"]["status"] == "as_expected"
    assert rows["starvation", "bmc"]["agreement"] == "inconclusive"
    assert {rows["no_padded_compute", m]["agreement"] for m in ("bmc", "explore")} \
        == {"disagree"}
    assert {rows["no_padded_compute", m]["status"] for m in ("bmc", "explore")} \
        == {"as_expected"}
    departed = rows["finished_slot_released", "bmc"]
    assert (departed["status"], departed["agreement"]) == ("departs", "agree")
    assert departed["counterexample"] == CEX.format("finished_slot_released")
    assert rows["kv_blocks_conserved", "explore"]["agreement"] == "agree"
    summary = doc["summary"]
    assert (summary["checks"], summary["as_expected"], summary["departs"],
            summary["inconclusive"]) == (16, 13, 2, 1)
    pairs = summary["agreement"]
    assert (pairs["pairs"], pairs["agree"], pairs["disagree"], pairs["inconclusive"]) \
        == (8, 6, 1, 1)
    assert len(pairs["notes"]) == 2 and "unconfirmed" in pairs["notes"][1]


def test_json_of_one_method_has_no_agreement(capsys):
    code = main(["check", "--property", "head_of_line", "--json", "--jobs", "1"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 0 == doc["summary"]["exit_code"]
    assert [(r["verdict"], r["status"], r["agreement"]) for r in doc["verdicts"]] \
        == [("VIOLATED", "as_expected", None)]
    assert doc["summary"]["agreement"] is None


def test_json_of_a_time_limit_is_inconclusive_whatever_was_expected(capsys):
    code = main(["check", "--property", "head_of_line", "--method", "both", "--timeout",
                 "0.001", "--jobs", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 3 == doc["summary"]["exit_code"]
    assert [(r["status"], r["agreement"]) for r in doc["verdicts"]] \
        == [("inconclusive", "inconclusive")] * 2


def test_json_of_a_custom_config_validates(capsys):
    code = main(["check", "--max-num-seqs", "2", "--property", "running_within_max_num_seqs",
                 "--depth", "2", "--slots", "2", "--json", "--jobs", "1"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 0
    assert {(r["config"], r["expected"], r["status"]) for r in doc["verdicts"]} \
        == {("custom", None, "as_expected")}


def test_the_schema_is_valid_and_rejects_the_old_list_and_a_wrong_status():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    row = Verdict("vllm-v1", "p", "c", "bmc", UNKNOWN, 0, 0.0, HOLDS).to_json()
    doc = {"schema": 1, "verdicts": [row], "summary": {
        "checks": 1, "as_expected": 0, "departs": 0, "inconclusive": 1, "seconds": 0.0,
        "agreement": None, "exit_code": 3}}
    validate(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate([row])
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "verdicts": [{**row, "status": "departs"}]})
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "schema": 2})


def test_every_json_field_is_in_the_schema():
    fields = set(Verdict("e", "p", "c", "bmc", HOLDS, 1, 0.0).to_json())
    assert fields == set(SCHEMA["$defs"]["verdict"]["required"])
