"""An engine's rule state as columns: every leaf of the state dataclass (walked as
checker/methods/symbolic.py's `fresh_state` walks it) is one column of a frontier.

A leaf is named by its path from the state: `("free_blocks",)`, `("slots", 2, "status")`,
`("slots", 0, "table", 3)`, `("pool", 1, "ref_cnt")`. The `step` counter is not a leaf: every
state of one breadth-first layer has taken the same number of steps, so it stays a Python
int. Leaves under `slots` belong to a request slot (the rules' fixed slots, in arrival
order); every other leaf is global.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Leaf:
    """One leaf of the state: its path, its value in the initial state, and whether it is
    a bool (the rules compare bools with bools)."""

    path: Path
    initial: int
    is_bool: bool

    @property
    def slot(self) -> int | None:
        """The request slot the leaf belongs to, None for a global leaf."""
        if len(self.path) >= 2 and self.path[0] == "slots":
            return int(self.path[1])
        return None

    @property
    def field(self) -> Path:
        """The path inside its slot (the same for every slot), or the whole path."""
        return self.path[2:] if self.slot is not None else self.path

    @property
    def name(self) -> str:
        """The path as z3 constants and messages spell it: `slots.2.status`."""
        return ".".join(str(p) for p in self.path)


def _walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if is_dataclass(value):
        for f in fields(value):
            if f.name != "step":
                yield from _walk(getattr(value, f.name), (*path, f.name))
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            yield from _walk(v, (*path, i))
    else:
        yield path, value


def leaves_of(state: Any) -> tuple[Leaf, ...]:
    """Every leaf of a concrete state, in walk order."""
    out = []
    for path, value in _walk(state, ()):
        if not isinstance(value, (bool, int)):
            raise TypeError(f"state leaf {'.'.join(map(str, path))} is {value!r}, not an int "
                            "or bool: the array explorer needs a concrete initial state")
        out.append(Leaf(path, int(value), isinstance(value, bool)))
    return tuple(out)


def values_of(state: Any) -> dict[Path, Any]:
    """Leaf path -> value, for a state whose leaves are ints, bools, arrays or z3 terms."""
    return dict(_walk(state, ()))


def build(template: Any, value: Callable[[Path], Any], step: int) -> Any:
    """A state shaped like `template` whose leaf at path p is `value(p)` and whose step
    counter is `step`."""
    return _build(template, value, step, ())


def _build(template: Any, value: Callable[[Path], Any], step: int, path: Path) -> Any:
    if is_dataclass(template):
        return replace(template, **{
            f.name: step if f.name == "step" else _build(getattr(template, f.name), value,
                                                         step, (*path, f.name))
            for f in fields(template)})
    if isinstance(template, tuple):
        return tuple(_build(v, value, step, (*path, i)) for i, v in enumerate(template))
    return value(path)


def slot_fields(leaves: Sequence[Leaf]) -> tuple[Path, ...]:
    """The distinct in-slot paths, in walk order."""
    seen: dict[Path, None] = {}
    for leaf in leaves:
        if leaf.slot is not None:
            seen.setdefault(leaf.field, None)
    return tuple(seen)


def by_path(leaves: Sequence[Leaf]) -> Mapping[Path, Leaf]:
    """Path -> leaf."""
    return {leaf.path: leaf for leaf in leaves}


def status_fields(leaves: Sequence[Leaf]) -> tuple[Path, ...]:
    """The in-slot fields named `status` (a request's lifecycle state: one per engine
    state, so one per side of diff's product), in walk order: what slot retirement
    reads."""
    return tuple(f for f in slot_fields(leaves) if f and f[-1] == "status")
