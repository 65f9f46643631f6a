"""Where a sweep's tasks run: a local process pool, or Ray (a local instance or an existing
cluster). Both run the same task (work.execute_batch: one configuration's jobs) and hand
each finished batch to `on_done` as it arrives; neither drops a job. A batch whose task
raises, outlives its time limit, or whose worker keeps dying is handed back as UNKNOWN
outcomes that say why."""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from checker.sweep.extras import require
from checker.sweep.grid import SweepJob
from checker.sweep.work import Outcome, execute_batch, failed
from model.core.errors import InputError

Batch = tuple[SweepJob, ...]
Task = Callable[[Batch], list[Outcome]]
OnDone = Callable[[Batch, list[Outcome]], None]
EXECUTORS = ("local", "ray")
TICK_S = 0.5
MAX_ATTEMPTS = 3  # a batch whose worker dies is run again, alone, up to this many times


def time_limit(batch: Batch) -> float:
    """Seconds after which a running batch is ended as timed out. A job may spend its
    timeout on the invariant proof and again on induction and BMC (jobs.run_bmc), and the
    explorer reads its own clock only between states: three timeouts each, plus slack."""
    return sum(3 * j.timeout_s + 10 for j in batch)


def _failed_all(batch: Batch, reason: str) -> list[Outcome]:
    return [failed(j, reason) for j in batch]


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]


@dataclass(frozen=True, slots=True)
class PoolHooks:
    """How the pool's workers start and how the pool is ended at once. The sweep passes
    the runner's own (checker/runner/pool.py:pool_hooks: workers die with the parent and
    leave Ctrl-C to it; ending terminates, then kills, the workers); they come in as
    arguments because the runner sits above this layer."""

    stop: Callable[[ProcessPoolExecutor], None]
    initializer: Callable[..., None] | None = None
    initargs: tuple[Any, ...] = ()


def run_local(batches: Sequence[Batch], workers: int, on_done: OnDone, hooks: PoolHooks,
              task: Task = execute_batch, tick: Callable[[], None] = lambda: None,
              limit: Callable[[Batch], float] = time_limit) -> None:
    """Run the batches on a pool of `workers` processes, at most `workers` at a time (so a
    dead worker's batches are known). When a worker dies the pool breaks; its batches run
    again one at a time, so that the one that kills its worker is found and, after
    MAX_ATTEMPTS, recorded as UNKNOWN. A batch over its time limit ends the pool (the
    only way to stop a running job) and is recorded as UNKNOWN; the others run again."""
    queue: deque[Batch] = deque(batches)
    suspects: deque[Batch] = deque()  # batches whose worker died: run alone
    attempts: dict[Batch, int] = {}
    inflight: dict[Future[list[Outcome]], tuple[Batch, float]] = {}

    def new_pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=workers, initializer=hooks.initializer,
                                   initargs=hooks.initargs)

    pool = new_pool()
    try:
        while queue or suspects or inflight:
            window = 1 if suspects else workers
            while len(inflight) < window and (suspects or queue):
                batch = suspects.popleft() if suspects else queue.popleft()
                inflight[pool.submit(task, batch)] = (batch, time.monotonic())
            finished, _ = wait(inflight, timeout=TICK_S, return_when=FIRST_COMPLETED)
            broken = False
            for fut in finished:
                batch, _ = inflight.pop(fut)
                try:
                    outcomes = fut.result()
                except BrokenProcessPool:
                    broken = True
                    inflight[fut] = (batch, 0.0)  # lost with the others, below
                except Exception as exc:  # e.g. an outcome that cannot be pickled
                    on_done(batch, _failed_all(batch, f"error: {_reason(exc)}"))
                else:
                    on_done(batch, outcomes)
            if broken:
                for batch, _ in inflight.values():
                    attempts[batch] = attempts.get(batch, 0) + 1
                    if attempts[batch] >= MAX_ATTEMPTS:
                        on_done(batch, _failed_all(
                            batch, f"worker process died {attempts[batch]} times running it"))
                    else:
                        suspects.append(batch)
                inflight.clear()
                hooks.stop(pool)
                pool = new_pool()
                continue
            now = time.monotonic()
            overdue = [f for f, (b, t0) in inflight.items() if now - t0 > limit(b)]
            if overdue:
                for fut in overdue:
                    batch, _ = inflight.pop(fut)
                    on_done(batch, _failed_all(
                        batch, f"timed out: ended after {limit(batch):.0f} s"))
                for batch, _ in inflight.values():
                    (suspects if batch in attempts else queue).appendleft(batch)
                inflight.clear()
                hooks.stop(pool)
                pool = new_pool()
            tick()
    except BaseException:
        hooks.stop(pool)
        raise
    pool.shutdown()


def start_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to the Ray cluster at `address`, or start Ray on this machine with
    `num_cpus` (None: all); no dashboard, and workers' logs stay in Ray's log folder.
    False, doing nothing, when this process is connected to a Ray already."""
    ray = require("ray")
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                               "logging_level": "warning"}
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise InputError(f"cannot reach the Ray cluster at {address}: "
                             f"{' '.join(str(exc).split())[:200]}; check --address") from None
    else:
        ray.init(num_cpus=num_cpus, **options)
    return True


def _check_reachable(address: str) -> None:
    """InputError at once when nothing listens at host:port: ray.init would retry for
    minutes before it gives up on a wrong address."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--address {address!r} is not host:port, ray://host:port or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise InputError(f"cannot reach the Ray cluster at {address}: "
                         f"{exc.strerror or exc}; check --address") from None


def run_ray(batches: Sequence[Batch], on_done: OnDone, address: str | None = None,
            num_cpus: int | None = None, task: Task = execute_batch,
            tick: Callable[[], None] = lambda: None, max_retries: int = MAX_ATTEMPTS - 1,
            limit: Callable[[Batch], float] = time_limit,
            stop: Callable[[], bool] = lambda: False) -> None:
    """Run the batches as Ray tasks, results taken as they finish (ray.wait). Ray starts
    locally with `num_cpus` unless it is running already or `address` names a cluster.
    Ray runs a task again when its worker dies (`max_retries`); a task that still fails,
    or outlives its time limit (then cancelled), is recorded as UNKNOWN. When `stop()`
    turns true the tasks still running are cancelled and it returns: a signal must not
    raise inside Ray's calls, which are C code (a SystemError, not an exception we see)."""
    ray = require("ray")
    started = start_ray(address, num_cpus)
    queue: deque[Batch] = deque(batches)
    inflight: dict[Any, tuple[Batch, float]] = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(task)
        # Two tasks per CPU keep every worker busy while results travel back, and bound
        # what waits in Ray's queues (a million-job grid is not submitted at once).
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        while (queue or inflight) and not stop():
            while queue and len(inflight) < window:
                batch = queue.popleft()
                inflight[remote.remote(batch)] = (batch, time.monotonic())
            refs = list(inflight)
            ready, rest = ray.wait(refs, num_returns=1, timeout=TICK_S)
            if ready and rest:
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                ready += more
            for ref in ready:
                batch, _ = inflight.pop(ref)
                try:
                    outcomes = ray.get(ref)
                except ray.exceptions.TaskCancelledError:
                    outcomes = _failed_all(batch, f"timed out: cancelled after "
                                                  f"{limit(batch):.0f} s")
                except ray.exceptions.WorkerCrashedError as exc:
                    outcomes = _failed_all(batch, f"worker died (Ray ran it "
                                                  f"{max_retries + 1} times): {_reason(exc)}")
                except ray.exceptions.RayError as exc:
                    outcomes = _failed_all(batch, f"ray: {_reason(exc)}")
                on_done(batch, outcomes)
            now = time.monotonic()
            for ref, (batch, t0) in list(inflight.items()):
                # Measured from submission: a queued task's wait counts too, which the
                # three-timeouts-plus-slack limit leaves room for.
                if now - t0 > 2 * limit(batch):
                    ray.cancel(ref, force=True)
                    inflight.pop(ref)
                    on_done(batch, _failed_all(
                        batch, f"timed out: cancelled after {2 * limit(batch):.0f} s"))
            tick()
    finally:
        for ref in inflight:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
