"""Several comparisons in one process, one after the other (a runner's `--mode` or
`--page-size` repeated): the real engine is imported once for them all."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def each_once(given: Sequence[T] | None, default: T) -> list[T]:
    """The values given, in their order, each once (`default` when none was given)."""
    return list(dict.fromkeys(given or [default]))


def in_turn(values: Sequence[T], run: Callable[[T], int]) -> int:
    """`run` on each value in turn, a blank line between their reports and stdout flushed
    after each (a log shows each report when it ends); the largest exit code."""
    codes = []
    for i, value in enumerate(values):
        if i:
            print()
        codes.append(run(value))
        sys.stdout.flush()
    return max(codes)
