"""Modules that may be absent from an install: an engine room without theorems, a command
or a property module left out of a trimmed tree."""

from __future__ import annotations

import importlib
from types import ModuleType


def optional_module(name: str) -> ModuleType | None:
    """The module `name`, or None when that module itself does not exist; an import that
    fails inside it (a missing dependency, a typo) still raises."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None
