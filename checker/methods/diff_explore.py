"""Where two schedulers decide differently, by explicit-state search over the product of
their reference schedulers: the second method of `batchproof diff` beside BMC
(checker/methods/diff.py), independent of the z3 encoding. The third, the array explorer
over the product of the two rule systems (checker/methods/array/product.py), answers the
same question the same way, far faster where it applies; `decide` below picks among them.

Both sides' reference schedulers (`EngineModel.scheduler`) are fed one environment, the
one BMC's product unrolling ranges over at the same bounds (`pair_menu`: explore.py's
menu for side A, cut to the prompts side B admits too, as diff.pair_specs): at each step
of the arrival window any sequence of requests of the menu's kinds may arrive, at most
`slots` in all; after scheduling, any subset of the requests that sample a token on
either side may sample EOS (each side is given the ones it samples, as BMC's shared EOS
vector matters to a side only where it samples); with speculative
decoding (`EngineModel.step_choices`), any choice of drafts accepted and proposed that
either side could take, each side getting it cut to its own drafts scheduled (as the
rules cut the shared choice, model/vllm/rules.py `step`).

Each step's observables are compared as BMC compares them. BMC's `differs` reads the
Step fields OBSERVABLES (per request) and STEP_OBSERVABLES; every engine's `observe`
takes exactly those from the StepRecord (scheduled tokens, admitted, resumed, preempted,
finished, finished with reason "stop", free_blocks right after scheduling; across engines
only the step observables the bridge names, diff.compared_step_observables), so the search
compares the two StepRecords field by field (`record_differences`, no Steps built), and
the replay of the answer checks that `diff.differences` over the observed Steps finds the
same (else DIVERGENCE). Speculative choices are not in BMC's diff (its product passes
none, so it sees only the default choice); the search branches on them.

Breadth-first over pair states: a node is (requests arrived, side A's `state_key`, side
B's `state_key` with each request tagged by where A's key names it, found with a marker
per request passed as the key's per-request extra: no engine's field is read). The tag keeps
the symmetry reduction joint: two pairs coincide only under one renaming of requests for
both sides, so a request of A stays matched with the same request of B. Only pairs that
agreed on every step so far are expanded, so the first layer with a differing step is
the least depth at which any workload differs, and a search that reaches the depth bound
without one is exhaustive at the bounds: "no difference within these bounds". Among the
differing paths of that layer the least by the explorer's `_Path.sort_key` is taken
(fewest requests, then the smallest numbers, then the EOS choices false first: BMC's
minimisation order, checker/methods/minimize.py); per node the least path reaching it is
kept, which keeps the least one overall because the order compares the common prefix
first.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from checker.methods import diff
from checker.methods.diff import (
    DIFFER,
    DIVERGENCE,
    OBSERVABLES,
    PROVED,
    SAME,
    UNKNOWN,
    Difference,
    DiffResult,
    Side,
    assertion_site,
    compared_step_observables,
    differences,
    pair_menu,
    unread_switch,
)
from checker.methods.explore import Kind, _Path
from checker.methods.symbolic import Bounds
from model import registry as engines
from model.core.engine import EngineModel, ReferenceScheduler
from model.core.types import (
    FINISH_STOP,
    AcceptEvent,
    DraftEvent,
    EosEvent,
    Step,
    StepRecord,
    Workload,
)
from model.run import simulate

MAX_STATES = 2_000_000
# How an UNKNOWN from a reference's assertion begins (BMC's rules assume what the
# reference asserts: neither models the path, so `auto` does not fall back to BMC).
ASSERTS = "a reference asserts"

# One step's speculative choice as the path stores it: (accepted by id, drafts by id).
_Choice = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]
_NO_CHOICE: _Choice = ((), ())


@dataclass(slots=True)
class _Run:
    """One side along a path: its scheduler after the last step, its records, and the
    environment choices it was given (its EOS and speculative events)."""

    scheduler: ReferenceScheduler
    records: tuple[StepRecord, ...] = ()
    eos: tuple[EosEvent, ...] = ()
    accepted: tuple[AcceptEvent, ...] = ()
    drafts: tuple[DraftEvent, ...] = ()


@dataclass(slots=True)
class _PairNode:
    key: Hashable
    a: _Run
    b: _Run
    path: _Path


@dataclass(slots=True)
class _Found:
    node: _PairNode
    found: tuple[Difference, ...]


class PairExplorer:
    """One explicit-state difference search of two sides within `bounds`."""

    def __init__(self, a: Side, b: Side, bounds: Bounds, timeout_s: float,
                 symmetric: bool = True, max_states: int = MAX_STATES) -> None:
        self.a, self.b, self.bounds = a, b, bounds
        self.engine_a: EngineModel = engines.get(a.engine)
        self.engine_b: EngineModel = engines.get(b.engine)
        self.kinds: tuple[Kind, ...] = pair_menu(bounds, a, b)
        self.step_observables = compared_step_observables(a, b)
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        self.symmetric, self.max_states = symmetric, max_states
        self.seen: dict[Hashable, int] = {}
        self.transitions = 0

    # ---- the search -----------------------------------------------------------------------

    def run(self) -> DiffResult:
        """DIFFER at the least depth with the least workload (replayed on both references),
        SAME up to the depth bound, or UNKNOWN (time or state limit)."""
        root_a, root_b = self.engine_a.scheduler(self.a.config), self.engine_b.scheduler(
            self.b.config)
        root = _PairNode((), _Run(root_a), _Run(root_b), _Path())
        root.key = self._key(root, 0)
        self.seen[root.key] = 0
        layer = [root]
        for depth in range(1, self.bounds.depth + 1):
            nxt: dict[Hashable, _PairNode] = {}
            best: _Found | None = None
            for node, size in self._tasks(layer, depth):
                if best is not None and _after(node, size, best.node.path):
                    continue  # every child of this task sorts after the best difference
                children = self._successors(node, depth, size)
                while True:
                    try:
                        child = next(children)
                    except StopIteration:
                        break
                    except AssertionError as e:  # a reference's own consistency check
                        return self._result(UNKNOWN, depth - 1,
                                            reason=_asserted(e, depth))
                    self.transitions += 1
                    if time.monotonic() > self.deadline:
                        return self._result(UNKNOWN, depth - 1,
                                            reason=f"time limit at depth {depth}")
                    found = self._differs(child, depth)
                    if found:
                        if best is None or child.path.sort_key() < best.node.path.sort_key():
                            best = _Found(child, found)
                        continue
                    if (best is not None or depth == self.bounds.depth
                            or child.key in self.seen):
                        continue  # this layer decides, the last; or seen less deep
                    old = nxt.get(child.key)
                    if old is None or child.path.sort_key() < old.path.sort_key():
                        nxt[child.key] = child
                if len(self.seen) + len(nxt) > self.max_states:
                    return self._result(UNKNOWN, depth - 1,
                                        reason=f"state limit {self.max_states} at depth {depth}")
            if best is not None:
                return self._replayed(best, depth)
            for key in nxt:
                self.seen[key] = depth
            layer = list(nxt.values())
            if not layer:
                break
        return self._result(SAME, self.bounds.depth)

    def _differs(self, child: _PairNode, depth: int) -> tuple[Difference, ...]:
        ids = [f"r{i}" for i in range(child.path.num_requests)]
        return record_differences(child.a.records[-1], child.b.records[-1], ids,
                                  self.step_observables)

    def _observe(self, side: Side, engine: EngineModel, run: _Run, path: _Path,
                 depth: int) -> tuple[Step, ...]:
        return engine.observe(self._workload(side, path, run, depth), run.records)

    def _workload(self, side: Side, path: _Path, run: _Run | None, depth: int) -> Workload:
        """The path's workload as `side` runs it: its engine and config, and the EOS and
        speculative choices it was given (all of them for the common workload, run None)."""
        requests, n = [], 0
        for step, kinds in enumerate(path.arrivals, start=1):
            for k in kinds:
                requests.append(k.spec(f"r{n}", step))
                n += 1
        if run is None:
            eos = tuple(EosEvent(rid, step) for step, ids in enumerate(path.eos, start=1)
                        for rid in ids)
            accepted = tuple(AcceptEvent(rid, step, c)
                             for step, (acc, _) in enumerate(path.choices, 1) for rid, c in acc)
            drafts = tuple(DraftEvent(rid, step, c)
                           for step, (_, d) in enumerate(path.choices, 1) for rid, c in d)
        else:
            eos, accepted, drafts = run.eos, run.accepted, run.drafts
        return Workload(config=side.config, requests=tuple(requests), eos=eos, steps=depth,
                        engine=side.engine, accepted=accepted, drafts=drafts)

    # ---- one layer ------------------------------------------------------------------------

    def _tasks(self, layer: Sequence[_PairNode], depth: int
               ) -> list[tuple[_PairNode, int]]:
        """Each node of the layer with each number of requests that may arrive, in the
        order their children sort: fewest requests in all first, then (as a request that
        arrives now sorts after one that arrived before) the nodes holding more of them,
        then the nodes' own order. So the first differences found are near the least, and
        the tasks after it are skipped."""
        allowed = depth <= self.bounds.last_arrival()
        tasks = []
        for node in layer:
            n = node.path.num_requests
            room = self.bounds.slots - n if allowed else 0
            tasks += [(node, size) for size in range(room + 1)]
        tasks.sort(key=lambda t: (t[0].path.num_requests + t[1], -t[0].path.num_requests,
                                  t[0].path.sort_key()))
        return tasks

    def _successors(self, node: _PairNode, depth: int, size: int) -> Iterator[_PairNode]:
        """Every environment choice of one step with `size` arrivals (the arrivals, then
        EOS and the speculative choices), applied to both sides."""
        n = node.path.num_requests
        for kinds in itertools.product(self.kinds, repeat=size):
            arrived_a = (node.a.scheduler, kinds, n, depth)
            arrived_b = (node.b.scheduler, kinds, n, depth)
            arrivals = (*node.path.arrivals, kinds)
            cache_a: dict[Hashable, tuple[ReferenceScheduler, StepRecord]] = {}
            cache_b: dict[Hashable, tuple[ReferenceScheduler, StepRecord]] = {}
            probe_a = _stepped(arrived_a, frozenset(), {}, cache_a)
            probe_b = _stepped(arrived_b, frozenset(), {}, cache_b)
            probe_path = self._path(node.path, arrivals, (), _NO_CHOICE)
            ids_now = [f"r{i}" for i in range(probe_path.num_requests)]
            if record_differences(probe_a[1], probe_b[1], ids_now, self.step_observables):
                # No EOS and no other choice sorts first among this step's choices,
                # and this layer now decides: the other choices need not be run.
                yield self._child(node, probe_path, probe_a, probe_b, frozenset(),
                                  frozenset(), {}, {}, depth)
                continue
            sampled_a = self._sampled(self.a, self.engine_a, node.a, probe_a[1],
                                      probe_path, depth)
            sampled_b = self._sampled(self.b, self.engine_b, node.b, probe_b[1],
                                      probe_path, depth)
            sampled = sorted(sampled_a | sampled_b, key=lambda r: int(r[1:]))
            if self.bounds.no_eos:
                sampled = []
            for choice, kw_a, kw_b in self._choices(probe_a[0], probe_b[0]):
                for k in range(len(sampled) + 1):
                    for ids in itertools.combinations(sampled, k):
                        eos_a = frozenset(ids) & sampled_a
                        eos_b = frozenset(ids) & sampled_b
                        yield self._child(
                            node, self._path(node.path, arrivals, ids, choice),
                            _stepped(arrived_a, eos_a, kw_a, cache_a),
                            _stepped(arrived_b, eos_b, kw_b, cache_b),
                            eos_a, eos_b, kw_a, kw_b, depth)

    def _child(self, node: _PairNode, path: _Path,
               stepped_a: tuple[ReferenceScheduler, StepRecord],
               stepped_b: tuple[ReferenceScheduler, StepRecord], eos_a: frozenset[str],
               eos_b: frozenset[str], kw_a: Mapping[str, Any], kw_b: Mapping[str, Any],
               depth: int) -> _PairNode:
        """The pair after one step; keyed only below the depth bound (a child at the
        bound is compared, never expanded)."""
        child = _PairNode((), _extended(node.a, *stepped_a, eos_a, kw_a, depth),
                          _extended(node.b, *stepped_b, eos_b, kw_b, depth), path)
        if depth < self.bounds.depth:
            child.key = self._key(child, path.num_requests)
        return child

    def _sampled(self, side: Side, engine: EngineModel, run: _Run, record: StepRecord,
                 path: _Path, depth: int) -> frozenset[str]:
        """The requests that sample a token in the step just run on one side (an EOS
        matters only there; the reference refuses any other)."""
        probe = replace(run, records=(*run.records, record))
        steps = self._observe(side, engine, probe, path, depth)
        return frozenset(f"r{i}" for i, o in enumerate(steps[-1].slots) if o.sampled)

    def _choices(self, probe_a: ReferenceScheduler, probe_b: ReferenceScheduler
                 ) -> Iterator[tuple[_Choice, dict[str, Any], dict[str, Any]]]:
        """The step's speculative choices (none without step_choices): every choice
        either side could take, and what each side is given of it (cut to its drafts)."""
        yield _NO_CHOICE, {}, {}
        if self.engine_a.step_choices is None or self.engine_b.step_choices is None:
            return
        own_a = [_choice_of(kw) for kw in self.engine_a.step_choices(probe_a)]
        own_b = [_choice_of(kw) for kw in self.engine_b.step_choices(probe_b)]
        room_a, room_b = _room(own_a), _room(own_b)
        seen = {_NO_CHOICE}
        for choice in [*own_a, *own_b]:
            if choice in seen:
                continue
            seen.add(choice)
            yield choice, _cut(choice, *room_a), _cut(choice, *room_b)

    def _path(self, path: _Path, arrivals: tuple[tuple[Kind, ...], ...], eos: tuple[str, ...],
              choice: _Choice) -> _Path:
        choices = path.choices
        if self.engine_a.step_choices is not None:
            choices = (*choices, choice)
        return _Path(arrivals, (*path.eos, eos), choices)

    def _key(self, node: _PairNode, arrived: int) -> Hashable:
        """A's state key, and B's with each request tagged by where A's key names it
        (joint symmetry); without symmetry every request keeps its id on both sides."""
        ids = [f"r{i}" for i in range(arrived)]
        if self.symmetric:
            tags: Mapping[str, Hashable] = _positions(node.a.scheduler, ids)
            extra_a: Mapping[str, Hashable] | None = None
        else:
            tags = {rid: rid for rid in ids}
            extra_a = tags
        return (arrived, node.a.scheduler.state_key(extra_a),
                node.b.scheduler.state_key(tags))

    # ---- the answer -----------------------------------------------------------------------

    def _replayed(self, best: _Found, depth: int) -> DiffResult:
        """The least differing path as a DiffResult; without speculative choices its two
        workloads are run again on the references (model/run.py), which must give the
        search's records."""
        node = best.node
        common = self._workload(self.a, node.path, None, depth)
        common = replace(common, eos=tuple(sorted(common.eos, key=lambda e: (e.step, e.id))))
        wa = self._workload(self.a, node.path, node.a, depth)
        wb = self._workload(self.b, node.path, node.b, depth)
        runs = ((wa, node.a.records), (wb, node.b.records))
        ids = [f"r{i}" for i in range(node.path.num_requests)]
        steps = [self.engine_a.observe(wa, node.a.records),
                 self.engine_b.observe(wb, node.b.records)]
        on_steps = [differences(x, y, ids, self.step_observables)
                    for x, y in zip(*steps, strict=True)]
        if any(on_steps[:-1]) or on_steps[-1] != best.found:
            return self._result(DIVERGENCE, depth, common, runs, best.found,
                                reason="the observed Steps and the StepRecords differ in "
                                f"what differs at step {depth}")
        if not (wa.accepted or wa.drafts or wb.accepted or wb.drafts):
            for w, records in runs:
                if simulate(w) != records:
                    return self._result(DIVERGENCE, depth, common, runs, best.found,
                                        reason=f"{w.engine}'s reference replays the search's "
                                        "workload differently")
        return self._result(DIFFER, depth, common, runs, best.found)

    def _result(self, status: str, depth: int, workload: Workload | None = None,
                runs: tuple[tuple[Workload, tuple[StepRecord, ...]], ...] = (),
                found: tuple[Difference, ...] = (), reason: str = "") -> DiffResult:
        return DiffResult(status, depth, time.monotonic() - self.start, workload, runs, found,
                          reason=reason, method="explore",
                          states=len(self.seen))


@dataclass(frozen=True, slots=True)
class _Tag:
    """A marker put into a state key to find where the key names a request."""

    index: int


def _positions(sched: ReferenceScheduler, ids: Sequence[str]) -> dict[str, int]:
    """Each request's canonical position in the scheduler's state key: the order in which
    the key (state_key with a marker per request) first names it. Two schedulers with
    equal keys name their requests in the same places, so the positions match the
    requests the keys identify (requests the state no longer holds get none)."""
    key = sched.state_key({rid: _Tag(i) for i, rid in enumerate(ids)})
    order: list[int] = []
    stack: list[object] = [key]
    while stack:
        x = stack.pop()
        if isinstance(x, _Tag):
            if x.index not in order:
                order.append(x.index)
        elif isinstance(x, tuple | list):
            stack.extend(reversed(x))
    return {ids[i]: k for k, i in enumerate(order)}


def _asserted(e: AssertionError, depth: int) -> str:
    """Why the search stopped at a reference's assertion: where, and what it means."""
    return (f"{ASSERTS} at {assertion_site(e)} in step {depth}: the rules "
            "so switched reach a path the reference does not model, so neither side can "
            f"be run there (no difference up to step {depth - 1})")


_Arrival = tuple[ReferenceScheduler, Sequence[Kind], int, int]


def _stepped(arrived: _Arrival, eos: frozenset[str], kwargs: Mapping[str, Any],
             cache: dict[Hashable, tuple[ReferenceScheduler, StepRecord]]
             ) -> tuple[ReferenceScheduler, StepRecord]:
    """A copy of the node's scheduler, given the step's arrivals (`arrived`: the
    scheduler, the kinds, the requests before them, the step) and stepped once with these
    choices; computed once per distinct choice. The schedulers kept are never stepped in
    place again: successors copy them."""
    key = (eos, _choice_of(kwargs))
    if key not in cache:
        base, kinds, n, depth = arrived
        sched = copy.deepcopy(base)
        for j, k in enumerate(kinds):
            sched.add_request(k.spec(f"r{n + j}", depth))
        cache[key] = (sched, sched.step(eos, **kwargs))
    return cache[key]


def _after(node: _PairNode, size: int, best: _Path) -> bool:
    """Every child of `node` with `size` arrivals sorts after `best` (more requests, or
    a request part whose prefix, the node's own, already sorts after best's)."""
    prefix = _spec_vector(node.path)
    return (node.path.num_requests + size, prefix) > (best.num_requests,
                                                       _spec_vector(best)[:len(prefix)])


def _spec_vector(path: _Path) -> list[int]:
    """The request part of `_Path.sort_key` (after the request count)."""
    key = path.sort_key()[1]
    assert isinstance(key, list)
    return key


def record_differences(a: StepRecord, b: StepRecord, ids: Sequence[str],
                       step_observables: Sequence[str] = diff.STEP_OBSERVABLES
                       ) -> tuple[Difference, ...]:
    """`diff.differences` read off two StepRecords: every engine's `observe` takes the
    compared observables straight from the record (scheduled tokens, admitted, resumed,
    preempted, finished and its reason, free_blocks right after scheduling), so this is
    the same comparison without building the Steps; the replay checks it on the Steps.
    `step_observables`: the StepRecord fields compared per step (none across engines
    that count them differently)."""
    out: list[Difference] = []
    sa, sb = dict(a.scheduled), dict(b.scheduled)
    fa, fb = dict(a.finished), dict(b.finished)
    sets = {"admitted": (a.admitted, b.admitted), "resumed": (a.resumed, b.resumed),
            "preempted": (a.preempted, b.preempted)}
    for rid in ids:
        values = {"scheduled": (sa.get(rid, 0), sb.get(rid, 0))}
        for name, (x, y) in sets.items():
            values[name] = (rid in x, rid in y)
        values["finished"] = (rid in fa, rid in fb)
        values["finished_stop"] = (fa.get(rid) == FINISH_STOP, fb.get(rid) == FINISH_STOP)
        for name in OBSERVABLES:
            x, y = values[name]
            if x != y:
                out.append(Difference(a.step, rid, name, x, y))
    for name in step_observables:
        x, y = getattr(a, name), getattr(b, name)
        if x != y:
            out.append(Difference(a.step, "", name, x, y))
    return tuple(out)


def _choice_of(kwargs: Mapping[str, Any]) -> _Choice:
    return (tuple(sorted(kwargs.get("accepted", {}).items())),
            tuple(sorted(kwargs.get("drafts", {}).items())))


def _room(choices: Sequence[_Choice]) -> tuple[dict[str, int], set[str]]:
    """What a side can take: the most drafts it can accept per request, and the
    requests whose proposer may propose fewer."""
    accept: dict[str, int] = {}
    drafts: set[str] = set()
    for acc, d in choices:
        for rid, c in acc:
            accept[rid] = max(accept.get(rid, 0), c)
        drafts |= {rid for rid, _ in d}
    return accept, drafts


def _cut(choice: _Choice, accept: Mapping[str, int], drafts: set[str]) -> dict[str, Any]:
    acc = {rid: min(c, accept[rid]) for rid, c in choice[0] if accept.get(rid, 0)}
    d = {rid: c for rid, c in choice[1] if rid in drafts}
    out: dict[str, Any] = {}
    if acc:
        out["accepted"] = acc
    if d:
        out["drafts"] = d
    return out


def _extended(run: _Run, sched: ReferenceScheduler, record: StepRecord, eos: frozenset[str],
              kwargs: Mapping[str, Any], depth: int) -> _Run:
    return _Run(sched, (*run.records, record),
                (*run.eos, *(EosEvent(rid, depth) for rid in sorted(eos))),
                (*run.accepted, *(AcceptEvent(rid, depth, c)
                                  for rid, c in sorted(kwargs.get("accepted", {}).items()))),
                (*run.drafts, *(DraftEvent(rid, depth, c)
                                for rid, c in sorted(kwargs.get("drafts", {}).items()))))


def compare(a: Side, b: Side, bounds: Bounds, timeout_s: float, symmetric: bool = True
            ) -> DiffResult:
    """The explicit-state search (module docstring): DIFFER with the least workload at the
    least depth, SAME (exhaustive at the bounds) or UNKNOWN."""
    return PairExplorer(a, b, bounds, timeout_s, symmetric).run()




# ---- choosing the method ------------------------------------------------------------------

METHODS = ("auto", "bmc", "explore", "array", "both")
# `auto` searches explicitly while one step's arrival choices stay below this (the first
# layer enumerates them all: sum of kinds**k for k <= slots); above it BMC's symbolic slots
# are cheaper. 1885 on tiny_fcfs (12 kinds, 3 slots), 11131 on tiny_cached (105 kinds, 2).
AUTO_MAX_ARRIVALS = 50_000
# `auto` takes the array product search (checker/methods/array/product.py) where it applies
# and the environment repays its set-up (the product's reduction proofs, 8-13 s on a
# fresh proof store, then read back): at least this many slots and orders of arrival
# kinds (kinds ** slots), as `check` picks its array explorer (jobs.ARRAY_MIN_SLOTS,
# ARRAY_MIN_ARRIVALS); below, the reference product search is faster.
ARRAY_MIN_SLOTS, ARRAY_MIN_ARRIVALS = 3, 1000


def arrival_choices(a: Side, bounds: Bounds, b: Side | None = None) -> int:
    """How many arrival choices the explicit search enumerates from the empty state."""
    kinds = len(pair_menu(bounds, a, b))
    return sum(kinds ** k for k in range(bounds.slots + 1))


def array_unsupported(a: Side, b: Side, bounds: Bounds) -> str | None:
    """None when the array product search (checker/methods/array/product.py) searches
    this comparison exactly, else why not (numpy missing, or a side the array explorer
    does not cover)."""
    try:
        from checker.methods.array import product
    except ImportError as exc:
        return str(exc)
    return product.pair_unsupported(a, b, bounds)


def array_picked(a: Side, b: Side, bounds: Bounds) -> bool:
    """Whether `auto` searches by the array product: it applies, and the environment is
    large enough to repay its set-up (ARRAY_MIN_SLOTS, ARRAY_MIN_ARRIVALS)."""
    kinds = len(pair_menu(bounds, a, b))
    return (bounds.slots >= ARRAY_MIN_SLOTS and kinds ** bounds.slots >= ARRAY_MIN_ARRIVALS
            and array_unsupported(a, b, bounds) is None)


def array_compare(a: Side, b: Side, bounds: Bounds, timeout_s: float) -> DiffResult:
    """The array product search (UNKNOWN, saying why, where it does not apply)."""
    why = array_unsupported(a, b, bounds)
    if why is not None:
        return DiffResult(UNKNOWN, 0, 0.0, reason=f"the array product search does not "
                          f"apply: {why}", method="array")
    from checker.methods.array import product

    return product.compare(a, b, bounds, timeout_s)


def decide(a: Side, b: Side, bounds: Bounds, timeout_s: float, prove: bool = True,
           method: str = "auto") -> DiffResult:
    """One comparison by `method` (METHODS):

    - `bmc`: diff.compare (the one-step induction first when `prove`, then BMC);
    - `explore`: a switch the config does not read is PROVED at once; else the explicit
      search over the reference schedulers (never a proof of its own);
    - `array`: the same, by the array explorer over the product of the two rule systems
      (checker/methods/array/product.py; UNKNOWN where it does not apply);
    - `both`: BMC and the reference search; they must agree on the status (BMC's PROVED
      with the search's no difference) and, on a difference, on the depth and the least
      workload; else DIVERGENCE naming both answers;
    - `auto`: the array product search where it applies and the environment repays its
      set-up (`array_picked`); else the reference search where its first layer is small
      (AUTO_MAX_ARRIVALS); BMC otherwise or when the search runs out of time or states
      (not after a reference's assertion: BMC's rules assume what it asserts); after a
      "no difference" the one-step induction, when `prove`, tries to make it PROVED.
    """
    start = time.monotonic()
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; methods: {', '.join(METHODS)}")
    unread = unread_switch(a, b)
    if unread is not None:
        return replace(unread, method="config")
    if method == "bmc":
        return diff.compare(a, b, bounds, timeout_s, prove=prove)
    if method == "explore":
        return compare(a, b, bounds, timeout_s)
    if method == "array":
        return array_compare(a, b, bounds, timeout_s)
    if method == "both":
        return _both(a, b, bounds, timeout_s, prove)
    if array_picked(a, b, bounds):
        found = array_compare(a, b, bounds, timeout_s)
    elif arrival_choices(a, bounds, b) > AUTO_MAX_ARRIVALS:
        return diff.compare(a, b, bounds, timeout_s, prove=prove)
    else:
        found = compare(a, b, bounds, timeout_s)
    left = timeout_s - (time.monotonic() - start)
    if found.status == UNKNOWN and not found.reason.startswith(ASSERTS) and left > 1:
        fallback = diff.compare(a, b, bounds, left, prove=prove)
        return replace(fallback, seconds=time.monotonic() - start,
                       reason=f"{fallback.reason} (BMC after the explicit search's "
                       f"{found.reason})".strip())
    if found.status == SAME and prove and left > 1:
        if diff.prove_equivalent(a, b, bounds.slots, left) is True:
            return replace(found, status=PROVED, depth=0, seconds=time.monotonic() - start,
                           reason=f"one-step induction on the product, {bounds.slots} slots, "
                           "every depth and request length")
        return replace(found, seconds=time.monotonic() - start)
    return found


def _both(a: Side, b: Side, bounds: Bounds, timeout_s: float, prove: bool) -> DiffResult:
    start = time.monotonic()
    by_bmc = diff.compare(a, b, bounds, timeout_s, prove=prove)
    by_search = compare(a, b, bounds, timeout_s)
    seconds = time.monotonic() - start
    why = disagreement(by_bmc, by_search)
    if why is None:
        return replace(by_bmc, seconds=seconds, method="both", states=by_search.states)
    if why == "":
        unknown = by_bmc if by_bmc.status == UNKNOWN else by_search
        return replace(unknown, seconds=seconds, method="both")
    return replace(by_bmc, status=DIVERGENCE, seconds=seconds, method="both",
                   reason=f"the methods disagree: {why}")


def _common(w: Workload | None) -> tuple[object, ...]:
    if w is None:
        return ()
    return (tuple(w.arrival_order()), tuple(sorted((e.step, e.id) for e in w.eos)),
            tuple(sorted((e.step, e.id, e.count) for e in w.accepted)),
            tuple(sorted((e.step, e.id, e.count) for e in w.drafts)))


def disagreement(by_bmc: DiffResult, by_search: DiffResult) -> str | None:
    """None when BMC and the explicit search agree (status; on a difference, depth and
    least workload); "" when either is inconclusive; else what differs, in one line."""
    if UNKNOWN in (by_bmc.status, by_search.status):
        return ""
    bmc_status = SAME if by_bmc.status == PROVED else by_bmc.status
    if bmc_status != by_search.status:
        return (f"BMC {by_bmc.status} at depth {by_bmc.depth}, the explicit search "
                f"{by_search.status} at depth {by_search.depth}")
    if by_bmc.status != DIFFER:
        return None
    if by_bmc.depth != by_search.depth:
        return (f"BMC differs first at step {by_bmc.depth}, the explicit search at step "
                f"{by_search.depth}")
    if _common(by_bmc.workload) != _common(by_search.workload):
        return (f"at step {by_bmc.depth} the least workloads differ: BMC "
                f"{_shown_workload(by_bmc.workload)}, the explicit search "
                f"{_shown_workload(by_search.workload)}")
    return None


def _shown_workload(w: Workload | None) -> str:
    if w is None:
        return "none"
    reqs = ", ".join(f"{r.id}(p{r.prompt_len} m{r.max_tokens} @{r.arrival_step})"
                     for r in w.arrival_order())
    eos = ", ".join(f"{e.id}@{e.step}" for e in w.eos)
    return f"[{reqs}]" + (f" eos [{eos}]" if eos else "")


__all__ = ["ARRAY_MIN_ARRIVALS", "ARRAY_MIN_SLOTS", "AUTO_MAX_ARRIVALS", "MAX_STATES", "METHODS",
           "PairExplorer", "arrival_choices", "array_compare", "array_picked",
           "array_unsupported", "compare", "decide", "disagreement", "pair_menu",
           "record_differences"]
