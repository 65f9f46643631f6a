"""Whether a real engine's scheduler imports here, and if not why: one answer for every
driver (`vllm_real`, `sglang_real`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable


def unavailable_reason(package: str, load: Callable[[], object], hint: str) -> str | None:
    """None when `package` is installed and `load()` (the driver's import of its classes)
    succeeds, else why not, followed by `hint` (the fix)."""
    if importlib.util.find_spec(package) is None:
        return f"{package} is not installed. {hint}"
    try:
        load()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
        return f"{package} does not import ({type(exc).__name__}: {exc}). {hint}"
    return None
