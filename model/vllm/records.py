"""vLLM V1's StepRecords read back from the rules' concrete Steps (slots -> request ids),
so the rules can be compared with the reference record by record."""

from __future__ import annotations

from collections.abc import Sequence

from model.core.types import FINISH_ERROR as ERROR
from model.core.types import FINISH_LENGTH as LENGTH
from model.core.types import FINISH_STOP as STOP
from model.core.types import Step, StepRecord


def to_record(observed: Step, ids: Sequence[str]) -> StepRecord:
    """The contract's StepRecord of a concrete rules Step (slots -> request ids)."""
    slots = list(enumerate(observed.slots))[: len(ids)]
    served = sorted((o.serve_rank, i) for i, o in slots if o.scheduled > 0)
    running = [i for i, o in slots if o.running_after]
    running.sort(key=lambda i: _run_key(observed, i))
    waiting = [i for i, o in slots if o.waiting_after]
    connector = getattr(observed.cfg, "kv_connector", False)
    if connector:  # the queue key puts kv_holding_waiting first (connector_rules)
        waiting.sort(key=lambda i: observed.slots[i].queue_key)
    elif observed.cfg.policy_priority:
        waiting.sort(key=lambda i: (observed.slots[i].priority, i))
    else:
        waiting.sort(key=lambda i: observed.slots[i].queue_key)
    victims = [i for i, o in slots if o.preempted]
    if observed.cfg.policy_priority:
        # Each victim is the maximum (priority, arrival_time) left in `running`.
        victims.sort(key=lambda i: (observed.slots[i].priority, i), reverse=True)
    else:
        # Each victim is running[-1]: the latest-admitted first (ablated: running[0]).
        victims.sort(key=lambda i: _run_key(observed, i),
                     reverse=getattr(observed.cfg, "victim_latest", True))
    held_order = running + waiting
    if observed.assertion:  # the engine died in this step: the reference's crash record
        # At scheduler.py:1170, with the request observed joining with 0 tokens: the only
        # joined slot with nothing scheduled (every admission the rules make has >= 1).
        zero = [i for i, o in slots if (o.admitted or o.resumed) and o.scheduled == 0]
        return StepRecord(step=observed.step, scheduled=tuple((ids[i], 0) for i in zero),
                          admitted=tuple(ids[i] for i in zero if observed.slots[i].admitted),
                          resumed=tuple(ids[i] for i in zero if observed.slots[i].resumed),
                          preempted=(), finished=(), free_blocks=observed.free_blocks,
                          num_computed_tokens=(), extra=(("assertion", True),))
    return StepRecord(
        step=observed.step,
        scheduled=tuple((ids[i], observed.slots[i].scheduled) for _, i in served),
        admitted=tuple(ids[i] for _, i in served if observed.slots[i].admitted),
        resumed=tuple(ids[i] for _, i in served if observed.slots[i].resumed),
        preempted=tuple(ids[i] for i in victims),
        finished=tuple((ids[i], _reason(observed, i, connector))
                       for _, i in sorted((o.finish_rank, i) for i, o in slots
                                          if o.finished)),
        free_blocks=observed.free_blocks,
        num_computed_tokens=tuple((ids[i], observed.slots[i].num_computed_tokens)
                                  for i in held_order),
        running=tuple(ids[i] for i in running),
        waiting=tuple(ids[i] for i in waiting),
        token_budget_left=observed.token_budget_left,
        extra=(_cache_facts(observed, ids, served) + _async_facts(observed, ids, served)
               + _spec_facts(observed, ids, served, running)
               + _kv_facts(observed, ids, waiting, connector)),
    )


def _reason(observed: Step, i: int, connector: bool) -> str:
    """A finished request's reason: EOS, else length; with a KV connector a request that
    finished without sampling ended on its failed load (FINISHED_ERROR)."""
    o = observed.slots[i]
    if o.finished_stop:
        return STOP
    return LENGTH if o.sampled or not connector else ERROR


def _kv_facts(observed: Step, ids: Sequence[str], waiting: list[int],
              connector: bool) -> tuple[tuple[str, object], ...]:
    """With a KV connector (prefix caching off), the blocks each queued request holds (a
    load's, or what came back) and the blocks the step released, as the reference
    records them."""
    if not connector:
        return ()
    held = {ids[i]: observed.slots[i].blocks for i in waiting if observed.slots[i].blocks}
    return (("kv_held", held),
            ("released_blocks", observed.free_blocks_end - observed.free_blocks))


def _spec_facts(observed: Step, ids: Sequence[str], served: list[tuple[object, int]],
                running: list[int]) -> tuple[tuple[str, object], ...]:
    """With speculative decoding, the drafts scheduled and accepted per request in service
    order, and (with it or KV cache groups) each running request's blocks, as the
    reference records them."""
    slots = observed.slots
    out: tuple[tuple[str, object], ...] = ()
    if getattr(observed.cfg, "num_spec_tokens", 0):
        drafted = [i for _, i in served if slots[i].spec_scheduled > 0]
        out = (("spec_scheduled", {ids[i]: slots[i].spec_scheduled for i in drafted}),
               ("accepted", {ids[i]: slots[i].spec_accepted for i in drafted}))
    # With KV cache groups too: the blocks held are not cdiv(tokens, block_size). The
    # reference's per-group counts (group_blocks) have no observable here: the rules'
    # states carry them (tests/test_kv_groups.py compares those).
    if out or getattr(observed.cfg, "kv_groups", False):
        out += (("blocks_held", {ids[i]: slots[i].blocks for i in running}),)
    return out


def _async_facts(observed: Step, ids: Sequence[str],
                 served: list[tuple[object, int]]) -> tuple[tuple[str, object], ...]:
    """With async scheduling, the requests whose chunk samples a token (delivered in the
    next step), in service order, as the reference records them."""
    if not observed.cfg.async_scheduling:
        return ()
    return (("sampled", tuple(ids[i] for _, i in served if observed.slots[i].sampled)),)


def _cache_facts(observed: Step, ids: Sequence[str],
                 served: list[tuple[object, int]]) -> tuple[tuple[str, object], ...]:
    """With prefix caching, the reference's extra facts (model/vllm/reference.py)."""
    if not observed.cfg.prefix_caching:
        return ()
    slots = observed.slots
    in_use = sum(o.blocks for o in slots) - observed.shared_blocks
    hits = {ids[i]: slots[i].prefix_hit for _, i in served if slots[i].admitted
            or slots[i].resumed}
    return (("prefix_hits", hits), ("blocks_in_use", in_use),
            ("cached_blocks", observed.cached_blocks),
            ("evictable_blocks", observed.evictable_blocks),
            ("released_blocks", observed.free_blocks_end - observed.free_blocks))


def _run_key(observed: Step, i: int) -> object:
    return observed.slots[i].run_key
