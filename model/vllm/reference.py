"""Reference scheduler for vLLM V1 (v0.32.0): an imperative port of `Scheduler.schedule()`
and `Scheduler.update_from_output()`, written to be read beside the upstream files.

Scope: the synchronous `Scheduler` or the `AsyncScheduler` (`async_scheduling`: one step of
look-ahead, A = v1/core/sched/async_scheduler.py), full attention or KV cache groups
(model/vllm/kv_cache.py; with prefix caching, full attention beside Mamba in align mode,
model/vllm/align_cache.py, whose chunks are block-aligned, S:443-547), prefix caching on or off
(`enable_prefix_caching`; the cache itself is model/vllm/kv_cache.py), speculative decoding
on or off (Config.speculative_method; static k, no dynamic SD, prefill lookahead at most 1,
which makes `_reserve_prefill_lookahead` a clamp at 0), a KV connector on or off
(Config.kv_connector; the environment and its state are model/vllm/connector.py), no
multimodal/encoder inputs, no LoRA, no structured output, not paused. Without a connector
`kv_holding_waiting` stays empty: only a request set aside for its asynchronous KV load
enters it (S:903-909, 1392-1393).

Speculative decoding (S:612-614, 661, 703-721, 857-876, 918, 1118, 1131-1153, 1367-1375,
2108-2128; A:25-56): a request carries `spec_token_ids` drafts into a step; the running loop
schedules them within both budgets (each scheduled request costs `draft_slots` more of the
input budget; before 0.28.0 nothing per request, the slots being taken out of the token
budget at startup: Config.step_draft_slots, token_budget), allocate_slots reserves
`num_lookahead_tokens` slots past the chunk, a waiting request with one token left is
padded to 1+k placeholder drafts, and the output's accepted count (the environment's
choice, `step(accepted=...)`) rolls back the rejected ones. Synchronous: the drafter's
proposals for the next step come in with `step(drafts=...)` (default k each;
update_draft_token_ids, S:2550-2569). Async: the scheduler sets k placeholders itself
(A:50).

An assertion the engine reaches (S:1372 `num_new_tokens == 1 + num_spec_tokens`, reachable
when 0 < long_prefill_token_threshold < 1+k cuts a padded request; S:1170 `num_new_tokens >
0`, reachable only when a prefix hit may cover every token, VllmRules.cap_prefix_hit off) is
not raised: the step's record carries `extra["assertion"]` ("scheduler.py:1372 ...",
"scheduler.py:1170 ...", naming the request) with nothing else scheduled, admitted,
preempted or finished, `free_blocks` as the pool stood at the assertion and no requests
listed; the engine is dead from then on, and every later step records the same, the
assertion alone. At S:1170 the request that reached it is listed as admitted (or resumed)
with 0 tokens scheduled: the admission the engine asserted against, which it never made
(the request stays at the queue's head, nothing allocated), so that `admitted_with_tokens`,
the assertion as a property, sees it.

One `step()` is one engine step. Synchronous: schedule(), then the model output of that
schedule, then update_from_output() (v1/engine/core.py:657-687). Async, as EngineCore's
batch queue of two runs it (core.py:698-792): schedule(k), then update_from_output() of
schedule(k-1), whose output was computed meanwhile; the output of schedule(k) is applied
in the next engine step. An EOS given for step k is the token sampled by schedule(k) in
both modes.

Citations (all paths relative to `vllm/`, v0.32.0):
  S  = v1/core/sched/scheduler.py        Q = v1/core/sched/request_queue.py
  K  = v1/core/kv_cache_manager.py       P = v1/core/block_pool.py
  T  = v1/core/single_type_kv_cache_manager.py
  U  = v1/core/sched/utils.py            R = v1/request.py

The code is our own; loops, `break` and `continue` sit where upstream has them.
"""

from __future__ import annotations

import copy
import heapq
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from model.core.checks import check_eos_steps
from model.core.errors import InputError
from model.core.memo import fields_copied
from model.core.types import (
    FINISH_ABORT,
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    KVLoadEvent,
    RequestSpec,
    StepRecord,
    Workload,
)
from model.vllm.align_cache import (
    AlignHit,
    AlignTables,
    CachedFullTable,
    GroupManager,
    MambaAlignTable,
    prefill_checkpoint_position,
)
from model.vllm.config import GROUP_MAMBA, GROUP_SLIDING, POLICY_PRIORITY, Config
from model.vllm.connector import Connector, copied
from model.vllm.kv_cache import (
    BlockPool,
    BlockTable,
    GroupTable,
    GroupTables,
    KVBlock,
    MambaTable,
    SlidingWindowTable,
)
from model.vllm.validation import check_field_types


class Status(Enum):
    """The `RequestStatus` values reachable in scope (R:370-386)."""

    WAITING = "WAITING"
    WAITING_FOR_REMOTE_KVS = "WAITING_FOR_REMOTE_KVS"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    FINISHED_STOPPED = "FINISHED_STOPPED"
    FINISHED_LENGTH_CAPPED = "FINISHED_LENGTH_CAPPED"
    FINISHED_ABORTED = "FINISHED_ABORTED"
    FINISHED_ERROR = "FINISHED_ERROR"


# ---------------------------------------------------------------------------------------
# Requests and queues
# ---------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Request:
    """Mutable per-request state the scheduler keeps (R:115, 184, 216, 294-296).

    Mutable on purpose: this is the imperative reference. Identity equality, as upstream.
    Output token ids are not modelled, only their count.
    """

    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    priority: int
    arrival_time: int
    num_output_tokens: int = 0
    num_computed_tokens: int = 0
    num_preemptions: int = 0
    status: Status = Status.WAITING
    prefix_group: str | None = None
    shared_prefix_len: int = 0
    # Async scheduling (R:162, 184-201; S:1597-1607): tokens of outputs scheduled but not
    # yet delivered, tokens scheduled and not yet processed, and the share of those that
    # was in flight when the request was preempted.
    num_output_placeholders: int = 0
    num_in_flight_tokens: int = 0
    num_stale_output_tokens: int = 0
    is_prefill_chunk: bool = False
    # Speculative decoding (R:183): how many drafts the request carries into the next step;
    # their ids do not matter, only whether they are placeholders (-1: the AsyncScheduler's,
    # A:50), which the verifier never accepts.
    num_spec_tokens: int = 0
    # Mamba align mode (K:311-321, S:955-967): the junction of the request's last prefix
    # lookup, where a group's longer hit ends (0: none); chunks stop there (S:526-546).
    junction: int = 0

    @property
    def num_tokens(self) -> int:
        """Prompt plus outputs generated so far (R:294-296)."""
        return self.num_prompt_tokens + self.num_output_tokens

    def block_hashes(self, block_size: int) -> list[Hashable]:
        """The hash of each full block of prompt plus outputs (R:272-288; U:941-1000): its
        prefix group's while the block lies within the shared prefix, else its own."""
        hashes: list[Hashable] = []
        for j in range(self.num_tokens // block_size):
            shared = self.prefix_group is not None and (j + 1) * block_size <= \
                self.shared_prefix_len
            hashes.append(("g", self.prefix_group, j) if shared else ("r", self.request_id, j))
        return hashes

    def priority_key(self) -> tuple[int, int, str]:
        """`Request.__lt__`: priority, then arrival_time, then request_id (R:357-367)."""
        return (self.priority, self.arrival_time, self.request_id)

    def __lt__(self, other: Request) -> bool:
        return self.priority_key() < other.priority_key()

    def __copy__(self) -> Request:
        """A shallow copy, field by field (every field is immutable; `fields_copied`)."""
        return fields_copied(self)


class FcfsQueue:
    """`FCFSRequestQueue`: a deque; add at the tail, pop/peek at the head, prepend with
    appendleft (Q:75-128)."""

    def __init__(self) -> None:
        self._items: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        """Append at the tail (Q:78-80)."""
        self._items.append(request)

    def pop_request(self) -> Request:
        """Pop the head (Q:82-84)."""
        return self._items.popleft()

    def peek_request(self) -> Request:
        """The head, not removed (Q:86-90)."""
        return self._items[0]

    def prepend_request(self, request: Request) -> None:
        """Put back at the head (Q:92-94)."""
        self._items.appendleft(request)

    def remove_requests(self, requests: set[Request]) -> None:
        """Drop these requests, keeping the order of the others (Q:106-112)."""
        self._items = deque(r for r in self._items if r not in requests)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items)


class PriorityQueue:
    """`PriorityRequestQueue`: a heap ordered by `Request.__lt__`; prepending is a plain
    insert, a heap has no front (Q:131-197)."""

    def __init__(self) -> None:
        self._heap: list[Request] = []

    def add_request(self, request: Request) -> None:
        """Heap insert (Q:143-145)."""
        heapq.heappush(self._heap, request)

    def pop_request(self) -> Request:
        """Pop the smallest (priority, arrival_time, request_id) (Q:147-151)."""
        return heapq.heappop(self._heap)

    def peek_request(self) -> Request:
        """The smallest, not removed (Q:153-157)."""
        return self._heap[0]

    def prepend_request(self, request: Request) -> None:
        """Same as add_request (Q:159-164)."""
        self.add_request(request)

    def remove_requests(self, requests: set[Request]) -> None:
        """Drop these requests and re-heapify (Q:175-181)."""
        self._heap = [r for r in self._heap if r not in requests]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        """Sorted order, as upstream's `__iter__` pops a copy of the heap (Q:193-197)."""
        return iter(sorted(self._heap))


RequestQueue = FcfsQueue | PriorityQueue


def _queue_copy(queue: RequestQueue, fresh: Mapping[str, Request]) -> RequestQueue:
    """A copy of `queue` holding the copies `fresh` maps each request id to, in its order."""
    if isinstance(queue, FcfsQueue):
        fcfs = FcfsQueue()
        fcfs._items = deque(fresh[r.request_id] for r in queue._items)
        return fcfs
    heap = PriorityQueue()
    heap._heap = [fresh[r.request_id] for r in queue._heap]
    return heap


# The pool and the per-request block tables are model/vllm/kv_cache.py.


# ---------------------------------------------------------------------------------------
# Pure token-count rules (small enough to test one by one)
# ---------------------------------------------------------------------------------------


def effective_long_prefill_threshold(cfg: Config, num_eligible_reqs: int) -> int:
    """The per-request prefill cap for this step (S:643-655).

    0 (no cap) when at most one request exists (running + waiting <= 1); with the adaptive
    variant, floored at the fair share `max_num_batched_tokens // num_eligible_reqs`.
    Before 0.31.0 (VllmRules.threshold_off_when_alone off) the configured threshold holds
    whatever the count, and there is no adaptive flag (adaptive_threshold off: not read).
    """
    alone = num_eligible_reqs <= 1 and cfg.rules.threshold_off_when_alone
    threshold = 0 if alone else cfg.prefill_threshold
    # (A fair share of one request or none is no floor; only the combination of the
    # adaptive flag with threshold_off_when_alone off, which no release had, reaches it.)
    if (threshold > 0 and cfg.rules.adaptive_threshold
            and cfg.long_prefill_token_threshold_adaptive and num_eligible_reqs > 1):
        threshold = max(threshold, cfg.max_num_batched_tokens // num_eligible_reqs)
    return threshold


def running_num_new_tokens(
    request: Request, threshold: int, token_budget: int, input_budget: int, max_model_len: int,
    draft_slots: int = 0
) -> int:
    """Tokens a RUNNING request asks for this step (S:703-721, 744-753).

    The gap `num_tokens_with_spec + num_output_placeholders - num_computed_tokens` (its
    drafts; placeholders: the outputs of async steps not yet delivered), cut to the
    long-prefill threshold, to the token budget and the input budget less the draft slots,
    and to `max_model_len - num_computed_tokens - 1` (one slot for the token sampled in
    this step: drafts near the end are trimmed here), clamped at 0 (S:589).
    """
    num_new_tokens = (request.num_tokens + request.num_spec_tokens
                      + request.num_output_placeholders
                      - request.num_computed_tokens)  # S:703-707
    if 0 < threshold < num_new_tokens:
        num_new_tokens = threshold
    num_new_tokens = min(num_new_tokens, token_budget, input_budget - draft_slots)
    num_new_tokens = min(num_new_tokens, max_model_len - request.num_computed_tokens - 1)
    # S:744-753 `_reserve_prefill_lookahead`: with a prefill lookahead of at most 1 (every
    # method modelled) only its clamp at 0 acts.
    return max(num_new_tokens, 0)


#: Where schedule() asserts that a padded admission kept its 1 + k tokens, by release (the
#: releases with VllmRules.pad_assertion on).
PAD_ASSERTION_LINES = {"0.30.0": 1267, "0.32.0": 1372}
#: Where schedule() asserts that a request it admits or resumes has a token to compute.
ZERO_TOKENS_ASSERTION = "scheduler.py:1170"
_ZERO_TOKENS_LEAD = f"{ZERO_TOKENS_ASSERTION} AssertionError: request "


def zero_tokens_assertion(request_id: str, num_tokens: int, resumed: bool,
                          external: bool = False) -> str:
    """The crash record's words for S:1170 (`assert num_new_tokens > 0`): the request whose
    prefix hit (a KV connector's synchronous hit when `external`) covers all its
    `num_tokens` tokens, about to be admitted (or resumed)."""
    verb = "resumed" if resumed else "admitted"
    hit = "an external KV hit" if external else "a prefix hit"
    return (f"{_ZERO_TOKENS_LEAD}{request_id!r} was to be {verb} with 0 tokens: {hit} "
            f"covers all {num_tokens} of its tokens (assert num_new_tokens > 0)")


# ---------------------------------------------------------------------------------------
# Views and per-step scratch state
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestView:
    """A read-only snapshot of one request the scheduler holds."""

    request_id: str
    status: str
    num_prompt_tokens: int
    num_output_tokens: int
    num_tokens: int
    num_computed_tokens: int
    num_preemptions: int
    blocks_held: int
    priority: int
    arrival_time: int
    num_output_placeholders: int = 0  # AsyncScheduler: outputs scheduled, not yet known


@dataclass(slots=True)
class _StepOutput:
    """Scratch state of one `schedule()` call (the parts of SchedulerOutput we need)."""

    token_budget: int
    input_budget: int
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)  # insertion = order
    scheduled_running_reqs: list[Request] = field(default_factory=list)
    scheduled_new_reqs: list[Request] = field(default_factory=list)
    scheduled_resumed_reqs: list[Request] = field(default_factory=list)
    preempted_reqs: list[Request] = field(default_factory=list)
    prefix_hits: dict[str, int] = field(default_factory=dict)  # admitted id -> hit tokens
    # scheduled_spec_decode_tokens (S:861-876, 1371-1375): id -> drafts scheduled, and the
    # ids whose drafts are padding placeholders
    spec_scheduled: dict[str, int] = field(default_factory=dict)
    padded: set[str] = field(default_factory=set)
    prefill_scheduled: bool = False  # S:852
    assertion: str = ""  # the engine assertion this schedule() reached, if any
    # S:1170: the request that reached `assert num_new_tokens > 0` (about to join with 0)
    zero_tokens: Request | None = None


@dataclass(frozen=True, slots=True)
class _ModelOutput:
    """A schedule's output as the fake model runner returns it: for each request that
    samples (its chunk finishes what it lacks), one token plus the accepted drafts
    (`accepted`, 0 when absent); the last token is EOS for `eos_ids`."""

    out: _StepOutput
    samples: frozenset[str]
    eos_ids: frozenset[str]
    accepted: tuple[tuple[str, int], ...] = ()


# ---------------------------------------------------------------------------------------
# The scheduler
# ---------------------------------------------------------------------------------------


class VllmV1Scheduler:
    """vLLM V1's synchronous scheduler, one `step()` = `schedule()` then a fake model
    output then `update_from_output()` (v1/engine/core.py:657-687)."""

    def __init__(self, cfg: Config, connector: Connector | None = None) -> None:
        check_field_types(cfg)
        self.cfg = cfg
        self.current_step = 0
        self.requests: dict[str, Request] = {}
        self.waiting: RequestQueue = (
            PriorityQueue() if cfg.policy == POLICY_PRIORITY else FcfsQueue())  # S:223-231
        # S:227: requests that hold KV blocks while they wait (an asynchronous KV load);
        # the waiting loop drains it first (S:913-917).
        self.kv_holding_waiting: RequestQueue = (
            PriorityQueue() if cfg.policy == POLICY_PRIORITY else FcfsQueue())
        self.connector = (connector or Connector()) if cfg.kv_connector else None
        # S:434: requests still prefilling (an async load, or a chunk short of the
        # prompt), whose remaining blocks an async load must leave free (S:3088-3092).
        self._inflight_prefills: set[str] = set()
        # Finished requests whose blocks wait for their KV load to end (S:2700-2712):
        # they left every queue and still hold their blocks.
        self._delayed_free: dict[str, Request] = {}
        # S:186-191, 413-417: with two batches in flight (the AsyncScheduler) a consumer
        # connector's blocks are given back only once no step in flight may still write
        # them: each freed request's blocks wait, fenced by the step that last scheduled
        # it, until an output of that step has been processed.
        self._defer_block_free = self.connector is not None and cfg.async_scheduling
        self._sched_step_seq = 0
        self._processed_step_seq = 0
        self._last_sched_seq: dict[str, int] = {}
        self._deferred_frees: deque[tuple[int, list[KVBlock]]] = deque()
        self.running: list[Request] = []
        self.pool = BlockPool(cfg.num_gpu_blocks, cfg.enable_prefix_caching)
        self.table = kv_tables(cfg, self.pool)
        self._num_arrived = 0
        self._finished_ids: set[str] = set()
        self._aborted: list[str] = []  # aborted since the last record (FINISH_ABORT)
        self._pending: _ModelOutput | None = None  # async: schedule(k-1)'s output
        self.crashed = ""  # the assertion the engine died at ("" while it runs)
        # What the environment could have chosen in the last step (choice_space).
        self._accept_room: dict[str, int] = {}
        self._draft_ids: tuple[str, ...] = ()

    def __deepcopy__(self, memo: dict[int, object]) -> VllmV1Scheduler:
        """A copy that shares nothing mutable (the explorer branches on copies): each
        Request is copied once and the queues and the running list point at the copies; the
        pool and the block tables are copied together, so a block shared by requests or
        cached stays one block; the frozen config is shared."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        fresh = {rid: copy.copy(r) for rid, r in self.requests.items()}
        twin.requests = fresh
        twin.running = [fresh[r.request_id] for r in self.running]
        twin.waiting = _queue_copy(self.waiting, fresh)
        twin.kv_holding_waiting = _queue_copy(self.kv_holding_waiting, fresh)
        twin.pool, twin.table = copy.deepcopy((self.pool, self.table), memo)
        twin._finished_ids = set(self._finished_ids)
        twin._aborted = list(self._aborted)  # extended and cleared in place
        twin._accept_room = dict(self._accept_room)
        twin.connector = copied(self.connector)
        twin._inflight_prefills = set(self._inflight_prefills)
        twin._delayed_free = {rid: copy.copy(r) for rid, r in self._delayed_free.items()}
        twin._last_sched_seq = dict(self._last_sched_seq)
        twin._deferred_frees = copy.deepcopy(self._deferred_frees, memo)  # the pool's copies
        # The pending output names requests by id and holds no request object.
        return twin

    # ---- public API ----------------------------------------------------------------

    def add_request(self, spec: RequestSpec) -> None:
        """Add a request at the tail of `waiting` (S:2616-2634, 2457-2463). Its
        `arrival_time` is its position in the order of `add_request` calls."""
        if spec.id in self.requests or spec.id in self._finished_ids:
            raise InputError(f"request id {spec.id!r} was added twice; ids must be unique")
        if spec.prompt_len < 1 or spec.prompt_len >= self.cfg.max_model_len:
            raise InputError(
                f"request {spec.id!r}: prompt_len {spec.prompt_len} must be in "
                f"[1, max_model_len={self.cfg.max_model_len}) (vLLM's input processor "
                "rejects it, v1/engine/input_processor.py:574-602)")
        request = Request(
            request_id=spec.id,
            num_prompt_tokens=spec.prompt_len,
            max_tokens=spec.max_tokens,
            priority=spec.priority,
            arrival_time=self._num_arrived,
            prefix_group=spec.prefix_group,
            shared_prefix_len=spec.shared_prefix_len,
        )
        self._num_arrived += 1
        self.requests[spec.id] = request
        self.waiting.add_request(request)

    def abort(self, request_ids: Iterable[str]) -> tuple[str, ...]:
        """A client abort (`finish_requests(ids, FINISHED_ABORTED)`, S:2649-2712): each
        held request leaves `running` or `waiting` and frees its blocks like a finished
        one (S:2714-2749); ids already finished or not held are skipped. Returns the ids
        aborted, in the order given. The step's record lists them in `finished` with
        reason "abort", before the requests its output finished."""
        if self.crashed:  # a dead engine takes no more input
            return ()
        done = self._finish_requests(request_ids, Status.FINISHED_ABORTED)
        self._aborted.extend(done)
        return done

    def _finish_requests(self, request_ids: Iterable[str], status: Status
                         ) -> tuple[str, ...]:
        """`finish_requests(ids, status)` (S:2649-2712), one id at a time in the order
        given: each held request leaves its queue and is freed; a request waiting for a KV
        load the worker has not reported keeps its blocks until it does (S:2700-2707)."""
        done: list[str] = []
        for rid in request_ids:
            request = self.requests.get(rid)
            if request is None or rid in done:
                continue
            if request.status == Status.RUNNING:
                self.running = [r for r in self.running if r is not request]
            else:
                self.waiting.remove_requests({request})
                self.kv_holding_waiting.remove_requests({request})
            delay = False
            if request.status == Status.WAITING_FOR_REMOTE_KVS and self.connector is not None:
                delay = rid not in self.connector.finished_recving
                self.connector.finished_recving.discard(rid)
                self.connector.failed_recving.discard(rid)
            request.status = status
            self._free_request(request, delay_free_blocks=delay)
            done.append(rid)
        return tuple(done)

    def step(self, eos_ids: frozenset[str] = frozenset(),
             accepted: Mapping[str, int] | None = None,
             drafts: Mapping[str, int] | None = None,
             aborted_after_schedule: Sequence[str] = (),
             kv_loads: Sequence[KVLoadEvent] = ()) -> StepRecord:
        """Run one iteration. `eos_ids` are the requests whose token sampled in this step
        is EOS (the last token of the output processed in it); each must actually sample
        in this step, else InputError. Speculative decoding: `accepted[id]` drafts of the
        output processed in this step are accepted (default 0), and synchronously the
        drafter proposes `drafts[id]` drafts for the next step (default k).
        `aborted_after_schedule`: clients whose abort the engine applies after this
        step's `schedule()`, before its `update_from_output()` (core.py:676-680); an
        output for them is dropped (S:2091-2100). `kv_loads`: the KV connector's load
        reports in this step's output (model/vllm/connector.py)."""
        if self.crashed:
            self.current_step += 1
            return self._crash_record(self.crashed)
        out = self._schedule()
        if out.assertion:
            self.crashed = out.assertion
            return self._crash_record(out.assertion, out.zero_tokens)
        free_blocks = self.pool.num_free_blocks
        cache_facts = self._cache_facts(out)
        held = [*self.running, *self._queued()]
        num_computed = tuple((r.request_id, r.num_computed_tokens) for r in held)
        running_ids = tuple(r.request_id for r in self.running)
        held_blocks = {rid: self.table.held(rid) for rid in running_ids}
        group_blocks = ({rid: self.table.held_by_group(rid) for rid in running_ids}
                        if isinstance(self.table, GroupTables) else {})
        waiting_ids = tuple(r.request_id for r in self._queued())
        kv_held = self._kv_held()
        self._check_eos(out, eos_ids)
        samples = frozenset(rid for rid in out.num_scheduled_tokens
                            if not self.requests[rid].is_prefill_chunk)
        chosen = self._check_accepted(out, accepted or {})
        self._accept_room = {rid: n for rid, n in out.spec_scheduled.items()
                             if rid not in out.padded}
        output = _ModelOutput(out, samples, frozenset(eos_ids), chosen)
        self.abort(aborted_after_schedule)
        if kv_loads and self.connector is None:
            raise InputError("kv_loads are load reports of a KV connector, and the config has "
                             "none; set kv_connector or drop them")
        if not self.cfg.async_scheduling:
            finished = self._update_from_output(output)
            finished += self._update_from_kv_output(kv_loads)
            self._update_draft_token_ids(out, drafts or {})
            self._draft_ids = tuple(
                rid for rid in out.num_scheduled_tokens if self.cfg.drafts_vary
                and rid in self.requests and not self.requests[rid].is_prefill_chunk)
        else:  # core.py:698-792: this step delivers the previous schedule's output
            if drafts:
                raise InputError("drafts are not a choice under async scheduling: the "
                                 "AsyncScheduler gives every request k placeholder drafts "
                                 "itself (async_scheduler.py:50); drop the 'drafts' entries")
            finished = ()
            if self._pending is not None:  # the output processed, and the connector's part
                finished = self._update_from_output(self._pending)
                finished += self._update_from_kv_output(kv_loads)
            self._pending = output
        if cache_facts:
            released = self.pool.num_free_blocks - free_blocks
            cache_facts += (("released_blocks", released),)
        if self.cfg.async_scheduling:  # whose token the next step delivers
            cache_facts += (("sampled", tuple(r for r in out.num_scheduled_tokens
                                              if r in output.samples)),)
        if self.cfg.num_spec_tokens:  # blocks: lookahead and rolled-back drafts keep theirs
            cache_facts += (("spec_scheduled", dict(out.spec_scheduled)),
                            ("accepted", dict(chosen)))
        if self.cfg.num_spec_tokens or self.cfg.hybrid_kv:
            # With groups, blocks held are not cdiv(tokens, block_size): say them.
            cache_facts += (("blocks_held", held_blocks),)
        if isinstance(self.table, GroupTables):
            cache_facts += (("group_blocks", group_blocks),)
        if self.connector is not None:  # blocks held outside `running`, and what came back
            cache_facts += (("kv_held", kv_held),)
            if not self.cfg.enable_prefix_caching:  # (the cache facts say it otherwise)
                cache_facts += (("released_blocks", self.pool.num_free_blocks - free_blocks),)
        return StepRecord(
            step=self.current_step,
            scheduled=tuple(out.num_scheduled_tokens.items()),
            admitted=tuple(r.request_id for r in out.scheduled_new_reqs),
            resumed=tuple(r.request_id for r in out.scheduled_resumed_reqs),
            preempted=tuple(r.request_id for r in out.preempted_reqs),
            finished=self._take_aborted() + finished,
            free_blocks=free_blocks,
            num_computed_tokens=num_computed,
            running=running_ids,
            waiting=waiting_ids,
            token_budget_left=out.token_budget,
            extra=cache_facts,
        )

    def _kv_held(self) -> dict[str, int]:
        """With a KV connector, right after scheduling: the blocks of each request that
        holds some outside `running` (waiting for, or after, its load; finished while its
        load runs, S:2700-2712)."""
        if self.connector is None:
            return {}
        out = {r.request_id: self.table.held(r.request_id) for r in self._queued()}
        out.update({rid: self.table.held(rid) for rid in self._delayed_free})
        return {rid: n for rid, n in out.items() if n}

    def _queued(self) -> list[Request]:
        """The waiting requests in the order the waiting loop meets them:
        `kv_holding_waiting`, then `waiting` (S:913-917)."""
        return [*self.kv_holding_waiting, *self.waiting]

    def _take_aborted(self) -> tuple[tuple[str, str], ...]:
        """The step's aborts as `finished` entries, cleared for the next step."""
        out = tuple((rid, FINISH_ABORT) for rid in self._aborted)
        self._aborted.clear()
        return out

    def choice_space(self) -> tuple[dict[str, int], tuple[str, ...]]:
        """What the environment could choose in the step just run besides EOS: for each
        request with drafts scheduled (not padding), the most drafts it could accept; and
        the requests whose proposer could have proposed fewer than k drafts for the next
        step. A step run with other choices schedules the same."""
        return dict(self._accept_room), self._draft_ids

    def _crash_record(self, assertion: str, zero_tokens: Request | None = None) -> StepRecord:
        """The record of a step of an engine that has reached an assertion (see the
        module docstring): nothing done, the pool as it stood; at S:1170, the request
        that reached it listed as the admission (or resumption) asserted against, with 0
        tokens."""
        rid = () if zero_tokens is None else (zero_tokens.request_id,)
        resumed = zero_tokens is not None and zero_tokens.status == Status.PREEMPTED
        return StepRecord(step=self.current_step, scheduled=tuple((r, 0) for r in rid),
                          admitted=() if resumed else rid, resumed=rid if resumed else (),
                          preempted=(), finished=(), free_blocks=self.pool.num_free_blocks,
                          num_computed_tokens=(), extra=(("assertion", assertion),))

    def _check_accepted(self, out: _StepOutput,
                        accepted: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        """The accepted count of each request this schedule gave drafts, in its order (0
        unless given): the output of this schedule, as an EOS of this step names it (under
        async it is processed in the next step). InputError for a count above the drafts
        scheduled, for accepted placeholders, and for a request with no drafts."""
        room = dict(out.spec_scheduled)
        for rid in sorted(accepted):
            count = accepted[rid]
            if rid not in room:
                raise InputError(
                    f"accepted for request {rid!r} in step {self.current_step}: no draft "
                    "tokens of it are scheduled in that step; accept drafts only where "
                    "drafts were scheduled")
            if rid in out.padded and count:
                raise InputError(
                    f"accepted {count} for request {rid!r} in step {self.current_step}: its "
                    "drafts are padding placeholders (-1, scheduler.py:1371-1375), which the "
                    "verifier never accepts; give 0")
            if not 0 <= count <= room[rid]:
                raise InputError(
                    f"accepted {count} for request {rid!r} in step {self.current_step}: "
                    f"{room[rid]} draft tokens were scheduled; give 0..{room[rid]}")
        return tuple((rid, accepted.get(rid, 0)) for rid in room)

    def _update_draft_token_ids(self, out: _StepOutput, drafts: Mapping[str, int]) -> None:
        """`update_draft_token_ids` after a synchronous step (core.py:689-696,
        S:2550-2569): each request of the batch still held gets the drafter's proposals,
        except a prefill chunk, whose drafts are cleared. n-gram and suffix proposers may
        find fewer than k; model drafters propose k."""
        k = self.cfg.num_spec_tokens
        for rid in sorted(drafts):
            count = drafts[rid]
            if rid not in out.num_scheduled_tokens:
                raise InputError(
                    f"drafts for request {rid!r} after step {self.current_step}: it was not "
                    "scheduled in that step, so the drafter proposes nothing for it")
            if not 0 <= count <= k:
                raise InputError(f"drafts {count} for request {rid!r}: the drafter proposes "
                                 f"0..num_speculative_tokens={k}")
            if count != k and not self.cfg.drafts_vary:
                raise InputError(
                    f"drafts {count} for request {rid!r}: {self.cfg.speculative_method} always "
                    f"proposes num_speculative_tokens={k} drafts; only "
                    "ngram/ngram_gpu/suffix proposers may find fewer")
        if not k or not sum(out.num_scheduled_tokens.values()):  # core.py:689-696
            return
        for rid in out.num_scheduled_tokens:
            request = self.requests.get(rid)
            if request is None:  # finished in this step
                continue
            request.num_spec_tokens = 0 if request.is_prefill_chunk else drafts.get(rid, k)

    def _cache_facts(self, out: _StepOutput) -> tuple[tuple[str, object], ...]:
        """With prefix caching on, the record's extra facts, read right after scheduling:
        the prefix-hit tokens of each request admitted in this step, the blocks held
        (shared blocks counted once), and the cached and evictable block counts."""
        if not self.cfg.enable_prefix_caching:
            return ()
        # (a Mamba table's null block counts as block 0, as the harness reads its id)
        held = {0 if b is None else b.block_id for t in self.table.blocks.values() for b in t}
        return (("prefix_hits", dict(out.prefix_hits)), ("blocks_in_use", len(held)),
                ("cached_blocks", self.pool.num_cached_blocks()),
                ("evictable_blocks", self.pool.num_evictable_blocks()))

    def state_key(self, extra: Mapping[str, Hashable] | None = None) -> tuple[object, ...]:
        """The state with requests named by position (running order, then waiting order):
        what steers every later decision. arrival_time only breaks priority ties, so its
        relative rank is kept under PRIORITY and dropped under FCFS, where the deque order
        says it all; num_preemptions and the step counter steer nothing. `extra[id]` is
        appended to a request's entry (the explorer's per-request property history)."""
        held = [*self.running, *self._queued()]
        ranks = {id(r): k for k, r in enumerate(sorted(held, key=lambda r: r.arrival_time))}
        priority = self.cfg.policy == POLICY_PRIORITY
        extra = extra or {}

        def one(r: Request) -> tuple[object, ...]:
            return (r.status.value, r.num_prompt_tokens, r.max_tokens, r.num_output_tokens,
                    r.num_computed_tokens, self.table.held(r.request_id),
                    r.priority if priority else 0, ranks[id(r)] if priority else 0,
                    extra.get(r.request_id), r.prefix_group, r.shared_prefix_len,
                    *self._async_key(r), *self._spec_key(r), *self._groups_key(r),
                    *self._connector_key(r))
        key = (self.pool.num_free_blocks, tuple(one(r) for r in self.running),
               tuple(one(r) for r in self.waiting), self.crashed)
        if self.connector is not None:  # which queue; blocks of finished loads still held
            key += (tuple(one(r) for r in self.kv_holding_waiting),
                    tuple(sorted(self.table.held(rid) for rid in self._delayed_free)))
        if self._defer_block_free:  # deferred frees and in-flight fences, relative
            done = self._processed_step_seq
            key += (tuple((fence - done, len(blocks)) for fence, blocks in self._deferred_frees),
                    tuple(self._last_sched_seq.get(r.request_id, 0) > done for r in held))
        return key + self._cache_key(held) if self.cfg.enable_prefix_caching else key

    def _connector_key(self, r: Request) -> tuple[object, ...]:
        """A KV connector: whether the request still prefills (its reservation), its load
        is in flight, or reported and not yet taken up."""
        c = self.connector
        if c is None:
            return ()
        rid = r.request_id
        return (rid in self._inflight_prefills, rid in c.loading, rid in c.finished_recving)

    def _groups_key(self, r: Request) -> tuple[object, ...]:
        """Several KV cache groups: each group's table length (null blocks included, they
        steer later counts) and real blocks."""
        if not isinstance(self.table, GroupTables):
            return ()
        if isinstance(self.table, AlignTables):  # align mode: the junction steers chunks
            return (self.table.group_key(r.request_id), r.junction)
        return (self.table.group_key(r.request_id),)

    def _spec_key(self, r: Request) -> tuple[object, ...]:
        """Speculative decoding: the drafts the request carries, and under async what the
        pending output scheduled of them."""
        if not self.cfg.num_spec_tokens:
            return ()
        p = self._pending
        rid = r.request_id
        pending = () if p is None else (p.out.spec_scheduled.get(rid, 0), rid in p.out.padded,
                                        dict(p.accepted).get(rid, 0))
        return (r.num_spec_tokens, pending)

    def _async_key(self, r: Request) -> tuple[object, ...]:
        """Async: the request's placeholders and in-flight tokens, and what the pending
        output of the previous schedule holds for it."""
        if not self.cfg.async_scheduling:
            return ()
        p = self._pending
        rid = r.request_id
        pending = (() if p is None else
                   (p.out.num_scheduled_tokens.get(rid, 0), rid in p.samples, rid in p.eos_ids))
        return (r.num_output_placeholders, r.num_in_flight_tokens, r.num_stale_output_tokens,
                r.is_prefill_chunk, pending)

    def _cache_key(self, held: list[Request]) -> tuple[object, ...]:
        """The cache as it steers later decisions, with blocks and requests named by
        position: each held request's blocks, the cached tail of the free queue in order,
        and for a hash held by several blocks the order a lookup tries them. A request's
        own hash is named by its queue position; once the request has left, nothing can
        hit it again and it only keeps its place in the queue."""
        position = {r.request_id: k for k, r in enumerate(held)}
        names: dict[int, int] = {}

        def named(h: Hashable) -> Hashable:
            if isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], int):
                return (h[0], named(h[1]))  # Mamba align: (group id, hash)
            if isinstance(h, tuple) and h and h[0] == "r":
                return ("r", position[h[1]], h[2]) if h[1] in position else ("gone",)
            return h

        def block(b: KVBlock | None) -> tuple[object, ...]:
            if b is None:
                return ("null",)
            name = names.setdefault(b.block_id, len(names))
            h = b.block_hash
            return (name, None if h is None else named(h))

        if isinstance(self.table, AlignTables):
            tables = tuple(tuple(tuple(block(b) for b in t)
                                 for t in self.table.tables_of(r.request_id)) for r in held)
        else:
            tables = tuple(tuple(block(b) for b in self.table.blocks.get(r.request_id, ()))
                           for r in held)
        tail = tuple(block(b) for b in self.pool.evictable.values())
        copies = tuple(sorted((tuple(block(b) for b in blocks.values()))
                              for blocks in self.pool.cached.values() if len(blocks) > 1))
        return (tables, tail, copies)

    def views(self) -> tuple[RequestView, ...]:
        """Snapshots of every request held (running order, then waiting order)."""
        return tuple(self._view(r) for r in [*self.running, *self._queued()])

    def view(self, request_id: str) -> RequestView | None:
        """Snapshot of one held request, None if it is not (or no longer) held."""
        request = self.requests.get(request_id)
        return None if request is None else self._view(request)

    # ---- schedule() --------------------------------------------------------------------

    def _schedule(self) -> _StepOutput:
        """`Scheduler.schedule()` (S:591-1556), in scope."""
        self.current_step += 1
        if isinstance(self.table, AlignTables):  # S:632
            self.table.new_step_starts()
        out = _StepOutput(
            token_budget=self.cfg.token_budget,  # S:611, 137-141
            # S:614. Before 0.28.0 (VllmRules.input_budget off) there is one budget; a
            # second one that starts equal to it and is spent and given back with it
            # never binds on its own, so the loops below decide as 0.27.1's single one.
            input_budget=(self.cfg.max_num_batched_tokens if self.cfg.rules.input_budget
                          else self.cfg.token_budget),
        )
        num_eligible_reqs = (len(self.running) + len(self.waiting)  # S:643-644, 2608-2610
                             + len(self.kv_holding_waiting))
        threshold = effective_long_prefill_threshold(self.cfg, num_eligible_reqs)
        self._schedule_running(out, threshold)
        # S:900: no admission in a step that preempted (unless that gate is ablated)
        if not out.preempted_reqs or not self.cfg.rules.preemption_gate:
            self._schedule_waiting(out, threshold)
        if out.assertion:  # the engine dies inside schedule()
            return out
        self._check_constraints(out)
        # S:1549-1552: the fence advances with each step that schedules tokens.
        if self._defer_block_free and out.num_scheduled_tokens:
            self._sched_step_seq += 1
        self._update_after_schedule(out)
        return out

    def _schedule_running(self, out: _StepOutput, threshold: int) -> None:
        """The RUNNING loop, in list order (S:657-858)."""
        req_index = 0
        while req_index < len(self.running) and out.token_budget > 0:  # S:659
            request = self.running[req_index]
            if out.input_budget <= self.cfg.step_draft_slots:  # S:661
                break
            if (request.num_output_placeholders > 0  # S:664-677: async, max_tokens reached
                    and request.num_computed_tokens + 2 - request.num_output_placeholders
                    >= request.num_prompt_tokens + request.max_tokens):
                req_index += 1
                continue
            num_new_tokens = running_num_new_tokens(
                request, threshold, out.token_budget, out.input_budget, self.cfg.max_model_len,
                self.cfg.step_draft_slots)
            if isinstance(self.table, AlignTables):  # S:723-727: block-aligned chunks
                num_new_tokens = self._mamba_block_aligned_split(request, num_new_tokens)
            if num_new_tokens == 0:  # S:755-773: skip, do not break
                req_index += 1
                continue
            allocated = False
            while True:  # S:777-844
                if self._allocate_slots(request, num_new_tokens,
                                        lookahead=self.cfg.num_lookahead_tokens):
                    allocated = True
                    break
                if self._defer_block_free and not self._blocks_can_be_freed(
                        self._victim_candidate().request_id):
                    break  # S:803-806: a deferred free would not help this allocation
                victim, req_index = self._pop_victim(out, req_index)
                self._preempt_request(victim)  # S:836-840
                out.preempted_reqs.append(victim)  # S:841
                if victim is request:  # S:842-844: it preempted itself
                    break
            if not allocated:  # S:846-848: the RUNNING loop ends here
                break
            out.scheduled_running_reqs.append(request)  # S:851-858
            out.prefill_scheduled |= request.is_prefill_chunk  # S:852
            out.num_scheduled_tokens[request.request_id] = num_new_tokens
            out.token_budget -= num_new_tokens
            out.input_budget -= num_new_tokens + self.cfg.step_draft_slots
            req_index += 1
            if request.num_spec_tokens:  # S:861-876: trimmed to what was scheduled
                num_spec = (num_new_tokens + request.num_computed_tokens - request.num_tokens
                            - request.num_output_placeholders)
                if num_spec > 0:
                    out.spec_scheduled[request.request_id] = min(num_spec,
                                                                 request.num_spec_tokens)
                request.num_spec_tokens = 0

    def _victim_candidate(self) -> Request:
        """The request `_pop_victim` would take (S:796-802), not removed."""
        if self.cfg.policy != POLICY_PRIORITY:
            return self.running[-1] if self.cfg.rules.victim_latest else self.running[0]
        return max(self.running, key=lambda r: (r.priority, r.arrival_time))

    def _blocks_can_be_freed(self, request_id: str) -> bool:
        """`_request_blocks_can_be_freed` (S:2759-2764): no step in flight may still write
        the request's blocks."""
        return (not self._defer_block_free
                or self._last_sched_seq.get(request_id, 0) <= self._processed_step_seq)

    def _pop_victim(self, out: _StepOutput, req_index: int) -> tuple[Request, int]:
        """Choose and remove the preemption victim; return it and the fixed-up index.

        FCFS: `running[-1]` (S:802, 834). PRIORITY: the first maximum of
        (priority, arrival_time) in running order (S:796-800); if it sits before the
        current index the index moves back (S:809-812); if it was already scheduled in
        this step its tokens go back to both budgets (S:814-832). Before 0.28.0
        (VllmRules.priority_victim_reindex off; 0.27.1 S:595-613) the index moves back
        only for a victim already scheduled: one passed over earlier in the step leaves it
        a place ahead, and the request after the current one is passed over too.
        """
        if self.cfg.policy != POLICY_PRIORITY and self.cfg.rules.victim_latest:
            return self.running.pop(), req_index
        if self.cfg.policy != POLICY_PRIORITY:  # ablated: the oldest, which may be served
            victim = self.running[0]
        else:
            victim = max(self.running, key=lambda r: (r.priority, r.arrival_time))
        victim_index = self.running.index(victim)
        del self.running[victim_index]
        served = victim in out.scheduled_running_reqs
        if victim_index < req_index and (served or self.cfg.rules.priority_victim_reindex):
            req_index -= 1
        if served:
            out.scheduled_running_reqs.remove(victim)
            restored = out.num_scheduled_tokens.pop(victim.request_id)
            out.token_budget += restored
            out.input_budget += restored + self.cfg.step_draft_slots  # S:814-821
            out.spec_scheduled.pop(victim.request_id, None)
        return victim, req_index

    def _schedule_waiting(self, out: _StepOutput, threshold: int) -> None:
        """The WAITING loop (S:912-1395). Every failure to admit the head breaks the loop
        (strict head-of-line). A request is skipped (set aside and put back in front of its
        queue after the loop, S:904-909, 1391-1395) when its stale output is still in
        flight (reachable only with the preemption gate ablated) or, with a KV connector,
        while its asynchronous load runs, and when the loop starts such a load."""
        skipped_waiting: list[Request] = []
        skipped_holding: list[Request] = []
        self._admit_waiting(out, threshold, skipped_waiting, skipped_holding)
        for request in reversed(skipped_holding):  # S:1392-1393, in their order
            self.kv_holding_waiting.prepend_request(request)
        for request in reversed(skipped_waiting):  # S:1394-1395, in their order
            self.waiting.prepend_request(request)

    def _admit_waiting(self, out: _StepOutput, threshold: int,
                       skipped_waiting: list[Request], skipped_holding: list[Request]
                       ) -> None:
        """The WAITING loop's admissions (S:912-1387); the skipped requests are collected
        by the queue they go back to: `kv_holding_waiting` for one holding KV blocks
        (S:2445-2455), else `waiting`."""

        def skip(queue: RequestQueue) -> None:  # S:904-909
            request = queue.pop_request()
            holds = (request.num_computed_tokens > 0
                     or request.status == Status.WAITING_FOR_REMOTE_KVS)
            (skipped_holding if holds else skipped_waiting).append(request)

        while out.token_budget > 0:  # S:912
            # S:913-917: requests holding KV blocks are drained first.
            queue = self.kv_holding_waiting if self.kv_holding_waiting else self.waiting
            if not queue or out.input_budget <= self.cfg.step_draft_slots:  # S:918-919
                break
            # S:922-924; before 0.31.0 (VllmRules.active_seqs_cap off) the cap is
            # max_num_seqs (0.30.0 S:864), there being no max_num_active_seqs.
            seats = (self.cfg.max_num_active_reqs if self.cfg.rules.active_seqs_cap
                     else self.cfg.max_num_seqs)
            if len(self.running) >= seats:
                break
            request = queue.peek_request()
            if not self._ready_to_schedule(request):  # S:929-932: its load still runs
                skip(queue)
                continue
            # S:934-939 skips a request whose stale output is still in flight (S:904-910),
            # putting it back in order after the loop (S:1394-1395). With a batch queue of
            # two only the gate's ablation reaches it: a victim of schedule(k) is stale for
            # step k-1 only, delivered before schedule(k+1), and schedule(k) admits nothing
            # (S:900) unless the gate is off.
            if request.num_stale_output_tokens > 0:
                skip(queue)
                continue
            # S:960-967: a request with nothing computed (new, or preempted and reset to 0)
            # looks its prefix up; one whose KV load has finished keeps what it loaded
            # (S:1085-1093).
            hit: list[KVBlock] = []
            num_external, load_async = 0, False
            if request.num_computed_tokens == 0:
                if isinstance(self.table, AlignTables):  # K:289-321, C:796-931
                    cap = request.num_tokens - (1 if self.cfg.rules.cap_prefix_hit else 0)
                    found = self.table.find_hit(request.block_hashes(self.cfg.block_size),
                                                cap)
                    request.junction = found.junction  # S:960-967
                    hit = found  # type: ignore[assignment]
                elif self.cfg.enable_prefix_caching:
                    cap = request.num_tokens - (1 if self.cfg.rules.cap_prefix_hit else 0)
                    hit = self.table.longest_hit(request.block_hashes(self.cfg.block_size),
                                                 cap)  # K:289-300
                    if hit and self.cfg.eagle_block_drop:  # T:815-820: EAGLE recomputes one
                        hit = hit[:-1]
                if self.connector is not None:
                    # S:970-1042: the connector is shown the block-aligned local hit; a
                    # local hit is whole blocks here, so no partial tail is traded.
                    num_external, load_async = self.connector.num_new_matched_tokens(
                        request.request_id, self._hit_tokens(hit))
            num_computed_tokens = (request.num_computed_tokens + self._hit_tokens(hit)
                                   + num_external)
            if load_async:  # S:1109-1112: the load comes first, nothing is computed yet
                num_new_tokens = 0
                padded = None
            else:
                request_token_budget = min(out.token_budget,
                                           out.input_budget - self.cfg.step_draft_slots)
                # S:1129: num_tokens, not the prompt: a resumed request recomputes its
                # outputs.
                num_new_tokens = request.num_tokens - num_computed_tokens
                padded = self._pad_spec_decode(out, num_new_tokens, num_computed_tokens,
                                               threshold)
                if padded == 0:
                    break  # S:1149-1151: "prefer to not schedule than schedule un-padded"
                num_new_tokens = padded or num_new_tokens
                if 0 < threshold < num_new_tokens:  # S:1155-1156
                    num_new_tokens = threshold
                if (not self.cfg.enable_chunked_prefill
                        and num_new_tokens > request_token_budget):
                    break  # S:1160-1167
                num_new_tokens = min(num_new_tokens, request_token_budget)  # S:1169
                # S:1170 asserts num_new_tokens > 0. The budget left is >= 1 here (S:912,
                # 918-919), so only computed tokens covering every token reach it: a
                # prefix hit, which the cap of K:289-300 rules out unless that cap is
                # switched off (VllmRules.cap_prefix_hit), or a synchronous external hit
                # of the whole prompt, which nothing caps (the async one is cut to N-1,
                # S:3171-3172). The engine dies here, the request still at the queue's
                # head and nothing allocated for it.
                if num_new_tokens <= 0:
                    out.assertion = zero_tokens_assertion(
                        request.request_id, request.num_tokens,
                        resumed=request.status == Status.PREEMPTED,
                        external=num_external > 0)
                    out.zero_tokens = request
                    return
                if isinstance(self.table, AlignTables):  # S:1173-1192
                    num_new_tokens = self._mamba_block_aligned_split(
                        request, num_new_tokens, num_computed_tokens)
                    if num_new_tokens == 0:
                        break
                    if padded and num_new_tokens != 1 + self.cfg.num_spec_tokens:
                        # the split cut the padded rows: drop the padding, not shorten it
                        num_new_tokens, padded = 1, None
            if not self._allocate_slots(
                request,
                num_new_tokens,
                hit,
                full_sequence_must_fit=self.cfg.full_sequence_must_fit,  # S:1270
                has_scheduled_reqs=bool(self.running),  # S:1272
                lookahead=self.cfg.num_lookahead_tokens,  # S:1222-1227, 1261
                num_external=num_external,
                # S:1242-1251: an async load must leave the in-flight prefills' blocks.
                reserved_blocks=self._inflight_reserved_blocks() if load_async else 0,
                delay_cache=load_async,
            ):
                break  # S:1275-1282: head-of-line, no preemption from here
            if load_async:  # S:1320-1341: allocated, now wait for the KV
                request.status = Status.WAITING_FOR_REMOTE_KVS
                request.num_computed_tokens = num_computed_tokens
                self._inflight_prefills.add(request.request_id)
                assert self.connector is not None
                self.connector.loading.add(request.request_id)  # the worker starts it
                skip(queue)
                continue
            if self.cfg.enable_prefix_caching:
                # What it starts from: the hit (with a KV connector, also the external
                # tokens or what its load brought; without one a waiting request has
                # nothing computed, so this is the hit alone).
                out.prefix_hits[request.request_id] = num_computed_tokens
            queue.pop_request()  # S:1343-1345
            self.running.append(request)
            if request.status == Status.WAITING:  # S:1353-1356
                out.scheduled_new_reqs.append(request)
            else:
                out.scheduled_resumed_reqs.append(request)
            out.num_scheduled_tokens[request.request_id] = num_new_tokens  # S:1365-1367
            out.token_budget -= num_new_tokens
            out.input_budget -= num_new_tokens + self.cfg.step_draft_slots
            request.status = Status.RUNNING  # S:1368-1369
            request.num_computed_tokens = num_computed_tokens
            if num_computed_tokens + num_new_tokens < request.num_tokens:  # S:1377-1378
                self._inflight_prefills.add(request.request_id)
            if padded:  # S:1371-1375
                k = self.cfg.num_spec_tokens
                # Before 0.29.0 (pad_assertion off, 0.27.1 S:1076-1079) no assertion: the cut
                # request keeps its k placeholder drafts, rolled back with its output.
                if num_new_tokens != 1 + k and self.cfg.rules.pad_assertion:
                    line = PAD_ASSERTION_LINES.get(self.cfg.version, 1372)
                    out.assertion = (f"scheduler.py:{line} AssertionError: request "
                                     f"{request.request_id!r} was padded to 1 + {k} tokens "
                                     f"and the long-prefill threshold cut it to "
                                     f"{num_new_tokens} (assert num_new_tokens == 1 + "
                                     "num_spec_tokens)")
                    return
                out.spec_scheduled[request.request_id] = k
                out.padded.add(request.request_id)

    def _ready_to_schedule(self, request: Request) -> bool:
        """`_handle_blocked_waiting_request` (S:3175-3193) for the one blocked status in
        scope: a request waiting for its KV load is skipped until the load is reported,
        then promoted back to WAITING (PREEMPTED if it was preempted before)."""
        if request.status != Status.WAITING_FOR_REMOTE_KVS:
            return True
        assert self.connector is not None
        if request.request_id not in self.connector.finished_recving:
            return False
        self._update_waiting_for_remote_kv(request)
        request.status = Status.PREEMPTED if request.num_preemptions else Status.WAITING
        return True

    def _update_waiting_for_remote_kv(self, request: Request) -> None:
        """S:3123-3173: after a successful load its blocks are cached (with prefix
        caching), and a load of every token is cut one short so that one is left to
        compute and sample (S:3171-3172); after a failed one (policy "recompute"; under
        "fail" the request has ended) its blocks are freed and it has nothing computed."""
        assert self.connector is not None
        rid = request.request_id
        if rid in self.connector.failed_recving:  # S:3131-3147, policy "recompute"
            # Its computed tokens were set to 0 when the failure was reported: the blocks
            # go back, and the request starts again from a lookup (a cached tail may hit).
            self.table.free(rid)
            self.connector.failed_recving.remove(rid)
        else:
            # S:3154-3157: the loaded blocks are cached now (their caching was delayed,
            # K:602-605), before the cut.
            self.table.cache(rid, request.block_hashes(self.cfg.block_size),
                             request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1
        self.connector.finished_recving.remove(request.request_id)

    def _inflight_reserved_blocks(self) -> int:
        """`_inflight_prefill_reserved_blocks` (S:3088-3092): the blocks every in-flight
        prefill still needs to hold its whole sequence (S:3047-3066: with one full-attention
        group and no speculative decoding, cdiv(min(num_tokens, max_model_len), block_size)
        less the blocks it holds, at least 0)."""
        total = 0
        for rid in self._inflight_prefills:
            request = self.requests[rid]
            full = min(request.num_tokens, self.cfg.max_model_len)
            total += self.table.num_blocks_to_allocate_in_groups(rid, full, [])
        return total

    def _pad_spec_decode(self, out: _StepOutput, num_new_tokens: int,
                         num_computed_tokens: int, threshold: int) -> int | None:
        """Uniform-decode padding of a waiting request (S:1131-1153): with speculative
        decoding, a request with one token left to compute, admitted beside scheduled
        decodes (no prefill scheduled) or after a prefix hit, is scheduled 1+k tokens, k of
        them placeholder drafts, if they fit before max_model_len. Returns 1+k, 0 when the
        padded request does not fit the budget (the waiting loop then stops), or None."""
        k, rules = self.cfg.num_spec_tokens, self.cfg.rules
        # Before 0.30.0 (pad_after_prefix_hit off; 0.27.1 S:884-888) only beside scheduled
        # running requests, not after a prefix hit alone.
        after_hit = rules.pad_after_prefix_hit and num_computed_tokens > 0
        if not (k and num_new_tokens == 1 and not out.prefill_scheduled
                and (out.scheduled_running_reqs or after_hit)):
            return None
        if rules.threshold_skips_padding and 0 < threshold < 1 + k:  # vllm#54028's fix
            return None
        budget = min(out.token_budget, out.input_budget - self.cfg.step_draft_slots)
        if not rules.spec_pad_room:  # 0.28.0 S:943-950: no room or budget stops admission
            fits = num_computed_tokens + 1 + k <= self.cfg.max_model_len
            return 1 + k if fits and 1 + k <= budget else 0
        if num_computed_tokens + 1 + k + 1 > self.cfg.max_model_len:  # S:1141-1146
            return None
        return 0 if 1 + k > budget else 1 + k

    def _allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: list[KVBlock] | None = None,
        full_sequence_must_fit: bool = False,
        has_scheduled_reqs: bool = True,
        lookahead: int = 0,
        num_external: int = 0,
        reserved_blocks: int = 0,
        delay_cache: bool = False,
    ) -> bool:
        """`KVCacheManager.allocate_slots` (K:371-618), `hit` the prefix-cache blocks of a
        waiting request, `lookahead` the speculative slots reserved past the chunk
        (K:541-544; the full-sequence check leaves them out, 522-539). True when the blocks
        were allocated, False where upstream returns None. With one full-attention group
        the skipped-block step and the admission cap do nothing; with several groups each
        counts and allocates its own blocks of the one pool (model/vllm/kv_cache.py).
        A KV connector's hit adds `num_external` computed tokens that need slots like new
        ones (K:501-507, 560-571); an async load keeps `reserved_blocks` free for the
        in-flight prefills (K:573-579) and caches nothing until it ends (K:602-605)."""
        hit = hit or []
        if num_new_tokens == 0 and not hit and not num_external:  # K:474-482
            raise ValueError("num_new_tokens must be greater than 0 when there are no "
                             "computed tokens to adopt")
        table = self.table
        rid = request.request_id
        max_model_len = self.cfg.max_model_len
        local = request.num_computed_tokens + self._hit_tokens(hit)
        total_computed_tokens = min(local + num_external, max_model_len)  # K:501-507
        watermark_blocks = 0  # K:509-516
        if has_scheduled_reqs and request.status in (Status.WAITING, Status.PREEMPTED):
            watermark_blocks = self.cfg.watermark_blocks
        if isinstance(table, AlignTables):
            assert not num_external  # no KV connector beside KV cache groups
            return self._allocate_slots_align(table, request, num_new_tokens,
                                              hit if isinstance(hit, AlignHit) else None,
                                              full_sequence_must_fit, lookahead,
                                              watermark_blocks)
        if full_sequence_must_fit:  # K:522-539: a check only, nothing is reserved
            full_num_tokens = min(request.num_tokens, max_model_len)
            required = table.num_blocks_to_allocate_in_groups(
                rid, full_num_tokens, hit, total_computed_tokens, admission=True)
            if required + watermark_blocks > self.pool.num_free_blocks:
                return False
        num_tokens_need_slot = min(total_computed_tokens + num_new_tokens + lookahead,
                                   max_model_len)
        # K:546-558: free what fell out of a window, on the processed tokens (in-flight
        # ones excluded), even if the request is not scheduled after all.
        table.remove_skipped_blocks(rid, max(0, total_computed_tokens
                                             - request.num_in_flight_tokens))
        num_blocks = table.num_blocks_to_allocate_in_groups(  # K:560-571
            rid, num_tokens_need_slot, hit, local + num_external)
        if num_blocks + watermark_blocks > self.pool.num_free_blocks - reserved_blocks:
            return False  # K:573-579
        table.allocate(rid, hit, num_tokens_need_slot)  # K:581-600
        if delay_cache:  # K:602-605
            return True
        # K:607-616: cache the full blocks of finalized tokens, at allocation time.
        table.cache(rid, request.block_hashes(self.cfg.block_size),
                    min(total_computed_tokens + num_new_tokens, request.num_tokens))
        return True

    def _allocate_slots_align(self, table: AlignTables, request: Request,
                              num_new_tokens: int, hit: AlignHit | None,
                              full_sequence_must_fit: bool, lookahead: int,
                              watermark_blocks: int) -> bool:
        """`allocate_slots` (K:371-618) over the groups of Mamba's align mode
        (model/vllm/align_cache.py): the Mamba groups count the main model's tokens
        (computed plus scheduled, drafts included, K:541-544), the full-attention groups
        the slots with the lookahead."""
        rid = request.request_id
        total = min(request.num_computed_tokens + self._hit_tokens(hit),
                    self.cfg.max_model_len)  # K:501-507
        if full_sequence_must_fit:  # K:522-539
            full_num_tokens = min(request.num_tokens, self.cfg.max_model_len)
            required = table.count(rid, full_num_tokens, full_num_tokens, hit, total,
                                   admission=True)
            if required + watermark_blocks > self.pool.num_free_blocks:
                return False
        main_tokens = total + num_new_tokens  # K:541-544
        need_slot = min(main_tokens + lookahead, self.cfg.max_model_len)
        # K:546-558: on the processed tokens (in-flight ones excluded)
        table.remove_skipped_blocks(rid, max(0, total - request.num_in_flight_tokens))
        num_blocks = table.count(rid, need_slot, main_tokens, hit, total)  # K:560-571
        if num_blocks + watermark_blocks > self.pool.num_free_blocks:
            return False  # K:573-579
        table.allocate_align(rid, hit, need_slot, main_tokens, total)  # K:581-600
        self._cache_blocks(request, min(total + num_new_tokens, request.num_tokens))
        return True

    def _cache_blocks(self, request: Request, num_tokens: int) -> None:
        """`kv_cache_manager.cache_blocks` (K:607-616, A:58-78): the request's full
        blocks up to `num_tokens` tokens."""
        hashes = request.block_hashes(self.cfg.block_size)
        if isinstance(self.table, AlignTables):
            self.table.cache_align(request.request_id, hashes, num_tokens,
                                   request.num_prompt_tokens)
        else:
            self.table.cache(request.request_id, hashes, num_tokens)

    def _hit_tokens(self, hit: AlignHit | list[KVBlock] | None) -> int:
        """The tokens a prefix hit covers: its agreed length over the groups, or whole
        blocks of the one full-attention group."""
        if isinstance(hit, AlignHit):
            return hit.length
        return len(hit or ()) * self.cfg.block_size

    def _mamba_block_aligned_split(self, request: Request, num_new_tokens: int,
                                   num_computed_tokens: int | None = None) -> int:
        """`_mamba_block_aligned_split` (S:443-547) without prefill checkpoint blocks or
        fine-grained hits: a prefill chunk ends on a block boundary (unless the block is
        wider than a chunk may be), never past the last reusable boundary, at the next
        boundary when it starts inside a block, and at the junction of its prefix hit.
        `num_computed_tokens`: where the chunk starts (a waiting request's hit)."""
        bs = self.cfg.block_size
        start = (request.num_computed_tokens if num_computed_tokens is None
                 else num_computed_tokens)
        prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
        if start >= prefill_end:
            return num_new_tokens
        drop = self.cfg.eagle_block_drop
        last_cache_position = prefill_checkpoint_position(request.num_tokens, bs, drop)
        end = start + num_new_tokens
        if end < prefill_end:  # S:505-514
            max_prefill = self.cfg.token_budget
            if self.cfg.prefill_threshold > 0:
                max_prefill = min(max_prefill, self.cfg.prefill_threshold)
            aligned_end = end // bs * bs
            if aligned_end > start or bs <= max_prefill:
                end = aligned_end
        next_boundary = (start // bs + 1) * bs
        junction = request.junction
        floored = start + (junction - start) // bs * bs  # S:527-536
        stops = (next_boundary if start % bs else 0, last_cache_position,
                 floored if start < junction < end else 0)
        end = min((s for s in stops if start < s < end), default=end)
        return max(end - start, 0)

    def _preempt_request(self, request: Request) -> None:
        """`_preempt_request` (S:1571-1614); the caller already removed it from running.
        Blocks freed, progress reset, outputs kept, back to the waiting queue's front
        (FCFS appendleft; PRIORITY heap insert)."""
        assert request.status == Status.RUNNING  # S:1584-1586
        self._free_request_blocks(request.request_id)  # S:1589
        self._inflight_prefills.discard(request.request_id)  # S:1591
        request.status = Status.PREEMPTED  # S:1592
        request.num_computed_tokens = 0  # S:1593
        # S:1597-1607: async output in flight is still delivered, but as stale.
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.num_spec_tokens = 0  # S:1594-1595
        request.num_preemptions += 1  # S:1608
        self.waiting.prepend_request(request)  # S:1613

    def _check_constraints(self, out: _StepOutput) -> None:
        """The assertions of S:1404-1408. (S:1409, `len(running) <= max_num_seqs`, holds
        only for configs vLLM accepts; it is a property we check, not an assertion here.)"""
        assert sum(out.num_scheduled_tokens.values()) <= self.cfg.token_budget
        assert out.token_budget >= 0
        assert out.input_budget >= 0

    def _update_after_schedule(self, out: _StepOutput) -> None:
        """`num_computed_tokens` advances at schedule time (S:1616-1642); a chunk that
        does not finish what the request lacks is a prefill chunk (samples nothing). Async:
        every other scheduled request gets an output placeholder (A:25-56)."""
        for rid, num_tokens in out.num_scheduled_tokens.items():
            request = self.requests[rid]
            request.num_computed_tokens += num_tokens
            request.num_in_flight_tokens += num_tokens
            if self._defer_block_free:  # S:1631-1633: the step that may still write its KV
                self._last_sched_seq[rid] = self._sched_step_seq
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders)
            if not request.is_prefill_chunk:  # S:1641-1642
                self._inflight_prefills.discard(rid)
            if self.cfg.async_scheduling and not request.is_prefill_chunk:  # A:25-56
                request.num_output_placeholders += 1 + out.spec_scheduled.get(rid, 0)
                request.num_spec_tokens = self.cfg.num_spec_tokens

    # ---- update_from_output() ----------------------------------------------------------

    def _check_eos(self, out: _StepOutput, eos_ids: Iterable[str]) -> None:
        """Reject an EOS for a request that samples nothing in this step."""
        for rid in sorted(eos_ids):
            request = self.requests.get(rid)
            reason = None
            if request is None:
                reason = ("it has already finished" if rid in self._finished_ids
                          else "it has not arrived")
            elif rid not in out.num_scheduled_tokens:
                reason = "it is not scheduled in this step"
            elif request.is_prefill_chunk:  # S:1634-1636: a partial chunk samples nothing
                reason = (f"its chunk is a partial prefill (num_computed_tokens "
                          f"{request.num_computed_tokens} < num_tokens {request.num_tokens})")
            if reason is not None:
                raise InputError(
                    f"eos for request {rid!r} in step {self.current_step}: the request "
                    f"samples no token in that step ({reason}); EOS can only be the token "
                    "a request samples")

    def _update_from_output(self, output: _ModelOutput) -> tuple[tuple[str, str], ...]:
        """`update_from_output` (S:2026-2295) with a fake model output: one token for each
        request that samples in `output`; it is EOS exactly for `output.eos_ids`.

        Async, the output is one step old: a request that finished meanwhile gets nothing
        (2091-2100), one preempted meanwhile still gets its stale token (2080-2103) and may
        finish from the waiting queue; outputs free their placeholders and, for a running
        request, cache its now computed blocks (A:58-78)."""
        if self._defer_block_free and output.out.num_scheduled_tokens:  # S:2044-2048
            self._processed_step_seq += 1
            self._drain_deferred_frees()
        finished: list[tuple[str, str]] = []
        accepted = dict(output.accepted)
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        for rid, num_tokens in output.out.num_scheduled_tokens.items():  # scheduled order
            request = self.requests.get(rid)
            if request is None:  # finished (and freed) since
                continue
            request.num_in_flight_tokens -= num_tokens
            stale = request.num_stale_output_tokens > 0
            if stale:
                request.num_stale_output_tokens -= num_tokens
            if rid not in output.samples:
                continue
            status_before = request.status
            num_accepted = accepted.get(rid, 0)
            num_spec = output.out.spec_scheduled.get(rid, 0)
            if num_spec and not stale:  # S:2108-2128: rejected drafts roll back
                rejected = num_spec - num_accepted
                if request.num_computed_tokens > 0:
                    request.num_computed_tokens -= rejected
                if request.num_output_placeholders > 0:
                    request.num_output_placeholders -= rejected
            # S:2493-2510: tokens appended one by one, check_stop after each; the last one
            # is EOS when chosen.
            reason, delivered = None, 0
            while reason is None and delivered < 1 + num_accepted:
                delivered += 1
                request.num_output_tokens += 1  # S:2501-2502
                reason = self._check_stop(request, rid in output.eos_ids
                                          and delivered == 1 + num_accepted)  # S:2506
            if self.cfg.async_scheduling:
                if not stale:
                    request.num_output_placeholders -= delivered
                    assert request.num_output_placeholders >= 0  # A:71
                if status_before == Status.RUNNING:
                    self._cache_blocks(request, request.num_computed_tokens
                                       - request.num_output_placeholders)
            if reason is None:
                continue
            request.status = (Status.FINISHED_STOPPED if reason == FINISH_STOP
                              else Status.FINISHED_LENGTH_CAPPED)
            self._free_request(request)  # S:2228-2230
            finished.append((rid, reason))
            (stopped_running if status_before == Status.RUNNING else stopped_waiting).add(request)
        if stopped_running:  # S:2293-2300
            self.running = [r for r in self.running if r not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
        return tuple(finished)

    def _check_stop(self, request: Request, sampled_eos: bool) -> str | None:
        """`check_stop` order (U:98-119): EOS first ("stop"), then `num_tokens >=
        max_model_len` or `num_output_tokens >= max_tokens` ("length")."""
        if sampled_eos:
            return FINISH_STOP
        if (request.num_tokens >= self.cfg.max_model_len
                or request.num_output_tokens >= request.max_tokens):
            return FINISH_LENGTH
        return None

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> None:
        """Free the blocks and forget the request (S:2714-2749); with `delay_free_blocks`
        (a KV load still running into them) the blocks stay held until the load is
        reported (S:3226-3229)."""
        rid = request.request_id
        self._inflight_prefills.discard(rid)  # S:2721
        del self.requests[rid]
        self._finished_ids.add(rid)
        if delay_free_blocks:
            self._delayed_free[rid] = request
        else:
            self._free_request_blocks(rid)

    def _free_request_blocks(self, request_id: str) -> None:
        """`_free_request_blocks` (S:2766-2776): free now, or, when a step in flight may
        still write the blocks (S:2759-2764), take them from the request and give them back
        once that step's output has been processed (`_drain_deferred_frees`)."""
        if self._blocks_can_be_freed(request_id):
            self.table.free(request_id)
            return
        blocks = self.table.pop_blocks_for_free(request_id)
        if blocks:
            self._deferred_frees.append((self._sched_step_seq, blocks))

    def _drain_deferred_frees(self) -> None:
        """S:2788-2801: give back the deferred blocks whose fence step has been processed,
        in order, stopping at the first still pending; last block first."""
        while self._deferred_frees and self._deferred_frees[0][0] <= self._processed_step_seq:
            _, blocks = self._deferred_frees.popleft()
            self.pool.free_blocks(reversed(blocks))

    def _update_from_kv_output(self, kv_loads: Sequence[KVLoadEvent]
                               ) -> tuple[tuple[str, str], ...]:
        """The KV connector's part of `update_from_output`, after its main loop (the
        requests it names are not scheduled, so that loop passes them by): the reports of
        loads in flight; a failed one ends its request with FINISHED_ERROR under the
        default policy "fail" (S:2058-2061, 2306-2325, 3341-3354), in the order reported;
        then every reported load is taken up (S:2329-2330, 3209-3235): a request still
        waiting for it may be promoted from the next schedule() on, a finished one frees
        its blocks. Returns the requests ended, as `finished` entries."""
        if self.connector is None:
            return ()
        reports = self.connector.reports(kv_loads)
        failed = [e.id for e in reports if e.failed and e.id in self.requests
                  and self.requests[e.id].status == Status.WAITING_FOR_REMOTE_KVS]
        errors: tuple[str, ...] = ()
        if self.cfg.kv_load_failure_policy == "recompute":  # S:3349-3352
            for rid in failed:
                self.requests[rid].num_computed_tokens = 0
                self.connector.failed_recving.add(rid)
        else:
            errors = self._finish_requests(failed, Status.FINISHED_ERROR)
        for event in reports:
            self.connector.loading.discard(event.id)
            request = self.requests.get(event.id)
            if request is not None and request.status == Status.WAITING_FOR_REMOTE_KVS:
                self.connector.finished_recving.add(event.id)
            else:  # S:3227-3229: finished meanwhile, its blocks were kept for the load
                self._delayed_free.pop(event.id)
                self._free_request_blocks(event.id)
        return tuple((rid, FINISH_ERROR) for rid in errors)

    def _view(self, r: Request) -> RequestView:
        return RequestView(
            request_id=r.request_id, status=r.status.value,
            num_prompt_tokens=r.num_prompt_tokens, num_output_tokens=r.num_output_tokens,
            num_tokens=r.num_tokens, num_computed_tokens=r.num_computed_tokens,
            num_preemptions=r.num_preemptions,
            blocks_held=self.table.held(r.request_id),
            priority=r.priority, arrival_time=r.arrival_time,
            num_output_placeholders=r.num_output_placeholders,
        )


# ---------------------------------------------------------------------------------------
# Driving a whole workload
# ---------------------------------------------------------------------------------------



def kv_tables(cfg: Config, pool: BlockPool) -> BlockTable | GroupTables:
    """The KV cache manager's tables for `cfg`'s groups: one full-attention group is the
    `BlockTable` (with or without prefix caching); several groups are the coordinator
    without prefix caching over one table per group (K:132-200, C:995-1008), or with
    prefix caching the coordinator over full-attention and Mamba-align groups
    (model/vllm/align_cache.py)."""
    if not cfg.hybrid_kv:
        return BlockTable(pool, cfg.block_size)
    if cfg.enable_prefix_caching:  # C:609-931 (C:524-591 for one group): align mode
        managers: list[GroupManager] = [
            MambaAlignTable(pool, cfg.block_size, gid, cfg.num_spec_tokens)
            if group.kind == GROUP_MAMBA else CachedFullTable(pool, cfg.block_size, gid)
            for gid, group in enumerate(cfg.kv_cache_groups)]
        return AlignTables(pool, managers, cfg.block_size, cfg.eagle_block_drop)
    tables: list[GroupTable] = []
    for group in cfg.kv_cache_groups:
        if group.kind == GROUP_SLIDING:
            tables.append(SlidingWindowTable(pool, cfg.block_size, group.sliding_window,
                                             cfg.sliding_window_cap(group.sliding_window)))
        elif group.kind == GROUP_MAMBA:
            tables.append(MambaTable(pool, cfg.max_model_len, cfg.num_spec_tokens))
        else:
            tables.append(GroupTable(pool, cfg.block_size))
    return GroupTables(pool, tables)


def iter_steps(workload: Workload) -> Iterator[tuple[tuple[RequestView, ...], StepRecord]]:
    """Run `workload.steps` steps, yielding for each the requests held just before its
    `schedule()` (after that step's arrivals) and its record.

    Before step s, the requests with `arrival_step == s` are added in workload list order
    (so `arrival_time` is the position in `workload.arrival_order()`); the eos, accepted
    and drafts entries of step s are passed to that step.
    """
    check_eos_steps(workload)
    if (workload.accepted or workload.drafts) and not workload.config.num_spec_tokens:
        raise InputError("the workload gives 'accepted' or 'drafts' choices but its config "
                         "has no speculative decoding; set speculative_method and "
                         "num_speculative_tokens or drop them")
    scheduler = VllmV1Scheduler(workload.config, Connector.of(workload.kv_hits))
    arrivals, eos = workload.arrivals_by_step(), workload.eos_ids_by_step()
    accepted, drafts = workload.accepted_by_step(), workload.drafts_by_step()
    aborts_before = workload.aborts_by_step(after_schedule=False)
    aborts_after = workload.aborts_by_step(after_schedule=True)
    kv_loads = workload.kv_loads_by_step()
    for step in range(1, workload.steps + 1):
        for spec in arrivals.get(step, ()):
            scheduler.add_request(spec)
        scheduler.abort(aborts_before.get(step, ()))
        before = scheduler.views()
        yield before, scheduler.step(eos.get(step, frozenset()), accepted.get(step),
                                     drafts.get(step), aborts_after.get(step, ()),
                                     kv_loads.get(step, ()))


def simulate(workload: Workload) -> tuple[StepRecord, ...]:
    """The records of `workload.steps` steps (see `iter_steps` for arrivals and eos)."""
    return tuple(record for _, record in iter_steps(workload))


PHASE_PREFILL = "prefill"
PHASE_DECODE = "decode"


def chunk_phase(before: RequestView, num_new_tokens: int) -> str:
    """Name a scheduled chunk for display. vLLM has no phase field (S:593-602): a chunk
    is a "decode" when it is the one newest sampled token of a request that already has
    output (num_computed_tokens == num_tokens - 1); anything else, including the
    recomputation of a resumed request's prompt and outputs, is a "prefill" chunk."""
    # With the AsyncScheduler an output still in flight counts (A:25-56): its token is the
    # one decoded.
    known = before.num_tokens + before.num_output_placeholders
    is_decode = (num_new_tokens == 1
                 and before.num_output_tokens + before.num_output_placeholders > 0
                 and before.num_computed_tokens == known - 1)
    return PHASE_DECODE if is_decode else PHASE_PREFILL
