"""Values derived from a config, kept per config: a frozen config hashes, and the explorers
derive the same value from it at every transition."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

C = TypeVar("C")
R = TypeVar("R")


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
