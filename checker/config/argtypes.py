"""Reading one number from a command-line value, shared by the argparse types of the config
flags (checker/config/flags.py, model_kind.py, serve_args.py): each type says how to read
the text, which values it keeps and what its two errors say; this module does the reading,
so the try/except and the range test are written once."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


def read_number(text: str, cast: Callable[[str], N], within: Callable[[N], bool],
                not_a_number: str, outside: str) -> N:
    """`cast(text)` when it reads and `within` keeps it. argparse.ArgumentTypeError with
    `not_a_number` when `cast` raises ValueError, with `outside` when `within` refuses the
    value (argparse prints either as the one-line usage error, exit 2)."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(not_a_number) from None
    if not within(value):
        raise argparse.ArgumentTypeError(outside)
    return value
