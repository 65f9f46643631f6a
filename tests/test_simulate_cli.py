"""`batchproof simulate`: the issue's done-when example, the JSON contract, --no-validate,
and bad input (one line on stderr, exit 2, no traceback)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.cli.simulate import simulate_workload_dict

ROOT = Path(__file__).resolve().parent.parent
GROUP_A = ROOT / "examples" / "seed_group_a.json"


def write(tmp_path, doc, name="w.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def small_workload(**config):
    return {"config": {"max_num_batched_tokens": 16, "max_num_seqs": 4, **config},
            "requests": [{"id": "a", "prompt_len": 4, "max_tokens": 2}], "steps": 3}


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err, *needles):
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("batchproof: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err


# ---- the done-when -----------------------------------------------------------


def test_group_a_example_shows_the_prompt_taking_six_tokens_per_step_for_four_steps(capsys):
    code, out, _ = run_cli(capsys, "simulate", str(GROUP_A))
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    prompt = {int(row[0]): next((c for c in row if c.startswith("P24:")), None) for row in rows}
    assert prompt[1] is None
    assert [prompt[s] for s in (2, 3, 4, 5)] == ["P24:6p"] * 4
    assert prompt[6] == "P24:1d"
    decodes = [c for c in rows[1] if c.startswith("d") and ":" in c]  # not the queues
    assert decodes == [f"d{i}:1d" for i in range(10)]
    assert "finished" in out and "P24=length" in out


def test_group_a_json_has_six_prompt_tokens_in_steps_two_to_five(capsys):
    code, out, _ = run_cli(capsys, "simulate", "--json", str(GROUP_A))
    doc = json.loads(out)
    assert code == 0 and doc["validated"] is True
    assert [s["scheduled"].get("P24") for s in doc["steps"][:6]] == [None, 6, 6, 6, 6, 1]
    assert [s["num_computed_tokens"].get("P24") for s in doc["steps"][1:5]] == [6, 12, 18, 24]


def test_the_json_document_follows_the_contract(capsys):
    _, out, _ = run_cli(capsys, "simulate", "--json", str(GROUP_A))
    doc = json.loads(out)
    assert {"engine", "version", "validated", "config", "steps"} <= set(doc)
    step = doc["steps"][0]
    for key in ("step", "scheduled", "admitted", "resumed", "preempted", "finished",
                "free_blocks", "num_computed_tokens", "running", "waiting",
                "token_budget_left"):
        assert key in step
    assert [s["step"] for s in doc["steps"]] == list(range(1, 9))


def test_simulate_workload_dict_returns_the_json_document():
    doc = json.loads(GROUP_A.read_text())
    out = simulate_workload_dict(doc)
    assert out["steps"][1]["scheduled"]["P24"] == 6
    assert out["validated"] is True


# ---- configuration flags and --no-validate -------------------------------------------


def test_config_flags_override_the_workload_config(capsys):
    _, out, _ = run_cli(capsys, "simulate", "--json", "--max-num-batched-tokens", "32",
                        "--max-num-seqs", "32", str(GROUP_A))
    doc = json.loads(out)
    assert doc["config"]["max_num_batched_tokens"] == 32
    assert doc["steps"][1]["scheduled"]["P24"] == 22


def test_a_config_vllm_rejects_is_an_error_naming_the_rule(capsys):
    code, out, err = run_cli(capsys, "simulate", "--max-num-seqs", "32", str(GROUP_A))
    assert_one_line_error(code, out, err, "batched_tokens_ge_num_seqs", "--no-validate")


def test_no_validate_simulates_and_says_which_rule_vllm_would_reject_it_by(capsys):
    code, out, _ = run_cli(capsys, "simulate", "--no-validate", "--max-num-seqs", "32",
                           str(GROUP_A))
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("configuration not validated")
    assert "batched_tokens_ge_num_seqs" in first and "scheduler.py:328-333" in first


def test_no_validate_on_an_accepted_config_says_vllm_would_accept_it(capsys):
    _, out, _ = run_cli(capsys, "simulate", "--no-validate", str(GROUP_A))
    assert out.splitlines()[0] == (
        "configuration not validated (--no-validate); vLLM would accept it")


def test_no_validate_json_marks_the_document_not_validated(capsys):
    _, out, _ = run_cli(capsys, "simulate", "--json", "--no-validate", "--max-num-seqs", "32",
                        str(GROUP_A))
    assert json.loads(out)["validated"] is False
    doc = json.loads(GROUP_A.read_text())
    doc["config"]["max_num_seqs"] = 32
    assert simulate_workload_dict(doc, validate=False)["validated"] is False


# ---- bad input -----------------------------------------------------------------------


def test_malformed_json_is_one_line_exit_2(tmp_path, capsys):
    path = write(tmp_path, '{"config": {,}')
    code, out, err = run_cli(capsys, "simulate", path)
    assert_one_line_error(code, out, err, "not valid JSON", "line 1")


def test_a_missing_file_is_one_line_exit_2(tmp_path, capsys):
    code, out, err = run_cli(capsys, "simulate", str(tmp_path / "nope.json"))
    assert_one_line_error(code, out, err, "cannot read workload")


def test_an_unknown_config_field_is_one_line_exit_2(tmp_path, capsys):
    path = write(tmp_path, small_workload(max_num_batched_tokenz=3))
    code, out, err = run_cli(capsys, "simulate", path)
    assert_one_line_error(code, out, err, "max_num_batched_tokenz")


def test_an_unknown_request_key_is_one_line_exit_2(tmp_path, capsys):
    doc = small_workload()
    doc["requests"][0]["prio"] = 1
    code, out, err = run_cli(capsys, "simulate", write(tmp_path, doc))
    assert_one_line_error(code, out, err, "'prio'")


def test_a_negative_budget_in_the_workload_is_one_line_exit_2(tmp_path, capsys):
    path = write(tmp_path, small_workload(max_num_batched_tokens=-16))
    code, out, err = run_cli(capsys, "simulate", path)
    assert_one_line_error(code, out, err, "max_num_batched_tokens", "-16")


def test_a_negative_budget_flag_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--max-num-batched-tokens", "-16", str(GROUP_A)])
    out, err = capsys.readouterr()
    assert_one_line_error(exc.value.code, out, err, "--max-num-batched-tokens", "-16")


@pytest.mark.parametrize("flag, value", [
    ("--watermark", "abc"), ("--watermark", "-0.1"), ("--block-size", "0"),
    ("--num-gpu-blocks", "1"), ("--scheduling-policy", "lifo"), ("--max-num-seqs", "2.5"),
])
def test_garbage_flag_values_are_one_line_exit_2(capsys, flag, value):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", flag, value, str(GROUP_A)])
    out, err = capsys.readouterr()
    assert_one_line_error(exc.value.code, out, err, flag)


def test_an_eos_on_a_step_where_the_request_samples_nothing_is_one_line_exit_2(
        tmp_path, capsys):
    doc = {"config": {"max_num_batched_tokens": 16, "max_num_seqs": 4},
           "requests": [{"id": "long", "prompt_len": 40, "max_tokens": 2}],
           "eos": [{"id": "long", "step": 1}], "steps": 4}
    code, out, err = run_cli(capsys, "simulate", write(tmp_path, doc))
    assert_one_line_error(code, out, err, "'long'", "step 1", "partial prefill")


def test_a_prompt_as_long_as_max_model_len_is_one_line_exit_2(tmp_path, capsys):
    doc = small_workload(max_model_len=4)
    code, out, err = run_cli(capsys, "simulate", "--no-validate", write(tmp_path, doc))
    assert_one_line_error(code, out, err, "prompt_len 4", "max_model_len")


def test_a_wrongly_typed_config_value_is_rejected_even_without_validation(tmp_path, capsys):
    doc = small_workload(enable_chunked_prefill="yes")
    code, out, err = run_cli(capsys, "simulate", "--no-validate", write(tmp_path, doc))
    assert_one_line_error(code, out, err, "enable_chunked_prefill")


def test_the_installed_command_prints_no_traceback_on_bad_input(tmp_path):
    path = write(tmp_path, "not json")
    proc = subprocess.run([sys.executable, "-m", "checker.cli", "simulate", path],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
