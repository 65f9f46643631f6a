"""`batchproof compare`: one workload through every engine, the neutral-config mapping, bad
input, a missing engine skipped with a note, and the property matrix's staleness."""

import json
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.docs import property_matrix
from model import registry as engines

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "compare_mixed.json"


def _json(capsys, *extra):
    code = main(["compare", str(EXAMPLE), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_compare_runs_the_six_engines_on_one_workload(capsys):
    code, doc = _json(capsys)
    assert code == 0
    ran = set(doc["engines"]) | set(doc["skipped"])
    assert ran == {"vllm-v1", "vllm-v0", "sglang", "mistralrs", "static", "dynamic"}
    assert set(doc["engines"]) >= {"vllm-v1", "vllm-v0", "mistralrs", "static", "dynamic"}
    for run in doc["engines"].values():
        assert set(run["requests"]) == {"long", "short", "mid", "late"}


def test_table_one_made_concrete_on_the_example(capsys):
    _, doc = _json(capsys)
    eng = doc["engines"]
    # static pads finished rows, dynamic leaves their slots idle without computing them,
    # continuous batching releases a finished slot at once
    assert eng["static"]["padded_rows"] == eng["static"]["idle_slot_steps"] > 0
    assert eng["dynamic"]["idle_slot_steps"] > 0 and eng["dynamic"]["padded_rows"] == 0
    assert eng["vllm-v1"]["idle_slot_steps"] == eng["mistralrs"]["idle_slot_steps"] == 0
    # a request arriving while a batch runs waits for the whole batch under the baselines
    assert eng["dynamic"]["requests"]["mid"]["ttft_steps"] > eng["vllm-v1"]["requests"][
        "mid"]["ttft_steps"]
    assert eng["vllm-v1"]["makespan"] < eng["static"]["makespan"]


def test_each_engine_gets_the_mapped_config(capsys):
    _, doc = _json(capsys)
    cfgs = {name: run["config"] for name, run in doc["engines"].items()}
    # token_budget 8, max_seqs 3, kv_tokens 48, block_size 4 (docs/compare.md)
    assert cfgs["vllm-v1"]["max_num_batched_tokens"] == 8
    assert cfgs["vllm-v1"]["num_gpu_blocks"] == 13  # 12 usable + the null block
    assert cfgs["mistralrs"]["num_gpu_blocks"] == 13
    assert cfgs["mistralrs"]["max_decode_steps_before_prefill"] == 8  # its own default
    assert cfgs["static"]["num_kv_blocks"] == cfgs["dynamic"]["num_kv_blocks"] == 12
    assert cfgs["static"]["max_batch_size"] == 3


def test_engine_config_overrides_one_engine(tmp_path, capsys):
    doc = json.loads(EXAMPLE.read_text())
    doc["engine_config"] = {"mistralrs": {"max_decode_steps_before_prefill": 2}}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["compare", str(path), "--engines", "mistralrs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engines"]["mistralrs"]["config"]["max_decode_steps_before_prefill"] == 2


def test_an_unregistered_engine_is_skipped_with_a_note(monkeypatch, capsys):
    monkeypatch.setattr(engines, "names", lambda: ("vllm-v1", "mistralrs"))
    assert main(["compare", str(EXAMPLE), "--engines", "vllm-v1,sglang,mistralrs"]) == 0
    out = capsys.readouterr().out
    assert "note: sglang skipped: not registered yet" in out
    assert "mistralrs" in out.split("per engine")[1]


@pytest.mark.parametrize("doc,fix", [
    ({"requests": [], "eos": []}, "takes no 'eos'"),
    ({"requests": [], "engine": "static"}, "unknown compare workload key 'engine'"),
    ({"config": {"budget": 4}, "requests": []}, "unknown compare config field 'budget'"),
    ({"config": {"max_seqs": 0}, "requests": []}, "positive integer"),
    ({"requests": [], "engine_config": {"foo": {}}}, "unknown engine 'foo'"),
])
def test_bad_workload_is_one_line_exit_2(tmp_path, capsys, doc, fix):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["compare", str(path)]) == 2
    err = capsys.readouterr().err
    assert fix in err and err.count("\n") == 1


@pytest.mark.parametrize("engine, fields, needles", [
    ("vllm-v1", {"max_num_seqs": 0}, ("max_num_seqs must be >= 1, got 0",)),
    ("vllm-v1", {"policy": "lifo"}, ("policy 'lifo'", "use 'fcfs' or 'priority'")),
    ("vllm-v1", {"watermark": 2.0}, ("watermark must be in [0, 1), got 2.0",)),
    ("sglang", {"max_total_num_tokens": 4}, ("max_total_num_tokens 4", "raise them")),
])
def test_an_engine_config_value_the_engine_refuses_is_exit_2(tmp_path, capsys, engine,
                                                             fields, needles):
    # It was a skip with a note, and exit 0 on the other engines' runs.
    doc = json.loads(EXAMPLE.read_text())
    doc["engine_config"] = {engine: fields}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["compare", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"batchproof: error: engine_config['{engine}']: "), err
    assert f"refuses the mapped config with {fields} over it" in err
    for needle in needles:
        assert needle in err, err


def test_an_engine_config_over_a_mapped_config_the_engine_refuses_anyway_is_a_skip(
        tmp_path, capsys):
    # kv_tokens 50 in blocks of 4 is refused by vLLM's start-up check whatever the override.
    doc = json.loads(EXAMPLE.read_text())
    doc["config"]["kv_tokens"] = 50
    doc["engine_config"] = {"vllm-v1": {"max_num_seqs": 2}}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["compare", str(path)]) == 0
    assert "note: vllm-v1 skipped: vLLM V1 rejects the mapped config" in capsys.readouterr().out


def test_unknown_engine_in_engines_is_exit_2(capsys):
    assert main(["compare", str(EXAMPLE), "--engines", "vllm-v1,orca"]) == 2
    assert "unknown engine 'orca' in --engines" in capsys.readouterr().err


def test_a_request_an_engine_refuses_is_a_skip_not_a_crash(tmp_path, capsys):
    doc = {"config": {"kv_tokens": 16, "block_size": 4},
           "requests": [{"id": "big", "prompt_len": 12, "max_tokens": 8}], "steps": 4}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["compare", str(path), "--engines", "static,mistralrs", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "num_kv_blocks" in out["skipped"]["static"]
    assert "mistralrs" in out["engines"]


def test_the_property_matrix_matches_the_manifests():
    page = (ROOT / "docs" / "property_matrix.md").read_text()
    assert property_matrix.matrix_entries(page) == property_matrix.manifest_rows(), (
        "docs/property_matrix.md is stale: run "
        "python -m checker.docs.property_matrix --write docs/property_matrix.md")


def test_render_matrix_marks_departures():
    rows = [("mistralrs", "starvation", (("k", 3),), "mr_tiny", "VIOLATED", "HOLDS(5)",
             "explore", False),
            ("static", "starvation", (("k", 3),), "st_tiny", "VIOLATED", "VIOLATED", "bmc",
             True)]
    page = property_matrix.render_matrix(rows)
    assert "| starvation k=3 | HOLDS(5) [mr_tiny] (!) | VIOLATED [st_tiny] |" in page
    assert "- mistralrs starvation k=3 on mr_tiny: HOLDS(5) by explore, expected VIOLATED" in page
