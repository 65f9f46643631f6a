"""The array explorer: breadth-first search over an engine's RULES, a whole frontier of
(state, environment choice) pairs per pass, on arrays (model/core/array_ops.py).

The environment is the reference explorer's and BMC's at the same Bounds: before each step
any sequence of requests from the menu of kinds may arrive (at most `slots` in all, in
arrival order, so slot index = arrival_time), and after scheduling any subset of the
requests that sample a token may sample EOS. Arrivals of one step are enumerated as
ordered sequences: their order is the FCFS queue order (model/core/rule_parts.py
`arrive_at_tail` gives them tail keys in slot order) and the PRIORITY tie-break
(arrival_time), so two orders of the same kinds are different states, and no reduction to
multisets is sound for these rules. Symmetry reduction applies after the step instead,
where z3 proved it sound (checker/methods/array/analysis.py). Where z3 proves that a
request's max_tokens steers nothing but its stop by length (checker/methods/array/kinds.py),
`check_many` starts requests of the menu's largest max_tokens only (their twins), which may
stop by EOS wherever a smaller one stops by length.

A state is a row of small ints: the rule state's leaves, each arrived request's kind, how
many requests arrived, and the observables of the last steps a property reads
(checker/methods/array/history.py); its key (what deduplication compares) drops what
`same_behaviour` says steers nothing, ranks the order keys, resets retired slots and sorts
interchangeable slots. The first layer at which a property fails gives the shortest
violation. While the space is small (`PATHS_UNTIL` states) the search keeps, for every
state, the least path by checker/methods/minimize.py's order (fewest requests, then
arrival step, prompt_len, ..., then EOS choices), so the counterexample is the least one,
the reference explorer's and BMC's; past that the search streams in bounded memory, and
a violation it finds there is searched again to its depth keeping the least paths.
Every counterexample is replayed on the reference by the caller (jobs.explored). A lasso
(`never_finishes`) is a cycle of the arrival-free graph through a state that holds a
request whose whole sequence fits max_model_len, as in checker/methods/explore.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from model.core.array_ops import numpy_module

numpy_module()  # one line naming the extra to install, before any numpy import below

from checker.methods.array.kinds import (  # noqa: E402
    MAX_TOKENS_READS,
    max_tokens_merged,
    max_tokens_twins,
)
from checker.methods.array.search import Options, Outcome, Search, Witness  # noqa: E402
from checker.methods.explore import (  # noqa: E402
    ExploreResult,
    ExploreStats,
    Kind,
    explore_family,
    menu,
)
from checker.methods.symbolic import Bounds, Family  # noqa: E402
from model import registry as engines  # noqa: E402, F401  (tests patch ax.engines.get)
from model.core.engine import EngineModel  # noqa: E402
from model.core.types import EosEvent, Workload  # noqa: E402
from properties.catalogue import Property  # noqa: E402
from properties.reads import merged, reads  # noqa: E402

__all__ = ["Options", "check", "check_many", "options_for", "supports", "unsupported",
           "workload_of"]


def supports(family: Family) -> str | None:
    """None when the engine's rules step a frontier of arrays at this config, else why
    not (a rule that branches on a value, a state leaf that is not an int): the caller then
    keeps the reference explorer."""
    import numpy as np

    from checker.methods.array.layout import build, leaves_of, values_of
    from model.core.array_ops import ArrayOps
    from model.core.types import SlotSpec

    engine = family.model
    try:
        rule_cfg = engine.rule_config(family.base)
        state = engine.initial_state(2, rule_cfg)
        leaves_of(state)
        values = values_of(state)
        state = build(state, lambda p: np.full(2, values[p]), state.step)
        kinds = menu(Bounds(slots=2, depth=1), rule_cfg)[:2]
        specs = [SlotSpec(np.array([k.prompt_len for k in kinds] * (3 - len(kinds)))[:2],
                          np.array([k.max_tokens for k in kinds] * (3 - len(kinds)))[:2],
                          1), SlotSpec(1, 1, 0)]
        engine.step(ArrayOps(np), rule_cfg, specs, state, [np.array([False, True])] * 2)
    except (TypeError, ValueError, IndexError) as exc:
        return f"{family.engine}'s rules do not step on arrays: {exc}"
    return None


# The key of EngineModel.extra by which an engine says its rules on arrays were
# cross-checked against its reference explorer (tests/test_array_explore.py).
ARRAY_CHECKED = "array_explorer_checked"

# A check keeps each state's least run while the states it has visited and the layer's
# candidates number at most this many (family F's N=4 search peaks at 1.5 GB with 2M,
# 0.87 GB with 1M, 0.79 GB streamed): a violation found by then is answered by one
# search; past it the search streams in bounded memory, and a violation is searched once
# more for its least run.
PATHS_UNTIL = 1_000_000


def unsupported(family: Family, bounds: Bounds) -> str | None:
    """None when this explorer searches exactly the environment of `bounds` on `family`
    as BMC and the reference explorer do, else why not (the caller keeps the reference
    explorer). Covered: vLLM V1 without speculative decoding, with or without prefix
    caching and the AsyncScheduler (the synchronous, cache-free setting cross-checked
    state for state against SPIN, docs/bench_scale.md; every setting verdict for verdict
    and least counterexample for least counterexample against the reference explorer on
    the manifest, tests/test_array_explore.py and tests/test_array_modes.py); requests of
    a shared prefix group or with a cached prefix (Bounds.prefix_groups,
    max_cached_prefix_len: request kinds of the menu, as for the reference explorer);
    bounds with an arrival window and with EOS off (`options_for`). Speculative decoding
    is out of scope: its environment also chooses accepted drafts and draft counts per
    step (EngineModel.step_choices), which this search does not enumerate."""
    engine = family.model
    if not (engine.extra or {}).get(ARRAY_CHECKED):
        return (f"the array explorer is not cross-checked against {family.engine}'s "
                "reference explorer")
    cfg = family.base
    if getattr(cfg, "num_speculative_tokens", 0) > 0 or getattr(cfg, "speculative_method", ""):
        return "the array explorer does not model speculative decoding"
    if family.ranges and any(name == "num_speculative_tokens" for name, _, _ in family.ranges):
        return "the array explorer does not model a family ranging over speculative decoding"
    if engine.symbolic_limit is not None and not family.ranges:
        # It steps the exact rules over the config's whole pool, block by block.
        too_big = engine.symbolic_limit(engine.rule_config(cfg))
        if too_big is not None:
            return f"the array explorer carries the exact pool, {too_big}"
    return supports(family)


def options_for(bounds: Bounds, options: Options | None = None) -> Options:
    """`options` (default Options()) with the environment of `bounds` that the Options
    carry: requests arrive in steps 1..arrival_window only, and no EOS under no_eos.
    Bounds with neither (the defaults) leave the options as they are."""
    opts = options or Options()
    if bounds.arrival_window > 0 and opts.arrival_steps is None:
        opts = replace(opts, arrival_steps=bounds.arrival_window)
    if bounds.no_eos and not opts.no_eos:
        opts = replace(opts, no_eos=True)
    return opts


def workload_of(family: Family, kinds: Sequence[Kind], w: Witness, steps: int) -> Workload:
    """The workload of a run: ids r0, r1, ... in arrival order (slot order)."""
    requests, eos = [], []
    n = 0
    for step, arrived in enumerate(w.arrivals, start=1):
        for k in arrived:
            requests.append(kinds[k].spec(f"r{n}", step))  # its prefix group too
            n += 1
    for step, mask in enumerate(w.eos, start=1):
        eos += [EosEvent(f"r{i}", step) for i in range(mask.bit_length()) if mask >> i & 1]
    return Workload(config=family.base, requests=tuple(requests), eos=tuple(eos),
                    steps=steps, engine=family.engine)


def check(prop: Property, family: Family, bounds: Bounds, timeout_s: float,
          symmetric: bool = True, options: Options | None = None) -> ExploreResult:
    """Search to `bounds.depth` for a violation of `prop` (see the module docstring)."""
    return check_many((prop,), family, bounds, timeout_s, symmetric, options)[0]


def check_many(props: Sequence[Property], family: Family, bounds: Bounds, timeout_s: float,
               symmetric: bool = True, options: Options | None = None
               ) -> tuple[ExploreResult, ...]:
    """Several step/window properties in one search (or one property of any kind). A
    ranged family is searched config by config, as the reference explorer does."""
    opts = replace(options_for(bounds, options), symmetric=symmetric)
    if len(props) > 1 and any(p.kind == "lasso" for p in props):
        raise ValueError("a lasso property is searched alone")
    if not family.ranges:
        return _one(props, family, bounds, time.monotonic() + timeout_s, opts)

    def explore_member(single: Family, deadline: float) -> tuple[ExploreResult, ...]:
        return _one(props, single, bounds, deadline, opts)

    return explore_family(props, family, bounds, timeout_s, explore_member, _workload_key)


def _workload_key(w: Workload | None) -> tuple[object, ...]:
    """minimize.py's order on workloads of one length."""
    assert w is not None
    specs = [x for r in w.arrival_order() for x in (r.arrival_step, r.prompt_len,
                                                      r.max_tokens, r.priority,
                                                      r.cached_prefix_len)]
    n = len(w.requests)
    eos_steps = w.eos_steps()
    bits = [int(t in eos_steps.get(f"r{i}", ())) for t in range(1, w.steps + 1)
            for i in range(n)]
    return (n, specs, bits)


def _one(props: Sequence[Property], family: Family, bounds: Bounds, deadline: float,
         opts: Options) -> tuple[ExploreResult, ...]:
    engine = family.model
    rule_cfg = engine.rule_config(family.base)
    kinds = menu(bounds, rule_cfg)
    start = time.monotonic()

    twins = _twins(props, engine, rule_cfg, kinds, bounds.slots, opts)

    def search(ps: Sequence[Property], depth: int, o: Options,
               among: Sequence[Kind] = kinds) -> Outcome:
        return Search(engine, rule_cfg, ps, among, bounds.slots, depth, o, deadline).run()

    def stats(out: Outcome) -> ExploreStats:
        if twins is None:
            return ExploreStats(out.states, out.transitions, out.depth_reached,
                                time.monotonic() - start, len(kinds))
        return ExploreStats(out.states, out.transitions, out.depth_reached,
                            time.monotonic() - start, len(twins),
                            f"of {len(kinds)} in the menu: a request of a smaller "
                            "max_tokens is searched as its twin of the largest, which may "
                            "stop by EOS wherever it stops by length (proved, "
                            "checker/methods/array/kinds.py)")

    if props and props[0].kind == "lasso":
        out = search(props, bounds.depth, replace(opts, least=True, keep_edges=True,
                                                  symmetric=False))
        if not out.complete:
            return (ExploreResult("unknown", out.depth_reached, stats(out),
                                  reason=out.reason),)
        lasso = _lasso(out, bounds.depth, len(kinds), bounds.slots)
        if lasso is None:
            return (ExploreResult("holds", bounds.depth, stats(out)),)
        w, loop, depth = lasso
        return (ExploreResult("violated", depth, stats(out),
                              workload_of(family, kinds, w, depth), loop),)
    # Paths (with each state's least run) are kept while the space is small, so that a
    # violation found there needs no second search for its least run.
    if twins is None:
        first = search(props, bounds.depth, replace(opts, least=True, paths_until=PATHS_UNTIL))
    else:
        # The twins' runs are not the least ones (those prefer a small max_tokens to an
        # EOS): a violation is searched again on the whole menu, to its depth, which the
        # simulation keeps, and without EOS, where the least run is (kinds.py).
        first = search(props, bounds.depth, opts, twins)
    results: list[ExploreResult | None] = [None] * len(props)
    for i, (d, w) in first.violated.items():
        if twins is None and d <= first.paths_depth:
            results[i] = ExploreResult("violated", d, stats(first),
                                       workload_of(family, kinds, w, d))
    violated = sorted(i for i in first.violated if results[i] is None)
    if violated:
        depth = max(first.violated[i][0] for i in violated)
        least = search([props[i] for i in violated], depth,
                       replace(opts, least=True, no_eos=opts.no_eos or twins is not None))
        for k, i in enumerate(violated):
            if k not in least.violated:
                raise AssertionError(f"{props[i].name}: the least search found no violation "
                                     f"by depth {depth}, the first at "
                                     f"{first.violated[i][0]}")
            d, w = least.violated[k]
            if d != first.violated[i][0]:
                raise AssertionError(f"{props[i].name}: the least search fails at depth {d}, "
                                     f"the first at {first.violated[i][0]}")
            results[i] = ExploreResult("violated", d, stats(first),
                                       workload_of(family, kinds, w, d))
    for i in range(len(props)):
        if results[i] is None:
            if first.complete:
                results[i] = ExploreResult("holds", bounds.depth, stats(first))
            else:
                results[i] = ExploreResult("unknown", first.depth_reached, stats(first),
                                           reason=first.reason)
    return tuple(r for r in results if r is not None)


def _twins(props: Sequence[Property], engine: EngineModel, rule_cfg: object,
           kinds: Sequence[Kind], slots: int, opts: Options) -> list[Kind] | None:
    """The kinds a search of `props` may start requests of instead of the whole menu
    (the largest max_tokens, checker/methods/array/kinds.py), or None: the option is off,
    no request samples EOS, a property is a lasso (it reads whether a request's whole
    sequence fits) or reads max_tokens or finished_stop, or z3 did not prove it."""
    if not opts.merge_max_tokens or opts.no_eos or any(p.kind == "lasso" for p in props):
        return None
    twins = max_tokens_twins(kinds)
    if twins is None:
        return None
    read = merged([reads(p, rule_cfg, slots) for p in props]).all_slot_fields()
    if read & MAX_TOKENS_READS or not max_tokens_merged(engine, rule_cfg, slots):
        return None
    return twins


def _lasso(out: Outcome, depth: int, num_kinds: int, slots: int
           ) -> tuple[Witness, int, int] | None:
    """The least lasso: shortest run (path to the loop start + cycle), then least by
    minimize.py's order; the cycle starts with an edge on which a request that fits is
    held (the reference explorer's `stuck` edge)."""
    import networkx as nx

    if out.edges is None or out.depth_of is None:
        return None
    src, dst, stuck, eos = out.edges
    graph = nx.MultiDiGraph()
    for s, t, st, e in zip(src.tolist(), dst.tolist(), stuck.tolist(), eos.tolist(),
                           strict=True):
        if t >= 0:
            graph.add_edge(s, t, stuck=st, eos=_request_order(e, slots))
    best: tuple[tuple[object, ...], Witness, int, int] | None = None
    starts = sorted({s for s, _, st in graph.edges(data="stuck") if st},
                    key=lambda v: int(out.depth_of[v]))
    reverse = graph.reverse(copy=False)
    for v in starts:
        dv = int(out.depth_of[v])
        if dv >= depth:
            continue
        dist = nx.single_source_shortest_path_length(reverse, v)
        options = [(1 + dist[t], e) for _, t, e in graph.out_edges(v, data=True)
                   if e["stuck"] and t in dist]
        if not options:
            continue
        length = min(L for L, _ in options)
        if dv + length > depth:
            continue
        labels, node = [], v
        for hop in range(length):
            left = length - hop - 1
            choices = [(e["eos"], t) for _, t, e in graph.out_edges(node, data=True)
                       if dist.get(t, -1) == left and (hop > 0 or e["stuck"])
                       and (left > 0 or t == v)]
            label, node = min(choices)
            labels.append(label)
        prefix = out.witness_of(v)
        cycle_eos = tuple(_slot_order(x, slots) for x in labels)
        w = Witness(prefix.arrivals + ((),) * length, prefix.eos + cycle_eos)
        key = (dv + length, _witness_key(w, slots))
        if best is None or key < best[0]:
            best = (key, w, dv, dv + length)
    if best is None:
        return None
    return best[1], best[2], best[3]


def _request_order(mask: int, n: int) -> int:
    """EOS bits with request r0 most significant (minimize.py compares r0 first)."""
    return sum(1 << (n - 1 - i) for i in range(n) if mask >> i & 1)


def _slot_order(code: int, n: int) -> int:
    return sum(1 << i for i in range(n) if code >> (n - 1 - i) & 1)


def _witness_key(w: Witness, slots: int) -> tuple[object, ...]:
    n = sum(len(a) for a in w.arrivals)
    specs = [(step, k) for step, a in enumerate(w.arrivals, start=1) for k in a]
    bits = [mask >> i & 1 for mask in w.eos for i in range(n)]
    return (n, specs, bits)
