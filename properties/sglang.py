"""SGLang's own properties, over Ops and the Step observables only (so they can be read on any
engine's steps: an engine without mixed chunk or chunk size reads them with SGLang's
defaults, mixed off and the token budget as the chunk).

Words: a *decode* is the one token scheduled to a request that was running when the step
began and lacked exactly that token; any other scheduled tokens are an *extend* (a prefill
chunk, or the recomputation of a retracted request).
"""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Int, Ops
from model.core.types import SlotObs, Step
from properties.catalogue import Property


def _all(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.and_(*xs) if xs else True


def _any(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.or_(*xs) if xs else False


def _decodes(ops: Ops, o: SlotObs) -> Bool:
    """A decode: one token to a running request that lacked exactly one."""
    return ops.and_(o.scheduled > 0, o.was_running,
                    o.num_tokens - o.num_computed_tokens_before == 1)


def _extends(ops: Ops, o: SlotObs) -> Bool:
    """A prefill (extend) chunk: any other scheduled tokens."""
    return ops.and_(o.scheduled > 0, ops.not_(_decodes(ops, o)))


def _mixed(s: Step) -> bool:
    return bool(getattr(s.cfg, "enable_mixed_chunk", False))


def _chunk(s: Step) -> int:
    size = getattr(s.cfg, "chunked_prefill_size", None)
    return s.cfg.token_budget if size is None else size


def _prefill_step(ops: Ops, s: Step) -> Bool:
    return _any(ops, [_extends(ops, o) for o in s.slots])


def _running_decode(ops: Ops, s: Step) -> Bool:
    return _any(ops, [_decodes(ops, o) for o in s.slots])


# --- safety -----------------------------------------------------------------------------


def no_decode_in_prefill_batch(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A step that runs a prefill batch gives the running requests no decode token unless
    mixed chunk is on (managers/scheduler.py:3870-3883; mixing 4251-4288)."""
    s = steps[t]
    if _mixed(s):
        return True
    return ops.implies(_prefill_step(ops, s), ops.not_(_running_decode(ops, s)))


def at_most_one_chunked(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """At most one request ends a step with its prefill unfinished, and a request carried
    unfinished from the previous step is served first in this one
    (managers/scheduler.py:4053-4061, 4199-4203)."""
    s = steps[t]
    partial = [ops.and_(o.scheduled > 0, ops.not_(o.sampled)) for o in s.slots]
    one = ops.sum([ops.to_int(p) for p in partial]) <= 1
    if t == 0:
        return one
    prev = steps[t - 1]
    first = _all(ops, [
        ops.implies(ops.and_(p.scheduled > 0, ops.not_(p.sampled)),
                    ops.and_(o.scheduled > 0, o.serve_rank == 0))
        for p, o in zip(prev.slots, s.slots, strict=True)])
    return ops.and_(one, first)


def retraction_keeps_one(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A step that retracts keeps at least one running request, and that request decodes
    (managers/schedule_batch.py:3310-3316)."""
    s = steps[t]
    kept = _any(ops, [ops.and_(o.was_running, ops.not_(o.preempted), o.scheduled > 0)
                      for o in s.slots])
    return ops.implies(s.any_preempted, kept)


def admission_never_overcommits(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """No step has to retract or abort a running request for decode memory: what admission
    reserved (new_token_ratio times the running requests' remaining outputs,
    managers/schedule_policy.py:754-764) was enough (managers/scheduler.py:4361-4416)."""
    s = steps[t]
    aborted = _any(ops, [ops.and_(o.finished, ops.not_(o.sampled)) for o in s.slots])
    return ops.not_(ops.or_(s.any_preempted, aborted))


def prefill_budgets_respected(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """With chunked prefill on, a batch's prefill tokens plus its mixed decode tokens never
    exceed chunked_prefill_size (managers/schedule_policy.py:607-624, 1549-1575,
    1092-1173); KV allocation never exceeds the free pool; the running batch never exceeds
    max_running_requests (managers/scheduler.py:3907-3925, 4081-4095)."""
    s = steps[t]
    kv = s.free_blocks >= 0
    running = s.num_running <= s.cfg.max_num_seqs
    if not s.cfg.enable_chunked_prefill:
        return ops.and_(kv, running)
    extend = ops.sum([ops.ite(_extends(ops, o), o.scheduled, 0) for o in s.slots])
    decode = ops.sum([ops.ite(_decodes(ops, o), o.scheduled, 0) for o in s.slots])
    batch = ops.ite(_prefill_step(ops, s), extend + decode, 0)
    return ops.and_(kv, running, batch <= _chunk(s))


# --- the chunked-prefill decode stall ----------------------------------------------------


def _free_at_start(steps: Sequence[Step], u: int) -> Int:
    return steps[u - 1].free_blocks_end if u > 0 else steps[0].cfg.usable_blocks


def _ample(ops: Ops, steps: Sequence[Step], u: int) -> Bool:
    """Memory cannot cut a chunk at step u: the free pool less every request's
    max_new_tokens (a bound on what new_token_ratio reserves for the running batch,
    finished-but-listed requests included) covers a chunk."""
    s = steps[u]
    bound = ops.sum([ops.ite(ops.or_(o.held, o.num_output_tokens > 0), o.max_tokens, 0)
                     for o in s.slots])
    return _free_at_start(steps, u) - bound >= _chunk(s)


def decode_stall_ceil_l_over_c(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """While a prompt of L uncached tokens is prefilled in chunks of C with mixed chunk off,
    the running requests get no decode token, for at least ceil(L / C) consecutive steps,
    and exactly ceil(L / C) when the prompt was served first in its first step and memory
    never cut a chunk (managers/scheduler.py:3973-4004 skip the early exits while
    chunked_req is set; schedule_policy.py:1092-1173 serve it first)."""
    s = steps[t]
    if _mixed(s) or not s.cfg.enable_chunked_prefill:
        return True
    c = _chunk(s)
    out: list[Bool] = []
    for i in range(len(s.slots)):
        done = ops.and_(_extends(ops, s.slots[i]), s.slots[i].sampled)
        for a in range(max(0, t - STALL_WINDOW + 1), t + 1):
            run = [_extends(ops, steps[u].slots[i]) for u in range(a, t + 1)]
            partial = [ops.not_(steps[u].slots[i].sampled) for u in range(a, t)]
            # A run reaching back past the window is not judged (a = t - window + 1 only
            # when the request also got nothing the step before).
            starts = ops.not_(_extends(ops, steps[a - 1].slots[i])) if a > 0 else True
            window = ops.and_(done, starts, *run, *partial)
            total = ops.sum([steps[u].slots[i].scheduled for u in range(a, t + 1)])
            n = t - a + 1
            stalled = _all(ops, [ops.not_(_running_decode(ops, steps[u]))
                                 for u in range(a, t + 1)])
            exact_case = ops.and_(steps[a].slots[i].serve_rank == 0,
                                  *[_ample(ops, steps, u) for u in range(a + 1, t + 1)])
            count_ok = ops.and_(n * c >= total,
                                ops.implies(exact_case, (n - 1) * c < total))
            out.append(ops.implies(window, ops.and_(stalled, count_ok)))
    return _all(ops, out)


def _prop(f: object) -> Property:
    return Property(f.__name__, "step", f.__doc__ or "", f)  # type: ignore[attr-defined]


# The stall property reads the chunk run back to its first step, so it is a window
# property: the explorer then keys states by the last STALL_WINDOW - 1 steps, and runs
# longer than the window are not judged (the manifest's depths stay within it).
STALL_WINDOW = 6

PROPERTIES: tuple[Property, ...] = (
    *(_prop(f) for f in (no_decode_in_prefill_batch, at_most_one_chunked,
                         retraction_keeps_one, admission_never_overcommits,
                         prefill_budgets_respected)),
    Property("decode_stall_ceil_l_over_c", "window", decode_stall_ceil_l_over_c.__doc__ or "",
             decode_stall_ceil_l_over_c, window=STALL_WINDOW),
)
