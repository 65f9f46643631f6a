"""Breadth-first search over an engine's rules, one frontier of states x environment
choices per pass of the rules (see checker/methods/array/__init__.py for the method).

One pass evaluates `EngineModel.step` under ArrayOps on arrays shaped
(parents, arrival choices, eos_0, ..., eos_{n-1}): a parent's leaves vary along the first
axis only, the arriving requests' kinds along the second, and slot i's EOS choice along
axis 2 + i, so numpy broadcasting computes each value at the smallest shape it depends on
(the RUNNING loop once per parent, the update once per EOS choice of its own slot). A
column equal for every parent of a pass is handed to the rules as a Python int, which
Ops fold, so slots that have not arrived cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

import numpy as np

import checker.methods.array.analysis as analysis
import checker.methods.array.history as history
import checker.methods.array.pool as pool
from checker.methods.array.analysis import Shape
from checker.methods.array.keys import Codec, Layout, Visited, first_of_each
from checker.methods.array.layout import Leaf, Path, build, leaves_of, status_fields, values_of
from checker.methods.explore import Kind
from model.core.array_ops import ArrayOps
from model.core.engine import EngineModel
from model.core.ops import CONCRETE
from model.core.types import SlotSpec, Step
from properties.catalogue import Property
from properties.reads import Reads, merged, reads

_KIND_FIELDS = tuple(f.name for f in fields(Kind))
_SPEC_FIELDS = tuple(f.name for f in fields(SlotSpec))
# A slot that has not arrived, as model/core/slots.py lays one out.
_UNUSED = {"prompt_len": 1, "max_tokens": 1, "arrival_step": 0}


@dataclass(frozen=True, slots=True)
class Options:
    """How the search runs (the environment itself is fixed by the Bounds).

    `arrival_steps`: requests arrive only in steps 1..arrival_steps (None: in any step up
    to the depth, as BMC and the reference explorer allow); the key then holds
    min(step, arrival_steps), so a state from which requests may still arrive never meets
    one from which none can. `exhaustive`: no depth bound, until no new state appears.
    `exact` False stores 64-bit hashes of the keys only (hash compaction, as SPIN's -DHC).
    `options_for(bounds)` (checker/methods/array/__init__.py) sets `arrival_steps` and
    `no_eos` from a query's Bounds (`arrival_window`, `no_eos`).
    """

    symmetric: bool = True
    retire: bool = True
    arrival_steps: int | None = None
    exhaustive: bool = False
    exact: bool = True
    chunk: int = 1 << 20
    max_states: int = 400_000_000
    least: bool = False  # keep the least path to every state (minimize.py's order)
    # Skip an EOS choice that reaches the same state with the same verdicts as no EOS
    # (it changes the transition count, not the states: off to compare counts with SPIN).
    prune_eos: bool = True
    keep_edges: bool = False  # the arrival-free edges (for lassos)
    # A search that keeps paths (least mode, no edges): once the states visited and a
    # layer's candidates would number more than this, stop keeping paths and stream that
    # layer and the rest (a violation found from then on has its depth but no run).
    # None: keep paths to the end.
    paths_until: int | None = None
    no_eos: bool = False  # no request samples EOS (Bounds.no_eos)
    # check_many: start requests of the menu's largest max_tokens only, where z3 proves
    # that they do what the others do (checker/methods/array/kinds.py; off to compare
    # state counts with the reference explorer).
    merge_max_tokens: bool = True


@dataclass(frozen=True, slots=True)
class Witness:
    """A run the search found: per step, the kinds that arrive and the EOS mask (bit i:
    slot i, which is request r<i>)."""

    arrivals: tuple[tuple[int, ...], ...]
    eos: tuple[int, ...]


@dataclass(slots=True)
class Outcome:
    """Per property, the first violating depth and a violating run (None: no violation
    within the bounds); and how big the search was."""

    violated: dict[int, tuple[int, Witness]]
    states: int
    transitions: int
    depth_reached: int
    seconds: float
    complete: bool  # every layer was searched (no time or state limit)
    reason: str = ""
    key_bytes: int = 0
    edges: tuple[np.ndarray, ...] | None = None
    depth_of: np.ndarray | None = None
    witness_of: Any = None  # node id -> Witness (least mode)
    # The last depth whose violations carry their least run (least mode; the search may
    # have stopped keeping paths after it, Options.paths_until)
    paths_depth: int = 0
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Layer:
    """The nodes kept at one depth, in frontier order, and how each was reached."""

    first_id: int
    parent: np.ndarray  # index in the previous layer's frontier order
    choice: np.ndarray  # the arrivals: kind indices as digits of this code
    j: np.ndarray  # how many requests arrived
    eos: np.ndarray  # bit i: slot i sampled EOS


class Search:
    """One search of one configuration for some properties (all of one kind: step and
    window properties share a search; a lasso property is searched alone)."""

    def __init__(self, engine: EngineModel, rule_cfg: Any, props: Sequence[Property],
                 kinds: Sequence[Kind], slots: int, depth: int, options: Options,
                 deadline: float) -> None:
        self.engine, self.cfg, self.props = engine, rule_cfg, tuple(props)
        self.kinds, self.n, self.depth, self.opt = tuple(kinds), slots, depth, options
        self.deadline = deadline
        self.template = engine.initial_state(slots, rule_cfg)
        self.leaves: tuple[Leaf, ...] = leaves_of(self.template)
        self.shape: Shape = analysis.shape(engine, rule_cfg, slots)
        self.reads = merged([reads(p, rule_cfg, slots) for p in props]
                            ) if props else Reads((frozenset(),), (frozenset(),))
        self.ops = ArrayOps(np)
        self.dtype = _eval_dtype(rule_cfg)
        self.paths = options.least or options.keep_edges
        self._layer_keys: Visited | None = None  # the keys of the layer being streamed
        self._plan()

    # ---- what a state holds and what its key holds -------------------------------------

    def _plan(self) -> None:
        sh, n = self.shape, self.n
        self.kind_cols = {f: np.array([getattr(k, f) for k in self.kinds], dtype=np.int64)
                          for f in _KIND_FIELDS}
        self.spec_fields = tuple(f for f in _KIND_FIELDS if f in _SPEC_FIELDS)
        self.varying_specs = tuple(f for f in self.spec_fields
                                   if len(set(self.kind_cols[f].tolist())) > 1)
        self.arrival_read = sh.arrival_step_read
        if self.arrival_read:
            self.spec_fields = (*self.spec_fields, "arrival_step")
            self.varying_specs = (*self.varying_specs, "arrival_step")
        read_slot, read_step = self.reads.all_slot_fields(), self.reads.all_step_fields()
        carried: set[Path] = set()
        for f in (*read_slot, *read_step):
            carried |= set(sh.obs_flow.get(f, ()))
        carried -= set(sh.equal) | set(sh.constant)
        grown = True
        while grown:
            extra = set()
            for c in carried:
                extra |= set(sh.next_flow.get(c, ())) - set(sh.equal) - set(sh.constant)
            grown = not extra <= carried
            carried |= extra
        self.carried = frozenset(carried)
        slot_fields = []
        for leaf in self.leaves:
            if leaf.slot == 0 and leaf.field not in sh.constant:
                slot_fields.append(leaf.field)
        global_fields = [leaf.path for leaf in self.leaves
                         if leaf.slot is None and leaf.path not in sh.constant]
        # A leaf no next leaf depends on (analysis.Shape.idle) steers nothing: the key
        # leaves it out unless a property reads an observable it reaches or it is carried.
        read_obs = set(read_slot) | set(read_step)
        idle = {f for f, obs in sh.idle if not obs & read_obs and f not in self.carried}
        if sh.behaviour_proved:
            self.key_slot = [f for f in slot_fields
                             if (f in sh.equal and f not in idle) or f in self.carried]
            self.key_global = [p for p in global_fields if p in sh.equal or p in self.carried]
            self.order = list(sh.order)
            self.global_order = [g for g in sh.global_order
                                 if not set(g) <= set(self.key_global)]
        else:
            self.key_slot, self.key_global, self.order = slot_fields, global_fields, []
            self.global_order = []
        self.guards = {(of.field, i, j): analysis.guard_fn(of, i, j, sh.proof_slots)
                       for of in self.order for i, j in analysis.pairs(n)}
        self.hist_slot = self.reads.past_slot_fields()
        self.hist_step = self.reads.past_step_fields()
        self.lags = self.reads.lags
        self.atoms = None
        window_props = [p for p in self.props if p.kind != "lasso"]
        if self.lags >= 1 and window_props and len(window_props) == len(self.props):
            self.atoms = history.atoms(self.props, self.cfg, n, self._sample_step(), self.lags)
        if self.atoms is not None:
            self.hist_slot, self.hist_step = (), ()
        self.depth_in_key = self.arrival_read or "step" in read_step
        sym = sh.symmetry if self.opt.symmetric else "none"
        if self.props and self.props[0].kind == "lasso":
            sym = "none"  # a cycle up to a permutation of slots is not a cycle
        if sym != "none" and not analysis.permuted(self.engine, self.cfg, n,
                                                   frozenset(read_slot)):
            sym = "none"
        if self.atoms is not None and any(self._reads_a_slot(j) for j in
                                          self.atoms.global_atoms):
            sym = "none"  # an atom that reads two slots does not follow a slot swap
        self.symmetry = sym
        self.pool_order = False
        self.pool = self._pool_names(read_slot)
        self.retired = tuple(sorted(sh.retired)) if self.opt.retire else ()
        # A slot retires at a combination of its status fields' values and, where the
        # proof needed them, of its quiet leaves' initial values (analysis.Shape); a quiet
        # leaf that is constant has no column and is always at its initial value.
        quiet = sh.retire_quiet
        if sh.retired_at_once and not sh.at_once_obs & set(read_slot) and self.opt.retire:
            # A slot retires as it enters the status (analysis.Shape.retired_at_once), as
            # the reference explorer drops a finished request at once, when no property
            # reads what it still reports of its in-flight output.
            self.retired = tuple(sorted(sh.retired_at_once))
            quiet = sh.at_once_quiet
        fields_ = (*status_fields(self.leaves), *quiet)
        kept = [k for k, f in enumerate(fields_) if f not in sh.constant]
        self.status_fields = tuple(fields_[k] for k in kept)
        self.retired = tuple(sorted({tuple(c[k] for k in kept) for c in self.retired}))
        if not status_fields(self.leaves):
            self.retired = ()
        self.initial = {leaf.path: leaf.initial for leaf in self.leaves}

    def _pool_names(self, read_slot: frozenset[str]) -> pool.PoolLayout | None:
        """The paged pool, when the key names its blocks, hashes and slots canonically
        (checker/methods/array/pool.py): the behaviour key proved, symmetry asked for and
        not otherwise available, no pool or table leaf carried raw for a property, one
        status field, and a slot swap that renames the two slots' own hash ids commutes
        with the step and carries along what the properties read (z3). The key then holds
        the pool as pool.canonical names it instead of the pool leaves and table entries
        (and their ranks)."""
        sh = self.shape
        lay = pool.layout_of(self.leaves)
        if (lay is None or not sh.behaviour_proved or not self.opt.symmetric
                or self.symmetry != "none" or sh.symmetry != "none" or self.n < 2
                or len(status_fields(self.leaves)) != 1):
            return None
        if self.props and self.props[0].kind == "lasso":
            return None
        if self.atoms is not None and any(self._reads_a_slot(j)
                                          for j in self.atoms.global_atoms):
            return None
        if self.carried & (lay.global_paths | set(lay.table_fields)):
            return None
        # Without the proof the slots keep their order; the blocks and the gone hashes
        # are renamings that need none (pool.py).
        self.pool_order = analysis.renamed_swap(self.engine, self.cfg, self.n,
                                                frozenset(read_slot))
        self.key_slot = [f for f in self.key_slot if f not in lay.table_fields]
        self.key_global = [p for p in self.key_global if p not in lay.global_paths]
        self.global_order = [g for g in self.global_order if not set(g) & lay.global_paths]
        return lay

    def _sample_step(self) -> Step:
        """One Step of the rules under ConcreteOps (the observables' types)."""
        specs = [SlotSpec(**{f: _UNUSED.get(f, 0) for f in _SPEC_FIELDS})
                 for _ in range(self.n)]
        kind = self.kinds[0]
        specs[0] = SlotSpec(**{f: (1 if f == "arrival_step" else getattr(kind, f, 0))
                               for f in _SPEC_FIELDS})
        _, obs = self.engine.step(CONCRETE, self.cfg, specs, self.template, [False] * self.n)
        return obs

    def _reads_a_slot(self, atom: int) -> bool:
        """Whether a (global) atom reads a slot's observables."""
        assert self.atoms is not None
        return bool(self.atoms.owners[atom] - {"step"})

    # ---- columns ----------------------------------------------------------------------

    def _columns(self) -> None:
        """The frontier is one int matrix: these columns, in this order."""
        keys: list[Any] = [("leaf", leaf.path) for leaf in self.leaves
                           if leaf.field not in self.shape.constant]
        keys += [("spec", s, f) for s in range(self.n) for f in self.spec_fields]
        keys.append(("arrived",))
        for lag in range(1, self.lags + 1):
            keys += [("hist", lag, s, f) for s in range(self.n) for f in self.hist_slot]
            keys += [("hist", lag, None, f) for f in self.hist_step]
            if self.atoms is not None:
                keys += [("hist", lag, "atom", j) for j in range(len(self.atoms.atom_fns))]
        self.colkeys = keys
        self.ci = {k: i for i, k in enumerate(keys)}
        self.store = np.int16 if self.dtype == np.int16 else np.int64
        self.stored_leaves = [leaf for leaf in self.leaves
                              if leaf.field not in self.shape.constant]
        info = np.iinfo(self.store)
        self.store_range = (int(info.min), int(info.max))
        key_slot, key_glob = [], []
        for s in range(self.n):
            cols = [self.ci[("spec", s, f)] for f in self.varying_specs]
            cols += [self.ci[("leaf", ("slots", s, *f))] for f in self.key_slot]
            for lag in range(1, self.lags + 1):
                cols += [self.ci[("hist", lag, s, f)] for f in self.hist_slot]
                if self.atoms is not None:
                    cols += [self.ci[("hist", lag, "atom", group[s])]
                             for group in self.atoms.slot_atoms]
            key_slot.append(cols)
        key_glob = [self.ci[("arrived",)]] + [self.ci[("leaf", p)] for p in self.key_global]
        for lag in range(1, self.lags + 1):
            key_glob += [self.ci[("hist", lag, None, f)] for f in self.hist_step]
            if self.atoms is not None:
                key_glob += [self.ci[("hist", lag, "atom", j)] for j in self.atoms.global_atoms]
        self.key_slot_cols, self.key_glob_cols = key_slot, key_glob
        self.retire_cols = []
        if self.retired:
            for s in range(self.n):
                status = [self.ci[("leaf", ("slots", s, *f))] for f in self.status_fields]
                reset = [(self.ci[("leaf", leaf.path)], leaf.initial)
                         for leaf in self.stored_leaves
                         if leaf.slot == s and leaf.field not in self.status_fields]
                reset += [(self.ci[("spec", s, f)], 0) for f in self.spec_fields]
                self.retire_cols.append((status, reset))
        if self.pool is not None:
            status = status_fields(self.leaves)[0]
            self.pool_status = [self.ci[("leaf", ("slots", s, *status))] for s in range(self.n)]
            # a slot is live unless its status is the initial one or one that retires
            # (absorbing: a finished request never looks up or caches again)
            self.pool_dead = sorted({self.initial[("slots", 0, *status)]}
                                    | {c[0] for c in self.shape.retired}
                                    | {c[0] for c in self.shape.retired_at_once})
            self.pool_tables = [[self._col_or_initial(("slots", s, *f))
                                 for f in self.pool.table_fields] for s in range(self.n)]
            self.pool_blocks = [[self._col_or_initial(p) for p in per]
                                for per in self.pool.block_leaves]
        self.codec: Codec | None = None
        self.seen: tuple[list[int], list[int], list[int], list[int]] | None = None
        self.priority_col = (self.varying_specs.index("priority")
                             if "priority" in self.varying_specs else None)

    def _col_or_initial(self, path: Path) -> int | tuple[str, int]:
        """A leaf's column, or ("const", value) for a leaf constant in every state."""
        key = ("leaf", path)
        return self.ci[key] if key in self.ci else ("const", self.initial[path])

    # ---- the search ----------------------------------------------------------------------

    def run(self) -> Outcome:
        """Breadth-first to the depth (or to a fixpoint when exhaustive)."""
        start = time.monotonic()
        self._columns()
        self.visited = Visited(self.opt.exact)
        self.layers: list[_Layer] = []
        self.transitions = 0
        self.edges: list[tuple[np.ndarray, ...]] = []
        self.timing: dict[str, float] = {"rules": 0.0, "gather": 0.0, "keys": 0.0,
                                         "dedup": 0.0}
        self._pending: list[list[Any]] = []
        front = np.zeros((1, len(self.colkeys)), dtype=self.store)
        for leaf in self.stored_leaves:
            front[0, self.ci[("leaf", leaf.path)]] = leaf.initial
        meta = {"srank": np.zeros(1, dtype=np.int64), "prank": np.zeros(1, dtype=np.int64)}
        src = {col: int(front[0, col]) for col in range(front.shape[1])}
        root_words = self._words(src, 0, lambda x: np.broadcast_to(np.asarray(x), (1,)), 1)
        # node ids only where paths are kept (else a byte per key, all 0)
        self.visited.add(root_words, np.zeros(1, dtype=np.int64) if self.paths else None)
        if not self.paths:
            front = _Chunks.of(front)
        self.layers.append(_Layer(0, np.full(1, -1), np.zeros(1, dtype=np.int64),
                                  np.zeros(1, dtype=np.int8), np.zeros(1, dtype=np.int64)))
        self.next_id = 1
        found: dict[int, tuple[int, Witness]] = {}
        d, reason, complete, paths_depth, least = 0, "", True, 0, self.opt.least
        limit = None if self.opt.exhaustive else self.depth
        while len(front) and (limit is None or d < limit):
            d += 1
            pending = [i for i in range(len(self.props)) if i not in found
                       and self.props[i].kind != "lasso"]
            try:
                front, meta, viol = self._layer_within_paths_limit(front, meta, d, pending)
            except _Stop as stop:
                reason, complete = stop.reason, False
                d -= 1
                break
            for i, w in viol.items():
                found.setdefault(i, (d, w[1]))
            if self.paths:
                paths_depth = d
            if self.props and len(found) == len(self.props):
                break
        outcome = Outcome(found, self.visited.count, self.transitions, d,
                          time.monotonic() - start, complete, reason,
                          self.visited.nbytes(), stats=dict(self.timing),
                          paths_depth=paths_depth if least else 0)
        if self.opt.keep_edges:
            outcome.edges = (tuple(np.concatenate(x) for x in zip(*self.edges, strict=True))
                             if self.edges else None)
            outcome.depth_of = np.concatenate(
                [np.full(len(layer.parent), k) for k, layer in enumerate(self.layers)])
            outcome.witness_of = self.witness
        return outcome

    def _layer_within_paths_limit(self, front: Any, meta: dict[str, np.ndarray], d: int,
                                  pending: Sequence[int]
                                  ) -> tuple[Any, dict[str, np.ndarray],
                                             dict[int, tuple[tuple[int, ...], Witness]]]:
        """`_layer`; but when a layer kept with its paths would take the search past
        `Options.paths_until` states (its candidates are held until the layer-wide
        deduplication), the search stops keeping paths and streams that layer and the
        rest in bounded memory. A violation found from then on has its depth but no run;
        the caller searches it again (checker/methods/array/__init__.py)."""
        transitions = self.transitions
        try:
            return self._layer(front, meta, d, pending)
        except _PathsLimit:
            self.transitions = transitions  # the abandoned layer's are counted again
            self.paths = False
            self.opt = replace(self.opt, least=False)  # no rank is kept from here on
            self.layers = []  # the runs already found are built; no later one is asked
            self._pending = []
            return self._layer(_Chunks.of(front), {}, d, pending)

    def _layer(self, front: Any, meta: dict[str, np.ndarray], d: int,
               pending: Sequence[int]
               ) -> tuple[Any, dict[str, np.ndarray],
                          dict[int, tuple[tuple[int, ...], Witness]]]:
        """Expand one layer: every parent x arrival choice x EOS choice. A search that
        keeps paths (node ids, parents, least runs) keeps the layer's candidates until a
        layer-wide deduplication (`_layer_paths`); one that does not streams them
        (`_layer_streamed`)."""
        if self.paths:
            return self._layer_paths(front, meta, d, pending)
        return self._layer_streamed(front, d, pending)

    def _layer_streamed(self, front: _Chunks, d: int, pending: Sequence[int]
                        ) -> tuple[_Chunks, dict[str, np.ndarray],
                                   dict[int, tuple[tuple[int, ...], Witness]]]:
        """One layer in bounded memory: the frontier is read chunk by chunk (each chunk
        released once expanded), and each pass's children are deduplicated at once
        against each other, the visited set and the layer's keys so far, so the new
        frontier holds each state once, bit-packed (`_Chunks`). The memory held is the
        visited set, the two frontiers packed, and one pass. The states, transitions and
        the first violating depth are those of `_layer_paths`; the order of the new
        frontier is not (nothing reads it: no path is kept)."""
        may_arrive = self.opt.arrival_steps is None or d <= self.opt.arrival_steps
        layer_keys = Visited(self.opt.exact)
        self._layer_keys = layer_keys
        self._pending = []
        nxt = _Chunks(self.store)
        viol: dict[int, tuple[tuple[int, ...], Witness]] = {}
        for sub in front.drain():
            for b, _ in self._passes(sub, {}, d, may_arrive, pending, viol):
                t0 = time.monotonic()
                if pending and all(i in b.vmask for i in pending):
                    cand = np.nonzero(~np.all(np.stack([b.vmask[i] for i in pending]),
                                              axis=0))[0]
                    if len(cand):
                        cand = cand[first_of_each(b.words[cand])]
                else:
                    cand = first_of_each(b.words)
                if len(cand):
                    cand = cand[self.visited.lookup(b.words[cand]) < 0]
                if len(cand):
                    cand = cand[layer_keys.lookup(b.words[cand]) < 0]
                if len(cand):
                    layer_keys.add(b.words[cand])
                    nxt.append(self._rows(b, cand))
                self.timing["dedup"] += time.monotonic() - t0
                if self.visited.count + layer_keys.count > self.opt.max_states:
                    raise _Stop(f"state limit {self.opt.max_states}")
        t0 = time.monotonic()
        nxt.flush()
        self.visited.absorb(layer_keys)
        self._layer_keys = None
        self.next_id += len(nxt)
        self.timing["dedup"] += time.monotonic() - t0
        return nxt, {}, viol

    def _layer_paths(self, front: np.ndarray, meta: dict[str, np.ndarray], d: int,
                     pending: Sequence[int]
                     ) -> tuple[np.ndarray, dict[str, np.ndarray],
                                dict[int, tuple[tuple[int, ...], Witness]]]:
        """Expand one layer keeping paths. Each pass's children are deduplicated against
        each other and the visited set; the survivors of all passes once more against
        each other, keeping the first (or the least)."""
        may_arrive = self.opt.arrival_steps is None or d <= self.opt.arrival_steps
        parts: list[list[Any]] = []
        self._pending = parts
        edges: list[tuple[np.ndarray, ...]] = []
        viol: dict[int, tuple[tuple[int, ...], Witness]] = {}
        kept = 0
        for b, j in self._passes(front, meta, d, may_arrive, pending, viol):
            t0 = time.monotonic()
            if self.opt.keep_edges and j == 0:
                edges.append((b.info["parent"], b.words, b.info["stuck"],
                              b.info["eos"]))
            # A child that violates every undecided property is not expanded.
            if pending and all(i in b.vmask for i in pending):
                cand = np.nonzero(~np.all(np.stack([b.vmask[i] for i in pending]),
                                          axis=0))[0]
            else:
                cand = None
            if cand is None:
                cand = first_of_each(b.words, self._order(b.info, slice(None)))
            elif len(cand):
                cand = cand[first_of_each(b.words[cand], self._order(b.info, cand))]
            if len(cand):
                cand = cand[self.visited.lookup(b.words[cand]) < 0]
            if len(cand):
                parts.append([self._rows(b, cand), b.words[cand],
                              {k: v[cand] for k, v in b.info.items()}])
                kept += len(cand)
            self.timing["dedup"] += time.monotonic() - t0
            if self.visited.count + kept > self.opt.max_states:
                raise _Stop(f"state limit {self.opt.max_states}")
            limit = self.opt.paths_until
            if limit is not None and not self.opt.keep_edges and \
                    self.visited.count + kept > limit:
                raise _PathsLimit
        t0 = time.monotonic()
        if parts:
            nxt = np.concatenate([p[0] for p in parts])
            words = np.concatenate([p[1] for p in parts])
            info = {k: np.concatenate([p[2][k] for p in parts]) for k in parts[0][2]}
        else:
            nxt = np.zeros((0, len(self.colkeys)), dtype=self.store)
            words = np.zeros((0, self.codec.words if self.codec else 1), dtype=np.uint64)
            info = {k: np.zeros(0, dtype=np.int64) for k in ("parent", "choice", "eos", "j")}
            if self.opt.least:
                info["ranks"] = np.zeros((0, 4), dtype=np.int64)
        self._pending = []
        first = first_of_each(words, self._order(info, np.arange(len(nxt))))
        if self.opt.least:
            r = info["ranks"][first]
            first = first[np.lexsort((r[:, 3], r[:, 2], r[:, 1], r[:, 0]))]
        else:
            first = np.sort(first)
        nxt, words = nxt[first], words[first]
        info = {k: v[first] for k, v in info.items()}
        new_meta: dict[str, np.ndarray] = {}
        if self.opt.least:
            r = info["ranks"]
            new_s = np.ones(len(r), dtype=bool)
            new_s[1:] = np.any(r[1:, :2] != r[:-1, :2], axis=1)
            new_meta["srank"] = np.cumsum(new_s) - 1
            new_meta["prank"] = np.arange(len(r), dtype=np.int64)
        if self.paths:
            ids = self.next_id + np.arange(len(nxt), dtype=np.int64)
            self.visited.add(words, ids)
            self.layers.append(_Layer(self.next_id, info["parent"], info["choice"],
                                      info["j"].astype(np.int8), info["eos"]))
        else:
            # No run is asked of this search (the first, which only finds the depths), so
            # neither node ids nor parents are kept: 8 bytes of hash + the key per state.
            self.visited.add(words)
        if self.opt.keep_edges:
            base = self.layers[-2].first_id
            for par, w, stuck, eos in edges:
                self.edges.append((base + par, self.visited.lookup(w), stuck.astype(bool),
                                   eos))
        self.next_id += len(nxt)
        self.timing["dedup"] += time.monotonic() - t0
        return nxt, new_meta, viol

    def _order(self, info: dict[str, np.ndarray], idx: Any) -> tuple[np.ndarray, ...]:
        """np.lexsort keys (least significant first) of minimize.py's order, least mode."""
        if not self.opt.least:
            return ()
        r = info["ranks"][idx]
        return (r[:, 3], r[:, 2], r[:, 1], r[:, 0])

    def _passes(self, front: np.ndarray, meta: dict[str, np.ndarray], d: int,
                may_arrive: bool, pending: Sequence[int],
                viol: dict[int, tuple[tuple[int, ...], Witness]]) -> Iterator[tuple[Any, int]]:
        """Every pass of the rules over `front` at depth `d` (per count of requests arrived,
        per number of new arrivals j, per batch of parents and choices), with j; a pass's
        violations of the undecided properties are noted in `viol` before it is yielded
        (a decided property keeps its first layer). Stops at the deadline."""
        arrived = front[:, self.ci[("arrived",)]].astype(np.int64)
        for a in sorted(set(arrived.tolist())):
            rows = np.nonzero(arrived == a)[0]
            room = self.n - a if may_arrive else 0
            for j in range(room + 1):
                for batch in self._batches(rows, j):
                    if time.monotonic() > self.deadline:
                        raise _Stop("time limit")
                    b = self._expand(front, meta, d, a, j, *batch)
                    for i, mask in b.vmask.items():
                        if i in pending:
                            self._note_violation(viol, i, b, mask)
                    yield b, j

    def _batches(self, rows: np.ndarray, j: int) -> list[tuple[np.ndarray, int, int]]:
        """(parent rows, first choice, last choice) per pass: at most `chunk` elements."""
        e = 1 << self.n
        choices = len(self.kinds) ** j
        step_c = min(choices, max(1, self.opt.chunk // e))
        per_parent = max(1, self.opt.chunk // (step_c * e))
        return [(rows[p0:p0 + per_parent], c0, min(choices, c0 + step_c))
                for p0 in range(0, len(rows), per_parent)
                for c0 in range(0, choices, step_c)]

    # ---- one pass of the rules -------------------------------------------------------------

    def _expand(self, front: np.ndarray, meta: dict[str, np.ndarray], d: int, a: int,
                j: int, rows: np.ndarray, c0: int, c1: int) -> _Batch:
        """One pass: parents `rows` (a requests arrived) x choices c0..c1 of j arrivals x
        every EOS choice. Every value stays at its broadcast shape; the keys are computed
        there and only their words are gathered per valid transition."""
        t0 = time.monotonic()
        n, m, c = self.n, len(rows), c1 - c0
        dims = 2 + n
        shape = (m, c, *([2] * n))
        sub = front[rows]
        const = np.all(sub == sub[:1], axis=0) if m else np.ones(sub.shape[1], bool)

        def parent(col: int, as_bool: bool = False) -> Any:
            if const[col]:
                v = int(sub[0, col])
                return bool(v) if as_bool else v
            v = sub[:, col].reshape((m,) + (1,) * (dims - 1))
            return v.astype(bool) if as_bool else v.astype(self.dtype, copy=False)

        kinds_idx = _digits(np.arange(c0, c1, dtype=np.int64), len(self.kinds), j)

        def kind(f: str, s: int) -> Any:
            v = self.kind_cols[f][kinds_idx[:, s - a]]
            return int(v[0]) if (v == v[0]).all() else v.astype(self.dtype).reshape(
                (1, c) + (1,) * n)

        src: dict[int, Any] = {}
        specs = []
        for s in range(n):
            values: dict[str, Any] = {}
            for f in _SPEC_FIELDS:
                if s < a:
                    values[f] = (parent(self.ci[("spec", s, f)]) if f in self.spec_fields
                                 else 1 if f == "arrival_step" else 0)
                elif s < a + j:
                    values[f] = (d if f == "arrival_step" else kind(f, s)
                                 if f in self.kind_cols else 0)
                else:
                    values[f] = _UNUSED.get(f, 0)
            specs.append(SlotSpec(**values))
            for f in self.spec_fields:
                src[self.ci[("spec", s, f)]] = values[f] if s < a + j else 0
        leaf_value = {leaf.path: leaf.initial for leaf in self.leaves}
        for leaf in self.stored_leaves:
            leaf_value[leaf.path] = parent(self.ci[("leaf", leaf.path)], leaf.is_bool)
        for leaf in self.leaves:
            if leaf.is_bool and isinstance(leaf_value[leaf.path], int):
                leaf_value[leaf.path] = bool(leaf_value[leaf.path])
        state = build(self.template, lambda p: leaf_value[p], d - 1)
        eos = [np.array([False, True]).reshape((1,) * (2 + i) + (2,) + (1,) * (n - 1 - i))
               for i in range(n)]
        nxt, obs = self.engine.step(self.ops, self.cfg, specs, state, eos)
        valid: Any = True
        for i in range(n):
            valid = self.ops.and_(valid, self.ops.implies(eos[i], obs.slots[i].sampled))
            if self.opt.no_eos:
                valid = self.ops.and_(valid, self.ops.not_(eos[i]))
        if self.atoms is None:
            past = self._past(sub, const, m, dims, d)
            holds = {i: prop.holds(self.ops, [*past, obs], len(past))
                     for i, prop in enumerate(self.props) if prop.kind != "lasso"}
        else:
            t_index = min(d - 1, self.lags)

            def read(path: Path) -> Any:
                # "a.<lag>.<atom>": a past step's atom; "o.0.<slot|step>.<field>": now
                kind, lag, owner, *field = str(path[0]).split(".")
                if kind == "a":
                    return parent(self.ci[("hist", int(lag), "atom", int(owner))])
                return getattr(obs, field[0]) if owner == "step" else \
                    getattr(obs.slots[int(owner)], field[0])
            holds = {i: self.atoms.formulas[i][t_index](read, self.ops)
                     for i in range(len(self.props))}
        values = values_of(nxt)
        for leaf in self.stored_leaves:
            src[self.ci[("leaf", leaf.path)]] = values[leaf.path]
        src[self.ci[("arrived",)]] = a + j
        for lag in range(2, self.lags + 1):
            for s in range(n):
                for f in self.hist_slot:
                    src[self.ci[("hist", lag, s, f)]] = parent(self.ci[("hist", lag - 1, s, f)])
            for f in self.hist_step:
                src[self.ci[("hist", lag, None, f)]] = parent(self.ci[("hist", lag - 1, None,
                                                                       f)])
        if self.lags >= 1:
            for s in range(n):
                for f in self.hist_slot:
                    src[self.ci[("hist", 1, s, f)]] = getattr(obs.slots[s], f)
            for f in self.hist_step:
                src[self.ci[("hist", 1, None, f)]] = getattr(obs, f)
        if self.atoms is not None:
            def this_step(path: Path) -> Any:
                _, _, owner, field = str(path[0]).split(".")
                return getattr(obs, field) if owner == "step" else \
                    getattr(obs.slots[int(owner)], field)
            for atom, fn in enumerate(self.atoms.atom_fns):
                src[self.ci[("hist", 1, "atom", atom)]] = fn(this_step, self.ops)
                for lag in range(2, self.lags + 1):
                    src[self.ci[("hist", lag, "atom", atom)]] = parent(
                        self.ci[("hist", lag - 1, "atom", atom)])
        if self.pool is not None and self.pool_order and self.engine.well_formed is not None:
            # The premise of the renamed-swap proof behind the pool key
            # (analysis.renamed_swap): every state reached is inside the engine's
            # invariant (retiring a slot keeps it there: a finished slot's facts are
            # its status and no blocks). A state outside stops the search loudly
            # rather than be merged unsoundly.
            inside = self.engine.well_formed(self.ops, self.cfg, specs, nxt)
            if not np.all(self.ops.or_(self.ops.not_(valid), inside)):
                raise AssertionError(
                    f"a state at depth {d} is outside {self.engine.name}'s invariant, "
                    "which the pool key's slot order assumes (analysis.renamed_swap)")
        if self.opt.prune_eos:
            valid = self._prune_eos(valid, src, holds, dims)
        self.timing["rules"] += time.monotonic() - t0
        t0 = time.monotonic()
        flat = np.flatnonzero(np.broadcast_to(np.asarray(valid), shape))
        t = len(flat)
        self.transitions += t
        idx = np.unravel_index(flat, shape)
        gather = _Gather(shape, idx)
        eos_mask = np.zeros(t, dtype=np.int64)
        for i in range(n):
            eos_mask |= idx[2 + i].astype(np.int64) << i
        info = {"parent": rows[idx[0]], "choice": c0 + idx[1].astype(np.int64),
                "eos": eos_mask, "j": np.full(t, j, dtype=np.int64)}
        if self.opt.keep_edges:
            stuck = gather(self.ops.or_(*[
                self.ops.and_(o.held, o.prompt_len + o.max_tokens <= self.cfg.max_model_len)
                for o in obs.slots]))
            info["stuck"] = np.broadcast_to(np.asarray(stuck, dtype=np.int64), (t,)).copy()
        if self.opt.least:
            pad = np.zeros(t, dtype=np.int64)
            base = len(self.kinds) + 1
            for s in range(n):
                digit = (kinds_idx[idx[1], s - a].astype(np.int64) if a <= s < a + j
                         else np.full(t, len(self.kinds), dtype=np.int64))
                pad = pad * base + digit
            eps = np.zeros(t, dtype=np.int64)
            for i in range(n):
                eps |= idx[2 + i].astype(np.int64) << (n - 1 - i)
            info["ranks"] = np.stack([meta["srank"][rows][idx[0]], pad,
                                      meta["prank"][rows][idx[0]], eps], axis=1)
        vmask = {}
        for i, h in holds.items():
            if isinstance(h, (bool, int)) and h:
                continue
            v = ~np.broadcast_to(np.asarray(gather(h), dtype=bool), (t,))
            if v.any():
                vmask[i] = v
        self.timing["gather"] += time.monotonic() - t0
        t0 = time.monotonic()
        self._retire(src)
        words = self._words(src, d, gather, t)
        self.timing["keys"] += time.monotonic() - t0
        return _Batch(t, shape, idx, src, info, vmask, words, a + j)

    def _prune_eos(self, valid: Any, src: dict[int, Any], holds: dict[int, Any],
                   dims: int) -> Any:
        """Drop an EOS choice that changes nothing kept: where slot i's EOS leads to the
        same state row and the same verdicts as no EOS (a request that finishes by length
        anyway), the EOS run reaches the same state by a larger path, so it can be neither
        the least run there nor a different verdict."""
        for i in range(self.n):
            axis = 2 + i
            same: Any = True
            for value in (*src.values(), *holds.values()):
                if isinstance(value, (bool, int)):
                    continue
                v = np.asarray(value)
                if v.ndim < dims:
                    v = v.reshape((1,) * (dims - v.ndim) + v.shape)
                if v.shape[axis] == 1:
                    continue
                no, yes = np.take(v, 0, axis=axis), np.take(v, 1, axis=axis)
                same = self.ops.and_(same, np.expand_dims(no == yes, axis))
            eos1 = np.array([False, True]).reshape((1,) * axis + (2,) +
                                                   (1,) * (dims - axis - 1))
            mask = self.ops.not_(self.ops.and_(eos1, same))
            valid = self.ops.and_(valid, mask)
        return valid

    def _retire(self, src: dict[int, Any]) -> None:
        """A retired slot's leaves back to their initial values, its request to 0."""
        for status, reset in self.retire_cols:
            values = [src[c] for c in status]
            if all(isinstance(v, (bool, int)) for v in values):
                if tuple(int(v) for v in values) not in self.retired:
                    continue
                gone: Any = True
            elif len(values) == 1:
                gone = np.isin(values[0], [r[0] for r in self.retired])
                if not gone.any():
                    continue
            else:
                gone = False
                for combo in self.retired:
                    gone = self.ops.or_(gone, self.ops.and_(
                        *[np.asarray(v) == x for v, x in zip(values, combo, strict=True)]))
                if not np.any(gone):
                    continue
            for col, value in reset:
                src[col] = value if gone is True else np.where(gone, value, src[col])

    def _put(self, child: np.ndarray, col: int, values: Any) -> None:
        """Store a column, refusing values the matrix's int type cannot hold."""
        if isinstance(values, np.ndarray) and len(values) and self.store != np.int64:
            lo, hi = int(values.min()), int(values.max())
            if lo < self.store_range[0] or hi > self.store_range[1]:
                raise OverflowError(f"{self.colkeys[col]} takes {lo}..{hi}, beyond "
                                    f"{np.dtype(self.store).name}")
        child[:, col] = values

    def _past(self, sub: np.ndarray, const: np.ndarray, m: int, dims: int,
              d: int) -> list[Step]:
        """The history steps a property reads, oldest first, as they were."""
        out = []
        for lag in range(min(self.lags, d - 1), 0, -1):
            def col(key: Any) -> Any:
                k = self.ci[key]
                if const[k]:
                    return int(sub[0, k])
                return sub[:, k].reshape((m,) + (1,) * (dims - 1)).astype(self.dtype)
            slot_values = [{f: col(("hist", lag, s, f)) for f in self.hist_slot}
                           for s in range(self.n)]
            step_values = {f: col(("hist", lag, None, f)) for f in self.hist_step}
            out.append(history.past_step(d - lag, slot_values, step_values, self.cfg))
        return out

    # ---- keys ---------------------------------------------------------------------------

    def _words(self, src: dict[int, Any], d: int, take: Any, rows: int) -> np.ndarray:
        """The packed keys of a pass: the key's columns gathered at the valid transitions
        (fewer than the broadcast shapes hold), then ranked, retired and packed."""
        n = self.n
        taken: dict[int, Any] = {}

        def col(c: int) -> Any:
            if c not in taken:
                v = take(src[c])
                taken[c] = v if isinstance(v, int) else np.asarray(v)
            return taken[c]

        ranks = {}
        if self.order:
            getter = _Getter(lambda p: col(self.ci[("leaf", p)]))
            for of in self.order:
                vals = [col(self.ci[("leaf", ("slots", i, *of.field))]) for i in range(n)]
                for i in range(n):
                    r: Any = 0
                    for k in range(n):
                        if i != k:
                            g = self.guards[(of.field, i, k)](getter, self.ops)
                            # bools add as 0/1
                            r = r + self.ops.and_(g, vals[k] < vals[i])
                    ranks[(of.field, i)] = r
        glob_wide = [src[c] for c in self.key_glob_cols]
        glob_wide += self._group_ranks(lambda c: src[c])
        if self.opt.arrival_steps is not None:
            glob_wide.append(min(d, self.opt.arrival_steps))
        if self.depth_in_key:
            glob_wide.append(d)
        for lag in range(1, self.lags + 1):
            glob_wide.append(int(d - lag >= 1))
        if rows == 0:
            return np.zeros((0, self.codec.words if self.codec else 1), dtype=np.uint64)
        rank_cols = [[ranks[(of.field, s)] for of in self.order] for s in range(n)]
        if self.pool is not None:
            return self._pool_words(col, rank_cols, glob_wide, rows)
        # A slot's own columns depend on few axes (its parent, its request, its own EOS):
        # their part of the slot's code is computed at that shape and gathered once; the
        # ranks, which compare slots, are added at the valid transitions.
        local = [[src[c] for c in cols] for cols in self.key_slot_cols]
        self._fit(glob_wide, [lc + rc for lc, rc in zip(local, rank_cols, strict=True)])
        assert self.codec is not None
        if self.codec.compact:
            zeros = [0] * len(self.order)
            g = take(self.codec.glob.code(glob_wide))
            codes = []
            for s in range(n):
                code = take(self.codec.slot.code([*local[s], *zeros]))
                code = code + self.codec.slot.code([0] * len(local[s]) + rank_cols[s]) - \
                    self.codec.slot.code([0] * (len(local[s]) + len(self.order)))
                codes.append(code)
            prio = None
            if self.codec.symmetry == "priority" and self.codec.priority_col is not None:
                prio = [col(self.key_slot_cols[s][self.codec.priority_col]) for s in range(n)]
            return self.codec.encode_codes(g, codes, prio, rows)
        slots = [[col(c) for c in cols] + rank_cols[s]
                 for s, cols in enumerate(self.key_slot_cols)]
        glob = [col(c) for c in self.key_glob_cols] + self._group_ranks(col)
        glob += glob_wide[len(glob):]
        return self.codec.encode(glob, slots, rows)

    def _pool_words(self, col: Any, rank_cols: list[list[Any]], glob_wide: list[Any],
                    rows: int) -> np.ndarray:
        """The packed keys of a pass with a paged pool: the slots in pool.canonical's
        order, each with its table as block names, and the pool as the names' ref counts,
        renamed hashes and copies (see checker/methods/array/pool.py for why two states
        with one key have the same futures)."""
        assert self.pool is not None
        n = self.n

        def value(c: int | tuple[str, int]) -> Any:
            return c[1] if isinstance(c, tuple) else col(c)

        own = [[col(c) for c in cols] + rank_cols[s]
               for s, cols in enumerate(self.key_slot_cols)]
        tables = [[value(c) for c in per] for per in self.pool_tables]
        status = np.stack([np.broadcast_to(np.asarray(col(c), dtype=np.int64), (rows,))
                           for c in self.pool_status], axis=1)
        empty = np.ones((rows, n), dtype=bool)
        for s in range(n):
            for t in tables[s]:
                empty[:, s] &= np.broadcast_to(np.asarray(t) == 0, (rows,))
        live = ~(np.isin(status, self.pool_dead) & empty)
        order, names, glob_pool = pool.canonical(
            self.pool, n, live, own, tables,
            [[value(c) for c in per] for per in self.pool_blocks], rows, self.pool_order)
        per_slot = [own[s] + names[s] for s in range(n)]
        slots: list[list[Any]] = [[] for _ in range(n)]
        for k in range(len(per_slot[0])):
            stacked = np.stack([np.broadcast_to(np.asarray(per_slot[s][k], dtype=np.int64),
                                                (rows,)) for s in range(n)], axis=1)
            stacked = np.take_along_axis(stacked, order, axis=1)
            for s in range(n):
                slots[s].append(stacked[:, s])
        glob = [col(c) for c in self.key_glob_cols] + self._group_ranks(col)
        glob += glob_wide[len(glob):] + glob_pool
        glob = [np.broadcast_to(np.asarray(g, dtype=np.int64), (rows,)) for g in glob]
        self._fit(glob, slots)
        assert self.codec is not None
        return self.codec.encode(glob, slots, rows)

    def _group_ranks(self, value: Any) -> list[Any]:
        """The ranks of the global order groups' leaves (`value` of a column), in group
        order: what the key holds of them (analysis.Shape.global_order)."""
        out: list[Any] = []
        for group in self.global_order:
            out += analysis.group_ranks([
                value(self.ci[("leaf", p)]) if ("leaf", p) in self.ci else self.initial[p]
                for p in group])
        return out

    def _fit(self, glob: list[Any], slots: list[list[Any]]) -> None:
        """Widen the codec (and re-encode what is stored) if these values do not fit."""
        gmin = [int(np.min(c)) for c in glob]
        gmax = [int(np.max(c)) for c in glob]
        smin = [min(int(np.min(cols[k])) for cols in slots) for k in range(len(slots[0]))]
        smax = [max(int(np.max(cols[k])) for cols in slots) for k in range(len(slots[0]))]
        if self.seen is None:
            self.seen = (gmin, gmax, smin, smax)
        else:
            g0, g1, s0, s1 = self.seen
            self.seen = ([min(a, b) for a, b in zip(g0, gmin, strict=True)],
                         [max(a, b) for a, b in zip(g1, gmax, strict=True)],
                         [min(a, b) for a, b in zip(s0, smin, strict=True)],
                         [max(a, b) for a, b in zip(s1, smax, strict=True)])
        if self.codec is None or not self.codec.holds(gmin, gmax, smin, smax):
            new = Codec.fit(*self.seen, self.n, self.symmetry, self.priority_col)
            if self.codec is not None:
                self.visited.repack(self.codec, new)
                if self._layer_keys is not None:
                    self._layer_keys.repack(self.codec, new)
                for part in self._pending:
                    part[1] = new.recode(part[1], self.codec)
            self.codec = new

    def _rows(self, batch: _Batch, cand: np.ndarray) -> np.ndarray:
        """The state rows of some transitions of a pass."""
        gather = _Gather(batch.shape, tuple(ix[cand] for ix in batch.idx))
        out = np.empty((len(cand), len(self.colkeys)), dtype=self.store)
        for col in range(len(self.colkeys)):
            self._put(out, col, gather(batch.src[col]))
        return out

    # ---- runs ---------------------------------------------------------------------------

    def _note_violation(self, viol: dict[int, tuple[tuple[int, ...], Witness]], i: int,
                        b: _Batch, mask: np.ndarray) -> None:
        pos = np.nonzero(mask)[0]
        info = b.info
        ranks = info.get("ranks")
        if ranks is not None:
            r = ranks[pos]
            k = int(pos[np.lexsort((r[:, 3], r[:, 2], r[:, 1], r[:, 0]))[0]])
            # Fewest requests first, then the path order.
            key = (b.arrived, *(int(x) for x in ranks[k]))
        else:
            k = int(pos[0])
            key = (0,)
        if i in viol and (ranks is None or viol[i][0] <= key):
            return
        if not self.paths:
            viol[i] = (key, Witness((), ()))
            return
        last = (self._kinds(int(info["choice"][k]), int(info["j"][k])), int(info["eos"][k]))
        prefix = self._walk(len(self.layers) - 1, int(info["parent"][k]))
        viol[i] = (key, Witness((*prefix.arrivals, last[0]), (*prefix.eos, last[1])))

    def _kinds(self, choice: int, j: int) -> tuple[int, ...]:
        return tuple(int(x) for x in _digits(np.array([choice]), len(self.kinds), j)[0])

    def _walk(self, layer: int, node: int) -> Witness:
        arrivals: list[tuple[int, ...]] = []
        eos: list[int] = []
        for k in range(layer, 0, -1):
            lay = self.layers[k]
            arrivals.append(self._kinds(int(lay.choice[node]), int(lay.j[node])))
            eos.append(int(lay.eos[node]))
            node = int(lay.parent[node])
        return Witness(tuple(reversed(arrivals)), tuple(reversed(eos)))

    def witness(self, node_id: int) -> Witness:
        """The run kept for a node (its least run in least mode)."""
        k = max(i for i, layer in enumerate(self.layers) if layer.first_id <= node_id)
        return self._walk(k, node_id - self.layers[k].first_id)


class _Chunks:
    """A frontier as chunks of bit-packed rows: each column less its least value in the
    chunk, packed by a keys.Layout of the chunk's own ranges, so a row of small ints
    takes a few words instead of a store int per column. Rows are appended in order,
    packed once `target` rows are buffered, and read back in order, each chunk released
    as it is read."""

    def __init__(self, store: Any, target: int = 1 << 18) -> None:
        self.store, self.target = store, target
        self.chunks: list[tuple[Layout, np.ndarray, np.ndarray]] = []
        self.buffer: list[np.ndarray] = []
        self.buffered = 0
        self.count = 0

    @staticmethod
    def of(rows: np.ndarray) -> _Chunks:
        """A frontier of these rows."""
        out = _Chunks(rows.dtype.type)
        out.append(rows)
        out.flush()
        return out

    def __len__(self) -> int:
        return self.count

    def append(self, rows: np.ndarray) -> None:
        """Add rows at the end."""
        self.buffer.append(rows)
        self.buffered += len(rows)
        self.count += len(rows)
        if self.buffered >= self.target:
            self.flush()

    def flush(self) -> None:
        """Pack the buffered rows into a chunk."""
        if not self.buffer:
            return
        rows = np.concatenate(self.buffer) if len(self.buffer) > 1 else self.buffer[0]
        self.buffer, self.buffered = [], 0
        lo = rows.min(axis=0).astype(np.int64)
        shifted = rows.astype(np.int64) - lo
        lay = Layout.fit([0] * len(lo), shifted.max(axis=0).tolist())
        self.chunks.append((lay, lo, lay.pack(list(shifted.T), len(rows))))

    def drain(self) -> Iterator[np.ndarray]:
        """The rows, chunk by chunk (every chunk is dropped as it is handed out)."""
        self.flush()
        self.chunks.reverse()
        while self.chunks:
            yield self._unpack(*self.chunks.pop())
        self.count = 0

    def rows(self) -> np.ndarray:
        """Every row, as one matrix (the frontier stays as it is)."""
        self.flush()
        parts = [self._unpack(*chunk) for chunk in self.chunks]
        return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=self.store)

    def _unpack(self, lay: Layout, lo: np.ndarray, words: np.ndarray) -> np.ndarray:
        return (np.stack(lay.unpack(words), axis=1) + lo).astype(self.store)


@dataclass(slots=True)
class _Batch:
    """One pass: its valid transitions (flat positions `idx` in `shape`), every frontier
    column as a broadcast value, how each transition was reached, the properties it
    violates, and its keys."""

    t: int
    shape: tuple[int, ...]
    idx: tuple[np.ndarray, ...]
    src: dict[int, Any]
    info: dict[str, np.ndarray]
    vmask: dict[int, np.ndarray]
    words: np.ndarray
    arrived: int


class _Getter:
    """A leaf getter with a memo, so guards share their common subterms."""

    def __init__(self, get: Any) -> None:
        self.get, self.memo = get, {}

    def __call__(self, path: Path) -> Any:
        return self.get(path)


class _Gather:
    """Values of broadcast arrays at the valid transitions (flat indices per shape)."""

    def __init__(self, shape: tuple[int, ...], idx: tuple[np.ndarray, ...]) -> None:
        self.shape, self.idx = shape, idx
        self.cache: dict[tuple[int, ...], np.ndarray] = {}

    def __call__(self, x: Any) -> Any:
        if isinstance(x, (bool, int)):
            return int(x)
        x = np.asarray(x)
        if x.ndim < len(self.shape):
            x = x.reshape((1,) * (len(self.shape) - x.ndim) + x.shape)
        pos = self.cache.get(x.shape)
        if pos is None:
            pos = np.zeros(len(self.idx[0]), dtype=np.int64)
            stride = 1
            for dim in range(len(self.shape) - 1, -1, -1):
                if x.shape[dim] > 1:
                    pos += self.idx[dim] * stride
                stride *= x.shape[dim]
            self.cache[x.shape] = pos
        return np.ascontiguousarray(x).reshape(-1)[pos]


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _PathsLimit(Exception):
    """A layer kept with its paths would pass `Options.paths_until` states."""


def _digits(codes: np.ndarray, base: int, width: int) -> np.ndarray:
    """Per code, its `width` digits in `base`, most significant first (lexicographic
    order of kind tuples = numeric order of codes)."""
    out = np.zeros((len(codes), width), dtype=np.int64)
    rest = codes.copy()
    for k in range(width - 1, -1, -1):
        out[:, k] = rest % base
        rest //= base
    return out


def _eval_dtype(cfg: Any) -> Any:
    """int16 when every value the rules see stays small (every config int below 2**10:
    the rules add and compare such values and multiply by small constants), else int64."""
    return np.int16 if _largest(cfg) < (1 << 10) else np.int64


def _largest(cfg: Any) -> int:
    """The largest absolute int of a config, through nested configs (a product's two)."""
    big = 0
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if is_dataclass(v):
            big = max(big, _largest(v))
        elif isinstance(v, int) and not isinstance(v, bool):
            big = max(big, abs(v))
    return big
