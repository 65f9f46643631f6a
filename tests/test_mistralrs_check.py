"""mistral.rs through the checker: stored counterexamples replay on the reference at their
step, and BMC and the explorer agree on the manifest's findings."""

import json
from pathlib import Path

import both_methods
import pytest

from checker.cli.main import main
from checker.methods.replay import replay
from checker.show import itf

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted((ROOT / "counterexamples" / "mistralrs").glob("*.itf.json"))


def test_the_findings_are_stored():
    assert {p.name.split("__")[0] for p in STORED} >= {
        "no_admission_after_preemption", "head_of_line", "starvation",
        "decodes_exhaust_budget", "no_join_mid_batch"}


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_stored_counterexample_replays_on_the_reference_at_its_step(path):
    cex = itf.read_counterexample(path)
    assert cex.engine.partition("@")[0] == "mistralrs"  # an older version: mistralrs@v0.8.22
    assert replay(cex).violated_at == cex.violated_at
    assert path.with_suffix("").with_suffix(".txt").exists()


def test_bmc_and_explorer_agree_on_the_starvation_escape(capsys):
    code = main(["check", "--engine", "mistralrs", "--property",
                 "no_admission_after_preemption", "--method", "both", "--json", "--jobs", "1"])
    rows = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 0
    assert [(r["method"], r["verdict"], r["depth"]) for r in rows] == [
        ("bmc", "VIOLATED", 2), ("explore", "VIOLATED", 2)]


@pytest.mark.slow
def test_mistralrs_manifest_meets_both_methods(capsys):
    def run() -> tuple[int, dict]:
        code = main(["check", "--engine", "mistralrs", "--method", "both", "--json", "--jobs",
                     "1", "--timeout", "120"])
        return code, json.loads(capsys.readouterr().out)

    code, rows = both_methods.rows("mistralrs", run)
    assert code == 0, [r for r in rows if not r.get("as_expected", True)]
