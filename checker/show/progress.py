"""Progress of a long `batchproof check` on stderr: jobs done of total, the batch now
running (or the last one finished) and the time elapsed.

Shown only when the stream is a terminal, through tqdm (the `progress` extra): a CI log
gets nothing extra, and without tqdm installed `check` runs silently as before. tqdm over
rich because one bar is all `check` draws, and tqdm is one pure-Python package with no
dependencies where rich brings its own (pygments, markdown-it-py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self, TextIO

_FORMAT = "check {n_fmt}/{total_fmt} jobs |{bar:12}| {elapsed}{postfix}"


class BarLine:
    """A tqdm bar of jobs on a terminal, or nothing: every method is a no-op when it is not
    shown. `check`'s `Progress` and the sweep's (checker/sweep/progress.py) draw one."""

    def __init__(self, total: int, stream: TextIO, show: bool, bar_format: str,
                 **options: Any) -> None:
        """Show a bar of `total` jobs on `stream` in `bar_format` if `show`, the stream is a
        terminal and tqdm is installed; `options` go to tqdm."""
        self._bar: Any = None
        if not (show and total > 0 and _isatty(stream)):
            return
        try:
            from tqdm import tqdm
        except ImportError:  # the `progress` extra is optional: no bar, no warning
            return

        class Bar(tqdm):
            # No monitor thread: the pool forks its workers after the bar exists, and a
            # fork should copy no thread. `tick` does the redrawing instead.
            monitor_interval = 0

        self._bar = Bar(total=total, file=stream, leave=False, dynamic_ncols=True,
                        bar_format=bar_format, mininterval=0.5, **options)

    @property
    def shown(self) -> bool:
        """Whether anything is drawn."""
        return self._bar is not None

    def tick(self) -> None:
        """Redraw, so the elapsed time moves while a batch runs."""
        if self._bar is not None:
            self._bar.refresh()

    def close(self) -> None:
        """Erase the line (what the command prints follows)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Progress(BarLine):
    """`check`'s progress line, or nothing: every method is a no-op when it is not shown."""

    def __init__(self, total: int, stream: TextIO, show: bool = True) -> None:
        """Show a bar of `total` jobs on `stream` if `show`, the stream is a terminal and
        tqdm is installed."""
        self._now = ""
        self._last = ""
        super().__init__(total, stream, show, _FORMAT)

    def running(self, label: str) -> None:
        """`label` is the batch now running."""
        if self._bar is not None and label != self._now:
            self._now = label
            self._refresh()

    def finished(self, jobs: int, label: str) -> None:
        """A batch of `jobs` jobs named `label` finished."""
        if self._bar is not None:
            self._last = label
            if self._now == label:
                self._now = ""
            self._bar.update(jobs)
            self._refresh()

    @contextmanager
    def ticking(self, every_s: float = 1.0) -> Iterator[None]:
        """Tick from a background thread while the caller computes in this process (the
        main thread is then busy, often inside z3, which releases the GIL)."""
        if self._bar is None:
            yield
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                self.tick()
        thread = threading.Thread(target=loop, name="batchproof-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _refresh(self) -> None:
        parts = ([f"now: {self._now}"] if self._now else []) + (
            [f"last: {self._last}"] if self._last else [])
        self._bar.set_postfix_str(" · ".join(parts), refresh=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
