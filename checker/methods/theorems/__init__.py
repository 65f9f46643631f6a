"""Closed-form theorems per engine, proved for all sizes (one module per engine room,
named by the engine's `folder`: vllm_v1.py, sglang.py). Each module defines THEOREMS:
property name -> proof attempt taking a time limit in seconds."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from model.core.engine import EngineModel


@dataclass(frozen=True, slots=True)
class TheoremResult:
    """Proved, or not (with the failing obligation)."""

    proved: bool
    seconds: float
    detail: str


Theorem = Callable[[float], TheoremResult]


def for_engine(engine: EngineModel) -> Mapping[str, Theorem]:
    """The engine's theorems (none when its room has no theorem module)."""
    module = f"{__name__}.{engine.folder}"
    try:
        return importlib.import_module(module).THEOREMS
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return {}
