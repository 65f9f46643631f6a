"""Rule switches: an engine's forms of its rules as a frozen dataclass of booleans, set from
a workload's JSON `"rules"` object (model/<engine>/config.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from model.core.errors import InputError, shown

if TYPE_CHECKING:
    from model.core.engine import EngineModel

R = TypeVar("R")


def with_switches(rules: R, changes: Any, engine: str = "") -> R:
    """`rules` with the switches `changes` names set (a JSON object of booleans); an
    InputError naming the value and the switches otherwise. `engine` prefixes the
    messages ("mistralrs config 'rules' ...")."""
    names = [f.name for f in fields(rules)]  # type: ignore[arg-type]
    p = f"{engine} " if engine else ""
    if not isinstance(changes, Mapping):
        raise InputError(f"{p}config 'rules' must be an object of switch names, got "
                         f"{shown(changes)}; switches: {', '.join(names)}")
    for name, value in changes.items():
        if name not in names:
            raise InputError(f"unknown {p}rule switch {shown(name)}; switches: "
                             f"{', '.join(names)}")
        if not isinstance(value, bool):
            raise InputError(f"{p}rule switch {name} must be true or false, got "
                             f"{shown(value)}")
    return replace(rules, **dict(changes))  # type: ignore[type-var]


def changed_switches(rules: Any, base: Any) -> dict[str, bool]:
    """The switches of `rules` whose value differs from `base`'s (same rule set), by name."""
    theirs = asdict(base)
    return {k: v for k, v in asdict(rules).items() if theirs[k] != v}


def with_rules(out: dict[str, object], rules: Any, base: Any) -> dict[str, object]:
    """`out`, a config as workload JSON spells it, with under "rules" the switches of
    `rules` that differ from `base`, its version's (no "rules" when none does)."""
    changed = changed_switches(rules, base)
    if changed:
        out["rules"] = changed
    return out


@dataclass(frozen=True, slots=True)
class RuleVersions:
    """An engine's modelled versions, as the registry reads them (model/registry.py,
    `Versioned`): each a set of rule switches of its one rule set, which a config holds in
    its `rules` field. The engine names how to reach a version (`at_version`, the pinned
    one its ENGINE), how to set switches on its rules and where upstream changed each."""

    versions: Mapping[str, Any]
    pinned: str
    at_version: Callable[[str], EngineModel]
    set_switches: Callable[[Any, Mapping[str, bool]], Any]
    evidence_of: Callable[[str], str]

    def with_version(self, version: str) -> EngineModel:
        """The engine at `version` (a key of `versions`); the pinned one is ENGINE."""
        return self.at_version(version)

    def switches(self, cfg: Any) -> dict[str, bool]:
        """The rule switches a config runs, by name."""
        return asdict(cfg.rules)

    def with_switches(self, cfg: Any, changes: Mapping[str, bool]) -> Any:
        """`cfg` with some switches set (InputError for an unknown switch)."""
        return replace(cfg, rules=self.set_switches(cfg.rules, changes))

    def evidence(self, switch: str) -> str:
        """Where upstream changed the switch (or has its pinned form), and what each value
        does."""
        return self.evidence_of(switch)


def engine_at_version(engine: EngineModel, version: str,
                      parse_config: Callable[..., Any]) -> EngineModel:
    """`engine` named `<name>@<version>`, parsing configs with that version's switches
    (`parse_config(..., version=version)`)."""
    return replace(engine, name=f"{engine.name}@{version}", version=version,
                   parse_config=partial(parse_config, version=version))
