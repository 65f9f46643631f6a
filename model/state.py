"""Frozen value types shared by every semantics: configuration, workload, observed steps.

Field names follow vLLM V1 (v0.32.0) so that a user can read them beside the upstream
source: `max_num_batched_tokens`, `max_num_seqs`, `num_computed_tokens`, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

ENGINE_VLLM_V1 = "vllm-v1"
VLLM_VERSION = "0.32.0"

POLICY_FCFS = "fcfs"
POLICY_PRIORITY = "priority"

FINISH_STOP = "stop"  # FINISHED_STOPPED: the sampled token was EOS
FINISH_LENGTH = "length"  # FINISHED_LENGTH_CAPPED: max_tokens or max_model_len reached


@dataclass(frozen=True, slots=True)
class Config:
    """The vLLM V1 scheduler configuration that the model reads.

    Defaults are SchedulerConfig's (vllm/config/scheduler.py:41-43, 79, 134, 159, 190, 196)
    and CacheConfig's block size (vllm/config/cache.py:72). `max_model_len` comes from the
    model in vLLM; 8192 is our default. `num_gpu_blocks` comes from memory profiling in
    vLLM; our default (4096) is ample for small workloads. Block 0 of the pool is vLLM's
    null block (vllm/v1/core/block_pool.py:185-188), so `num_gpu_blocks - 1` are usable.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    max_model_len: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 4096
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False
    policy: str = POLICY_FCFS
    watermark: float = 0.0
    scheduler_reserve_full_isl: bool = True
    max_num_active_seqs: int | None = None
    max_num_scheduled_tokens: int | None = None

    @property
    def token_budget(self) -> int:
        """Tokens the scheduler may issue per step (scheduler.py:137-141, 611)."""
        if self.max_num_scheduled_tokens is None:
            return self.max_num_batched_tokens
        return self.max_num_scheduled_tokens

    @property
    def max_num_active_reqs(self) -> int:
        """Admission cap on RUNNING (scheduler.py:129-136)."""
        if self.max_num_active_seqs is None:
            return self.max_num_seqs
        return self.max_num_active_seqs

    @property
    def watermark_blocks(self) -> int:
        """`int(watermark * num_blocks)` (kv_cache_manager.py:205-208)."""
        return int(self.watermark * self.num_gpu_blocks)

    @property
    def usable_blocks(self) -> int:
        """Blocks a request can hold: the pool less the null block (block_pool.py:185-188)."""
        return self.num_gpu_blocks - 1

    def to_dict(self) -> dict[str, object]:
        """The config as workload JSON spells it (vLLM field names)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Config))


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload. `arrival_step` counts from 1: the request is added just
    before that step's `schedule()` call. `priority`: smaller is served first (PRIORITY)."""

    id: str
    prompt_len: int
    max_tokens: int
    arrival_step: int = 1
    priority: int = 0
    cached_prefix_len: int = 0  # SGLang LPM: prompt tokens already in the prefix cache


@dataclass(frozen=True, slots=True)
class EosEvent:
    """The token that request `id` samples in step `step` is EOS."""

    id: str
    step: int


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload and the configuration it runs under (the simulation contract).
    `config` is the engine's own Config (model/engines/): vLLM's for "vllm-v1"."""

    config: Any
    requests: tuple[RequestSpec, ...]
    eos: tuple[EosEvent, ...] = ()
    steps: int = 20
    engine: str = ENGINE_VLLM_V1

    def arrival_order(self) -> tuple[RequestSpec, ...]:
        """Requests in arrival order: by arrival step, then list order. A request's
        position in this order is its `arrival_time` (it breaks priority ties)."""
        indexed = sorted(enumerate(self.requests), key=lambda p: (p[1].arrival_step, p[0]))
        return tuple(r for _, r in indexed)

    def arrivals_by_step(self) -> dict[int, tuple[RequestSpec, ...]]:
        """For each step, the requests added just before it, in arrival order."""
        out: dict[int, list[RequestSpec]] = {}
        for spec in self.arrival_order():
            out.setdefault(spec.arrival_step, []).append(spec)
        return {step: tuple(specs) for step, specs in out.items()}

    def eos_ids_by_step(self) -> dict[int, frozenset[str]]:
        """For each step, the requests whose token sampled in it is EOS."""
        out: dict[int, set[str]] = {}
        for e in self.eos:
            out.setdefault(e.step, set()).add(e.id)
        return {step: frozenset(ids) for step, ids in out.items()}

    def eos_steps(self) -> dict[str, frozenset[int]]:
        """For each request id, the steps in which it samples EOS."""
        out: dict[str, set[int]] = {}
        for e in self.eos:
            out.setdefault(e.id, set()).add(e.step)
        return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What one scheduler iteration did, keyed by request id (the `--json` contract).

    `scheduled` is in the order the scheduler served the requests; `free_blocks` and
    `num_computed_tokens` are read right after the scheduling decision (vLLM advances
    `num_computed_tokens` at schedule time, scheduler.py:1616-1642); blocks of requests
    that finish in this step are released after it. `running` and `waiting` are the two
    queues after scheduling, in order; they extend the contract.
    """

    step: int
    scheduled: tuple[tuple[str, int], ...]
    admitted: tuple[str, ...]
    resumed: tuple[str, ...]
    preempted: tuple[str, ...]
    finished: tuple[tuple[str, str], ...]
    free_blocks: int
    num_computed_tokens: tuple[tuple[str, int], ...]
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    token_budget_left: int = 0
    extra: tuple[tuple[str, object], ...] = ()  # engine-specific facts (batch kind, ...)

    def to_json(self) -> dict[str, object]:
        """The contract's JSON object for this step (engine-specific keys after the
        shared ones)."""
        return {
            "step": self.step,
            "scheduled": dict(self.scheduled),
            "admitted": list(self.admitted),
            "resumed": list(self.resumed),
            "preempted": list(self.preempted),
            "finished": dict(self.finished),
            "free_blocks": self.free_blocks,
            "num_computed_tokens": dict(self.num_computed_tokens),
            "running": list(self.running),
            "waiting": list(self.waiting),
            "token_budget_left": self.token_budget_left,
            **dict(self.extra),
        }


@dataclass(frozen=True, slots=True)
class Simulation:
    """A workload and the steps the reference scheduler took on it."""

    workload: Workload
    steps: tuple[StepRecord, ...] = field(default_factory=tuple)
    validated: bool = True

    def to_json(self) -> dict[str, object]:
        """The `batchproof simulate --json` document."""
        return {
            "engine": self.workload.engine,
            "version": _engine_version(self.workload.engine),
            "validated": self.validated,
            "config": self.workload.config.to_dict(),
            "steps": [s.to_json() for s in self.steps],
        }


def _engine_version(engine: str) -> str:
    from model import engines  # the registry imports this module
    return engines.get(engine).version


# ---------------------------------------------------------------------------
# Fixed-slot state for the rules (model/rules/). Every field is a Python int/bool OR a
# z3 term, so one rule serves as simulator and as transition relation.

# Slot status codes. A waiting request that was preempted keeps PREEMPTED (vLLM keeps
# RequestStatus.PREEMPTED until it is re-admitted, request.py:370-386).
ABSENT, WAITING, RUNNING, PREEMPTED, FINISHED = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class RuleConfig:
    """The configuration as the rules read it: each field fixed (int/bool) or a z3 term.

    `policy_priority` and `block_size` are always concrete: the first changes the shape of
    the victim choice, the second would make block arithmetic non-linear.
    """

    token_budget: object
    max_num_batched_tokens: object
    max_num_active_reqs: object
    max_num_seqs: object
    max_model_len: object
    usable_blocks: object
    watermark_blocks: object
    enable_chunked_prefill: object
    long_prefill_token_threshold: object
    scheduler_reserve_full_isl: object
    block_size: int
    policy_priority: bool
    long_prefill_token_threshold_adaptive: bool = False

    @staticmethod
    def from_config(cfg: Config) -> RuleConfig:
        """The concrete RuleConfig of a Config."""
        return RuleConfig(
            token_budget=cfg.token_budget,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_active_reqs=cfg.max_num_active_reqs,
            max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len,
            usable_blocks=cfg.usable_blocks,
            watermark_blocks=cfg.watermark_blocks,
            enable_chunked_prefill=cfg.enable_chunked_prefill,
            long_prefill_token_threshold=cfg.long_prefill_token_threshold,
            scheduler_reserve_full_isl=cfg.scheduler_reserve_full_isl,
            block_size=cfg.block_size,
            policy_priority=cfg.policy == POLICY_PRIORITY,
            long_prefill_token_threshold_adaptive=cfg.long_prefill_token_threshold_adaptive,
        )


@dataclass(frozen=True, slots=True)
class SlotSpec:
    """A request slot's fixed parameters. `arrival_step` 0 means the slot is never used.
    Slots are in arrival order, so a slot's index is its `arrival_time`."""

    prompt_len: object
    max_tokens: object
    arrival_step: object
    priority: object = 0
    cached_prefix_len: object = 0


@dataclass(frozen=True, slots=True)
class SlotState:
    """One request slot between two steps.

    `run_key` orders the running list and `wait_key` the FCFS waiting deque (smaller is
    nearer the front); only their relative order matters.
    """

    status: object = ABSENT
    num_computed_tokens: object = 0
    num_output_tokens: object = 0
    blocks: object = 0
    run_key: object = 0
    wait_key: object = 0
    num_preemptions: object = 0


@dataclass(frozen=True, slots=True)
class SchedState:
    """The scheduler between two steps: slots, free blocks and the queue-key counters."""

    slots: tuple[SlotState, ...]
    free_blocks: object
    next_run_key: object = 0
    wait_head: object = 0
    wait_tail: object = 1
    step: int = 0

    @staticmethod
    def initial(num_slots: int, usable_blocks: object) -> SchedState:
        """No request has arrived; every usable block is free."""
        return SchedState(slots=tuple(SlotState() for _ in range(num_slots)),
                          free_blocks=usable_blocks)


@dataclass(frozen=True, slots=True)
class SlotObs:
    """What one step did to one slot (the observables properties read)."""

    held: object  # the scheduler holds the request in this step (arrived, not finished)
    was_running: object  # in `running` when the step began
    was_waiting: object  # in `waiting` when the step began (after arrivals)
    scheduled: object  # tokens scheduled in this step
    serve_rank: object  # order of service in this step (meaningful when scheduled > 0)
    admitted: object  # admitted from WAITING this step
    resumed: object  # admitted from PREEMPTED this step
    preempted: object  # preempted in this step
    finished: object
    finished_stop: object  # finished by EOS (else by length)
    sampled: object  # sampled a token in this step
    num_tokens: object  # prompt + outputs when the step began
    num_computed_tokens_before: object
    num_computed_tokens: object  # right after scheduling
    num_output_tokens: object  # after the step
    blocks: object  # held right after scheduling
    num_preemptions: object  # after the step
    running_after: object  # in `running` after scheduling
    waiting_after: object  # in `waiting` after scheduling
    queue_key: object  # waiting order key after scheduling (FCFS deque position)
    run_key: object  # running order key after scheduling
    prompt_len: object
    max_tokens: object
    priority: object
    arrival_time: int


@dataclass(frozen=True, slots=True)
class Step:
    """One scheduler iteration's observables, slot-indexed, plus the config it ran under."""

    step: int
    slots: tuple[SlotObs, ...]
    free_blocks: object  # right after scheduling
    free_blocks_end: object  # after finished requests released their blocks
    token_budget_left: object
    num_running: object  # after scheduling
    num_running_end: object  # after finished requests left
    any_preempted: object
    cfg: RuleConfig
    # Appended for mistral.rs and the batching baselines (defaults fit vLLM V1):
    step_kind: object = 0  # 0 mixed or unspecified, 1 prompt-only step, 2 decode-only step
    idle_slots: object = 0  # batch slots held by requests that finished in an earlier step
    padded_rows: object = 0  # of those, rows still computed (static batching's padding)
