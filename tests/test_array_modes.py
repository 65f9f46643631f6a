"""The array explorer with prefix caching and the AsyncScheduler on (issue 29 item 3):
admitted where it models the environment exactly, refused for speculative decoding, its
reductions proved for the new state (or off where a proof does not cover it), and on every
manifest entry of the cached and async vLLM configs the reference explorer's verdicts,
depths, least counterexamples and lassos."""

import time
from dataclasses import replace

import explorer_agreement
import numpy as np
import pytest

from checker.methods import array as ax
from checker.methods import explore
from checker.methods.array import analysis, pool
from checker.methods.array.keys import Visited
from checker.methods.array.layout import values_of
from checker.methods.array.search import Options, Search
from checker.methods.jobs import (
    Job,
    explorer_of,
    family_of,
    symbolic_bounds,
)
from checker.methods.symbolic import Bounds, Family
from model import registry
from model.core.ops import CONCRETE
from model.core.types import SlotSpec
from model.vllm.config import Config
from model.vllm.state import FINISHED, RUNNING
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


def _agree(entries, same_states=False, reference_symmetric=True):
    arrays = explorer_agreement.agree(entries, 900, supported=True, same_states=same_states,
                                      reference_symmetric=reference_symmetric)
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
    # as many states too: pool blocks named by first appearance and a finished request's
    # hashes as gone, as the reference's _cache_key. The slots are put in a canonical
    # order only where the renamed swap is proved (pool.py), not on tiny_cached's 4 x 4
    # pool (analysis.RENAMED_SWAP_LIMIT): there the reference explorer is asked to name
    # requests by arrival too, and the two quotients are again the same.
    _agree(entries, same_states=True, reference_symmetric=_slots_ordered(entries))


def _slots_ordered(entries):
    """Whether the array search of these entries puts the slots in a canonical order."""
    m = manifest.load()
    nc = manifest.with_bounds(m.configs[entries[0].config], **dict(entries[0].bounds))
    family, bounds = family_of(nc), symbolic_bounds(nc)
    cfg = family.model.rule_config(family.base)
    props = [catalogue.get(e.property, **dict(e.params)) for e in entries]
    search = Search(family.model, cfg, props, explore.menu(bounds, cfg), bounds.slots,
                    bounds.depth, Options(), time.monotonic() + 600)
    return search.pool_order


@pytest.mark.parametrize("name", ["kv_blocks_conserved", "computed_within_tokens",
                                  "admitted_with_tokens", "resumed_recomputes_all",
                                  "prefix_hit_whole_blocks"])
def test_a_small_cache_is_searched_as_the_reference_searches_it(name):
    # the fast sibling of the cached entries: the same comparison on a 2-block pool,
    # state counts included
    prop = catalogue.get(name)
    ref = explore.check(prop, Family(SMALL_CACHED), SMALL_BOUNDS, 300)
    arr = ax.check(prop, Family(SMALL_CACHED), SMALL_BOUNDS, 300,
                   options=Options(merge_max_tokens=False))
    assert (arr.status, arr.depth, arr.workload) == (ref.status, ref.depth, ref.workload)
    assert arr.stats.states == ref.stats.states


# ---- the pool in the key -------------------------------------------------------------------

def _pool_search(props=("kv_blocks_conserved",)):
    engine = registry.get("vllm-v1")
    cfg = engine.rule_config(SMALL_CACHED)
    search = Search(engine, cfg, [catalogue.get(p) for p in props],
                    explore.menu(SMALL_BOUNDS, cfg), 2, 2, Options(), time.monotonic() + 600)
    search._columns()
    search.visited, search._pending = Visited(), []
    return engine, cfg, search


def _keys(search, states, specs, d):
    """The search's keys of some states (one pass, so one codec packs them all)."""
    values = [values_of(s) for s in states]
    src = {}
    for k, c in search.ci.items():
        if k[0] == "leaf":
            src[c] = np.array([int(v[k[1]]) for v in values])
        elif k[0] == "spec":
            src[c] = np.array([getattr(sp[k[1]], k[2]) for sp in specs])
        else:
            src[c] = np.full(len(states), 2 if k[0] == "arrived" else 0)
    search._retire(src)
    return search._words(src, d, lambda x: x, len(states))


def _swapped(state, rename):
    """Slots 0 and 1 swapped, their own hash ids renamed along (`rename`), and pool
    blocks 0 and 1 swapped (table entries renamed along)."""
    def entry(v):
        return {1: 2, 2: 1}.get(v, v)
    slots = tuple(replace(x, table=tuple(entry(v) for v in x.table))
                  for x in reversed(state.slots))
    blocks = tuple(replace(b, block_hash=rename(b.block_hash)) for b in reversed(state.pool))
    return replace(state, slots=slots, pool=blocks)


def test_the_pool_key_names_blocks_hashes_and_slots_as_the_reference_does():
    engine, cfg, search = _pool_search()
    assert search.pool is not None and search.pool.blocks == 2
    # r0 finishes at once (its block stays cached, free: its hash is gone), r1 runs on a
    # block of its own hash
    specs = [SlotSpec(3, 1, 1, 0, 0, 0, 0), SlotSpec(2, 2, 1, 0, 0, 0, 0)]
    state = engine.initial_state(2, cfg)
    for _ in range(2):
        state, _ = engine.step(CONCRETE, cfg, specs, state, [False, False])
    assert [x.status for x in state.slots] == [FINISHED, RUNNING]
    assert [b.block_hash for b in state.pool] == [1, 3] and state.pool[1].ref_cnt == 1

    def rename(h):
        return pool.rename_hash(h, 0, cfg.table_len, lambda c, x, y: x if c else y,
                                lambda *xs: all(xs))
    other = _swapped(state, rename)
    assert other.slots[0].table == (1, 0) and other.pool[0].block_hash == 1
    # a finished request's hash with another id, and one that is no hash at all
    gone_elsewhere = replace(state, pool=(replace(state.pool[0], block_hash=2),
                                          state.pool[1]))
    bare = replace(state, pool=(replace(state.pool[0], block_hash=0), state.pool[1]))
    keys = _keys(search, [state, other, gone_elsewhere, bare],
                 [specs, specs[::-1], specs, specs], 2)
    assert (keys[0] == keys[1]).all() and (keys[0] == keys[2]).all()
    assert not (keys[0] == keys[3]).all()


def test_the_slot_order_of_the_pool_key_rests_on_a_proof():
    engine = registry.get("vllm-v1")
    cfg = engine.rule_config(SMALL_CACHED)
    assert analysis.renamed_swap(engine, cfg, 2, frozenset({"scheduled", "blocks"}))
    # the slot index itself does not follow a swap: no canonical order for a property
    # that reads it
    assert not analysis.renamed_swap(engine, cfg, 2, frozenset({"arrival_time"}))
    reads_index = catalogue.Property(
        "arrival_probe", "step", "reads every slot's arrival_time",
        lambda ops, steps, t: ops.and_(*[o.arrival_time >= 0 for o in steps[t].slots]))
    probe = Search(engine, cfg, [reads_index], explore.menu(SMALL_BOUNDS, cfg), 2, 2,
                   Options(), time.monotonic() + 600)
    assert probe.pool is not None and not probe.pool_order
    plain = _pool_search()[2]
    assert plain.pool is not None and plain.pool_order


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
