"""The array explorer's reduction proofs (analysis.Shape) kept on disk between processes
and runs, through checker/methods/proof_cache.py (keyed on the engine, the rule config, the
slot count and every source the proofs read).

A Shape holds z3 terms (the order fields' guards). They are stored as SMT-LIB text with
their constants' sorts and parsed back; a Shape is stored only when every guard parses
back to the very same term (z3's structural equality), so a loaded Shape is the one the
proofs gave, never an approximation of it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import z3

from checker.methods.array.layout import Path

_SORTS: dict[str, Callable[[str], z3.ExprRef]] = {"Int": z3.Int, "Bool": z3.Bool}


def _path(p: Iterable[Any]) -> Path:
    return tuple(p)


def _paths(ps: Iterable[Path]) -> list[list[Any]]:
    return sorted((list(p) for p in ps), key=repr)


def term_to_json(term: z3.ExprRef) -> dict[str, Any] | None:
    """A z3 term as SMT-LIB text and its constants' (name, sort), or None when it does not
    parse back to itself (a sort other than Int and Bool, or a text z3 reads otherwise)."""
    consts: dict[str, str] = {}
    stack, seen = [term], set()
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            sort = x.sort().name()
            if sort not in _SORTS:
                return None
            consts[x.decl().name()] = sort
        stack.extend(x.children())
    stored = {"smt": term.sexpr(), "consts": sorted(consts.items())}
    back = term_from_json(stored)
    return stored if back is not None and back.eq(term) else None


def term_from_json(stored: Mapping[str, Any]) -> z3.ExprRef | None:
    """The term `term_to_json` stored, or None when its text does not parse."""
    decls = {name: _SORTS[sort](name) for name, sort in stored["consts"]}
    try:
        parsed = z3.parse_smt2_string(f"(assert {stored['smt']})", decls=decls)
    except z3.Z3Exception:
        return None
    return parsed[0] if len(parsed) == 1 else None


def shape_to_json(sh: Any) -> dict[str, Any] | None:
    """A Shape as JSON, or None when one of its guards cannot be stored exactly."""
    order = []
    for of in sh.order:
        guards = []
        for i, j, g in of.guards:
            stored = term_to_json(g)
            if stored is None:
                return None
            guards.append([i, j, stored])
        order.append({"field": list(of.field), "guards": guards})
    return {
        "proof_slots": sh.proof_slots, "equal": _paths(sh.equal), "order": order,
        "behaviour_proved": sh.behaviour_proved, "arrival_step_read": sh.arrival_step_read,
        "symmetry": sh.symmetry, "retired": sorted(list(r) for r in sh.retired),
        "obs_flow": {k: _paths(v) for k, v in sorted(sh.obs_flow.items())},
        "next_flow": sorted(([list(k), _paths(v)] for k, v in sh.next_flow.items()),
                            key=repr),
        "constant": _paths(sh.constant), "notes": list(sh.notes),
        "global_order": [[list(p) for p in g] for g in sh.global_order],
        "retire_quiet": [list(p) for p in sh.retire_quiet],
        "retired_at_once": sorted(list(r) for r in sh.retired_at_once),
        "at_once_quiet": [list(p) for p in sh.at_once_quiet],
        "at_once_obs": sorted(sh.at_once_obs),
        "idle": [[list(f), sorted(obs)] for f, obs in sh.idle],
    }


def shape_from_json(stored: Mapping[str, Any], shape_type: type, order_type: type) -> Any:
    """The Shape `shape_to_json` stored (its classes passed in: analysis imports this
    module), or None when a guard does not parse."""
    order = []
    for of in stored["order"]:
        guards = []
        for i, j, g in of["guards"]:
            term = term_from_json(g)
            if term is None:
                return None
            guards.append((i, j, term))
        order.append(order_type(_path(of["field"]), tuple(guards)))
    return shape_type(
        proof_slots=stored["proof_slots"], equal=frozenset(map(_path, stored["equal"])),
        order=tuple(order), behaviour_proved=stored["behaviour_proved"],
        arrival_step_read=stored["arrival_step_read"], symmetry=stored["symmetry"],
        retired=frozenset(tuple(r) for r in stored["retired"]),
        obs_flow={k: frozenset(map(_path, v)) for k, v in stored["obs_flow"].items()},
        next_flow={_path(k): frozenset(map(_path, v)) for k, v in stored["next_flow"]},
        constant=frozenset(map(_path, stored["constant"])), notes=tuple(stored["notes"]),
        global_order=tuple(tuple(map(_path, g)) for g in stored.get("global_order", [])),
        retire_quiet=tuple(map(_path, stored.get("retire_quiet", []))),
        retired_at_once=frozenset(tuple(r) for r in stored.get("retired_at_once", [])),
        at_once_quiet=tuple(map(_path, stored.get("at_once_quiet", []))),
        at_once_obs=frozenset(stored.get("at_once_obs", [])),
        idle=tuple((_path(f), frozenset(obs)) for f, obs in stored.get("idle", [])))
