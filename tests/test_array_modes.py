"""The array explorer with prefix caching and the AsyncScheduler on (issue 29 item 3):
admitted where it models the environment exactly, refused for speculative decoding, its
reductions proved for the new state (or off where a proof does not cover it), and on every
manifest entry of the cached and async vLLM configs the reference explorer's verdicts,
depths, least counterexamples and lassos."""

import time

import explorer_agreement
import pytest

from checker.methods import array as ax
from checker.methods import explore
from checker.methods.array import analysis
from checker.methods.array.search import Options, Search
from checker.methods.jobs import (
    Job,
    explorer_of,
    family_of,
    symbolic_bounds,
)
from checker.methods.symbolic import Bounds, Family
from model import registry
from model.vllm.config import Config
from properties import catalogue, manifest

CACHED = ("tiny_cached", "tiny_cached_uncapped")
ASYNC = ("tiny_async",)
# A prefix cache small enough for the default suite: 2 usable blocks of 2 tokens, tables
# of 2 entries (tiny_cached's 4-block pool takes its reduction proofs about 2 minutes).
SMALL_CACHED = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=4,
                      block_size=2, num_gpu_blocks=3, enable_prefix_caching=True)
SMALL_BOUNDS = Bounds(slots=2, depth=4, max_prompt_len=3, max_max_tokens=2, prefix_groups=1)


def _modes_groups():
    """Manifest entries of the vLLM V1 configs with prefix caching or the AsyncScheduler on
    and no speculative decoding, one group per (config, bounds, kind of search) as
    jobs.run_batch shares a search among step properties."""
    m = manifest.load()
    groups: dict[tuple, list] = {}
    for e in m.entries:
        cfg = m.configs[e.config].config
        if e.engine != "vllm-v1" or "explore" not in e.methods:
            continue
        if not (cfg.enable_prefix_caching or cfg.async_scheduling) or cfg.num_spec_tokens:
            continue
        prop = catalogue.get(e.property, **dict(e.params))
        key = (e.config, e.bounds, "step" if prop.kind == "step" else e.property)
        groups.setdefault(key, []).append(e)
    return groups


def _param(key, entries, marks=()):
    bounds = "-".join(f"{k}{v}" for k, v in key[1]) or "bounds"
    return pytest.param(entries, id=f"{key[0]}-{bounds}-{key[2]}", marks=marks)


# The reference explorer takes one to three minutes on tiny_cached's default bounds (105
# request kinds over 2 slots), and the array explorer's first search of a cached config
# pays its reduction proofs (about 2 minutes per rule config with an empty proof store,
# which any edit under model/ or checker/methods/ empties); the async group takes seconds.
SLOW_CONFIGS = set(CACHED)


def _agree(entries, same_states=False):
    arrays = explorer_agreement.agree(entries, 900, supported=True, same_states=same_states)
    for e, arr in zip(entries, arrays, strict=True):
        assert arr.status == ("violated" if e.expected == "VIOLATED" else "holds"), e.property


def test_every_cached_and_async_entry_is_in_a_group():
    groups = _modes_groups()
    configs = {key[0] for key in groups}
    assert configs == {*CACHED, *ASYNC}
    assert sum(len(v) for v in groups.values()) == 13


@pytest.mark.parametrize("entries", [_param(k, v) for k, v in _modes_groups().items()
                                     if k[0] not in SLOW_CONFIGS])
def test_async_entries_agree_with_the_reference_explorer(entries):
    # as many states too: a finished slot retires at once and the order the previous
    # schedule was served in is left out, as the reference's state_key does
    _agree(entries, same_states=True)


@pytest.mark.slow
@pytest.mark.parametrize("entries", [_param(k, v) for k, v in _modes_groups().items()
                                     if k[0] in SLOW_CONFIGS])
def test_cached_entries_agree_with_the_reference_explorer(entries):
    _agree(entries)


@pytest.mark.parametrize("name", ["kv_blocks_conserved", "computed_within_tokens",
                                  "admitted_with_tokens", "resumed_recomputes_all",
                                  "prefix_hit_whole_blocks"])
def test_a_small_cache_is_searched_as_the_reference_searches_it(name):
    # the fast sibling of the cached entries: the same comparison on a 2-block pool
    prop = catalogue.get(name)
    ref = explore.check(prop, Family(SMALL_CACHED), SMALL_BOUNDS, 300)
    arr = ax.check(prop, Family(SMALL_CACHED), SMALL_BOUNDS, 300)
    assert (arr.status, arr.depth, arr.workload) == (ref.status, ref.depth, ref.workload)


# ---- where it applies ---------------------------------------------------------------------

@pytest.mark.parametrize("config", [*CACHED, *ASYNC])
def test_the_cached_and_async_configs_are_searched_by_the_array_explorer(config):
    nc = manifest.load().configs[config]
    assert ax.unsupported(family_of(nc), symbolic_bounds(nc)) is None


@pytest.mark.parametrize("config", ["tiny_spec", "tiny_spec_async", "tiny_spec_cached"])
def test_speculative_decoding_stays_with_the_reference_explorer(config):
    nc = manifest.load().configs[config]
    why = ax.unsupported(family_of(nc), symbolic_bounds(nc))
    assert why == "the array explorer does not model speculative decoding"
    job = Job("vllm-v1", "budget_respected", (), nc, "HOLDS", 60, method="explore")
    assert explorer_of(job) == ("reference", why)


def test_auto_picks_the_array_explorer_on_tiny_cached():
    # 2 slots of 105 request kinds: 11025 arrival orders per step
    nc = manifest.load().configs["tiny_cached"]
    job = Job("vllm-v1", "admitted_with_tokens", (), nc, "HOLDS", 60, method="explore")
    assert explorer_of(job) == ("array", "")


# ---- the reductions on the new state ----------------------------------------------------

def _shape(config):
    family = Family(config) if isinstance(config, Config) else \
        family_of(manifest.load().configs[config])
    return analysis.shape(family.model, family.model.rule_config(family.base), 2)


def test_async_retires_a_finished_slot_once_its_output_is_delivered():
    sh = _shape("tiny_async")
    # FINISHED alone does not retire: the pending output is delivered in the next step
    assert sh.retired and all(combo[0] == 4 for combo in sh.retired)
    assert ("in_flight", 0, "pending_sample") in sh.retire_quiet
    assert sh.symmetry == "full" and sh.behaviour_proved
    # ... but it retires at once where no property reads its finish_rank report: only
    # the leaves the finishing step resets (its blocks) are asked to be quiet
    assert sh.retired_at_once == {(4, 0, 0, 0, 0)}
    assert ("blocks",) in sh.at_once_quiet
    assert ("in_flight", 0, "pending_sample") not in sh.at_once_quiet
    assert sh.at_once_obs == {"finish_rank"}
    # the order the previous schedule served its requests in steers nothing without the
    # cache (it orders only the freeing of cached blocks)
    assert dict(sh.idle) == {("in_flight", 0, "pending_rank"): {"finish_rank"}}


def test_a_property_reading_finish_rank_keeps_the_quiet_retirement():
    engine = registry.get("vllm-v1")
    cfg = engine.rule_config(manifest.load().configs["tiny_async"].config)
    kinds = explore.menu(Bounds(slots=2, depth=2), cfg)

    def search(props):
        return Search(engine, cfg, props, kinds, 2, 2, Options(), time.monotonic() + 60)
    plain = search([catalogue.get("budget_respected")])
    assert plain.status_fields == (("status",), ("blocks",))
    assert ("in_flight", 0, "pending_rank") not in plain.key_slot
    reads_rank = catalogue.Property(
        "finish_rank_probe", "step", "reads every slot's finish_rank",
        lambda ops, steps, t: ops.and_(*[o.finish_rank >= 0 for o in steps[t].slots]))
    probe = search([reads_rank])
    assert ("in_flight", 0, "pending_sample") in probe.status_fields
    assert ("in_flight", 0, "pending_rank") in probe.key_slot


def test_prefix_caching_keeps_the_pool_order_as_ranks_and_no_symmetry():
    sh = _shape(SMALL_CACHED)
    assert sh.behaviour_proved
    groups = {tuple(p[-1] for p in g) for g in sh.global_order}
    assert groups == {("cached_at",) * 2, ("queue_key",) * 2}
    # every slot's own block hashes are its own ids: a swap of slots does not commute
    assert sh.symmetry == "none"
    # FINISHED retires once its blocks are released (the table's entries back at 0)
    assert sh.retired == {(4, 0, 0, 0, 0)}
    assert set(sh.retire_quiet) == {("blocks",), ("num_cached",), ("table", 0), ("table", 1)}


def test_a_quiet_slot_is_only_retired_whole():
    # The explorer resets a slot only where every leaf of the proved condition holds: a
    # FINISHED slot whose output is still in flight keeps its leaves.
    engine = registry.get("vllm-v1")
    cfg = engine.rule_config(manifest.load().configs["tiny_async"].config)
    search = Search(engine, cfg, [], explore.menu(Bounds(slots=2, depth=2), cfg), 2, 2,
                    Options(), time.monotonic() + 60)
    assert search.status_fields[0] == ("status",) and len(search.status_fields) > 1
    assert all(len(c) == len(search.status_fields) for c in search.retired)


@pytest.mark.parametrize("config,bounds", [
    ("tiny_async", Bounds(slots=2, depth=4, max_prompt_len=3, max_max_tokens=2)),
    (SMALL_CACHED, SMALL_BOUNDS),
], ids=["async", "cached"])
@pytest.mark.parametrize("name", ["kv_blocks_conserved", "computed_within_tokens",
                                  "no_admission_after_preemption"])
def test_the_reductions_change_no_verdict_with_the_cache_or_in_flight_tokens(config, bounds,
                                                                             name):
    family = Family(config) if isinstance(config, Config) else \
        family_of(manifest.load().configs[config])
    prop = catalogue.get(name)
    results = [ax.check(prop, family, bounds, 300, symmetric=sym, options=Options(retire=r))
               for sym in (False, True) for r in (False, True)]
    assert len({(x.status, x.depth, x.workload) for x in results}) == 1
    assert results[-1].stats.states <= results[0].stats.states


def test_a_cached_prefix_kind_is_searched_as_the_reference_searches_it():
    # max_cached_prefix_len: request kinds with a cached prefix (the menu's), as for the
    # reference explorer
    bounds = Bounds(slots=2, depth=3, max_prompt_len=3, max_max_tokens=2,
                    max_cached_prefix_len=2)
    assert ax.unsupported(Family(SMALL_CACHED), bounds) is None
    for name in ("admitted_with_tokens", "computed_within_tokens"):
        prop = catalogue.get(name)
        ref = explore.check(prop, Family(SMALL_CACHED), bounds, 300)
        arr = ax.check(prop, Family(SMALL_CACHED), bounds, 300)
        assert (arr.status, arr.depth, arr.workload) == (ref.status, ref.depth, ref.workload)


_WINDOW = [("starvation", {"k": 2}), ("head_of_line_blocking", {"k": 2}),
           ("preemption_storm", {"m": 1})]
_MODES = [("tiny_async", None, "async"), (SMALL_CACHED, SMALL_BOUNDS, "cached")]
# Each property in each mode; head_of_line_blocking under async (1.8 s) in the slow suite:
# starvation is the same history question there, and head_of_line_blocking is asked cached.
_SLOW_WINDOW = {("head_of_line_blocking", "async")}


@pytest.mark.parametrize("config,bounds,name,params", [
    pytest.param(config, bounds, name, params, id=f"{name}-params{i}-{mode}",
                 marks=[pytest.mark.slow] if (name, mode) in _SLOW_WINDOW else [])
    for i, (name, params) in enumerate(_WINDOW) for config, bounds, mode in _MODES])
def test_window_properties_read_the_same_history_with_the_cache_or_in_flight_tokens(
        config, bounds, name, params):
    # properties over several steps (the history the key carries) and over the preemption
    # count (a leaf the behaviour key leaves out, carried for this property)
    if isinstance(config, Config):
        family = Family(config)
    else:
        nc = manifest.load().configs[config]
        family, bounds = family_of(nc), symbolic_bounds(nc)
    prop = catalogue.get(name, **params)
    ref = explore.check(prop, family, bounds, 300)
    arr = ax.check(prop, family, bounds, 300)
    assert (arr.status, arr.depth, arr.workload) == (ref.status, ref.depth, ref.workload)
