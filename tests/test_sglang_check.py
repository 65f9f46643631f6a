"""SGLang through the checker: stored counterexamples replay on the reference, BMC and the
explorer agree on a manifest entry, and the behaviour equivalence used for lassos."""

import json
from dataclasses import replace
from pathlib import Path

import both_methods
import pytest

from checker.cli.main import main
from checker.methods.replay import replay
from checker.show import itf
from model.core.ops import CONCRETE
from model.core.types import RequestSpec, Workload
from model.sglang import engine, rules
from model.sglang.config import Config

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted((ROOT / "counterexamples" / "sglang").glob("*.itf.json"))


def test_there_are_stored_sglang_counterexamples():
    assert {p.name.split("__")[0] for p in STORED} >= {
        "admission_never_overcommits", "budget_respected", "running_before_waiting"}


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_stored_counterexample_replays_on_the_reference_at_its_step(path):
    cex = itf.read_counterexample(path)
    assert cex.engine == "sglang"
    assert replay(cex).violated_at == cex.violated_at
    assert path.with_suffix("").with_suffix(".txt").exists()


def test_bmc_and_explorer_agree_on_the_first_request_exemption(capsys):
    code = main(["check", "--engine", "sglang", "--property", "budget_respected",
                 "--method", "both", "--json", "--jobs", "1"])
    rows = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 0
    assert [(r["method"], r["verdict"], r["depth"]) for r in rows] == [
        ("bmc", "VIOLATED", 1), ("explore", "VIOLATED", 1)]


def test_same_behaviour_ignores_key_counters_but_not_progress():
    cfg = Config(max_total_num_tokens=40, context_length=64)
    w = Workload(config=cfg, requests=(RequestSpec("a", 3, 6), RequestSpec("b", 2, 6)),
                 steps=3, engine="sglang")
    run = engine.run_rules(w)
    state = run.states[-1]
    shifted = replace(state, next_run_key=state.next_run_key + 7, wait_tail=state.wait_tail + 3,
                      slots=tuple(replace(s, run_key=s.run_key + 7) for s in state.slots))
    assert engine.same_behaviour(CONCRETE, state, shifted)
    assert not engine.same_behaviour(CONCRETE, state, run.states[-2])
    assert not engine.same_behaviour(CONCRETE, state, replace(state, ratio_n=state.ratio_n - 1))


def test_initial_state_has_python_bool_leaves_for_the_generic_bmc():
    state = rules.initial_state(2, rules.SGLangRuleConfig.from_config(Config()))
    assert state.batch_is_full is False and all(s.retracted is False for s in state.slots)


@pytest.mark.slow
def test_the_sglang_manifest_is_met_and_both_methods_agree(capsys):
    """About five minutes on one core: every entry, BMC and the explorer."""
    def run() -> tuple[int, dict]:
        code = main(["check", "--engine", "sglang", "--method", "both", "--json", "--jobs", "1"])
        return code, json.loads(capsys.readouterr().out)

    _, rows = both_methods.rows("sglang", run)
    by_entry: dict = {}
    for r in rows:
        by_entry.setdefault((r["property"], r["config"]), {})[r["method"]] = r
        assert r["as_expected"] or (r["expected"] == "PROVED" and r["verdict"] == "HOLDS"), r
    for entry, methods in by_entry.items():
        kinds = {m: ("VIOLATED" if r["verdict"] == "VIOLATED" else "HOLDS")
                 for m, r in methods.items()}
        assert len(set(kinds.values())) == 1, (entry, kinds)
