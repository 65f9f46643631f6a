"""`batchproof seeds [--write FILE]`: print or write the seed reproductions page
(checker/docs/seeds.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from checker.docs.seeds import PAGE, render_page


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `batchproof seeds`."""
    parser.add_argument("--write", metavar="FILE",
                        help=f"write the page to FILE (the repository keeps it at {PAGE})")


def run(args: argparse.Namespace) -> int:
    """Print the page, or write it to --write FILE."""
    page = render_page()
    if args.write:
        Path(args.write).write_text(page)
        print(f"wrote {args.write}")
    else:
        print(page, end="")
    return 0

