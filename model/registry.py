"""The engine registry: name -> EngineModel, each engine's module loaded on first use.

The one module that knows every engine room; it sits above them (docs/architecture.md),
so model/core/ never names an engine."""

from __future__ import annotations

import importlib

from model.core.engine import EngineModel, ReferenceScheduler
from model.core.errors import InputError

# name -> module that defines ENGINE: EngineModel
_MODULES: dict[str, str] = {
    "vllm-v1": "model.vllm.engine",
    "sglang": "model.sglang.engine",
    "mistralrs": "model.mistralrs.engine",
    "static": "model.baselines.static",
    "dynamic": "model.baselines.dynamic",
}

__all__ = ["EngineModel", "ReferenceScheduler", "get", "names"]


def names() -> tuple[str, ...]:
    """Every engine name, in registry order."""
    return tuple(_MODULES)


def get(name: str) -> EngineModel:
    """The engine called `name`; InputError naming the supported ones otherwise."""
    if name not in _MODULES:
        raise InputError(f"unknown engine {name!r}; supported engines: {', '.join(_MODULES)}")
    return importlib.import_module(_MODULES[name]).ENGINE
