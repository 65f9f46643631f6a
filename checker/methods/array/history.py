"""The history a state of the array explorer must carry for the properties it checks:
which observables each reads, and how many steps back (properties/reads.py), and the
past steps rebuilt from that history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from model.core.types import SlotObs, Step
from properties.catalogue import Property
from properties.reads import SLOT_FIELDS, STEP_FIELDS


def past_step(index: int, slot_values: Sequence[dict[str, Any]], step_values: dict[str, Any],
              cfg: Any) -> Step:
    """A past step rebuilt from the history columns; fields no property reads are 0."""
    slots = tuple(SlotObs(**{f: v.get(f, i if f == "arrival_time" else 0)
                             for f in SLOT_FIELDS}) for i, v in enumerate(slot_values))
    rest = {f: step_values.get(f, 0) for f in STEP_FIELDS if f != "step"}
    return Step(step=index, slots=slots, cfg=cfg, **rest)


# ---- atoms: the past as the property reads it ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Atoms:
    """Properties as functions of the current step's observables and of `atoms` of the
    past steps: the largest subterms of a property that read one past step only (for
    starvation: `was_waiting and scheduled == 0` per slot and step). A state keeps, per
    past step, the value of every atom instead of the raw observables, so two pasts that
    the properties cannot tell apart are one state.

    `slot_atoms[g][i]` is the atom of slot-generic template g for slot i (the same code
    with the slot renamed), `global_atoms` the others; `formulas[p][t]` evaluates
    property p at step index t (t = lags once the window is full)."""

    lags: int
    atom_fns: tuple[Any, ...]  # (obs getter, ops) -> value, per atom
    slot_atoms: tuple[tuple[int, ...], ...]
    global_atoms: tuple[int, ...]
    formulas: tuple[tuple[Any, ...], ...]
    owners: tuple[frozenset[str], ...]  # per atom: the slots ("0", "1", ...) or "step" read


def atoms(props: Sequence[Property], rule_cfg: Any, slots: int, sample: Step,
          lags: int) -> Atoms | None:
    """The atoms of `props` over `lags` past steps (None: a property is not a plain term
    of the observables, and the explorer keeps raw observables instead)."""
    import z3

    import checker.methods.array.analysis as analysis
    from model.core.ops import SymbolicOps

    def var(lag: int, owner: str, name: str, like: Any) -> Any:
        label = f"o.{lag}.{owner}.{name}"
        return z3.Bool(label) if isinstance(like, bool) else z3.Int(label)

    built: dict[tuple[int, int], Step] = {}

    def step(lag: int, index: int) -> Step:
        # One Step per (lag, index), shared by every property and window length: the same
        # names make the same z3 constants, so sharing changes no term, only the cost of
        # building lags**2 * |props| steps of fresh constants.
        if (lag, index) not in built:
            built[lag, index] = fresh_step(lag, index)
        return built[lag, index]

    def fresh_step(lag: int, index: int) -> Step:
        obs = tuple(SlotObs(**{f: (i if f == "arrival_time" else
                                   var(lag, str(i), f, getattr(sample.slots[0], f)))
                               for f in SLOT_FIELDS}) for i in range(slots))
        rest = {f: var(lag, "step", f, getattr(sample, f)) for f in STEP_FIELDS
                if f != "step"}
        return Step(step=index + 1, slots=obs, cfg=rule_cfg, **rest)

    templates: dict[str, int] = {}
    bodies: list[Any] = []
    seen: dict[int, tuple[Any, int, int]] = {}
    # The lags each subterm reads, by z3 id, shared by every term of this call: the terms
    # are kept alive in `terms`, so no id is reused for another subterm meanwhile.
    read_lags: dict[int, frozenset[int]] = {}
    terms: list[Any] = []
    formulas: list[tuple[Any, ...]] = []
    for prop in props:
        per_t = []
        for t in range(lags + 1):
            ops = SymbolicOps()
            term = prop.holds(ops, [step(t - u, u) for u in range(t + 1)], t)
            if ops.take_definitions():
                return None
            if isinstance(term, bool):
                per_t.append(_constant(term))
                continue
            terms.append(term)
            try:
                per_t.append(_compile_with_atoms(term, templates, bodies, seen, read_lags))
            except ValueError:
                return None
        formulas.append(tuple(per_t))
    try:
        fns = tuple(analysis.compile_term(b, lambda name: (name,)) for b in bodies)
    except ValueError:
        return None
    slot_atoms, global_atoms = _by_slot(bodies, slots)
    owners = tuple(frozenset(c.decl().name().split(".")[2] for c in analysis._all_consts(b))
                   for b in bodies)
    return Atoms(lags, fns, slot_atoms, global_atoms, tuple(formulas), owners)


def _constant(value: bool) -> Any:
    return lambda get, ops: value


def _lag_of(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "o" and parts[1].isdigit() else None


def _compile_with_atoms(term: Any, templates: dict[str, int], bodies: list[Any],
                        seen: dict[int, tuple[Any, int, int]],
                        lags: dict[int, frozenset[int]]) -> Any:
    """The term with every largest single-past-step subterm replaced by an atom, compiled;
    new atoms are added to `templates` (key: the subterm read at lag X) and `bodies`.
    `seen` maps a subterm's z3 id to (subterm, lag, atom index) across the terms of one
    `atoms` call: the properties' terms share subterms (z3 hash-conses them), and holding
    the subterm keeps its id from being reused. `lags` memoises each subterm's lags by
    id across those terms (the caller keeps them alive)."""
    import z3

    import checker.methods.array.analysis as analysis

    def lag_set(e: Any) -> frozenset[int]:
        k = e.get_id()
        if k not in lags:
            if z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                lag = _lag_of(e.decl().name())
                lags[k] = frozenset() if lag is None else frozenset({lag})
            else:
                lags[k] = frozenset().union(*(lag_set(c) for c in e.children()))
        return lags[k]

    found: dict[int, tuple[Any, int, int]] = {}  # id -> (subterm, lag, atom index)
    walked: set[int] = set()  # subterms of this term already visited (it is a DAG)

    def visit(e: Any) -> None:
        if e.get_id() in walked:
            return
        walked.add(e.get_id())
        ls = lag_set(e)
        if len(ls) == 1 and next(iter(ls)) >= 1:
            if e.get_id() in found:
                return
            if e.get_id() not in seen:
                lag = next(iter(ls))
                body = _at_lag(e, lag, "X")
                key = body.sexpr()
                if key not in templates:
                    templates[key] = len(bodies)
                    bodies.append(body)
                seen[e.get_id()] = (e, lag, templates[key])
            found[e.get_id()] = seen[e.get_id()]
            return
        for c in e.children():
            visit(c)

    visit(term)
    pairs = [(e, (z3.Bool if z3.is_bool(e) else z3.Int)(f"a.{lag}.{j}"))
             for e, lag, j in found.values()]
    replaced = z3.substitute(term, *pairs) if pairs else term
    return analysis.compile_term(replaced, lambda name: (name,))


def _at_lag(e: Any, lag: int, to: str) -> Any:
    """The subterm with its lag-`lag` observables renamed to lag `to`."""
    import z3

    import checker.methods.array.analysis as analysis

    pairs = []
    for c in analysis._all_consts(e):
        name = c.decl().name()
        if _lag_of(name) == lag:
            parts = name.split(".")
            pairs.append((c, z3.Const(".".join(["o", to, *parts[2:]]), c.sort())))
    return z3.substitute(e, *pairs) if pairs else e


def _by_slot(bodies: Sequence[Any], slots: int) -> tuple[tuple[tuple[int, ...], ...],
                                                           tuple[int, ...]]:
    """Atoms that read one slot only, grouped by their slot-generic form (one atom per
    slot in each group); the rest are global."""
    import z3

    import checker.methods.array.analysis as analysis

    generic: dict[str, dict[int, int]] = {}
    rest = []
    for j, b in enumerate(bodies):
        owners = {c.decl().name().split(".")[2] for c in analysis._all_consts(b)}
        if len(owners) == 1 and next(iter(owners)).isdigit():
            slot = int(next(iter(owners)))
            pairs = [(c, z3.Const(c.decl().name().replace(f"o.X.{slot}.", "o.X.S."),
                                  c.sort())) for c in analysis._all_consts(b)]
            generic.setdefault(z3.substitute(b, *pairs).sexpr(), {})[slot] = j
        else:
            rest.append(j)
    groups = []
    for per_slot in generic.values():
        if set(per_slot) == set(range(slots)):
            groups.append(tuple(per_slot[i] for i in range(slots)))
        else:
            rest += list(per_slot.values())
    return tuple(groups), tuple(sorted(rest))
