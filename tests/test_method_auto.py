"""`check --method auto`, the default: the unbounded proofs first, then the bounded search
the manifest config records as the faster one (bench/suite_methods.py)."""

import dataclasses
import json

import pytest

from checker.cli import check
from checker.cli.main import main
from checker.methods import jobs
from checker.methods.jobs import Job, run_batch
from model.core.errors import InputError
from properties import manifest
from properties.manifest import load, with_bounds


def _check_json(capsys, *argv):
    code = main(["check", "--json", "--quiet", *argv])
    return code, json.loads(capsys.readouterr().out)["verdicts"]


def _entry_job(prop: str, config: str, search: str) -> Job:
    m = load()
    (e,) = [e for e in m.entries if e.property == prop and e.config == config
            and e.suite == "default"]
    return Job(e.engine, e.property, e.params, with_bounds(m.configs[config], **dict(e.bounds)),
               e.expected, 120.0, method="auto", search=search)


def test_the_default_searches_a_config_by_its_recorded_method_with_bmcs_verdicts(capsys):
    # mr_tiny: no proof applies (mistral.rs has no invariant or theorem for these), so
    # every row is the bounded search's. (vLLM's tiny_spec_eagle, also recorded as
    # explore's, has every row PROVED by k-induction since its step ranges over drafts.)
    assert load().configs["mr_tiny"].bounded_method == "explore"
    engine = ("--engine", "mistralrs", "--manifest-config", "mr_tiny", "--property",
              "budget_respected", "--property", "starvation")  # one HOLDS, one VIOLATED
    code, auto = _check_json(capsys, *engine)
    assert code == 0 and auto
    assert {v["method"] for v in auto} == {"explore"}
    for v in auto:
        assert jobs.SEARCH_NOTE in v["detail"], v["detail"]
    code, by_bmc = _check_json(capsys, *engine, "--method", "bmc")
    assert code == 0 and {v["method"] for v in by_bmc} == {"bmc"}
    assert [(v["property"], v["label"], v["depth"]) for v in auto] == \
        [(v["property"], v["label"], v["depth"]) for v in by_bmc]


def test_a_proof_goes_first_and_a_violation_found_by_the_explorer_is_bmcs_least_one():
    proved, violated = run_batch([_entry_job("budget_respected", "tiny_fcfs", "explore"),
                                  _entry_job("starvation", "tiny_fcfs", "explore")])
    assert (proved.verdict.method, proved.verdict.verdict) == ("theorem", "PROVED")
    assert (violated.verdict.method, violated.verdict.verdict) == ("explore", "VIOLATED")
    (by_bmc,) = run_batch([_entry_job("starvation", "tiny_fcfs", "bmc")])
    assert by_bmc.verdict.method == "bmc"
    assert violated.counterexample.workload == by_bmc.counterexample.workload
    assert violated.verdict.depth == by_bmc.verdict.depth


def test_a_question_is_searched_by_bmc_even_on_a_config_that_records_the_explorer(capsys):
    # No manifest entry asks starvation on tiny_spec_eagle: a question, whose cost nobody
    # measured, goes the way every question goes.
    code, (v,) = _check_json(capsys, "--manifest-config", "tiny_spec_eagle",
                             "--property", "starvation:k=2", "--depth", "3")
    assert v["method"] == "bmc" and v["expected"] is None


# docs/bench_scale.md's family F: 3 requests of 32 kinds, arrivals in steps 1..3.
FAMILY_F = ["--no-enable-prefix-caching", "--no-async-scheduling",
            "--max-num-batched-tokens", "8", "--max-num-seqs", "4", "--block-size", "4",
            "--num-gpu-blocks-override", "6", "--max-model-len", "16", "--max-prompt-len", "8",
            "--max-tokens", "4", "--arrival-window", "3", "--depth", "5"]


def test_a_question_the_array_explorer_searches_exactly_goes_to_it(capsys, tmp_path):
    code, (auto,) = _check_json(capsys, "--property", "starvation:k=3", *FAMILY_F,
                                "--requests", "3", "--out", str(tmp_path))
    assert (auto["method"], auto["verdict"], auto["depth"]) == ("explore", "VIOLATED", 3)
    # (The explorer and BMC give the same verdicts, depths and least counterexamples:
    # `check --method both` on the manifest, tests/test_array_explore.py.)


def test_a_small_question_or_the_reference_explorer_asked_for_keeps_bmc():
    questions = {n: with_bounds(load().configs["tiny_fcfs"], slots=n, depth=5,
                                max_prompt_len=8, max_max_tokens=4, arrival_window=3)
                 for n in (2, 3)}
    assert check._search(None, questions[3], "auto") == "explore"
    # Too small to repay the array explorer's set-up: 2 requests.
    assert check._search(None, questions[2], "auto") == "bmc"
    assert check._search(None, questions[3], "reference") == "bmc"
    cached = with_bounds(load().configs["tiny_cached"], slots=3, depth=5)
    # the cache is the array's too, but its cold proofs take minutes: auto keeps BMC,
    # and --method explore (explorer_of) still picks the array explorer
    assert check._search(None, cached, "auto") == "bmc"
    assert jobs.array_unsupported(cached) is None
    spec = with_bounds(load().configs["tiny_spec_eagle"], slots=3, depth=5)
    assert check._search(None, spec, "auto") == "bmc"  # speculative decoding: not the array's


def test_a_bounded_method_other_than_bmc_or_explore_is_a_one_line_error(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[configs.c]\nconfig = {}\nbounded_method = "spin"\n')
    with pytest.raises(InputError, match="config 'c': bounded_method 'spin' is not one of "
                                         "bmc, explore"):
        manifest.load(path)


def test_bmc_alone_and_explore_alone_are_as_they_were(capsys):
    code, (v,) = _check_json(capsys, "--manifest-config", "tiny_spec_eagle", "--property",
                             "budget_respected", "--method", "explore")
    assert v["method"] == "explore" and jobs.SEARCH_NOTE not in v["detail"]


def test_an_entry_only_the_explorer_checks_is_run_by_the_explorer_under_auto():
    # An entry whose manifest methods leave out BMC is searched by the explorer, never
    # through proofs over rules it was not meant for, nor skipped.
    m = load()
    (e,) = [e for e in m.entries if e.property == "never_finishes"
            and e.config == "v0_swap_chunked"]
    only = dataclasses.replace(e, methods=("explore",))
    assert check._checked_by(only, "auto") and check._job_method(only, "auto") == "explore"
    assert check._job_method(e, "auto") == "auto"
    assert not check._checked_by(only, "bmc")


def test_a_method_that_checks_none_of_the_selected_entries_is_a_one_line_error(capsys):
    # budget_family's entries are BMC's alone (2080 configs, too many to enumerate).
    code = main(["check", "--property", "budget_respected", "--manifest-config",
                 "budget_family", "--method", "explore"])
    err = capsys.readouterr().err
    assert code == 2 and "checked by bmc" in err and len(err.splitlines()) == 1
