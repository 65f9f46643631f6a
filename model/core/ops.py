"""Ops: the operations a rule may apply to state values, over Python ints OR z3 terms.

A rule never branches on a state value with Python `if`/`and`/`or`/`min`/`max`; it calls
`ops.ite`, `ops.min`, ... so that the same code is a simulator under `ConcreteOps` and the
Z3 transition relation under `SymbolicOps`. Arithmetic (`+`, `-`, `*` by a constant) and
comparisons use Python operators, which both ints and z3 terms support.

This module and `checker/` are the only places that import z3.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Protocol

import z3

Int = Any  # int | z3.ArithRef
_FRESH = itertools.count(1)
Bool = Any  # bool | z3.BoolRef


class Ops(Protocol):
    """The operations rules and properties may use on state values."""

    def ite(self, cond: Bool, then: Any, other: Any) -> Any: ...
    def and_(self, *xs: Bool) -> Bool: ...
    def or_(self, *xs: Bool) -> Bool: ...
    def not_(self, x: Bool) -> Bool: ...
    def implies(self, a: Bool, b: Bool) -> Bool: ...
    def min(self, a: Int, b: Int) -> Int: ...
    def max(self, a: Int, b: Int) -> Int: ...
    def cdiv(self, a: Int, k: int) -> Int: ...
    def floordiv(self, a: Int, k: int) -> Int: ...
    def sum(self, xs: Sequence[Int]) -> Int: ...
    def to_int(self, b: Bool) -> Int: ...
    def name(self, value: Any) -> Any: ...


class ConcreteOps:
    """Ops over Python ints and bools: the rules become a simulator."""

    symbolic = False

    def ite(self, cond: Bool, then: Any, other: Any) -> Any:
        """`then` if cond else `other`."""
        return then if cond else other

    def and_(self, *xs: Bool) -> Bool:
        """Conjunction."""
        return all(xs)

    def or_(self, *xs: Bool) -> Bool:
        """Disjunction."""
        return any(xs)

    def not_(self, x: Bool) -> Bool:
        """Negation."""
        return not x

    def implies(self, a: Bool, b: Bool) -> Bool:
        """Implication."""
        return (not a) or bool(b)

    def min(self, a: Int, b: Int) -> Int:
        """Minimum of two ints."""
        return a if a <= b else b

    def max(self, a: Int, b: Int) -> Int:
        """Maximum of two ints."""
        return a if a >= b else b

    def cdiv(self, a: Int, k: int) -> Int:
        """Ceiling division by a positive constant."""
        return -(-a // k)

    def floordiv(self, a: Int, k: int) -> Int:
        """Floor division by a positive constant."""
        return a // k

    def sum(self, xs: Sequence[Int]) -> Int:
        """Sum of ints."""
        return sum(xs)

    def to_int(self, b: Bool) -> Int:
        """1 for True, 0 for False."""
        return 1 if b else 0

    def name(self, value: Any) -> Any:
        """Identity: naming only matters to the solver."""
        return value


# Direct term builders. z3's Python `If`, `And`, `Or` and `Not` check and coerce their
# arguments (sorts, contexts, probes) before the one C call that makes the term: 14-20 us
# a call against 2.5 for the call itself, and a symbolic step makes thousands (about 20 s
# of the test suite's CPU). Where every argument is already a term of one context, and of
# the sort the C call needs, they make that call directly: the same C call, with the same
# arguments in the same order, so the same term with the same id (z3's search, and so
# every answer and counterexample, unchanged). Anything else goes to z3's own function.


def _ite(cond: Any, then: Any, other: Any) -> Any:
    """z3.If(cond, then, other), built directly where it can be (above)."""
    ctx = getattr(cond, "ctx", None)
    if (isinstance(cond, z3.BoolRef) and getattr(then, "ctx", None) is ctx
            and getattr(other, "ctx", None) is ctx):
        for kind in (z3.ArithRef, z3.BoolRef):
            if isinstance(then, kind) and isinstance(other, kind):
                # Z3_mk_ite makes an Int branch Real itself where the other is Real, as
                # z3.If's coercion does; a result is never a numeral (class ArithRef).
                made = z3.Z3_mk_ite(ctx.ref(), cond.as_ast(), then.as_ast(), other.as_ast())
                return kind(made, ctx)
    return z3.If(cond, then, other)


def _joined(terms: Sequence[Any], make: Any, join: Any) -> Any:
    """`join(*terms)` (z3.And or z3.Or), built by the C function `make` directly where
    every term is a Bool term of one context (above)."""
    ctx = terms[0].ctx if isinstance(terms[0], z3.BoolRef) else None
    if ctx is None or not all(isinstance(t, z3.BoolRef) and t.ctx is ctx for t in terms):
        return join(*terms)
    asts = (z3.Ast * len(terms))(*(t.as_ast() for t in terms))
    return z3.BoolRef(make(ctx.ref(), len(terms), asts), ctx)


def _not(x: Any) -> Any:
    """z3.Not(x), built directly for a Bool term (above)."""
    if isinstance(x, z3.BoolRef):
        return z3.BoolRef(z3.Z3_mk_not(x.ctx.ref(), x.as_ast()), x.ctx)
    return z3.Not(x)


def _named(value: Any, name: str) -> tuple[Any, Any]:
    """A constant called `name` of `value`'s sort (Bool or Int) and the term `name ==
    value`, built directly as `z3.Bool(name) == value` or `z3.Int(name) == value` would
    be (above); a Real `value` goes to those."""
    ctx = value.ctx
    if isinstance(value, z3.BoolRef):
        sort, kind = z3.Z3_mk_bool_sort(ctx.ref()), z3.BoolRef
    elif isinstance(value, z3.ArithRef) and value.is_int():
        sort, kind = z3.Z3_mk_int_sort(ctx.ref()), z3.ArithRef
    else:
        fresh = z3.Bool(name, ctx) if z3.is_bool(value) else z3.Int(name, ctx)
        return fresh, fresh == value
    fresh = kind(z3.Z3_mk_const(ctx.ref(), z3.to_symbol(name, ctx), sort), ctx)
    return fresh, z3.BoolRef(z3.Z3_mk_eq(ctx.ref(), fresh.as_ast(), value.as_ast()), ctx)


def _connective(xs: Sequence[Bool], absorbing: bool, make: Any, join: Any) -> Bool:
    """`xs` joined by `join` (z3.And or z3.Or; `make` its C function) with Python
    constants folded: the `absorbing` one decides the whole, the other drops out (and is
    the value of none)."""
    if any(x is absorbing for x in xs):
        return absorbing
    terms = [x for x in xs if x is not (not absorbing)]
    if not terms:
        return not absorbing
    return terms[0] if len(terms) == 1 else _joined(terms, make, join)


class SymbolicOps:
    """Ops over z3 terms: the rules become the transition relation.

    Plain Python values are accepted too and folded where both sides are constant, so a
    config field can be fixed (an int) or symbolic (a z3 Int) in the same rule code.
    `name` gives an intermediate value a fresh constant and records its definition in
    `definitions`, which keeps the terms of a long fold flat for the solver.
    """

    symbolic = True

    def __init__(self) -> None:
        self.definitions: list[Any] = []

    def name(self, value: Any) -> Any:
        """A fresh constant equal to `value` (constants and plain symbols are kept)."""
        if not isinstance(value, z3.ExprRef) or z3.is_const(value):
            return value
        fresh, definition = _named(value, f"_n{next(_FRESH)}")
        self.definitions.append(definition)
        return fresh

    def take_definitions(self) -> list[Any]:
        """The definitions recorded since the last call."""
        out, self.definitions = self.definitions, []
        return out

    def ite(self, cond: Bool, then: Any, other: Any) -> Any:
        """z3 If, folded when the condition is a Python bool."""
        if isinstance(cond, bool):
            return then if cond else other
        return _ite(cond, then, other)

    def and_(self, *xs: Bool) -> Bool:
        """Conjunction, dropping constant True."""
        return _connective(xs, False, z3.Z3_mk_and, z3.And)

    def or_(self, *xs: Bool) -> Bool:
        """Disjunction, dropping constant False."""
        return _connective(xs, True, z3.Z3_mk_or, z3.Or)

    def not_(self, x: Bool) -> Bool:
        """Negation."""
        if isinstance(x, bool):
            return not x
        return _not(x)

    def implies(self, a: Bool, b: Bool) -> Bool:
        """Implication."""
        return self.or_(self.not_(a), b)

    def min(self, a: Int, b: Int) -> Int:
        """Minimum as an If term."""
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return _ite(a <= b, a, b)

    def max(self, a: Int, b: Int) -> Int:
        """Maximum as an If term."""
        if isinstance(a, int) and isinstance(b, int):
            return max(a, b)
        return _ite(a >= b, a, b)

    def cdiv(self, a: Int, k: int) -> Int:
        """Ceiling division by a positive constant (z3 `/` on Ints floors for k > 0)."""
        if isinstance(a, int):
            return -(-a // k)
        return (a + (k - 1)) / k

    def floordiv(self, a: Int, k: int) -> Int:
        """Floor division by a positive constant."""
        if isinstance(a, int):
            return a // k
        return a / k

    def sum(self, xs: Sequence[Int]) -> Int:
        """Sum of terms."""
        total: Int = 0
        for x in xs:
            total = total + x
        return total

    def to_int(self, b: Bool) -> Int:
        """1 for true, 0 for false."""
        if isinstance(b, bool):
            return 1 if b else 0
        if isinstance(b, z3.BoolRef):  # z3.If(b, 1, 0) makes the numerals in this order
            return _ite(b, z3.IntVal(1, b.ctx), z3.IntVal(0, b.ctx))
        return z3.If(b, 1, 0)


CONCRETE = ConcreteOps()
SYMBOLIC = SymbolicOps()


def simplify(value: Any) -> Any:
    """z3-simplify a term; leave Python values alone."""
    if isinstance(value, z3.ExprRef):
        return z3.simplify(value)
    return value


def as_python(value: Any) -> Any:
    """A z3 numeral or boolean constant as a Python int/bool (after simplification)."""
    value = simplify(value)
    if isinstance(value, z3.IntNumRef):
        return value.as_long()
    if z3.is_true(value):
        return True
    if z3.is_false(value):
        return False
    if isinstance(value, z3.ExprRef):
        raise ValueError(f"not a constant: {value}")
    return value
