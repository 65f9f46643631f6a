"""The engine registry: name -> EngineModel, each engine's module loaded on first use."""

from __future__ import annotations

import importlib

from model.engines.base import EngineModel, ReferenceScheduler
from model.errors import InputError

# name -> module that defines ENGINE: EngineModel
_MODULES: dict[str, str] = {
    "vllm-v1": "model.engines.vllm_v1",
    "sglang": "model.engines.sglang",
    "mistralrs": "model.engines.mistralrs",
    "static": "model.engines.static",
    "dynamic": "model.engines.dynamic",
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
