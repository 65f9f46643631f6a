"""The engine registry: name -> EngineModel, each engine's module loaded on first use.

The one module that knows every engine room; it sits above them (docs/architecture.md),
so model/core/ never names an engine.

A name may carry a version, `NAME@VERSION` (`mistralrs@v0.8.22`): an engine that models
several versions puts a `Versioned` object in `EngineModel.extra["versions"]`, and the
bare name stays the pinned (newest modelled) version."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, cast

from model.core.engine import EngineModel, ReferenceScheduler
from model.core.errors import InputError

# name -> module that defines ENGINE: EngineModel
_MODULES: dict[str, str] = {
    "vllm-v1": "model.vllm.engine",
    "vllm-v0": "model.vllm_v0.engine",
    "sglang": "model.sglang.engine",
    "mistralrs": "model.mistralrs.engine",
    "static": "model.baselines.static",
    "dynamic": "model.baselines.dynamic",
}

VERSION_SEPARATOR = "@"

__all__ = ["EngineModel", "ReferenceScheduler", "Versioned", "base_name", "get", "names",
           "versioned", "versions"]


class Versioned(Protocol):
    """An engine's modelled versions: each a set of switches of its one rule set."""

    @property
    def versions(self) -> Mapping[str, Any]:
        """Version name -> the rule switches of that version (oldest first)."""

    @property
    def pinned(self) -> str:
        """The version the bare engine name selects."""

    def with_version(self, version: str) -> EngineModel:
        """The engine at a version of `versions`."""

    def switches(self, cfg: Any) -> Mapping[str, bool]:
        """The switches a config of the engine runs, by name."""

    def with_switches(self, cfg: Any, changes: Mapping[str, bool]) -> Any:
        """The config with some switches set."""

    def evidence(self, switch: str) -> str:
        """Where upstream changed a switch."""


def names() -> tuple[str, ...]:
    """Every engine name, in registry order."""
    return tuple(_MODULES)


def base_name(name: str) -> str:
    """The engine name without its version: `mistralrs@v0.8.22` -> `mistralrs`."""
    return name.partition(VERSION_SEPARATOR)[0]


def get(name: str) -> EngineModel:
    """The engine called `name`, optionally `NAME@VERSION`; InputError naming the supported
    engines (or the engine's known versions) otherwise."""
    base, separator, version = name.partition(VERSION_SEPARATOR)
    if base not in _MODULES:
        raise InputError(f"unknown engine {name!r}; supported engines: {', '.join(_MODULES)}")
    engine: EngineModel = importlib.import_module(_MODULES[base]).ENGINE
    if not separator:
        return engine
    modelled = versioned(engine)
    if modelled is None:
        raise InputError(f"engine {base} models one version ({engine.version}); drop "
                         f"'{VERSION_SEPARATOR}{version}'")
    if version not in modelled.versions:
        raise InputError(f"unknown {base} version {version!r}; known versions: "
                         f"{', '.join(modelled.versions)}")
    return modelled.with_version(version)


def versioned(engine: EngineModel) -> Versioned | None:
    """The engine's modelled versions, or None when it models one."""
    found = (engine.extra or {}).get("versions")
    return None if found is None else cast(Versioned, found)


def versions(name: str) -> tuple[str, ...]:
    """The versions `NAME@VERSION` accepts for an engine (empty: only the bare name)."""
    modelled = versioned(get(base_name(name)))
    return tuple(modelled.versions) if modelled is not None else ()
