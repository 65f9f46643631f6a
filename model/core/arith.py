"""Integer arithmetic the reference schedulers share."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as vLLM's `cdiv` and Rust's `usize::div_ceil` compute it for the
    non-negative ints the schedulers count blocks with."""
    return -(-a // b)
