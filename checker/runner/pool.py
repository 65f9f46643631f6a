"""The process pools the commands share: `execute` runs checker jobs (check, worst),
`parallel_map` runs one function over independent work items (diff --ablate-all), and
`pool_hooks` gives a sweep's local pool the same workers and the same way of ending.

Every pool's workers die with the parent and leave Ctrl-C to it (stops.init_worker); a
SIGINT or SIGTERM ends the workers at once (stops.stop_pool) and raises Stopped with the
number of jobs finished.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import TYPE_CHECKING, Any, TypeVar

from checker.methods.jobs import Job, JobResult, run_batch
from checker.runner.stops import Stopped, ignore_stops, init_worker, stop_pool, stoppable
from checker.show.progress import Progress

if TYPE_CHECKING:  # imported by the sweep alone (its executors: about 25 ms of start-up)
    from checker.sweep.executors import PoolHooks

T = TypeVar("T")


def _label(jobs: list[Job]) -> str:
    return f"{jobs[0].engine} {jobs[0].config.name} ({len(jobs)} checks)"


def _batches(jobs: Sequence[Job]) -> list[list[int]]:
    """Jobs grouped by config and bounds (one invariant proof per config and process),
    largest group first."""
    groups: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(job.config.name + repr(job.config.bounds), []).append(i)
    return sorted(groups.values(), key=len, reverse=True)


def new_pool(workers: int) -> ProcessPoolExecutor:
    """A pool whose workers die with this process and leave Ctrl-C to it."""
    return ProcessPoolExecutor(max_workers=workers, initializer=init_worker,
                               initargs=(os.getpid(),))


def pool_hooks() -> PoolHooks:
    """The same worker start-up and ending for a sweep's own local pool."""
    from checker.sweep.executors import PoolHooks

    return PoolHooks(stop=stop_pool, initializer=init_worker, initargs=(os.getpid(),))


def execute(jobs: list[Job], workers: int, progress: Progress | None = None
            ) -> list[JobResult]:
    """Run jobs grouped by config, in this process when `workers` is 1 or there is one
    group, else on a pool of `workers` processes, reporting each finished batch to
    `progress`; the results in the order of `jobs`. Stopped on SIGINT / SIGTERM."""
    progress = progress or Progress(0, sys.stderr, show=False)
    batches = _batches(jobs)
    out: list[JobResult | None] = [None] * len(jobs)
    done = 0
    if workers == 1 or len(batches) == 1:
        try:
            with progress.ticking():
                for batch in batches:
                    label = _label([jobs[i] for i in batch])
                    progress.running(label)
                    for i, res in zip(batch, run_batch([jobs[i] for i in batch]),
                                      strict=True):
                        out[i] = res
                    done += len(batch)
                    progress.finished(len(batch), label)
        except KeyboardInterrupt:
            raise Stopped(signal.SIGINT, done) from None
        return [r for r in out if r is not None]
    with stoppable():
        pool = new_pool(workers)
        try:
            futures: dict[Future[list[JobResult]], list[int]] = {
                pool.submit(run_batch, [jobs[i] for i in b]): b for b in batches}
            order = list(futures)
            pending = set(order)
            while pending:
                # Pool workers take batches in submission order: the oldest unfinished
                # one is running.
                progress.running(_label([jobs[i] for i in futures[next(
                    f for f in order if f in pending)]]))
                finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in finished:
                    batch = futures[fut]
                    for i, res in zip(batch, fut.result(), strict=True):
                        out[i] = res
                    done += len(batch)
                    progress.finished(len(batch), _label([jobs[i] for i in batch]))
                progress.tick()
        except Stopped as stop:
            ignore_stops()
            stop_pool(pool)
            raise Stopped(stop.signum, done) from None
        except BaseException:
            ignore_stops()
            stop_pool(pool)
            raise
        pool.shutdown()
    return [r for r in out if r is not None]


def parallel_map(fn: Callable[..., T], work: Sequence[tuple[Any, ...]], workers: int
                 ) -> list[T]:
    """`fn(*item)` for every item, in order: in this process when `workers` is 1, else on
    a pool of at most `workers` processes that a SIGINT or SIGTERM ends at once."""
    if workers == 1 or len(work) <= 1:
        return [fn(*item) for item in work]
    with stoppable():
        pool = new_pool(min(workers, len(work)))
        try:
            futures = [pool.submit(fn, *item) for item in work]
            results = [f.result() for f in futures]
        except BaseException:
            ignore_stops()
            stop_pool(pool)
            raise
        pool.shutdown()
    return results
