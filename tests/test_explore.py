"""The explicit-state explorer: same verdicts as BMC, symmetry reduction that changes no
verdict, lassos that replay on the reference, graph export."""

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace

import both_methods
import networkx as nx
import pytest
import symmetry_cases

from checker.methods import agreement, bmc, explore
from checker.methods.jobs import Job, run, run_batch
from checker.methods.symbolic import Bounds, Family
from checker.methods.verdict import VIOLATED
from model.core.types import RequestSpec, Workload
from model.run import simulate
from model.sglang.config import Config as SGLangConfig
from model.vllm.config import Config
from model.vllm.reference import VllmV1Scheduler
from model.vllm_v0.config import Config as V0Config
from properties import catalogue, manifest

TINY = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
              num_gpu_blocks=5)
FAMILY = Family(TINY)


def test_starvation_is_found_at_the_same_depth_with_the_same_least_workload_as_bmc():
    prop = catalogue.get("starvation", k=3)
    bounds = Bounds(slots=2, depth=4, max_prompt_len=4, max_max_tokens=3)
    explored = explore.check(prop, FAMILY, bounds, 120)
    searched = bmc.check(prop, FAMILY, bounds, 120)
    assert explored.status == searched.status == "violated"
    assert explored.depth == searched.depth == 3
    assert explored.workload == searched.workload


def test_a_property_that_holds_is_explored_to_the_full_depth():
    def explored(depth: int) -> explore.ExploreResult:
        bounds = Bounds(slots=2, depth=depth, max_prompt_len=3, max_max_tokens=5)
        return explore.check(catalogue.get("budget_respected"), FAMILY, bounds, 120)
    deep, shallow = explored(5), explored(2)
    assert deep.status == "holds" and deep.depth == 5 and deep.stats.depth_reached == 5
    # requests that live 5 steps reach states a 2-step search cannot
    assert deep.stats.states > shallow.stats.states
    assert deep.stats.transitions > deep.stats.states


def test_a_kept_exploration_is_read_back_only_by_the_same_search(monkeypatch):
    """BATCHPROOF_EXPLORE_MEMO (CI steps 4 and 5): a decided search is kept in the proof
    store (this test's own, monkeypatch) and read back, equal, by the same search only."""
    searches = []
    run_all = explore.Explorer.run_all

    def counted(self):
        searches.append(self.props)
        return run_all(self)
    monkeypatch.setattr(explore.Explorer, "run_all", counted)
    props = (catalogue.get("budget_respected"), catalogue.get("kv_blocks_conserved"))
    starvation = catalogue.get("starvation", k=3)
    bounds = Bounds(slots=2, depth=4, max_prompt_len=4, max_max_tokens=3)
    off = explore.check_many(props, FAMILY, bounds, 120)
    monkeypatch.setenv("BATCHPROOF_EXPLORE_MEMO", "1")
    first = explore.check_many(props, FAMILY, bounds, 120)
    assert len(searches) == 2  # off: nothing kept
    assert explore.check_many(props, FAMILY, bounds, 120) == first  # its seconds too
    assert [replace(r, stats=replace(r.stats, seconds=0)) for r in first] == \
        [replace(r, stats=replace(r.stats, seconds=0)) for r in off]
    violated = explore.check(starvation, FAMILY, bounds, 120)
    assert violated.status == "violated" and violated.workload is not None
    assert explore.check(starvation, FAMILY, bounds, 120) == violated
    assert len(searches) == 3
    # other questions: another property set, depth, symmetry
    explore.check_many(props[:1], FAMILY, bounds, 120)
    explore.check_many(props, FAMILY, replace(bounds, depth=3), 120)
    explore.check_many(props, FAMILY, bounds, 120, symmetric=False)
    assert len(searches) == 6
    # a search left undecided by its time limit is not kept
    assert explore.check_many(props, FAMILY, replace(bounds, depth=5), 0)[0].status == \
        "unknown"
    explore.check_many(props, FAMILY, replace(bounds, depth=5), 0)
    assert len(searches) == 8


@pytest.mark.parametrize("name,params", symmetry_cases.CASES)
def test_symmetry_reduction_changes_no_verdict_and_never_adds_states(name, params):
    prop = catalogue.get(name, **params)
    bounds = Bounds(slots=2, depth=4, max_prompt_len=3, max_max_tokens=2)
    reduced = explore.check(prop, FAMILY, bounds, 120, symmetric=True)
    full = explore.check(prop, FAMILY, bounds, 120, symmetric=False)
    assert (reduced.status, reduced.depth) == (full.status, full.depth)
    assert reduced.stats.states <= full.stats.states


def test_symmetry_merges_two_identical_requests():
    bounds = Bounds(slots=2, depth=3, max_prompt_len=2, max_max_tokens=2)
    prop = catalogue.get("budget_respected")
    reduced = explore.check(prop, FAMILY, bounds, 120, symmetric=True)
    full = explore.check(prop, FAMILY, bounds, 120, symmetric=False)
    assert reduced.stats.states < full.stats.states


def test_the_never_finishes_lasso_replays_on_the_reference():
    nc = manifest.load().configs["tiny_fcfs"]
    nc = manifest.with_bounds(nc, slots=1, depth=6, max_prompt_len=8, max_max_tokens=6)
    res = run(Job("vllm-v1", "never_finishes", (), nc, VIOLATED, 120, method="explore"))
    assert res.verdict.verdict == VIOLATED
    assert res.counterexample is not None and res.counterexample.loop is not None
    assert res.replayed is not None and res.replayed.loop == res.counterexample.loop
    # The run really repeats: the loop's state comes back and the request never finishes.
    cex = res.counterexample
    records = simulate(cex.workload)
    assert not any(rid == "r0" for rec in records for rid, _ in rec.finished)


def test_shared_exploration_decides_each_property_as_alone():
    nc = manifest.with_bounds(manifest.load().configs["tiny_fcfs"], slots=2, depth=3)
    names = ["budget_respected", "kv_blocks_conserved", "running_before_waiting"]
    jobs = [Job("vllm-v1", n, (), nc, None, 120, method="explore") for n in names]
    together = run_batch(jobs)
    alone = [run(j) for j in jobs]
    assert [r.verdict.label for r in together] == [r.verdict.label for r in alone]


def test_a_ranged_family_is_explored_config_by_config():
    family = Family(TINY, ranges=(("max_num_batched_tokens", 1, 3), ("max_num_seqs", 1, 3)))
    members = explore.family_members(family)
    # validated: budget >= max_num_seqs
    assert {(c.max_num_batched_tokens, c.max_num_seqs) for c in members} == {
        (1, 1), (2, 1), (2, 2), (3, 1), (3, 2), (3, 3)}
    bounds = Bounds(slots=2, depth=2, max_prompt_len=2, max_max_tokens=1)
    result = explore.check(catalogue.get("budget_respected"), family, bounds, 120)
    assert result.status == "holds"


def test_the_reference_scheduler_copies_share_no_mutable_state():
    sched = VllmV1Scheduler(TINY)
    sched.add_request(RequestSpec("a", 3, 2))
    sched.add_request(RequestSpec("b", 4, 2))
    sched.step()
    twin = copy.deepcopy(sched)
    before = sched.state_key()
    twin.step(frozenset({"a"}))
    twin.step()
    assert sched.state_key() == before  # stepping the copy left the original alone
    again = copy.deepcopy(sched)
    assert [again.step() for _ in range(3)] == [sched.step() for _ in range(3)]


def test_agreement_flags_a_depth_mismatch_an_unknown_and_another_counterexample():
    from checker.methods.jobs import JobResult
    from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, Counterexample, Verdict

    def r(method, verdict, depth, prompt_len=None):
        cex = None
        if prompt_len is not None:
            w = Workload(config=TINY, requests=(RequestSpec("r0", prompt_len, 1),), steps=depth)
            cex = Counterexample("vllm-v1", "p", (), "c", w, method, (), depth)
        return JobResult(Verdict("vllm-v1", "p", "c", method, verdict, depth, 0.0), cex)
    assert agreement.disagreements([(r("induction", PROVED, 1), r("explore", HOLDS, 4))]) == []
    assert agreement.disagreements([(r("bmc", VIOLATED, 3, 2), r("explore", VIOLATED, 3, 2))]) \
        == []
    assert agreement.disagreements([(r("bmc", VIOLATED, 3), r("explore", VIOLATED, 4))])
    # An UNKNOWN side leaves the pair inconclusive, not a disagreement (issue 14).
    assert agreement.disagreements([(r("bmc", HOLDS, 3), r("explore", UNKNOWN, 0))]) == []
    assert agreement.compare(r("bmc", HOLDS, 3), r("explore", UNKNOWN, 0)).status \
        == agreement.INCONCLUSIVE
    different = agreement.disagreements([(r("bmc", VIOLATED, 3, 2), r("explore", VIOLATED, 3, 5))])
    assert different and "different least counterexamples" in different[0]


def test_dot_and_graphml_exports_describe_the_explored_graph(tmp_path):
    dot, graphml = tmp_path / "g.dot", tmp_path / "g.graphml"
    cmd = [sys.executable, "-m", "checker.cli", "check", "--method", "explore",
           "--property", "budget_respected", "--manifest-config", "tiny_fcfs", "--slots", "1",
           "--depth", "3", "--dot", str(dot), "--graphml", str(graphml)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "holds at depth 3" in out.stdout
    assert "symmetry reduction:" in out.stdout and "same verdict: True" in out.stdout
    graph = nx.read_graphml(graphml)
    assert graph.number_of_nodes() > 3
    assert dot.read_text().startswith("digraph explored {")
    assert dot.read_text().count("->") == graph.number_of_edges()
    ET.parse(graphml)


def test_export_needs_exactly_one_check(tmp_path):
    cmd = [sys.executable, "-m", "checker.cli", "check", "--method", "explore",
           "--dot", str(tmp_path / "g.dot")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 2
    assert "pick one with --property and --config" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_bmc_and_the_explorer_agree_on_every_default_manifest_entry():
    def run() -> tuple[int, dict]:
        cmd = [sys.executable, "-m", "checker.cli", "check", "--method", "both", "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out.returncode, json.loads(out.stdout)

    code, verdicts = both_methods.rows("vllm-v1", run)
    assert code == 0
    explored = [v for v in verdicts if v["method"] == "explore"]
    entries = [e for e in manifest.load().entries
               if e.engine == "vllm-v1" and e.suite == "default" and "explore" in e.methods]
    assert len(explored) == len(entries)


SG_TINY = SGLangConfig(max_total_num_tokens=12, chunked_prefill_size=4, max_prefill_tokens=8,
                       max_running_requests=3, context_length=64)
V0_SWAP = V0Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
                   num_gpu_blocks=5, enable_chunked_prefill=True, preemption_mode="swap",
                   num_cpu_blocks=2)


@pytest.mark.parametrize("family", [
    FAMILY, Family(replace(TINY, async_scheduling=True, enable_prefix_caching=True)),
    Family(replace(TINY, async_scheduling=True, speculative_method="ngram",
                   num_speculative_tokens=1)),
    Family(V0_SWAP, engine="vllm-v0"), Family(SG_TINY, engine="sglang")],
    ids=["sync", "async-prefix", "async-spec", "v0-swap", "sglang"])
def test_observing_one_record_at_a_time_searches_as_observing_whole_runs(family):
    # The explorer observes only the new record where no request arrived (the engine's
    # `observer`); observing every run whole (`observe`, no observer) must give the same
    # search: verdict, least workload, states and transitions.
    whole = replace(family, _model=(family.engine, replace(family.model, observer=None)))
    bounds = Bounds(slots=2, depth=5, max_prompt_len=2, max_max_tokens=3, arrival_window=1)
    for name, params in (("starvation", {"k": 3}), ("kv_blocks_conserved", {})):
        prop = catalogue.get(name, **params)
        folded, rerun = (explore.check(prop, f, bounds, 120) for f in (family, whole))
        assert (folded.status, folded.depth, folded.workload) == (
            rerun.status, rerun.depth, rerun.workload), name
        assert (folded.stats.states, folded.stats.transitions) == (
            rerun.stats.states, rerun.stats.transitions), name
