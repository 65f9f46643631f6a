"""Static and dynamic batching through the checker: both manifests meet both methods (they
are small), and the stored witnesses replay on the reference."""

import json
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.methods.replay import replay
from checker.show import itf

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted((ROOT / "counterexamples" / "baselines").glob("*.itf.json"))


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_stored_counterexample_replays_on_the_reference_at_its_step(path):
    cex = itf.read_counterexample(path)
    assert cex.engine in ("static", "dynamic")
    assert replay(cex).violated_at == cex.violated_at


@pytest.mark.parametrize("engine", ["static", "dynamic"])
def test_manifest_meets_both_methods(engine, capsys):
    code = main(["check", "--engine", engine, "--method", "both", "--json", "--jobs", "1"])
    rows = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 0
    assert {r["method"] for r in rows} == {"bmc", "explore"}


def test_the_idle_slot_witness_counts_the_waste():
    cex = itf.read_counterexample(ROOT / "counterexamples/baselines/"
                                  "finished_slot_released__st_tiny.itf.json")
    records = replay(cex).records
    assert [dict(r.extra)["idle_slots"] for r in records] == [0, 1]
    assert [dict(r.extra)["padded_rows"] for r in records] == [0, 1]
