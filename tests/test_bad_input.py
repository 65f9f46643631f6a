"""Bad input is one line and exit 2, never a traceback; no size makes a command hang; no
clearly invalid input passes; every command validates a configuration as vLLM does.
One test per finding of issue 14, items 4-7 (the fuzz test, tests/test_fuzz.py, hunts
for the rest)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checker.cli.main import main
from model.core.checks import MAX_REQUESTS, MAX_STEPS
from model.vllm.startup import kv_rejection
from model.workload import parse_workload
from properties.manifest import load as load_manifest

ROOT = Path(__file__).resolve().parent.parent
GROUP_A = ROOT / "examples" / "seed_group_a.json"
SGLANG = ROOT / "examples" / "sglang_chunked_stall.json"
COMPARE = ROOT / "examples" / "compare_mixed.json"
STARVATION = ROOT / "counterexamples" / "vllm_v1" / "starvation__tiny_fcfs.itf.json"
YAML = ROOT / "examples" / "configs" / "llama8b_h100.yaml"
# A pool of 4 blocks of 16 (3 usable) cannot hold one 64-token request: vLLM refuses to
# start (v1/core/kv_cache_utils.py:1003-1040).
TINY_POOL = {"max_num_batched_tokens": 16, "max_num_seqs": 4, "max_model_len": 64,
             "block_size": 16, "num_gpu_blocks": 4}


def workload(config=None, requests=None, **top):
    return {"config": {"max_num_batched_tokens": 16, "max_num_seqs": 4} if config is None
            else config,
            "requests": [{"id": "a", "prompt_len": 4, "max_tokens": 2}] if requests is None
            else requests, "steps": 4, **top}


def write(tmp_path, doc, name="w.json"):
    path = tmp_path / name
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, *argv, needles=()):
    """Run and assert exit 2 with one line on stderr holding every needle."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, out, err)
    assert out == "" and err.count("\n") == 1 and err.startswith("batchproof: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


# ---- item 4: tracebacks on bad input -------------------------------------------------


@pytest.mark.parametrize("command, name", [("simulate", "w.json"), ("explain", "w.json"),
                                           ("compare", "w.json"), ("replay", "t.itf.json")])
def test_a_file_that_is_not_utf8_is_one_line(tmp_path, capsys, command, name):
    path = write(tmp_path, b'{"requests": [{"id": "\xff\xfe"}]}', name)
    one_line_error(capsys, command, path, needles=("is not UTF-8 text",))


def test_a_yaml_config_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = write(tmp_path, b"max-model-len: 4096\nmodel: \xff\xfe\n", "c.yaml")
    one_line_error(capsys, "config", "--config", path, "--device", "h100",
                   needles=("is not UTF-8 text",))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(params=True), "#meta.params must be an object of integers"),
    (lambda m: m.update(violated_at="abc"), "#meta.violated_at must be the step"),
    (lambda m: m.update(property="no_such"), "is not a known property"),
    (lambda m: m.update(workload=[]), "a workload must be a JSON object"),
    (lambda m: m["workload"]["requests"].append({"id": "r0", "prompt_len": 1,
                                                 "max_tokens": 1}), "appears twice"),
])
@pytest.mark.parametrize("command", ["replay", "explain"])
def test_itf_meta_of_the_wrong_type_is_one_line(tmp_path, capsys, command, edit, message):
    doc = json.loads(STARVATION.read_text())
    edit(doc["#meta"])
    one_line_error(capsys, command, write(tmp_path, doc, "t.itf.json"), needles=(message,))


@pytest.mark.parametrize("command", ["replay", "explain"])
def test_a_lasso_without_loop_is_one_line(tmp_path, capsys, command):
    doc = json.loads((ROOT / "counterexamples/vllm_v1/never_finishes__tiny_fcfs.itf.json")
                     .read_text())
    del doc["loop"]
    one_line_error(capsys, command, write(tmp_path, doc, "t.itf.json"),
                   needles=("is a lasso property but the trace has no 'loop'",))


@pytest.mark.parametrize("command", ["simulate", "explain", "compare", "replay"])
def test_json_nested_a_hundred_thousand_deep_is_one_line(tmp_path, capsys, command):
    path = write(tmp_path, b"[" * 100_000 + b"]" * 100_000)
    one_line_error(capsys, command, path, needles=("nests JSON too deeply",))


def test_a_value_nested_forty_deep_inside_a_workload_is_one_line(tmp_path, capsys):
    deep = 1
    for _ in range(40):
        deep = [deep]
    path = write(tmp_path, workload(config={"max_num_seqs": deep}))
    one_line_error(capsys, "simulate", path, needles=("nests JSON too deeply",))


def test_yaml_nested_deeply_is_one_line(tmp_path, capsys):
    path = write(tmp_path, "max-model-len: " + "[" * 100 + "]" * 100 + "\n", "c.yaml")
    one_line_error(capsys, "config", "--config", path, "--device", "h100",
                   needles=("nests YAML too deeply",))


def alias_bomb():
    """The "billion laughs": 271 bytes whose nested aliases expand to 9^8 (43 million)
    scalars; the loader used to expand them all (config 40 s, sweep 20 s) before any cap."""
    lines, previous = ["a: &a [x, x, x, x, x, x, x, x, x]"], "a"
    for name in "bcdefgh":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("command", [["config", "--config", "c.yaml", "--device", "h100"],
                                     ["sweep", "c.yaml", "--dry-run", "--out", "out"]])
def test_a_yaml_alias_bomb_is_refused_while_loading_in_one_line(tmp_path, command):
    write(tmp_path, alias_bomb(), "c.yaml")
    # A process of its own, so that the timeout can stop it: it returns in well under a
    # second; 10 s is room for a loaded machine, and half the time the bomb took before.
    proc = subprocess.run([sys.executable, "-m", "checker.cli", *command], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=10)
    assert proc.returncode == 2, proc
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr[:500]
    assert proc.stderr.startswith("batchproof: error: c.yaml: at alias *f at line 7 the YAML "
                                  "holds more than 1,000,000 values"), proc.stderr[:500]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("text, needle", [
    ("a: &a [*a]\n", "alias *a at line 1 is inside the value it names"),
    ("l: [" + ", ".join(f"&a{i} 1" for i in range(101)) + "]\nm: ["
     + ", ".join(f"*a{i}" for i in range(101)) + "]\n",
     "alias *a100 at line 2 is one more than the 100 YAML aliases"),
])
def test_a_recursive_alias_or_too_many_aliases_is_one_line(tmp_path, capsys, text, needle):
    path = write(tmp_path, text, "c.yaml")
    one_line_error(capsys, "config", "--config", path, "--device", "h100", needles=(needle,))


def test_a_yaml_alias_within_the_limits_still_reads(tmp_path, capsys):
    path = write(tmp_path, "max-model-len: &n 4096\nmax-num-batched-tokens: *n\n", "c.yaml")
    code, out, err = run(capsys, "config", "--config", path, "--device", "h100", "--json",
                         "--hazard", "priority_inversion")
    assert code == 0, err
    assert json.loads(out)["effective"]["max_num_batched_tokens"]["value"] == 4096


def test_an_eos_id_that_is_a_list_is_one_line(tmp_path, capsys):
    path = write(tmp_path, workload(eos=[{"id": ["a"], "step": 1}]))
    one_line_error(capsys, "simulate", path, needles=("eos[0]: id must be a request id",))


@pytest.mark.parametrize("flag, value", [
    ("--max-num-seqs", "99999999999999999999"),  # beyond 64 bits
    ("--max-num-seqs", "1" * 5000),  # beyond Python's int-from-text limit
    ("--max-num-batched-tokens", "9" * 400 + "k"),  # was an OverflowError (float inf)
    ("--watermark", "nan"),
])
def test_numbers_beyond_64_bits_or_nan_in_flags_are_one_line(tmp_path, capsys, flag, value):
    one_line_error(capsys, "simulate", GROUP_A, flag, value, needles=(flag,))


@pytest.mark.parametrize("value", ["nan", "inf", "1e18", "-1"])
def test_check_timeout_nan_or_huge_is_one_line(capsys, value):
    one_line_error(capsys, "check", f"--timeout={value}", needles=("--timeout", "seconds"))


@pytest.mark.parametrize("text, needle", [
    ('{"config": {"max_num_seqs": 18446744073709551616}, "requests": []}', "64 bits"),
    ('{"config": {"watermark": NaN}, "requests": []}', "NaN is not a JSON number"),
    ('{"steps": ' + "9" * 5000 + "}", "a number too long to read"),
    ('{"engine": "sglang", "config": {"schedule_conservativeness": Infinity}}',
     "Infinity is not a JSON number"),
])
def test_numbers_beyond_64_bits_or_nan_in_a_workload_are_one_line(tmp_path, capsys, text,
                                                                   needle):
    one_line_error(capsys, "simulate", write(tmp_path, text), needles=(needle,))


@pytest.mark.parametrize("line, needle", [
    ("num-gpu-blocks-override: 1180591620717411303424\n", "at most"),  # 2^70
    ("max-num-seqs: .nan\n", "not a finite number"),
    ("max-num-seqs: " + "9" * 5000 + "\n", "a number too long to read"),
])
def test_numbers_beyond_64_bits_or_nan_in_yaml_are_one_line(tmp_path, capsys, line, needle):
    path = write(tmp_path, YAML.read_text() + line, "c.yaml")
    one_line_error(capsys, "config", "--config", path, "--device", "h100", needles=(needle,))


@pytest.mark.parametrize("line, needle", [
    ("max-model-len: 2024-01-01\n", "YAML reads as a date"),
    ("max-num-seqs: !!set {a, b}\n", "YAML reads as a set"),
    ("speculative-config: {method: eagle, since: 2024-01-01}\n", "which is not JSON"),
    ("speculative-config: {method: eagle, k: !!set {3}}\n", "which is not JSON"),
    ("max-num-seqs: !!binary aGVsbG8=\n", "YAML reads as a bytes"),
    ("1: 2\n", "is not a flag name"),
])
def test_yaml_dates_sets_and_binaries_are_one_line(tmp_path, capsys, line, needle):
    path = write(tmp_path, YAML.read_text() + line, "c.yaml")
    one_line_error(capsys, "config", "--config", path, "--device", "h100", needles=(needle,))


def test_seeds_write_to_a_missing_folder_is_one_line_before_any_work(capsys, monkeypatch):
    import checker.cli.seeds as seeds

    def never():
        raise AssertionError("the page was computed before the path was checked")

    monkeypatch.setattr(seeds, "render_page", never)
    one_line_error(capsys, "seeds", "--write", "/nonexistent/dir/seeds.md",
                   needles=("does not exist",))


def test_seeds_write_to_a_folder_is_one_line(tmp_path, capsys):
    one_line_error(capsys, "seeds", "--write", tmp_path, needles=("it is a folder",))


def test_seeds_write_writes_the_page(tmp_path, capsys):
    target = tmp_path / "seeds.md"
    code, out, _ = run(capsys, "seeds", "--write", target)
    assert code == 0 and out == f"wrote {target}\n" and target.read_text().startswith("#")


@pytest.mark.parametrize("engine", ["sglang", "mistralrs", "static", "dynamic", "vllm-v1"])
def test_explain_of_a_workload_with_no_requests_is_one_line(tmp_path, capsys, engine):
    path = write(tmp_path, {"engine": engine, "requests": [], "steps": 3})
    one_line_error(capsys, "explain", path, needles=("needs at least one request",))


def test_an_internal_error_exits_4_in_one_line_naming_the_bug(capsys, monkeypatch):
    import checker.cli.simulate as simulate

    def broken(args):
        raise KeyError("boom")

    monkeypatch.setattr(simulate, "run", broken)
    code, out, err = run(capsys, "simulate", GROUP_A)
    assert code == 4 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "internal error (a bug in batchproof" in err and "KeyError" in err
    assert "batchproof --debug" in err


def test_debug_shows_the_traceback_of_an_internal_error(capsys, monkeypatch):
    import checker.cli.simulate as simulate

    def broken(args):
        raise KeyError("boom")

    monkeypatch.setattr(simulate, "run", broken)
    with pytest.raises(KeyError, match="boom"):
        main(["--debug", "simulate", str(GROUP_A)])


def test_debug_leaves_bad_input_a_one_line_error(capsys):
    code, _, err = run(capsys, "--debug", "simulate", "/nonexistent.json")
    assert code == 2 and err.count("\n") == 1


# ---- item 5: hangs -------------------------------------------------------------------


@pytest.mark.parametrize("steps", [10**7, 2**64])
def test_steps_beyond_the_maximum_are_refused_at_once(tmp_path, capsys, steps):
    start = time.monotonic()
    one_line_error(capsys, "simulate", write(tmp_path, workload(steps=steps)),
                   needles=(f"steps must be at most {MAX_STEPS}",))
    assert time.monotonic() - start < 5


def test_parsing_ten_thousand_requests_is_linear():
    # list.count made it quadratic: 25 s for 10,000 requests; linear it is milliseconds.
    doc = workload(requests=[{"id": f"r{i}", "prompt_len": 4, "max_tokens": 2}
                             for i in range(MAX_REQUESTS)])
    start = time.monotonic()
    parsed = parse_workload(doc)
    assert len(parsed.requests) == MAX_REQUESTS
    assert time.monotonic() - start < 2


def test_more_requests_than_the_maximum_are_refused(tmp_path, capsys):
    doc = workload(requests=[{"id": f"r{i}", "prompt_len": 4, "max_tokens": 2}
                             for i in range(MAX_REQUESTS + 1)])
    one_line_error(capsys, "simulate", write(tmp_path, doc),
                   needles=(f"more than the {MAX_REQUESTS}",))


def test_requests_times_steps_beyond_the_maximum_are_refused(tmp_path, capsys):
    doc = workload(requests=[{"id": f"r{i}", "prompt_len": 4, "max_tokens": 2}
                             for i in range(20)], steps=MAX_STEPS)
    one_line_error(capsys, "simulate", write(tmp_path, doc), needles=("request-steps",))


def test_compare_has_its_own_smaller_maximum(tmp_path, capsys):
    doc = json.loads(COMPARE.read_text())
    doc["requests"] = [{**doc["requests"][0], "id": f"q{i}"} for i in range(200)]
    doc["steps"] = 1000
    one_line_error(capsys, "compare", write(tmp_path, doc),
                   needles=("more than the 100000 compare takes",))


def test_explain_refuses_a_timeline_too_large_to_draw(tmp_path, capsys):
    # One request runs (1,001 request-steps), but the timeline has a row for all 1,000:
    # 1,001,000 cells.
    late = [{"id": f"r{i}", "prompt_len": 4, "max_tokens": 2, "arrival_step": 2000}
            for i in range(999)]
    doc = workload(requests=[{"id": "a", "prompt_len": 4, "max_tokens": 2}, *late],
                   steps=1001)
    code, _, _ = run(capsys, "simulate", write(tmp_path, doc))
    assert code == 0
    one_line_error(capsys, "explain", write(tmp_path, doc), needles=("timeline cells",))


@pytest.mark.parametrize("flag, value", [
    ("--slots", "1000000000000000000"), ("--slots", "17"), ("--depth", "1001"),
    ("--depth", str(2**64)), ("--jobs", "100000")])
def test_check_sizes_have_a_maximum(capsys, flag, value):
    one_line_error(capsys, "check", flag, value, needles=(flag, "must be at most"))


# ---- item 6: false passes ------------------------------------------------------------


def test_compare_exits_2_when_every_engine_refuses(tmp_path, capsys):
    doc = json.loads(COMPARE.read_text())
    doc["requests"][0]["prompt_len"] = doc["config"]["kv_tokens"] + 1  # fits nowhere
    one_line_error(capsys, "compare", write(tmp_path, doc), "--engines", "vllm-v1,sglang",
                   needles=("no engine ran the workload", "vllm-v1:", "sglang:"))


def test_compare_with_a_misspelt_engine_config_field_is_one_line(tmp_path, capsys):
    doc = json.loads(COMPARE.read_text())
    doc["engine_config"] = {"sglang": {"chunked_prefil_size": 4}}
    one_line_error(capsys, "compare", write(tmp_path, doc),
                   needles=("engine_config['sglang']", "chunked_prefil_size"))


def test_compare_still_runs_when_some_engines_refuse(tmp_path, capsys):
    doc = json.loads(COMPARE.read_text())
    # A 44-token prompt is past SGLang's max_req_input_len (48 - 6), within vLLM's 48. (An
    # engine_config value that makes an engine refuse is bad input: test_compare.py.)
    doc["requests"][0].update(prompt_len=44, max_tokens=1)
    code, out, _ = run(capsys, "compare", write(tmp_path, doc))
    assert code == 0 and "note: sglang skipped: request 'long'" in out
    assert "vllm-v1" in out.split("per engine")[1]


def test_explain_refuses_a_workload_simulate_rejects(tmp_path, capsys):
    path = write(tmp_path, workload(config={"max_num_batched_tokens": 2, "max_num_seqs": 4}))
    simulate_err = one_line_error(capsys, "simulate", path)
    explain_err = one_line_error(capsys, "explain", path)
    assert "batched_tokens_ge_num_seqs" in simulate_err and simulate_err == explain_err


@pytest.mark.parametrize("fmt", ["text", "markdown", "svg"])
def test_explain_no_validate_says_not_validated_in_every_format(tmp_path, capsys, fmt):
    path = write(tmp_path, workload(config={"max_num_batched_tokens": 2, "max_num_seqs": 4}))
    code, out, _ = run(capsys, "explain", path, "--format", fmt, "--no-validate")
    assert code == 0
    assert ("configuration not validated (--no-validate); vLLM V1 would reject it by rule "
            "batched_tokens_ge_num_seqs") in out


def test_a_cached_prefix_longer_than_the_prompt_is_refused(tmp_path, capsys):
    path = write(tmp_path, workload(requests=[{"id": "a", "prompt_len": 4, "max_tokens": 2,
                                               "cached_prefix_len": 5}]))
    one_line_error(capsys, "simulate", path, needles=("cached_prefix_len 5 exceeds "
                                                      "prompt_len 4",))


@pytest.mark.parametrize("doc", [{}, {"requests": []}, {"engine": "static"},
                                 {"engine": "sglang", "requests": []}])
def test_a_workload_without_requests_is_refused(tmp_path, capsys, doc):
    path = write(tmp_path, doc)
    one_line_error(capsys, "simulate", path, needles=("needs at least one request",))
    # explain reads a file without 'requests' as no kind of file it draws
    one_line_error(capsys, "explain", path, needles=(
        "needs at least one request" if "requests" in doc else "neither an ITF",))


@pytest.mark.parametrize("fmt", ["markdown", "svg"])
def test_explain_of_a_forged_trace_exits_1_in_every_format(tmp_path, capsys, fmt):
    doc = json.loads(STARVATION.read_text())
    doc["states"][1]["free_blocks"] = 99
    code, out, err = run(capsys, "explain", write(tmp_path, doc, "t.itf.json"), "--format",
                         fmt)
    assert code == 1
    assert err.startswith("DIVERGENCE: state 1: field free_blocks is 99")
    assert out  # the drawing, of the reference's run, is still printed


# ---- item 7: one validation for every command ----------------------------------------


def test_simulate_refuses_a_pool_too_small_for_one_max_model_len_request(tmp_path, capsys):
    one_line_error(capsys, "simulate", write(tmp_path, workload(config=TINY_POOL)),
                   needles=("kv_holds_one_max_model_len_request", "--no-validate"))


def test_simulate_no_validate_runs_it_and_says_so(tmp_path, capsys):
    path = write(tmp_path, workload(config=TINY_POOL))
    code, out, _ = run(capsys, "simulate", path, "--no-validate")
    assert code == 0 and out.splitlines()[0].startswith(
        "configuration not validated (--no-validate); vLLM would reject it by rule "
        "kv_holds_one_max_model_len_request")
    code, out, _ = run(capsys, "simulate", path, "--no-validate", "--json")
    assert code == 0 and json.loads(out)["validated"] is False


def test_a_flag_can_make_the_pool_refused(capsys):
    one_line_error(capsys, "simulate", GROUP_A, "--max-model-len", "8192",
                   needles=("kv_holds_one_max_model_len_request",))


def test_check_with_flags_refuses_the_pool_config_refuses(capsys):
    flags = ["--max-num-batched-tokens", "16", "--max-num-seqs", "4", "--max-model-len",
             "64", "--block-size", "16", "--num-gpu-blocks", "4"]
    one_line_error(capsys, "check", *flags, "--property", "budget_respected",
                   needles=("kv_holds_one_max_model_len_request",))
    config_code, _, _ = run(capsys, "config", *flags)
    assert config_code == 2  # the config command's own verdict on the same flags


def test_check_no_validate_marks_every_output(capsys):
    flags = ["--max-num-batched-tokens", "16", "--max-num-seqs", "4", "--max-model-len",
             "64", "--block-size", "16", "--num-gpu-blocks", "4", "--property",
             "budget_respected", "--slots", "1", "--depth", "2", "--timeout", "20", "-q",
             "--no-validate"]
    mark = ("configuration not validated (--no-validate); vLLM V1 would reject it by rule "
            "kv_holds_one_max_model_len_request")
    code, out, _ = run(capsys, "check", *flags)
    assert code == 0 and out.splitlines()[0] == mark
    code, out, _ = run(capsys, "check", *flags, "--json")
    rows = json.loads(out)["verdicts"]
    assert code == 0 and rows and all(r["detail"].startswith(mark) for r in rows)


def test_check_config_file_refuses_the_pool_too(tmp_path, capsys):
    path = write(tmp_path, {"config": TINY_POOL})
    one_line_error(capsys, "check", "--config-file", path, "--property", "budget_respected",
                   needles=("kv_holds_one_max_model_len_request",))


def test_check_config_file_needs_a_config(tmp_path, capsys):
    one_line_error(capsys, "check", "--config-file", write(tmp_path, {}), "--property",
                   "budget_respected", needles=("has no 'config' to check",))


def test_compare_skips_vllm_when_its_startup_check_refuses_the_mapped_pool(tmp_path, capsys):
    doc = json.loads(COMPARE.read_text())
    # kv_tokens 50 in blocks of 4: 12 usable blocks hold 48 tokens, not one 50-token request
    doc["config"]["kv_tokens"] = 50
    code, out, _ = run(capsys, "compare", write(tmp_path, doc))
    assert code == 0
    assert "note: vllm-v1 skipped: vLLM V1 rejects the mapped config: the KV cache cannot " \
           "hold one request of max_model_len (50)" in out


def test_manifest_configs_keep_the_manifests_own_validated_flag(capsys):
    # tiny_fcfs studies a pool below one max_model_len request (4 usable blocks of 2, 16
    # tokens), which vLLM would refuse at start; the manifest path runs it as before.
    tiny = load_manifest().configs["tiny_fcfs"]
    assert tiny.validated and kv_rejection(tiny.config) is not None
    code, _, _ = run(capsys, "check", "--manifest-config", "tiny_fcfs", "--property", "starvation",
                     "-q")
    assert code == 0
    code, _, _ = run(capsys, "replay", STARVATION)
    assert code == 0


# ---- found by the 3,000-invocation fuzz run (tests/test_fuzz.py, slow) ------------------


def _yaml_with(tmp_path, example, key, value):
    lines = (ROOT / "examples" / "configs" / example).read_text().splitlines()
    lines = [ln for ln in lines if not ln.startswith(f"{key}:")] + [f"{key}: {value}"]
    path = tmp_path / example
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_config_with_max_model_len_1_is_not_an_internal_error(tmp_path, capsys):
    path = _yaml_with(tmp_path, "qwen7b_l4_throughput.yaml", "max-model-len", 1)
    code, out, err = run(capsys, "config", "--config", path, "--device", "h100",
                         "--concurrency", "1", "--depth", "2", "--timeout", "2")
    assert code in (0, 2, 3) and "internal error" not in err and "Traceback" not in err


def test_config_with_a_huge_pool_keeps_its_time_limit(tmp_path, capsys):
    """The constructed run of a KV hazard grows with the pool; it stops at the hazard's
    time limit (it ran for minutes on a million blocks)."""
    path = _yaml_with(tmp_path, "llama70b_long_context.yaml", "num-gpu-blocks-override",
                      1000000)
    start = time.monotonic()
    code, out, err = run(capsys, "config", "--config", path, "--device", "h100",
                         "--concurrency", "1", "--depth", "2", "--timeout", "2")
    assert code in (0, 3) and "Traceback" not in err
    assert time.monotonic() - start < 30


def test_a_simulation_document_without_steps_is_refused(tmp_path, capsys):
    doc = json.loads((ROOT / "examples" / "sglang_overcommit_default_ratio.json").read_text())
    doc["steps"] = []
    one_line_error(capsys, "explain", write(tmp_path, doc), "--format", "text", "--no-validate",
                   needles=("'steps' is an empty list",))


@pytest.mark.parametrize("command", [["explain", "--format", "svg"], ["replay"]])
def test_a_counterexample_asking_for_the_most_steps_replays_only_to_its_violation(
        tmp_path, capsys, command):
    """A stored workload edited to MAX_STEPS steps: the steps past the violation decide
    nothing, so they are not simulated (the survey found explain taking over a minute)."""
    path = ROOT / "counterexamples" / "mistralrs" / "no_spurious_preemption__mr_v090_tiny.itf.json"
    doc = json.loads(path.read_text())
    doc["#meta"]["workload"]["steps"] = MAX_STEPS
    edited = write(tmp_path, doc, "t.itf.json")
    start = time.monotonic()
    code, out, err = run(capsys, command[0], edited, *command[1:])
    assert code == 0 and "Traceback" not in err
    assert time.monotonic() - start < 10
