"""The KV connector in vLLM V1's rules (model/vllm/rules.py): the environment's choices as
rule inputs, the per-slot scratch of one step, and the pieces of `schedule()` and
`update_from_output()` that only a connector has. The reference's side and the upstream
lines are model/vllm/connector.py and model/vllm/reference.py; this module follows them.

Scope (what the reference has, in the part the rules take): the synchronous Scheduler,
prefix caching off, no speculative decoding, one full-attention group, no client aborts
(the rules have none). The environment chooses, per slot, the connector's answer for the
request (`KVHit`: the external hit's tokens and whether it loads asynchronously; the same
every step, as an ExternalHit is per request) and, per step and slot, whether the worker
reports the slot's load in this step's output and whether it failed (`KVReport`; a report
for a slot with no load in flight does nothing, as Connector.reports has it).

Citations: S = v1/core/sched/scheduler.py, K = v1/core/kv_cache_manager.py, D =
distributed/kv_transfer/kv_connector/v1/base.py, paths relative to `vllm/` (v0.32.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.core.ops import Bool, Int, Ops
from model.core.types import Workload
from model.vllm.state import KVSlot, RuleConfig, SchedState, SlotState

#: Added to a kv_holding_waiting key in the observed queue key, so that the requests
#: holding KV blocks come before the waiting queue, as the waiting loop meets them
#: (S:913-917); far below any waiting key a bounded run reaches.
HOLDING_FIRST = 1 << 20


@dataclass(frozen=True, slots=True)
class KVHit:
    """The connector's answer for one slot's request: `tokens` of its prompt the external
    store holds, loaded asynchronously when `load_async` (ExternalHit)."""

    tokens: object = 0
    load_async: object = False


@dataclass(frozen=True, slots=True)
class KVReport:
    """The worker's report in one step's output for one slot: its load finished
    (finished_recving), and failed too when `failed` (failed_recving, reported with its
    finish: kv_connector/utils.py:169-172)."""

    report: object = False
    failed: object = False


@dataclass(frozen=True, slots=True)
class KVChoices:
    """The connector environment of one step: per slot its hit and its report."""

    hits: tuple[KVHit, ...]
    reports: tuple[KVReport, ...]


#: The step's connector input: KVChoices, or the same as plain pairs.
KVInput = KVChoices | tuple[Sequence[tuple[object, object]], Sequence[tuple[object, object]]]


@dataclass(slots=True)
class KVWork:
    """Mutable scratch of one step's connector state per slot (a fold accumulator)."""

    holding: list[Bool]
    hold_key: list[Int]
    loading: list[Bool]
    recved: list[Bool]
    failed: list[Bool]
    inflight: list[Bool]
    next_hold: Int
    hits: tuple[KVHit, ...]
    reports: tuple[KVReport, ...]

    @staticmethod
    def of(state: SchedState, choices: KVInput | None) -> KVWork:
        """The scratch at the start of a step (no choices: no hits, no reports). The
        choices may come as plain pairs: ((tokens, load_async) per slot, (report, failed)
        per slot), as the symbolic unrolling gives them."""
        n = len(state.slots)
        if choices is None:
            choices = KVChoices((KVHit(),) * n, (KVReport(),) * n)
        elif not isinstance(choices, KVChoices):
            hits, reports = choices
            choices = KVChoices(tuple(KVHit(*h) for h in hits),
                                tuple(KVReport(*r) for r in reports))
        kv = [s.kv[0] for s in state.slots]
        return KVWork(holding=[k.holding for k in kv], hold_key=[k.hold_key for k in kv],
                      loading=[k.loading for k in kv], recved=[k.recved for k in kv],
                      failed=[k.failed for k in kv], inflight=[k.inflight for k in kv],
                      next_hold=state.kv[0], hits=choices.hits, reports=choices.reports)

    def checkpoint(self, ops: Ops) -> None:
        """Name every accumulator (flat terms for the solver)."""
        for name in ("holding", "hold_key", "loading", "recved", "failed", "inflight"):
            setattr(self, name, [ops.name(v) for v in getattr(self, name)])
        self.next_hold = ops.name(self.next_hold)


def scope_error(cfg: RuleConfig) -> str | None:
    """Why the rules do not take a connector under `cfg` (None when they do)."""
    if not cfg.kv_connector:
        return None
    beside = [name for name, on in (("the AsyncScheduler", cfg.async_scheduling),
                                    ("prefix caching", cfg.prefix_caching),
                                    ("speculative decoding", bool(cfg.num_spec_tokens)),
                                    ("KV cache groups", cfg.kv_groups)) if on]
    if not beside:
        return None
    return ("the rules model a KV connector with the synchronous Scheduler, prefix caching "
            "off, no speculative decoding and one full-attention group; this config has "
            + " and ".join(beside) + "; turn those off, or run the reference, which covers "
            "them (batchproof simulate, batchproof config)")


def reserved_blocks(ops: Ops, cfg: RuleConfig, w: KVWork, blocks: Sequence[Int],
                    ntok: Sequence[Int]) -> Int:
    """`_inflight_prefill_reserved_blocks` (S:3088-3092, 3047-3066): the blocks every
    request in _inflight_prefills still needs for its whole sequence,
    cdiv(min(num_tokens, max_model_len), block_size) less what it holds, at least 0."""
    total: Int = 0
    for i in range(len(blocks)):
        need = ops.max(ops.cdiv(ops.min(ntok[i], cfg.max_model_len), cfg.block_size)
                       - blocks[i], 0)
        total = total + ops.ite(w.inflight[i], need, 0)
    return total


def after_update(ops: Ops, cfg: RuleConfig, w: KVWork, i: int, scheduled: Int,
                 chunk: Bool) -> tuple[Bool, Bool, KVSlot]:
    """Slot i after `update_from_output` (S:1641-1642 drops a request whose chunk finishes
    what it lacks from _inflight_prefills) and the connector's part of it (S:2306-2330,
    3209-3235, 3341-3354): a reported load ends; a failure under the policy "fail" ends
    the request with FINISHED_ERROR, under "recompute" it is kept for the waiting loop,
    its computed tokens set to 0. Returns (ended with an error, computed tokens reset, the
    slot's KVSlot if it goes on)."""
    report = w.reports[i]
    reported = ops.and_(report.report, w.loading[i])
    failed = ops.and_(reported, report.failed)
    error = False if cfg.kv_recompute else failed
    reset = failed if cfg.kv_recompute else False
    inflight = ops.and_(w.inflight[i], ops.not_(ops.and_(scheduled > 0, ops.not_(chunk))))
    slot = KVSlot(holding=w.holding[i], hold_key=w.hold_key[i],
                  loading=ops.and_(w.loading[i], ops.not_(reported)),
                  recved=ops.or_(w.recved[i], reported),
                  failed=ops.or_(w.failed[i], reset), inflight=inflight)
    return error, reset, slot


def choices_of(workload: Workload, ids: Sequence[str], num_slots: int
               ) -> tuple[KVChoices, ...]:
    """The connector environment of a workload laid out on slots (slot i = ids[i]):
    per step, each slot's hit and its load report of that step (the first one listed, as
    Connector.reports takes it). Unused slots get no hit and no report."""
    hits = {h.id: h for h in workload.kv_hits}
    slot_hits = tuple(KVHit(hits[rid].tokens, hits[rid].load_async) if rid in hits
                      else KVHit() for rid in ids) + (KVHit(),) * (num_slots - len(ids))
    by_step = workload.kv_loads_by_step()
    out = []
    for t in range(1, workload.steps + 1):
        first: dict[str, bool] = {}
        for event in by_step.get(t, ()):
            first.setdefault(event.id, event.failed)
        out.append(KVChoices(slot_hits, tuple(
            KVReport(rid in first, first.get(rid, False)) for rid in ids)
            + (KVReport(),) * (num_slots - len(ids))))
    return tuple(out)


def slot_kv(s: SlotState) -> KVSlot:
    """A slot's KVSlot (the default when the state has none)."""
    return s.kv[0] if s.kv else KVSlot()
