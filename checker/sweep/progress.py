"""The sweep's progress line on stderr: jobs done of the total, how many failed (UNKNOWN),
the rate and the time left. Like `check`'s (checker/show/progress.py), it is drawn only on
a terminal and through tqdm (the `progress` extra; `sweep` and `ray` install it too); a CI
log gets the closing summary only. `check`'s bar names the running batch, which a sweep
of thousands of configurations has no use for, and has no failed count or rate."""

from __future__ import annotations

from typing import TextIO

from checker.show.progress import BarLine

_FORMAT = ("sweep {n_fmt}/{total_fmt} jobs |{bar:12}| {rate_fmt}{postfix} "
           "{elapsed}<{remaining}")


class SweepProgress(BarLine):
    """A progress bar of jobs, or nothing: every method is a no-op when not shown."""

    def __init__(self, total: int, stream: TextIO, show: bool = True) -> None:
        """Show a bar of `total` jobs on `stream` if `show`, the stream is a terminal and
        tqdm is installed."""
        self.failed = 0
        super().__init__(total, stream, show, _FORMAT, unit="job")
        if self._bar is not None:
            self._bar.set_postfix_str("0 failed", refresh=False)

    def done(self, jobs: int, failed: int) -> None:
        """`jobs` more jobs finished, `failed` of them UNKNOWN."""
        self.failed += failed
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.failed} failed", refresh=False)
            self._bar.update(jobs)
