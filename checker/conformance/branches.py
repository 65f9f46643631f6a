"""Which branches of vLLM's real scheduler a batch of workloads reaches.

Measured on the real code: while `run_real_vllm` runs, a `sys.settrace` line tracer
records the lines executed in the vLLM files the branches name (`scheduler.py`,
`kv_cache_manager.py`, `sched/utils.py`; with prefix caching also `block_pool.py` and
`single_type_kv_cache_manager.py`; with async scheduling also `async_scheduler.py`; no
coverage.py needed). Each branch of the modelled scope is named by the source line that
only that branch executes, found by text (an anchor line, then the first code line, not a
comment, at or after it containing `target`), so the table survives line moves within the
pinned version and fails loudly if the text is gone.
Branches marked unreachable cannot be taken in the modelled scope (the reason is given)
and are reported, not required.

Two refinements for what a line alone cannot tell:
- `context="hit"`: the line counts only when executed inside an `allocate_slots` call
  that adopts a prefix hit (e.g. the full-sequence check refusing a request with a hit);
  `context="update"`: only inside `update_from_output` (e.g. a block cached when an async
  output lands);
- `event`: a condition on values, not on lines (e.g. the num_tokens - 1 cap cutting a
  cached block off a hit): a run feature of `generate.PREFIX_RUN_FEATURES` or
  `generate.ASYNC_RUN_FEATURES`, read from the records' extra facts or noted on the real
  engine by the driver's probes (`vllm_real._CacheProbe`, `vllm_real._AsyncProbe`); the
  line is where upstream decides it.

The branches are data, the table checker/conformance/branches.toml. `BRANCH_SETS` groups
them: `base` (every mode), `prefix` (prefix caching on), `async` (the AsyncScheduler) and
`async+prefix` (both). A later set may restate a branch of an earlier one under the same
name (`branches_for`): `async` does so for the running loop's zero-token skip, which the
max_model_len cap makes reachable once outputs are in flight, and for its input-budget
break, whose unreachability argument it extends.
"""

from __future__ import annotations

import functools
import os
import sys
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from model.core.types import Workload

if TYPE_CHECKING:
    from checker.conformance.vllm_real import RealRun


@dataclass(frozen=True, slots=True)
class Branch:
    """One upstream branch: the first line containing `target` at or after the
    `occurrence`-th line of `file` (relative to the vllm package) containing `anchor`.
    The branches are a table, checker/conformance/branches.toml."""

    name: str
    file: str
    anchor: str
    target: str
    what: str
    occurrence: int = 1
    unreachable: str = ""  # why the modelled scope cannot take it ("" = reachable)
    context: str = ""  # "hit": counted only inside an allocate_slots call with a hit
    event: str = ""  # counted by the driver's probe event of this name, not by the line


#: The table of branches (checker/conformance/branches.toml), one tuple a set.
_TABLE = Path(__file__).with_name("branches.toml")


def _load(path: Path) -> dict[str, tuple[Branch, ...]]:
    """The branch sets of the table, in its order; a branch without a `target` is its
    anchor line."""
    doc = tomllib.loads(path.read_text())
    return {name: tuple(Branch(**{"target": row["anchor"], **row}) for row in rows)
            for name, rows in doc.items()}


#: The branch lists a mode's coverage report can name (`modes.Mode.branch_sets`): `base`
#: (every mode), `prefix` (prefix caching on), `async`, `async+prefix`.
BRANCH_SETS: dict[str, tuple[Branch, ...]] = _load(_TABLE)
BRANCHES = BRANCH_SETS["base"]
#: The branches prefix caching adds (in the order a request meets them).
PREFIX_BRANCHES = BRANCH_SETS["prefix"]
#: The branches the AsyncScheduler and the one-step-late output add.
ASYNC_BRANCHES = BRANCH_SETS["async"]
#: The branches of async scheduling with prefix caching on.
ASYNC_PREFIX_BRANCHES = BRANCH_SETS["async+prefix"]


def branches_for(sets: Iterable[str]) -> tuple[Branch, ...]:
    """The branches of these `BRANCH_SETS`, in order; a branch a later set restates (same
    name) keeps its place and takes the later definition."""
    merged: dict[str, Branch] = {}
    for name in sets:
        for b in BRANCH_SETS[name]:
            merged[b.name] = b
    return tuple(merged.values())


@functools.cache
def _vllm_root() -> str:
    import vllm

    return os.path.dirname(os.path.abspath(vllm.__file__))


@functools.cache
def branch_lines(branches: tuple[Branch, ...] = BRANCHES) -> dict[str, tuple[str, int]]:
    """Branch name -> (absolute file path, line number) in the installed vLLM."""
    out: dict[str, tuple[str, int]] = {}
    for b in branches:
        path = os.path.join(_vllm_root(), b.file)
        with open(path) as f:
            lines = f.read().splitlines()
        seen = 0
        start = None
        for i, line in enumerate(lines):
            if b.anchor in line:
                seen += 1
                if seen == b.occurrence:
                    start = i
                    break
        if start is None:
            raise RuntimeError(f"branch {b.name}: anchor {b.anchor!r} (occurrence "
                               f"{b.occurrence}) not found in {path}; update BRANCHES")
        hit = next((i for i in range(start, min(start + 25, len(lines)))
                    if b.target in lines[i] and not lines[i].lstrip().startswith("#")),
                   None)
        if hit is None:
            raise RuntimeError(f"branch {b.name}: {b.target!r} not within 25 lines after "
                               f"{b.anchor!r} in {path}; update BRANCHES")
        out[b.name] = (path, hit + 1)
    return out


def where(name: str, branches: tuple[Branch, ...] = BRANCHES) -> str:
    """`file:line` of a branch, the file relative to the vllm package."""
    path, line = branch_lines(branches)[name]
    return f"{os.path.relpath(path, os.path.dirname(_vllm_root()))}:{line}"


class _LineTracer:
    """Records (file, line, context) triples executed in the traced files while active;
    `context` is whatever the caller set it to around a call (see `_tag_hits`)."""

    def __init__(self, files: Iterable[str]) -> None:
        self.files = frozenset(files)
        self.lines: set[tuple[str, int, str]] = set()
        self.context = ""

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines.add((frame.f_code.co_filename, frame.f_lineno, self.context))
        return self._local

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_filename in self.files:
            return self._local
        return None

    def __enter__(self) -> _LineTracer:
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._previous)


def _tag_hits(tracer: _LineTracer) -> Callable[[Any], None]:
    """An `instrument` for the driver: inside an allocate_slots call that adopts a prefix
    hit, the tracer's context is "hit"; inside update_from_output, "update"."""

    def instrument(sched: Any) -> None:
        kv = sched.kv_cache_manager
        allocate_slots = kv.allocate_slots
        update_from_output = sched.update_from_output

        def updating(*args: Any, **kwargs: Any) -> Any:
            previous = tracer.context
            tracer.context = "update"
            try:
                return update_from_output(*args, **kwargs)
            finally:
                tracer.context = previous

        def tagged(request: Any, num_new_tokens: int, num_new_computed_tokens: int = 0,
                   *args: Any, **kwargs: Any) -> Any:
            previous = tracer.context
            tracer.context = "hit" if num_new_computed_tokens > 0 else ""
            try:
                return allocate_slots(request, num_new_tokens, num_new_computed_tokens,
                                      *args, **kwargs)
            finally:
                tracer.context = previous

        kv.allocate_slots = tagged
        sched.update_from_output = updating

    return instrument


def trace(workload: Workload, branches: tuple[Branch, ...] = BRANCHES
          ) -> tuple[frozenset[str], RealRun]:
    """One traced real run of `workload`: the `branches` it takes, and the run."""
    from checker.conformance.generate import run_features
    from checker.conformance.vllm_real import run_real_vllm_detailed

    targets = branch_lines(branches)
    with _LineTracer({path for path, _ in targets.values()}) as tracer:
        run = run_real_vllm_detailed(workload, instrument=_tag_hits(tracer))
    events = run_features(workload, run.records, run.events)
    taken = set()
    for b in branches:
        path, line = targets[b.name]
        if b.event:
            hit = b.event in events
        elif b.context:
            hit = (path, line, b.context) in tracer.lines
        else:
            hit = any((path, line, c) in tracer.lines for c in ("", "hit", "update"))
        if hit:
            taken.add(b.name)
    return frozenset(taken), run


def branches_hit(workload: Workload,
                 branches: tuple[Branch, ...] = BRANCHES) -> frozenset[str]:
    """The `branches` that one real run of `workload` takes."""
    return trace(workload, branches)[0]


def branch_counts(workloads: Iterable[Workload],
                  branches: tuple[Branch, ...] = BRANCHES) -> Counter[str]:
    """For each branch, the number of workloads whose real run takes it."""
    counts: Counter[str] = Counter({b.name: 0 for b in branches})
    for w in workloads:
        counts.update(branches_hit(w, branches))
    return counts


def missing_reachable(counts: Counter[str],
                      branches: tuple[Branch, ...] = BRANCHES) -> tuple[str, ...]:
    """The reachable branches that no workload took."""
    return tuple(b.name for b in branches if not b.unreachable and counts[b.name] == 0)
