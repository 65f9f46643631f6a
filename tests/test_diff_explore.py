"""`batchproof diff` by explicit-state search over the two reference schedulers
(checker/methods/diff_explore.py): the same status, first depth and least workload as BMC
(checker/methods/diff.py), and the CLI's --method."""

import json

import pytest
from diff_sides import side

from checker.cli.main import main
from checker.methods import diff, diff_explore
from checker.methods.symbolic import Bounds

SMALL = Bounds(slots=3, depth=2, max_prompt_len=3, max_max_tokens=2)


def both_ways(a, b, bounds):
    by_bmc = diff.compare(a, b, bounds, 300, prove=False)
    by_search = diff_explore.compare(a, b, bounds, 300)
    return by_bmc, by_search


def requests(r):
    return [(x.id, x.prompt_len, x.max_tokens, x.arrival_step, x.priority)
            for x in r.workload.arrival_order()]


# Both ablations (5-7 s each, BMC's share most of it) in the slow suite: tests/test_diff.py
# runs full_sequence_check by BMC at these bounds, and the mistral.rs victim fix below is
# the same check by both methods (the same depth and least workload, no disagreement).
@pytest.mark.slow
@pytest.mark.parametrize("switch", ["full_sequence_check", "victim_latest"])
def test_an_ablation_differs_at_step_2_on_the_same_least_workload(switch):
    a = side("vllm-v1", "tiny_fcfs")
    b = side("vllm-v1", "tiny_fcfs", {switch: False})
    by_bmc, by_search = both_ways(a, b, SMALL)
    assert (by_search.status, by_search.depth, by_search.method) == (diff.DIFFER, 2, "explore")
    assert (by_bmc.status, by_bmc.depth) == (diff.DIFFER, 2)
    assert requests(by_search) == requests(by_bmc)
    assert by_search.workload.eos == by_bmc.workload.eos
    assert by_search.differences == by_bmc.differences
    assert diff_explore.disagreement(by_bmc, by_search) is None


def test_the_gate_changes_nothing_under_fcfs_by_either_method():
    a = side("vllm-v1", "tiny_fcfs")
    b = side("vllm-v1", "tiny_fcfs", {"preemption_gate": False})
    bounds = Bounds(slots=2, depth=3, max_prompt_len=3, max_max_tokens=2)
    by_bmc, by_search = both_ways(a, b, bounds)
    assert by_bmc.status == by_search.status == diff.SAME
    assert by_search.depth == 3 and by_search.states > 0


def test_the_mistralrs_victim_fix_by_either_method():
    a, b = side("mistralrs@v0.8.22", "mr_tiny"), side("mistralrs@v0.8.23", "mr_tiny")
    by_bmc, by_search = both_ways(a, b, Bounds(slots=2, depth=3, max_prompt_len=4,
                                              max_max_tokens=3))
    assert (by_search.status, by_search.depth) == (by_bmc.status, by_bmc.depth) == (
        diff.DIFFER, 2)
    assert requests(by_search) == requests(by_bmc) == [("r0", 3, 2, 1, 0), ("r1", 3, 2, 1, 0)]
    assert diff_explore.disagreement(by_bmc, by_search) is None


def test_no_shallower_workload_differs_by_the_search():
    a, b = side("mistralrs@v0.8.22", "mr_tiny"), side("mistralrs@v0.8.23", "mr_tiny")
    r = diff_explore.compare(a, b, Bounds(slots=2, depth=1, max_prompt_len=5,
                                          max_max_tokens=3), 60)
    assert r.status == diff.SAME


@pytest.mark.parametrize("switch", ["victim_latest", "preemption_gate"])
def test_the_joint_symmetry_reduction_keeps_the_answer(switch):
    a = side("vllm-v1", "tiny_fcfs")
    b = side("vllm-v1", "tiny_fcfs", {switch: not getattr(a.config.rules, switch)})
    bounds = Bounds(slots=2, depth=3, max_prompt_len=3, max_max_tokens=2)
    reduced = diff_explore.compare(a, b, bounds, 120)
    full = diff_explore.compare(a, b, bounds, 120, symmetric=False)
    assert (reduced.status, reduced.depth) == (full.status, full.depth)
    assert reduced.states <= full.states
    if reduced.status == diff.DIFFER:
        assert requests(reduced) == requests(full)


def test_a_methods_disagreement_is_a_divergence(monkeypatch):
    a, b = side("mistralrs@v0.8.22", "mr_tiny"), side("mistralrs@v0.8.23", "mr_tiny")
    real = diff_explore.compare

    def shallow(a, b, bounds, timeout_s, symmetric=True):
        return real(a, b, Bounds(slots=2, depth=1, max_prompt_len=2, max_max_tokens=1),
                    timeout_s, symmetric)

    monkeypatch.setattr(diff_explore, "compare", shallow)
    r = diff_explore.decide(a, b, Bounds(slots=2, depth=3, max_prompt_len=4, max_max_tokens=3),
                            120, prove=False, method="both")
    assert r.status == diff.DIVERGENCE and r.method == "both"
    assert r.reason.startswith("the methods disagree: BMC differ at depth 2")


def run_json(capsys, *args):
    code = main(["diff", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("method", ["bmc", "explore", "both", "auto"])
def test_the_cli_method_gives_one_answer_and_names_itself(capsys, method):
    code, doc = run_json(capsys, "mistralrs@v0.8.22", "mistralrs@v0.8.23", "--manifest-config",
                         "mr_tiny", "--method", method)
    assert code == 1 and (doc["status"], doc["depth"]) == ("differ", 2)
    assert doc["method"] == ("explore" if method == "auto" else method)
    assert doc["method_asked"] == method
    assert [(r["id"], r["prompt_len"], r["max_tokens"]) for r in doc["workload"]["requests"]] == [
        ("r0", 3, 2), ("r1", 3, 2)]


def test_auto_proves_after_no_difference_and_the_unread_switch_needs_no_search(capsys):
    code, doc = run_json(capsys, "vllm-v1", "--ablate", "watermark_check", "--manifest-config",
                         "tiny_fcfs")
    assert (code, doc["status"], doc["method"]) == (0, "proved", "config")


def test_explore_on_bounds_too_wide_is_one_line_and_exit_2(capsys):
    assert main(["diff", "vllm-v1", "--ablate", "preemption_gate", "--manifest-config",
                 "tiny_fcfs", "--max-prompt-len", "40", "--max-tokens", "40", "--slots", "4",
                 "--method", "explore"]) == 2
    err = capsys.readouterr().err
    assert "arrival choices in its first step" in err and err.count("\n") == 1


def test_the_text_names_the_method(capsys):
    assert main(["diff", "mistralrs@v0.8.22", "mistralrs@v0.8.23", "--manifest-config",
                 "mr_tiny", "--method", "explore"]) == 1
    out = capsys.readouterr().out
    assert "method: explore, " in out and "pair states" in out


def test_a_reference_assertion_on_the_ablated_path_is_unknown_and_not_retried_by_bmc(
        monkeypatch):
    """A reference that stops at an assertion of its own (a path the model does not cover)
    makes the answer UNKNOWN naming it, and auto does not retry with BMC, whose rules
    assume what the reference asserts. The model now covers the gate's ablation under
    async (the stale skip, S:934-939); an assertion is injected on the ablated side."""
    from model.vllm.reference import VllmV1Scheduler
    admit = VllmV1Scheduler._admit_waiting

    def asserting(self, out, *args):
        assert self.cfg.rules.preemption_gate or not out.preempted_reqs, \
            "num_stale_output_tokens: injected"
        admit(self, out, *args)
    monkeypatch.setattr(VllmV1Scheduler, "_admit_waiting", asserting)
    a = side("vllm-v1", "tiny_async")
    b = side("vllm-v1", "tiny_async", {"preemption_gate": False})
    r = diff_explore.decide(a, b, Bounds(slots=2, depth=4, max_prompt_len=4, max_max_tokens=3),
                            120, prove=False)
    assert (r.status, r.method) == (diff.UNKNOWN, "explore")
    assert r.reason.startswith(diff_explore.ASSERTS) and "test_diff_explore.py" in r.reason
