"""The array explorer keeps each state's least run while the space is small
(`Options.paths_until`), so a violation found there is answered by one search; past the
limit it streams, and a violation is searched again for its run. Both ways give the same
verdicts, depths, least workloads and state counts."""

import time

from checker.methods import array as ax
from checker.methods import explore
from checker.methods.array.search import Options, Search
from checker.methods.symbolic import Bounds, Family
from model import registry
from model.vllm.config import Config
from properties import catalogue

TINY = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
              num_gpu_blocks=5)
BOUNDS = Bounds(slots=2, depth=6, max_prompt_len=4, max_max_tokens=3)


def _props():
    return [catalogue.get("starvation", k=3), catalogue.get("budget_respected"),
            catalogue.get("kv_blocks_conserved")]


def _search(opts: Options):
    engine = registry.get("vllm-v1")
    rule_cfg = engine.rule_config(TINY)
    kinds = explore.menu(BOUNDS, rule_cfg)
    return Search(engine, rule_cfg, _props(), kinds, BOUNDS.slots, BOUNDS.depth, opts,
                  time.monotonic() + 120).run()


def test_a_search_that_stops_keeping_paths_visits_the_same_states():
    streamed = _search(Options(arrival_steps=None))
    kept = _search(Options(least=True))
    switched = _search(Options(least=True, paths_until=kept.states // 2))
    assert streamed.states == kept.states == switched.states
    assert streamed.transitions == kept.transitions == switched.transitions
    assert {i: d for i, (d, _) in streamed.violated.items()} == \
        {i: d for i, (d, _) in switched.violated.items()}
    assert kept.paths_depth == kept.depth_reached
    assert 0 < switched.paths_depth < switched.depth_reached


def test_a_violation_gets_the_same_least_workload_with_or_without_a_second_search(
        monkeypatch):
    one_search = ax.check_many(_props(), Family(TINY), BOUNDS, 120)
    monkeypatch.setattr(ax, "PATHS_UNTIL", 0)  # streams from the first layer on
    two_searches = ax.check_many(_props(), Family(TINY), BOUNDS, 120)
    reference = [r for p in _props() for r in explore.check_many([p], Family(TINY), BOUNDS,
                                                                 120)]
    assert [(r.status, r.depth, r.workload) for r in one_search] == \
        [(r.status, r.depth, r.workload) for r in two_searches] == \
        [(r.status, r.depth, r.workload) for r in reference]
    assert one_search[0].status == "violated" and one_search[0].depth > 1
