"""What the benchmarks share: a subprocess timed in wall clock and in its CPU seconds (the
machine is shared, and CPU seconds are the steadier figure), and a page whose table is
replaced between two markers. A benchmark runs as `python bench/NAME.py`, with bench/ on
its path, and imports this as `timing`."""

from __future__ import annotations

import resource
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


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
