"""Static batching as an EngineModel, and the pieces it shares with request-level dynamic
batching (model/baselines/dynamic.py): both are settings of one transition system, the rules
of model/baselines/rules.py and the reference of model/baselines/reference.py."""

from __future__ import annotations

from collections.abc import Sequence

from model.baselines import rules
from model.baselines.config import (
    BASELINES_VERSION,
    ENGINE_STATIC,
    STATIC_DEFAULTS,
    BaselineConfig,
    parse_config,
    rejection,
)
from model.baselines.reference import KIND_DECODE, KIND_PREFILL, BaselineScheduler, reservation
from model.core.engine import EngineModel
from model.core.errors import InputError
from model.core.observe import observed_step
from model.core.types import FINISH_LENGTH, FINISH_STOP, SlotObs, Step, StepRecord, Workload

_KIND_CODE = {KIND_PREFILL: rules.KIND_PROMPT, KIND_DECODE: rules.KIND_DECODE}


def check_admissible(workload: Workload) -> None:
    """A request whose worst-case reservation exceeds the whole pool could never launch
    and would block the FIFO queue for good; refuse it as bad input."""
    cfg: BaselineConfig = workload.config
    for r in workload.requests:
        need = reservation(cfg, r.prompt_len, r.max_tokens)
        if need > cfg.num_kv_blocks:
            raise InputError(
                f"request {r.id!r}: prompt_len + max_tokens = {r.prompt_len + r.max_tokens} "
                f"tokens need {need} KV blocks, more than num_kv_blocks {cfg.num_kv_blocks}; "
                "shorten the request or enlarge the pool")


def observe(workload: Workload, records: Sequence[StepRecord]) -> tuple[Step, ...]:
    """Step observables of a reference run (slot i = i-th request in arrival order)."""
    cfg: BaselineConfig = workload.config
    rcfg = rules.BaselineRuleConfig.from_config(cfg)
    ordered = workload.arrival_order()
    outputs = {r.id: 0 for r in ordered}
    live: set[str] = set()
    waiting: set[str] = set()
    steps = []
    for rec in records:
        extra = dict(rec.extra)
        waiting |= {r.id for r in ordered if r.arrival_step == rec.step}
        sched = dict(rec.scheduled)
        finished = dict(rec.finished)
        batch = set(extra["batch"])
        slots = []
        for i, spec in enumerate(ordered):
            rid = spec.id
            n = sched.get(rid, 0)
            before = outputs[rid]
            ntok = spec.prompt_len + before
            computed = ntok - 1 if before else 0
            slots.append(SlotObs(
                held=rid in live or rid in waiting, was_running=rid in live,
                was_waiting=rid in waiting, scheduled=n,
                serve_rank=sum(1 for r in ordered[:i] if r.id in sched),
                admitted=rid in rec.admitted, resumed=False, preempted=False,
                finished=rid in finished, finished_stop=finished.get(rid) == FINISH_STOP,
                sampled=n > 0, num_tokens=ntok, num_computed_tokens_before=computed,
                num_computed_tokens=computed + n, num_output_tokens=before + int(n > 0),
                blocks=reservation(cfg, spec.prompt_len, spec.max_tokens) if rid in batch else 0,
                num_preemptions=0, running_after=rid in rec.running,
                waiting_after=rid in rec.waiting, queue_key=i, run_key=i,
                prompt_len=spec.prompt_len, max_tokens=spec.max_tokens, priority=spec.priority,
                arrival_time=i))
            outputs[rid] += int(n > 0)
        released = sum(o.blocks for o in slots) if batch and not (
            set(rec.running) - set(finished)) else 0
        # batching baselines never preempt, so any_preempted is False here
        steps.append(observed_step(rec, slots, rcfg, released,
                                   step_kind=_KIND_CODE.get(extra["kind"], 0),
                                   idle_slots=extra["idle_slots"],
                                   padded_rows=extra["padded_rows"]))
        live = set(rec.running) - set(finished)
        waiting = set(rec.waiting)
    return tuple(steps)


def rules_to_record(observed: Step, ids: Sequence[str]) -> StepRecord:
    """The StepRecord of a concrete rules Step (slots -> request ids). The batch's members
    are the slots holding blocks: every member reserves at least one."""
    slots = list(enumerate(observed.slots))[: len(ids)]
    batch = [ids[i] for i, o in slots if o.blocks > 0]
    served = [i for i, o in slots if o.scheduled > 0]
    live = [i for i, o in slots if o.running_after]
    kind = {rules.KIND_PROMPT: KIND_PREFILL, rules.KIND_DECODE: KIND_DECODE}.get(
        observed.step_kind, "idle")
    return StepRecord(
        step=observed.step,
        scheduled=tuple((ids[i], observed.slots[i].scheduled) for i in served),
        admitted=tuple(ids[i] for i in served if observed.slots[i].admitted),
        resumed=(), preempted=(),
        finished=tuple((ids[i], FINISH_STOP if observed.slots[i].finished_stop
                        else FINISH_LENGTH) for i in served if observed.slots[i].finished),
        free_blocks=observed.free_blocks,
        num_computed_tokens=tuple((ids[i], observed.slots[i].num_computed_tokens)
                                  for i in live + [i for i, o in slots if o.waiting_after]),
        running=tuple(ids[i] for i in live),
        waiting=tuple(ids[i] for i, o in slots if o.waiting_after),
        token_budget_left=observed.token_budget_left,
        extra=(("kind", kind), ("batch", tuple(batch)), ("idle_slots", observed.idle_slots),
               ("padded_rows", observed.padded_rows)))


def describe_step(record: StepRecord) -> str:
    """One line of batch facts for `batchproof simulate`."""
    extra = dict(record.extra)
    return (f"{extra['kind']}; batch [{' '.join(extra['batch'])}]; idle slots "
            f"{extra['idle_slots']}, padded rows {extra['padded_rows']}")


RULES_TABLE: tuple[tuple[str, str, str], ...] = (
    ("seed 000 Table 1; digest §3.1 (launch when full or flushed)",
     "BaselineScheduler.launch_due", "rules.baselines._launch_due"),
    ("digest §3.2 (launch whatever is queued when idle)",
     "BaselineScheduler.launch_due", "rules.baselines._launch_due"),
    ("digest §3.1 (worst-case reservation, FIFO prefix)", "BaselineScheduler._launch",
     "rules.baselines.step"),
    ("digest §3.1-3.2 (finished rows keep their slot; padded or dropped)",
     "BaselineScheduler.step", "rules.baselines._update"),
)


def make_engine(name: str, title: str, defaults: BaselineConfig) -> EngineModel:
    """A baseline engine: the shared transition system under `defaults`."""
    return EngineModel(
        name=name, folder="baselines", title=title, version=BASELINES_VERSION,
        parse_config=lambda raw: parse_config(raw, defaults),
        config_to_dict=BaselineConfig.to_dict, rejection=rejection,
        check_admissible=check_admissible, rule_config=rules.BaselineRuleConfig.from_config,
        initial_state=rules.initial_state, step=rules.step,
        same_behaviour=rules.same_behaviour, scheduler=BaselineScheduler, observe=observe,
        describe_step=describe_step, rules_table=RULES_TABLE)


ENGINE = make_engine(ENGINE_STATIC, "static batching", STATIC_DEFAULTS)
__all__ = ["ENGINE", "check_admissible", "make_engine", "observe", "rules_to_record"]
