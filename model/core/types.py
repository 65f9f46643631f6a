"""Frozen value types every engine and every semantics shares: the workload, the records
of a reference run, and the slot-indexed observables properties read.

Field names follow vLLM V1 (v0.32.0), the first engine modelled, so that a user can read
them beside the upstream source: `num_computed_tokens`, `max_tokens`, ... Each engine's own
configuration and rule state live in its room (model/<engine>/).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

# The workload contract's engine when a document names none (docs/simulation_contract.md).
DEFAULT_ENGINE = "vllm-v1"

FINISH_STOP = "stop"  # FINISHED_STOPPED: the sampled token was EOS
FINISH_LENGTH = "length"  # FINISHED_LENGTH_CAPPED: max_tokens or max_model_len reached
FINISH_ABORT = "abort"  # FINISHED_ABORTED: the client went away (an AbortEvent)
FINISH_ERROR = "error"  # FINISHED_ERROR: the engine gave up on it (a failed KV load)


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
    # Requests of one prefix group share their first tokens: this one its first
    # `shared_prefix_len` prompt tokens (vLLM's prefix cache hashes them alike).
    prefix_group: str | None = None
    shared_prefix_len: int = 0


@dataclass(frozen=True, slots=True)
class EosEvent:
    """The token that request `id` samples in step `step` is EOS."""

    id: str
    step: int


@dataclass(frozen=True, slots=True)
class AcceptEvent:
    """Speculative decoding: of the draft tokens scheduled for request `id` in step
    `step`, the verifier accepts `count` (the rest are rejected). It is the output an
    EosEvent of that step names: under async scheduling that output is processed in the
    next step. Absent: none is accepted."""

    id: str
    step: int
    count: int


@dataclass(frozen=True, slots=True)
class DraftEvent:
    """Speculative decoding (synchronous engine): after step `step` the drafter proposes
    `count` draft tokens for request `id`. Absent: as many as num_speculative_tokens."""

    id: str
    step: int
    count: int


@dataclass(frozen=True, slots=True)
class AbortEvent:
    """The client of request `id` goes away and the engine aborts it in step `step`
    (EngineCore.abort_requests -> Scheduler.finish_requests with FINISHED_ABORTED,
    v1/engine/core.py:554-558, scheduler.py:2649-2712). By default the abort comes with the
    step's arrivals, before its `schedule()` (the engine's input queue,
    core.py:1573-1601); `after_schedule` puts it after `schedule()`, before the
    `update_from_output()` of the same engine step, as the aborts queue does that the
    engine drains while the model runs (core.py:676-680, 778-782, 814-822). An abort of a
    request that has finished, or that the engine does not hold yet, does nothing."""

    id: str
    step: int
    after_schedule: bool = False


@dataclass(frozen=True, slots=True)
class ExternalHit:
    """KV connector: the external KV store holds the KV of request `id`'s first `tokens`
    prompt tokens, and loads them asynchronously (`load_async`) or within the step. The
    scheduler-side connector answers get_num_new_matched_tokens with what lies beyond
    the locally computed tokens (docs/simulation_contract.md, `kv_hits`)."""

    id: str
    tokens: int
    load_async: bool = False


@dataclass(frozen=True, slots=True)
class KVLoadEvent:
    """KV connector: in step `step`'s model output the worker reports request `id`'s
    asynchronous KV load finished (finished_recving), or, with `failed`, finished and
    failed (failed_recving with finished_recving, as the worker's output aggregator
    reports a failure). It does nothing when no load of `id` is in flight then."""

    id: str
    step: int
    failed: bool = False


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload and the configuration it runs under (the simulation contract).
    `config` is the engine's own Config (model/<engine>/config.py)."""

    config: Any
    requests: tuple[RequestSpec, ...]
    eos: tuple[EosEvent, ...] = ()
    steps: int = 20
    engine: str = DEFAULT_ENGINE
    accepted: tuple[AcceptEvent, ...] = ()
    drafts: tuple[DraftEvent, ...] = ()
    aborts: tuple[AbortEvent, ...] = ()
    kv_hits: tuple[ExternalHit, ...] = ()
    kv_loads: tuple[KVLoadEvent, ...] = ()

    def arrival_order(self) -> tuple[RequestSpec, ...]:
        """Requests in arrival order: by arrival step, then list order. A request's
        position in this order is its `arrival_time` (it breaks priority ties)."""
        indexed = sorted(enumerate(self.requests), key=lambda p: (p[1].arrival_step, p[0]))
        return tuple(r for _, r in indexed)

    def arrivals_by_step(self) -> dict[int, tuple[RequestSpec, ...]]:
        """For each step, the requests added just before it, in arrival order."""
        out = _grouped((spec.arrival_step, spec) for spec in self.arrival_order())
        return {step: tuple(specs) for step, specs in out.items()}

    def eos_ids_by_step(self) -> dict[int, frozenset[str]]:
        """For each step, the requests whose token sampled in it is EOS."""
        out = _grouped((e.step, e.id) for e in self.eos)
        return {step: frozenset(ids) for step, ids in out.items()}

    def accepted_by_step(self) -> dict[int, dict[str, int]]:
        """For each step, the accepted draft counts by request id."""
        out = _grouped((e.step, (e.id, e.count)) for e in self.accepted)
        return {step: dict(counts) for step, counts in out.items()}

    def drafts_by_step(self) -> dict[int, dict[str, int]]:
        """For each step, the proposed draft counts by request id."""
        out = _grouped((e.step, (e.id, e.count)) for e in self.drafts)
        return {step: dict(counts) for step, counts in out.items()}

    def aborts_by_step(self, after_schedule: bool) -> dict[int, tuple[str, ...]]:
        """For each step, the ids aborted before its schedule (or, with `after_schedule`,
        after it), in list order."""
        out = _grouped((e.step, e.id) for e in self.aborts
                       if e.after_schedule == after_schedule)
        return {step: tuple(ids) for step, ids in out.items()}

    def kv_loads_by_step(self) -> dict[int, tuple[KVLoadEvent, ...]]:
        """For each step, the KV load reports of its model output, in list order."""
        out = _grouped((e.step, e) for e in self.kv_loads)
        return {step: tuple(events) for step, events in out.items()}

    def eos_steps(self) -> dict[str, frozenset[int]]:
        """For each request id, the steps in which it samples EOS."""
        out = _grouped((e.id, e.step) for e in self.eos)
        return {k: frozenset(v) for k, v in out.items()}


_K = TypeVar("_K")
_V = TypeVar("_V")


def _grouped(pairs: Iterable[tuple[_K, _V]]) -> dict[_K, list[_V]]:
    """The values of `pairs` by key, in order (keys in order of first appearance)."""
    out: dict[_K, list[_V]] = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return out


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
    """A workload and the steps the reference scheduler took on it; `version` is the
    engine's pinned version, as the registry gives it."""

    workload: Workload
    steps: tuple[StepRecord, ...] = field(default_factory=tuple)
    validated: bool = True
    version: str = ""

    def to_json(self) -> dict[str, object]:
        """The `batchproof simulate --json` document."""
        return {
            "engine": self.workload.engine,
            "version": self.version,
            "validated": self.validated,
            "config": self.workload.config.to_dict(),
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass(frozen=True, slots=True)
class SlotSpec:
    """A request slot's fixed parameters. `arrival_step` 0 means the slot is never used.
    Slots are in arrival order, so a slot's index is its `arrival_time`."""

    prompt_len: object
    max_tokens: object
    arrival_step: object
    priority: object = 0
    cached_prefix_len: object = 0
    prefix_group: object = 0  # 0: none; groups are numbered from 1 in arrival order
    shared_prefix_len: object = 0

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
    prefix_hit: object = 0  # tokens a prefix cache gave the request at admission
    finish_rank: object = 0  # order its output is processed in (finished lists follow it)
    spec_scheduled: object = 0  # speculative decoding: draft tokens scheduled in this step
    spec_accepted: object = 0  # of those, accepted by the verifier


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
    cfg: Any  # the engine's rule config
    # Appended for mistral.rs and the batching baselines (defaults fit vLLM V1):
    step_kind: object = 0  # 0 mixed or unspecified, 1 prompt-only step, 2 decode-only step
    idle_slots: object = 0  # batch slots held by requests that finished in an earlier step
    padded_rows: object = 0  # of those, rows still computed (static batching's padding)
    shared_blocks: object = 0  # block references beyond the first to a shared block
    cached_blocks: object = 0  # blocks holding a prefix-cache hash, in use or evictable
    evictable_blocks: object = 0  # cached blocks nobody holds (counted as free)
    # The engine reached an assertion of its own in this step (or earlier: it is dead).
    assertion: object = False
