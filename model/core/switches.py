"""Rule switches: an engine's forms of its rules as a frozen dataclass of booleans, set from
a workload's JSON `"rules"` object (model/<engine>/config.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, TypeVar

from model.core.errors import InputError, shown

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
