"""What the benchmarks share: a subprocess timed in wall clock and in its CPU seconds (the
machine is shared, and CPU seconds are the steadier figure), the line that says where and
when a table was measured, and the page whose table is replaced between two markers
(--write). A benchmark runs as `python bench/NAME.py`, with bench/ on its path, and imports
this as `timing`."""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import z3


def timed_run(argv: Sequence[str], cwd: Path
              ) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds, CPU seconds (user + system) of the child, and its result (output
    captured as text, any exit status)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


def write_between(page: Path, begin: str, end: str, text: str) -> None:
    """Replace what `page` holds between the markers `begin` and `end` by `text` (on its
    own lines)."""
    old = page.read_text()
    a, b = old.index(begin) + len(begin), old.index(end)
    page.write_text(old[:a] + "\n" + text + "\n" + old[b:])


def table_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser, described by the first line of its module `doc`, with
    --write PAGE (`write_between` the page's markers)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--write", type=Path, help="replace the table between the markers")
    return ap


def measured_by(command: str, load_before: float, load_after: float) -> str:
    """The line above a benchmark's table: the command, when (UTC), the platform, cores and
    z3 version, and the 1-minute load average before and after the run."""
    return (f"Measured by `{command}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.platform()}, "
            f"{os.cpu_count()} cores, z3 {z3.get_version_string()}; load average (1 min) "
            f"{load_before:.1f} before and {load_after:.1f} after.")
