"""Static and request-level dynamic batching as one branch-free step over fixed slots
(the rules of model/baselines/reference.py, written once over Ops).

Queue order and batch order are both arrival order, which is slot order: a request never
re-enters the queue (no preemption), so no order keys are needed. Configuration values are
concrete; only request values and the environment's EOS choices are symbolic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.baselines.config import LAUNCH_FULL, BaselineConfig
from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import RuleLimits
from model.core.types import SlotObs, SlotSpec, Step

# Slot status codes.
ABSENT, QUEUED, LIVE, DONE, RELEASED = 0, 1, 2, 3, 4
# Step kinds as model.state.Step.step_kind spells them.
KIND_OTHER, KIND_PROMPT, KIND_DECODE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class BaselineRuleConfig(RuleLimits):
    """The rules' view of a BaselineConfig. Shared properties read the RuleLimits fields,
    each given its nearest meaning: there is no per-step token budget (one forward prefills
    the whole batch), so `token_budget` is the most one forward can take, max_num_seqs rows
    of max_model_len tokens; `max_num_seqs` is the batch size; the KV pool has no null
    block; `max_model_len` is the pool in tokens; prompts are never chunked; no watermark
    and no priority policy."""

    launch_full: bool
    pad_finished: bool
    flush_timeout: int

    @staticmethod
    def from_config(cfg: BaselineConfig) -> BaselineRuleConfig:
        """The concrete rule config of a BaselineConfig."""
        return BaselineRuleConfig(
            token_budget=cfg.max_batch_size * cfg.token_capacity,
            max_num_seqs=cfg.max_batch_size, usable_blocks=cfg.num_kv_blocks,
            max_model_len=cfg.token_capacity, block_size=cfg.block_size, watermark_blocks=0,
            enable_chunked_prefill=False, policy_priority=False,
            launch_full=cfg.launch == LAUNCH_FULL, pad_finished=cfg.pad_finished,
            flush_timeout=cfg.flush_timeout)


@dataclass(frozen=True, slots=True)
class BaselineSlot:
    """One request slot between two steps."""

    status: object = ABSENT
    num_output_tokens: object = 0
    blocks: object = 0
    # Steps a queued request will have waited at the next step, capped at the flush
    # timeout (0 when no flush applies): read only by same_behaviour, since the step
    # counter itself is not part of the state.
    waited: object = 0


@dataclass(frozen=True, slots=True)
class BaselineState:
    """The queue, the batch and the KV pool between two steps."""

    slots: tuple[BaselineSlot, ...]
    free_blocks: object
    step: int = 0


def initial_state(num_slots: int, cfg: BaselineRuleConfig) -> BaselineState:
    """Nothing has arrived; the whole pool is free."""
    return BaselineState(tuple(BaselineSlot() for _ in range(num_slots)), cfg.usable_blocks)


def _launch_due(ops: Ops, cfg: BaselineRuleConfig, specs: Sequence[SlotSpec],
                status: Sequence[Int], t: int) -> Bool:
    """No batch runs and the launch rule fires (reference `launch_due`)."""
    queued = [s == QUEUED for s in status]
    batch = ops.or_(*[ops.or_(s == LIVE, s == DONE) for s in status])
    any_queued = ops.or_(*queued)
    if not cfg.launch_full:
        return ops.and_(ops.not_(batch), any_queued)
    count = ops.sum([ops.to_int(q) for q in queued])
    # The head is the first queued slot: slots are in arrival order.
    head_arrival: Int = 0
    for i in reversed(range(len(specs))):
        head_arrival = ops.ite(queued[i], specs[i].arrival_step, head_arrival)
    flushed: Bool = False
    if cfg.flush_timeout > 0:
        flushed = t - head_arrival >= cfg.flush_timeout
    return ops.and_(ops.not_(batch), any_queued,
                    ops.or_(count >= cfg.max_num_seqs, flushed))


def _reservation(ops: Ops, cfg: BaselineRuleConfig, spec: SlotSpec) -> Int:
    return ops.cdiv(spec.prompt_len + spec.max_tokens, cfg.block_size)


def step(ops: Ops, cfg: BaselineRuleConfig, specs: Sequence[SlotSpec], state: BaselineState,
         eos: Sequence[Bool]) -> tuple[BaselineState, Step]:
    """Arrivals, then a launch (the longest FIFO prefix that fits, prefilled whole) or one
    decode over the batch's live rows; a batch whose rows have all finished is released."""
    t = state.step + 1
    n = len(specs)
    status = [ops.ite(ops.and_(s.status == ABSENT, spec.arrival_step == t), QUEUED, s.status)
              for s, spec in zip(state.slots, specs, strict=True)]
    launch = _launch_due(ops, cfg, specs, status, t)
    free, taken, stopped = state.free_blocks, 0, ops.not_(launch)
    launched: list[Bool] = []
    blocks: list[Int] = []
    for i in range(n):
        need = _reservation(ops, cfg, specs[i])
        queued = status[i] == QUEUED
        take = ops.and_(queued, ops.not_(stopped), taken < cfg.max_num_seqs, need <= free)
        stopped = ops.name(ops.or_(stopped, ops.and_(queued, ops.not_(take))))
        launched.append(take)
        blocks.append(ops.ite(take, need, state.slots[i].blocks))
        free = ops.name(ops.ite(take, free - need, free))
        taken = ops.name(taken + ops.to_int(take))
    return _update(ops, cfg, specs, state, status, launched, blocks, free, eos)


def _update(ops: Ops, cfg: BaselineRuleConfig, specs: Sequence[SlotSpec], state: BaselineState,
            status: Sequence[Int], launched: Sequence[Bool], blocks: Sequence[Int], free: Int,
            eos: Sequence[Bool]) -> tuple[BaselineState, Step]:
    n = len(specs)
    live = [s == LIVE for s in status]
    scheduled = [ops.ite(launched[i], specs[i].prompt_len, ops.ite(live[i], 1, 0))
                 for i in range(n)]
    sampled = [ops.or_(launched[i], live[i]) for i in range(n)]
    outputs = [state.slots[i].num_output_tokens + ops.to_int(sampled[i]) for i in range(n)]
    stop = [ops.and_(sampled[i], eos[i]) for i in range(n)]
    finished = [ops.or_(stop[i], ops.and_(sampled[i], outputs[i] >= specs[i].max_tokens))
                for i in range(n)]
    after = [ops.ite(finished[i], DONE, ops.ite(sampled[i], LIVE, status[i])) for i in range(n)]
    in_batch = [ops.or_(s == LIVE, s == DONE) for s in after]
    released = ops.and_(ops.or_(*in_batch), ops.not_(ops.or_(*[s == LIVE for s in after])))
    free_end = free + ops.sum([ops.ite(ops.and_(released, in_batch[i]), blocks[i], 0)
                               for i in range(n)])
    cap = cfg.flush_timeout if cfg.launch_full else 0
    slots = tuple(BaselineSlot(
        status=ops.ite(ops.and_(released, in_batch[i]), RELEASED, after[i]),
        num_output_tokens=outputs[i],
        blocks=ops.ite(ops.and_(released, in_batch[i]), 0, blocks[i]),
        waited=ops.ite(after[i] == QUEUED, ops.min(state.step + 2 - specs[i].arrival_step, cap),
                       0)) for i in range(n))
    idle = ops.sum([ops.to_int(s == DONE) for s in status])
    obs = []
    rank: Int = 0
    for i, spec in enumerate(specs):
        before = state.slots[i].num_output_tokens
        ntok = spec.prompt_len + before
        computed_before = ops.ite(before > 0, ntok - 1, 0)
        obs.append(SlotObs(
            held=ops.or_(status[i] == QUEUED, live[i]), was_running=live[i],
            was_waiting=status[i] == QUEUED, scheduled=scheduled[i], serve_rank=rank,
            admitted=launched[i], resumed=False, preempted=False, finished=finished[i],
            finished_stop=stop[i], sampled=sampled[i], num_tokens=ntok,
            num_computed_tokens_before=computed_before,
            num_computed_tokens=computed_before + scheduled[i], num_output_tokens=outputs[i],
            blocks=blocks[i], num_preemptions=0, running_after=sampled[i],
            waiting_after=ops.and_(status[i] == QUEUED, ops.not_(launched[i])), queue_key=i,
            run_key=i, prompt_len=spec.prompt_len, max_tokens=spec.max_tokens,
            priority=spec.priority, arrival_time=i))
        rank = rank + ops.to_int(sampled[i])
    num_running = ops.sum([ops.to_int(x) for x in sampled])
    kind = ops.ite(ops.or_(*launched), KIND_PROMPT, ops.ite(ops.or_(*live), KIND_DECODE,
                                                            KIND_OTHER))
    observed = Step(
        step=state.step + 1, slots=tuple(obs), free_blocks=free, free_blocks_end=free_end,
        token_budget_left=cfg.token_budget - ops.sum(scheduled), num_running=num_running,
        num_running_end=num_running - ops.sum([ops.to_int(f) for f in finished]),
        any_preempted=False, cfg=cfg, step_kind=kind, idle_slots=idle,
        padded_rows=idle if cfg.pad_finished else 0)
    return BaselineState(slots, free_end, state.step + 1), observed


def same_behaviour(ops: Ops, a: BaselineState, b: BaselineState) -> Bool:
    """Equal slots (with their capped waits, which steer a flush) and pool."""
    cons: list[Bool] = [a.free_blocks == b.free_blocks]
    for x, y in zip(a.slots, b.slots, strict=True):
        cons += [x.status == y.status, x.num_output_tokens == y.num_output_tokens,
                 x.blocks == y.blocks, x.waited == y.waited]
    return ops.and_(*cons)
