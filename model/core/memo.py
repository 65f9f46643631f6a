"""What the explorers would otherwise redo at every transition: values derived from a
config, kept per config (a frozen config hashes), and copies of a request's record."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields
from typing import TypeVar

C = TypeVar("C")
R = TypeVar("R")
T = TypeVar("T")


def per_config(derive: Callable[[C], R]) -> Callable[[C], R]:
    """`derive`, its value kept per config (at most 1024); a config holding an unhashable
    value is derived anew each time. `derive` must read nothing but the config."""
    kept = functools.lru_cache(maxsize=1024)(derive)

    @functools.wraps(derive)
    def derived(cfg: C) -> R:
        try:
            return kept(cfg)
        except TypeError:  # unhashable: not kept
            return derive(cfg)
    derived.cache_clear = kept.cache_clear  # type: ignore[attr-defined]
    return derived


def fields_copied(record: T) -> T:
    """A copy of a dataclass instance whose fields are all immutable, field by field:
    `copy.copy`'s generic path for a slotted class is several times slower, and an
    explorer copies every request of a scheduler per transition."""
    cls = type(record)
    twin = object.__new__(cls)
    for name in _field_names(cls):
        setattr(twin, name, getattr(record, name))
    return twin


class CopiedByFields:
    """A mixin for a slotted dataclass whose fields are all immutable: `copy.deepcopy`
    copies it field by field (`fields_copied`), since the explorers copy a scheduler, and
    so every request and block it holds, per transition. `deepcopy` finds an instance
    already copied in its memo before it asks this, so one held in two lists (a request
    in two queues, a block shared by tables and the pool) stays one in the copy."""

    __slots__ = ()

    def __deepcopy__(self: T, memo: dict[int, object]) -> T:
        """A copy, field by field (`fields_copied`)."""
        return fields_copied(self)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))
