"""`batchproof diff`: the shortest workload on which two versions decide differently, its
replay on both references, the proof where a switch is not read, and the outputs."""

import json
import xml.etree.ElementTree as ET

import pytest

from checker.cli.main import main
from checker.methods import diff
from checker.methods.symbolic import Bounds
from model import registry
from properties.manifest import load

TINY_BOUNDS = Bounds(slots=2, depth=3, max_prompt_len=4, max_max_tokens=3)


def side(name, switches=None):
    engine = registry.get(name)
    raw = engine.config_to_dict(load().configs["mr_tiny"].config)
    if switches:
        raw["rules"] = switches
    return diff.Side(engine=engine.name, config=engine.parse_config(raw), label=name)


def run_json(capsys, *args):
    code = main(["diff", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_fcfs_fix_is_found_at_step_2_on_two_equal_requests(capsys):
    code, doc = run_json(capsys, "mistralrs@v0.8.22", "mistralrs@v0.8.23", "--manifest-config",
                         "mr_tiny")
    assert code == 1
    assert (doc["status"], doc["depth"], doc["minimal"]) == ("differ", 2, True)
    requests = [(r["id"], r["prompt_len"], r["max_tokens"], r["arrival_step"])
                for r in doc["workload"]["requests"]]
    assert requests == [("r0", 3, 2, 1), ("r1", 3, 2, 1)]
    preempted = {(d["request"], d["a"], d["b"]) for d in doc["differences"]
                 if d["observable"] == "preempted"}
    assert preempted == {("r0", True, False), ("r1", False, True)}
    assert doc["steps"]["a"][1]["preempted"] == ["r0"]
    assert doc["steps"]["b"][1]["preempted"] == ["r1"]


def test_no_shallower_workload_differs():
    assert diff.compare(side("mistralrs@v0.8.22"), side("mistralrs@v0.8.23"),
                        Bounds(slots=2, depth=1, max_prompt_len=5, max_max_tokens=3),
                        120).status == diff.SAME


def test_the_bucketing_ablation_differs_in_the_first_prompt_step(capsys):
    code, doc = run_json(capsys, "mistralrs@v0.9.0", "--ablate", "bucket_by_length",
                         "--manifest-config", "mr_tiny")
    assert code == 1 and doc["depth"] == 1
    assert doc["b"]["config"]["rules"] == {"bucket_by_length": False}
    assert doc["steps"]["a"][0]["preempted"] == ["r1"] and doc["steps"]["b"][0]["preempted"] == []


def test_a_switch_the_version_does_not_read_is_proved_equivalent(capsys):
    # 48be6c1e2 replaced the turn alternation by completion_is_due (S:239-273).
    code, doc = run_json(capsys, "mistralrs", "--ablate", "alternate_turns", "--manifest-config",
                         "mr_tiny")
    assert (code, doc["status"]) == (0, "proved")


@pytest.mark.slow  # about 9 s of proofs
def test_one_victim_or_a_loop_is_the_same_with_two_slots_but_not_provably_with_three():
    a, b = side("mistralrs@v0.9.2"), side("mistralrs@b0882bd75")
    assert diff.prove_equivalent(a, b, 2, 60) is True  # one running sequence beside the head
    assert diff.prove_equivalent(a, b, 3, 60) is False
    # mr_tiny's 64 failed attempts are out of reach in 2 steps: no difference there
    assert diff.compare(a, b, Bounds(slots=3, depth=2, max_prompt_len=2, max_max_tokens=2),
                        120, prove=False).status == diff.SAME


def test_a_reference_that_does_not_confirm_the_rules_is_a_divergence(monkeypatch):
    real = diff.simulate
    first = {}

    def same_records(workload):
        # both sides get side A's run: the references then never differ
        return first.setdefault("a", real(workload))

    monkeypatch.setattr(diff, "simulate", same_records)
    result = diff.compare(side("mistralrs@v0.8.22"), side("mistralrs@v0.8.23"), TINY_BOUNDS,
                          120)
    assert result.status == diff.DIVERGENCE
    assert "the references agree on every step" in result.reason


def test_the_text_shows_both_timelines_side_by_side(capsys):
    assert main(["diff", "mistralrs@v0.8.22", "mistralrs@v0.8.23", "--manifest-config",
                 "mr_tiny"]) == 1
    out = capsys.readouterr().out
    assert "DIFFER at step 2" in out
    assert "A: mistralrs@v0.8.22    B: mistralrs@v0.8.23" in out
    row = next(line for line in out.splitlines() if line.startswith("r0 "))
    assert row.split() == ["r0", "+3", "!", "r0", "+3", "1#"]


def test_the_svg_holds_the_two_timelines(capsys):
    assert main(["diff", "mistralrs@v0.8.22", "mistralrs@v0.8.23", "--manifest-config", "mr_tiny",
                 "--format", "svg"]) == 1
    root = ET.fromstring(capsys.readouterr().out)
    ns = "{http://www.w3.org/2000/svg}"
    inner = root.findall(f"{ns}svg")
    assert len(inner) == 2 and float(inner[1].get("x")) > float(inner[0].get("width"))
    blocks = [b for b in root.iter(f"{ns}rect") if b.get("class") == "block"
              and b.get("data-step") == "2"]
    assert [b.get("data-request") for b in blocks] == ["r1", "r0"]


@pytest.mark.slow
def test_ablate_all_says_which_switch_changes_a_decision(capsys):
    code, doc = run_json(capsys, "mistralrs", "--ablate-all", "--manifest-config", "mr_tiny",
                         "--depth", "2", "--jobs", "1")
    assert code == 1
    status = {row["switch"]: (row["status"], row["depth"]) for row in doc["switches"]}
    assert status == {"victim_newest": ("same", 2), "reserve_next_token": ("differ", 2),
                      "bucket_by_length": ("differ", 1), "alternate_turns": ("proved", 0),
                      "escape_loop": ("proved", 0), "token_budget": ("differ", 1)}


@pytest.mark.parametrize(("args", "message"), [
    (["mistralrs@v9", "mistralrs"], "unknown mistralrs version 'v9'; known versions:"),
    (["mistralrs", "--ablate", "nope"], "unknown rule switch 'nope'"),
    (["mistralrs", "mistralrs@v0.8.22", "--manifest-config", "tiny_fcfs"], "is a vllm-v1 config"),
    (["mistralrs", "mistralrs", "--ablate", "escape_loop"], "give one engine, not 2"),
    (["mistralrs"], "diff compares two engines"),
    (["sglang", "--ablate-all"], "sglang models one version"),
    (["mistralrs", "sglang"], "different engines"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_vllm_lists_its_rule_switch_with_its_upstream_lines(capsys):
    assert main(["diff", "vllm-v1", "--list"]) == 0
    out = capsys.readouterr().out
    assert "vllm-v1@0.32.0: cap_prefix_hit" in out
    assert "kv_cache_manager.py:289-300" in out and "vllm-project/vllm#30320" in out


def test_vllm_ablating_the_hit_cap_finds_the_whole_prompt_hit(capsys):
    """Without the num_tokens - 1 cap, two requests of one 2-token prompt arriving together
    decide differently at step 1 (the second one's hit covers its prompt)."""
    code = main(["diff", "vllm-v1", "--ablate", "cap_prefix_hit", "--manifest-config",
                 "tiny_cached",
                 "--slots", "2", "--depth", "1", "--max-prompt-len", "2", "--max-tokens", "1",
                 "--no-prove", "--json", "--timeout", "120"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1, doc
    assert doc["status"] == "differ" and doc["depth"] == 1
    assert {(d["request"], d["observable"], d["a"], d["b"]) for d in doc["differences"]} >= {
        ("r1", "scheduled", 2, 0)}


def vllm_side(config_name, switches=None):
    engine = registry.get("vllm-v1")
    raw = engine.config_to_dict(load().configs[config_name].config)
    if switches:
        raw["rules"] = switches
    return diff.Side(engine=engine.name, config=engine.parse_config(raw), label="vllm-v1")


@pytest.mark.parametrize("switch", ["spec_pad_room", "cap_prefix_hit", "watermark_check",
                                    "long_prefill_cap", "threshold_off_when_alone"])
def test_a_switch_the_config_does_not_read_is_proved_equivalent_at_once(switch):
    # tiny_fcfs: no speculative decoding, no prefix cache, watermark 0, threshold 0
    a = vllm_side("tiny_fcfs")
    b = vllm_side("tiny_fcfs", {switch: not getattr(a.config.rules, switch)})
    result = diff.compare(a, b, TINY_BOUNDS, 30)
    assert result.status == diff.PROVED and "not read" in result.reason
    assert result.seconds < 1


# victim_latest (6 s) in the slow suite; full_sequence_check is the same check at the
# same bounds
@pytest.mark.parametrize(("switch", "step"), [
    pytest.param("victim_latest", 2, marks=pytest.mark.slow), ("full_sequence_check", 2)])
def test_the_ablations_change_decisions_with_a_minimal_workload(switch, step):
    a = vllm_side("tiny_fcfs")
    b = vllm_side("tiny_fcfs", {switch: False})
    result = diff.compare(a, b, Bounds(slots=3, depth=2, max_prompt_len=3, max_max_tokens=2),
                          120, prove=False)
    assert (result.status, result.depth) == (diff.DIFFER, step)


def test_bmc_diff_refuses_speculative_decoding_and_the_explicit_search_answers():
    # the symbolic product has EOS choices only; with drafts accepted fixed at 0 a
    # "no difference" would not cover the acceptance the environment chooses
    from checker.methods import diff_explore
    a = vllm_side("tiny_spec")
    b = vllm_side("tiny_spec", {"victim_latest": False})
    small = Bounds(slots=2, depth=2, max_prompt_len=2, max_max_tokens=2)
    by_bmc = diff.compare(a, b, small, 60)
    assert by_bmc.status == diff.UNKNOWN and "speculative" in by_bmc.reason
    assert diff.prove_equivalent(a, b, 2, 30) is None
    assert diff_explore.decide(a, b, small, 120, method="explore").status in (
        diff.DIFFER, diff.SAME)


def test_the_gate_ablated_under_async_skips_a_victim_with_stale_output_as_upstream():
    # scheduler.py:934-939: with the gate off (S:900) a victim preempted with output in
    # flight meets the waiting loop of the same step, which skips it (S:904-910, 1394-1395);
    # the reference and the rules both skip, so the comparison is decided, not UNKNOWN
    from checker.methods import diff_explore
    a = vllm_side("tiny_async")
    b = vllm_side("tiny_async", {"preemption_gate": False})
    result = diff_explore.decide(a, b, Bounds(slots=2, depth=4, max_prompt_len=4,
                                              max_max_tokens=3), 120, method="explore")
    assert result.status == diff.SAME and result.depth == 4


# about 6 s; test_vllm_ablating_the_hit_cap_finds_the_whole_prompt_hit diffs tiny_cached
@pytest.mark.slow
def test_bmcs_least_difference_is_the_explicit_searchs_on_tiny_cached():
    # z3's lex Optimize once returned this difference with an EOS of r0 at step 1 it did
    # not need (docs/bench_diff.md); the least workload by minimize.py's order has none.
    from checker.methods import diff_explore
    m = load()
    bounds = Bounds(**dict(m.configs["tiny_cached"].bounds))
    a = vllm_side("tiny_cached")
    b = vllm_side("tiny_cached", {"full_sequence_check": False})
    by_bmc = diff.compare(a, b, bounds, 120, prove=False)
    by_search = diff_explore.decide(a, b, bounds, 120, method="explore")
    assert (by_bmc.status, by_bmc.depth) == (diff.DIFFER, 1)
    assert by_bmc.workload is not None and by_bmc.workload.eos == ()
    assert by_bmc.workload == by_search.workload
