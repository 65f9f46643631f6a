"""Running a sweep's batches: on the local process pool or on Ray, stopped by SIGINT or
SIGTERM with the finished rows kept (docs/sweeps.md). `batchproof sweep` says what to run
and what to do with each finished batch; this module runs them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from checker.runner.pool import pool_hooks
from checker.runner.stops import Stopped, ignore_stops, noted_stops, stoppable
from checker.sweep import executors

RAY = "ray"  # else the local pool (executors.EXECUTORS)


def run_batches(batches: Sequence[executors.Batch], executor: str, workers: int,
                on_done: executors.OnDone, tick: Callable[[], None]) -> Stopped | None:
    """Run every batch on `executor` ("local": a pool of `workers` processes; "ray": the
    Ray cluster), calling `on_done` with each batch's outcomes as it finishes and `tick` while
    waiting. Returns the stop that ended the run early (SIGINT or SIGTERM; the batches
    finished before it have been passed to `on_done`), or None when every batch ran."""
    try:
        if executor == RAY:
            # Ray's client is not interruptible from a signal handler: the stop is noted
            # and the executor polls it between its calls into Ray.
            with noted_stops() as signals:
                executors.run_ray(batches, on_done, tick=tick, stop=lambda: bool(signals))
            return Stopped(signals[0]) if signals else None
        with stoppable():
            executors.run_local(batches, workers, on_done, pool_hooks(), tick=tick)
        return None
    except Stopped as stop:
        ignore_stops()
        return stop
