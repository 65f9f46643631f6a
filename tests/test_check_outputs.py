"""What `batchproof check` hands to CI (issue 14): exit codes of `--method both` when a
method is inconclusive, the versioned `--json` (validated by its JSON Schema), `--junit`
(read back with junitparser), progress on a terminal only, output paths checked before any
job runs, and a pool that stops with its parent."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import jsonschema
import junitparser
import pytest

from checker.cli import check
from checker.cli.main import main
from checker.methods import agreement
from checker.methods.jobs import JobResult
from checker.methods.verdict import HOLDS, UNKNOWN, VIOLATED, Verdict
from checker.runner import pool, stops
from checker.show import junit
from checker.show.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "schema" / "check.schema.json").read_text())
STATIC = ["check", "--engine", "static", "--method", "both", "--jobs", "1"]
CEX = "counterexamples/baselines/{}__st_tiny.itf.json"


def validate(doc):
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


def perturb(monkeypatch, change):
    """Run the real jobs, then pass each result through `change(result)`."""
    real = pool.run_batch
    monkeypatch.setattr(pool, "run_batch", lambda jobs: [change(r) for r in real(jobs)])


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
        == {("custom", None, "answered")}
    assert doc["summary"]["answered"] == len(doc["verdicts"])


def test_json_of_a_violated_question_is_answered_and_exits_1(capsys, tmp_path):
    # No manifest expectation: the VIOLATED verdict is the answer (exit 1), never
    # "as_expected" (issue 18).
    code = main(["check", "--engine", "sglang", "--property", "starvation", "--requests",
                 "2", "--depth", "3", "--json", "--jobs", "1", "-q", "--out", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert code == 1 == doc["summary"]["exit_code"]
    assert [(r["verdict"], r["expected"], r["status"]) for r in doc["verdicts"]] \
        == [("VIOLATED", None, "answered")]
    assert (doc["summary"]["answered"], doc["summary"]["as_expected"]) == (1, 0)
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "verdicts": [{**doc["verdicts"][0], "status": "as_expected"}]})


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


# --- 3. --junit -----------------------------------------------------------------------------


def test_junit_has_one_testcase_per_check_and_the_right_results(monkeypatch, capsys,
                                                                tmp_path):
    perturb(monkeypatch, mixed)
    path = tmp_path / "verdicts.xml"
    assert main([*STATIC, "--junit", str(path)]) == 1
    capsys.readouterr()
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert [s.name for s in suites] == ["static"]
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (16, 2, 2, 1)
    cases = {c.name: c for c in suite}
    assert len(cases) == 16 and {c.classname for c in suite} == {"static"}
    assert "kv_blocks_conserved[st_tiny] (bmc)" in cases
    assert "never_finishes[st_no_flush] (explore)" in cases

    def result(name):
        (r,) = cases[name].result
        return r
    for method in ("bmc", "explore"):
        failure = result(f"finished_slot_released[st_tiny] ({method})")
        assert isinstance(failure, junitparser.Failure) and failure.type == "departure"
        assert failure.message.startswith("VIOLATED, expected HOLDS")
        assert failure.message.endswith(
            "counterexample " + CEX.format("finished_slot_released"))
        error = result(f"no_padded_compute[st_tiny] ({method})")
        assert isinstance(error, junitparser.Error) and error.type == "disagreement"
        assert error.message.startswith("bmc and explore disagree: no_padded_compute on "
                                        "st_tiny: bmc VIOLATED (depth 2), explore VIOLATED "
                                        "(depth 3)")
        assert CEX.format("no_padded_compute") in error.message
    skipped = result("starvation[st_tiny, k=3] (explore)")
    assert isinstance(skipped, junitparser.Skipped)
    assert skipped.message == "inconclusive: UNKNOWN (time limit); no counterexample"
    assert cases["starvation[st_tiny, k=3] (bmc)"].is_passed
    assert "unconfirmed" in cases["starvation[st_tiny, k=3] (bmc)"].system_out
    assert cases["starvation[st_tiny, k=3] (bmc)"].time >= 0


def test_junit_of_a_clean_run_passes_every_testcase(capsys, tmp_path):
    path = tmp_path / "v.xml"
    assert main(["check", "--engine", "static", "--jobs", "1", "--junit", str(path)]) == 0
    capsys.readouterr()
    (suite,) = junitparser.JUnitXml.fromfile(str(path))
    assert suite.tests == 8 and all(c.is_passed for c in suite)
    assert "counterexample " + CEX.format("starvation") in \
        {c.name: c for c in suite}["starvation[st_tiny, k=3] (bmc)"].system_out


def test_json_file_is_the_json_document_beside_the_table(capsys, tmp_path):
    path = tmp_path / "v.json"
    argv = ["check", "--engine", "static", "--jobs", "1"]
    assert main([*argv, "--json-file", str(path)]) == 0
    table = capsys.readouterr().out
    assert "8 checks, 8 as expected" in table
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads(path.read_text())

    def timeless(doc):  # the same checks, run twice: only the seconds differ
        rows = [{k: v for k, v in r.items() if k != "seconds"} for r in doc["verdicts"]]
        return rows, {k: v for k, v in doc["summary"].items() if k != "seconds"}

    assert timeless(written) == timeless(printed) and len(written["verdicts"]) == 8


def test_an_unwritable_json_file_is_refused_before_any_check(capsys, tmp_path):
    missing = tmp_path / "no" / "v.json"
    assert main(["check", "--engine", "static", "--json-file", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"batchproof: error: cannot write --json-file {missing}")


def test_junit_names_keep_parameters_apart():
    v = Verdict("mistralrs", "prefill_due_within", "mr_tiny", "bmc", HOLDS, 4, 0.0,
                params=(("k", 2),))
    assert junit.case_name(v) == "prefill_due_within[mr_tiny, k=2] (bmc)"
    assert junit.case_name(replace(v, params=())) == "prefill_due_within[mr_tiny] (bmc)"


# --- 4. progress ----------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_shows_done_total_the_batch_and_elapsed_time():
    out = Terminal()
    threads = threading.active_count()
    with Progress(5, out) as progress:
        assert progress.shown
        assert threading.active_count() == threads  # the pool forks after it: no thread
        drawn = len(out.getvalue())
        with progress.ticking(every_s=0.01):
            time.sleep(0.05)
        assert threading.active_count() == threads
        assert len(out.getvalue()) > drawn  # the elapsed time was redrawn meanwhile
        progress.running("vllm-v1 tiny_fcfs (3 checks)")
        progress.finished(3, "vllm-v1 tiny_fcfs (3 checks)")
        progress.running("sglang sg_tiny (2 checks)")
    text = out.getvalue()
    assert "check 3/5 jobs" in text
    assert "now: sglang sg_tiny (2 checks) · last: vllm-v1 tiny_fcfs (3 checks)" in text
    assert re.search(r"\| \d\d:\d\d", text)


@pytest.mark.parametrize("stream,show", [(io.StringIO(), True), (Terminal(), False)],
                         ids=["not a terminal", "quiet"])
def test_progress_is_silent_off_a_terminal_or_when_quiet(stream, show):
    with Progress(5, stream, show=show) as progress:
        progress.running("a")
        progress.finished(5, "a")
        progress.tick()
    assert not progress.shown and stream.getvalue() == ""


def test_progress_without_tqdm_is_silent(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` raises ImportError
    out = Terminal()
    with Progress(5, out) as progress:
        progress.finished(5, "a")
    assert not progress.shown and out.getvalue() == ""


@pytest.mark.parametrize("jobs", ["2", "1"], ids=["in the pool", "in this process"])
def test_check_reports_each_batch_on_a_terminal(jobs, monkeypatch, capsys):
    capsys.readouterr()
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["check", "--engine", "static", "--jobs", jobs]) == 0
    text = terminal.getvalue()
    assert "check 0/8 jobs" in text and "check 8/8 jobs" in text
    assert "now: static st_tiny (7 checks)" in text
    assert "last: static st_tiny (7 checks)" in text
    assert "last: static st_no_flush (1 checks)" in text
    assert "8 checks, 8 as expected" in capsys.readouterr().out


@pytest.mark.parametrize("quiet", [["--quiet"], []], ids=["quiet terminal", "ci log"])
def test_check_prints_no_progress_when_quiet_or_off_a_terminal(quiet, monkeypatch, capsys):
    if quiet:
        monkeypatch.setattr(sys, "stderr", Terminal())
    assert main([*STATIC, "--property", "starvation", *quiet]) == 0
    err = sys.stderr.getvalue() if quiet else capsys.readouterr().err
    assert err == ""


# --- 5. the pool stops with its parent ------------------------------------------------------


def _children(pid):
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out |= {int(c) for c in task.read_text().split()}
        except OSError:
            pass
    return out


def _alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # an unreaped zombie computes nothing


def _wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _start_check_with_workers():
    """`check --engine all --method both` (minutes of work) once its two workers run."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "checker.cli", "check", "--engine", "all", "--method", "both"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "no workers started"
        time.sleep(0.05)
    time.sleep(0.5)  # into their first jobs
    return proc, _children(proc.pid)


@pytest.fixture
def started():
    procs = []

    def start():
        proc, workers = _start_check_with_workers()
        procs.append((proc, workers))
        return proc, workers
    yield start
    for proc, workers in procs:  # a failed test leaves nothing computing
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig,group,code", [
    (signal.SIGINT, True, 130), (signal.SIGINT, False, 130), (signal.SIGTERM, False, 143)],
    ids=["ctrl-c to the process group", "SIGINT to the parent", "SIGTERM to the parent"])
def test_a_stopped_check_ends_its_workers_within_10_s(sig, group, code, started):
    proc, workers = started()
    sent = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, sig)
    _, err = proc.communicate(timeout=10)
    assert _wait_gone(workers, 10 - (time.monotonic() - sent)) == []
    assert proc.returncode == code
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"batchproof: stopped by {sig.name}: ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_workers_die_within_10_s_of_a_sigkill_of_their_parent(started):
    proc, workers = started()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(5)
    assert _wait_gone(workers, 10) == []


# --- 6. unwritable output paths -------------------------------------------------------------


@pytest.fixture
def no_job(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a job ran before the output paths were checked")
    monkeypatch.setattr(pool, "execute", refuse)


def _unwritable(tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    return [
        ("/nonexistent/x.html", "the folder /nonexistent does not exist; create it"),
        (str(tmp_path), "it is a folder; give a file path"),
        (str(a_file / "x.xml"), "is a file, not a folder"),
    ]


@pytest.mark.parametrize("flag", ["--html", "--junit"])
@pytest.mark.parametrize("case", range(3), ids=["missing folder", "a folder", "under a file"])
def test_an_unwritable_output_path_is_one_line_and_exit_2_before_any_job(
        flag, case, tmp_path, no_job, capsys):
    path, fix = _unwritable(tmp_path)[case]
    code = main(["check", "--engine", "static", flag, path])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith(f"batchproof: error: cannot write {flag} {path}: ")
    assert fix in captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc")
def test_a_folder_that_takes_no_new_file_is_not_called_missing(no_job, capsys):
    assert main(["check", "--engine", "static", "--junit", "/proc/x.xml"]) == 2
    assert capsys.readouterr().err == ("batchproof: error: cannot write --junit /proc/x.xml: "
                                       "the folder /proc accepts no new file; give another "
                                       "path\n")


def test_the_path_check_leaves_an_existing_file_and_no_new_one(tmp_path):
    old = tmp_path / "old.xml"
    old.write_text("keep")
    check._check_writable("--junit", str(old))
    assert old.read_text() == "keep"
    check._check_writable("--junit", str(tmp_path / "new.xml"))
    assert not (tmp_path / "new.xml").exists()


def test_a_write_that_fails_after_the_run_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    def disk_full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(junit, "write_junit", disk_full)
    code = main([*STATIC, "--property", "starvation", "--junit", str(tmp_path / "v.xml")])
    captured = capsys.readouterr()
    assert code == 2
    assert "2 checks, 2 as expected" in captured.out  # the table came first
    assert captured.err == (f"batchproof: error: cannot write --junit {tmp_path / 'v.xml'}: "
                            "No space left on device; the verdicts above are complete, "
                            "give a path you can write\n")


# --- SIGPIPE: quiet under `| head`, harmless in-process ------------------------------------

def test_main_called_in_process_gives_the_caller_its_sigpipe_handler_back(capsys):
    old = signal.getsignal(signal.SIGPIPE)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        assert main(["check", "--list"]) == 0
        # Left at SIG_DFL, a later write to a dead pool worker's pipe would end the
        # calling process (pytest itself) without a word.
        assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGPIPE, old)


def test_a_pool_runs_with_sigpipe_ignored_and_the_handler_comes_back():
    old = signal.getsignal(signal.SIGPIPE)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        with stops.stoppable():
            assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGPIPE, old)

