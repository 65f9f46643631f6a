"""`batchproof seeds [--write FILE]`: print or write the seed reproductions page
(checker/docs/seeds.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from checker.docs.seeds import PAGE, render_page
from model.core.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `batchproof seeds`."""
    parser.add_argument("--write", metavar="FILE",
                        help=f"write the page to FILE (the repository keeps it at {PAGE})")


def run(args: argparse.Namespace) -> int:
    """Print the page, or write it to --write FILE."""
    if args.write:
        _check_writable(args.write)
    page = render_page()
    if args.write:
        try:
            Path(args.write).write_text(page)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot write --write {args.write}: "
                             f"{getattr(exc, 'strerror', None) or exc}; give a path you "
                             "can write") from None
        print(f"wrote {args.write}")
    else:
        print(page, end="")
    return 0


def _check_writable(path: str) -> None:
    """Fail before the page is computed when `path` cannot be written: an InputError
    naming the path and the fix (an existing file is left as it is)."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"cannot write --write {path}: it is a folder; give a file path")
    if not target.parent.is_dir():
        raise InputError(f"cannot write --write {path}: the folder {target.parent} does not "
                         "exist; create it or give another path")

