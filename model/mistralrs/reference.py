"""Reference port of mistral.rs's paged-attention scheduler (commit 9e922623f24b), in scope,
with the older versions' rules behind the switches of `cfg.rules` (model/mistralrs/config.py
SWITCHES says where each changed upstream).

One `step()` is one engine iteration: `PagedAttentionScheduler::schedule()`, the forward
pass with the environment's EOS choices, then `free_finished_sequence_groups()`. Line
numbers are `mistralrs-core/src/paged_attention/scheduler.rs` (S:) at 9e922623 unless a
version or a file is named.

Scope (model/mistralrs/config.py): a text model on CUDA with packed prefill, prefix caching
off, no speculative decoding, media, X-LoRA or hybrid cache. Under it `select_prompt_batch`
keeps every candidate (S:165-176 filters nothing when `requires_uniform_prompt_batch` is
false), completion bucketing is a no-op (S:554-561), and a decoding sequence always has
exactly one uncomputed token, so its completion cost is 1 (S:292-296).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from model.core.arith import cdiv
from model.core.errors import InputError
from model.core.memo import CopiedByFields
from model.core.types import FINISH_LENGTH, FINISH_STOP, RequestSpec, StepRecord
from model.mistralrs.config import MistralrsConfig

FINISH_ERROR = "error"  # rejected: over total capacity or cache exhausted (S:605-619, 722-737)
KIND_PROMPT = "prompt"
KIND_DECODE = "decode"

WAITING, PROMPT, DECODE, FINISHED = "waiting", "prompt", "decode", "finished"



@dataclass(slots=True, eq=False)
class Seq(CopiedByFields):
    """One sequence. `timestamp` is its arrival order (Sequence::timestamp is its creation
    time, kept across preemption; sequence.rs:1553-1555)."""

    id: str
    prompt_len: int
    max_tokens: int
    timestamp: int
    state: str = WAITING
    num_output_tokens: int = 0
    num_computed_tokens: int = 0
    blocks: int = 0
    waiting_count: int = 0
    num_preemptions: int = 0

    @property
    def num_tokens(self) -> int:
        """`get_toks().len()`: prompt plus generated tokens."""
        return self.prompt_len + self.num_output_tokens


@dataclass(slots=True)
class _Turn:
    """What one `schedule()` call decided (a mutable accumulator)."""

    kind: str = KIND_DECODE
    scheduled: list[tuple[Seq, int]] | None = None
    admitted: list[str] | None = None
    resumed: list[str] | None = None
    preempted: list[str] | None = None
    rejected: list[str] | None = None
    chunk_size: int | None = None

    def __post_init__(self) -> None:
        self.scheduled, self.admitted, self.resumed = [], [], []
        self.preempted, self.rejected = [], []


class MistralrsScheduler:
    """The scheduler's queues and KV pool, with the engine's per-step update."""

    def __init__(self, cfg: MistralrsConfig) -> None:
        self.cfg = cfg
        self.waiting: deque[Seq] = deque()
        self.running: deque[Seq] = deque()
        self.free_blocks = cfg.usable_blocks
        self.decode_steps_since_prefill = 0
        self.completion_cursor = 0
        self.completion_turn_due = False  # v0.9.2 S:75, read only by alternate_turns
        self.current_step = 0
        self._arrivals = 0

    # ---- requests ------------------------------------------------------------------------

    def add_request(self, spec: RequestSpec) -> None:
        """`add_seq` pushes to the back of `waiting` (S:1082-1084)."""
        self.waiting.append(Seq(spec.id, spec.prompt_len, spec.max_tokens, self._arrivals))
        self._arrivals += 1

    # ---- KV pool (kv_cache_manager.rs) --------------------------------------------------

    def _allocate(self, seq: Seq, num_tokens: int) -> bool:
        """`allocate_slots`: blocks for `num_tokens` in all, only the missing ones are taken,
        nothing is taken on failure (kv_cache_manager.rs:188-263)."""
        need = max(cdiv(num_tokens, self.cfg.block_size) - seq.blocks, 0)
        if need > self.free_blocks:
            return False
        self.free_blocks -= need
        seq.blocks += need
        return True

    def _free(self, seq: Seq) -> None:
        self.free_blocks += seq.blocks
        seq.blocks = 0

    def _preempt(self, seq: Seq, turn: _Turn) -> None:
        """`_preempt` (S:1026-1072): recompute; back to waiting with num_computed_tokens 0,
        its blocks freed, pushed to the FRONT of waiting."""
        seq.state = WAITING
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        self._free(seq)
        self.waiting.appendleft(seq)
        turn.preempted.append(seq.id)

    # ---- completion_is_due (S:239-273) ---------------------------------------------------

    def completion_is_due(self) -> bool:
        """Whether this turn must decode rather than prefill."""
        if not any(s.state == DECODE for s in self.running):
            return False
        prompt_tokens = sum(s.num_tokens - s.num_computed_tokens
                            for s in self.running if s.state == PROMPT)
        if 0 < prompt_tokens <= self.cfg.max_num_batched_tokens:
            return False  # finish a short running prompt tail first (S:255-258)
        has_waiting = bool(self.waiting)
        if (prompt_tokens == 0 and has_waiting and len(self.running) < self.cfg.max_num_seqs
                and self.waiting_prompt_fits_free_blocks()
                and self.decode_steps_since_prefill > 0):
            return False  # one decode turn since the last prefill, and the head fits (S:262-269)
        has_prompt = prompt_tokens > 0 or has_waiting
        return not has_prompt or self.decode_steps_since_prefill < (
            self.cfg.max_decode_steps_before_prefill)

    def waiting_prompt_fits_free_blocks(self) -> bool:
        """The head's whole sequence plus one block per decoding sequence fits the free
        blocks (S:275-290)."""
        if not self.waiting:
            return False
        decoding = sum(1 for s in self.running if s.state == DECODE)
        return cdiv(self.waiting[0].num_tokens, self.cfg.block_size) + decoding <= (
            self.free_blocks)

    # ---- schedule() (S:563-946) ----------------------------------------------------------

    def _completion_due(self) -> bool:
        """Whether this call decodes without trying admission: completion_is_due with the
        token budget; after a prompt step with alternate turns (v0.9.2 S:278-284); never
        when prefill comes first (v0.9.0 S:193)."""
        rules = self.cfg.rules
        if rules.token_budget:
            return self.completion_is_due()
        if not rules.alternate_turns:
            return False
        turn_due, self.completion_turn_due = self.completion_turn_due, False
        # Upstream also decodes when a running sequence is still in prompt state; that
        # happens only right after a prompt step, which set completion_turn_due too.
        return turn_due and bool(self.running)

    def _schedule(self) -> _Turn:
        turn = _Turn()
        due = self._completion_due()
        candidates: list[Seq] = []
        if not due:
            candidates = [s for s in self.running if s.state == PROMPT]  # S:577-584
            self._admit(candidates, turn)
        if candidates:
            self._prompt_turn(candidates, turn)
        else:
            self._decode_turn(turn)
        return turn

    def _admit(self, candidates: list[Seq], turn: _Turn) -> None:
        """The admission loop (S:585-765): whole-prompt allocation, head-of-line break, and
        the starvation escape after `waiting_timeout` failed attempts."""
        cfg = self.cfg
        while self.waiting:
            if len(self.running) >= cfg.max_num_seqs or (
                    cfg.rules.token_budget and len(candidates) >= cfg.max_num_batched_tokens):
                break  # S:589-593: |candidates| counts sequences, not tokens
            head = self.waiting[0]
            if head.num_tokens > cfg.token_capacity:
                self._reject_head(turn)  # S:605-619
                continue
            if not self._allocate(head, head.num_tokens):  # S:676-681
                head.waiting_count += 1
                if head.waiting_count <= cfg.waiting_timeout:
                    break  # S:729-731: head-of-line, stop admitting
                if not self._escape(head, candidates, turn):
                    self._reject_head(turn)  # S:722-737
                    continue
            head.waiting_count = 0  # S:684-687, 719-721
            self.waiting.popleft()
            (turn.resumed if head.num_preemptions else turn.admitted).append(head.id)
            head.state = PROMPT
            head.num_computed_tokens = 0  # no prefix cache hit in scope (S:756-760)
            self.running.append(head)
            candidates.append(head)

    def _escape(self, head: Seq, candidates: list[Seq], turn: _Turn) -> bool:
        """S:693-728: preempt `running.pop_back()` (the head stays at the front of waiting)
        and retry until the head fits or nothing runs; without escape_loop one victim and
        one retry (v0.9.2 S:376-399)."""
        while self.running:
            victim = self.running.pop()
            self.waiting.popleft()
            self._preempt(victim, turn)
            self.waiting.appendleft(head)
            if victim in candidates:
                candidates.remove(victim)
            if self._allocate(head, head.num_tokens):
                return True
            if not self.cfg.rules.escape_loop:
                return False
        return False

    def _reject_head(self, turn: _Turn) -> None:
        seq = self.waiting.popleft()
        seq.state = FINISHED
        turn.rejected.append(seq.id)

    def _prompt_turn(self, candidates: list[Seq], turn: _Turn) -> None:
        """`select_prompt_batch` (S:150-237) with scheduler-visible chunks: chunk =
        max(1, budget / #candidates) (S:136-138); each candidate's next range is
        [computed, min(computed + chunk, len)) (prompt_chunks.rs:120-225); only the candidates
        whose range is final iff the first one's is run (prompt_chunks.rs:10-43). Without
        the token budget every candidate runs its whole sequence (v0.9.2 S:454-484); with
        bucket_by_length only the shortest do (v0.9.0 S:361-365)."""
        rows: list[Seq] = []
        if self.cfg.rules.token_budget:
            chunk = max(1, self.cfg.max_num_batched_tokens // len(candidates))
            final_first = candidates[0].num_computed_tokens + chunk >= candidates[0].num_tokens
            rows = [s for s in candidates
                    if (s.num_computed_tokens + chunk >= s.num_tokens) == final_first]
            turn.chunk_size = chunk
        else:
            chunk = None
            rows = list(candidates)
        if self.cfg.rules.bucket_by_length:
            rows, victims = self._bucket(rows, turn)
            self.running = deque(s for s in self.running if s not in victims)  # S:180-181
        for s in rows:
            remaining = s.num_tokens - s.num_computed_tokens
            turn.scheduled.append((s, remaining if chunk is None else min(chunk, remaining)))
        turn.kind = KIND_PROMPT
        self.decode_steps_since_prefill = 0  # S:786
        if self.cfg.rules.alternate_turns and not self.cfg.rules.token_budget:
            self.completion_turn_due = True  # v0.9.2 S:478

    def _bucket(self, rows: list[Seq], turn: _Turn) -> tuple[list[Seq], list[Seq]]:
        """`bucket_and_preempt_sequences` (v0.9.0 S:126-184): rows are bucketed by len()
        (a prompt's len() less its prefix-cache hit, none in scope; the image and
        token-offset parts of the key are constant in scope); the bucket of the shortest
        runs (S:160-166) and every other bucket is preempted, its rows in reverse order
        (S:171-177), each pushed to the waiting front. Returns (kept, preempted).

        Upstream's buckets are a HashMap (S:134), so the order in which the other buckets
        are preempted is its iteration order, which RandomState makes differ from run to
        run. The model fixes one such order: shorter buckets first, so the longest
        bucket's rows end at the very front of waiting."""
        buckets: dict[int, list[Seq]] = {}
        for s in rows:
            buckets.setdefault(s.num_tokens, []).append(s)
        if len(buckets) <= 1:
            return rows, []
        victims: list[Seq] = []
        for length in sorted(buckets)[1:]:
            for s in reversed(buckets[length]):
                self._preempt(s, turn)
                victims.append(s)
        return buckets[min(buckets)], victims

    def _decode_turn(self, turn: _Turn) -> None:
        """S:796-946: allocate the next token's block for every decoding sequence, oldest
        first, preempting the newest on failure (newest first and the oldest preempted
        without victim_newest, v0.8.22 S:588-593); the completion bucketing when
        bucket_by_length (v0.9.0 S:436-438); then the round-robin selection, or every kept
        sequence without the token budget (v0.9.2 S:604-607)."""
        rules = self.cfg.rules
        prompt_running = [s for s in self.running if s.state == PROMPT]
        pending = deque(sorted((s for s in self.running if s.state == DECODE),
                               key=lambda s: s.timestamp,
                               reverse=not rules.victim_newest))  # S:808, 1074-1078
        kept: list[Seq] = []
        while pending:
            seq = pending.popleft()
            # A decoding sequence has one uncomputed token, so it asks for len() (S:818-824);
            # before c3667bb3f, len() + 1 (v0.8.23 S:396-402).
            need = seq.num_tokens + int(rules.reserve_next_token)
            while not self._allocate(seq, need):
                if pending:
                    self._preempt(pending.pop(), turn)  # the newest (oldest) pending one
                else:
                    self._preempt(seq, turn)
                    break
            else:
                kept.append(seq)
        if rules.bucket_by_length:
            kept, _ = self._bucket(kept, turn)
        self.decode_steps_since_prefill = min(self.decode_steps_since_prefill + 1,
                                              self.cfg.max_decode_steps_before_prefill)
        rows = (self._completion_batch(len(kept)) if rules.token_budget  # S:368-380
                else range(len(kept)))
        for index in rows:
            turn.scheduled.append((kept[index], 1))
        self.running = deque([*kept, *prompt_running])  # S:935
        turn.kind = KIND_DECODE

    def _completion_batch(self, num_rows: int) -> list[int]:
        """`completion_batch_indices` (S:298-326) with cost 1 per row: from the cursor,
        take rows while the budget lasts (the first always); the cursor moves past the last
        row taken."""
        if num_rows == 0:
            return []
        start = self.completion_cursor % num_rows
        taken = [(start + k) % num_rows
                 for k in range(min(num_rows, self.cfg.max_num_batched_tokens))]
        self.completion_cursor = (taken[-1] + 1) % num_rows
        return taken

    # ---- one engine step ---------------------------------------------------------------

    def step(self, eos_ids: frozenset[str] = frozenset()) -> StepRecord:
        """schedule(), the forward pass (a final prompt chunk or a decode samples one token;
        pipeline/mod.rs:2297-2307), the stop checks, then free_finished_sequence_groups
        (S:957-1022)."""
        self.current_step += 1
        turn = self._schedule()
        finished: list[tuple[str, str]] = []
        sampled: set[str] = set()
        for seq, n in turn.scheduled:
            seq.num_computed_tokens += n
            if seq.num_computed_tokens < seq.num_tokens:
                continue  # a non-final prompt chunk samples nothing
            sampled.add(seq.id)
            seq.num_output_tokens += 1
            seq.state = DECODE
            if seq.id in eos_ids:
                finished.append((seq.id, FINISH_STOP))
            elif seq.num_output_tokens >= seq.max_tokens:
                finished.append((seq.id, FINISH_LENGTH))
        unknown = sorted(eos_ids - sampled)
        if unknown:
            raise InputError(f"eos names request {unknown[0]!r} at step {self.current_step}, "
                             "but it samples no token in that step; drop the entry or move it")
        record = self._record(turn, finished)
        done = {rid for rid, _ in finished}
        for seq in [s for s in self.running if s.id in done]:
            seq.state = FINISHED
            self._free(seq)
        self.running = deque(s for s in self.running if s.id not in done)
        return record

    def _record(self, turn: _Turn, finished: list[tuple[str, str]]) -> StepRecord:
        total = sum(n for _, n in turn.scheduled)
        held = [*self.running, *self.waiting]
        return StepRecord(
            step=self.current_step,
            scheduled=tuple((s.id, n) for s, n in turn.scheduled),
            admitted=tuple(turn.admitted), resumed=tuple(turn.resumed),
            preempted=tuple(turn.preempted),
            finished=tuple(finished) + tuple((rid, FINISH_ERROR) for rid in turn.rejected),
            free_blocks=self.free_blocks,
            num_computed_tokens=tuple((s.id, s.num_computed_tokens) for s in held),
            running=tuple(s.id for s in self.running),
            waiting=tuple(s.id for s in self.waiting),
            token_budget_left=self.cfg.max_num_batched_tokens - total,
            extra=(("kind", turn.kind),
                   ("decode_steps_since_prefill", self.decode_steps_since_prefill),
                   ("chunk_size", turn.chunk_size),
                   ("blocks", tuple((s.id, s.blocks) for s in held))),
        )

    def state_key(self, extra: Mapping[str, Hashable] | None = None) -> Hashable:
        """Requests named by position (running order, then waiting order). Timestamps only
        order the decode rows, so their relative rank among held requests is kept;
        num_preemptions and the step counter steer nothing. `extra[id]` is appended to a
        request's entry (the explorer's per-request property history)."""
        held = [*self.running, *self.waiting]
        rank = {s.id: k for k, s in enumerate(sorted(held, key=lambda s: s.timestamp))}
        extra = extra or {}

        def one(s: Seq) -> tuple[object, ...]:
            return (s.state, s.prompt_len, s.max_tokens, s.num_output_tokens,
                    s.num_computed_tokens, s.blocks, s.waiting_count, rank[s.id],
                    extra.get(s.id))
        return (self.free_blocks, self.decode_steps_since_prefill, self.completion_cursor,
                self.completion_turn_due,
                tuple(one(s) for s in self.running), tuple(one(s) for s in self.waiting))
