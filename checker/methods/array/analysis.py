"""What the array explorer may forget of a state, derived from the engine's own rules and
`same_behaviour` with z3, once per (engine, rule config, slot count).

The explorer deduplicates states by a key. Everything below is read off the engine's
EngineModel, never off its field names, and each reduction is used only when z3 proves the
fact it rests on (else the explorer keeps the leaf raw, which is always sound):

- **behaviour key** (`same_behaviour`): its conjuncts say which leaves must be equal
  (`a.p == b.p`) and which leaves only order the slots (`G -> (a.i.f < a.j.f) ==
  (b.i.f < b.j.f)`, a guarded relative order: vLLM's run and wait keys). A leaf of the
  second kind enters the key as its rank among the slots its guard selects. Global leaves
  of one indexed tuple may be ordered the same way without a guard
  (`(a.pool.i.f < a.pool.j.f) == (b.pool.i.f < b.pool.j.f)`: with prefix caching, the
  free queue's cached tail and the order copies of a hash entered the cache); each enters
  the key as its rank in its tuple. A leaf in no conjunct (key counters, preemption
  counts) is left out. z3 proves that equal keys imply `same_behaviour`.
- **carried leaves** (per property): a left-out or ranked leaf whose raw value flows into an
  observable the property reads (vLLM's `num_preemptions` into `SlotObs.num_preemptions`,
  the wait keys and their counters into `queue_key`) is kept raw, with every leaf its next
  value flows from. Flow is syntactic: through arithmetic and the branches of an `ite`,
  never through a condition (a condition is behaviour, which the key already fixes).
- **arrival step**: whether the step reads an arrived request's `arrival_step` (z3: two
  arrival steps before the current one give the same step). vLLM's rules do not (a request
  joins the queue when it arrives, and then its queue key orders it); the batching
  baselines do (a flush waits on the head's age), so there the key keeps arrival steps and
  the step number.
- **symmetry**: whether swapping two arrived slots commutes with the step (z3, for each
  adjacent pair). Slot index = arrival_time, so this holds when nothing breaks a tie by
  arrival time (vLLM FCFS: the queue order lives in the keys) and, under a priority policy,
  only for slots of different priority: there the canonical order is the stable sort by
  priority. A property is searched with symmetry only if the swap also carries along every
  observable it reads (`permuted`; never arrival_time, and not PRIORITY's queue_key, which
  is priority * slots + arrival_time).
- **retired slots**: status values v such that a slot with status v never changes again and
  no other output depends on its other leaves or its request (z3). vLLM's FINISHED is one:
  the explorer resets such a slot to its initial leaves, so runs that differ only in what
  the finished requests were meet. A slot with several status fields (diff's product of
  two engines, checker/methods/array/product.py: one per side) retires at a combination of
  values, one per field, each a value its field never leaves, proved as one (or read off
  the parts' proofs, `_joint_facts`). Where no status value retires alone (a finished
  request's output still in flight under the AsyncScheduler, its block table in a state
  z3 cannot rule out), a slot retires at the status value together with some other
  in-slot leaves at their initial values (`Shape.retire_quiet`): the leaves the step
  resets when the slot enters that status, then those that still change in it, each
  added until the slot keeps every leaf; the proof is the same, made for slots in that
  condition only, and the explorer checks the whole condition. The premise, as for the
  reference explorer (whose `state_key` drops finished requests), is that a property
  does not depend on what a retired slot goes on reporting after it retired;
  tests/test_array_explore.py compares verdicts with and without the reduction.
  Where the quiet leaves still moving (what is in flight) steer nothing but the slot's own
  reports, the slot retires as it enters the status (`Shape.retired_at_once`): the value
  is absorbing and the simplified step names the slot's other leaves and its request in
  no output but its own, so states that differ only there have the same futures; the
  reports that read them (`Shape.at_once_obs`, vLLM's `finish_rank`) keep the quiet
  retirement for a property that reads one. This is the reference explorer's quotient
  (its `state_key` drops a finished request at once), and with it the two count the same
  states under the AsyncScheduler (tests/test_array_modes.py).
- **idle leaves**: an in-slot leaf of the behaviour key that no next leaf names once the
  step is built and simplified (`Shape.idle`; vLLM's `pending_rank` without the cache, which
  orders only the freeing of cached blocks) steers nothing: states that differ only there
  have the same successors, so the key leaves it out unless a property reads an
  observable it reaches.

Where a proof fails (or z3 cannot decide it within PROOF_RLIMIT), its reduction is off for
that config, which is always sound. The limit is z3's deterministic resource count
(`rlimit`), not time: each query is asked in a z3 context of its own, so it spends the
same units and gets the same answer in every process, on a quiet or a loaded machine. An
undecided proof is therefore stored as undecided, under a key that holds PROOF_RLIMIT, and
a later run keeps the reduction off without paying the limit again (an unknown that z3
returned before the limit ran out, an interrupt, is not stored). For example,
with prefix caching each slot's block hashes are its own ids (model/vllm/cache_rules.py
`block_hash`), so swapping two slots does not commute with the step and the plain symmetry
is off; the behaviour key, the global order groups
and the quiet retirement do hold there. A swap that also swaps the two slots' own hash ids
in the pool does commute from every state inside the engine's invariant (`renamed_swap`,
for pools small enough for z3, RENAMED_SWAP_LIMIT): the pool key of
checker/methods/array/pool.py then orders the slots canonically.

The proofs are made at min(slots, PROOF_SLOTS) slots: the rules are folds over slots with
the same code for every slot, so a fact about two adjacent slots among three is a fact
about any two; the explorer uses them at its own slot count.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import z3

import checker.methods.array.pool as pool
from checker.methods import proof_cache
from checker.methods.array.layout import Leaf, Path, build, leaves_of, status_fields, values_of
from checker.methods.array.stored import shape_from_json, shape_to_json
from checker.methods.solver import SETUP, preprocessed
from checker.methods.symbolic import fresh_state
from model import registry as engines
from model.core.engine import EngineModel
from model.core.ops import CONCRETE, SymbolicOps
from model.core.types import SlotObs, SlotSpec, Step

PROOF_SLOTS = 2
# z3's resource units a reduction query may spend (`rlimit`, counted per query and per
# solver, `_answered`). Measured with z3's default solver over the array tests' configs
# (tests/test_array_*.py, test_diff_array.py, test_worst.py, most slow ones included;
# 2026-12-06): the most a decided query spent was 137 million units (a small cache's
# symmetry). With the preprocessing solver tried first (2026-12-06, the same tests), the
# most a decided query spent was 335 million (sg_lpm's, 5.9 s of CPU), and v0_tiny's two
# symmetry queries, which the default solver left undecided at this limit, are decided in
# 266 and 17 million. The same query may spend up to a third more or less after other
# work, which changes the order of the terms it is given. About 15 million units are a
# second of the default solver on a quiet core of the 2-core machine, 50-100 million of
# the preprocessing one (the count is work done, not time).
PROOF_RLIMIT = 400_000_000
# A step number far past any arrival, so that a rule reading a request's age sees it vary.
_LATE = 1000
_STEP_FIELDS = tuple(f.name for f in fields(Step) if f.name not in ("step", "slots", "cfg"))
_OBS_FIELDS = tuple(f.name for f in fields(SlotObs))
_SPEC_FIELDS = tuple(f.name for f in fields(SlotSpec))
POSITIONAL = frozenset({"arrival_time"})


@dataclass(frozen=True, slots=True)
class OrderField:
    """An in-slot leaf that only orders the slots: per ordered pair (i, j), i != j, the
    guard under which same_behaviour compares slot i's value with slot j's (a z3 term over
    the state's leaves, named `s.<path>`)."""

    field: Path
    guards: tuple[tuple[int, int, Any], ...]


@dataclass(frozen=True, slots=True)
class Shape:
    """The reductions z3 proved for one engine config at `proof_slots` slots (see the
    module docstring). Leaf fields are in-slot paths (`("status",)`) or global paths."""

    proof_slots: int
    equal: frozenset[Path]  # leaves (global paths, in-slot paths) compared for equality
    order: tuple[OrderField, ...]  # in-slot order fields, guards at proof_slots slots
    behaviour_proved: bool  # False: the key keeps every leaf raw
    arrival_step_read: bool
    symmetry: str  # "full" | "priority" (stable sort by priority) | "none"
    retired: frozenset[tuple[int, ...]]  # retired values of the status fields
    # value flow, as leaf fields: observable field -> leaves, next leaf -> leaves
    obs_flow: Mapping[str, frozenset[Path]]
    next_flow: Mapping[Path, frozenset[Path]]
    constant: frozenset[Path] = frozenset()  # leaves at their initial value in every state
    notes: tuple[str, ...] = ()
    # global leaves that only order each other (unguarded), one tuple per group: the key
    # holds each one's rank in its group
    global_order: tuple[tuple[Path, ...], ...] = ()
    # in-slot leaves that must also be at their initial values for a slot to retire (after
    # the status fields in each `retired` combination): what a finished request still has
    # in flight, or holds in a block table, before it is quiet
    retire_quiet: tuple[Path, ...] = ()
    # combinations (one status field, then `at_once_quiet`) at which a slot retires as
    # soon as it enters the status: the value is absorbing, the step resets the
    # `at_once_quiet` leaves on entering it, and no other slot's leaf, no global leaf and
    # no observable but the slot's own depends on its other leaves or its request; and the
    # slot's own observables that may depend on its other leaves there but not once quiet
    # (a property that reads one keeps the quiet retirement above)
    retired_at_once: frozenset[tuple[int, ...]] = frozenset()
    at_once_quiet: tuple[Path, ...] = ()
    at_once_obs: frozenset[str] = frozenset()
    # in-slot leaves compared by same_behaviour that no next leaf depends on (their own
    # next value included), each with the observables (SlotObs or Step field names) that
    # may depend on it: the key leaves one out unless a property reads one of those
    idle: tuple[tuple[Path, frozenset[str]], ...] = ()


def field_of(leaf_path: Path) -> Path:
    """In-slot path of a slot leaf, the path itself for a global leaf."""
    return leaf_path[2:] if len(leaf_path) >= 2 and leaf_path[0] == "slots" else leaf_path


def _const_name(e: z3.ExprRef) -> str | None:
    if z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
        return e.decl().name()
    return None


def _split(name: str) -> tuple[str, Path]:
    """`a.slots.2.status` -> ("a", ("slots", 2, "status"))."""
    tag, *rest = name.split(".")
    return tag, tuple(int(p) if p.isdigit() else p for p in rest)


def _conjuncts(e: z3.ExprRef) -> list[z3.ExprRef]:
    if z3.is_and(e):
        return [c for a in e.children() for c in _conjuncts(a)]
    return [e]


def _implication(e: z3.ExprRef) -> tuple[z3.ExprRef, z3.ExprRef] | None:
    """(G, B) for Or(Not(G), B), Or(B, Not(G)) or Implies(G, B)."""
    if z3.is_implies(e):
        return e.arg(0), e.arg(1)
    if z3.is_or(e) and e.num_args() == 2:
        a, b = e.arg(0), e.arg(1)
        if z3.is_not(a):
            return a.arg(0), b
        if z3.is_not(b):
            return b.arg(0), a
    return None


def _lt_pair(e: z3.ExprRef) -> tuple[str, str] | None:
    if z3.is_lt(e):
        x, y = _const_name(e.arg(0)), _const_name(e.arg(1))
        if x and y:
            return x, y
    return None


def _group_of(p: Path, q: Path) -> Path | None:
    """The group of two global leaves of one indexed tuple (`pool.0.queue_key` and
    `pool.3.queue_key`: `pool.*.queue_key`), None if they are not such a pair."""
    if p[0] == "slots" or len(p) != len(q):
        return None
    apart = [k for k, (x, y) in enumerate(zip(p, q, strict=True)) if x != y]
    if len(apart) != 1 or not all(isinstance(v[apart[0]], int) for v in (p, q)):
        return None
    return (*p[:apart[0]], "*", *p[apart[0] + 1:])


def _global_pair(c: z3.ExprRef) -> tuple[Path, Path, Path] | None:
    """(group, p, q) for `(a.p < a.q) == (b.p < b.q)` over two global leaves of one
    tuple, else None."""
    if not z3.is_eq(c) or not z3.is_bool(c.arg(0)):
        return None
    left, right = _lt_pair(c.arg(0)), _lt_pair(c.arg(1))
    if left is None or right is None:
        return None
    (t1, p1), (t2, p2) = _split(left[0]), _split(left[1])
    (t3, p3), (t4, p4) = _split(right[0]), _split(right[1])
    group = _group_of(p1, p2)
    if t1 == t2 == "a" and t3 == t4 == "b" and p1 == p3 and p2 == p4 and group:
        return group, p1, p2
    return None


def _parse_behaviour(term: z3.ExprRef) -> tuple[set[Path], dict[Path, dict[tuple[int, int], Any]],
                                                dict[Path, set[tuple[Path, Path]]]] | None:
    """Equal leaves, guarded order fields and unguarded global order groups of a
    same_behaviour term, None if a conjunct has another shape."""
    equal: set[Path] = set()
    order: dict[Path, dict[tuple[int, int], Any]] = {}
    groups: dict[Path, set[tuple[Path, Path]]] = {}
    for c in _conjuncts(term):
        if z3.is_true(c):
            continue
        pair = _global_pair(c)
        if pair is not None:
            groups.setdefault(pair[0], set()).add(pair[1:])
            continue
        if z3.is_eq(c):
            x, y = _const_name(c.arg(0)), _const_name(c.arg(1))
            if x and y:
                (ta, pa), (tb, pb) = _split(x), _split(y)
                if {ta, tb} == {"a", "b"} and pa == pb:
                    equal.add(pa)
                    continue
            return None
        imp = _implication(c)
        if imp is None or not z3.is_eq(imp[1]):
            return None
        guard, body = imp
        left, right = _lt_pair(body.arg(0)), _lt_pair(body.arg(1))
        if left is None or right is None:
            return None
        (t1, p1), (t2, p2) = _split(left[0]), _split(left[1])
        (t3, p3), (t4, p4) = _split(right[0]), _split(right[1])
        if not (t1 == t2 == "a" and t3 == t4 == "b" and p1 == p3 and p2 == p4
                and p1[0] == "slots" and p2[0] == "slots" and p1[2:] == p2[2:]):
            return None
        for v in z3_consts(guard):
            tag, _ = _split(v)
            if tag != "a":
                return None
        order.setdefault(p1[2:], {})[(int(p1[1]), int(p2[1]))] = guard
    return equal, order, groups


def z3_consts(e: z3.ExprRef) -> set[str]:
    """Names of the uninterpreted constants in a term."""
    return set(consts_of_terms([e])[0])


_NO_NAMES: frozenset[str] = frozenset()


def consts_of_terms(terms: Sequence[z3.ExprRef]) -> list[frozenset[str]]:
    """For each term, the names of its uninterpreted constants, in one walk of the terms'
    shared DAG (a step's outputs share most of their subterms: walking each on its own
    took most of the array explorer's first run on family F). The walk uses z3's C API on
    raw ASTs: the Python wrappers' construction and reference counting cost more than the
    walk itself."""
    if not terms:
        return []
    ctx = terms[0].ctx_ref()
    memo: dict[int, frozenset[str]] = {}
    return [_consts_below(ctx, t.as_ast(), memo) for t in terms]


def _consts_below(ctx: Any, root: Any, memo: dict[int, frozenset[str]]) -> frozenset[str]:
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        a, children_done = stack.pop()
        i = z3.Z3_get_ast_id(ctx, a)
        if i in memo:
            continue
        kids = _children(ctx, a)
        if children_done:
            if kids:
                memo[i] = frozenset().union(*(memo[z3.Z3_get_ast_id(ctx, k)] for k in kids))
            else:
                memo[i] = _leaf_name(ctx, a)
            continue
        stack.append((a, True))
        stack.extend((k, False) for k in kids)
    return memo[z3.Z3_get_ast_id(ctx, root)]


def _children(ctx: Any, a: Any) -> list[Any]:
    kind = z3.Z3_get_ast_kind(ctx, a)
    if kind == z3.Z3_APP_AST:
        return [z3.Z3_get_app_arg(ctx, a, j) for j in range(z3.Z3_get_app_num_args(ctx, a))]
    if kind == z3.Z3_QUANTIFIER_AST:
        return [z3.Z3_get_quantifier_body(ctx, a)]
    return []


def _leaf_name(ctx: Any, a: Any) -> frozenset[str]:
    if z3.Z3_get_ast_kind(ctx, a) != z3.Z3_APP_AST:
        return _NO_NAMES
    decl = z3.Z3_get_app_decl(ctx, a)
    if z3.Z3_get_decl_kind(ctx, decl) != z3.Z3_OP_UNINTERPRETED:
        return _NO_NAMES
    sym = z3.Z3_get_decl_name(ctx, decl)
    if z3.Z3_get_symbol_kind(ctx, sym) == z3.Z3_INT_SYMBOL:
        return frozenset({f"k!{z3.Z3_get_symbol_int(ctx, sym)}"})  # as z3's decl().name()
    return frozenset({z3.Z3_get_symbol_string(ctx, sym)})


def _named_like(term: z3.ExprRef, name: str, new: str | None = None) -> z3.ExprRef:
    """The constant `name` of `term` (with its sort), or a constant of that sort named
    `new`."""
    for x in _all_consts(term):
        if x.decl().name() == name:
            return x if new is None else z3.Const(new, x.sort())
    raise KeyError(name)


def _all_consts(e: z3.ExprRef) -> list[z3.ExprRef]:
    out, seen, stack = [], set(), [e]
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if _const_name(x) is not None:
            out.append(x)
        stack.extend(x.children())
    return out


def _symbolic_specs(tag: str, n: int) -> list[SlotSpec]:
    return [SlotSpec(**{f: z3.Int(f"{tag}{i}.{f}") for f in _SPEC_FIELDS}) for i in range(n)]


_undecided = 0  # solver answers that were neither sat nor unsat (PROOF_RLIMIT), so far
# Of those, the ones z3 returned before PROOF_RLIMIT ran out (an interrupt, or z3 giving
# up by itself): not known to come back the same, so a result that has one is not stored.
_unlimited = 0


def _solve_unsat(facts: Sequence[Any], rlimit: int | None = None) -> bool:
    """Whether z3 proves `facts` unsatisfiable within `rlimit` (PROOF_RLIMIT) of its
    resource units (`ask`). An unknown is counted in `_undecided`: the reduction is not
    used (sound)."""
    limit = PROOF_RLIMIT if rlimit is None else rlimit
    return _counted(*ask(facts, limit), limit)


def _solve_unsat_later(facts: Sequence[Any]) -> Callable[[], bool]:
    """`_solve_unsat(facts)`, solved on another thread from now on (`ask_later`); calling
    the result waits for the answer and counts it as `_solve_unsat` does, in the order
    the calls come."""
    answer = ask_later(facts, PROOF_RLIMIT)
    return lambda: _counted(*answer(), PROOF_RLIMIT)


def _counted(answer: z3.CheckSatResult, spent: int, limit: int) -> bool:
    """Whether `answer` is unsat; an unknown is counted in `_undecided`, and in
    `_unlimited` too when z3 gave up before `limit`."""
    global _undecided, _unlimited
    if answer == z3.unknown:
        _undecided += 1
        if spent < limit:
            _unlimited += 1
    return answer == z3.unsat


def ask(facts: Sequence[Any], rlimit: int) -> tuple[z3.CheckSatResult, int]:
    """z3's answer on `facts` within `rlimit` of its resource units, and the units it spent.
    The query is asked in a z3 context of its own, so the units it spends, and so its
    answer, are the same in every process at any machine load (in the shared context the
    terms' ids, and with them z3's search, depend on what the process built before)."""
    return _answered(_posed(facts, rlimit), lambda: _posed(facts, rlimit, fallback=True))


def ask_later(facts: Sequence[Any], rlimit: int) -> Callable[[], tuple[z3.CheckSatResult, int]]:
    """`ask(facts, rlimit)` on a thread of its own, begun now: calling the result waits
    for the answer. The facts are moved into the query's own contexts here, on the calling
    thread (the shared context is not safe to read from two threads); the thread then
    touches those contexts alone, and z3 releases the GIL while it searches, so the search
    runs on another core while this thread builds the next proof's terms. A daemon
    thread: an interrupted command does not wait for it."""
    first, second = _posed(facts, rlimit), _posed(facts, rlimit, fallback=True)
    box: list[tuple[z3.CheckSatResult, int] | BaseException] = []

    def run() -> None:
        try:
            box.append(_answered(first, lambda: second))
        except BaseException as exc:  # handed to the caller, raised there
            box.append(exc)
    thread = threading.Thread(target=run, name="batchproof-proof", daemon=True)
    thread.start()

    def answer() -> tuple[z3.CheckSatResult, int]:
        thread.join()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]
    return answer


def _posed(facts: Sequence[Any], rlimit: int, fallback: bool = False) -> z3.Solver:
    """A solver in a z3 context of its own holding `facts`, limited to `rlimit` units:
    solver.py's `preprocessed`, or with `fallback` z3's default solver."""
    ctx = z3.Context()
    s = z3.Solver(ctx=ctx) if fallback else preprocessed(ctx)
    s.set(rlimit=rlimit)
    s.add(*(f.translate(ctx) for f in facts))
    return s


def _answered(first: z3.Solver, fallback: Callable[[], z3.Solver]
              ) -> tuple[z3.CheckSatResult, int]:
    """The answer of `first` (`_posed`), or where it leaves the query undecided, that of
    `fallback()` (z3's default solver on the same facts); the units of the try that
    answered, or the fewer of the two tries' (under the limit: one gave up by itself). The
    preprocessing solver decides most reduction proofs 2-10x sooner (the small prefix
    cache's 21 s of CPU down to 9 s; v0_tiny's symmetry, which the default left undecided
    at the limit after 25 s, in 3 s), but leaves some of SGLang's undecided at the limit
    (7 s) that the default decides in 40 million units (5 s): hence both, in this order."""
    answer, spent = _checked(first)
    if answer != z3.unknown:
        return answer, spent
    second, spent_second = _checked(fallback())
    return second, spent_second if second != z3.unknown else min(spent, spent_second)


def _checked(s: z3.Solver) -> tuple[z3.CheckSatResult, int]:
    """The solver's answer and the resource units it spent finding it."""
    answer = s.check()
    return answer, int(s.statistics().get_key_value("rlimit count"))


def _limit() -> tuple[str, int, str]:
    """The limit a stored result was computed under, for its key: a result left undecided
    at one limit is not an answer at another."""
    return ("rlimit", PROOF_RLIMIT, SETUP)


def _store(name: str, value: dict[str, Any] | None, undecided_before: int,
           unlimited_before: int) -> None:
    """Keep a result computed since the counts were `undecided_before` and
    `unlimited_before`: marked with the answers it left undecided at PROOF_RLIMIT, or not
    at all when z3 gave up on one before the limit (or `value` cannot be stored)."""
    if value is None or _unlimited != unlimited_before:
        return
    proof_cache.store(name, proof_cache.mark_undecided(value, _undecided - undecided_before,
                                                       PROOF_RLIMIT))


def _step(engine: EngineModel, cfg: Any, specs: Sequence[SlotSpec], state: Any,
          eos: Sequence[Any]) -> tuple[Any, Step, list[Any]]:
    ops = SymbolicOps()
    nxt, obs = engine.step(ops, cfg, specs, state, eos)
    return nxt, obs, ops.take_definitions()


def _differs(x: Any, y: Any) -> Any:
    if isinstance(x, bool) and isinstance(y, bool):
        return z3.BoolVal(x != y)
    return z3.Not(x == y)


def _outputs(nxt: Any, obs: Step, obs_fields: Sequence[str]) -> list[Any]:
    vals = [v for _, v in sorted(values_of(nxt).items(), key=lambda kv: str(kv[0]))]
    vals += [getattr(obs, f) for f in _STEP_FIELDS]
    for o in obs.slots:
        vals += [getattr(o, f) for f in obs_fields]
    return vals


def _ranked_outputs(nxt: Any, obs: Step, groups: Sequence[Sequence[Path]]) -> list[Any]:
    """`_outputs(nxt, obs, ())` with the leaves of `groups` replaced by their ranks in
    their group (what the key holds of them)."""
    ranked = {p for g in groups for p in g}
    values = values_of(nxt)
    vals = [v for p, v in sorted(values.items(), key=lambda kv: str(kv[0])) if p not in ranked]
    vals += [getattr(obs, f) for f in _STEP_FIELDS]
    for g in groups:
        vals += [sum((z3.If(values[q] < values[p], 1, 0) for q in g if q != p), start=0)
                 for p in g]
    return vals


def _like(term: Any, value: int) -> Any:
    """`value` as a bool where the leaf is a bool."""
    if isinstance(term, bool) or (isinstance(term, z3.ExprRef) and z3.is_bool(term)):
        return bool(value)
    return value


def _swap(seq: Sequence[Any], i: int) -> list[Any]:
    out = list(seq)
    out[i], out[i + 1] = out[i + 1], out[i]
    return out


def _set(value: Any, path: Path, leaf: Any) -> Any:
    """`value` (a slot's dataclass) with the leaf at `path` inside it replaced."""
    if not path:
        return leaf
    head, rest = path[0], path[1:]
    if isinstance(value, tuple):
        assert isinstance(head, int)
        return (*value[:head], _set(value[head], rest, leaf), *value[head + 1:])
    return replace(value, **{str(head): _set(getattr(value, str(head)), rest, leaf)})


def group_ranks(values: Sequence[Any]) -> list[Any]:
    """Each value's rank in its group: how many of the others are smaller (ints or
    arrays). Two groups with equal rank lists order their members alike."""
    return [sum((v < x for k, v in enumerate(values) if k != i), start=0)
            for i, x in enumerate(values)]


def _group_ranks(values: Mapping[Path, Any], groups: Sequence[Sequence[Path]]) -> list[Any]:
    """`group_ranks` of each group of leaves, as z3 terms."""
    out: list[Any] = []
    for g in groups:
        out += [z3.Sum([z3.If(values[q] < values[p], 1, 0) for q in g if q != p])
                for p in g]
    return out


class _Analyser:
    """The z3 queries behind one Shape."""

    def __init__(self, engine: EngineModel, cfg: Any, n: int) -> None:
        self.engine, self.cfg, self.n = engine, cfg, n
        self.template = engine.initial_state(n, cfg)
        self.leaves: tuple[Leaf, ...] = leaves_of(self.template)
        self.notes: list[str] = []
        self.constant: dict[Path, int] = {}
        self.constant = self._constant_leaves()

    def fresh(self, tag: str, step: int) -> Any:
        """A state of fresh constants, but for the leaves that are constant in every
        reachable state."""
        state = fresh_state(tag, self.template, step)
        if not self.constant:
            return state
        return build(state, lambda p: self.constant.get(p, values_of(state)[p]), step)

    def _constant_leaves(self) -> dict[Path, int]:
        """Leaves the step sets to their initial value whatever the state (a leaf of a
        mode that is off, such as the prefix cache's with caching off)."""
        s = fresh_state("s", self.template, 1)
        specs = _symbolic_specs("p", self.n)
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        nxt, _, _ = _step(self.engine, self.cfg, specs, s, eos)
        out = {}
        initial = {leaf.path: leaf.initial for leaf in self.leaves}
        for path, value in values_of(nxt).items():
            v = z3.simplify(value) if isinstance(value, z3.ExprRef) else value
            if isinstance(v, z3.ExprRef):
                if not (z3.is_int_value(v) or z3.is_true(v) or z3.is_false(v)):
                    continue
                v = v.as_long() if z3.is_int_value(v) else z3.is_true(v)
            if int(v) == initial[path]:
                out[path] = v
        return out

    def behaviour(self) -> tuple[frozenset[Path], tuple[OrderField, ...], bool,
                                 tuple[tuple[Path, ...], ...]]:
        a, b = self.fresh("a", 0), self.fresh("b", 0)
        ops = SymbolicOps()
        same = self.engine.same_behaviour(ops, a, b)
        if ops.take_definitions() or isinstance(same, bool):
            self.notes.append("same_behaviour is not a plain conjunction: every leaf kept raw")
            return frozenset(), (), False, ()
        parsed = _parse_behaviour(same)
        if parsed is None:
            self.notes.append("same_behaviour has a conjunct of another shape: every leaf "
                              "kept raw")
            return frozenset(), (), False, ()
        equal, order, groups = parsed
        fields_eq = frozenset(field_of(p) for p in equal)
        ofs = []
        for f, pairs in order.items():
            if set(pairs) != {(i, j) for i in range(self.n) for j in range(self.n) if i != j}:
                self.notes.append(f"order field {f} is not compared for every pair")
                return frozenset(), (), False, ()
            ofs.append(OrderField(f, tuple((i, j, g) for (i, j), g in sorted(pairs.items()))))
        if not all(self._uniform(of) for of in ofs):
            self.notes.append("an order guard reads another slot or differs between pairs")
            return frozenset(), (), False, ()
        gos = []
        for name, compared in sorted(groups.items(), key=repr):
            members = tuple(sorted({p for pq in compared for p in pq}, key=repr))
            if compared != {(p, q) for p in members for q in members if p != q}:
                self.notes.append(f"order group {name} is not compared for every pair")
                return frozenset(), (), False, ()
            gos.append(members)
        # Equal keys must imply same_behaviour: the key is sound. The guards name a's
        # leaves; b's ranks use b's own leaves under the same guards.
        va, vb = values_of(a), values_of(b)
        key_eq = [va[p] == vb[p] for p in equal]
        key_eq += [x == y for x, y in zip(self._ranks(a, ofs), self._ranks(b, ofs),
                                          strict=True)]
        key_eq += [x == y for x, y in zip(_group_ranks(va, gos), _group_ranks(vb, gos),
                                          strict=True)]
        if not _solve_unsat([*key_eq, z3.Not(same)]):
            self.notes.append("equal behaviour keys do not imply same_behaviour: every leaf "
                              "kept raw")
            return frozenset(), (), False, ()
        every = {leaf.path for leaf in self.leaves}
        if not equal <= every or not {p for g in gos for p in g} <= every:
            return frozenset(), (), False, ()
        return fields_eq, tuple(ofs), True, tuple(gos)

    def _uniform(self, of: OrderField) -> bool:
        """Each pair's guard reads only its two slots and the global leaves, and is pair
        (0, 1)'s guard with the slots renamed."""
        guards = {(i, j): g for i, j, g in of.guards}
        for (i, j), g in guards.items():
            a, b = (0, 1) if i < j else (1, 0)
            rename = {i: a, j: b}
            sub = []
            for name in z3_consts(g):
                _, path = _split(name)
                if path[0] == "slots":
                    if int(path[1]) not in rename:
                        return False
                    new = ".".join(str(p) for p in ("a", "slots", rename[int(path[1])],
                                                     *path[2:]))
                    sub.append((_named_like(g, name), _named_like(g, name, new)))
            renamed = z3.substitute(g, *sub) if sub else g
            if not _solve_unsat([z3.Not(renamed == guards[(a, b)])]):
                return False
        return True

    def _ranks(self, state: Any, ofs: Sequence[OrderField]) -> list[Any]:
        vals = values_of(state)
        out = []
        for of in ofs:
            for i in range(self.n):
                terms = []
                for gi, gj, g in of.guards:
                    if gi != i:
                        continue
                    sub = [(z3.Bool(nm) if z3.is_bool(vals[_split(nm)[1]]) else z3.Int(nm),
                            vals[_split(nm)[1]]) for nm in z3_consts(g)]
                    terms.append(z3.If(z3.And(z3.substitute(g, *sub) if sub else g,
                                              vals[("slots", gj, *of.field)]
                                              < vals[("slots", i, *of.field)]), 1, 0))
                out.append(z3.Sum(terms) if terms else z3.IntVal(0))
        return out

    def arrival_read(self) -> bool:
        """Whether an arrived request's arrival step changes the step: first by building
        the step's terms for arrival steps 1, 2 and _LATE - 1 (z3 shares equal terms, so
        identical terms are one object), then by a solver query."""
        s = self.fresh("s", _LATE - 1)
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        built = []
        for a in (1, 2, _LATE // 2, _LATE - 1):
            specs = [replace(sp, arrival_step=a) for sp in _symbolic_specs("p", self.n)]
            nxt, obs = self.engine.step(_Unnamed(), self.cfg, specs, s, eos)
            built.append(_outputs(nxt, obs, _OBS_FIELDS))
        if all(_same_term(x, y) for other in built[1:] for x, y in zip(built[0], other,
                                                                        strict=True)):
            return False
        return self._arrival_query()

    def _arrival_query(self) -> bool:
        s = self.fresh("s", _LATE - 1)
        specs, other = _symbolic_specs("p", self.n), []
        cons = []
        for i, sp in enumerate(specs):
            a2 = z3.Int(f"q{i}.arrival_step")
            cons += [sp.arrival_step >= 1, sp.arrival_step < _LATE, a2 >= 1, a2 < _LATE]
            other.append(replace(sp, arrival_step=a2))
        eos = [z3.Bool(f"e{i}") for i in range(self.n)]
        n1, o1, d1 = _step(self.engine, self.cfg, specs, s, eos)
        n2, o2, d2 = _step(self.engine, self.cfg, other, s, eos)
        diff = [_differs(x, y) for x, y in zip(_outputs(n1, o1, _OBS_FIELDS),
                                              _outputs(n2, o2, _OBS_FIELDS), strict=True)]
        return not _solve_unsat([*cons, *d1, *d2, z3.Or(*diff)])

    def symmetry(self) -> str:
        """"full" when swapping two arrived slots commutes with the step (next state and
        step-level observables), "priority" when it does for slots of different priority,
        else "none"."""
        return self.symmetry_later()()

    def symmetry_later(self, conditions: tuple[str, ...] = ("none", "priority")
                       ) -> Callable[[], str]:
        """`symmetry()` trying these conditions in order, the proof of the first one no
        concrete run refutes begun now on another thread (`ask_later`): the caller builds
        its other proofs meanwhile, then calls the result for the answer. Each proof is
        counted when the result reads it, in order, so the unknowns counted are those of
        the proofs one after the other."""
        if self.n < 2:
            return lambda: "full"
        for k, condition in enumerate(conditions):
            if any(self._swap_breaks(i, condition) for i in range(self.n - 1)):
                continue  # a concrete run refutes it: no proof to attempt
            proofs = [_solve_unsat_later(self._commutes_facts(i, condition, None))
                      for i in range(self.n - 1)]

            def result(condition: str = condition, proofs: list[Callable[[], bool]] = proofs,
                       rest: tuple[str, ...] = conditions[k + 1:]) -> str:
                if all(proved() for proved in proofs):
                    return "full" if condition == "none" else "priority"
                return self.symmetry_later(rest)()
            return result
        return lambda: "none"

    def _swap_breaks(self, i: int, condition: str, runs: int = 40) -> bool:
        """A concrete run of the rules in which swapping arrived slots i and i+1 before a
        step differs from swapping them after it: a counterexample to `_commutes` (its
        query ranges over every state, these are reachable ones), found without z3. With
        prefix caching a request's own block hashes name its slot, so a run that caches a
        block finds one at once; where none is found the proof decides."""
        rng = random.Random(i)
        for _ in range(runs):
            specs = sorted((self._random_spec(rng) for _ in range(self.n)),
                           key=lambda sp: sp.arrival_step)
            if condition == "priority" and specs[i].priority == specs[i + 1].priority:
                continue
            state = self.template
            for t in range(1, 5):
                eos = [rng.random() < 0.3 for _ in range(self.n)]
                try:
                    nxt, obs = self.engine.step(CONCRETE, self.cfg, specs, state, eos)
                    arrived = all(1 <= sp.arrival_step < t for sp in specs[i:i + 2])
                    if arrived:
                        swapped = replace(state, slots=tuple(_swap(state.slots, i)))
                        n2, o2 = self.engine.step(CONCRETE, self.cfg, _swap(specs, i),
                                                  swapped, _swap(eos, i))
                        back = replace(n2, slots=tuple(_swap(n2.slots, i)))
                        if _outputs(nxt, obs, ()) != _outputs(back, o2, ()):
                            return True
                except (ArithmeticError, AssertionError, ValueError, TypeError):
                    break  # a run the rules refuse is no counterexample: the proof decides
                state = nxt
        return False

    def _random_spec(self, rng: random.Random) -> SlotSpec:
        """A request arriving in step 1 or 2, shorter than max_model_len."""
        limit = getattr(self.cfg, "max_model_len", 8)
        longest = max(1, min(limit - 1, 8)) if isinstance(limit, int) else 4
        prompt = rng.randint(1, longest)
        group = rng.randint(0, 1)
        return SlotSpec(prompt, rng.randint(1, 3), rng.randint(1, 2), rng.randint(0, 1), 0,
                        group, rng.randint(1, prompt) if group else 0)

    def permuted(self, condition: str, obs_fields: Sequence[str]) -> bool:
        """The swap carries these SlotObs fields along with the slots."""
        return all(self._commutes(i, condition, tuple(obs_fields))
                   for i in range(self.n - 1))

    def _commutes(self, i: int, condition: str, obs_fields: tuple[str, ...] | None,
                  rename: Callable[[Any], Any] | None = None, both: bool = False,
                  groups: Sequence[Sequence[Path]] = (), well_formed: bool = False
                  ) -> bool:
        """Swapping arrived slots i and i+1 before the step = swapping them after it: the
        next state and the step's observables (obs_fields None), or these SlotObs fields
        (with `both`, the next state, the step's observables and these fields). `rename`,
        an involution on states, goes with the swap both times (a prefix cache's own
        block hash ids of the two slots, `renamed_swap`); the leaves of `groups` (global
        order groups, which the key holds as ranks) are compared by their ranks; with
        `well_formed`, for states that satisfy the engine's invariant only."""
        return _solve_unsat(self._commutes_facts(i, condition, obs_fields, rename, both,
                                                 groups, well_formed))

    def _commutes_facts(self, i: int, condition: str, obs_fields: tuple[str, ...] | None,
                        rename: Callable[[Any], Any] | None = None, both: bool = False,
                        groups: Sequence[Sequence[Path]] = (), well_formed: bool = False
                        ) -> list[Any]:
        """`_commutes`'s query: satisfiable where the swap does not commute."""
        t = 3
        s = self.fresh("s", t - 1)
        specs = _symbolic_specs("p", self.n)
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        cons = [sp.arrival_step >= 1 for sp in specs[i:i + 2]]
        cons += [sp.arrival_step < t for sp in specs[i:i + 2]]
        if condition == "priority":
            cons.append(specs[i].priority != specs[i + 1].priority)
        if well_formed:
            cons += self._well_formed(specs, s)
        same = rename or (lambda state: state)
        swapped = same(replace(s, slots=tuple(_swap(s.slots, i))))
        n1, o1, d1 = _step(self.engine, self.cfg, specs, s, eos)
        n2, o2, d2 = _step(self.engine, self.cfg, _swap(specs, i), swapped, _swap(eos, i))
        diff = []
        if obs_fields is None or both:
            back = same(replace(n2, slots=tuple(_swap(n2.slots, i))))
            diff += [_differs(x, y) for x, y in zip(_ranked_outputs(n1, o1, groups),
                                                   _ranked_outputs(back, o2, groups),
                                                   strict=True)]
        if obs_fields is not None:
            diff += [_differs(getattr(a, f), getattr(b, f))
                     for a, b in zip(o1.slots, _swap(o2.slots, i), strict=True)
                     for f in obs_fields]
        return [*cons, *d1, *d2, z3.Or(*diff)] if diff else [z3.BoolVal(False)]

    def _well_formed(self, specs: Sequence[SlotSpec], state: Any) -> list[Any]:
        """The engine's invariant on a state, with its definitions (none: no facts)."""
        if self.engine.well_formed is None:
            return []
        ops = SymbolicOps()
        inv = self.engine.well_formed(ops, self.cfg, specs, state)
        return [inv, *ops.take_definitions()]

    def renamed_swap(self, obs_fields: Sequence[str], groups: Sequence[Sequence[Path]]
                     ) -> bool:
        """With a paged pool (checker/methods/array/pool.py): swapping arrived slots i and
        i+1 together with their own block hash ids in the pool commutes with the step (the
        next state, its order groups by rank, the step's observables and these SlotObs
        fields) from every state that satisfies the engine's invariant, and the swap keeps
        the invariant, for every i."""
        lay = pool.layout_of(self.leaves)
        if lay is None or self.engine.well_formed is None:
            return False
        hashes = frozenset(lay.block_leaves[1])

        def renamed(i: int) -> Callable[[Any], Any]:
            def rename(state: Any) -> Any:
                values = values_of(state)
                return build(state, lambda p: pool.rename_hash(
                    values[p], i, lay.table_len, z3.If, z3.And) if p in hashes
                    else values[p], state.step)
            return rename
        return all(self._keeps_invariant(i, renamed(i))
                   and self._commutes(i, "none", tuple(obs_fields), renamed(i), both=True,
                                      groups=groups, well_formed=True)
                   for i in range(self.n - 1))

    def _keeps_invariant(self, i: int, rename: Callable[[Any], Any]) -> bool:
        """The engine's invariant holds after the (renamed) swap of slots i and i+1
        wherever it holds before (so a chain of swaps stays among invariant states)."""
        s = self.fresh("s", 2)
        specs = _symbolic_specs("p", self.n)
        swapped = rename(replace(s, slots=tuple(_swap(s.slots, i))))
        before = self._well_formed(specs, s)
        after = self._well_formed(_swap(specs, i), swapped)
        if not after:
            return False
        return _solve_unsat([*before, *after[1:], z3.Not(after[0])])

    def retired(self) -> tuple[frozenset[tuple[int, ...]], tuple[Path, ...]]:
        """The retired combinations of the slot's status fields (`layout.status_fields`:
        one for an engine, one per side for diff's product), one value per field, then the
        initial values of the quiet leaves (`Shape.retire_quiet`, none when a status value
        retires alone)."""
        status = status_fields(self.leaves)
        if not status:
            return frozenset(), ()
        initial = {leaf.field: leaf.initial for leaf in self.leaves if leaf.slot == 0}
        if len(status) == 1:
            values = [v for v in range(8) if v != initial[status[0]]]
            if self.cfg_has_quiet_leaves():
                # only a value a slot can enter is worth a proof (the others never occur)
                values = [v for v in values if self._enters(status[0], v)]
            alone = frozenset((v,) for v in values if self._retires({status[0]: v}))
            if alone:
                return alone, ()
            return self._retired_quiet(status[0], values, initial)
        # Several fields (a product of two engines' slots): the combinations of values
        # each of which its field never leaves, each proved as one.
        kept = [[v for v in range(8) if v != initial[f] and self._absorbing(f, v)]
                for f in status]
        return frozenset(combo for combo in itertools.product(*kept)
                         if self._retires(dict(zip(status, combo, strict=True)))), ()

    def _retired_quiet(self, status: Path, values: Sequence[int], initial: Mapping[Path, int]
                       ) -> tuple[frozenset[tuple[int, ...]], tuple[Path, ...]]:
        """Status values that retire with some other leaves at their initial values: per
        value, the leaves the step resets on entering it, then (repeatedly) the leaves
        that still change in it; one set of quiet leaves for every value that retires."""
        quiet: dict[int, tuple[Path, ...]] = {}
        for v in values:
            q = self._quiet_leaves(status, v, initial)
            if q is not None:
                quiet[v] = q
        if not quiet:
            return frozenset(), ()
        common = tuple(sorted({f for q in quiet.values() for f in q}, key=repr))
        kept = frozenset((v, *(initial[f] for f in common)) for v in sorted(quiet)
                         if self._retires({status: v, **{f: initial[f] for f in common}}))
        return (kept, common) if kept else (frozenset(), ())

    def _quiet_leaves(self, status: Path, v: int, initial: Mapping[Path, int]
                      ) -> tuple[Path, ...] | None:
        """The quiet leaves under which status v could retire (None: status v is not
        absorbing, or some leaf keeps changing)."""
        if not self._absorbing(status, v):
            return None
        others = [f for f in initial if f != status]
        quiet = {f for f in others if self._resets(status, v, f, initial[f])}
        for _ in range(len(others)):
            fixed = {status: v, **{f: initial[f] for f in quiet}}
            moving = {f for f in others if f not in quiet and self._changes(fixed, f)}
            if not moving:
                return tuple(sorted(quiet, key=repr))
            quiet |= moving
        return None

    def _step_fixing_slot_0(self, fixed: Mapping[Path, int]) -> tuple[Any, Any]:
        """(next state, observables) of the step, symbolic but for slot 0's leaves `fixed`,
        its terms unnamed (so that z3 simplifies them)."""
        s = self.fresh("s", 2)
        slot = s.slots[0]
        for g, x in fixed.items():
            slot = _set(slot, g, _like(values_of(slot)[g], x))
        s = replace(s, slots=(slot, *s.slots[1:]))
        specs = _symbolic_specs("p", self.n)
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        return self.engine.step(_Unnamed(), self.cfg, specs, s, eos)

    def _independent(self, fixed: Mapping[Path, int]) -> bool:
        """No output but slot 0's own names slot 0's other leaves or its request, once the
        step is built for a slot 0 with these leaves fixed and simplified (a sufficient
        condition for `_retires`'s second query, decided without the solver's search,
        which a large step such as the prefix cache's can exceed the time limit in)."""
        nxt, obs = self._step_fixing_slot_0(fixed)
        outs = _outputs(replace(nxt, slots=nxt.slots[1:]), replace(obs, slots=obs.slots[1:]),
                        _OBS_FIELDS)

        def mine(names: frozenset[str]) -> bool:
            return any(c.startswith(("s.slots.0.", "p0.")) for c in names)
        terms = [x for x in outs if isinstance(x, z3.ExprRef)]
        goal = z3.Goal()
        for k, (x, names) in enumerate(zip(terms, consts_of_terms(terms), strict=True)):
            if mine(names):
                goal.add(z3.Const(f"out.{k}", x.sort()) == x)
        if len(goal) == 0:
            return True
        # one simplification of every output at once: they share most of their terms
        simplified = z3.Tactic("simplify")(goal)
        return not any(mine(names) for names in
                       consts_of_terms([f for sub in simplified for f in sub]))

    def cfg_has_quiet_leaves(self) -> bool:
        """Whether a slot has leaves beyond the plain request's (a block table, what is in
        flight): the engines whose retirement may need quiet leaves."""
        return any(leaf.slot == 0 and len(leaf.field) > 1 for leaf in self.leaves)

    def _entering(self, status: Path, v: int) -> tuple[list[Any], Any]:
        """A step in which an arrived slot not at status v ends at v: its constraints and
        the slot's leaves after it."""
        t = 3
        s = self.fresh("s", t - 1)
        specs = _symbolic_specs("p", self.n)
        cons = [specs[0].arrival_step >= 1, specs[0].arrival_step < t,
                _differs(values_of(s.slots[0])[status], v)]
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        n1, _, d1 = _step(self.engine, self.cfg, specs, s, eos)
        after = values_of(n1.slots[0])
        return [*cons, *d1, after[status] == v], after

    def _enters(self, status: Path, v: int) -> bool:
        """A slot may enter status v in a step (or z3 cannot rule it out)."""
        cons, _ = self._entering(status, v)
        return not _solve_unsat(cons)

    def _resets(self, status: Path, v: int, f: Path, value: int) -> bool:
        """A slot entering status v in a step leaves it with leaf f at `value`."""
        cons, after = self._entering(status, v)
        return _solve_unsat([*cons, _differs(after[f], _like(after[f], value))])

    def _changes(self, fixed: Mapping[Path, int], f: Path) -> bool:
        """Slot 0, with these leaves fixed, may change leaf f in a step (or z3 cannot
        tell)."""
        t = 3
        s = self.fresh("s", t - 1)
        slot = s.slots[0]
        for g, x in fixed.items():
            slot = _set(slot, g, _like(values_of(slot)[g], x))
        s = replace(s, slots=(slot, *s.slots[1:]))
        specs = _symbolic_specs("p", self.n)
        cons = [specs[0].arrival_step >= 1, specs[0].arrival_step < t]
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        n1, _, d1 = _step(self.engine, self.cfg, specs, s, eos)
        return not _solve_unsat([*cons, *d1, _differs(values_of(n1.slots[0])[f],
                                                      values_of(slot)[f])])

    def _absorbing(self, f: Path, v: int) -> bool:
        """Slot 0's field f, at value v, keeps that value through any step."""
        t = 3
        s = self.fresh("s", t - 1)
        s = replace(s, slots=(_set(s.slots[0], f, v), *s.slots[1:]))
        specs = _symbolic_specs("p", self.n)
        cons = [specs[0].arrival_step >= 1, specs[0].arrival_step < t]
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        n1, _, d1 = _step(self.engine, self.cfg, specs, s, eos)
        return _solve_unsat([*cons, *d1, _differs(values_of(n1.slots[0])[f], v)])

    def _retires(self, status: Mapping[Path, int]) -> bool:
        """A slot (slot 0) with these status values keeps every leaf, and nothing else
        depends on its other leaves or its request."""
        t = 3
        s = self.fresh("s", t - 1)
        other = self.fresh("r", t - 1)
        first, second = s.slots[0], other.slots[0]
        for f, v in status.items():
            x = _like(values_of(first)[f], v)
            first, second = _set(first, f, x), _set(second, f, x)
        s = replace(s, slots=(first, *s.slots[1:]))
        s2 = replace(s, slots=(second, *s.slots[1:]))
        specs = _symbolic_specs("p", self.n)
        specs2 = [_symbolic_specs("q", 1)[0], *specs[1:]]
        cons = [sp.arrival_step >= 1 for sp in (specs[0], specs2[0])]
        cons += [sp.arrival_step < t for sp in (specs[0], specs2[0])]
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        n1, o1, d1 = _step(self.engine, self.cfg, specs, s, eos)
        frozen = [_differs(x, y) for x, y in zip(values_of(n1.slots[0]).values(),
                                                values_of(s.slots[0]).values(), strict=True)]
        if not _solve_unsat([*cons, *d1, z3.Or(*frozen)]):
            return False
        if len(status) > len(status_fields(self.leaves)) and self._independent(status):
            return True  # quiet leaves: decided without the solver (`_independent`)
        n2, o2, d2 = _step(self.engine, self.cfg, specs2, s2, eos)
        rest = [_differs(x, y) for x, y in zip(
            _outputs(replace(n1, slots=n1.slots[1:]), replace(o1, slots=o1.slots[1:]),
                     _OBS_FIELDS),
            _outputs(replace(n2, slots=n2.slots[1:]), replace(o2, slots=o2.slots[1:]),
                     _OBS_FIELDS), strict=True)]
        return _solve_unsat([*cons, *d1, *d2, z3.Or(*rest)])

    def retired_at_once(self, quiet: Sequence[Path]
                        ) -> tuple[frozenset[tuple[int, ...]], tuple[Path, ...],
                                   frozenset[str]]:
        """`Shape.retired_at_once`: the status values at which a slot retires as soon as it
        enters them, with those of the `quiet` leaves that the step resets on entry (always
        at their initial values there, so asking for them costs nothing), those leaves, and
        the slot's own observables that may depend on its other leaves there but not once
        every quiet leaf is initial (beyond the quiet retirement's premise: a property that
        reads one keeps that retirement). The reduction needs less than `_retires`: the
        slot need not keep its leaves (the key resets them), only stay at the value and
        steer nothing else. vLLM's FINISHED under the AsyncScheduler: the finished
        request's last output is still delivered in the next step and only its own
        `finish_rank` report reads what is in flight; the reference explorer's `state_key`
        drops a finished request at once too (model/vllm/reference.py)."""
        status = status_fields(self.leaves)
        if len(status) != 1 or not quiet:
            return frozenset(), (), frozenset()
        initial = {leaf.field: leaf.initial for leaf in self.leaves if leaf.slot == 0}
        found: dict[int, tuple[Path, ...]] = {}
        reads: set[str] = set()
        for v in range(8):
            if v == initial[status[0]] or not self._enters(status[0], v):
                continue
            if not self._absorbing(status[0], v):
                continue
            entry = tuple(f for f in quiet if self._resets(status[0], v, f, initial[f]))
            own = self._own_reads({status[0]: v, **{f: initial[f] for f in entry}})
            once_quiet = self._own_reads({status[0]: v, **{f: initial[f] for f in quiet}})
            if own is not None:
                found[v] = entry
                reads |= own - (once_quiet if once_quiet is not None else frozenset())
        if not found:
            return frozenset(), (), frozenset()
        common = tuple(sorted({f for e in found.values() for f in e}, key=repr))
        if any(set(e) != set(common) for e in found.values()):
            return frozenset(), (), frozenset()  # one set of leaves for every value, or none
        combos = frozenset((v, *(initial[f] for f in common)) for v in found)
        return combos, common, frozenset(reads)

    def _own_reads(self, fixed: Mapping[Path, int]) -> frozenset[str] | None:
        """With slot 0's leaves `fixed`, the simplified step: None if an output but slot 0's
        own names slot 0's other leaves or its request (`_independent`), else the fields of
        slot 0's observables that name its other leaves."""
        if not self._independent(fixed):
            return None
        _, obs = self._step_fixing_slot_0(fixed)
        names = [f for f in _OBS_FIELDS if isinstance(getattr(obs.slots[0], f), z3.ExprRef)]
        simplified = _simplified([getattr(obs.slots[0], f) for f in names])
        return frozenset(f for f, x in zip(names, simplified, strict=True)
                         if any(c.startswith("s.slots.0.") for c in z3_consts(x)))

    def idle(self, equal: frozenset[Path]) -> tuple[tuple[Path, frozenset[str]], ...]:
        """`Shape.idle`: in-slot fields of `equal` that no next leaf names once the step is
        built and simplified (a sufficient condition for not depending on them), each with
        the observables that name it. vLLM's `pending_rank` without the prefix cache: the
        order the previous schedule served its requests in orders only the freeing of
        cached blocks (and the `finish_rank` report)."""
        candidates = [leaf.field for leaf in self.leaves
                      if leaf.slot == 0 and leaf.field in equal
                      and leaf.field not in {field_of(p) for p in self.constant}]
        if not candidates:
            return ()
        s = self.fresh("s", 2)
        specs = _symbolic_specs("p", self.n)
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        nxt, obs = self.engine.step(_Unnamed(), self.cfg, specs, s, eos)
        named: list[tuple[str | None, Any]] = [(None, v) for v in values_of(nxt).values()]
        named += [(f, getattr(obs, f)) for f in _STEP_FIELDS]
        named += [(f, getattr(o, f)) for o in obs.slots for f in _OBS_FIELDS]
        simplified = _simplified([v for _, v in named])
        terms = [x for x in simplified if isinstance(x, z3.ExprRef)]
        found = iter(consts_of_terms(terms))
        names = [(tag, next(found) if isinstance(x, z3.ExprRef) else _NO_NAMES)
                 for (tag, _), x in zip(named, simplified, strict=True)]
        out = []
        for f in candidates:
            mine = {".".join(str(p) for p in ("s", "slots", i, *f)) for i in range(self.n)}
            if any(tag is None and consts & mine for tag, consts in names):
                continue
            out.append((f, frozenset(str(tag) for tag, consts in names if consts & mine)))
        return tuple(out)

    def flow(self) -> tuple[dict[str, frozenset[Path]], dict[Path, frozenset[Path]]]:
        s = self.fresh("s", 1)
        specs = _symbolic_specs("p", self.n)
        eos = [z3.Bool(f"e{k}") for k in range(self.n)]
        nxt, obs, defs = _step(self.engine, self.cfg, specs, s, eos)
        flow = _Flow(defs)
        obs_flow: dict[str, set[Path]] = {}
        for f in _STEP_FIELDS:
            obs_flow[f] = flow.leaves(getattr(obs, f))
        for o in obs.slots:
            for f in _OBS_FIELDS:
                obs_flow.setdefault(f, set()).update(flow.leaves(getattr(o, f)))
        next_flow: dict[Path, set[Path]] = {}
        for path, value in values_of(nxt).items():
            next_flow.setdefault(field_of(path), set()).update(flow.leaves(value))
        return ({k: frozenset(v) for k, v in obs_flow.items()},
                {k: frozenset(v) for k, v in next_flow.items()})


class _Unnamed(SymbolicOps):
    """SymbolicOps without naming: equal computations give one shared z3 term."""

    def name(self, value: Any) -> Any:
        """Identity."""
        return value


def _simplified(values: Sequence[Any]) -> list[Any]:
    """The values (ints, bools or z3 terms) simplified in one goal: they share most of
    their terms."""
    goal = z3.Goal()
    where = []
    for k, x in enumerate(values):
        if isinstance(x, z3.ExprRef):
            where.append(k)
            goal.add(z3.Const(f"out.{k}", x.sort()) == x)
    out = list(values)
    if not where:
        return out
    result = z3.Tactic("simplify")(goal)
    # Each fact names its own output; a fact that names none or several (or an output no
    # fact names) leaves that output's term as it was, which names at least as much.
    facts = [f for sub in result for f in sub]
    for f, names in zip(facts, consts_of_terms(facts), strict=True):
        outs = [c for c in names if c.startswith("out.")]
        if len(outs) == 1:
            k = int(outs[0][4:])
            out[k] = f.arg(1) if z3.is_eq(f) and _const_name(f.arg(0)) == outs[0] else f
    return out


def _same_term(x: Any, y: Any) -> bool:
    if isinstance(x, z3.ExprRef) and isinstance(y, z3.ExprRef):
        return x.eq(y)
    return not isinstance(x, z3.ExprRef) and not isinstance(y, z3.ExprRef) and x == y


class _Flow:
    """Leaves whose raw value flows into a term: through arithmetic, the branches of an
    If and boolean connectives, never through an If's condition or a comparison of
    integers (named definitions are followed)."""

    def __init__(self, definitions: Sequence[Any]) -> None:
        self.defs: dict[str, z3.ExprRef] = {}
        for d in definitions:
            if z3.is_eq(d) and _const_name(d.arg(0)):
                self.defs[_const_name(d.arg(0))] = d.arg(1)
        self.memo: dict[int, frozenset[Path]] = {}

    def leaves(self, value: Any) -> set[Path]:
        if not isinstance(value, z3.ExprRef):
            return set()
        return set(self._leaves(value))

    def _leaves(self, e: z3.ExprRef) -> frozenset[Path]:
        key = e.get_id()
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = frozenset()  # guards cycles (there are none in definitions)
        out: frozenset[Path]
        name = _const_name(e)
        if name is not None:
            if name in self.defs:
                out = self._leaves(self.defs[name])
            else:
                tag, path = _split(name)
                out = frozenset({field_of(path)}) if tag == "s" else frozenset()
        elif z3.is_app(e) and e.decl().kind() in _COMPARISONS and not z3.is_bool(e.arg(0)):
            out = frozenset()
        elif z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE:
            out = self._leaves(e.arg(1)) | self._leaves(e.arg(2))
        else:
            out = frozenset().union(*(self._leaves(c) for c in e.children()))
        self.memo[key] = out
        return out


_COMPARISONS = {z3.Z3_OP_LT, z3.Z3_OP_LE, z3.Z3_OP_GT, z3.Z3_OP_GE, z3.Z3_OP_EQ,
                z3.Z3_OP_DISTINCT}


@dataclass(frozen=True)
class _Engine:
    """An engine as a cache key: by its registry name (`EngineModel.name`, version
    included), the model carried along unhashed."""

    name: str
    model: EngineModel = field(compare=False, repr=False)


def _engine(engine: EngineModel | str) -> _Engine:
    """The cache key of an engine's model (a name is looked up in the registry)."""
    model = engines.get(engine) if isinstance(engine, str) else engine
    return _Engine(model.name, model)


def shape(engine: EngineModel | str, rule_cfg: Any, slots: int) -> Shape:
    """The proved reductions of one engine config (cached by the engine's name: the proofs
    take seconds). `engine` is the model, or its registry name."""
    return _shape(_engine(engine), rule_cfg, slots)


@functools.lru_cache(maxsize=64)
def _shape(key: _Engine, rule_cfg: Any, slots: int) -> Shape:
    name = proof_cache.key("array-shape", key.name, rule_cfg, slots, _limit())
    loaded = proof_cache.load(name)
    if loaded is not None:
        sh = shape_from_json(loaded, Shape, OrderField)
        if sh is not None:
            _read_undecided(loaded)
            return sh
    before, unlimited = _undecided, _unlimited
    sh = _proved_shape(key.model, rule_cfg, slots)
    _store(name, shape_to_json(sh), before, unlimited)
    return sh


def _read_undecided(loaded: dict[str, Any]) -> None:
    """Count the solver answers a stored result left undecided at PROOF_RLIMIT (its
    key holds the limit) as this process's own: read back, they are still undecided."""
    global _undecided
    _undecided += proof_cache.undecided(loaded)


def _proved_shape(engine: EngineModel, rule_cfg: Any, slots: int) -> Shape:
    a = _Analyser(engine, rule_cfg, slots)
    n = max(1, min(slots, PROOF_SLOTS))
    parts = _parts(engine, rule_cfg)
    small = _Analyser(engine, rule_cfg, n) if n != slots and not parts else a
    # The symmetry proof, most of a first search's proving (one query of about a second on
    # family F), is solved on another core while the other proofs are built and asked.
    symmetry = small.symmetry_later() if not parts else None
    equal, order, proved, global_order = a.behaviour()
    arrival = a.arrival_read()
    obs_flow, next_flow = a.flow()
    quiet: tuple[Path, ...] = ()
    at_once: frozenset[tuple[int, ...]] = frozenset()
    at_once_quiet: tuple[Path, ...] = ()
    at_once_obs: frozenset[str] = frozenset()
    if symmetry is None:
        sym, retired = _joint_facts(engine, parts, slots)
        retired = retired if proved else frozenset()
    else:
        retired, quiet = small.retired() if proved else (frozenset(), ())
        if proved and quiet:
            at_once, at_once_quiet, at_once_obs = small.retired_at_once(quiet)
        sym = symmetry()
    return Shape(proof_slots=n, equal=equal, order=order, behaviour_proved=proved,
                 arrival_step_read=arrival, symmetry=sym,
                 retired=retired, obs_flow=obs_flow, next_flow=next_flow,
                 constant=frozenset(field_of(p) for p in a.constant), notes=tuple(a.notes),
                 global_order=global_order, retire_quiet=quiet if retired else (),
                 retired_at_once=at_once, at_once_quiet=at_once_quiet,
                 at_once_obs=at_once_obs,
                 idle=a.idle(equal) if proved else ())


def _parts(engine: Any, rule_cfg: Any) -> tuple[tuple[EngineModel, Any], ...]:
    """A product's parts (engine, rule config) in the order its slots hold them (its
    `parts`, checker/methods/array/product.py), none for an engine."""
    parts = getattr(engine, "parts", None)
    return tuple(parts(rule_cfg)) if parts is not None else ()


def _joint_facts(engine: Any, parts: Sequence[tuple[EngineModel, Any]], slots: int
                 ) -> tuple[str, frozenset[tuple[int, ...]]]:
    """A product's symmetry and retired slots, read off its parts' proofs. Each part steps
    its own half by its own rules from its half alone, the product's next state is the
    halves' and its observables are, slot by slot and step by step, functions of the
    halves' (`engine.slot_fields`), so a swap of two slots (both halves at once) commutes
    with the product step wherever it commutes with every part's, and a slot retires
    where each half retires (its leaves are the halves', what else the step computes is
    the halves')."""
    shapes = [shape(e, c, slots) for e, c in parts]
    kinds = {sh.symmetry for sh in shapes}
    sym = "none" if "none" in kinds else "priority" if "priority" in kinds else "full"
    if any(sh.retire_quiet for sh in shapes):
        return sym, frozenset()  # a side retires on quiet leaves: not read off, none kept
    combos: list[tuple[int, ...]] = [()]
    for sh in shapes:  # the product's status fields: the first part's, then the next's
        combos = [(*c, *r) for c in combos for r in sorted(sh.retired)]
    return sym, frozenset(combos)


def permuted(engine: EngineModel | str, rule_cfg: Any, slots: int,
             obs_fields: frozenset[str]) -> bool:
    """Whether the symmetry of `shape(...)` carries these SlotObs fields along (a property
    that reads one that it does not is searched without symmetry). Never `arrival_time`,
    which is the slot index itself."""
    return _permuted(_engine(engine), rule_cfg, slots, obs_fields)


@functools.lru_cache(maxsize=256)
def _permuted(key: _Engine, rule_cfg: Any, slots: int, obs_fields: frozenset[str]) -> bool:
    sh = _shape(key, rule_cfg, slots)
    if sh.symmetry == "none" or obs_fields & POSITIONAL:
        return False
    if not obs_fields:
        return True
    parts = _parts(key.model, rule_cfg)
    if parts:  # each product observable is a function of its parts' same fields
        read = frozenset(key.model.slot_fields(obs_fields))
        return all(_permuted(_engine(e), c, slots, read) for e, c in parts)
    name = proof_cache.key("array-permuted", key.name, rule_cfg, slots, sorted(obs_fields),
                           _limit())
    loaded = proof_cache.load(name)
    if loaded is not None:
        _read_undecided(loaded)
        return bool(loaded["permuted"])
    n = max(1, min(slots, PROOF_SLOTS))
    before, unlimited = _undecided, _unlimited
    a = _Analyser(key.model, rule_cfg, n)
    answer = a.permuted("none" if sh.symmetry == "full" else "priority", sorted(obs_fields))
    _store(name, {"permuted": answer}, before, unlimited)
    return answer


def renamed_swap(engine: EngineModel | str, rule_cfg: Any, slots: int,
                 obs_fields: frozenset[str]) -> bool:
    """Whether a swap of two arrived slots that also swaps their own block hash ids in a
    paged pool commutes with the step and carries these SlotObs fields along (z3, at
    min(slots, PROOF_SLOTS) slots; stored like the Shape): what lets the array key put the
    slots of a prefix-cached state in a canonical order (checker/methods/array/pool.py).
    Never `arrival_time`, which is the slot index itself; never for a product."""
    return _renamed_swap(_engine(engine), rule_cfg, slots, obs_fields)


# The most pool entries (blocks x table entries per slot) at which the renamed-swap proof
# is attempted: a 2-block pool with tables of 2 (4) is decided in 16 s; on tiny_cached's
# 4 x 4 z3 left the whole disjunction undecided after 10 minutes and single next-state
# leaves after 20 s and 2 minutes each (2026-12-05, load 3-4), so larger pools keep their
# slot order rather than pay minutes for no answer.
RENAMED_SWAP_LIMIT = 8


@functools.lru_cache(maxsize=256)
def _renamed_swap(key: _Engine, rule_cfg: Any, slots: int, obs_fields: frozenset[str]
                  ) -> bool:
    if obs_fields & POSITIONAL or _parts(key.model, rule_cfg):
        return False
    lay = pool.layout_of(leaves_of(key.model.initial_state(2, rule_cfg)))
    if lay is None or lay.blocks * lay.table_len > RENAMED_SWAP_LIMIT:
        return False
    if slots < 2:
        return True
    every = frozenset(_OBS_FIELDS) - POSITIONAL
    if obs_fields != every and _renamed_swap(key, rule_cfg, slots, every):
        return True  # one proof for every field the swap can carry covers each subset
    name = proof_cache.key("array-renamed-swap", key.name, rule_cfg, slots,
                           sorted(obs_fields), _limit())
    loaded = proof_cache.load(name)
    if loaded is not None:
        _read_undecided(loaded)
        return bool(loaded["commutes"])
    n = max(1, min(slots, PROOF_SLOTS))
    before, unlimited = _undecided, _unlimited  # the shape's too: the proof reads its groups
    global_order = _shape(key, rule_cfg, slots).global_order
    a = _Analyser(key.model, rule_cfg, n)
    answer = a.renamed_swap(sorted(obs_fields), global_order)
    _store(name, {"commutes": answer}, before, unlimited)
    return answer


def guard_fn(of: OrderField, i: int, j: int, proof_slots: int
             ) -> Callable[[Callable[[Path], Any], Any], Any]:
    """The guard of pair (i, j) at any slot count, as a function of a leaf getter and an
    Ops: the proof's pair (0, 1) or (1, 0) with slot numbers renamed (guards are the same
    code for every pair, which `behaviour` checked)."""
    a, b = (0, 1) if i < j else (1, 0)
    g = dict(((x, y), t) for x, y, t in of.guards)[(a, b)]
    rename = {a: i, b: j}

    def leaf(name: str) -> Path:
        _, path = _split(name)
        if path[0] == "slots":
            return ("slots", rename[int(path[1])], *path[2:])
        return path

    return compile_term(g, leaf)


_BINARY: dict[int, Callable[[Any, Any], Any]] = {
    z3.Z3_OP_EQ: lambda x, y: x == y, z3.Z3_OP_DISTINCT: lambda x, y: x != y,
    z3.Z3_OP_LT: lambda x, y: x < y, z3.Z3_OP_LE: lambda x, y: x <= y,
    z3.Z3_OP_GT: lambda x, y: x > y, z3.Z3_OP_GE: lambda x, y: x >= y,
    z3.Z3_OP_SUB: lambda x, y: x - y,
    z3.Z3_OP_IDIV: lambda x, y: x // y,  # z3's div floors for a positive divisor
    z3.Z3_OP_MOD: lambda x, y: x % y,
}


def compile_term(e: z3.ExprRef, leaf: Callable[[str], Path]
                 ) -> Callable[[Callable[[Path], Any], Any], Any]:
    """A z3 term as a function of (leaf getter, Ops): constants are read by path, the
    connectives and comparisons computed with the Ops (ints, bools or arrays). The getter
    may carry a `memo` dict: equal subterms of several guards are then computed once."""
    node = _compile(e, leaf)

    def run(get: Callable[[Path], Any], ops: Any) -> Any:
        return node(get, ops, getattr(get, "memo", None))
    return run


_Node = Callable[[Callable[[Path], Any], Any, "dict[Any, Any] | None"], Any]


def _compile(e: z3.ExprRef, leaf: Callable[[str], Path]) -> _Node:
    return _compile_keyed(e, leaf)[0]


def _compile_keyed(e: z3.ExprRef, leaf: Callable[[str], Path]) -> tuple[_Node, Any]:
    """The node and its structural key (leaves by their renamed paths), so that equal
    subterms of different guards share one memo entry and different ones never do."""
    name = _const_name(e)
    if name is not None:
        path = leaf(name)
        return (lambda get, ops, memo: get(path)), ("leaf", path)
    if z3.is_true(e) or z3.is_false(e):
        value = z3.is_true(e)
        return (lambda get, ops, memo: value), ("const", value)
    if z3.is_int_value(e):
        number = e.as_long()
        return (lambda get, ops, memo: number), ("const", number)
    compiled = [_compile_keyed(c, leaf) for c in e.children()]
    parts = [node for node, _ in compiled]
    k = e.decl().kind()
    key = (k, tuple(child for _, child in compiled))
    fn: Callable[[Any, list[Any]], Any]
    if k == z3.Z3_OP_AND:
        fn = lambda ops, xs: ops.and_(*xs)  # noqa: E731
    elif k == z3.Z3_OP_OR:
        fn = lambda ops, xs: ops.or_(*xs)  # noqa: E731
    elif k == z3.Z3_OP_NOT:
        fn = lambda ops, xs: ops.not_(xs[0])  # noqa: E731
    elif k == z3.Z3_OP_ITE:
        fn = lambda ops, xs: ops.ite(*xs)  # noqa: E731
    elif k == z3.Z3_OP_IMPLIES:
        fn = lambda ops, xs: ops.implies(*xs)  # noqa: E731
    elif k == z3.Z3_OP_ADD:
        fn = lambda ops, xs: functools.reduce(lambda x, y: x + y, xs)  # noqa: E731
    elif k == z3.Z3_OP_MUL:
        fn = lambda ops, xs: functools.reduce(lambda x, y: x * y, xs)  # noqa: E731
    elif k == z3.Z3_OP_UMINUS:
        fn = lambda ops, xs: -xs[0]  # noqa: E731
    elif k in _BINARY and len(parts) == 2:
        binary = _BINARY[k]
        fn = lambda ops, xs: binary(xs[0], xs[1])  # noqa: E731
    else:
        raise ValueError(f"cannot evaluate {e.decl()} in a guard")

    def node(get: Callable[[Path], Any], ops: Any, memo: dict[Any, Any] | None) -> Any:
        if memo is not None and key in memo:
            return memo[key]
        value = fn(ops, [p(get, ops, memo) for p in parts])
        if memo is not None:
            memo[key] = value
        return value
    return node, key


def pairs(n: int) -> list[tuple[int, int]]:
    """Ordered pairs of distinct slots."""
    return [(i, j) for i, j in itertools.product(range(n), repeat=2) if i != j]
