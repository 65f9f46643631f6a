"""check's environment bounds (GitHub issue 18, item 2): `--arrival-window A` (requests
arrive in steps 1..A) and `--no-eos` (no request samples EOS), applied by BMC
(checker/methods/symbolic.py) and the explorer (checker/methods/explore.py) alike, printed in
the bounds line and in the JSON bounds."""

import json
from pathlib import Path

import jsonschema

from checker.cli import check
from checker.cli.main import main
from properties.manifest import load, with_bounds

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "schema" / "check.schema.json").read_text())
QUICK = ["--jobs", "1", "-q", "--timeout", "60", "--method", "both"]


def run(capsys, *argv):
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str, prop: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.startswith(prop)]


def test_an_arrival_window_of_one_step_removes_a_late_joiner_and_both_methods_agree(
        capsys, tmp_path):
    # mistral.rs lets a request join a running batch when it arrives in a later step; with
    # every request arriving in step 1 no run of 2 requests in 3 steps does it.
    base = ["--engine", "mistralrs", "--property", "no_join_mid_batch", "--manifest-config",
            "mr_tiny", "--requests", "2", "--depth", "3", "--out", str(tmp_path), *QUICK]
    code, out, err = run(capsys, *base)
    assert [r[1] for r in rows(out, "no_join_mid_batch")] == ["mr_tiny"] * 2
    assert [r[2] for r in rows(out, "no_join_mid_batch")] == ["VIOLATED"] * 2, out
    assert "arrivals in steps 1..3" in out
    code, out, err = run(capsys, *base, "--arrival-window", "1")
    assert [r[2] for r in rows(out, "no_join_mid_batch")] == ["HOLDS(3)"] * 2, out
    assert "arrivals in steps 1..1" in out and "1 of 1 checks agree" in out
    code, out, err = run(capsys, *base, "--arrival-window", "2")
    assert [r[2] for r in rows(out, "no_join_mid_batch")] == ["VIOLATED"] * 2, out
    assert "arrivals in steps 1..2" in out and "1 of 1 checks agree" in out


def test_no_eos_removes_a_violation_that_needs_an_eos_and_both_methods_agree(
        capsys, tmp_path):
    # On the AsyncScheduler head_of_line k=2 is violated within 2 requests and 4 steps only
    # through a request that samples EOS.
    base = ["--property", "head_of_line:k=2", "--manifest-config", "tiny_async",
            "--requests", "2", "--depth", "4", "--out", str(tmp_path), *QUICK]
    code, out, err = run(capsys, *base)
    assert code == 1, (out, err)
    assert [r[3] for r in rows(out, "head_of_line")] == ["VIOLATED"] * 2, out
    cex = json.loads(next(tmp_path.glob("*.itf.json")).read_text())
    assert cex["#meta"]["workload"]["eos"], "the violation needs an EOS"
    assert "EOS at any sampled token" in out
    code, out, err = run(capsys, *base, "--no-eos")
    assert code == 0, (out, err)
    assert [r[3] for r in rows(out, "head_of_line")] == ["HOLDS(4)"] * 2, out
    assert "no EOS (each request runs to its max_tokens)" in out
    assert "1 of 1 checks agree" in out


def test_the_json_bounds_carry_the_window_and_eos_and_validate(capsys, tmp_path):
    code, out, err = run(capsys, "--property", "head_of_line:k=2", "--manifest-config",
                         "tiny_async", "--requests", "2", "--depth", "3", "--arrival-window",
                         "2", "--no-eos", "--json", "--out", str(tmp_path), "--jobs", "1",
                         "-q")
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    bounds = doc["verdicts"][0]["bounds"]
    assert (bounds["arrival_window"], bounds["no_eos"], bounds["depth"]) == (2, True, 3)
    code, out, err = run(capsys, "--property", "head_of_line:k=2", "--manifest-config",
                         "tiny_async", "--requests", "2", "--depth", "3", "--json", "--out",
                         str(tmp_path), "--jobs", "1", "-q")
    bounds = json.loads(out)["verdicts"][0]["bounds"]
    assert (bounds["arrival_window"], bounds["no_eos"]) == (3, False)  # the whole depth


def test_the_default_environment_keeps_a_questions_file_name():
    # docs/queries.md question 1 was named before these bounds existed; a window equal to
    # the depth is the same question.
    nc = with_bounds(load().configs["sg_tiny"], slots=2, depth=3)
    name = check.query_slug("sglang", "starvation", (("k", 3),), nc)
    assert name == "sglang__starvation__k=3__3b79e9a9"
    assert check.query_slug("sglang", "starvation", (("k", 3),),
                            with_bounds(nc, arrival_window=3)) == name
    assert check.query_slug("sglang", "starvation", (("k", 3),),
                            with_bounds(nc, arrival_window=2)) != name
    assert check.query_slug("sglang", "starvation", (("k", 3),),
                            with_bounds(nc, no_eos=True)) != name
    # a KV connector's load premise, where one is given, is part of the question
    connector = with_bounds(load().configs["tiny_connector"], slots=2, depth=3)
    assert check.query_slug("vllm-v1", "never_finishes", (), connector) != check.query_slug(
        "vllm-v1", "never_finishes", (), with_bounds(connector, kv_load_steps=1))


def test_worst_takes_the_environment_bounds(capsys, tmp_path):
    code = main(["worst", "--metric", "starvation_steps", "--manifest-config", "tiny_fcfs",
                 "--requests", "2", "--depth", "3", "--arrival-window", "1", "--no-eos",
                 "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "arrivals in steps 1..1" in out and "no EOS" in out
