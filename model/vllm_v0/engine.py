"""vLLM V0 (0.10.2, the last release with `vllm/core/`) as an EngineModel: the rules of
model/vllm_v0/rules.py, the reference of model/vllm_v0/reference.py, and the Step
observables of a reference run. It is an engine of its own, not a version of vLLM V1:
its scheduler is another program (docs/vllm_versions.md, "vLLM V0")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from model.core.engine import EngineModel
from model.core.errors import InputError
from model.core.observe import QueuedProgress, StepFold, observed_step, queued_slots
from model.core.types import RequestSpec, SlotObs, Step, StepRecord, Workload
from model.vllm_v0 import rules
from model.vllm_v0.config import (
    ENGINE_VLLM_V0,
    VLLM_V0_VERSION,
    Config,
    parse_config,
    rejection,
)
from model.vllm_v0.invariant import well_formed
from model.vllm_v0.reference import VllmV0Scheduler
from model.vllm_v0.state import (
    RANGED_FIELDS,
    RuleConfig,
    family_constraints,
    ranged_rule_config,
)
from model.vllm_v0.v1_bridge import V1_BRIDGE


def check_admissible(workload: Workload) -> None:
    """LLMEngine refuses a prompt longer than max_model_len before the scheduler sees it
    (engine/llm_engine.py:1768-1769); refuse it as bad input. A prompt of exactly
    max_model_len tokens is accepted, and finishes by length at its first token."""
    cfg: Config = workload.config
    for r in workload.requests:
        if r.prompt_len > cfg.max_model_len:
            raise InputError(
                f"request {r.id!r}: prompt_len {r.prompt_len} is above max_model_len "
                f"{cfg.max_model_len} (vLLM V0 refuses it before scheduling, "
                "engine/llm_engine.py:1768-1769); shorten the prompt or raise max_model_len")


def rule_config(cfg: Config) -> RuleConfig:
    """The rules' config of `cfg` (a swap config's has `swaps` set and its CPU pool)."""
    return RuleConfig.from_config(cfg)


def observe(workload: Workload, records: Sequence[StepRecord]) -> tuple[Step, ...]:
    """Step observables of a reference run (slot i = i-th request in arrival order). Blocks
    per request are the record's `blocks` extra (each table's GPU blocks, which
    conformance compares with the real block manager's); a request finished in the step
    gives its blocks back after it (S:1696-1715).

    Swap mode (the record's `swapped` extra): a swapped-out victim is `preempted` in its
    step and keeps its computed tokens (S:1824-1838 resets nothing); while in `swapped` it
    is held but neither was_running nor was_waiting, with no GPU blocks; at swap-in it is
    `resumed` (S:812-930). A step whose record carries `assertion` (the engine died for
    lack of CPU swap space, S:1829-1835) and every later one are as V1's observe gives
    them: nothing scheduled or finished, requests as the step found them, `assertion` set.
    """
    observer = StepObserver(workload)
    return tuple(observer.advance(rec) for rec in records)


class StepObserver(StepFold):
    """`observe` one record at a time (StepFold): the fold's progress, queues and finished
    ids."""

    FORKED = ("progress", "gone")

    def __init__(self, workload: Workload) -> None:
        self.rcfg = rule_config(workload.config)
        self.ordered = workload.arrival_order()
        self.progress = QueuedProgress.start(self.ordered)
        self.running: tuple[str, ...] = ()
        self.waiting: tuple[str, ...] = ()
        self.swapped: tuple[str, ...] = ()
        self.gone: set[str] = set()

    def advance(self, rec: StepRecord) -> Step:
        """The observables of the next record's step."""
        extra = dict(rec.extra)
        if "assertion" in extra:
            return _crashed(rec, self.ordered, self.rcfg, self.running, self.waiting,
                            self.swapped, self.progress, self.gone)
        arrived = {r.id for r in self.ordered if r.arrival_step == rec.step}
        slots = queued_slots(rec, self.ordered, self.progress, running=self.running,
                             was_waiting=set(self.waiting) | arrived,
                             blocks=dict(extra["blocks"]), also_held=set(self.swapped),
                             rank_finishes=True)
        finished = dict(rec.finished)
        released = sum(o.blocks for o in slots if o.finished and o.running_after)
        step = observed_step(rec, slots, self.rcfg, released)
        self.running = tuple(r for r in rec.running if r not in finished)
        self.waiting = rec.waiting
        self.swapped = tuple(extra.get("swapped", ()))  # type: ignore[arg-type]
        self.gone |= set(finished)
        return step


def _crashed(rec: StepRecord, ordered: Sequence[RequestSpec], rcfg: RuleConfig,
             running: tuple[str, ...], waiting: tuple[str, ...], swapped: tuple[str, ...],
             progress: QueuedProgress, gone: set[str]) -> Step:
    """The step in which the engine died (and every later one), as V1's observe gives it
    (model/vllm/engine.py `_crashed`): nothing scheduled or finished; each request still
    held stands as the step found it, running, or waiting (a swapped one as neither)."""
    arrived = {r.id for r in ordered if r.arrival_step <= rec.step}
    held = (set(running) | set(waiting) | set(swapped) | arrived) - gone
    slots = [SlotObs(
        held=r.id in held, was_running=r.id in running,
        was_waiting=r.id in held and r.id not in running and r.id not in swapped,
        scheduled=0, serve_rank=0, admitted=False, resumed=False, preempted=False,
        finished=False, finished_stop=False, sampled=False,
        num_tokens=r.prompt_len + progress.outputs[r.id],
        num_computed_tokens_before=progress.ncomp[r.id],
        num_computed_tokens=progress.ncomp[r.id], num_output_tokens=progress.outputs[r.id],
        blocks=0, num_preemptions=progress.preemptions[r.id], running_after=False,
        waiting_after=False,
        queue_key=0, run_key=0, prompt_len=r.prompt_len, max_tokens=r.max_tokens,
        priority=r.priority, arrival_time=i) for i, r in enumerate(ordered)]
    return replace(observed_step(rec, slots, rcfg, 0), assertion=True)


def describe_step(record: StepRecord) -> str:
    """One line of V0 facts for `batchproof simulate`: the requests the waiting loop ignored
    (FINISHED_IGNORED: a prompt above the limit, or one the pool can never hold); in swap
    mode the swapped queue and the CPU pool's free blocks; the engine's death."""
    facts = dict(record.extra)
    if "assertion" in facts:
        return f"engine dead: {facts['assertion']}"
    ignored = facts.get("ignored") or []
    parts = [f"ignored {', '.join(ignored)}"] if ignored else []
    if "swapped" in facts:
        swapped = facts["swapped"] or ()
        parts.append(f"swapped [{', '.join(swapped)}], "  # type: ignore[arg-type]
                     f"{facts['free_cpu_blocks']} CPU blocks free")
    return "; ".join(parts)


RULES_TABLE: tuple[tuple[str, str, str], ...] = (
    ("vllm/core/scheduler.py:1467-1472 (default or chunked-prefill path)",
     "VllmV0Scheduler._schedule", "step"),
    ("vllm/core/scheduler.py:1217-1343 (default: prefills first, decodes only without one)",
     "VllmV0Scheduler._schedule_default", "step"),
    ("vllm/core/scheduler.py:1345-1450 (chunked: running first, admission after preemption)",
     "VllmV0Scheduler._schedule_chunked_prefill", "step"),
    ("vllm/core/scheduler.py:1027-1215 (waiting loop: LATER breaks, NEVER ignored)",
     "VllmV0Scheduler._schedule_prefills", "_waiting_loop"),
    ("vllm/core/scheduler.py:640-810 (running loop: the unvisited tail is the victim)",
     "VllmV0Scheduler._schedule_running", "_running_loop"),
    ("vllm/core/block_manager.py:110-147 (whole sequence against free less the watermark)",
     "BlockManager.can_allocate", "_waiting_loop"),
    ("vllm/core/block_manager.py:207-234 (worst-case append check)",
     "BlockManager.can_append_slots", "blocks_touched"),
    ("vllm/core/scheduler.py:1750-1805 (recompute preemption, waiting front reversed)",
     "VllmV0Scheduler._preempt", "_preempt"),
    ("vllm/core/scheduler.py:1807-1838 (swap preemption; no CPU room kills the engine)",
     "VllmV0Scheduler._preempt", "_swap_out"),
    ("vllm/core/scheduler.py:812-930 (swap-in from the swapped head, unchunked)",
     "VllmV0Scheduler._schedule_swapped", "_swapped_loop"),
    ("vllm/core/block_manager.py:465-517 (swap check: full blocks plus those touched)",
     "BlockManager._can_swap", "swap_blocks"),
)


ENGINE = EngineModel(
    name=ENGINE_VLLM_V0, folder="vllm_v0", title="vLLM V0", version=VLLM_V0_VERSION,
    parse_config=parse_config, config_to_dict=Config.to_dict, rejection=rejection,
    check_admissible=check_admissible, rule_config=rule_config,
    initial_state=rules.initial_state, step=rules.step, same_behaviour=rules.same_behaviour,
    scheduler=VllmV0Scheduler, observe=observe, observer=StepObserver, describe_step=describe_step,
    ranged_fields=RANGED_FIELDS, ranged_rule_config=ranged_rule_config,
    family_constraints=family_constraints, rules_table=RULES_TABLE,
    well_formed=well_formed, sets_fields=("assertion",),
    # `batchproof diff vllm-v0 vllm-v1`: how one config reaches both (model/vllm_v0/v1_bridge.py)
    extra={"bridges": {V1_BRIDGE.engines[1]: V1_BRIDGE}})
