"""Load `manifest.toml`: named configurations and expected verdicts with evidence."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from model.errors import InputError
from model.state import ENGINE_VLLM_V1, Config
from model.workload import parse_config

MANIFEST = Path(__file__).with_name("manifest.toml")


@dataclass(frozen=True, slots=True)
class NamedConfig:
    """A configuration family from the manifest, with the bounds of its queries."""

    name: str
    description: str
    config: Config
    ranges: tuple[tuple[str, int, int], ...]
    validated: bool
    bounds: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """One expected verdict: (engine, property, config) -> verdict, with its evidence."""

    engine: str
    property: str
    params: tuple[tuple[str, int], ...]
    config: str
    expected: str
    evidence: str
    suite: str
    bounds: tuple[tuple[str, int], ...] = ()

    @property
    def slug(self) -> str:
        """File stem of this entry's counterexample."""
        return f"{self.property}__{self.config}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """All configs and entries."""

    configs: dict[str, NamedConfig]
    entries: tuple[Entry, ...]


def _named(name: str, raw: dict[str, Any]) -> NamedConfig:
    ranges = tuple((k, int(v[0]), int(v[1])) for k, v in raw.get("ranges", {}).items())
    return NamedConfig(name=name, description=raw.get("description", ""),
                       config=parse_config(raw.get("config", {})), ranges=ranges,
                       validated=bool(raw.get("validated", True)),
                       bounds=tuple(raw.get("bounds", {}).items()))


def load(path: Path = MANIFEST) -> Manifest:
    """Parse the manifest; every entry is expanded to one row per config."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read manifest {path}: {exc}") from None
    configs = {name: _named(name, raw) for name, raw in doc.get("configs", {}).items()}
    entries = []
    for raw in doc.get("entry", []):
        for cfg_name in raw["configs"]:
            if cfg_name not in configs:
                raise InputError(f"manifest entry {raw['property']} names unknown config "
                                 f"{cfg_name!r}")
            entries.append(Entry(
                engine=raw.get("engine", ENGINE_VLLM_V1), property=raw["property"],
                params=tuple(sorted(raw.get("params", {}).items())), config=cfg_name,
                expected=raw["expected"], evidence=raw["evidence"],
                suite=raw.get("suite", "default"),
                bounds=tuple(raw.get("bounds", {}).items())))
    return Manifest(configs=configs, entries=tuple(entries))


def custom_config(name: str, cfg: Config, base: NamedConfig | None = None,
                  validated: bool = True) -> NamedConfig:
    """A user's configuration (flags or file) with the bounds of `base` if given."""
    bounds = base.bounds if base is not None else ()
    return NamedConfig(name=name, description="user configuration", config=cfg, ranges=(),
                       validated=validated, bounds=bounds)


def with_bounds(nc: NamedConfig, **overrides: int | None) -> NamedConfig:
    """`nc` with some bounds overridden (None keeps the manifest's)."""
    bounds = dict(nc.bounds)
    bounds.update({k: v for k, v in overrides.items() if v is not None})
    return replace(nc, bounds=tuple(bounds.items()))
