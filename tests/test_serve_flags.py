"""Flags as a vLLM user writes them, in every command (GitHub issue 18, item 5): vLLM's
`--config FILE` (its YAML) in check, simulate and config (`--manifest-config NAME` for a
manifest configuration, the old spellings deprecated), --gpu-memory-utilization, the
boolean spellings vLLM 0.32.0's parser takes (and the one it refuses), the flags the model
does not read (listed as ignored), the flags 0.32.0 no longer has (refused, saying when they
went), and a pasted `vllm serve MODEL ...` line."""

import json
from pathlib import Path

import pytest
from test_bad_input import one_line_error, run

from checker.cli.main import vllm_spellings

ROOT = Path(__file__).resolve().parent.parent
GROUP_A = str(ROOT / "examples" / "seed_group_a.json")
QUICK = ["--jobs", "1", "-q", "--timeout", "60"]
# starvation k=2 within 2 requests of prompts <= 2 and 3 steps: VIOLATED with one seat
# (max_num_seqs 1: the second request waits while the first decodes), HOLDS with four.
SMALL_BOUNDS = ["--property", "starvation:k=2", "--depth", "3", "--requests", "2",
                "--max-prompt-len", "2", "--max-tokens", "3"]


def yaml_file(tmp_path, seqs, **extra):
    lines = [f"max_num_seqs: {seqs}", "max_num_batched_tokens: 8", "max-model-len: 16",
             "num_gpu_blocks_override: 10", "block_size: 4", "enable_prefix_caching: false",
             "async_scheduling: false", *(f"{k}: {v}" for k, v in extra.items())]
    path = tmp_path / f"serve{seqs}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def verdict(out, prop="starvation"):
    row = next(line.split() for line in out.splitlines() if line.startswith(prop))
    return row[3] if "=" in row[1] else row[2]


# --- 1. --config FILE ---------------------------------------------------------------------


def test_check_reads_the_yaml_of_vllm_serve_config_and_the_command_line_wins(capsys,
                                                                                tmp_path):
    one_seat = yaml_file(tmp_path, 1)
    code, out, err = run(capsys, "check", "--config", one_seat, *SMALL_BOUNDS,
                         "--out", str(tmp_path / "out"), *QUICK)
    assert (code, verdict(out)) == (1, "VIOLATED"), (out, err)
    assert "deprecated" not in err
    code, out, err = run(capsys, "check", "--config", yaml_file(tmp_path, 4), *SMALL_BOUNDS,
                         *QUICK)
    assert (code, verdict(out)) == (0, "HOLDS(3)"), (out, err)
    # CLI over config file, as vLLM (utils/argparse_utils.py:526-531).
    code, out, err = run(capsys, "check", "--config", one_seat, "--max-num-seqs", "4",
                         *SMALL_BOUNDS, *QUICK)
    assert (code, verdict(out)) == (0, "HOLDS(3)"), (out, err)


def test_the_yaml_sets_the_config_exactly_as_the_same_flags_do(capsys, tmp_path):
    flags = ["--max-num-seqs", "1", "--max-num-batched-tokens", "8", "--max-model-len", "16",
             "--num-gpu-blocks-override", "10", "--block-size", "4",
             "--no-enable-prefix-caching", "--no-async-scheduling"]
    code, by_flags, _ = run(capsys, "check", *flags, *SMALL_BOUNDS, "--json", *QUICK,
                            "--out", str(tmp_path / "a"))
    code, by_yaml, _ = run(capsys, "check", "--config", yaml_file(tmp_path, 1),
                           *SMALL_BOUNDS, "--json", *QUICK, "--out", str(tmp_path / "b"))
    a, b = json.loads(by_flags)["verdicts"][0], json.loads(by_yaml)["verdicts"][0]
    assert a["counterexample"].rsplit("/", 1)[1] == b["counterexample"].rsplit("/", 1)[1]


def test_simulate_reads_the_yaml_over_the_workload_and_the_command_line_over_the_yaml(
        capsys, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("max_num_seqs: 2\nmax_num_batched_tokens: 512\nport: 8000\n")
    code, out, err = run(capsys, "simulate", GROUP_A, "--config", str(path))
    assert code == 0, err
    assert "max_num_seqs=2 " in out and "max_num_batched_tokens=512 " in out
    assert "ignored vLLM flags (not read by the scheduler model): --port" in out
    code, out, err = run(capsys, "simulate", GROUP_A, "--config", str(path),
                         "--max-num-seqs", "3")
    assert "max_num_seqs=3 " in out


def test_config_takes_config_and_file_still_works_with_a_deprecation_line(capsys, tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("max_model_len: 4096\nmax_num_seqs: 7\n")
    base = ["config", "--device", "h100", "--hazard", "priority_inversion", "--json"]
    code, out, err = run(capsys, *base, "--config", str(path))
    assert code == 0 and err == "", err
    assert json.loads(out)["effective"]["max_num_seqs"]["value"] == 7
    code, out, err = run(capsys, *base, "--file", str(path))
    assert code == 0
    assert json.loads(out)["effective"]["max_num_seqs"]["value"] == 7
    assert err.count("\n") == 1 and "--file is deprecated; write --config" in err


def test_manifest_config_and_the_old_check_config_name_with_a_deprecation_line(capsys):
    base = ["check", "--property", "head_of_line", *QUICK]
    code, new, err = run(capsys, *base, "--manifest-config", "tiny_fcfs")
    assert code == 0 and err == "", err
    code, old, err = run(capsys, *base, "--config", "tiny_fcfs")
    def rows(out):
        return [line.split()[:5] for line in out.splitlines() if line.startswith("head_of")]
    assert code == 0 and rows(old) == rows(new) != []
    assert err.count("\n") == 1
    assert "--config NAME is deprecated" in err and "--manifest-config tiny_fcfs" in err
    err = one_line_error(capsys, "check", "--config", "nope", "--property", "starvation")
    assert "unknown config 'nope'" in err and "--manifest-config NAME" in err


def test_yaml_errors_name_the_file_in_one_line(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("max_num_seqs: 2\ndepth: 3\n")  # depth is batchproof's, not vLLM's
    err = one_line_error(capsys, "check", "--config", str(path), "--property", "starvation")
    assert str(path) in err and "--depth" in err
    err = one_line_error(capsys, "check", "--config", str(tmp_path / "missing.yaml"),
                         "--property", "starvation")
    assert "cannot read" in err


# --- 2. --gpu-memory-utilization ------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["check", "--property", "running_within_max_num_seqs", "--max-num-seqs", "2",
     "--depth", "2", "--requests", "2", *QUICK],
    ["simulate", GROUP_A],
    ["worst", "--metric", "starvation_steps", "--manifest-config", "tiny_fcfs", "--depth", "2",
     "--requests", "1"],
    ["config", "--device", "h100", "--max-model-len", "4096", "--hazard",
     "priority_inversion"],
])
def test_gpu_memory_utilization_is_validated_and_said_to_be_ignored(command, capsys,
                                                                     tmp_path):
    argv = [*command, *(["--out", str(tmp_path)] if command[0] == "worst" else [])]
    err = one_line_error(capsys, *argv, "--gpu-memory-utilization", "1.5")
    assert "must be in (0, 1]" in err and "config/cache.py:102" in err
    code, out, err = run(capsys, *argv, "--gpu-memory-utilization", "0.85")
    assert code in (0, 1), err
    assert "--gpu-memory-utilization" in out and "not estimated from memory" in out, out


def test_the_kv_pool_assumption_is_said_when_no_pool_is_given(capsys):
    code, out, err = run(capsys, "check", "--property", "running_within_max_num_seqs",
                         "--max-num-seqs", "2", "--max-num-batched-tokens", "8",
                         "--max-model-len", "16", "--gpu-memory-utilization", "0.5",
                         "--depth", "2", "--requests", "2", *QUICK)
    assert code == 0, err
    assert "assumed: num_gpu_blocks 4096" in out and "gpu_memory_utilization 0.5" in out
    assert "assumed: max_model_len" not in out and "assumed: no --device" not in out


# --- 3. boolean spellings -------------------------------------------------------------------


def test_no_flag_turns_chunking_off_and_the_underscore_spellings_are_vllms(capsys):
    for spelling in (["--no-enable-chunked-prefill"], ["--no_enable_chunked_prefill"],
                     ["--enable_chunked_prefill", "--no-enable-chunked-prefill"]):
        code, out, err = run(capsys, "simulate", GROUP_A, *spelling,
                             "--max_num_batched_tokens", "512")
        assert code == 0, err
        assert "enable_chunked_prefill=off" in out and "max_num_batched_tokens=512 " in out
    code, out, err = run(capsys, "simulate", GROUP_A, "--enable_chunked_prefill")
    assert "enable_chunked_prefill=on" in out
    assert vllm_spellings(["--max_num_seqs=4", "--a_b.c_d", "x_y", "-q"]) == \
        ["--max-num-seqs=4", "--a-b.c_d", "x_y", "-q"]


@pytest.mark.parametrize("command", [["simulate", GROUP_A], ["check"],
                                     ["config", "--device", "h100", "--max-model-len", "64"]])
def test_a_value_on_a_boolean_flag_is_refused_as_vllm_refuses_it(command, capsys):
    # vLLM 0.32.0's boolean flags are BooleanOptionalAction (engine/arg_utils.py:378-380):
    # `vllm serve M --enable-chunked-prefill=False` stops with "ignored explicit argument".
    err = one_line_error(capsys, *command, "--enable-chunked-prefill=False")
    assert "--enable-chunked-prefill=False: a boolean vllm serve flag takes no value" in err
    assert "write --enable-chunked-prefill or --no-enable-chunked-prefill" in err


# --- 4. flags the model does not read, flags 0.32.0 does not have ---------------------------


def test_an_ignored_flag_is_listed_and_does_not_change_the_answer(capsys, tmp_path):
    base = ["check", "--config", yaml_file(tmp_path, 1), *SMALL_BOUNDS, *QUICK,
            "--out", str(tmp_path / "out")]
    code, plain, _ = run(capsys, *base)
    code, more, _ = run(capsys, *base, "--port", "8000", "--disable-log-stats",
                        "--enforce-eager", "--dtype", "bfloat16", "-tp", "1")
    assert verdict(plain) == verdict(more) == "VIOLATED"
    assert [x.split()[-1] for x in plain.splitlines() if x.startswith("starvation")] == \
        [x.split()[-1] for x in more.splitlines() if x.startswith("starvation")]
    assert ("ignored vLLM flags (not read by the scheduler model): --disable-log-stats "
            "--dtype --enforce-eager --port") in more


@pytest.mark.parametrize("command", [
    ["check", "--property", "starvation"], ["simulate", GROUP_A],
    ["worst", "--metric", "starvation_steps"], ["diff", "vllm-v1", "--ablate", "cap_prefix_hit"],
    ["config", "--device", "h100", "--max-model-len", "64"]])
@pytest.mark.parametrize("flag, went", [
    (["--swap-space", "4"], "removed in 0.18.0"),
    (["--disable-log-requests"], "removed in 0.17.0"),
    (["--preemption-mode", "swap"], "removed in 0.11.0"),
    (["--num-scheduler-steps", "8"], "removed in 0.10.1"),
    (["--scheduler-delay-factor", "0.5"], "removed in 0.11.0"),
    (["--max-seq-len-to-capture", "8192"], "--max-cudagraph-capture-size"),
])
def test_a_flag_vllm_0_32_no_longer_has_is_one_line_saying_when_it_went(command, flag, went,
                                                                       capsys):
    err = one_line_error(capsys, *command, *flag)
    assert f"{flag[0]}: vllm serve 0.32.0 has no such flag" in err and went in err, err


def test_max_num_partial_prefills_is_refused_with_what_it_did_and_what_replaces_it(capsys,
                                                                                  tmp_path):
    # Gone since 0.27.0; up to 0.26.0 the V1 engine refused any value but 1
    # (0.26.0 engine/arg_utils.py:2403-2410), so in V1 it never set the threshold.
    for command in (["check", "--property", "starvation"], ["simulate", GROUP_A],
                    ["config", "--device", "h100", "--max-model-len", "64"]):
        err = one_line_error(capsys, *command, "--max-num-partial-prefills", "2")
        assert "removed in 0.27.0" in err and "refused any value but 1" in err
        assert "--long-prefill-token-threshold N" in err
    path = tmp_path / "old.yaml"
    path.write_text("max_num_partial_prefills: 2\nmax_long_partial_prefills: 1\n")
    err = one_line_error(capsys, "check", "--config", str(path), "--property", "starvation")
    assert "--max-num-partial-prefills" in err and "removed in 0.27.0" in err


def test_old_device_values_say_vllm_has_no_device_flag(capsys):
    err = one_line_error(capsys, "config", "--device", "cuda", "--max-model-len", "64")
    assert "--device cuda" in err and "0.10.0" in err and "h100" in err


@pytest.mark.parametrize("flag, feature", [
    (["--speculative-config", '{"method": "dspark", "num_speculative_tokens": 2}'],
     "speculative method dspark"),
    (["--enable-lora"], "LoRA"),
    (["-pp", "2"], "several batches at once"),
    # a producer: check runs a consumer's connector (model/vllm/connector_rules.py)
    (["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}'],
     "KV connector (requests load or send KV asynchronously"),
])
def test_a_flag_that_turns_on_an_unmodelled_feature_is_refused_by_the_model_commands(
        flag, feature, capsys):
    for command in (["check", "--property", "starvation"], ["simulate", GROUP_A]):
        err = one_line_error(capsys, *command, *flag)
        assert feature in err and "batchproof config" in err


def test_speculative_decoding_the_model_covers_runs_in_check_and_simulate(capsys):
    # the scheduler.py:1372 crash: ngram k=2 with a long-prefill threshold of 2 (< 1 + k)
    flags = ["--max-num-batched-tokens", "8", "--max-num-seqs", "2", "--max-model-len", "12",
             "--block-size", "4", "--num-gpu-blocks-override", "8",
             "--long-prefill-token-threshold", "2", "--no-enable-prefix-caching",
             "--no-async-scheduling", "--speculative-config",
             '{"method": "ngram", "num_speculative_tokens": 2}']
    code, out, _ = run(capsys, "check", "--property", "no_engine_assertion", "--requests",
                       "2", "--depth", "3", "--max-prompt-len", "2", "--max-tokens", "2",
                       *flags, *QUICK)
    assert code == 1 and "VIOLATED" in out
    code, out, _ = run(capsys, "check", "--property", "no_engine_assertion", "--requests",
                       "2", "--depth", "3", "--max-prompt-len", "2", "--max-tokens", "2",
                       *flags[:-1], '{"method": "ngram", "num_speculative_tokens": 1}', *QUICK)
    # threshold 2 = 1 + k cuts nothing: k-induction proves it (its step ranges over the
    # drafts accepted and proposed, as BMC's does)
    assert code == 0 and "PROVED" in out and "induction" in out
    code, out, _ = run(capsys, "simulate", GROUP_A, "--speculative-config",
                       '{"method": "ngram", "num_speculative_tokens": 2}')
    assert code == 0 and "d0:3d+2/0" in out  # a decode with its 2 drafts, none accepted


# --- 6. a pasted vllm serve line -------------------------------------------------------------


def test_a_pasted_vllm_serve_line_works_in_check_and_says_what_it_assumed(capsys, tmp_path):
    code, out, err = run(capsys, "check", "vllm", "serve", "Qwen/Qwen3-8B", "--max-num-seqs",
                         "2", "--port", "8000", "--disable-log-stats", "--property",
                         "running_within_max_num_seqs", "--depth", "2", "--requests", "2",
                         *QUICK)
    assert code == 0, err
    assert verdict(out, "running_within_max_num_seqs") in ("PROVED", "HOLDS(2)")
    assert "ignored vLLM flags (not read by the scheduler model): --disable-log-stats --port" \
        in out
    # max_num_batched_tokens depends on the device, max_model_len on the model, the pool on
    # memory profiling: each assumption is said.
    assert "model: Qwen/Qwen3-8B (only named" in out
    assert "assumed: max_model_len 8192" in out
    assert "assumed: no --device or --gpu-memory-gib, so max_num_batched_tokens 2048" in out
    assert "assumed: num_gpu_blocks 4096" in out
    # With the device, vLLM's tier decides and nothing is assumed about it.
    code, out, err = run(capsys, "check", "vllm", "serve", "Qwen/Qwen3-8B", "--max-num-seqs",
                         "2", "--device", "h100", "--property", "running_within_max_num_seqs",
                         "--depth", "2", "--requests", "2", *QUICK)
    assert code == 0, err
    assert "assumed: no --device" not in out


def test_a_pasted_vllm_serve_line_works_in_simulate(capsys):
    code, out, err = run(capsys, "simulate", GROUP_A, "vllm", "serve", "Qwen/Qwen3-8B",
                         "--max-num-seqs", "3", "--port", "8000")
    assert code == 0, err
    assert "max_num_seqs=3 " in out and "--port" in out and "model: Qwen/Qwen3-8B" in out
    err = one_line_error(capsys, "simulate", GROUP_A, "vllm", "serve", "a", "b")
    assert "unexpected arguments 'b'" in err
    err = one_line_error(capsys, "check", "starvation")  # for --property starvation
    assert "unexpected argument 'starvation'" in err and "vllm serve MODEL" in err


def test_the_resolver_applies_vllms_clamps_as_config_does(capsys):
    # --max-num-seqs 2 --max-model-len 16 without a token budget: vLLM caps the budget at
    # max_num_seqs * max_model_len = 32 (engine/arg_utils.py:3164-3170); check resolves it
    # as config does.
    code, out, err = run(capsys, "check", "--max-num-seqs", "2", "--max-model-len", "16",
                         "--num-gpu-blocks", "10", "--block-size", "4", "--property",
                         "budget_respected", "--depth", "1", "--requests", "1", *QUICK)
    assert code == 0, err
    assert "so max_num_batched_tokens 32 and max_num_seqs 2" in out
    code, out, err = run(capsys, "config", "--max-num-seqs", "2", "--max-model-len", "16",
                         "--gpu-memory-gib", "1", "--json", "--hazard", "priority_inversion")
    assert json.loads(out)["effective"]["max_num_batched_tokens"]["value"] == 32


def test_one_parser_serves_every_call_in_a_process_and_keeps_nothing_between_them(capsys):
    # main() parses with one parser per process (checker/cli/main.py, `_shared_parser`):
    # a call's pasted serve words, serve flags and ignored flags must not reach the next.
    from checker.cli.main import _shared_parser
    from checker.config.serve_args import SERVE_DEST

    code, plain, err = run(capsys, "simulate", GROUP_A)
    assert code == 0, err
    code, out, err = run(capsys, "simulate", GROUP_A, "vllm", "serve", "Qwen/Qwen3-8B",
                         "--max-num-seqs", "3", "--port", "8000")
    assert code == 0 and "max_num_seqs=3 " in out and "model: Qwen/Qwen3-8B" in out, err
    code, again, err = run(capsys, "simulate", GROUP_A)
    assert code == 0 and again == plain, err
    assert "model: Qwen/Qwen3-8B" not in again and "--port" not in again
    parser = _shared_parser("simulate")
    assert parser is _shared_parser("simulate")
    assert parser.parse_args(["simulate", GROUP_A]).__dict__[SERVE_DEST] == []
