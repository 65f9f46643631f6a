"""Bounded explicit-state exploration over an engine's reference scheduler (networkx).

The second method beside BMC, independent of the z3 encoding: it walks the reference
scheduler's reachable states breadth-first, one transition per scheduler step, and evaluates
the same properties (under ConcreteOps) on the reference's own Step observables.

The environment is the BMC's, at the same bounds: at each step of the arrival window
(Bounds.last_arrival) any sequence of requests may arrive, drawn from the menu of request
kinds the bounds allow (prompt_len, max_tokens, priority, cached_prefix_len, prefix group and
shared length), at most `slots` requests in all; after scheduling, any subset of the
requests that sample a token may sample EOS (none under Bounds.no_eos).

A node is a canonical key: the number of requests that have arrived, the scheduler's
`state_key` (requests named by queue position, so interchangeable requests coincide: the
symmetry reduction), and what the property still needs to see of the past (the last
window-1 steps' observables and preemption counts, per request). Breadth-first order gives
the shortest violation; among the paths that reach a node at its depth the least workload by
the minimality order of checker/methods/minimize.py is kept, so the counterexample is the least one
the explorer sees. A lasso (a request that never finishes) is a reachable cycle through a
node that holds a request whose whole sequence fits max_model_len.
"""

from __future__ import annotations

import copy
import functools
import itertools
import operator
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

from checker.methods import exploration_memo
from checker.methods.minimize import group_fields
from checker.methods.symbolic import Bounds, Family, longest_prompt
from model.core.engine import EngineModel, ReferenceScheduler
from model.core.observe import StepFold
from model.core.ops import CONCRETE
from model.core.types import (
    AcceptEvent,
    DraftEvent,
    EosEvent,
    RequestSpec,
    SlotObs,
    Step,
    StepRecord,
    Workload,
)
from properties.catalogue import Property
from properties.reads import reads

if TYPE_CHECKING:
    import networkx as nx

# SlotObs fields that name a slot by its index, not by what it holds.
_POSITIONAL = {"arrival_time"}
_STEP_FIELDS = ("free_blocks", "free_blocks_end", "token_budget_left", "num_running",
                "num_running_end", "any_preempted")


@dataclass(frozen=True, slots=True)
class Kind:
    """One request kind of the menu."""

    prompt_len: int
    max_tokens: int
    priority: int = 0
    cached_prefix_len: int = 0
    prefix_group: int = 0
    shared_prefix_len: int = 0

    def spec(self, rid: str, arrival_step: int) -> RequestSpec:
        """The request of this kind arriving at `arrival_step`."""
        return RequestSpec(rid, self.prompt_len, self.max_tokens, arrival_step, self.priority,
                           self.cached_prefix_len,
                           **group_fields(self.prefix_group, self.shared_prefix_len))


@dataclass(frozen=True, slots=True)
class ExploreStats:
    """How big the search was."""

    states: int
    transitions: int
    depth_reached: int
    seconds: float
    kinds: int
    # A reduction of the menu the search made (empty: none), for the verdict's detail.
    note: str = ""

    @property
    def states_per_second(self) -> float:
        """Distinct states found per second of exploring."""
        return self.states / self.seconds if self.seconds > 0 else float(self.states)


@dataclass(frozen=True, slots=True)
class ExploreResult:
    """HOLDS up to `depth`, VIOLATED at `depth` with a workload (and loop), or UNKNOWN."""

    status: str  # "holds" | "violated" | "unknown"
    depth: int
    stats: ExploreStats
    workload: Workload | None = None
    loop: int | None = None
    reason: str = ""
    graph: nx.DiGraph | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class _Path:
    """What the environment chose so far: per step, the arrivals, the EOS ids and the
    other choices of the engine's `step` (speculative decoding: drafts accepted by id,
    drafts proposed by id; empty in a run without any)."""

    arrivals: tuple[tuple[Kind, ...], ...] = ()
    eos: tuple[tuple[str, ...], ...] = ()
    choices: tuple[tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]], ...] = ()

    @property
    def num_requests(self) -> int:
        return sum(len(a) for a in self.arrivals)

    def sort_key(self) -> tuple[object, ...]:
        """checker/methods/minimize.py's order after the step count: fewest requests, then per
        request in arrival order (arrival_step, prompt_len, max_tokens, priority,
        cached_prefix_len, prefix_group, shared_prefix_len), then the EOS choices step by
        step, slot by slot."""
        specs: list[int] = []
        for step, kinds in enumerate(self.arrivals, start=1):
            for k in kinds:
                specs += [step, k.prompt_len, k.max_tokens, k.priority, k.cached_prefix_len,
                          k.prefix_group, k.shared_prefix_len]
        n = self.num_requests
        eos = [int(f"r{i}" in ids) for ids in self.eos for i in range(n)]
        # minimize.py: then drafts accepted, then drafts not proposed (k less the count)
        accepted = [dict(a).get(f"r{i}", 0) for a, _ in self.choices for i in range(n)]
        proposed = [-dict(d).get(f"r{i}", 10**9) for _, d in self.choices for i in range(n)]
        return (n, specs, eos, accepted, proposed)


@dataclass(slots=True)
class _Node:
    key: Hashable
    scheduler: ReferenceScheduler
    path: _Path
    records: tuple[StepRecord, ...]
    steps: tuple[Step, ...] = ()  # the observables of `records`
    observer: StepFold | None = None  # the engine's fold after `records` (None: none kept)


def menu(bounds: Bounds, rule_cfg: object) -> tuple[Kind, ...]:
    """The request kinds BMC's slot constraints allow (checker/symbolic.slot_specs)."""
    priorities = range(bounds.max_priority + 1) if rule_cfg.policy_priority else (0,)
    kinds = []
    for p in range(1, min(bounds.max_prompt_len, longest_prompt(rule_cfg)) + 1):
        for m in range(1, bounds.max_max_tokens + 1):
            for pr in priorities:
                for c in range(min(bounds.max_cached_prefix_len, p) + 1):
                    kinds.append(Kind(p, m, pr, c))
                    kinds += [Kind(p, m, pr, c, g, shared)
                              for g in range(1, bounds.prefix_groups + 1)
                              for shared in range(1, p + 1)]
    return tuple(kinds)


def workload_of(family: Family, path: _Path, steps: int) -> Workload:
    """The workload a path describes; ids r0, r1, ... in arrival order."""
    requests, n = [], 0
    for step, kinds in enumerate(path.arrivals, start=1):
        for k in kinds:
            requests.append(k.spec(f"r{n}", step))
            n += 1
    eos = tuple(EosEvent(rid, step) for step, ids in enumerate(path.eos, start=1)
                for rid in ids)
    accepted = tuple(AcceptEvent(rid, step, c) for step, (a, _) in enumerate(path.choices, 1)
                     for rid, c in a)
    drafts = tuple(DraftEvent(rid, step, c) for step, (_, d) in enumerate(path.choices, 1)
                   for rid, c in d)
    return Workload(config=family.base, requests=tuple(requests), eos=eos, steps=steps,
                    engine=family.engine, accepted=accepted, drafts=drafts)


def _arrival_choices(kinds: Sequence[Kind], room: int) -> Iterator[tuple[Kind, ...]]:
    for n in range(room + 1):
        yield from itertools.product(kinds, repeat=n)


def _history_key(prop: Property, steps: Sequence[Step], ids: Sequence[str],
                 symmetric: bool, counts: bool = True) -> tuple[dict[str, Hashable], Hashable]:
    """Per request and per step, what the property may still read of the past: the last
    window - 1 steps' observables and, with `counts` (a property that reads
    `num_preemptions`, which counts from the request's arrival), each request's count so
    far. The count steers no decision (the engine's `state_key` leaves it out), so a
    property that never reads it loses nothing when two states differ only by it."""
    past = steps[len(steps) - (prop.window - 1):] if prop.window > 1 else ()
    per_request: dict[str, Hashable] = {}
    for i, rid in enumerate(ids):
        seen = tuple(_slot_key(s.slots[i]) for s in past if i < len(s.slots))
        count = () if prop.kind == "lasso" or not steps or not counts else \
            (steps[-1].slots[i].num_preemptions,)
        per_request[rid] = (seen, count, None if symmetric else rid)
    global_ = tuple(tuple(getattr(s, f) for f in _STEP_FIELDS) for s in past)
    return per_request, global_


def _reads_preemptions(props: Sequence[Property], rule_cfg: object, slots: int) -> bool:
    """Whether one of the properties reads a request's `num_preemptions` at some step of
    its window (found by evaluating it once on recording steps, properties/reads.py, as
    the array explorer finds what its key must carry). Where that probe cannot evaluate a
    property, the count is kept."""
    try:
        return any("num_preemptions" in reads(p, rule_cfg, slots).all_slot_fields()
                   for p in props)
    except (TypeError, ValueError, AttributeError, ArithmeticError, LookupError):
        return True


def _slot_key(o: SlotObs) -> tuple[object, ...]:
    return _slot_key_getter(type(o))(o)


@functools.cache
def _slot_key_getter(kind: type) -> Callable[[SlotObs], tuple[object, ...]]:
    """The fields `_slot_key` reads, looked up once per class (`fields` per slot was a
    tenth of a search)."""
    names = [f.name for f in fields(kind) if f.name not in _POSITIONAL]
    getter = operator.attrgetter(*names)
    return getter if len(names) > 1 else lambda o: (getter(o),)


class Explorer:
    """One bounded exploration of one configuration for one or more properties.

    Several step properties share one exploration (their state keys are the same): each is
    decided at its first violating layer exactly as if explored alone, because up to that
    layer no path violates it and the kept paths are the same."""

    def __init__(self, props: Sequence[Property], family: Family, bounds: Bounds,
                 timeout_s: float, symmetric: bool = True, keep_graph: bool = False,
                 max_states: int = 2_000_000) -> None:
        if len(props) > 1 and any(p.kind != "step" for p in props):
            raise ValueError("only step properties share an exploration")
        self.props, self.family, self.bounds = tuple(props), family, bounds
        self.prop = self.props[0]  # the key shape: window and kind are the same for all
        self.engine: EngineModel = family.model
        self.rule_cfg = self.engine.rule_config(family.base)
        self.kinds = menu(bounds, self.rule_cfg)
        self.deadline = time.monotonic() + timeout_s
        self.symmetric, self.keep_graph, self.max_states = symmetric, keep_graph, max_states
        self.counts = _reads_preemptions(self.props, self.rule_cfg, bounds.slots)
        # networkx is imported here, not at the top: `check` imports this module on every
        # call, and most calls never build this graph (about 0.1 s of the CLI's start).
        import networkx as nx

        self.graph = nx.DiGraph()
        self.nodes: dict[Hashable, _Node] = {}  # the kept representative of each key
        self.transitions = 0
        self.start = time.monotonic()

    def run(self) -> ExploreResult:
        """The result for the first (or only) property."""
        return self.run_all()[0]

    def run_all(self) -> tuple[ExploreResult, ...]:
        """Breadth-first to `bounds.depth`; each property's first violating layer gives its
        result, and the search stops when every property is decided."""
        root = self.engine.scheduler(self.family.base)
        first = _Node(self._key(root, 0, (), ()), root, _Path(), ())
        self.graph.add_node(first.key, depth=0)
        self.nodes[first.key] = first
        layer = {first.key: first}
        found: dict[int, tuple[int, _Node]] = {}
        for depth in range(1, self.bounds.depth + 1):
            violations, layer, reason = self._expand(layer, depth, found)
            if reason:
                return tuple(self._decided(i, found) if i in found
                             else self._result("unknown", depth - 1, reason=reason)
                             for i in range(len(self.props)))
            for i, nodes in violations.items():
                found[i] = (depth, min(nodes, key=lambda n: n.path.sort_key()))
            if len(found) == len(self.props) or not layer:
                break
        if self.prop.kind == "lasso":
            lasso = self._lasso()
            if lasso is not None:
                node, loop, depth = lasso
                return (self._result("violated", depth, loop=loop,
                                     workload=workload_of(self.family, node.path, depth)),)
        return tuple(self._decided(i, found) if i in found
                     else self._result("holds", self.bounds.depth)
                     for i in range(len(self.props)))

    def _decided(self, i: int, found: dict[int, tuple[int, _Node]]) -> ExploreResult:
        depth, node = found[i]
        return self._result("violated", depth, workload=workload_of(self.family, node.path,
                                                                     depth))

    # ---- one layer ----------------------------------------------------------------------

    def _expand(self, layer: dict[Hashable, _Node], depth: int,
                found: dict[int, tuple[int, _Node]]
                ) -> tuple[dict[int, list[_Node]], dict[Hashable, _Node], str]:
        nxt: dict[Hashable, _Node] = {}
        violations: dict[int, list[_Node]] = {}
        pending = [i for i in range(len(self.props)) if i not in found]
        for node in sorted(layer.values(), key=lambda n: n.path.sort_key()):
            for child, steps in self._successors(node, depth):
                self.transitions += 1
                if time.monotonic() > self.deadline:
                    return {}, nxt, "time limit"
                failing = [i for i in pending if self.props[i].kind != "lasso"
                           and not self.props[i].holds(CONCRETE, steps, len(steps) - 1)]
                for i in failing:
                    violations.setdefault(i, []).append(child)
                if len(failing) == len(pending):
                    continue
                self._add_edge(node, child, steps[-1])
                if child.key in self.graph.nodes and "depth" in self.graph.nodes[child.key]:
                    continue
                old = nxt.get(child.key)
                if old is None or child.path.sort_key() < old.path.sort_key():
                    nxt[child.key] = child
            if len(self.graph) > self.max_states:
                return {}, nxt, f"state limit {self.max_states}"
        for key, node in nxt.items():
            self.graph.nodes[key]["depth"] = depth
            self.nodes[key] = node
        return violations, nxt, ""

    def _add_edge(self, node: _Node, child: _Node, last: Step) -> None:
        # A crashed engine (an assertion of its own) is not a livelock.
        fits = not last.assertion and any(
            o.held and o.prompt_len + o.max_tokens <= last.cfg.max_model_len
            for o in last.slots)
        if not self.graph.has_edge(node.key, child.key):
            self.graph.add_edge(node.key, child.key, stuck=fits)

    def _successors(self, node: _Node, depth: int, arrivals_allowed: bool = True
                    ) -> Iterator[tuple[_Node, tuple[Step, ...]]]:
        # Arrivals only within the arrival window (Bounds.last_arrival), as BMC bounds
        # arrival_step; EOS choices only when the bounds allow EOS (Bounds.no_eos).
        if depth > self.bounds.last_arrival():
            arrivals_allowed = False
        room = self.bounds.slots - node.path.num_requests if arrivals_allowed else 0
        for kinds in _arrival_choices(self.kinds, room):
            arrived = copy.deepcopy(node.scheduler)
            n = node.path.num_requests
            for j, k in enumerate(kinds):
                arrived.add_request(k.spec(f"r{n + j}", depth))
            arrivals = (*node.path.arrivals, kinds)
            probe = copy.deepcopy(arrived)
            plain: tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = ((), ())
            child, steps = self._child(node, probe, self._path(node, arrivals, (), plain),
                                       depth, probe.step(frozenset()))
            yield child, steps
            sampled = [f"r{i}" for i, o in enumerate(steps[-1].slots) if o.sampled]
            if self.bounds.no_eos:
                sampled = []
            others = self.engine.step_choices(probe) if self.engine.step_choices else ()
            for kwargs in ({}, *others):
                choice = (tuple(sorted(kwargs.get("accepted", {}).items())),
                          tuple(sorted(kwargs.get("drafts", {}).items())))
                for size in range(0 if kwargs else 1, len(sampled) + 1):
                    for ids in itertools.combinations(sampled, size):
                        sched = copy.deepcopy(arrived)
                        record = sched.step(frozenset(ids), **kwargs)
                        yield self._child(node, sched, self._path(node, arrivals, ids, choice),
                                          depth, record)

    def _path(self, node: _Node, arrivals: tuple[tuple[Kind, ...], ...], eos: tuple[str, ...],
              choice: tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]
              ) -> _Path:
        """The node's path extended by one step's choices (the other choices only where
        the engine has them)."""
        choices = node.path.choices
        if self.engine.step_choices is not None:
            choices = (*choices, choice)
        return _Path(arrivals, (*node.path.eos, eos), choices)

    def _child(self, node: _Node, sched: ReferenceScheduler, path: _Path, depth: int,
               record: StepRecord) -> tuple[_Node, tuple[Step, ...]]:
        records = (*node.records, record)
        make = self.engine.observer
        if make is not None and node.observer is not None and (
                path.num_requests == node.path.num_requests):
            # No arrival this step: the run's workload is the parent's, and observing is a
            # fold over the records, so only the new record is observed (re-observing the
            # whole run at every transition was 20-30 % of a search).
            observer = node.observer.copy()
            steps = (*node.steps, observer.advance(record))
        elif make is not None:
            # An arrival adds a request, and a slot to every earlier step: observed anew.
            observer = make(workload_of(self.family, path, depth))
            steps = tuple(observer.advance(r) for r in records)
        else:
            observer = None
            steps = self.engine.observe(workload_of(self.family, path, depth), records)
        ids = [f"r{i}" for i in range(path.num_requests)]
        key = self._key(sched, path.num_requests, steps, ids)
        return _Node(key, sched, path, records, steps, observer), steps

    def _key(self, sched: ReferenceScheduler, arrived: int, steps: Sequence[Step],
             ids: Sequence[str]) -> Hashable:
        per_request, global_ = _history_key(self.prop, steps, ids, self.symmetric,
                                            self.counts)
        return (arrived, sched.state_key(per_request), global_)

    # ---- lassos -------------------------------------------------------------------------

    def _lasso(self) -> tuple[_Node, int, int] | None:
        """The cycle closing earliest: loop start v at BFS depth dv, cycle length L, run
        length dv + L within the depth bound, v holding a request that fits."""
        best: tuple[int, tuple[object, ...], _Node, int] | None = None
        for v, data in self.graph.nodes(data=True):
            dv = data.get("depth")
            if dv is None or dv >= self.bounds.depth:
                continue
            for _, s, edge in self.graph.out_edges(v, data=True):
                if not edge["stuck"]:
                    continue
                back = self._route(s, v)
                if back is None or dv + len(back) > self.bounds.depth:
                    continue
                node = self._unroll(self.nodes[v], [s, *back[1:]] if back else [s])
                candidate = (dv + len(back), node.path.sort_key(), node, dv)
                if best is None or candidate[:2] < best[:2]:
                    best = candidate
        if best is None:
            return None
        return best[2], best[3], best[0]

    def _route(self, start: Hashable, target: Hashable) -> list[Hashable] | None:
        """Nodes from start to target on a shortest path (both included)."""
        import networkx as nx

        try:
            return nx.shortest_path(self.graph, start, target)
        except nx.NetworkXNoPath:
            return None

    def _unroll(self, node: _Node, route: Sequence[Hashable]) -> _Node:
        """Re-run the cycle from `node` on the reference: at each hop, the successor (no
        arrivals, some EOS choice) whose key is the next on the route."""
        for target in route:
            depth = len(node.path.eos) + 1
            node = next(child for child, _ in self._successors(node, depth, False)
                        if child.key == target)
        return node

    def _result(self, status: str, depth: int, workload: Workload | None = None,
                loop: int | None = None, reason: str = "") -> ExploreResult:
        stats = ExploreStats(states=self.graph.number_of_nodes(), transitions=self.transitions,
                             depth_reached=depth, seconds=time.monotonic() - self.start,
                             kinds=len(self.kinds))
        return ExploreResult(status, depth, stats, workload, loop, reason,
                             self.graph if self.keep_graph else None)


MAX_FAMILY_CONFIGS = 64


def family_members(family: Family) -> list[object]:
    """Every config of a ranged family (the base alone if it has no ranges) that the engine
    accepts when the family is validated: the explorer checks a family config by config."""
    engine = family.model
    names = [name for name, _, _ in family.ranges]
    spans = [range(lo, hi + 1) for _, lo, hi in family.ranges]
    members = []
    for values in itertools.product(*spans):
        cfg = replace(family.base, **dict(zip(names, values, strict=True)))
        if family.validated and engine.rejection(cfg) is not None:
            continue
        members.append(cfg)
    return members


def check(prop: Property, family: Family, bounds: Bounds, timeout_s: float,
          symmetric: bool = True, keep_graph: bool = False) -> ExploreResult:
    """Explore to `bounds.depth` for a violation of `prop` (see the module docstring)."""
    if keep_graph and not family.ranges:
        return Explorer((prop,), family, bounds, timeout_s, symmetric, keep_graph).run()
    return check_many((prop,), family, bounds, timeout_s, symmetric)[0]


def check_many(props: Sequence[Property], family: Family, bounds: Bounds, timeout_s: float,
               symmetric: bool = True) -> tuple[ExploreResult, ...]:
    """Several step properties in one exploration (or one property of any kind). A ranged
    family is explored config by config (at most MAX_FAMILY_CONFIGS of them); a property's
    result is its shortest, then least, violation over all of them. With
    BATCHPROOF_EXPLORE_MEMO=1, a search made before by the same sources is read back
    (checker/methods/exploration_memo.py)."""
    kept = exploration_memo.recalled(props, family, bounds, symmetric)
    if kept is not None:
        return kept
    if not family.ranges:
        results = Explorer(props, family, bounds, timeout_s, symmetric).run_all()
    else:
        def explore_member(single: Family, deadline: float) -> tuple[ExploreResult, ...]:
            return Explorer(props, single, bounds, deadline - time.monotonic(),
                            symmetric).run_all()

        results = explore_family(props, family, bounds, timeout_s, explore_member,
                                 _workload_key)
    exploration_memo.keep(props, results, family, bounds, symmetric)
    return results


def explore_family(props: Sequence[Property], family: Family, bounds: Bounds,
                   timeout_s: float,
                   explore_member: Callable[[Family, float], tuple[ExploreResult, ...]],
                   workload_key: Callable[[Workload | None], tuple[object, ...]],
                   ) -> tuple[ExploreResult, ...]:
    """A ranged family's results, config by config (at most MAX_FAMILY_CONFIGS of them,
    else UNKNOWN): `explore_member(single_config_family, deadline)` explores one config, all
    of them before the one deadline. A property is UNKNOWN if some config's run is, else
    its shortest violation over all configs (ties broken by `workload_key`, the explorer's
    order on workloads of one length), else it holds; every result carries the summed
    stats. The reference explorer's `check_many` and the array explorer's share it."""
    members = family_members(family)
    if len(members) > MAX_FAMILY_CONFIGS:
        stats = ExploreStats(0, 0, 0, 0.0, 0)
        why = (f"the family has {len(members)} configs; the explorer enumerates at most "
               f"{MAX_FAMILY_CONFIGS}")
        return tuple(ExploreResult("unknown", 0, stats, reason=why) for _ in props)
    deadline = time.monotonic() + timeout_s
    runs = [explore_member(replace(family, base=cfg, ranges=()), deadline) for cfg in members]
    stats = ExploreStats(
        states=sum(r[0].stats.states for r in runs),
        transitions=sum(r[0].stats.transitions for r in runs),
        depth_reached=max(r[0].stats.depth_reached for r in runs),
        seconds=sum(r[0].stats.seconds for r in runs),
        kinds=max(r[0].stats.kinds for r in runs))
    out = []
    for i in range(len(props)):
        results = [r[i] for r in runs]
        unknown = [r for r in results if r.status == "unknown"]
        violated = [r for r in results if r.status == "violated"]
        if unknown:
            out.append(replace(unknown[0], stats=stats))
        elif violated:
            first = min(violated, key=lambda r: (r.depth, workload_key(r.workload)))
            out.append(replace(first, stats=stats))
        else:
            out.append(ExploreResult("holds", bounds.depth, stats,
                                     reason=f"{len(members)} configs of the family"))
    return tuple(out)


def _workload_key(w: Workload | None) -> tuple[object, ...]:
    assert w is not None
    specs = [x for r in w.arrival_order() for x in (
        r.arrival_step, r.prompt_len, r.max_tokens, r.priority, r.cached_prefix_len,
        int(r.prefix_group[1:]) if r.prefix_group else 0, r.shared_prefix_len)]
    return (len(w.requests), specs, sorted((e.step, e.id) for e in w.eos))
