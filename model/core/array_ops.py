"""Ops over arrays: one element per (state, environment choice) pair, so one call of an
engine's rules steps a whole frontier of states at once.

The rules (model/<engine>/rules.py) and the properties are branch-free over Ops, so under
`ArrayOps` every state value is an array (or a Python int/bool that is the same for every
element) and `ite` is an elementwise select. The array module is a parameter, not an import:
any library with numpy's array API for the calls below (numpy, CuPy, `jax.numpy`) steps the
frontier the same way. Only `where`, `logical_and`, `logical_or`, `logical_not`,
`minimum`, `maximum` and the arithmetic and comparison operators of its arrays are used.

Python scalars are folded where both sides are constant, as SymbolicOps folds them: a rule
whose value does not depend on the state stays a Python int and costs no array operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from types import ModuleType
from typing import Any

Array = Any  # an array of the array module, or a Python int/bool shared by every element

# numpy is a core dependency (pyproject.toml): without it the install is incomplete.
NUMPY_EXTRA = "numpy is a core dependency of batchproof: reinstall it (pip install -e .)"


def _is_const(x: object) -> bool:
    return isinstance(x, (bool, int))


class ArrayOps:
    """Ops whose values are arrays of one array module (elementwise over a frontier)."""

    # Not z3, but not Python ints either: a rule that computes a value exactly only for
    # concrete ops (model/sglang/rules.py `_mem_floor` uses Fraction) must take its
    # branch-free path, which is written over Ops and so runs on arrays.
    symbolic = True

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp

    def ite(self, cond: Array, then: Array, other: Array) -> Array:
        """Elementwise `then` where cond else `other` (folded when cond is a constant)."""
        if _is_const(cond):
            return then if cond else other
        if then is other:
            return then
        return self.xp.where(cond, then, other)

    def and_(self, *xs: Array) -> Array:
        """Elementwise conjunction; constant False absorbs, constant True drops."""
        if any(_is_const(x) and not x for x in xs):
            return False
        terms = [x for x in xs if not _is_const(x)]
        if not terms:
            return True
        return reduce(self.xp.logical_and, terms)

    def or_(self, *xs: Array) -> Array:
        """Elementwise disjunction; constant True absorbs, constant False drops."""
        if any(_is_const(x) and x for x in xs):
            return True
        terms = [x for x in xs if not _is_const(x)]
        if not terms:
            return False
        return reduce(self.xp.logical_or, terms)

    def not_(self, x: Array) -> Array:
        """Elementwise negation."""
        if _is_const(x):
            return not x
        return self.xp.logical_not(x)

    def implies(self, a: Array, b: Array) -> Array:
        """Elementwise implication."""
        return self.or_(self.not_(a), b)

    def min(self, a: Array, b: Array) -> Array:
        """Elementwise minimum."""
        if _is_const(a) and _is_const(b):
            return a if a <= b else b
        return self.xp.minimum(a, b)

    def max(self, a: Array, b: Array) -> Array:
        """Elementwise maximum."""
        if _is_const(a) and _is_const(b):
            return a if a >= b else b
        return self.xp.maximum(a, b)

    def cdiv(self, a: Array, k: int) -> Array:
        """Ceiling division by a positive constant."""
        return -((-a) // k)

    def floordiv(self, a: Array, k: int) -> Array:
        """Floor division by a positive constant."""
        return a // k

    def sum(self, xs: Sequence[Array]) -> Array:
        """Elementwise sum (constants are added as Python ints first)."""
        const = sum(x for x in xs if _is_const(x))
        terms = [x for x in xs if not _is_const(x)]
        if not terms:
            return const
        total = reduce(lambda a, b: a + b, terms)
        return total + const if const else total

    def to_int(self, b: Array) -> Array:
        """1 where b holds, else 0."""
        if _is_const(b):
            return 1 if b else 0
        return self.xp.where(b, 1, 0)

    def name(self, value: Array) -> Array:
        """Identity: naming only matters to the solver."""
        return value


def numpy_module() -> ModuleType:
    """numpy, or an ImportError that names the extra to install."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError(f"the array explorer needs numpy; {NUMPY_EXTRA}") from None
    return numpy


def numpy_ops() -> ArrayOps:
    """ArrayOps over numpy."""
    return ArrayOps(numpy_module())
