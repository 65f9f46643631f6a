"""`batchproof worst` (GitHub issue 18 item 4): the largest value of a metric within the
bounds, a minimal witness for it, and the bound that no run exceeds it, by BMC and the
explorer (checker/methods/worst.py, checker/cli/worst.py, docs/queries.md)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.methods import worst
from checker.methods.jobs import Job, JobResult, run
from checker.methods.replay import replay
from checker.methods.verdict import HOLDS, UNKNOWN, VIOLATED, Verdict
from properties.manifest import load, with_bounds

SMALL = ["--manifest-config", "tiny_fcfs", "--requests", "2", "--depth", "4", "--timeout", "60"]


def small():
    return with_bounds(load().configs["tiny_fcfs"], slots=2, depth=4)


def cli(capsys, *argv):
    try:
        code = main(["worst", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def answer():
    return worst.search(worst.METRICS["starvation_steps"], small(), 60.0, "scan")


def test_worst_starvation_is_what_a_hand_loop_over_check_finds(answer):
    nc = small()
    hand = 0
    for k in range(1, 10):  # `batchproof check --property starvation:k=K` for K = 1, 2, ...
        res = run(Job(nc.engine, "starvation", (("k", k),), nc, None, 60.0))
        if res.verdict.verdict != VIOLATED:
            assert res.verdict.verdict == HOLDS and res.verdict.depth == 4
            break
        hand = k
    assert answer.status == worst.DECIDED
    assert answer.value == hand == 3
    assert answer.bound_bmc.verdict.label == answer.bound_explore.verdict.label == "HOLDS(4)"
    assert answer.witness_explore.verdict.verdict == VIOLATED
    assert answer.witness_explore.verdict.depth == answer.witness.verdict.depth


def test_the_witness_replays_on_the_reference(answer):
    cex = answer.witness.counterexample
    assert cex.params == (("k", 3),) and cex.method == "bmc"
    replayed = replay(cex)  # raises DivergenceError if the reference does not fail there
    assert len(replayed.records) >= cex.violated_at


def test_binary_search_finds_the_same_value(answer):
    res = worst.search(worst.METRICS["starvation_steps"], small(), 60.0, "binary",
                       confirm=False)
    assert (res.status, res.value) == (worst.DECIDED, answer.value)


def test_json_has_the_documented_fields(capsys, tmp_path):
    code, out, err = cli(capsys, "--metric", "starvation_steps", *SMALL, "--json", "--confirm",
                         "--out", str(tmp_path))
    assert code == 0, err
    doc = json.loads(out)
    assert {"schema", "metric", "engine", "config", "bounds", "status", "value", "at_least",
            "reason", "depth_reached", "property", "witness", "bound", "strategy", "rungs",
            "seconds", "exit"} <= set(doc)
    assert (doc["metric"], doc["status"], doc["value"], doc["exit"]) == \
        ("starvation_steps", "decided", 3, 0)
    assert doc["bounds"]["slots"] == 2 and doc["bounds"]["depth"] == 4
    assert doc["witness"]["params"] == {"k": 3}
    assert doc["witness"]["bmc"] == doc["witness"]["explore"] == "VIOLATED"
    assert doc["bound"] == {"params": {"k": 4}, "bmc": "HOLDS(4)", "explore": "HOLDS(4)"}
    assert "VIOLATED at step" in doc["witness"]["timeline"]
    assert Path(doc["witness"]["counterexample"]).is_file()


def test_the_explore_ladder_is_not_asked_of_bmc_unless_confirm_is_given(capsys, tmp_path):
    code, out, err = cli(capsys, "--metric", "starvation_steps", *SMALL, "--json",
                         "--out", str(tmp_path))
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["status"], doc["value"], doc["strategy"]) == ("decided", 3, "explore")
    assert doc["witness"]["bmc"] is None and doc["witness"]["explore"] == "VIOLATED"
    assert doc["bound"] == {"params": {"k": 4}, "bmc": None, "explore": "HOLDS(4)"}
    assert {r["method"] for r in doc["rungs"]} == {"array"}  # no arrival window: no unbounded
    assert Path(doc["witness"]["counterexample"]).is_file()


def test_text_names_the_value_the_witness_and_the_bound(capsys, tmp_path):
    code, out, err = cli(capsys, "--metric", "starvation_steps", "--manifest-config", "tiny_fcfs",
                         "--requests", "2", "--depth", "2", "--out", str(tmp_path))
    assert code == 0, err
    assert out.startswith("worst starvation_steps = 2 within bounds: 2 requests, depth 2")
    assert "bound: starvation k=3 HOLDS(2) by explore (exhaustive within the bounds; " \
        "--confirm has BMC ask it too)" in out
    assert "the ladder reached the depth" in out  # within depth 2 no window of 3 fits
    assert "v violated here" in out  # check's timeline
    code, out, err = cli(capsys, "--metric", "starvation_steps", "--manifest-config", "tiny_fcfs",
                         "--requests", "2", "--depth", "2", "--out", str(tmp_path), "--confirm")
    assert code == 0, err
    assert "bound: starvation k=3 HOLDS(2) by bmc and explore" in out
    assert "witness: starvation k=2 VIOLATED by bmc and explore" in out


def test_the_witness_is_written_under_out_as_check_names_it_and_the_path_exists(
        capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out is ./batchproof-out/
    code, out, err = cli(capsys, "--metric", "starvation_steps", "--manifest-config", "tiny_fcfs",
                         "--requests", "2", "--depth", "2")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("witness file: "))
    path = Path(line.split()[2])
    assert path.parent == Path("batchproof-out") and path.is_file()
    assert path.with_name(path.name.replace(".itf.json", ".txt")).is_file()
    # The same name `check` gives the counterexample of the witness's rung.
    assert path.name.startswith("vllm-v1__starvation__k=2__")
    code, out, err = main_check(capsys, "--property", "starvation:k=2", "--manifest-config",
                                "tiny_fcfs", "--requests", "2", "--depth", "2", "--jobs", "1",
                                "-q")
    assert f"batchproof-out/{path.name}" in out, out
    code, out, err = cli(capsys, "--metric", "starvation_steps", "--manifest-config", "tiny_fcfs",
                         "--out", "counterexamples/x")
    assert code == 2 and "manifest's corpus" in err, err


def main_check(capsys, *argv):
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_bad_metric_is_one_line_exit_2(capsys):
    code, out, err = cli(capsys, "--metric", "latency")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    code, out, err = cli(capsys, "--metric", "preemptions", "--manifest-config", "nope")
    assert code == 2 and err.count("\n") == 1 and "unknown config" in err, err


# --- ranges and disagreements, on a stand-in job function (no solver) ---------------------


def fake(table):
    """A job function answering (param, method) -> (verdict, depth) from `table`."""
    def check(job: Job) -> JobResult:
        value = dict(job.params)["k"]
        verdict, depth = table.get((value, job.method), table.get(value, (HOLDS, 4)))
        return JobResult(Verdict(job.engine, job.property, job.config.name, job.method,
                                 verdict, depth, 0.0, params=job.params))
    return check


def fake_many(table):
    """The array explorer's stand-in: every job by `fake(table)`, no closed state graph."""
    check = fake(table)
    return lambda jobs: ([check(j) for j in jobs], None)


def test_an_unknown_rung_leaves_a_range():
    res = worst.search(worst.METRICS["starvation_steps"], small(), 1.0, "scan",
                       checker=fake({1: (VIOLATED, 1), 2: (UNKNOWN, 2)}), many=fake_many({}))
    assert (res.status, res.at_least, res.value) == (worst.UNDECIDED, 1, None)
    assert "starvation k=2: UNKNOWN" in res.reason
    assert worst.METRICS["starvation_steps"].params(2) == (("k", 2),)


def test_holds_to_a_smaller_depth_leaves_a_range():
    res = worst.search(worst.METRICS["starvation_steps"], small(), 1.0, "scan",
                       checker=fake({1: (VIOLATED, 1), 2: (HOLDS, 3)}), many=fake_many({}))
    assert res.status == worst.UNDECIDED and "only up to depth 3 of 4" in res.reason


def test_the_explorer_contradicting_bmc_is_a_disagreement():
    table = {1: (VIOLATED, 1), (2, "explore"): (VIOLATED, 2)}
    res = worst.search(worst.METRICS["starvation_steps"], small(), 1.0, "scan",
                       checker=fake(table), many=fake_many(table))
    assert res.status == worst.DISAGREE and res.reason.startswith("methods disagree")


def test_preemptions_count_one_more_than_the_rung_parameter():
    m = worst.METRICS["preemptions"]
    assert m.params(1) == (("m", 0),) and m.rung(2) == "repeated_preemption m=1"
    res = worst.search(replace(m, param="k"), small(), 1.0, "scan",
                       checker=fake({0: (VIOLATED, 3)}), many=fake_many({0: (VIOLATED, 3)}))
    assert (res.status, res.value) == (worst.DECIDED, 1)


# --- the explore ladder: every rung in one array search, BMC at both ends -----------------


@pytest.fixture(scope="module")
def explored_answer():
    return worst.search(worst.METRICS["starvation_steps"], small(), 60.0, "explore",
                        confirm=True)


def test_the_explore_ladder_finds_the_scans_answer_with_the_same_witness(answer,
                                                                          explored_answer):
    res = explored_answer
    assert (res.status, res.value, res.strategy, res.explorer) == \
        (worst.DECIDED, answer.value, "explore", worst.ARRAY)
    # One array search answered every rung 1..depth+1; then BMC asked both ends.
    assert [(r.value, r.method) for r in res.rungs] == \
        [(v, "array") for v in range(1, 6)] + [(4, "bmc"), (3, "bmc")]
    assert {r.search for r in res.rungs if r.method == "array"} == {1}
    # BMC confirmed the array's witness as its least counterexample (confirm_least), and
    # it is the one BMC's own search and minimisation found (the scan's).
    assert res.witness.verdict.method == "bmc" and "confirmed" in res.witness.verdict.detail
    assert res.witness.counterexample.workload == answer.witness.counterexample.workload
    assert res.witness_explore.counterexample.workload == res.witness.counterexample.workload
    assert res.bound_bmc.verdict.label == res.bound_explore.verdict.label == "HOLDS(4)"
    replay(res.witness_explore.counterexample)  # the array's witness, on the reference


def test_confirm_least_runs_bmcs_own_search_when_the_witness_is_not_the_least(
        explored_answer):
    found = explored_answer.witness_explore
    job = Job("vllm-v1", "starvation", (("k", 3),), small(), None, 60.0, method="bmc")
    ok = worst.confirm_least(job, found, fallback=lambda j: pytest.fail("not least?"))
    assert ok.verdict.label == "VIOLATED" and ok.verdict.depth == found.verdict.depth
    w = found.counterexample.workload
    bigger = replace(w, requests=(replace(w.requests[0],
                                          max_tokens=w.requests[0].max_tokens + 1),
                                  *w.requests[1:]))
    other = replace(found, counterexample=replace(found.counterexample, workload=bigger))
    sentinel = JobResult(replace(ok.verdict, detail="bmc's own"))
    assert worst.confirm_least(job, other, fallback=lambda j: sentinel) is sentinel


def test_auto_explores_where_the_array_explorer_applies_and_scans_elsewhere():
    nc = small()
    assert worst.array_reason(nc) is None
    cached = load().configs["tiny_spec_eagle"]  # speculative decoding: not the array's
    assert "speculative decoding" in worst.array_reason(cached)
    res = worst.search(worst.METRICS["starvation_steps"], with_bounds(cached, depth=4), 1.0,
                       checker=fake({1: (VIOLATED, 1)}))
    assert (res.status, res.value, res.strategy, res.explorer) == \
        (worst.DECIDED, 1, "scan", worst.REFERENCE)
    assert "speculative decoding" in res.explorer_note
    with pytest.raises(ValueError, match="needs the array explorer"):
        worst.search(worst.METRICS["starvation_steps"], cached, 1.0, "explore",
                     checker=fake({}))


def test_explore_ladder_bmc_contradicting_the_array_is_a_disagreement():
    table = {1: (VIOLATED, 1), 2: (VIOLATED, 2), (3, "bmc"): (VIOLATED, 3)}
    res = worst.search(worst.METRICS["starvation_steps"], small(), 1.0, "explore",
                       confirm=True, checker=fake(table), many=fake_many(table))
    assert res.status == worst.DISAGREE and res.reason.startswith("methods disagree")


def test_explore_ladder_bmc_undecided_at_the_bound_leaves_a_range():
    table = {1: (VIOLATED, 1), 2: (VIOLATED, 2), (3, "bmc"): (UNKNOWN, 3)}
    res = worst.search(worst.METRICS["starvation_steps"], small(), 1.0, "explore",
                       confirm=True, checker=fake(table), many=fake_many(table))
    assert (res.status, res.at_least, res.value) == (worst.UNDECIDED, 2, None)
    assert "bmc did not confirm starvation k=3: UNKNOWN" in res.reason


def test_explore_ladder_rungs_out_of_order_are_undecided():
    table = {1: (VIOLATED, 1), 3: (VIOLATED, 3)}
    res = worst.search(worst.METRICS["starvation_steps"], small(), 1.0, "explore",
                       checker=fake(table), many=fake_many(table))
    assert res.status == worst.UNDECIDED and "not monotone" in res.reason


@pytest.mark.parametrize("flag", [["--arrival-window", "1"], ["--no-eos"]])
def test_the_array_explorer_searches_the_window_and_no_eos_bounds_as_bmc(capsys, tmp_path,
                                                                          flag):
    # The explore ladder asks BMC at both ends: a decided answer is both methods agreeing
    # on the witness (the same least run) and the bound, on the restricted environment.
    code, out, err = cli(capsys, "--metric", "starvation_steps", *SMALL, *flag, "--json",
                         "--confirm", "--out", str(tmp_path))
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["status"], doc["strategy"], doc["explorer"]) == ("decided", "explore", "array")
    assert doc["witness"]["bmc"] == doc["witness"]["explore"] == "VIOLATED"
    assert doc["bound"]["bmc"] == doc["bound"]["explore"] == "HOLDS(4)"
    # With an arrival window the bound's rung is also searched with no depth limit.
    assert (doc["closed_at"] is not None) == ("--arrival-window" in flag)
    assert doc["beyond"] is None


# --- issue 18 item 4's reference figure -----------------------------------------------------

FIGURE = ["--max-num-batched-tokens", "8", "--max-num-seqs", "4", "--block-size", "4",
          "--num-gpu-blocks-override", "6", "--max-model-len", "16",
          "--no-enable-prefix-caching", "--no-async-scheduling", "--requests", "3",
          "--max-prompt-len", "8", "--max-tokens", "4", "--arrival-window", "3",
          "--depth", "6"]


@pytest.mark.slow  # about 30 s of CPU: the array search, BMC's bound at depth 6, its witness
def test_the_reference_figure_starves_5_steps_and_never_6(capsys, tmp_path):
    # SPIN's answer on the same setting (docs/bench_scale.md): k=5 violated, k=6 holds.
    code, out, err = cli(capsys, "--metric", "starvation_steps", *FIGURE, "--json",
                         "--confirm", "--out", str(tmp_path))
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["status"], doc["value"], doc["strategy"], doc["explorer"]) == \
        ("decided", 5, "explore", "array")
    assert doc["bounds"]["slots"] == 3 and doc["bounds"]["arrival_window"] == 3
    assert doc["witness"]["params"] == {"k": 5} and doc["witness"]["violated_at"] == 5
    assert doc["witness"]["bmc"] == doc["witness"]["explore"] == "VIOLATED"
    assert doc["bound"] == {"params": {"k": 6}, "bmc": "HOLDS(6)", "explore": "HOLDS(6)"}
    assert not doc["depth_reached"]  # depth 6: the bound's window of 6 fits
    # And at every length, as SPIN's exhaustive search says: the array explorer's state
    # graph of k=6 closes (arrivals in steps 1..3), with no run violating it.
    assert doc["closed_at"] is not None and doc["beyond"] is None
    assert Path(doc["witness"]["counterexample"]).is_file()


def test_explore_ladder_stopped_by_a_limit_names_the_rung_above_the_last_violated():
    table = {1: (VIOLATED, 1), 2: (UNKNOWN, 1), 3: (UNKNOWN, 1)}
    res = worst.search(worst.METRICS["starvation_steps"], small(), 1.0, "explore",
                       checker=fake(table), many=fake_many(table))
    assert (res.status, res.at_least) == (worst.UNDECIDED, 1)
    assert res.reason.startswith("starvation k=2: UNKNOWN")


def test_a_bound_violated_past_the_depth_is_said_beyond_the_depth(capsys):
    from checker.cli import worst as cli_worst

    table = {1: (VIOLATED, 1), 2: (VIOLATED, 2)}
    longer = fake({3: (VIOLATED, 7)})
    nc = with_bounds(small(), arrival_window=2)
    res = worst.search(worst.METRICS["starvation_steps"], nc, 1.0, "explore",
                       checker=fake(table), many=fake_many(table),
                       unbounded=lambda job: (longer(job), None))
    assert (res.status, res.value, res.closed_at) == (worst.DECIDED, 2, None)
    assert res.beyond.verdict.depth == 7 and res.rungs[-1].method == worst.UNBOUNDED
    text = cli_worst.text(replace(res, witness=None))  # a stand-in witness has no timeline
    assert "beyond the depth: starvation k=3 is VIOLATED at step 7" in text
