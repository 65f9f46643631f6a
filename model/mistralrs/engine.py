"""mistral.rs (commit 9e922623f24b) as an EngineModel: the rules of model/mistralrs/rules.py,
the reference of model/mistralrs/reference.py, and the Step observables of a reference run;
and its older versions (`mistralrs@v0.8.22`, ...), the same EngineModel over another set of
rule switches (model/mistralrs/config.py VERSIONS), which the registry reaches through
`ENGINE.extra["versions"]`."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from model.core.engine import EngineModel
from model.core.errors import InputError
from model.core.observe import QueuedProgress, observed_step, queued_slots
from model.core.switches import RuleVersions, engine_at_version
from model.core.types import FINISH_LENGTH, FINISH_STOP, Step, StepRecord, Workload
from model.mistralrs import rules
from model.mistralrs.config import (
    ENGINE_MISTRALRS,
    MISTRALRS_COMMIT,
    PINNED,
    SWITCHES,
    VERSIONS,
    MistralrsConfig,
    parse_config,
    rejection,
    with_switches,
)
from model.mistralrs.reference import FINISH_ERROR, KIND_DECODE, KIND_PROMPT, MistralrsScheduler

_KIND_CODE = {KIND_PROMPT: rules.KIND_PROMPT, KIND_DECODE: rules.KIND_DECODE}


def check_admissible(workload: Workload) -> None:
    """A prompt above the up-front capacity num_gpu_blocks * block_size is rejected before
    it is ever scheduled (scheduler.rs:605-619); refuse it as bad input instead."""
    cfg: MistralrsConfig = workload.config
    for r in workload.requests:
        if r.prompt_len >= cfg.token_capacity:
            raise InputError(
                f"request {r.id!r}: prompt_len {r.prompt_len} must be below the KV capacity "
                f"num_gpu_blocks * block_size = {cfg.token_capacity} (mistral.rs rejects "
                "larger sequences, scheduler.rs:605-619); shorten it or enlarge the pool")


def observe(workload: Workload, records: Sequence[StepRecord]) -> tuple[Step, ...]:
    """Step observables of a reference run (slot i = i-th request in arrival order). Blocks
    per request come from the record's `blocks` extra (the reference's own pool)."""
    cfg: MistralrsConfig = workload.config
    rcfg = rules.MistralrsRuleConfig.from_config(cfg)
    ordered = workload.arrival_order()
    progress = QueuedProgress.start(ordered)
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    steps = []
    for rec in records:
        extra = dict(rec.extra)
        arrived = {r.id for r in ordered if r.arrival_step == rec.step}
        slots = queued_slots(rec, ordered, progress, running=running,
                             was_waiting=set(waiting) | arrived, blocks=dict(extra["blocks"]))
        finished = dict(rec.finished)
        released = sum(o.blocks for o in slots if o.finished and o.running_after)
        steps.append(observed_step(rec, slots, rcfg, released,
                                   step_kind=_KIND_CODE[extra["kind"]]))
        running = tuple(r for r in rec.running if r not in finished)
        waiting = rec.waiting
    return tuple(steps)


def rules_to_record(observed: Step, ids: Sequence[str], chunk: int | None = None,
                    decode_steps: int | None = None) -> StepRecord:
    """The StepRecord of a concrete rules Step (slots -> request ids). Event orders follow
    from the rules: admissions append to `running` (run_key order); preemptions push to
    the waiting front (descending queue_key); rejected heads leave the waiting front in
    queue order. `chunk` is None for a version without the token budget."""
    slots = list(enumerate(observed.slots))[: len(ids)]
    served = sorted((o.serve_rank, i) for i, o in slots if o.scheduled > 0)
    running = sorted((i for i, o in slots if o.running_after),
                     key=lambda i: observed.slots[i].run_key)
    waiting = sorted((i for i, o in slots if o.waiting_after),
                     key=lambda i: observed.slots[i].queue_key)
    decode = observed.step_kind == rules.KIND_DECODE
    # Every preemption pushes its victim to the waiting front (an escape victim right
    # behind the head), and a victim keeps that key even if it is re-admitted later in
    # the call: the later the preemption, the smaller the key.
    victims = sorted((i for i, o in slots if o.preempted),
                     key=lambda i: observed.slots[i].queue_key, reverse=True)
    joined = sorted((i for i, o in slots if o.admitted or o.resumed),
                    key=lambda i: observed.slots[i].run_key)
    rejected = sorted((i for i, o in slots if o.finished and not o.sampled),
                      key=lambda i: observed.slots[i].queue_key)
    finished = [(ids[i], FINISH_STOP if observed.slots[i].finished_stop else FINISH_LENGTH)
                for _, i in served if observed.slots[i].finished]
    extra: list[tuple[str, object]] = [("kind", KIND_DECODE if decode else KIND_PROMPT)]
    if decode_steps is not None:
        extra.append(("decode_steps_since_prefill", decode_steps))
    extra.append(("chunk_size", None if decode else chunk))
    extra.append(("blocks", tuple((ids[i], observed.slots[i].blocks)
                                  for i in running + waiting)))
    return StepRecord(
        step=observed.step,
        scheduled=tuple((ids[i], observed.slots[i].scheduled) for _, i in served),
        admitted=tuple(ids[i] for i in joined if observed.slots[i].admitted),
        resumed=tuple(ids[i] for i in joined if observed.slots[i].resumed),
        preempted=tuple(ids[i] for i in victims),
        finished=tuple(finished) + tuple((ids[i], FINISH_ERROR) for i in rejected),
        free_blocks=observed.free_blocks,
        num_computed_tokens=tuple((ids[i], observed.slots[i].num_computed_tokens)
                                  for i in running + waiting),
        running=tuple(ids[i] for i in running), waiting=tuple(ids[i] for i in waiting),
        token_budget_left=observed.token_budget_left, extra=tuple(extra))


def describe_step(record: StepRecord) -> str:
    """One line of mistral.rs facts for `batchproof simulate`."""
    extra = dict(record.extra)
    chunk = f", chunk {extra['chunk_size']}" if extra.get("chunk_size") else ""
    return (f"{extra['kind']} step{chunk}; decode steps since prefill "
            f"{extra['decode_steps_since_prefill']}")


RULES_TABLE: tuple[tuple[str, str, str], ...] = (
    ("scheduler/mod.rs:21-22 (4096 tokens, 8 decode steps)", "MistralrsConfig",
     "MistralrsRuleConfig.from_config"),
    ("paged_attention/scheduler.rs:239-290 (completion_is_due)",
     "MistralrsScheduler.completion_is_due", "rules.mistralrs.completion_is_due"),
    ("paged_attention/scheduler.rs:585-765 (admission, whole-prompt allocation)",
     "MistralrsScheduler._admit", "rules.mistralrs._admission"),
    ("paged_attention/scheduler.rs:688-731 (64 failed attempts: preempt running tail)",
     "MistralrsScheduler._escape", "rules.mistralrs._escape"),
    ("paged_attention/scheduler.rs:136-237 (chunk = budget / #prompts)",
     "MistralrsScheduler._prompt_turn", "rules.mistralrs._prompt_turn"),
    ("paged_attention/scheduler.rs:796-856 (decode allocation, preempt newest)",
     "MistralrsScheduler._decode_turn", "rules.mistralrs._decode_allocation"),
    ("paged_attention/scheduler.rs:298-380 (round-robin decode selection)",
     "MistralrsScheduler._completion_batch", "rules.mistralrs._round_robin"),
    ("paged_attention/scheduler.rs:1026-1072 (recompute preemption, front of waiting)",
     "MistralrsScheduler._preempt", "rules.mistralrs._preempt"),
    ("v0.8.22 scheduler.rs:588-593 (victim_newest off: newest first, the oldest preempted)",
     "MistralrsScheduler._decode_turn", "rules.mistralrs._decode_order"),
    ("v0.8.23 scheduler.rs:396-402 (reserve_next_token: a decoder asks for len() + 1)",
     "MistralrsScheduler._decode_turn", "rules.mistralrs._decode_allocation"),
    ("v0.9.0 scheduler.rs:126-184, 365, 436-438 (bucket_by_length: the shortest bucket runs)",
     "MistralrsScheduler._bucket", "rules.mistralrs._bucket"),
    ("v0.9.2 scheduler.rs:278-284, 478 (alternate_turns: a decode turn after a prompt step)",
     "MistralrsScheduler._completion_due", "rules.mistralrs._completion_due"),
    ("v0.9.2 scheduler.rs:374-404 (escape_loop off: one victim, then the head is rejected)",
     "MistralrsScheduler._escape", "rules.mistralrs._escape"),
    ("v0.9.2 scheduler.rs:454-484, 604-607 (token_budget off: whole prompts, every decoder)",
     "MistralrsScheduler._prompt_turn", "rules.mistralrs._prompt_turn"),
)



def _evidence(switch: str) -> str:
    """Where upstream changed the switch, and what each value does."""
    s = next(s for s in SWITCHES if s.name == switch)
    return f"{s.change}. On: {s.on}. Off: {s.off}."


@cache
def _at_version(version: str) -> EngineModel:
    return ENGINE if version == PINNED else engine_at_version(ENGINE, version, parse_config)


ENGINE = EngineModel(
    name=ENGINE_MISTRALRS, folder="mistralrs", title="mistral.rs", version=MISTRALRS_COMMIT,
    parse_config=parse_config, config_to_dict=MistralrsConfig.to_dict, rejection=rejection,
    check_admissible=check_admissible, rule_config=rules.MistralrsRuleConfig.from_config,
    initial_state=rules.initial_state, step=rules.step, same_behaviour=rules.same_behaviour,
    scheduler=MistralrsScheduler, observe=observe, describe_step=describe_step,
    rules_table=RULES_TABLE,
    extra={"versions": RuleVersions(versions=VERSIONS, pinned=PINNED, at_version=_at_version,
                                    set_switches=with_switches, evidence_of=_evidence)})
