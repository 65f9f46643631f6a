"""Stopping a run: SIGINT and SIGTERM end the pool's workers instead of waiting for them,
workers die with their parent, and `batchproof ... | head` ends quietly.

Exit codes of a stopped run are 128 + the signal (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from types import FrameType

INTERRUPTED = 128 + signal.SIGINT  # the exit code of a run ended by Ctrl-C


class Stopped(Exception):
    """SIGINT or SIGTERM arrived while the jobs ran; `done` of them had finished."""

    def __init__(self, signum: int, done: int = 0) -> None:
        super().__init__(signum, done)
        self.signum = signum
        self.done = done

    @property
    def name(self) -> str:
        """The signal's name (SIGINT, SIGTERM)."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal, as a shell reports a process the signal ended."""
        return 128 + self.signum


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


def in_main_thread() -> bool:
    """Signal handlers can only be set from the main thread."""
    return threading.current_thread() is threading.main_thread()


@contextmanager
def stoppable() -> Iterator[None]:
    """While jobs run in a pool: SIGINT and SIGTERM raise Stopped in the main thread, so
    the pool is ended instead of waited for, and SIGPIPE is ignored: when a worker dies,
    the pool's feeder thread may still write to its pipe, and under main's SIGPIPE=SIG_DFL
    (for `| head`) that write would end this process silently."""
    if not in_main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGINT, signal.SIGTERM)}
    old[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextmanager
def noted_stops() -> Iterator[list[int]]:
    """While Ray runs the jobs: SIGINT and SIGTERM are noted in the list, not raised (the
    executor polls it between its calls into Ray)."""
    noted: list[int] = []
    if not in_main_thread():
        yield noted
        return
    old = {s: signal.signal(s, lambda signum, _frame: noted.append(signum))
           for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield noted
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextmanager
def quiet_broken_pipe(restore: bool) -> Iterator[None]:
    """`batchproof ... | head` ends quietly: SIGPIPE's default action while a command
    runs. With `restore` (called in-process with an argv: tests, a library user) the
    caller's handler comes back afterwards, so that a later write to a dead worker's pipe
    raises in that process instead of ending it silently."""
    old = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        yield
    finally:
        if restore:
            signal.signal(signal.SIGPIPE, old)


def ignore_stops() -> None:
    """A second Ctrl-C must not interrupt the ending of the pool (`stoppable` restores
    the handlers after)."""
    if in_main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def init_worker(parent: int) -> None:
    """In each worker process: die with the parent, and leave Ctrl-C to it."""
    # A Ctrl-C reaches the whole process group; the parent alone decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Forked from a parent whose SIGTERM raises Stopped: a worker must die at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        # A SIGKILL of the parent runs no Python code, so only the kernel can end us then.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (SIGTERM, then SIGKILL)."""
    # ProcessPoolExecutor has no public way to end running workers before Python 3.14
    # (terminate_workers); shutdown alone waits for, or abandons, the running jobs.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    # The pool's feeder thread may still write to a dead worker's pipe; under main's
    # SIGPIPE=SIG_DFL (for `| head`) that write would kill this process silently.
    old_pipe = signal.signal(signal.SIGPIPE, signal.SIG_IGN) if in_main_thread() else None
    try:
        for p in processes:
            p.terminate()
        deadline = time.monotonic() + 5.0
        for p in processes:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)
        # Every worker is gone, so this no longer waits for a job: it joins the pool's
        # threads, which see the broken pool and end.
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        if old_pipe is not None:
            signal.signal(signal.SIGPIPE, old_pipe)
