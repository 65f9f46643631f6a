"""The sweep's progress line on stderr: jobs done of the total, how many failed (UNKNOWN),
the rate and the time left. Like `check`'s (checker/show/progress.py), it is drawn only on
a terminal and through tqdm (the `progress` extra; `sweep` and `ray` install it too); a CI
log gets the closing summary only. `check`'s bar names the running batch, which a sweep
of thousands of configurations has no use for, and has no failed count or rate."""

from __future__ import annotations

from typing import Any, TextIO

_FORMAT = ("sweep {n_fmt}/{total_fmt} jobs |{bar:12}| {rate_fmt}{postfix} "
           "{elapsed}<{remaining}")


class SweepProgress:
    """A progress bar of jobs, or nothing: every method is a no-op when not shown."""

    def __init__(self, total: int, stream: TextIO, show: bool = True) -> None:
        """Show a bar of `total` jobs on `stream` if `show`, the stream is a terminal and
        tqdm is installed."""
        self._bar: Any = None
        self.failed = 0
        if not (show and total > 0 and _isatty(stream)):
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return

        class Bar(tqdm):
            # No monitor thread: the pool forks its workers after the bar exists.
            monitor_interval = 0

        self._bar = Bar(total=total, file=stream, leave=False, dynamic_ncols=True,
                        bar_format=_FORMAT, unit="job", mininterval=0.5)
        self._bar.set_postfix_str("0 failed", refresh=False)

    @property
    def shown(self) -> bool:
        """Whether anything is drawn."""
        return self._bar is not None

    def done(self, jobs: int, failed: int) -> None:
        """`jobs` more jobs finished, `failed` of them UNKNOWN."""
        self.failed += failed
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.failed} failed", refresh=False)
            self._bar.update(jobs)

    def tick(self) -> None:
        """Redraw, so the elapsed time moves while a batch runs."""
        if self._bar is not None:
            self._bar.refresh()

    def close(self) -> None:
        """Erase the line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> SweepProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
