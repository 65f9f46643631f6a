"""`batchproof check` as a question (GitHub issue 18, items 1, 2, 3 and 6): any property on
any engine it applies to, parameters and bounds on the command line and in the result,
answers written under --out (never into counterexamples/), and simulate's queues.
docs/queries.md is the user's page for all of it."""

import json
import re
from pathlib import Path

import jsonschema
import pytest
import test_bad_input as cli

from checker.cli import check
from checker.cli.main import main
from checker.show import text as render
from properties.manifest import load

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "schema" / "check.schema.json").read_text())
GROUP_A = ROOT / "examples" / "seed_group_a.json"
# A small vLLM deployment, read as `vllm serve` reads it (prefix caching and async on).
SMALL_VLLM = ["--max-num-seqs", "2", "--max-num-batched-tokens", "8", "--max-model-len", "16",
              "--num-gpu-blocks", "6", "--block-size", "4"]
QUICK = ["--jobs", "1", "-q", "--timeout", "30"]


def run(capsys, *argv):
    """`batchproof check ARGV`: (exit code, stdout, stderr)."""
    return cli.run(capsys, "check", *argv)


def one_line_error(capsys, *argv):
    """`batchproof check ARGV` fails with exit 2 and one line on stderr (test_bad_input)."""
    return cli.one_line_error(capsys, "check", *argv)


def corpus() -> set[Path]:
    return set((ROOT / "counterexamples").rglob("*"))


# --- A. any property, any engine ------------------------------------------------------------


def test_sglang_starvation_has_no_manifest_entry_yet_is_answered_with_its_bounds(
        capsys, tmp_path):
    code, out, _ = run(capsys, "--engine", "sglang", "--property", "starvation",
                       "--requests", "2", "--depth", "3", "--out", str(tmp_path), *QUICK)
    assert code in (0, 1, 3)
    row = next(line for line in out.splitlines() if line.startswith("starvation"))
    # No entry: the engine's default config (its manifest's first), the parameter the
    # manifest gives the property elsewhere (k=3), no expectation.
    assert row.split()[:4] == ["starvation", "k=3", "sg_tiny", row.split()[3]]
    assert " - " in row
    assert ("bounds: 2 requests, depth 3, prompts <= 5, max_tokens <= 5, arrivals in steps "
            "1..3") in out
    assert "1 answered" in out


def test_repeated_preemption_without_any_entry_runs_on_the_default_config(capsys, tmp_path):
    code, out, _ = run(capsys, "--property", "repeated_preemption", "--requests", "2",
                       "--depth", "3", "--out", str(tmp_path), *QUICK)
    assert code in (0, 1, 3)
    # m comes from `batchproof config`'s default for the hazard (1 preemption).
    assert re.search(r"^repeated_preemption m=1\s+tiny_fcfs\s+(HOLDS\(3\)|VIOLATED|UNKNOWN)",
                     out, re.M)
    assert "bounds: 2 requests, depth 3" in out


def test_a_custom_config_runs_a_property_no_manifest_entry_names_for_the_engine(capsys,
                                                                                  tmp_path):
    code, out, _ = run(capsys, *SMALL_VLLM, "--property", "finished_slot_released",
                       "--requests", "2", "--depth", "2", "--out", str(tmp_path), *QUICK)
    assert code == 0  # continuous batching frees a finished request's slot at once
    # proved for every depth over the counted prefix cache (the serve defaults are on)
    assert re.search(r"^finished_slot_released\s+custom\s+PROVED\s+-\s+induction", out, re.M)
    code, out, _ = run(capsys, "--engine", "sglang", "--config-file",
                       str(ROOT / "examples" / "sglang_chunked_stall.json"), "--property",
                       "no_spurious_preemption", "--requests", "1", "--depth", "2",
                       "--out", str(tmp_path), *QUICK)
    assert code in (0, 1, 3)
    assert re.search(r"^no_spurious_preemption\s+custom\s", out, re.M)


def test_a_property_that_does_not_apply_is_one_line_listing_the_ones_that_do(capsys):
    err = one_line_error(capsys, "--property", "prompt_decode_not_mixed", *QUICK)
    assert "prompt_decode_not_mixed does not apply to vllm-v1" in err
    assert "step_kind" in err  # why: vLLM's rules do not classify steps
    applying = err.split("properties that apply to vllm-v1: ")[1].strip().split(", ")
    assert {"budget_respected", "starvation", "repeated_preemption"} <= set(applying)
    assert "prompt_decode_not_mixed" not in applying
    err = one_line_error(capsys, "--engine", "sglang", "--property", "head_of_line_blocking",
                         *QUICK)
    assert "max_num_active_reqs" in err and "starvation" in err


def test_applicability_is_read_off_the_engines_observables():
    configs = load().configs
    vllm = check.applicability("vllm-v1", configs["tiny_fcfs"])
    mistral = check.applicability("mistralrs", configs["mr_tiny"])
    sglang = check.applicability("sglang", configs["sg_tiny"])
    for name in ("prompt_decode_not_mixed", "prefill_due_within", "fcfs_preemption"):
        assert "step_kind" in vllm[name] and mistral[name] is None
    assert sglang["prefill_due_within"] is None  # SGLang sets step kinds too
    assert "max_num_active_reqs" in sglang["unchunked_prefill_blocked"]
    # Every manifest entry is of a property that applies to its engine.
    manifest = load()
    for e in manifest.entries:
        assert check.applicability(e.engine, manifest.configs[e.config])[e.property] is None, e


def test_a_question_for_every_engine_needs_one_engine(capsys):
    err = one_line_error(capsys, "--engine", "all", "--property", "repeated_preemption")
    assert "--engine NAME" in err


# --- B. parameters and bounds ---------------------------------------------------------------


def test_a_parameter_changes_the_answer(capsys, tmp_path):
    base = ["--engine", "sglang", "--requests", "2", "--depth", "3", "--out", str(tmp_path),
            *QUICK]
    code, out, _ = run(capsys, "--property", "starvation", "--param", "k=2", *base)
    assert code == 1 and re.search(r"^starvation k=2\s+sg_tiny\s+VIOLATED", out, re.M)
    code, out, _ = run(capsys, "--property", "starvation:k=10", *base)
    assert code == 0 and re.search(r"^starvation k=10\s+sg_tiny\s+HOLDS\(3\)", out, re.M)
    # A window longer than the run cannot fail, and the output says so.
    assert "reads windows of 10 steps, longer than depth 3" in out


def test_a_parameter_equal_to_the_manifests_is_the_manifest_entry(capsys):
    code, out, _ = run(capsys, "--property", "head_of_line:k=2", *QUICK)
    assert code == 0
    assert re.search(r"^head_of_line k=2\s+tiny_fcfs\s+VIOLATED\s+VIOLATED", out, re.M)


@pytest.mark.parametrize("argv,needle", [
    (["--property", "starvation", "--param", "m=1"], "no property checked takes it"),
    (["--property", "starvation:m=1"], "starvation has no parameter 'm'; it takes k"),
    (["--property", "budget_respected:k=1"], "it takes none"),
    (["--property", "starvation", "--param", "k=0"], "must be an integer >= 1"),
    (["--property", "starvation", "--param", "k=ten"], "parameter k"),
    (["--property", "starvation", "--param", "k=10000"], "at most 1000"),
    (["--property", "starvation", "--param", "k"], "is not NAME=INTEGER"),
    (["--property", "starvation", "--param", "k=2", "--param", "k=3"], "given twice"),
    (["--param", "k=3"], "add --property NAME"),
])
def test_a_bad_parameter_is_one_line_exit_2(argv, needle, capsys):
    assert needle in one_line_error(capsys, *argv, *QUICK)


@pytest.mark.parametrize("argv,needle", [
    (["--requests", "17"], "--requests"),
    (["--max-prompt-len", "0"], "--max-prompt-len"),
    (["--max-tokens", "100001"], "--max-tokens"),
    (["--prefix-groups", "17"], "--prefix-groups"),
    (["--engine", "sglang", "--property", "starvation", "--method", "explore",
      "--max-prompt-len", "1000", "--max-tokens", "1000"], "request kinds per arrival"),
    (["--property", "starvation", "--prefix-groups", "1"], "does not have on"),
    (["--engine", "sglang", "--property", "starvation", "--prefix-groups", "1"],
     "does not have on"),
])
def test_a_size_a_method_or_engine_cannot_take_is_one_line_before_running(argv, needle,
                                                                          capsys):
    assert needle in one_line_error(capsys, *argv, *QUICK)


def test_slots_is_an_alias_of_requests():
    import argparse

    parser = argparse.ArgumentParser()
    check.add_arguments(parser)
    assert parser.parse_args(["--slots", "2"]).slots == parser.parse_args(
        ["--requests", "2"]).slots == 2


def test_help_names_every_query_flag(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    for flag in ("--property NAME[:k=V,...]", "--param NAME=V", "--requests N", "--depth",
                 "--max-prompt-len L", "--max-tokens T", "--prefix-groups G",
                 "--max-cached-prefix-len C", "--out DIR", "--arrival-window A", "--no-eos",
                 "--manifest-config NAME", "--config FILE.yaml", "--gpu-memory-utilization F",
                 "--device NAME", "vllm serve MODEL"):
        assert flag in out, flag


def test_json_gives_each_verdict_its_bounds_and_validates(capsys, tmp_path):
    code, out, _ = run(capsys, "--engine", "sglang", "--property", "starvation:k=2",
                       "--requests", "2", "--depth", "3", "--max-tokens", "2", "--json",
                       "--out", str(tmp_path), *QUICK)
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    assert code == doc["summary"]["exit_code"] == 1
    (row,) = doc["verdicts"]
    assert row["params"] == {"k": 2}
    assert row["bounds"] == {"slots": 2, "depth": 3, "max_prompt_len": 5, "max_max_tokens": 2,
                             "max_priority": 1, "max_cached_prefix_len": 0,
                             "prefix_groups": 0, "arrival_window": 3, "no_eos": False,
                             "kv_load_steps": 0}


def test_prefix_groups_bound_a_cache_config_and_the_bounds_are_printed_even_unanswered(
        capsys, tmp_path):
    code, out, _ = run(capsys, *SMALL_VLLM, "--property", "kv_blocks_conserved",
                       "--requests", "2", "--depth", "2", "--prefix-groups", "1",
                       "--out", str(tmp_path), "--jobs", "1", "-q", "--timeout", "0.3")
    assert code in (0, 3)
    assert "bounds: 2 requests, depth 2, prompts <= 8, max_tokens <= 6, arrivals in steps " \
           "1..2, prefix groups <= 1" in out


def test_manifest_runs_print_the_bounds_of_each_config(capsys):
    code, out, _ = run(capsys, "--engine", "static", *QUICK)
    assert code == 0
    assert "bounds of st_tiny: 2 requests, depth 5" in out
    assert "bounds of st_no_flush: 1 request, depth 4" in out


# --- C. where answers go --------------------------------------------------------------------


def test_a_counterexample_goes_under_out_and_never_into_the_corpus(capsys, tmp_path):
    before = corpus()
    out_dir = tmp_path / "answers"  # created on demand
    argv = ["--engine", "sglang", "--property", "starvation:k=2", "--requests", "2",
            "--depth", "3", "--out", str(out_dir), *QUICK]
    code, out, _ = run(capsys, *argv)
    assert code == 1
    files = sorted(p.name for p in out_dir.iterdir())
    assert len(files) == 2 and re.fullmatch(
        r"sglang__starvation__k=2__[0-9a-f]{8}\.itf\.json", files[0])
    assert files[1] == files[0].replace(".itf.json", ".txt")
    printed = re.search(r"(\S+\.itf\.json)", out).group(1)
    assert Path(printed) == out_dir / files[0] and Path(printed).exists()
    assert "VIOLATED at step 2" in (out_dir / files[1]).read_text()
    assert corpus() == before
    # The name is a function of the question: asked again, the same file; other bounds,
    # another hash.
    run(capsys, *argv)
    assert sorted(p.name for p in out_dir.iterdir()) == files
    run(capsys, *argv[:-len(QUICK)], "--max-tokens", "2", *QUICK)
    assert len(list(out_dir.iterdir())) == 4
    assert corpus() == before


def test_the_default_out_is_batchproof_out_in_the_working_folder(capsys, tmp_path,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "--engine", "sglang", "--property", "starvation:k=2",
                       "--requests", "2", "--depth", "3", *QUICK)
    assert code == 1
    (itf,) = (tmp_path / "batchproof-out").glob("*.itf.json")
    assert f"batchproof-out/{itf.name}" in out
    assert not (tmp_path / "counterexamples").exists()


def test_every_printed_counterexample_path_exists(capsys, tmp_path):
    code, out, _ = run(capsys, "--engine", "sglang", "--property", "starvation:k=2",
                       "--requests", "2", "--depth", "2", "--method", "both",
                       "--out", str(tmp_path), *QUICK)
    assert code == 1
    # Both methods find it; the one file is named on the row whose counterexample it is.
    paths = re.findall(r"(\S+\.itf\.json)", out)
    assert len(paths) == 1 and all(Path(p).exists() for p in paths)
    assert len(list(tmp_path.glob("*.itf.json"))) == 1


@pytest.mark.parametrize("where", ["counterexamples", "counterexamples/sglang", "file"])
def test_out_may_not_be_the_corpus_or_a_file(where, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    target = str(tmp_path / "f") if where == "file" else where
    if where == "file":
        (tmp_path / "f").write_text("")
    err = one_line_error(capsys, "--engine", "sglang", "--property", "starvation",
                         "--out", target, *QUICK)
    assert "--out" in err


# --- D. simulate shows the queues -----------------------------------------------------------


def test_simulate_shows_running_and_waiting_in_order_truncated_with_a_count(capsys,
                                                                          tmp_path):
    assert main(["simulate", str(GROUP_A)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("step"))
    assert header.split()[-2:] == ["running", "waiting"]
    step1 = next(line for line in lines if line.split()[:1] == ["1"])
    assert step1.endswith("d0 d1 d2 d3 d4 d5 +4  -")  # ten running, none waiting
    doc = {"config": {"max_num_batched_tokens": 4, "max_num_seqs": 1},
           "requests": [{"id": i, "prompt_len": 2, "max_tokens": 2} for i in "abc"],
           "steps": 2}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line[:4].strip() == "1"]
    assert re.search(r"\sa\s+b c$", rows[0])  # a runs; b then c wait, in queue order


def test_other_engines_simulate_tables_show_the_queues_too(capsys):
    assert main(["simulate", str(ROOT / "examples" / "sglang_chunked_stall.json")]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("step"))
    assert "running" in header.split() and "waiting" in header.split()


def test_a_queue_cell_counts_what_it_leaves_out():
    assert render.queue(()) == "-"
    assert render.queue(("a", "b")) == "a b"
    assert render.queue(tuple(f"r{i}" for i in range(9))) == "r0 r1 r2 r3 r4 r5 +3"


def test_a_time_limit_spent_before_bmc_is_stated_as_the_users_limit(capsys):
    # k-induction at 6 slots takes the whole limit; BMC then starts with nothing left, and
    # the verdict states the --timeout given, not what the induction left (a negative).
    # (resumed_recomputes_all: no theorem decides it before the induction.)
    code, out, _ = run(capsys, "--manifest-config", "tiny_fcfs", "--property",
                       "resumed_recomputes_all", "--requests", "6", "--timeout", "1", "--json")
    (row,) = json.loads(out)["verdicts"]
    assert code == 3 and row["verdict"] == "UNKNOWN"
    assert re.search(r"time limit of 1 s reached at depth \d", row["detail"]), row["detail"]
