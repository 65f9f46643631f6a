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

`BRANCH_SETS` groups them: `base` (every mode), `prefix` (prefix caching on), `async`
(the AsyncScheduler) and `async+prefix` (both). A later set may restate a branch of an
earlier one under the same name (`branches_for`): `async` does so for the running loop's
zero-token skip, which the max_model_len cap makes reachable once outputs are in flight,
and for its input-budget break, whose unreachability argument it extends.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from model.core.types import Workload

if TYPE_CHECKING:
    from checker.conformance.vllm_real import RealRun


@dataclass(frozen=True, slots=True)
class Branch:
    """One upstream branch: the first line containing `target` at or after the
    `occurrence`-th line of `file` (relative to the vllm package) containing `anchor`."""

    name: str
    file: str
    anchor: str
    target: str
    what: str
    occurrence: int = 1
    unreachable: str = ""  # why the modelled scope cannot take it ("" = reachable)
    context: str = ""  # "hit": counted only inside an allocate_slots call with a hit
    event: str = ""  # counted by the driver's probe event of this name, not by the line


_S = "v1/core/sched/scheduler.py"
_K = "v1/core/kv_cache_manager.py"
_U = "v1/core/sched/utils.py"
_P = "v1/core/block_pool.py"
_T = "v1/core/single_type_kv_cache_manager.py"
_A = "v1/core/sched/async_scheduler.py"

BRANCHES: tuple[Branch, ...] = (
    Branch("long_prefill:adaptive_floor", _S,
           "if long_prefill_token_threshold > 0 and self.adaptive_long_prefill_threshold:",
           "long_prefill_token_threshold = max(", "adaptive threshold raised to budget // n"),
    Branch("running:input_budget_break", _S, "if input_budget <= draft_slots:", "break",
           "running loop stops: max_num_batched_tokens used up (max_num_scheduled_tokens > it)",
           unreachable="sync, no spec decode: a request gets behind another in `running` only "
                       "if the batch had room after that one's chunk, and the chunks ahead of "
                       "it do not grow from step to step, so the batch is never full before "
                       "the last running request (argued; 0 hits in 1,500 workloads drawn "
                       "with max_num_scheduled_tokens > max_num_batched_tokens)"),
    Branch("running:long_prefill_cap", _S,
           "if 0 < long_prefill_token_threshold < num_new_tokens:",
           "num_new_tokens = long_prefill_token_threshold", "running chunk capped"),
    Branch("running:zero_tokens_skip", _S,
           "# The request cannot be scheduled because one of the following", "continue",
           "running request gets 0 tokens and is skipped",
           unreachable="sync, no spec decode/encoder/Mamba/PP: a running request always has "
                       ">= 1 token to compute below max_model_len - 1 while budget > 0"),
    Branch("running:preempt_fcfs", _S, "preempted_req = self.running.pop()",
           "preempted_req = self.running.pop()", "FCFS victim = running[-1]"),
    Branch("running:preempt_priority", _S, "victim_index = self.running.index(preempted_req)",
           "victim_index = self.running.index(preempted_req)",
           "PRIORITY victim = max (priority, arrival)"),
    Branch("running:priority_victim_before_index", _S, "if victim_index < req_index:",
           "req_index -= 1", "PRIORITY victim already passed in this loop"),
    Branch("running:priority_victim_was_scheduled", _S,
           "restored = num_scheduled_tokens.pop(preempted_req_id)",
           "restored = num_scheduled_tokens.pop(preempted_req_id)",
           "PRIORITY victim's tokens of this step given back"),
    Branch("running:self_preemption", _S, "if preempted_req == request:", "break",
           "the request preempted itself"),
    Branch("running:alloc_fail_break", _S, "if new_blocks is None:", "break",
           "running loop ends on an allocation failure"),
    Branch("waiting:loop_entered", _S, "step_skipped_waiting: deque[Request] = deque()",
           "step_skipped_waiting: deque[Request] = deque()", "no preemption: waiting loop runs"),
    Branch("waiting:empty_or_input_budget_break", _S,
           "if not request_queue or input_budget <= draft_slots:", "break",
           "waiting loop ends: queue empty or batch full"),
    Branch("waiting:seq_cap_break", _S, "if num_running >= self.max_num_active_reqs:", "break",
           "waiting loop ends: max_num_seqs / max_num_active_seqs reached"),
    Branch("waiting:long_prefill_cap", _S,
           "if 0 < long_prefill_token_threshold < num_new_tokens:",
           "num_new_tokens = long_prefill_token_threshold", "waiting chunk capped",
           occurrence=2),
    Branch("waiting:no_chunking_break", _S, "# we can stop the scheduling here.", "break",
           "chunked prefill off and the prompt exceeds the budget left"),
    Branch("waiting:alloc_fail_break", _S, "if new_blocks is None:", "break",
           "head-of-line: admission fails on blocks, the waiting loop ends", occurrence=2),
    Branch("waiting:admit_new", _S, "scheduled_new_reqs.append(request)",
           "scheduled_new_reqs.append(request)", "a new request admitted"),
    Branch("waiting:admit_resumed", _S, "scheduled_resumed_reqs.append(request)",
           "scheduled_resumed_reqs.append(request)", "a preempted request resumed"),
    Branch("kv:watermark_applied", _K, "watermark_blocks = self.watermark_blocks",
           "watermark_blocks = self.watermark_blocks", "watermark counted for an admission"),
    Branch("kv:full_sequence_reject", _K, "if full_sequence_must_fit:", "return None",
           "scheduler_reserve_full_isl: whole sequence does not fit"),
    Branch("kv:slots_reject", _K, "if required_blocks > available_blocks:", "return None",
           "the chunk's blocks do not fit"),
    Branch("stop:eos", _U, "if last_token_id == sampling_params.eos_token_id:",
           "request.status = RequestStatus.FINISHED_STOPPED", "finished by EOS"),
    Branch("stop:length", _U, "request.num_tokens >= max_model_len",
           "request.status = RequestStatus.FINISHED_LENGTH_CAPPED",
           "finished by max_tokens or max_model_len"),
)

_LOOKUP = "for block_hash in itertools.islice(full_block_hashes, max_length // block_size):"

#: The branches prefix caching adds (in the order a request meets them).
PREFIX_BRANCHES: tuple[Branch, ...] = (
    Branch("lookup:run", _K, "max_cache_hit_length = request.num_tokens - 1",
           "max_cache_hit_length = request.num_tokens - 1",
           "prefix lookup of a waiting request (caching on, no prompt logprobs)"),
    Branch("lookup:hit_block", _T, _LOOKUP, "computed.append(cached)",
           "a cached block extends the hit"),
    Branch("lookup:miss_break", _T, _LOOKUP, "break",
           "the first uncached block ends the hit (chained hashes)"),
    Branch("lookup:cap_num_tokens_minus_1", _K, "max_cache_hit_length = request.num_tokens - 1",
           "max_cache_hit_length = request.num_tokens - 1",
           "the num_tokens - 1 cap leaves a cached block out (recomputed)",
           event="prefix:hit_capped"),
    Branch("lookup:duplicate_returns_first", _P, "def get_one_block(self, key",
           "return next(iter(blocks.values()))",
           "a hash held by several blocks: the lookup takes the first inserted"),
    Branch("alloc:evictable_hit_counted", _T,
           "num_evictable_blocks = self._get_num_evictable_blocks(",
           "num_evictable_blocks = self._get_num_evictable_blocks(",
           "evictable hit blocks count in the need like new ones",
           event="prefix:hit_evictable_need"),
    Branch("alloc:evictable_hit_refused", _K,
           "if required_blocks > available_blocks:", "return None",
           "a hit on evictable blocks refused (by this check or the full-sequence one, 539): "
           "evictable hit blocks need free ones (P5)", event="prefix:hit_evictable_refused"),
    Branch("alloc:watermark_with_hit", _K, "watermark_blocks = self.watermark_blocks",
           "watermark_blocks = self.watermark_blocks",
           "a watermark above 0 counted for an admission with a hit",
           event="prefix:hit_watermark"),
    Branch("alloc:full_sequence_reject_with_hit", _K, "if full_sequence_must_fit:",
           "return None", "full-sequence check refuses a request with a hit", context="hit"),
    Branch("alloc:slots_reject_with_hit", _K, "if required_blocks > available_blocks:",
           "return None", "the chunk's blocks do not fit, with a hit", context="hit"),
    Branch("alloc:adopt_hit", _K, "# Append the new computed blocks to the request blocks",
           "self.coordinator.allocate_new_computed_blocks(",
           "hit blocks adopted after both checks passed"),
    Branch("admit:resumed_with_hit", _S, "scheduled_resumed_reqs.append(request)",
           "scheduled_resumed_reqs.append(request)",
           "a preempted request resumes with a hit on its own blocks (P6)",
           event="prefix:hit_resumed"),
    Branch("pool:touch_evictable", _P, "if block.ref_cnt == 0 and not block.is_null:",
           "self.free_block_queue.remove(block)",
           "a hit takes an evictable block out of the free queue"),
    Branch("pool:touch_shared", _P, "def touch(self, blocks", "block.ref_cnt += 1",
           "a hit shares a block a running request holds (ref_cnt > 0)",
           event="prefix:hit_shared"),
    Branch("pool:touch_same_step", _P, "def touch(self, blocks", "block.ref_cnt += 1",
           "a hit on a block cached earlier in the same step", event="prefix:hit_same_step"),
    Branch("pool:reuse_unhashed", _P, "evicted_hashes = self._remove_cached_block_hashes(block)",
           "return False", "get_new_blocks reuses a block without a hash"),
    Branch("pool:evict_on_reuse", _P,
           "evicted_hashes = self._remove_cached_block_hashes(block)", "return True",
           "get_new_blocks evicts a cached block from the queue head (lazy eviction)"),
    Branch("map:pop_keeps_other_copies", _P, "# Try to pop block_id from the block dict",
           "self._cache[key] = blocks", "evicting one copy of a duplicated hash keeps the others"),
    Branch("cache:full_block", _P, "num_hash_tokens = (num_cached_blocks + i + 1) * block_size",
           "self._insert_block_hash(", "a full block is cached at allocate_slots time"),
    Branch("cache:nothing_new", _T, "num_full_blocks = num_tokens // self.block_size",
           "return", "cache_blocks: no newly full block to cache"),
    Branch("map:first_copy", _P, "def insert(self, key", "self._cache[key] = block",
           "a hash cached on its first block"),
    Branch("map:second_copy", _P, "elif isinstance(blocks, KVCacheBlock):",
           "self._cache[key] = {blocks.block_id: blocks, block.block_id: block}",
           "the same hash cached on a second block (no de-duplication)"),
    Branch("map:second_copy_after_cap", _P, "elif isinstance(blocks, KVCacheBlock):",
           "self._cache[key] = {blocks.block_id: blocks, block.block_id: block}",
           "a duplicate from recomputing the block the cap left out", occurrence=1,
           event="prefix:duplicate_after_cap"),
    Branch("map:second_copy_on_resume", _P, "elif isinstance(blocks, KVCacheBlock):",
           "self._cache[key] = {blocks.block_id: blocks, block.block_id: block}",
           "a duplicate cached by a request preempted before (mid-prefill, it comes back "
           "to a fully cached prompt and the cap recomputes its last block)",
           event="prefix:duplicate_on_resume"),
    Branch("map:more_copies", _P, "# If it's already a dict, simply insert the block",
           "blocks[block.block_id] = block", "the same hash cached on a third block or more"),
    Branch("free:hashed_to_tail", _P, "# FIFO reuse of cached blocks for LRU eviction",
           "blocks_to_evict_last.append(block)",
           "a freed cached block goes to the free queue's tail (evicted last)"),
    Branch("free:unhashed_to_head", _P, "# LIFO reuse of non-cached blocks",
           "blocks_to_evict_first.append(block)",
           "a freed block without a hash goes to the queue's head (reused first)"),
    Branch("free:still_held", _P, "def free_blocks(self, ordered_blocks", "block.ref_cnt -= 1",
           "a freed block stays held by another request (ref_cnt > 0)",
           event="prefix:free_still_held"),
)

#: The branches the AsyncScheduler and the one-step-late output add (A = async_scheduler.py).
ASYNC_BRANCHES: tuple[Branch, ...] = (
    Branch("async:placeholder_added", _A, "def _update_after_schedule",
           "request.num_output_placeholders += (",
           "a chunk that samples gets an output placeholder (final prefill chunk, decode)"),
    Branch("async:prefill_chunk_no_placeholder", _A, "if request.is_prefill_chunk:",
           "continue", "a non-final prefill chunk gets no placeholder"),
    Branch("running:max_tokens_skip", _S, "# Async scheduling: Avoid scheduling an extra step",
           "continue", "a request whose output in flight is its last (max_tokens) is "
           "skipped: no token, no block, no budget"),
    Branch("running:input_budget_break", _S, "if input_budget <= draft_slots:", "break",
           "running loop stops: max_num_batched_tokens used up (max_num_scheduled_tokens > it)",
           unreachable="sync or async, no spec decode: the sync argument holds with outputs "
                       "in flight, since they grow no chunk (a decode still asks 1 token, a "
                       "skipped request 0); 0 hits in 2,000 workloads of the async modes"),
    Branch("running:zero_tokens_skip", _S,
           "# The request cannot be scheduled because one of the following", "continue",
           "running request gets 0 tokens and is skipped: async, the max_model_len cap "
           "(716-721) when the output in flight reaches max_model_len"),
    Branch("running:phantom_preemption", _S, "preempted_req = self.running.pop()",
           "self._preempt_request(",
           "a request that had already sampled EOS (in flight) needs a block and "
           "preempts another (A7)", event="async:phantom_preemption"),
    Branch("preempt:output_in_flight", _S,
           "request.num_stale_output_tokens = request.num_in_flight_tokens",
           "request.num_stale_output_tokens = request.num_in_flight_tokens",
           "a victim with a step in flight: that output is marked stale",
           event="async:preempted_in_flight"),
    Branch("waiting:stale_output_skip", _S,
           "if request.num_stale_output_tokens and not request.drop_stale_output:",
           "skip_request(request_queue)", "a waiting request with stale output in flight "
           "is skipped",
           unreachable="batch queue of two (PP=1): a victim of schedule(k) is stale for "
                       "step k-1 only, drained by update(k-1) before schedule(k+1), and "
                       "schedule(k) admits nothing after a preemption (900)"),
    Branch("update:finished_meanwhile", _S, "if request is None or request.is_finished():",
           "continue", "the output of a request finished since it was scheduled is dropped "
           "(A2)"),
    Branch("update:stale_output", _S, "# Drain any stale share (see _preempt_request)",
           "output_is_stale = True", "a preempted request's output in flight is delivered "
           "as stale (A5)"),
    Branch("update:stale_token_kept_placeholders", _A, "if not is_stale:",
           "if status_before_update == RequestStatus.RUNNING:",
           "a stale token is appended without touching the reset placeholders",
           event="async:stale_token"),
    Branch("update:placeholder_released", _A, "if not is_stale:",
           "request.num_output_placeholders -= len(new_token_ids)",
           "a delivered token releases its placeholder"),
    Branch("update:finish_from_waiting", _S, "if status_before_stop == RequestStatus.RUNNING:",
           "stopped_preempted_reqs.add(request)",
           "a stale token finishes a preempted request (EOS or length)"),
    Branch("update:remove_from_waiting", _S, "if stopped_preempted_reqs:",
           "self.waiting.remove_requests(stopped_preempted_reqs)",
           "... and removes it from the waiting queue"),
    Branch("update:cache_at_output", _A, "if status_before_update == RequestStatus.RUNNING:",
           "self.kv_cache_manager.cache_blocks(",
           "a running request's blocks are cached when its output lands, up to "
           "num_computed_tokens - num_output_placeholders"),
)

#: The branches of async scheduling with prefix caching on.
ASYNC_PREFIX_BRANCHES: tuple[Branch, ...] = (
    Branch("cache:full_block_at_output", _P,
           "num_hash_tokens = (num_cached_blocks + i + 1) * block_size",
           "self._insert_block_hash(", "a full block is cached when the output lands "
           "(async_scheduler.py:73-77), not at allocate_slots", context="update"),
    Branch("cache:nothing_new_at_output", _T, "num_full_blocks = num_tokens // self.block_size",
           "return", "an output lands with no newly full block", context="update"),
    Branch("free:uncached_full_block_to_head", _P, "# LIFO reuse of non-cached blocks",
           "blocks_to_evict_first.append(block)",
           "a victim's full block not yet cached is freed without a hash, to the head: "
           "its resume cannot hit it (A5)", event="async:uncached_block_lost"),
)

#: The branch lists a mode's coverage report can name (`modes.Mode.branch_sets`).
BRANCH_SETS: dict[str, tuple[Branch, ...]] = {
    "base": BRANCHES, "prefix": PREFIX_BRANCHES, "async": ASYNC_BRANCHES,
    "async+prefix": ASYNC_PREFIX_BRANCHES,
}


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
