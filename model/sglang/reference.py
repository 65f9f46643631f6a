"""Reference scheduler for SGLang (v0.5.22): an imperative port of the non-overlap event loop
(`event_loop_normal`), `get_next_batch_to_run`, `PrefillAdder`, `update_running_batch`
and `retract_decode`, written to be read beside the upstream files.

Scope: any page size (`page_size`: 1 is the token allocator, more the paged one; the pool
is counted in tokens, always whole pages), one TP/DP/PP rank, EAGLE/EAGLE3 speculative
decoding on the synchronous spec-v2 path (a KV row past the committed length, the verify's
accepted runs from the workload; docs/sglang_model.md), no other speculative algorithm,
LoRA, grammar, multimodal, disaggregation, hierarchical cache, priority scheduling or
prefill delayers, `ignore_eos` off, the non-overlap loop. The radix cache is abstracted: a
request's `cached_prefix_len` tokens are found in the cache at every admission while the
cache is on (they live outside the modelled pool), and KV that upstream keeps as evictable
tree nodes is counted as free, as admission (`available + evictable`,
prefill_budget.py:90-96) and the decode check (evict then compare,
mem_cache/allocator/base.py:160-174) both do. A fully cached prompt recomputes its last
token (the match stops at fill - 1, B:1696-1706), and the tree keeps its own copy when the
request's KV is checkpointed after the prefill, freeing the request's duplicate
(mem_cache/unified_radix_cache.py:1080-1154). With a page size P > 1 a match is whole
pages (the tree's keys are page-aligned, unified_radix_cache.py:1148), a request holds
`ceil(len / P) - hit / P` pages, and the tree holds a copy only of a fully cached prompt of
whole pages (its last page is recomputed, then freed). With the cache on, the model
assumes a retracted request's prompt leaves the tree at its retraction
(`retracted_prompt_evicted` says when that is sure); upstream may otherwise find it again
at re-admission.

Citations (paths relative to `sglang/srt/`, v0.5.22):
  S  = managers/scheduler.py              P  = managers/schedule_policy.py
  B  = managers/schedule_batch.py         PB = mem_cache/prefill_budget.py
  T  = managers/scheduler_components/new_token_ratio_tracker.py
  BR = managers/scheduler_components/batch_result_processor.py

The code is our own; loops and `break` sit where upstream has them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction

from model.core.errors import InputError
from model.core.memo import CopiedByFields
from model.core.types import FINISH_LENGTH, FINISH_STOP, RequestSpec, StepRecord
from model.sglang.config import (
    CLIP_MAX_NEW_TOKENS,
    POLICY_LOF,
    WAITING_QUEUE_PREFIX_MATCH_MAX,
    Config,
)

FINISH_ABORT = "abort"  # FINISH_ABORT: the lone request that cannot decode (B:3352-3374)


def retracted_prompt_evicted(cfg: Config, requests: Sequence[RequestSpec]) -> bool:
    """Whether the model's radix-cache abstraction holds for these requests: with the
    cache on, no retracted request can find its own prompt in the tree again.

    A retraction frees the request's KV but leaves its prompt in the tree as evictable
    nodes (B:2258-2274, mem_cache/common.py:378-422); it then evicts until
    `remaining x SGLANG_RETRACT_DECODE_STEPS` tokens are available (allocator/base.py:
    144-158). At `retract_decode_steps >= max_total_num_tokens` that empties every
    evictable node, so the prompt is gone; a pool of at least every prompt plus its
    max_tokens, each in whole pages, never retracts (a decoding request has at most
    prompt + max_tokens - 2 tokens in KV, so a page for each request on a page boundary
    always remains; under EAGLE each request's row reaches at most its committed length
    plus the decode reserve, so the reserve is added to each request's need). Otherwise a
    re-admitted request can match its old prompt and extend less than the model's
    recomputation."""
    reserve = cfg.decode_reserve if cfg.speculative else 0
    if cfg.disable_radix_cache or cfg.retract_decode_steps >= cfg.max_total_num_tokens:
        return True
    return cfg.max_total_num_tokens >= sum(cfg.pages(r.prompt_len + r.max_tokens + reserve)
                                           for r in requests)

BATCH_PREFILL = "prefill"
BATCH_MIXED = "mixed"
BATCH_DECODE = "decode"
BATCH_IDLE = "idle"


class AddReqResult(Enum):
    """`AddReqResult` (P:567-570)."""

    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


@dataclass(slots=True, eq=False)
class Req(CopiedByFields):
    """The per-request state the scheduler keeps (B `Req`). Identity equality, as upstream.

    `kv` counts the request's own tokens in the pool; `prefix_len` the tokens whose KV
    exists (cache hit + own), upstream's `prefix_len`/`extend_end` and
    `kv.kv_committed_len`; `allocated` is `kv.kv_allocated_len`, the KV row's end (past
    `prefix_len` only under speculative decoding, B:932-938); `output_len` is
    `len(output_ids)` (every token of an accepted run, B:1019-1030 of the processor)."""

    rid: str
    prompt_len: int
    max_new_tokens: int
    cached_prefix_len: int
    arrival: int
    output_len: int = 0
    kv: int = 0
    prefix_len: int = 0
    allocated: int = 0
    extend_len: int = 0  # tokens computed for it in this step's batch
    is_retracted: bool = False
    retraction_count: int = 0
    finished_reason: str | None = None

    @property
    def fill_len(self) -> int:
        """`len(full_untruncated_fill_ids)`: prompt plus outputs (B:1633-1635)."""
        return self.prompt_len + self.output_len

    def finished(self) -> bool:
        """`Req.finished()`."""
        return self.finished_reason is not None


@dataclass(slots=True)
class Batch:
    """A ScheduleBatch as far as the scheduler reads it: its kind and requests."""

    kind: str
    reqs: list[Req]
    chunked_req: Req | None = None


class RatioTracker:
    """`NewTokenRatioTracker` (T:13-49) in exact fractions."""

    def __init__(self, cfg: Config) -> None:
        self.init = cfg.ratio_init()
        self.min = cfg.ratio_floor()
        self.decay = cfg.ratio_decay()
        self.current = self.init

    def decay_step(self) -> None:
        """`max(current - decay, min)` (T:34-35)."""
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        """Back to the initial ratio (T:37-38)."""
        self.current = self.init


def estimate_ratio_after_retract(reqs: list[Req], retract_decode_steps: int) -> Fraction:
    """`(Σ outputs + steps·n) / (Σ max_new + 1)`, capped at 1 (T:40-49)."""
    decoded = sum(r.output_len for r in reqs)
    max_new = sum(r.max_new_tokens for r in reqs)
    return min(Fraction(1), Fraction(decoded + retract_decode_steps * len(reqs), max_new + 1))


def running_reservation(r: Req, ratio: Fraction) -> Fraction:
    """`_get_running_request_total_token_offset` (P:754-764): the remaining outputs,
    clipped at 4096, times the ratio (ignore_eos is off)."""
    return min(r.max_new_tokens - r.output_len, CLIP_MAX_NEW_TOKENS) * ratio


class PrefillAdder:
    """`PrefillAdder` (P:581-1600) with `PrefillBudget` (PB:62-168). KV budgets are charged
    page-rounded extends plus one page per request; without exact chunk fill (a gfx95-only
    switch, P:91-99) the compute budgets are charged the page-rounded extend too (P:872-897)."""

    def __init__(self, free: int, running: list[Req], ratio: Fraction, rem_input: int,
                 rem_chunk: int | None, mixed_decode_tokens: int, page_size: int = 1) -> None:
        self.page_size = page_size
        self.free = free  # available + evictable (PB:90-96); fixed during the pass
        self.rem_input_tokens = rem_input - mixed_decode_tokens  # P:607
        self.rem_chunk_tokens = (None if rem_chunk is None
                                 else rem_chunk - mixed_decode_tokens)  # P:623-624
        self.total_offset: Fraction = Fraction(mixed_decode_tokens)  # PB:72
        self.current_offset = mixed_decode_tokens  # PB:73
        self.total_offset += sum((running_reservation(r, ratio) for r in running),
                                 Fraction(0))  # P:642-649
        self.can_run_list: list[Req] = []
        self.new_chunked_req: Req | None = None

    @property
    def rem_total_tokens(self) -> Fraction:
        """Free tokens less every reservation (PB:99-101)."""
        return self.free - self.total_offset

    @property
    def cur_rem_tokens(self) -> int:
        """Free tokens less what this batch takes now (PB:103-105)."""
        return self.free - self.current_offset

    def budget_state(self) -> AddReqResult:
        """NO_TOKEN when memory is spent, OTHER when a compute budget is (P:830-849)."""
        if not (self.rem_total_tokens > 0 and self.cur_rem_tokens > 0):  # PB:111-112
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _pages(self, tokens: int) -> int:
        """`ceil_paged_tokens` (P:827-828)."""
        return -(-tokens // self.page_size) * self.page_size

    def _charge(self, extend: int, max_new: int) -> None:
        """`_update_prefill_budget` (P:851-900) and `reserve` (PB:155-167): the extend
        rounded up to pages, one page of slack per request, the output reservation only
        in the total."""
        paged = self._pages(extend)
        self.total_offset += paged + self.page_size + max_new
        self.current_offset += paged + self.page_size
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged

    def add_chunked_req(self, req: Req) -> Req | None:
        """The continuing chunk, always admitted first (P:1092-1173): as much as the chunk
        budget and memory allow, or the whole chunk budget when memory is spent
        (PB:141-144, "must make progress"). The continuation is not page-aligned (no KV
        sharding, P:1100-1108). None when this is its last chunk."""
        assert self.rem_chunk_tokens is not None
        available = min(self.rem_chunk_tokens, math.trunc(self.rem_total_tokens))
        limit = available if available > 0 else self.rem_chunk_tokens
        remaining = req.fill_len - req.prefix_len
        truncated = remaining > limit
        req.extend_len = min(remaining, limit)
        self.can_run_list.append(req)
        self._charge(req.extend_len,
                     0 if truncated else min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS))
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddReqResult:
        """`add_one_req` and `_select_prefill_admission` (P:1336-1584). The verdict is for
        the next candidate: `req` may already be admitted when it is not CONTINUE."""
        max_new_left = min(max(req.max_new_tokens - req.output_len, 0), CLIP_MAX_NEW_TOKENS)
        extend = req.fill_len - req.prefix_len
        total_tokens = extend + max_new_left + self.page_size  # P:1345-1352, raw extend
        if not total_tokens < self.rem_total_tokens:  # PB:114-129, strict
            return AddReqResult.NO_TOKEN
        paged = self._pages(extend)  # P:1516-1520: the fit tests use the paged extend
        # Without chunking, only the first request may exceed the input cap (P:1530-1536).
        if (self.rem_chunk_tokens is None and self.can_run_list
                and paged >= self.rem_input_tokens):
            return AddReqResult.OTHER
        max_new = min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)  # P:1542: not the remainder
        chunked = False
        if self.rem_chunk_tokens is not None and paged > self.rem_chunk_tokens:  # P:1549
            # Whole pages of the budget, the chunk's end on a page boundary (P:1567-1573).
            budget = self.rem_chunk_tokens // self.page_size * self.page_size
            end = (req.prefix_len + budget) // self.page_size * self.page_size
            extend = end - req.prefix_len
            if extend <= 0:
                return AddReqResult.OTHER
            chunked, max_new = True, 0
        req.extend_len = extend
        self.can_run_list.append(req)  # P:1586-1606
        if chunked:
            self.new_chunked_req = req
        self._charge(extend, max_new)
        return self.budget_state()


@dataclass(slots=True)
class _StepFacts:
    """What one iteration did, for the StepRecord."""

    kind: str = BATCH_IDLE
    scheduled: list[tuple[str, int]] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    retracted: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    rem_input: int | None = None
    rem_chunk: int | None = None
    rem_total: Fraction | None = None
    ratio: Fraction = Fraction(0)


class SGLangScheduler:
    """SGLang's scheduler, one `step()` = one iteration of `event_loop_normal`
    (S:1940-1973): merge the last prefill batch, form a prefill batch or else decode,
    run it with a fake model output, process the results."""

    #: `model.run.iter_records` passes a step's accepted counts (EAGLE's verify outcomes).
    takes_accepted = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.current_step = 0
        self.free = cfg.max_total_num_tokens
        self.waiting: list[Req] = []
        self.running: list[Req] = []  # running_batch.reqs; may hold finished requests
        self.batch_is_full = False
        self.chunked_req: Req | None = None
        self.last_batch: Batch | None = None
        self.ratio = RatioTracker(cfg)
        self.requests: dict[str, Req] = {}
        self._num_arrived = 0
        self._finished_ids: set[str] = set()
        # The last extend batch was appended to a non-empty running batch, so it is a
        # batch of its own still listing its requests (see `_is_fully_idle`).
        self._last_apart = False
        self.last_verified: tuple[str, ...] = ()

    # ---- public API ------------------------------------------------------------------

    def add_request(self, spec: RequestSpec) -> None:
        """Append an arrived request to the waiting queue's tail (S:3353-3368), with
        max_new_tokens clipped as `init_req_max_new_tokens` does (S:2585-2630)."""
        if spec.id in self.requests or spec.id in self._finished_ids:
            raise InputError(f"request id {spec.id!r} was added twice; ids must be unique")
        check_prompt(self.cfg, spec)
        req = Req(rid=spec.id, prompt_len=spec.prompt_len,
                  max_new_tokens=self.cfg.clip_max_new_tokens(spec.prompt_len, spec.max_tokens),
                  cached_prefix_len=spec.cached_prefix_len, arrival=self._num_arrived)
        self._num_arrived += 1
        self.requests[spec.id] = req
        self.waiting.append(req)

    def step(self, eos_ids: frozenset[str] = frozenset(),
             accepted: Mapping[str, int] | None = None) -> StepRecord:
        """Run one iteration; `eos_ids` sample EOS in it (each must sample). Under EAGLE,
        `accepted[id]` is how many draft tokens the verify accepts for a request of this
        step's decode batch (absent: none); the request commits that many plus the bonus
        token, and an EOS is the run's last token."""
        self.current_step += 1
        accepted = dict(accepted or {})
        if accepted and not self.cfg.speculative:
            raise InputError("the workload gives 'accepted' counts but its config has no "
                             "speculative decoding; set speculative_algorithm and its knobs "
                             "or drop them")
        facts = _StepFacts(ratio=self.ratio.current)
        self._merge_last_batch()  # S:3785-3835
        batch = self._get_new_batch_prefill(facts)
        if batch is None and self.running:
            batch = self._update_running_batch(facts, accepted)  # S:3873-3881
        self._check_accepted(batch, accepted)
        # The requests this step's EAGLE verify covered (the explorer's other choices).
        self.last_verified = (tuple(r.rid for r in batch.reqs) if self.cfg.speculative
                              and batch is not None and batch.kind == BATCH_DECODE else ())
        if batch is None:
            facts.kind = BATCH_IDLE
            if self._is_fully_idle():  # S:5085-5103, 5149
                self.ratio.reset()
        self._check_eos(batch, eos_ids)
        free_after_schedule = self.free
        sampled = self._samplers(batch)
        held_after = self._held_order(batch)
        # A waiting request holds no KV row; a held one can own no token of its own (a
        # fully cached prompt after its prefill) and still report its computed tokens.
        waiting_now = {id(r) for r in self.waiting}
        computed = tuple((r.rid, 0 if id(r) in waiting_now else r.prefix_len)
                         for r in held_after)
        # Under EAGLE, `kv_allocated`: each request holding a KV row with the row's end.
        allocated: tuple[tuple[str, object], ...] = (
            (("kv_allocated", [[r.rid, r.allocated] for r in held_after
                               if id(r) not in waiting_now]),)
            if self.cfg.speculative else ())
        running_after = self._running_after(batch)
        waiting_after = tuple(r.rid for r in self.waiting)
        chunked_id = self.chunked_req.rid if self.chunked_req is not None else None
        finished = self._process_results(sampled, eos_ids, batch)
        self.last_batch = batch
        return StepRecord(
            step=self.current_step, scheduled=tuple(facts.scheduled),
            admitted=tuple(facts.admitted), resumed=tuple(facts.resumed),
            preempted=tuple(facts.retracted), finished=finished,
            free_blocks=free_after_schedule, num_computed_tokens=computed,
            running=running_after, waiting=waiting_after,
            token_budget_left=self.cfg.max_prefill_tokens - sum(n for _, n in facts.scheduled),
            extra=self._extra(facts, chunked_id, allocated))

    def state_key(self, extra: Mapping[str, Hashable] | None = None) -> tuple[object, ...]:
        """The state with requests named by position (running order, chunked request,
        waiting order): everything that steers later decisions. Arrival order only matters
        through the queues' order, so it is dropped; the step counter and retraction counts
        steer nothing. `extra[id]` is appended to a request's entry (the explorer's
        per-request property history)."""
        extra = extra or {}

        def one(r: Req) -> tuple[object, ...]:
            return (r.prompt_len, r.max_new_tokens, r.cached_prefix_len, r.output_len, r.kv,
                    r.prefix_len, r.allocated, r.is_retracted, r.finished(),
                    extra.get(r.rid))
        running, full = self._merged()
        chunked = None if self.chunked_req is None else one(self.chunked_req)
        key = (self.free, full, self.ratio.current, tuple(one(r) for r in running), chunked,
               tuple(one(r) for r in self.waiting))
        if not self.cfg.speculative:
            return key
        # Under EAGLE a lone request can be aborted, and then whether the last extend batch
        # stands apart decides the ratio reset (`_is_fully_idle`).
        last = self.last_batch
        apart = (last is not None and last.kind in (BATCH_PREFILL, BATCH_MIXED)
                 and bool(self.running)
                 and any(not r.finished() and r is not self.chunked_req for r in last.reqs))
        return (*key, apart)

    def _merged(self) -> tuple[list[Req], bool]:
        """The running batch and latch as the next step's merge will leave them (the state
        between two steps, without mutating anything)."""
        last = self.last_batch
        if last is None or last.kind not in (BATCH_PREFILL, BATCH_MIXED):
            return list(self.running), self.batch_is_full
        kept = [r for r in last.reqs if not r.finished() and r is not self.chunked_req]
        full = (self.batch_is_full and len(kept) == len(last.reqs)
                and not (kept and not self.running))
        return [*self.running, *kept], full

    # ---- merge (S:3785-3835) -----------------------------------------------------------

    def _merge_last_batch(self) -> None:
        """Fold the last extend batch, less its finished requests and the chunked request,
        into the running batch; if that dropped any request, clear the latch. An empty
        running batch is replaced by the last batch itself (S:3830-3833), whose latch is
        the dataclass default, False (B:2364): nothing sets it on a new extend batch, and a
        mixed step's emptied running batch is a new object too (S:4284-4286)."""
        last = self.last_batch
        self._last_apart = False
        if last is None or last.kind not in (BATCH_PREFILL, BATCH_MIXED):
            return
        exclude = {id(self.chunked_req)} if self.chunked_req is not None else set()
        kept = [r for r in last.reqs if not r.finished() and id(r) not in exclude]
        if len(kept) < len(last.reqs):  # S:3824-3825
            self.batch_is_full = False
        if kept and not self.running:  # S:3830-3833: running_batch = last_batch
            self.batch_is_full = False
        self._last_apart = bool(kept and self.running)
        self.running = self.running + kept  # merge_batch appends (B:3802)
        last.reqs = kept

    # ---- prefill (S:3954-4290) ---------------------------------------------------------

    def _num_allocatable_reqs(self, running_bs: int, chunked_slot: int) -> int:
        """`get_num_allocatable_reqs` (S:3907-3925): the running cap less the running
        batch (finished requests still listed count), and the free request slots: a finished
        request gave its slot back (mem_cache/common.py:421), the chunked request of the
        pass start holds one (req_pool_idx) even after its last chunk is taken, admitted
        requests take theirs only in prepare_for_extend."""
        cap = self.cfg.effective_max_running_requests
        live = sum(1 for r in self.running if not r.finished())
        return min(cap - running_bs, cap - live - chunked_slot)

    def _sort_waiting(self) -> None:
        """`calc_priority` (P:209-298): sorts in place and stably; FCFS leaves the list.
        LPM falls back to FCFS above 128 waiting (P:300-311)."""
        if self.cfg.schedule_policy == POLICY_LOF:
            self.waiting.sort(key=lambda r: -r.max_new_tokens)  # P:500-515
        elif (self.cfg.active_policy_is_lpm
              and len(self.waiting) <= WAITING_QUEUE_PREFIX_MATCH_MAX):
            self.waiting.sort(key=lambda r: -self._lpm_match(r))  # P:437-446

    def _lpm_match(self, req: Req) -> int:
        """LPM's key, `num_matched_prefix_tokens` (mem_cache/common.py:203-245): the tree
        matched against the whole fill (whole pages, no `fill - 1` limit, P:342-352), then
        capped at `fill - 1`. At page size 1 this is the admission hit; above, a fully
        cached prompt of whole pages ranks by its whole prompt less one token while its
        admission hit stops a page short."""
        if self.cfg.disable_radix_cache:
            return 0
        page = self.cfg.page_size
        return min(min(req.cached_prefix_len, req.fill_len) // page * page, req.fill_len - 1)

    def _cache_hit(self, req: Req) -> int:
        """Prefix tokens found in the cache: the abstract `cached_prefix_len`, at most
        `fill - 1` (B:1696-1706), in whole pages (the tree's keys are page-aligned,
        mem_cache/unified_radix_cache.py:1148); none with the cache off."""
        if self.cfg.disable_radix_cache:
            return 0
        page = self.cfg.page_size
        return min(req.cached_prefix_len, req.fill_len - 1) // page * page

    def _get_new_batch_prefill(self, facts: _StepFacts) -> Batch | None:
        """`_get_new_batch_prefill_raw` in scope."""
        cfg = self.cfg
        if not self.running:  # S:3967-3971
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None  # S:3973-3976
        running_bs = len(self.running)
        chunked_slot = 1 if self.chunked_req is not None else 0
        if self._num_allocatable_reqs(running_bs, chunked_slot) <= 0 and not chunked_slot:
            self.batch_is_full = True  # S:3997-4004
            return None
        self._sort_waiting()
        adder = PrefillAdder(
            free=self.free, running=self.running, ratio=self.ratio.current,
            rem_input=cfg.max_prefill_tokens,
            rem_chunk=cfg.chunked_prefill_size if cfg.chunking else None,
            mixed_decode_tokens=running_bs if cfg.mixed_chunk else 0,  # S:4034-4051
            page_size=cfg.page_size)
        if self.chunked_req is not None:  # S:4053-4061
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting:  # S:4081-4180
            if len(adder.can_run_list) >= self._num_allocatable_reqs(running_bs, chunked_slot):
                self.batch_is_full = True
            if self.batch_is_full:
                break
            req.prefix_len = self._cache_hit(req)  # init_next_round_input (B:1633-1665)
            res = adder.add_one_req(req)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:  # S:4155-4160
                    self.batch_is_full = bool(adder.can_run_list) or bool(self.running)
                break
        facts.rem_input = adder.rem_input_tokens
        facts.rem_chunk = adder.rem_chunk_tokens
        facts.rem_total = adder.rem_total_tokens
        if not adder.can_run_list:
            return None
        can_run = adder.can_run_list
        self.waiting = [r for r in self.waiting if r not in can_run]  # S:4195
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        self._mark_admissions([r for r in can_run if r.kv == 0], facts)
        for req in can_run:  # prepare_for_extend allocates the extend tokens
            self._allocate(req, req.extend_len)
            facts.scheduled.append((req.rid, req.extend_len))
        batch = Batch(BATCH_PREFILL, list(can_run), self.chunked_req)
        if cfg.mixed_chunk and self.running:  # S:4251-4288
            self._mix_running(batch, facts)
        facts.kind = batch.kind
        return batch

    @staticmethod
    def _mark_admissions(joined: list[Req], facts: _StepFacts) -> None:
        """Requests that left the waiting queue: resumed if retracted before, else new."""
        for req in joined:
            if req.is_retracted:
                facts.resumed.append(req.rid)
                req.is_retracted = False
            else:
                facts.admitted.append(req.rid)

    def _allocate(self, req: Req, tokens: int) -> None:
        """Extend the request by `tokens` KV slots (alloc_extend / alloc_decode): the new
        pages are those past its last partly filled one (allocator/paged.py:62-76, 117-133:
        `ceil(seq / P) - ceil(prefix / P)`); the pool is counted in tokens."""
        pages = self.cfg.pages
        taken = pages(req.prefix_len + tokens) - pages(req.prefix_len)
        self.free -= taken
        req.kv += taken
        req.prefix_len += tokens
        req.allocated = req.prefix_len  # kv_allocated_len = seq_len (allocation.py:476-478)

    def _spec_decode_need(self, req: Req) -> int:
        """KV one request needs for an EAGLE decode, `_new_tokens_required_next_decode_spec_v2`
        (B:3268-3278): its row grown to the committed length plus the reserve
        (`Config.decode_reserve`), in pages, less the pages it already holds."""
        pages = self.cfg.pages
        return max(0, pages(req.prefix_len + self.cfg.decode_reserve) - pages(req.allocated))

    def _spec_allocate(self, req: Req) -> None:
        """`eagle_prepare_for_decode` (speculative/eagle_utils.py:1112-1170) with
        `page_aligned_decode_alloc_lens` (mem_cache/allocation_sizing.py:72-93): the row
        ends at `max(allocated, ceil_page(committed + reserve))`; the new pages are those
        past the pages held (mem_cache/allocation.py:773-841). Nothing is committed here."""
        pages = self.cfg.pages
        end = max(req.allocated, pages(req.prefix_len + self.cfg.decode_reserve))
        taken = pages(end) - pages(req.allocated)
        self.free -= taken
        req.kv += taken
        req.allocated = end

    def _mix_running(self, batch: Batch, facts: _StepFacts) -> None:
        """Mixed chunk: finished requests leave the running batch; if its decode fits
        after this prefill's allocation, each running request decodes one token inside
        the batch and the running batch is emptied; otherwise it sits out (no retraction)."""
        self.running = [r for r in self.running if not r.finished()]  # filter_batch
        if self.running and self._decode_fits(self.running):
            for req in self.running:
                if self.cfg.speculative:
                    # Spec rows allocate as an EAGLE decode does and commit their pending
                    # bonus token, one (B:3143-3175; batch_result_processor.py:370-378).
                    self._spec_allocate(req)
                    req.prefix_len += 1
                else:
                    self._allocate(req, 1)
                req.extend_len = 1
                facts.scheduled.append((req.rid, 1))
            batch.kind = BATCH_MIXED
            batch.reqs = batch.reqs + self.running  # mix_with_running -> merge_batch
            self.running = []

    # ---- decode (S:4335-4428; B:3250-3430) ---------------------------------------------

    def _decode_fits(self, reqs: list[Req]) -> bool:
        """`check_decode_mem` (B:3250-3296): a new page for each request whose KV ends on
        a page boundary (`kv_committed_len % P == 0`), after evicting the tree
        (allocator/base.py:160-174)."""
        if self.cfg.speculative:  # B:3260-3266: the spec-v2 estimate instead
            return self.free >= sum(self._spec_decode_need(r) for r in reqs)
        page = self.cfg.page_size
        return self.free >= page * sum(1 for r in reqs if r.prefix_len % page == 0)

    def _update_running_batch(self, facts: _StepFacts, accepted: Mapping[str, int]
                              ) -> Batch | None:
        """Filter finished requests; retract when the decode does not fit, else decay the
        ratio; one token per remaining request (under EAGLE: the reserve allocated, the
        accepted run committed). None when nothing is left to decode."""
        initial_bs = len(self.running)
        self.running = [r for r in self.running if not r.finished()]
        if not self.running:
            self.batch_is_full = False
            return None
        if not self._decode_fits(self.running):
            retracted, aborted = self._retract_decode()
            self.ratio.current = estimate_ratio_after_retract(
                self.running, self.cfg.retract_decode_steps)  # S:4389
            facts.retracted = [r.rid for r in retracted]
            facts.aborted = [r.rid for r in aborted]
            for req in retracted:  # S:4415-4416: requeued at the tail
                self.waiting.append(req)
        else:
            self.ratio.decay_step()  # S:4418
        if len(self.running) < initial_bs:  # S:4420-4421
            self.batch_is_full = False
        if not self.running:
            return None
        for req in self.running:
            if self.cfg.speculative:  # prepare_for_decode -> spec_prepare_for_decode (B:3579)
                self._spec_allocate(req)
                run = 1 + accepted.get(req.rid, 0)
                req.prefix_len += run  # the verify commits the run (processor :818-826)
                req.extend_len = run
            else:
                self._allocate(req, 1)
                req.extend_len = 1
            facts.scheduled.append((req.rid, req.extend_len))
        facts.kind = BATCH_DECODE
        return Batch(BATCH_DECODE, list(self.running))

    def _retract_decode(self) -> tuple[list[Req], list[Req]]:
        """`retract_decode` (B:3298-3385): keep order is by (outputs, -prompt) descending,
        stably; pop from the end (fewest outputs, then longest prompt) until the decode fits,
        at least one, keeping one; a last request that still does not fit is aborted. The
        survivors stay in that order: `filter_batch(keep_indices=sorted_indices)` (B:3379)
        rebuilds the batch from the index list (B:3698)."""
        order = sorted(self.running, key=lambda r: (r.output_len, -r.prompt_len),
                       reverse=True)  # B:3392-3426
        retracted: list[Req] = []
        aborted: list[Req] = []
        first = True
        while first or not self._decode_fits(order):
            if len(order) == 1:
                break
            first = False
            victim = order.pop()
            self._release(victim)
            victim.prefix_len = 0  # reset_for_retract (B:1955-2001)
            victim.allocated = 0  # mark_kv_released (B:995-1000)
            victim.is_retracted = True
            victim.retraction_count += 1
            retracted.append(victim)
        if len(order) <= 1 and not self._decode_fits(order):
            last = order.pop()
            self._release(last)
            last.finished_reason = FINISH_ABORT
            aborted.append(last)
        self.running = order  # filter_batch(keep_indices=sorted_indices), B:3379
        return retracted, aborted

    def _release(self, req: Req) -> None:
        """Free the request's own KV."""
        self._release_tokens(req, req.kv)

    def _release_tokens(self, req: Req, tokens: int) -> None:
        """Give `tokens` of the request's own KV back to the pool."""
        self.free += tokens
        req.kv -= tokens

    def _prompt_fully_cached(self, req: Req) -> bool:
        """The cache holds the request's whole prompt in whole pages (its hit stops a page
        short, so the checkpoint finds that last page in the tree)."""
        return (not self.cfg.disable_radix_cache and req.cached_prefix_len >= req.prompt_len
                and req.prompt_len % self.cfg.page_size == 0)

    def _is_fully_idle(self) -> bool:
        """`is_fully_idle` in scope: nothing running, chunked or waiting, and the last
        batch empty (S:5168-5190). An extend batch merged into a non-empty running batch
        stays a batch of its own that still lists the requests it handed on (the merge
        filters only finished and chunked ones, S:3820-3833), so when those are then
        aborted by the decode check (EAGLE's reserve can leave a lone request no room) the
        loop is not idle and the ratio keeps the retraction's estimate. Merged into an
        empty running batch it became the running batch (S:3830-3831), as a decode batch
        is, and is empty with it."""
        running = [r for r in self.running if not r.finished()]
        return (not running and self.chunked_req is None and not self.waiting
                and not self._last_apart)

    # ---- results (BR:258-500, 942-1100) ------------------------------------------------

    def _samplers(self, batch: Batch | None) -> list[Req]:
        """Requests that sample a token: every request of the batch but a chunked one
        whose prefill is unfinished (BR:427-445)."""
        if batch is None:
            return []
        return [r for r in batch.reqs if r is not self.chunked_req]

    def _check_accepted(self, batch: Batch | None, accepted: Mapping[str, int]) -> None:
        """An accepted count names a request of this step's EAGLE decode batch and lies in
        [0, max_accept_len - 1]."""
        verifying = ({r.rid for r in batch.reqs}
                     if batch is not None and batch.kind == BATCH_DECODE else set())
        top = self.cfg.max_accept_len - 1
        for rid in sorted(accepted):
            count = accepted[rid]
            if rid not in verifying:
                raise InputError(
                    f"accepted count for request {rid!r} in step {self.current_step}: the "
                    "request is not in that step's decode batch (only a decode verifies "
                    "drafts); drop the entry")
            if not 0 <= count <= top:
                raise InputError(
                    f"accepted count {count} for request {rid!r} in step "
                    f"{self.current_step} must be in [0, {top}] (the verify commits at most "
                    "min(speculative_num_draft_tokens, speculative_num_steps + 1) tokens, "
                    "the bonus token one of them)")

    def _check_eos(self, batch: Batch | None, eos_ids: frozenset[str]) -> None:
        samplers = {r.rid for r in self._samplers(batch)}
        for rid in sorted(eos_ids):
            if rid not in samplers:
                raise InputError(
                    f"eos for request {rid!r} in step {self.current_step}: the request "
                    "samples no token in that step (not in the batch, or a partial prefill "
                    "chunk); EOS can only be the token a request samples")

    def _process_results(self, sampled: list[Req], eos_ids: frozenset[str],
                         batch: Batch | None) -> tuple[tuple[str, str], ...]:
        """One output token each (an EAGLE decode row: its accepted run, whose last token
        is the EOS when there is one); EOS first, then max_new_tokens, an EOS past
        max_new_tokens demoted to a length finish (B:1913-1950); a finished
        request releases its KV (BR:387, 1452). Aborted requests finish too. A request
        that ends its first prefill unfinished checkpoints its KV into the tree (BR:394);
        when its whole prompt was cached in whole pages, the tree already holds the
        recomputed last page and frees the request's copy
        (mem_cache/unified_radix_cache.py:1080-1154)."""
        finished: list[tuple[str, str]] = []
        spec_decode = batch is not None and batch.kind == BATCH_DECODE and self.cfg.speculative
        for req in sampled:
            first_token = req.output_len == 0
            req.output_len += req.extend_len if spec_decode else 1
            # An EOS past max_new_tokens is demoted to a length finish (B:1901-1911, 1940-1942):
            # only a request clipped to 0 new tokens (a page size > 1 pool) samples one.
            if req.rid in eos_ids and req.output_len <= req.max_new_tokens:
                req.finished_reason = FINISH_STOP
            elif req.output_len >= req.max_new_tokens:
                req.finished_reason = FINISH_LENGTH
            else:
                if first_token and self._prompt_fully_cached(req):
                    self._release_tokens(req, self.cfg.page_size)
                continue
            self._release(req)
            finished.append((req.rid, req.finished_reason))
        for req in list(self.requests.values()):
            if req.finished_reason == FINISH_ABORT and req.rid not in self._finished_ids:
                finished.append((req.rid, FINISH_ABORT))
        for rid, _ in finished:
            self._finished_ids.add(rid)
            del self.requests[rid]
        return tuple(finished)

    # ---- record helpers ----------------------------------------------------------------

    def _running_after(self, batch: Batch | None) -> tuple[str, ...]:
        """The running batch the next step starts from (before this step's finishes are
        dropped): the running requests, then the extend batch less the chunked request."""
        live = [r for r in self.running if not r.finished()]
        if batch is not None and batch.kind in (BATCH_PREFILL, BATCH_MIXED):
            live += [r for r in batch.reqs if r is not self.chunked_req and r not in live]
        return tuple(r.rid for r in live)

    def _held_order(self, batch: Batch | None) -> list[Req]:
        running = [self.requests[rid] for rid in self._running_after(batch)]
        chunked = [self.chunked_req] if self.chunked_req is not None else []
        return running + chunked + list(self.waiting)

    def _extra(self, facts: _StepFacts, chunked_id: str | None,
               allocated: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object], ...]:
        return (
            ("batch", facts.kind),
            ("rem_input_tokens", facts.rem_input),
            ("rem_chunk_tokens", facts.rem_chunk),
            ("rem_total_tokens", None if facts.rem_total is None
             else _as_json_number(facts.rem_total)),
            ("new_token_ratio", _as_json_number(facts.ratio)),
            ("new_token_ratio_after", _as_json_number(self.ratio.current)),
            ("batch_is_full", self.batch_is_full),
            ("chunked_req", chunked_id),
            ("retracted", list(facts.retracted)),
            ("aborted", list(facts.aborted)),
        ) + allocated



def _as_json_number(x: Fraction) -> int | float:
    """A fraction for JSON: an int when whole, else rounded to 6 decimals."""
    if x.denominator == 1:
        return int(x)
    return round(float(x), 6)


def check_prompt(cfg: Config, spec: RequestSpec) -> None:
    """Prompts SGLang refuses before scheduling (managers/utils.py:254-282 with
    max_req_input_len from tp_worker.py:549-553), and the abstract cache hit's range."""
    if spec.prompt_len < 1 or spec.prompt_len >= cfg.max_req_input_len:
        raise InputError(
            f"request {spec.id!r}: prompt_len {spec.prompt_len} must be in [1, "
            f"max_req_input_len={cfg.max_req_input_len}) (SGLang refuses longer inputs, "
            "managers/utils.py:254-282; max_req_input_len = min(context_length, "
            "max_total_num_tokens) - 6, tp_worker.py:549-553); shorten the prompt or raise "
            "max_total_num_tokens")
    if not 0 <= spec.cached_prefix_len <= spec.prompt_len:
        raise InputError(
            f"request {spec.id!r}: cached_prefix_len {spec.cached_prefix_len} must be in "
            f"[0, prompt_len={spec.prompt_len}]")
