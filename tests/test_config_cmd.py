"""`batchproof config`: effective configuration with origins, every validation and startup
rule (exit 2, one line naming values, rule and fix), YAML input, malformed input, JSON
and exit codes. Hazard verdicts themselves are tested in test_hazards.py."""

import json

import pytest

from checker.cli.main import main

H100 = ("--device", "h100")
FAST = ("--hazard", "priority_inversion")  # decided without a search under fcfs


def run_cli(capsys, *argv):
    code = main(["config", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_cli_exit(capsys, *argv):
    """For argparse errors, which raise SystemExit."""
    with pytest.raises(SystemExit) as exc:
        main(["config", *argv])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def one_line_error(code, err, *needles):
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("batchproof: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def effective(capsys, *argv):
    code, out, err = run_cli(capsys, "--json", *FAST, *argv)
    assert code == 0, err
    return json.loads(out)["effective"]


# --- effective configuration -------------------------------------------------------------

def test_pasted_vllm_serve_line_prints_values_with_their_origins(capsys):
    code, out, err = run_cli(capsys, "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
                             "--max-model-len", "32k", "--port", "8000",
                             "--gpu-memory-utilization", "0.9", *H100, *FAST)
    assert code == 0, err
    assert "meta-llama/Llama-3.1-8B-Instruct" in out
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()
            if line.startswith("  max_")}
    assert rows["max_model_len"] == ["32000", "user"]
    assert rows["max_num_batched_tokens"] == ["8192", "default"]  # "default tier"
    assert "default tier" in out and "arg_utils.py:2933-2942" in out
    assert "ignored vLLM flags" in out and "--port" in out


def test_json_reports_origin_of_every_value(capsys):
    eff = effective(capsys, "--max-model-len", "4096", "--device", "l4",
                    "--performance-mode", "throughput", "--max-num-seqs", "64")
    assert eff["max_num_batched_tokens"]["value"] == 4096
    assert eff["max_num_batched_tokens"]["origin"] == "doubled"
    assert eff["max_num_seqs"] == {"value": 64, "origin": "user", "why": "set by the user"}
    assert eff["num_gpu_blocks"]["value"] is None  # not given: unknown, not a made-up pool


def test_clamps_are_reported_as_clamped(capsys):
    eff = effective(capsys, "--max-model-len", "20000", "--no-enable-chunked-prefill",
                    "--device", "l4")
    assert (eff["max_num_batched_tokens"]["value"],
            eff["max_num_batched_tokens"]["origin"]) == (20000, "clamped")


def test_gpu_memory_gib_picks_the_tier(capsys):
    eff = effective(capsys, "--max-model-len", "4096", "--gpu-memory-gib", "180")
    assert eff["max_num_batched_tokens"]["value"] == 16384


def test_usage_llm_uses_the_llm_class_column(capsys):
    eff = effective(capsys, "--max-model-len", "4096", *H100, "--usage", "llm")
    assert eff["max_num_batched_tokens"]["value"] == 16384


def test_both_batch_sizes_set_need_no_device(capsys):
    eff = effective(capsys, "--max-model-len", "4096", "--max-num-batched-tokens", "512",
                    "--max-num-seqs", "32")
    assert eff["max_num_batched_tokens"]["origin"] == "user"


# --- validation: each rule, exit 2, one line ------------------------------------------------

@pytest.mark.parametrize("argv, rule, needles", [
    (("--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096",
      "--max-model-len", "8192", *H100), "batched_tokens_ge_model_len_without_chunking",
     ("4096", "8192", "raise max_num_batched_tokens")),
    (("--max-num-batched-tokens", "128", "--max-num-seqs", "256", "--max-model-len", "4096"),
     "batched_tokens_ge_num_seqs", ("128", "256", "raise max_num_batched_tokens")),
    (("--max-num-active-seqs", "300", "--max-num-seqs", "256", "--max-model-len", "4096",
      *H100), "active_seqs_le_num_seqs", ("300", "256", "lower it")),
    (("--long-prefill-token-threshold", "10000", "--max-model-len", "8192", *H100),
     "long_prefill_threshold_le_model_len", ("10000", "8192", "lower it")),
    (("--watermark", "1.5", "--max-model-len", "8192", *H100), "watermark_range",
     ("1.5", "[0, 1)")),
    (("--num-gpu-blocks", "100", "--max-model-len", "8192", *H100),
     "kv_holds_one_max_model_len_request", ("8192", "512 blocks", "at least 513 blocks")),
    (("--speculative-config", '{"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash", '
      '"num_speculative_tokens": 8}',
      "--max-num-batched-tokens", "8", "--max-num-seqs", "8", "--max-model-len", "64"),
     "batched_tokens_gt_draft_slots", ("8 draft slots", "num_speculative_tokens=8")),
    (("--enable-lora", "--spec-tokens", "3", "--spec-model", "some/draft",
      "--max-num-batched-tokens", "512",
      "--max-num-seqs", "256", "--max-model-len", "4096"), "lora_spec_budget",
     ("512", "256", "1024")),
])
def test_each_rule_fails_with_exit_2_naming_values_rule_and_fix(capsys, argv, rule, needles):
    code, out, err = run_cli(capsys, *argv)
    one_line_error(code, err, f"rule {rule}", *needles)
    assert "INVALID" in out


def test_an_invalid_config_in_json_names_the_rule(capsys):
    code, out, _ = run_cli(capsys, "--json", "--max-num-batched-tokens", "128",
                           "--max-num-seqs", "256", "--max-model-len", "4096")
    doc = json.loads(out)
    assert code == 2 and doc["valid"] is False
    assert doc["error"]["rule"] == "batched_tokens_ge_num_seqs"


def test_a_clamped_default_never_breaks_a_rule(capsys):
    # vLLM clamps its own defaults so that they pass: max_num_seqs 1024 > 64 tokens is
    # capped instead of rejected
    eff = effective(capsys, "--max-model-len", "16", "--max-num-batched-tokens", "64", *H100)
    assert eff["max_num_seqs"]["value"] == 64


# --- malformed input ---------------------------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (("--max-model-len", "8192", *H100, "--max-num-seq", "8"), "--max-num-seq"),
    (("--max-model-len", "8192", *H100, "--max-num-seqs", "-5"), "-5"),
    (("--max-model-len", "8192", *H100, "--max-num-batched-tokens", "lots"), "lots"),
    (("--max-model-len", "auto", *H100), "auto"),
    (("--max-model-len", "8192", *H100, "--scheduling-policy", "sjf"), "sjf"),
    (("--max-model-len", "8192", "--gpu-memory-gib", "-3"), "-3"),
    (("--max-model-len", "8192", *H100, "--usage", "batch"), "batch"),
])
def test_parse_errors_are_one_line_with_exit_2(capsys, argv, needle):
    code, _, err = run_cli_exit(capsys, *argv)
    one_line_error(code, err, needle)


@pytest.mark.parametrize("argv, needle", [
    (("--max-model-len", "8192", "--device", "v100"), "unknown device 'v100'"),
    (("--device", "h100"), "--max-model-len"),
    (("--max-model-len", "8192"), "--device"),
    (("--max-model-len", "8192", "--device", "h100", "--gpu-memory-gib", "80"), "not both"),
    (("--max-model-len", "8192", *H100, "--speculative-config", "{oops"), "not valid JSON"),
    (("--max-model-len", "8192", *H100, "--speculative-config", '{"method": "eagle3"}'),
     "num_speculative_tokens"),
    (("a", "b", "--max-model-len", "8192", *H100), "unexpected arguments"),
])
def test_input_errors_are_one_line_with_exit_2(capsys, argv, needle):
    code, _, err = run_cli(capsys, *argv)
    one_line_error(code, err, needle)


# --- YAML (vllm serve --config) -------------------------------------------------------------

def write(tmp_path, text, name="serve.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_yaml_values_apply_and_the_command_line_wins(tmp_path, capsys):
    path = write(tmp_path, "model: Qwen/Qwen2.5-7B\nmax-model-len: 16384\nmax_num_seqs: 64\n"
                           "enable-chunked-prefill: false\nport: 8000\n")
    code, out, err = run_cli(capsys, "--json", *FAST, "--config", path, *H100,
                             "--max-num-seqs", "32")
    assert code == 0, err
    doc = json.loads(out)
    eff = doc["effective"]
    assert eff["max_model_len"]["value"] == 16384
    assert eff["max_num_seqs"]["value"] == 32  # the command line wins over the file
    assert eff["enable_chunked_prefill"]["value"] is False
    assert doc["model"] == "Qwen/Qwen2.5-7B" and "port" in doc["ignored_flags"]


@pytest.mark.parametrize("text, name, needle", [
    ("max-model-len: [1, 2\n", "serve.yaml", "not valid YAML at line"),
    ("- max-model-len\n", "serve.yaml", "must be a YAML mapping"),
    ("max-num-seqz: 8\n", "serve.yaml", "max-num-seqz"),
    ("max-num-seqs: -1\nmax-model-len: 64\n", "serve.yaml", "-1"),
    ("max-model-len: 64\n", "serve.json", "must end in .yaml"),
    ("max-model-len: 64\nstrict: true\n", "serve.yaml", "not a vLLM flag"),
    ("max-model-len:\n", "serve.yaml", "has no value"),
])
def test_bad_yaml_is_one_line_with_exit_2(tmp_path, capsys, text, name, needle):
    code, _, err = run_cli(capsys, "--config", write(tmp_path, text, name), *H100)
    one_line_error(code, err, needle)


@pytest.mark.parametrize("line, needle", [
    # A key with spaces became `--max num seqs`, which argparse reads as a positional word:
    # config said "'serve' is a batchproof option", naming neither the key nor the fix;
    # with an empty list (no tokens at all) the key was dropped without a word, exit 0.
    ("max num seqs: 8\n", "unknown key 'max num seqs': vllm serve has no flag '--max num "
                          "seqs'; the nearest flag is 'max-num-seqs'"),
    ("max num seqs: []\n", "unknown key 'max num seqs': vllm serve has no flag '--max num "
                           "seqs'; the nearest flag is 'max-num-seqs'"),
    ("max_num_seqz: 8\n", "unknown key 'max_num_seqz': vllm serve has no flag "
                          "'--max-num-seqz'; the nearest flag is 'max_num_seqs'"),
    ("frobnicate: 1\n", "unknown key 'frobnicate': vllm serve has no flag '--frobnicate'; "
                        "write vllm serve flags as keys"),
])
def test_an_unknown_yaml_key_is_named_with_the_nearest_flag(tmp_path, capsys, line, needle):
    code, _, err = run_cli(capsys, "--config", write(tmp_path, "max-model-len: 64\n" + line),
                           *H100)
    one_line_error(code, err, needle)


def test_the_same_key_check_applies_where_other_commands_read_the_yaml(tmp_path, capsys):
    path = write(tmp_path, "max-model-len: 64\nmax num seqs: 8\n")
    code = main(["check", "--config", path, "--property", "budget_respected", "-q"])
    one_line_error(code, capsys.readouterr().err, "unknown key 'max num seqs'",
                   "'max-num-seqs'")


@pytest.mark.parametrize("value, shown", [("{name: x}", "{'name': 'x'}"), ("[a, b]", "['a', 'b']"),
                                          ("7", "7"), ("true", "True")])
def test_a_model_that_is_not_a_string_is_one_line(tmp_path, capsys, value, shown):
    # `model: {name: x}` was taken as the model tag '{"name": "x"}' (exit 0).
    path = write(tmp_path, f"max-model-len: 64\nmodel: {value}\n")
    code, out, err = run_cli(capsys, "--config", path, *H100, *FAST)
    assert out == ""
    one_line_error(code, err, f"key 'model' is {shown}, not a model tag", "as a string")


def test_missing_yaml_file_names_the_path(tmp_path, capsys):
    code, _, err = run_cli(capsys, "--config", str(tmp_path / "nope.yaml"), *H100)
    one_line_error(code, err, "nope.yaml")


# --- hazards and exit codes ------------------------------------------------------------------

# The synchronous Scheduler (the model's scope); prefix caching stays at vLLM's default.
SMALL = ("--max-model-len", "16", "--max-num-batched-tokens", "4", "--max-num-seqs", "4",
         "--block-size", "2", "--num-gpu-blocks", "9", "--concurrency", "3", "--depth", "4",
         "--no-async-scheduling")


def test_a_witnessed_hazard_exits_0_by_default_and_1_with_strict(capsys):
    code, out, _ = run_cli(capsys, *SMALL, "--hazard", "head_of_line")
    assert code == 0 and "[WITNESSED] head_of_line" in out
    code, _, _ = run_cli(capsys, *SMALL, "--hazard", "head_of_line", "--strict")
    assert code == 1


def test_kv_hazards_without_a_pool_size_are_unknown_and_exit_3(capsys):
    code, out, _ = run_cli(capsys, "--max-model-len", "4096", *H100, "--hazard",
                           "repeated_preemption")
    assert code == 3
    assert "[UNKNOWN] repeated_preemption" in out and "--num-gpu-blocks" in out


def test_json_hazard_witness_has_the_trace(capsys):
    code, out, _ = run_cli(capsys, "--json", *SMALL, "--hazard", "head_of_line")
    hazard = json.loads(out)["hazards"][0]
    assert code == 0 and hazard["verdict"] == "WITNESSED"
    witness = hazard["witness"]
    assert witness["minimal"] is True
    assert len(witness["steps"]) == witness["violated_at"]
    assert witness["requests"]


def test_output_is_deterministic(capsys):
    first = run_cli(capsys, *SMALL, "--hazard", "head_of_line", "--json")[1]
    second = run_cli(capsys, *SMALL, "--hazard", "head_of_line", "--json")[1]
    strip = [json.loads(d) for d in (first, second)]
    for doc in strip:
        for h in doc["hazards"]:
            h.pop("seconds")
    assert strip[0] == strip[1]


@pytest.mark.slow
def test_explain_rules_json_lists_every_scheduler_config_rule(capsys):
    from model.vllm.validation import RULES
    code, out, _ = run_cli(capsys, "--explain-rules", "--json")
    doc = json.loads(out)
    assert code == 0
    assert [r["rule"] for r in doc] == [r.name for r in RULES]
    seqs = next(r for r in doc if r["rule"] == "batched_tokens_ge_num_seqs")
    assert seqs["verdict"] == "WITNESSED" and seqs["witness"]["steps"]


def test_text_output_is_deterministic(capsys):
    first = run_cli(capsys, *SMALL, "--hazard", "head_of_line", "--hazard", "self_preemption")
    second = run_cli(capsys, *SMALL, "--hazard", "head_of_line", "--hazard", "self_preemption")
    assert first == second and "[WITNESSED] head_of_line" in first[1]
