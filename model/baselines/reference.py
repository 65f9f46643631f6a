"""Reference of the two pre-continuous baselines (static and request-level dynamic batching)
as one imperative scheduler whose configuration picks the baseline (model/baselines/config.py).

No upstream code exists: the rules are the concept definitions of seed 000's Table 1 as the
digest formalises them (/work/shared/reference/sglang_mistralrs_rules.md §3.1-3.2, "D3.x"
below). One `step()` is one forward pass: the prefill of a whole new batch, or one decode
over the running batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from model.baselines.config import LAUNCH_FULL, BaselineConfig
from model.core.arith import cdiv
from model.core.errors import InputError
from model.core.memo import CopiedByFields
from model.core.types import FINISH_LENGTH, FINISH_STOP, RequestSpec, StepRecord

KIND_IDLE, KIND_PREFILL, KIND_DECODE = "idle", "prefill", "decode"



def reservation(cfg: BaselineConfig, prompt_len: int, max_tokens: int) -> int:
    """Blocks a batch member reserves at launch: its worst case, prompt + max_tokens
    (D3.1 "reserve worst case up front")."""
    return cdiv(prompt_len + max_tokens, cfg.block_size)


@dataclass(slots=True, eq=False)
class Member(CopiedByFields):
    """A request, queued or in the batch."""

    id: str
    prompt_len: int
    max_tokens: int
    arrival_step: int
    num_output_tokens: int = 0
    blocks: int = 0
    done: bool = False  # finished; in a batch its slot is held until the batch ends

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return self.prompt_len + self.num_output_tokens


class BaselineScheduler:
    """A FIFO queue and at most one batch whose membership is frozen while it runs."""

    def __init__(self, cfg: BaselineConfig) -> None:
        self.cfg = cfg
        self.queue: deque[Member] = deque()
        self.batch: list[Member] = []
        self.free_blocks = cfg.num_kv_blocks
        self.current_step = 0

    def add_request(self, spec: RequestSpec) -> None:
        """Queue an arrived request at the tail."""
        self.queue.append(Member(spec.id, spec.prompt_len, spec.max_tokens, spec.arrival_step))

    def launch_due(self) -> bool:
        """Static: the queue fills a batch, or its head has waited `flush_timeout` steps
        (D3.1). Dynamic: anything is queued (D3.2). Only asked while no batch runs."""
        if not self.queue:
            return False
        if self.cfg.launch != LAUNCH_FULL:
            return True
        waited = self.current_step - self.queue[0].arrival_step
        flushed = self.cfg.flush_timeout > 0 and waited >= self.cfg.flush_timeout
        return len(self.queue) >= self.cfg.max_batch_size or flushed

    def _launch(self) -> list[Member]:
        """The longest FIFO prefix of the queue, at most max_batch_size, whose worst-case
        reservations fit the free blocks (D3.1)."""
        while self.queue and len(self.batch) < self.cfg.max_batch_size:
            head = self.queue[0]
            need = reservation(self.cfg, head.prompt_len, head.max_tokens)
            if need > self.free_blocks:
                break
            self.queue.popleft()
            head.blocks = need
            self.free_blocks -= need
            self.batch.append(head)
        return list(self.batch)

    def step(self, eos_ids: frozenset[str] = frozenset()) -> StepRecord:
        """One forward: launch and prefill a new batch, or decode the running one; a batch
        whose members have all finished releases its slots and blocks at the end."""
        self.current_step += 1
        idle_rows = [m for m in self.batch if m.done]
        admitted: list[str] = []
        if self.batch:
            kind = KIND_DECODE
            scheduled = [(m, 1) for m in self.batch if not m.done]
        elif self.launch_due() and self._launch():
            kind = KIND_PREFILL
            admitted = [m.id for m in self.batch]
            scheduled = [(m, m.prompt_len) for m in self.batch]
        else:
            kind, scheduled = KIND_IDLE, []
        finished: list[tuple[str, str]] = []
        for m, _ in scheduled:  # every scheduled row samples one token
            m.num_output_tokens += 1
            if m.id in eos_ids:
                finished.append((m.id, FINISH_STOP))
            elif m.num_output_tokens >= m.max_tokens:
                finished.append((m.id, FINISH_LENGTH))
        unknown = sorted(eos_ids - {m.id for m, _ in scheduled})
        if unknown:
            raise InputError(f"eos names request {unknown[0]!r} at step {self.current_step}, "
                             "but it samples no token in that step; drop the entry or move it")
        record = self._record(kind, scheduled, admitted, finished, len(idle_rows))
        for m in self.batch:
            m.done = m.done or any(rid == m.id for rid, _ in finished)
        if self.batch and all(m.done for m in self.batch):
            self.free_blocks += sum(m.blocks for m in self.batch)
            self.batch = []
        return record

    def _record(self, kind: str, scheduled: list[tuple[Member, int]], admitted: list[str],
                finished: list[tuple[str, str]], idle_rows: int) -> StepRecord:
        live = [m for m in self.batch if not m.done]
        padded = idle_rows if self.cfg.pad_finished else 0
        return StepRecord(
            step=self.current_step,
            scheduled=tuple((m.id, n) for m, n in scheduled),
            admitted=tuple(admitted), resumed=(), preempted=(), finished=tuple(finished),
            free_blocks=self.free_blocks,
            num_computed_tokens=tuple((m.id, m.num_tokens - 1 if m.num_output_tokens else 0)
                                      for m in [*live, *self.queue]),
            running=tuple(m.id for m in live), waiting=tuple(m.id for m in self.queue),
            token_budget_left=self.cfg.max_batch_size * self.cfg.token_capacity - sum(
                n for _, n in scheduled),
            extra=(("kind", kind), ("batch", tuple(m.id for m in self.batch)),
                   ("idle_slots", idle_rows), ("padded_rows", padded)),
        )

    def state_key(self, extra: Mapping[str, Hashable] | None = None) -> Hashable:
        """Requests named by position (batch order, then queue order). A queued request's
        wait steers a flush once it is the head, so waits are kept, capped at the timeout
        (beyond which they no longer matter); the step counter itself does not. `extra[id]`
        is appended to a request's entry (the explorer's per-request property history)."""
        extra = extra or {}

        def one(m: Member) -> tuple[object, ...]:
            return (m.prompt_len, m.max_tokens, m.num_output_tokens, m.blocks, m.done,
                    extra.get(m.id))
        queued_waits = tuple(min(self.current_step - m.arrival_step, self.cfg.flush_timeout)
                             for m in self.queue)
        return (self.free_blocks, tuple(one(m) for m in self.batch),
                tuple(one(m) for m in self.queue), queued_waits)
