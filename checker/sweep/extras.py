"""The sweep's optional dependencies. The core of batchproof imports without them; a sweep
that needs one it lacks stops before any job runs, with one line naming the extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from model.core.errors import InputError

# module -> (what it is for, the extra that installs it)
_WHY: dict[str, tuple[str, str]] = {
    "pyarrow": ("writes the rows as Parquet", "sweep"),
    "matplotlib": ("draws the heatmaps (or pass --no-pictures)", "sweep"),
    "ray": ("runs the jobs on Ray (--executor ray)", "ray"),
}


def require(module: str) -> ModuleType:
    """Import `module`, or raise the InputError that names the extra installing it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        why, extra = _WHY[module]
        raise InputError(f"batchproof sweep {why} with {module}, which is not installed; "
                         f"install it with: pip install -e '.[{extra}]'") from None


def available(module: str) -> bool:
    """Whether `module` imports."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
