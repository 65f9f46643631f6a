"""mistral.rs's own properties (paged-attention scheduler, commit 9e922623f24b, and the rules
its older versions changed), over Ops and the Step observables only, so any engine's steps
can be read by them. Line numbers are `mistralrs-core/src/paged_attention/scheduler.rs` (S:)
at 9e922623 unless a version is named."""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Int, Ops
from model.core.types import Step
from properties.catalogue import Property

STEP_PROMPT, STEP_DECODE = 1, 2  # model.state.Step.step_kind


def _all(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.and_(*xs) if xs else True


def _free_at_start(steps: Sequence[Step], t: int) -> Int:
    return steps[t - 1].free_blocks_end if t > 0 else steps[t].cfg.usable_blocks


def _blocks_before(steps: Sequence[Step], t: int, i: int) -> Int:
    return steps[t - 1].slots[i].blocks if t > 0 else 0


def _fits(ops: Ops, s: Step, tokens: Int) -> Bool:
    return ops.cdiv(tokens, s.cfg.block_size) <= s.free_blocks


def make_prefill_due_within(k: int) -> Property:
    """No run of k consecutive steps without a prompt step while a request waits whose whole
    sequence fits the free blocks, nothing is preempted and `running` has room."""
    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        if t < k - 1:
            return True
        each = []
        for u in range(t - k + 1, t + 1):
            s = steps[u]
            someone = ops.or_(*[o.was_waiting for o in s.slots])
            all_fit = _all(ops, [ops.implies(o.was_waiting, _fits(ops, s, o.num_tokens))
                                 for o in s.slots])
            each.append(ops.and_(s.step_kind != STEP_PROMPT, someone, all_fit,
                                 ops.not_(s.any_preempted),
                                 s.num_running < s.cfg.max_num_seqs))
        return ops.not_(ops.and_(*each))
    return Property("prefill_due_within", "window",
                    f"a waiting request that fits is not passed over by {k} consecutive steps "
                    "without a prompt step", holds, window=k, params=(("k", k),))


def no_spurious_preemption(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """No request is preempted in a step whose free blocks at its start cover every held
    request's next need: the missing blocks of each running request's current sequence and
    the whole sequence of each waiting one (preemption only on an allocation failure,
    kv_cache_manager.rs:230-233; S:688-693, 828-842)."""
    s = steps[t]
    need = ops.sum([
        ops.ite(o.was_running,
                ops.max(ops.cdiv(o.num_tokens, s.cfg.block_size) - _blocks_before(steps, t, i), 0),
                ops.ite(o.was_waiting, ops.cdiv(o.num_tokens, s.cfg.block_size), 0))
        for i, o in enumerate(s.slots)])
    return ops.implies(need <= _free_at_start(steps, t), ops.not_(s.any_preempted))


def prompt_decode_not_mixed(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """Every step is all prompt or all completion (S:60-62): a decode step gives one token
    to running requests, each of which samples it; a prompt step serves no request that
    was decoding (sampled in the previous step and kept running) unless it was preempted
    and re-admitted in this step."""
    s = steps[t]
    decode = _all(ops, [ops.implies(o.scheduled > 0,
                                    ops.and_(o.scheduled == 1, o.sampled, o.was_running,
                                             ops.not_(o.admitted), ops.not_(o.resumed)))
                        for o in s.slots])
    prompt: Bool = True
    if t > 0:
        prev = steps[t - 1].slots
        prompt = _all(ops, [ops.implies(ops.and_(o.scheduled > 0, prev[i].sampled,
                                                 ops.not_(prev[i].finished)),
                                        o.preempted)
                            for i, o in enumerate(s.slots)])
    return ops.or_(ops.and_(s.step_kind == STEP_DECODE, decode),
                   ops.and_(s.step_kind == STEP_PROMPT, prompt))


def whole_sequence_at_admission(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A request admitted (or re-admitted) holds KV blocks for its whole sequence right
    away, even when its prompt is computed in chunks (S:676-681)."""
    s = steps[t]
    return _all(ops, [ops.implies(ops.or_(o.admitted, o.resumed),
                                  o.blocks >= ops.cdiv(o.num_tokens, s.cfg.block_size))
                      for o in s.slots])


def fcfs_preemption(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """In a decode step, a running request that is preempted is never older than a request
    of the same length that the step serves: the decode turn allocates the oldest first and
    preempts the newest pending one (S:808, 835-836). Requests of one length share a bucket
    when the version buckets by length (v0.9.0 S:126-184), so that rule cannot be what
    preempted the older one."""
    s = steps[t]
    return ops.implies(s.step_kind == STEP_DECODE, _all(ops, [
        ops.not_(ops.and_(v.preempted, v.was_running, u.scheduled > 0,
                          u.num_tokens == v.num_tokens))
        for v in s.slots for u in s.slots if u.arrival_time > v.arrival_time]))


def decode_blocks_tight(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A request served in a decode step holds no more KV blocks than the tokens computed
    through the step need: a decoder's one uncomputed token is the last it needs room for,
    none is reserved for the token it is about to sample (len() when a token is uncomputed,
    S:818-824)."""
    s = steps[t]
    return ops.implies(s.step_kind == STEP_DECODE, _all(ops, [
        ops.implies(o.scheduled > 0,
                    o.blocks <= ops.cdiv(o.num_computed_tokens, s.cfg.block_size))
        for o in s.slots]))


def feasible_not_rejected(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A request whose whole sequence fits the usable KV pool on its own is never rejected
    with an error: the starvation escape preempts running sequences until it fits
    (S:693-728, b0882bd75: "a feasible sequence waits or evicts, it does not error")."""
    s = steps[t]
    return _all(ops, [
        ops.not_(ops.and_(o.finished, ops.not_(o.sampled),
                          ops.cdiv(o.num_tokens, s.cfg.block_size) <= s.cfg.usable_blocks))
        for o in s.slots])


PROPERTIES: tuple[Property, ...] = tuple(
    Property(f.__name__, "step", f.__doc__ or "", f)
    for f in (no_spurious_preemption, prompt_decode_not_mixed, whole_sequence_at_admission,
              fcfs_preemption, decode_blocks_tight, feasible_not_rejected))

FACTORIES = {"prefill_due_within": make_prefill_due_within}
