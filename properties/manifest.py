"""Load the manifest: named configurations and expected verdicts with evidence.

Each engine room has one file, `properties/manifests/<folder>.toml` (vLLM V1's is
vllm_v1.toml, the two batching baselines share baselines.toml); its top-level
`engine = "..."` is the default engine of its configs and entries (a config's fields are
parsed by that engine's `parse_config`). A file without it is vLLM V1's."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from model import registry as engines
from model.core.errors import InputError
from model.core.types import DEFAULT_ENGINE

MANIFESTS = Path(__file__).with_name("manifests")
MANIFEST = MANIFESTS / "vllm_v1.toml"


@dataclass(frozen=True, slots=True)
class NamedConfig:
    """A configuration family from the manifest, with the bounds of its queries."""

    name: str
    description: str
    config: Any  # the engine's Config
    ranges: tuple[tuple[str, int, int], ...]
    validated: bool
    bounds: tuple[tuple[str, int], ...]
    engine: str = DEFAULT_ENGINE
    # The bounded search `check --method auto` runs on this config's entries once no
    # proof decided them: "bmc", or "explore" where bench/suite_methods.py measured the
    # explorer faster over the config's entries.
    bounded_method: str = "bmc"


BOUNDED_METHODS = ("bmc", "explore")


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
    methods: tuple[str, ...] = ("bmc", "explore")  # which methods the entry is checked by

    @property
    def slug(self) -> str:
        """File stem of this entry's counterexample."""
        return f"{self.property}__{self.config}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """All configs and entries."""

    configs: dict[str, NamedConfig]
    entries: tuple[Entry, ...]


def _named(name: str, raw: dict[str, Any], engine: str) -> NamedConfig:
    engine = raw.get("engine", engine)
    ranges = tuple((k, int(v[0]), int(v[1])) for k, v in raw.get("ranges", {}).items())
    bounded = raw.get("bounded_method", "bmc")
    if bounded not in BOUNDED_METHODS:
        raise InputError(f"manifest config {name!r}: bounded_method {bounded!r} is not one "
                         f"of {', '.join(BOUNDED_METHODS)}")
    return NamedConfig(name=name, description=raw.get("description", ""),
                       config=engines.get(engine).parse_config(raw.get("config", {})),
                       ranges=ranges, validated=bool(raw.get("validated", True)),
                       bounds=tuple(raw.get("bounds", {}).items()), engine=engine,
                       bounded_method=bounded)


def manifest_files() -> tuple[Path, ...]:
    """vLLM V1's manifest, then every other engine's, by file name."""
    return (MANIFEST, *sorted(p for p in MANIFESTS.glob("*.toml") if p != MANIFEST))


def load(path: Path | None = None) -> Manifest:
    """Parse the manifest (one file, or all of `manifest_files()`); every entry is
    expanded to one row per config."""
    configs: dict[str, NamedConfig] = {}
    entries: list[Entry] = []
    for file in (path,) if path is not None else manifest_files():
        part = _load_file(file)
        clash = sorted(set(configs) & set(part.configs))
        if clash:
            raise InputError(f"manifest {file}: config {clash[0]!r} is defined twice; "
                             "give it another name")
        configs.update(part.configs)
        entries += part.entries
    return Manifest(configs=configs, entries=tuple(entries))


def _load_file(path: Path) -> Manifest:
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read manifest {path}: {exc}") from None
    default_engine = doc.get("engine", DEFAULT_ENGINE)
    configs = {name: _named(name, raw, default_engine)
               for name, raw in doc.get("configs", {}).items()}
    entries = []
    for raw in doc.get("entry", []):
        for cfg_name in raw["configs"]:
            if cfg_name not in configs:
                raise InputError(f"manifest entry {raw['property']} names unknown config "
                                 f"{cfg_name!r}")
            entries.append(Entry(
                engine=raw.get("engine", default_engine), property=raw["property"],
                params=tuple(sorted(raw.get("params", {}).items())), config=cfg_name,
                expected=raw["expected"], evidence=raw["evidence"],
                suite=raw.get("suite", "default"),
                bounds=tuple(raw.get("bounds", {}).items()),
                methods=tuple(raw.get("methods", ("bmc", "explore")))))
    return Manifest(configs=configs, entries=tuple(entries))


def custom_config(name: str, cfg: Any, base: NamedConfig | None = None,
                  validated: bool = True, engine: str = DEFAULT_ENGINE) -> NamedConfig:
    """A user's configuration (flags or file) with the bounds of `base` if given."""
    bounds = base.bounds if base is not None else ()
    return NamedConfig(name=name, description="user configuration", config=cfg, ranges=(),
                       validated=validated, bounds=bounds, engine=engine)


def with_bounds(nc: NamedConfig, **overrides: int | None) -> NamedConfig:
    """`nc` with some bounds overridden (None keeps the manifest's)."""
    bounds = dict(nc.bounds)
    bounds.update({k: v for k, v in overrides.items() if v is not None})
    return replace(nc, bounds=tuple(bounds.items()))
