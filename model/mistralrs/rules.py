"""mistral.rs's paged-attention scheduler (commit 9e922623f24b) as one branch-free step over
fixed request slots, written once over Ops: the rules of model/mistralrs/reference.py. The
older versions' rules are the switches of `cfg.rules` (model/mistralrs/config.py); a switch
is a concrete Python bool, so branching on it builds one rule set or the other.

Orders are keys: `run_key` orders `running`, `wait_key` the `waiting` deque (smaller is
nearer the front); a sequence's timestamp is its slot index (slots are in arrival order).
Loops over queues are folds of `len(slots)` iterations that each select the slot with the
smallest (or largest) key, so the Python control flow never depends on a state value.
Configuration values are concrete. Line numbers: `paged_attention/scheduler.rs` (S:).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import (
    QueueState,
    RuleLimits,
    SlotProgress,
    arrive_at_tail,
    pick,
    same_queue_orders,
)
from model.core.types import SlotObs, SlotSpec, Step
from model.mistralrs.config import MistralrsConfig, MistralrsRules

ABSENT, WAITING, PROMPT, DECODE, FINISHED = 0, 1, 2, 3, 4
KIND_PROMPT, KIND_DECODE = 1, 2  # model.state.Step.step_kind


@dataclass(frozen=True, slots=True)
class MistralrsRuleConfig(RuleLimits):
    """The rules' view of a MistralrsConfig. Shared properties read the RuleLimits fields,
    each given its nearest meaning: the step budget is max_num_batched_tokens; the pool has
    num_gpu_blocks - 1 usable blocks (null block); `max_model_len` is the up-front capacity
    check num_gpu_blocks * block_size (S:605-619), the longest sequence it accepts; there is
    no watermark and no priority policy; prompts are chunked (scheduler-visible chunks)."""

    max_decode_steps_before_prefill: int
    waiting_timeout: int
    rules: MistralrsRules = MistralrsRules()

    @staticmethod
    def from_config(cfg: MistralrsConfig) -> MistralrsRuleConfig:
        """The concrete rule config of a MistralrsConfig."""
        return MistralrsRuleConfig(
            token_budget=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
            usable_blocks=cfg.usable_blocks, max_model_len=cfg.token_capacity,
            block_size=cfg.block_size, watermark_blocks=0, enable_chunked_prefill=True,
            policy_priority=False,
            max_decode_steps_before_prefill=cfg.max_decode_steps_before_prefill,
            waiting_timeout=cfg.waiting_timeout, rules=cfg.rules)


@dataclass(frozen=True, slots=True)
class MistralrsSlot(SlotProgress):
    """One request slot between two steps."""

    blocks: object = 0
    waiting_count: object = 0
    num_preemptions: object = 0
    run_key: object = 0
    wait_key: object = 0


@dataclass(frozen=True, slots=True)
class MistralrsState(QueueState[MistralrsSlot]):
    """Slots, the KV pool, queue keys, the decode-turn counter, the round-robin cursor."""

    decode_steps_since_prefill: object = 0
    completion_cursor: object = 0


def initial_state(num_slots: int, cfg: MistralrsRuleConfig) -> MistralrsState:
    """Nothing has arrived; every usable block is free."""
    return MistralrsState(tuple(MistralrsSlot() for _ in range(num_slots)), cfg.usable_blocks)


@dataclass(slots=True)
class _Work:
    """Mutable scratch for one step (a fold accumulator, not a state type)."""

    status: list[Int]
    ncomp: list[Int]
    blocks: list[Int]
    count: list[Int]
    npre: list[Int]
    run_key: list[Int]
    wait_key: list[Int]
    ntok: list[Int]
    admitted_at: list[Int]  # admission event order + 1, 0 if none (first admission)
    resumed_at: list[Int]  # re-admission after a preemption, event order + 1
    preempted_at: list[Int]  # preemption event order + 1
    rejected_at: list[Int]  # rejected with an error, event order + 1
    free: Int
    next_run_key: Int
    wait_head: Int
    events: Int

    def name(self, ops: Ops) -> None:
        """Name every accumulator (identity under ConcreteOps; flat terms for the solver)."""
        for field in ("status", "ncomp", "blocks", "count", "npre", "run_key", "wait_key",
                      "admitted_at", "resumed_at", "preempted_at", "rejected_at"):
            setattr(self, field, [ops.name(v) for v in getattr(self, field)])
        for field in ("free", "next_run_key", "wait_head", "events"):
            setattr(self, field, ops.name(getattr(self, field)))


def _select(ops: Ops, eligible: Sequence[Bool], keys: Sequence[Int], largest: bool = False
            ) -> list[Bool]:
    """One-hot choice of the eligible slot with the smallest (largest) key; keys are
    distinct among eligible slots."""
    n = len(eligible)
    out = []
    for i in range(n):
        beaten = [ops.and_(eligible[j], keys[j] > keys[i] if largest else keys[j] < keys[i])
                  for j in range(n) if j != i]
        out.append(ops.and_(eligible[i], ops.not_(ops.or_(*beaten)) if beaten else True))
    return out


def _count(ops: Ops, flags: Sequence[Bool]) -> Int:
    return ops.sum([ops.to_int(f) for f in flags])


def _arrive(ops: Ops, specs: Sequence[SlotSpec], state: MistralrsState, t: int) -> MistralrsState:
    """Arrivals join the waiting tail in slot order (`add_seq`, S:1082-1084)."""
    return arrive_at_tail(ops, specs, state, t, ABSENT, WAITING)


def completion_is_due(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, k: Int) -> Bool:
    """S:239-273 (with `waiting_prompt_fits_free_blocks`, S:275-290)."""
    n = len(w.status)
    decoding = _count(ops, [s == DECODE for s in w.status])
    prompt_tokens = ops.sum([ops.ite(w.status[i] == PROMPT, w.ntok[i] - w.ncomp[i], 0)
                             for i in range(n)])
    waiting = [s == WAITING for s in w.status]
    has_waiting = ops.or_(*waiting)
    running = _count(ops, [ops.or_(s == PROMPT, s == DECODE) for s in w.status])
    head = _select(ops, waiting, w.wait_key)
    head_fits = ops.and_(has_waiting, ops.cdiv(pick(ops, head, w.ntok), cfg.block_size)
                         + decoding <= w.free)
    short_tail = ops.and_(prompt_tokens > 0, prompt_tokens <= cfg.token_budget)
    refill = ops.and_(prompt_tokens == 0, has_waiting, running < cfg.max_num_seqs, head_fits,
                      k > 0)
    has_prompt = ops.or_(prompt_tokens > 0, has_waiting)
    return ops.and_(decoding > 0, ops.not_(short_tail), ops.not_(refill),
                    ops.or_(ops.not_(has_prompt), k < cfg.max_decode_steps_before_prefill))


def _preempt(ops: Ops, w: _Work, victim: Sequence[Bool], do: Bool) -> None:
    """`_preempt` (S:1026-1072) on the selected victim when `do`: free its blocks,
    num_computed_tokens 0, back to the front of waiting."""
    for i, v in enumerate(victim):
        hit = ops.and_(do, v)
        w.free = w.free + ops.ite(hit, w.blocks[i], 0)
        w.blocks[i] = ops.ite(hit, 0, w.blocks[i])
        w.status[i] = ops.ite(hit, WAITING, w.status[i])
        w.ncomp[i] = ops.ite(hit, 0, w.ncomp[i])
        w.npre[i] = ops.ite(hit, w.npre[i] + 1, w.npre[i])
        w.wait_key[i] = ops.ite(hit, w.wait_head, w.wait_key[i])
        w.preempted_at[i] = ops.ite(hit, w.events + 1, w.preempted_at[i])
    w.wait_head = ops.ite(do, w.wait_head - 1, w.wait_head)
    w.events = ops.ite(do, w.events + 1, w.events)


def admission_visits(n: int, rules: MistralrsRules) -> int:
    """How many heads one admission loop can visit with `n` slots: the fold's length.

    Upstream loops `while !self.waiting.is_empty()` (S:585; v0.9.2 S:284; v0.8.22-v0.9.0
    S:193) and an escape's victims go back to the waiting front (S:702-704, 1071; v0.9.2
    S:378-380), so a sequence can be visited again in the same call: a victim behind an
    admitted head fails (its count, reset at its own admission, S:684-687, becomes 1 and
    the loop breaks, S:729-731) or, after the head was rejected, is admitted again. Only a
    head that had failed WAITING_TIMEOUT times before the call escapes (a failure below
    the timeout ends the loop), at most once per call (its count is reset or it leaves),
    and never as a victim of its own escape. So the visits are the first visits (<= n)
    plus one per victim of each escape. With E escapes that preempt anything (E <= n - 1:
    each needs a running sequence besides its waiting head), the k-th preempts at most the
    n - 1 - (E - k) sequences that are neither its head nor a later one. One victim per
    escape without escape_loop: n + (n - 1); with it: n + sum_k (n - 1 - (E - k)) <=
    n(n + 1)/2. (The fold's last visits are no-ops once the loop has stopped.)"""
    return n * (n + 1) // 2 if rules.escape_loop else max(2 * n - 1, 0)


def _admission(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, due: Bool) -> None:
    """The admission loop (S:585-765), one waiting head per iteration, for as many
    iterations as the loop can visit heads (`admission_visits`: an escape's victims are
    visited again); under ConcreteOps the fold checks that it was long enough."""
    n = len(w.status)
    stopped: Bool = due
    for _ in range(admission_visits(n, cfg.rules)):
        waiting = [s == WAITING for s in w.status]
        running = _count(ops, [ops.or_(s == PROMPT, s == DECODE) for s in w.status])
        candidates = _count(ops, [s == PROMPT for s in w.status])
        active = ops.and_(ops.not_(stopped), ops.or_(*waiting))
        full = running >= cfg.max_num_seqs
        if cfg.rules.token_budget:
            full = ops.or_(full, candidates >= cfg.token_budget)
        stopped = ops.or_(stopped, ops.and_(active, full))
        active = ops.and_(active, ops.not_(full))
        head = _select(ops, waiting, w.wait_key)
        ntok = pick(ops, head, w.ntok)
        too_big = ntok > cfg.max_model_len  # S:605-619
        need = ops.cdiv(ntok, cfg.block_size)
        fits = need <= w.free
        failed = ops.and_(active, ops.not_(too_big), ops.not_(fits))
        for i in range(n):
            w.count[i] = ops.ite(ops.and_(failed, head[i]), w.count[i] + 1, w.count[i])
        escape = ops.and_(failed, pick(ops, head, w.count) > cfg.waiting_timeout)
        stopped = ops.or_(stopped, ops.and_(failed, ops.not_(escape)))  # S:729-731
        fits = _escape(ops, cfg, w, head, need, escape, fits)
        reject = ops.and_(active, ops.or_(too_big, ops.and_(escape, ops.not_(fits))))
        admit = ops.and_(active, ops.not_(too_big), fits)
        _admit(ops, w, head, need, admit, reject)
        stopped = ops.name(stopped)
        w.name(ops)
    if isinstance(stopped, bool):  # concrete: one more visit would change nothing
        assert stopped or not any(s == WAITING for s in w.status), "admission fold too short"


def _escape(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, head: Sequence[Bool], need: Int,
            escape: Bool, fits: Bool) -> Bool:
    """S:693-728: while the head does not fit, preempt `running.pop_back()`, keeping the
    head at the front of waiting (the victim goes right behind it); one victim without
    escape_loop (v0.9.2 S:376-399)."""
    n = len(w.status)
    for _ in range(n if cfg.rules.escape_loop else 1):
        running = [ops.or_(s == PROMPT, s == DECODE) for s in w.status]
        do = ops.and_(escape, ops.not_(fits), ops.or_(*running))
        victim = _select(ops, running, w.run_key, largest=True)
        head_key = pick(ops, head, w.wait_key)
        new_head = w.wait_head
        _preempt(ops, w, victim, do)
        for i in range(n):
            # victim takes the head's place; the head moves in front of it
            w.wait_key[i] = ops.ite(ops.and_(do, victim[i]), head_key, w.wait_key[i])
            w.wait_key[i] = ops.ite(ops.and_(do, head[i]), new_head, w.wait_key[i])
        fits = ops.name(ops.or_(fits, ops.and_(do, need <= w.free)))
        w.name(ops)
    return fits


def _admit(ops: Ops, w: _Work, head: Sequence[Bool], need: Int, admit: Bool, reject: Bool
           ) -> None:
    """Whole-prompt allocation done: the head becomes a running prompt (S:756-764); or it
    is rejected with an error (S:735-737)."""
    for i, h in enumerate(head):
        yes = ops.and_(admit, h)
        w.status[i] = ops.ite(yes, PROMPT, ops.ite(ops.and_(reject, h), FINISHED, w.status[i]))
        w.rejected_at[i] = ops.ite(ops.and_(reject, h), w.events + 1, w.rejected_at[i])
        w.blocks[i] = ops.ite(yes, need, w.blocks[i])
        w.count[i] = ops.ite(yes, 0, w.count[i])
        w.run_key[i] = ops.ite(yes, w.next_run_key, w.run_key[i])
        first = ops.and_(yes, w.npre[i] == 0)
        w.admitted_at[i] = ops.ite(first, w.events + 1, w.admitted_at[i])
        w.resumed_at[i] = ops.ite(ops.and_(yes, w.npre[i] > 0), w.events + 1, w.resumed_at[i])
    w.free = ops.ite(admit, w.free - need, w.free)
    w.next_run_key = ops.ite(admit, w.next_run_key + 1, w.next_run_key)
    w.events = ops.ite(ops.or_(admit, reject), w.events + 1, w.events)


def _prompt_turn(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, scheduled: list[Int],
                 rank: list[Int], do: Bool) -> Int | None:
    """`select_prompt_batch` (S:150-237): chunk = max(1, budget / #candidates) (S:136-138);
    only candidates whose next range is final iff the first one's is run
    (pipeline/prompt_chunks.rs:10-43, 120-225). Without the token budget every candidate
    runs its whole sequence (v0.9.2 S:454-484); with bucket_by_length only the shortest do,
    the others are preempted when `do` (v0.9.0 S:361-365). Returns the chunk size (None
    without the budget)."""
    n = len(w.status)
    cand = [s == PROMPT for s in w.status]
    chunk: Int | None = None
    if cfg.rules.token_budget:
        num = _count(ops, cand)
        chunk = 0
        for c in range(1, n + 1):
            chunk = ops.ite(num == c, max(1, cfg.token_budget // c), chunk)
        first = _select(ops, cand, w.run_key)
        final_first = pick(ops, first, w.ncomp) + chunk >= pick(ops, first, w.ntok)
        active = [ops.and_(cand[i], (w.ncomp[i] + chunk >= w.ntok[i]) == final_first)
                  for i in range(n)]
    else:
        active = cand
    if cfg.rules.bucket_by_length:
        active = _bucket(ops, w, active, w.run_key, do)
    for i in range(n):
        remaining = w.ntok[i] - w.ncomp[i]
        scheduled[i] = ops.ite(active[i], remaining if chunk is None
                               else ops.min(chunk, remaining), 0)
        rank[i] = _count(ops, [ops.and_(active[j], w.run_key[j] < w.run_key[i])
                               for j in range(n) if j != i])
    return chunk


def _bucket(ops: Ops, w: _Work, rows: Sequence[Bool], order: Sequence[Int], do: Bool
            ) -> list[Bool]:
    """`bucket_and_preempt_sequences` (v0.9.0 S:126-184) over the `rows` (in `order`):
    the rows of the shortest len() run; when `do`, every other row is preempted to the
    waiting front. Upstream preempts the other buckets in HashMap order (S:172, RandomState);
    the model's fixed order, as the reference's: shorter buckets first, each bucket's rows
    in reverse order (S:173), so the front of waiting holds the longest bucket first and
    each bucket in its rows' order. Returns the rows kept."""
    n = len(rows)
    kept: list[Bool] = []
    for i in range(n):
        shorter = [ops.and_(rows[j], w.ntok[j] < w.ntok[i]) for j in range(n) if j != i]
        kept.append(ops.and_(rows[i], ops.not_(ops.or_(*shorter))) if shorter else rows[i])
    victim = [ops.and_(do, rows[i], ops.not_(kept[i])) for i in range(n)]
    total = _count(ops, victim)
    for i in range(n):
        ahead = _count(ops, [ops.and_(victim[j], ops.or_(
            w.ntok[j] > w.ntok[i], ops.and_(w.ntok[j] == w.ntok[i], order[j] < order[i])))
            for j in range(n) if j != i])
        hit = victim[i]
        w.free = w.free + ops.ite(hit, w.blocks[i], 0)
        w.blocks[i] = ops.ite(hit, 0, w.blocks[i])
        w.status[i] = ops.ite(hit, WAITING, w.status[i])
        w.ncomp[i] = ops.ite(hit, 0, w.ncomp[i])
        w.npre[i] = ops.ite(hit, w.npre[i] + 1, w.npre[i])
        w.wait_key[i] = ops.ite(hit, w.wait_head - total + 1 + ahead, w.wait_key[i])
        w.preempted_at[i] = ops.ite(hit, w.events + total - ahead, w.preempted_at[i])
    w.wait_head = w.wait_head - total
    w.events = w.events + total
    w.name(ops)
    return kept


def _decode_order(cfg: MistralrsRuleConfig, n: int) -> list[int]:
    """Slots in the order the decode turn visits them: timestamp ascending (S:808,
    1074-1078), descending without victim_newest (v0.8.22 S:588-593)."""
    return list(range(n)) if cfg.rules.victim_newest else list(range(n - 1, -1, -1))


def _decode_allocation(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, do: Bool) -> None:
    """S:808-855: decoding sequences oldest first (timestamp = slot index); each needs
    blocks for len() tokens (one uncomputed token, S:818-824; len() + 1 with
    reserve_next_token, v0.8.23 S:396-402); on failure the newest pending one is preempted
    (the oldest without victim_newest), or the sequence itself when none is left."""
    n = len(w.status)
    visit = _decode_order(cfg, n)
    extra = int(cfg.rules.reserve_next_token)
    for k, i in enumerate(visit):
        mine = ops.and_(do, w.status[i] == DECODE)
        dropped: Bool = False
        later = visit[k + 1:]
        for _ in range(len(later) + 1):
            need = ops.max(ops.cdiv(w.ntok[i] + extra, cfg.block_size) - w.blocks[i], 0)
            short = ops.and_(mine, ops.not_(dropped), need > w.free)
            pending = [ops.and_(j in later, w.status[j] == DECODE) for j in range(n)]
            any_pending = ops.or_(*pending)
            # pending.pop(): the last one the turn would visit
            victim = _select(ops, pending, [later.index(j) if j in later else 0
                                            for j in range(n)], largest=True)
            _preempt(ops, w, victim, ops.and_(short, any_pending))
            self_hit = ops.and_(short, ops.not_(any_pending))
            _preempt(ops, w, [j == i for j in range(n)], self_hit)
            dropped = ops.name(ops.or_(dropped, self_hit))
            w.name(ops)
        need = ops.max(ops.cdiv(w.ntok[i] + extra, cfg.block_size) - w.blocks[i], 0)
        ok = ops.and_(mine, ops.not_(dropped))
        w.blocks[i] = ops.ite(ok, w.blocks[i] + need, w.blocks[i])
        w.free = ops.name(ops.ite(ok, w.free - need, w.free))


def _round_robin(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, cursor: Int,
                 scheduled: list[Int], rank: list[Int], do: Bool) -> Int:
    """`completion_batch_indices` (S:298-326) with cost 1 per row: rows are the decoding
    sequences in the decode turn's order; from `cursor % rows`, take min(rows, budget); the
    cursor moves past the last row taken. Without the token budget every row is taken in
    order and the cursor stays (v0.9.2 S:604-607). Returns the new cursor."""
    n = len(w.status)
    rows = [w.status[i] == DECODE for i in range(n)]
    visit = _decode_order(cfg, n)
    pos: list[Int] = [0] * n
    for k, i in enumerate(visit):
        pos[i] = _count(ops, [rows[j] for j in visit[:k]])
    if not cfg.rules.token_budget:
        for i in range(n):
            chosen = ops.and_(do, rows[i])
            scheduled[i] = ops.ite(chosen, 1, scheduled[i])
            rank[i] = ops.ite(chosen, pos[i], rank[i])
        return cursor
    num = _count(ops, rows)
    new_cursor = cursor
    for c in range(1, n + 1):
        start = cursor - ops.floordiv(cursor, c) * c
        take = min(c, cfg.token_budget)
        here = ops.and_(do, num == c)
        for i in range(n):
            offset = pos[i] - start + ops.ite(pos[i] < start, c, 0)
            chosen = ops.and_(here, rows[i], offset < take)
            scheduled[i] = ops.ite(chosen, 1, scheduled[i])
            rank[i] = ops.ite(chosen, offset, rank[i])
        end = start + take
        new_cursor = ops.ite(here, ops.ite(end >= c, end - c, end), new_cursor)
    return new_cursor


def _running_order(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, do: Bool) -> None:
    """After a decode turn `running` is the kept decoders in the turn's order, then the
    running prompts in their old order (S:856, 935); keys are renumbered 0.. in that
    order."""
    n = len(w.status)
    dec = [s == DECODE for s in w.status]
    pro = [s == PROMPT for s in w.status]
    num_dec = _count(ops, dec)
    visit = _decode_order(cfg, n)
    keys: list[Int] = [0] * n
    for k, i in enumerate(visit):
        as_dec = _count(ops, [dec[j] for j in visit[:k]])
        as_pro = num_dec + _count(ops, [ops.and_(pro[j], w.run_key[j] < w.run_key[i])
                                        for j in range(n) if j != i])
        keys[i] = ops.ite(dec[i], as_dec, ops.ite(pro[i], as_pro, w.run_key[i]))
    for i in range(n):
        w.run_key[i] = ops.ite(do, keys[i], w.run_key[i])
    running = _count(ops, [ops.or_(d, p) for d, p in zip(dec, pro, strict=True)])
    w.next_run_key = ops.ite(do, running, w.next_run_key)


def _completion_due(ops: Ops, cfg: MistralrsRuleConfig, w: _Work, k: Int) -> Bool:
    """Whether the call decodes without admission: completion_is_due with the token budget;
    with alternate turns, after a prompt step (k = 0: a prompt step resets the counter, a
    decode step makes it >= 1) while anything runs (v0.9.2 S:278-284); never when prefill
    comes first (v0.9.0 S:193)."""
    if cfg.rules.token_budget:
        return completion_is_due(ops, cfg, w, k)
    if not cfg.rules.alternate_turns:
        return False
    running = ops.or_(*[ops.or_(s == PROMPT, s == DECODE) for s in w.status])
    return ops.and_(k == 0, running)


def step(ops: Ops, cfg: MistralrsRuleConfig, specs: Sequence[SlotSpec], state: MistralrsState,
         eos: Sequence[Bool]) -> tuple[MistralrsState, Step]:
    """One engine step: arrivals, `schedule()` (a prompt turn or a decode turn), the
    forward pass with the environment's EOS choices, then freeing finished sequences."""
    new_state, observed, _ = step_with_chunk(ops, cfg, specs, state, eos)
    return new_state, observed


def step_with_chunk(ops: Ops, cfg: MistralrsRuleConfig, specs: Sequence[SlotSpec],
                    state: MistralrsState, eos: Sequence[Bool]
                    ) -> tuple[MistralrsState, Step, Int | None]:
    """`step`, also returning the prompt turn's chunk size (meaningful in a prompt step;
    None without the token budget)."""
    n = len(specs)
    state = _arrive(ops, specs, state, state.step + 1)
    before = state.slots
    w = _Work(
        status=[s.status for s in before], ncomp=[s.num_computed_tokens for s in before],
        blocks=[s.blocks for s in before], count=[s.waiting_count for s in before],
        npre=[s.num_preemptions for s in before], run_key=[s.run_key for s in before],
        wait_key=[s.wait_key for s in before],
        ntok=[spec.prompt_len + s.num_output_tokens for spec, s in zip(specs, before,
                                                                       strict=True)],
        admitted_at=[0] * n, resumed_at=[0] * n, preempted_at=[0] * n, rejected_at=[0] * n,
        free=state.free_blocks, next_run_key=state.next_run_key, wait_head=state.wait_head,
        events=0)
    k = state.decode_steps_since_prefill
    due = ops.name(_completion_due(ops, cfg, w, k))
    _admission(ops, cfg, w, due)
    scheduled: list[Int] = [0] * n
    rank: list[Int] = [0] * n
    prompt = ops.name(ops.and_(ops.not_(due), ops.or_(*[s == PROMPT for s in w.status])))
    chunk = _prompt_turn(ops, cfg, w, scheduled, rank, prompt)
    scheduled = [ops.ite(prompt, x, 0) for x in scheduled]
    decode = ops.not_(prompt)
    _decode_allocation(ops, cfg, w, decode)
    if cfg.rules.bucket_by_length:
        order = [_decode_order(cfg, n).index(i) for i in range(n)]
        _bucket(ops, w, [ops.and_(decode, s == DECODE) for s in w.status], order, decode)
    cursor = _round_robin(ops, cfg, w, state.completion_cursor, scheduled, rank, decode)
    _running_order(ops, cfg, w, decode)
    k_next = ops.ite(prompt, 0, ops.min(k + 1, cfg.max_decode_steps_before_prefill))
    new_state, observed = _update(ops, cfg, specs, state, w, scheduled, rank, eos, prompt,
                                  k_next, cursor)
    return new_state, observed, chunk


def _update(ops: Ops, cfg: MistralrsRuleConfig, specs: Sequence[SlotSpec],
            state: MistralrsState, w: _Work, scheduled: Sequence[Int], rank: Sequence[Int],
            eos: Sequence[Bool], prompt: Bool, k_next: Int, cursor: Int
            ) -> tuple[MistralrsState, Step]:
    """The forward pass: a final prompt chunk or a decode samples one token and the
    sequence decodes from then on (pipeline/mod.rs:2297-2307); stop on EOS, then on
    max_tokens; finished sequences free their blocks (S:957-1022)."""
    before = state.slots
    slots: list[MistralrsSlot] = []
    obs: list[SlotObs] = []
    free_end = w.free
    for i, spec in enumerate(specs):
        ncomp = w.ncomp[i] + scheduled[i]
        sampled = ops.and_(scheduled[i] > 0, ncomp >= w.ntok[i])
        outputs = before[i].num_output_tokens + ops.to_int(sampled)
        stop = ops.and_(sampled, eos[i])
        finished_now = ops.or_(stop, ops.and_(sampled, outputs >= spec.max_tokens))
        status = ops.ite(sampled, DECODE, w.status[i])
        free_end = free_end + ops.ite(finished_now, w.blocks[i], 0)
        slots.append(MistralrsSlot(
            status=ops.ite(finished_now, FINISHED, status), num_computed_tokens=ncomp,
            num_output_tokens=outputs, blocks=ops.ite(finished_now, 0, w.blocks[i]),
            waiting_count=w.count[i], num_preemptions=w.npre[i], run_key=w.run_key[i],
            wait_key=w.wait_key[i]))
        held = ops.or_(before[i].status == WAITING, before[i].status == PROMPT,
                       before[i].status == DECODE)
        in_running = ops.or_(w.status[i] == PROMPT, w.status[i] == DECODE)
        obs.append(SlotObs(
            held=held, was_running=ops.or_(before[i].status == PROMPT,
                                           before[i].status == DECODE),
            was_waiting=before[i].status == WAITING, scheduled=scheduled[i],
            serve_rank=rank[i], admitted=w.admitted_at[i] > 0, resumed=w.resumed_at[i] > 0,
            preempted=w.preempted_at[i] > 0, finished=ops.or_(finished_now, w.rejected_at[i] > 0),
            finished_stop=stop, sampled=sampled, num_tokens=w.ntok[i],
            num_computed_tokens_before=before[i].num_computed_tokens,
            num_computed_tokens=ncomp, num_output_tokens=outputs, blocks=w.blocks[i],
            num_preemptions=w.npre[i], running_after=in_running,
            waiting_after=w.status[i] == WAITING, queue_key=w.wait_key[i],
            run_key=w.run_key[i], prompt_len=spec.prompt_len, max_tokens=spec.max_tokens,
            priority=spec.priority, arrival_time=i))
    num_running = _count(ops, [o.running_after for o in obs])
    finished_running = _count(ops, [ops.and_(o.running_after, o.finished) for o in obs])
    new_state = MistralrsState(
        slots=tuple(slots), free_blocks=free_end, decode_steps_since_prefill=k_next,
        completion_cursor=cursor, next_run_key=w.next_run_key, wait_head=w.wait_head,
        wait_tail=state.wait_tail, step=state.step + 1)
    observed = Step(
        step=state.step + 1, slots=tuple(obs), free_blocks=w.free, free_blocks_end=free_end,
        token_budget_left=cfg.token_budget - ops.sum(list(scheduled)), num_running=num_running,
        num_running_end=num_running - finished_running,
        any_preempted=ops.or_(*[p > 0 for p in w.preempted_at]), cfg=cfg,
        step_kind=ops.ite(prompt, KIND_PROMPT, KIND_DECODE))
    return new_state, observed


def same_behaviour(ops: Ops, a: MistralrsState, b: MistralrsState) -> Bool:
    """Equal slots (but the counters that steer nothing), pool, decode-turn counter and
    cursor; queues in the same relative order."""
    cons: list[Bool] = [a.free_blocks == b.free_blocks,
                        a.decode_steps_since_prefill == b.decode_steps_since_prefill,
                        a.completion_cursor == b.completion_cursor]
    for x, y in zip(a.slots, b.slots, strict=True):
        cons += [x.status == y.status, x.num_computed_tokens == y.num_computed_tokens,
                 x.num_output_tokens == y.num_output_tokens, x.blocks == y.blocks,
                 x.waiting_count == y.waiting_count]
    cons += same_queue_orders(ops, a.slots, b.slots, (
        (lambda s: ops.or_(s.status == PROMPT, s.status == DECODE), lambda s: s.run_key),
        (lambda s: s.status == WAITING, lambda s: s.wait_key)))
    return ops.and_(*cons)
