"""Replay a counterexample on the reference scheduler and re-check the property there.

The reference (model/reference/vllm_v1.py) is independent of the rules. Its StepRecords
are turned into Step observables and the property is evaluated under ConcreteOps. A
counterexample that does not violate the property on the reference is a DivergenceError,
never a finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from checker.trace import Counterexample
from model.ops import CONCRETE
from model.reference.vllm_v1 import cdiv, simulate
from model.state import RuleConfig, SlotObs, Step, StepRecord, Workload
from properties import catalogue


class DivergenceError(RuntimeError):
    """The rules and the reference disagree about a counterexample."""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What the reference did and where the property failed on it."""

    records: tuple[StepRecord, ...]
    violated_at: int  # 1-based step
    loop: int | None = None


def records_to_steps(workload: Workload, records: Sequence[StepRecord]) -> tuple[Step, ...]:
    """Step observables of a reference run, slot i = i-th request in arrival order.

    The reference reports free blocks but not blocks per request; with prefix caching off
    a running request holds exactly cdiv(min(num_computed_tokens, max_model_len),
    block_size) blocks (kv_cache_manager.py:541-571), a waiting one none, so the
    conservation property still cross-checks the reference's own pool accounting.
    """
    cfg = workload.config
    rcfg = RuleConfig.from_config(cfg)
    ordered = workload.arrival_order()
    outputs = {r.id: 0 for r in ordered}
    ncomp = {r.id: 0 for r in ordered}
    preemptions = {r.id: 0 for r in ordered}
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    steps = []
    for rec in records:
        arrived = tuple(r.id for r in ordered if r.arrival_step == rec.step)
        was_waiting = set(waiting) | set(arrived)
        was_running = set(running)
        sched = dict(rec.scheduled)
        rank = {rid: k for k, (rid, _) in enumerate(rec.scheduled)}
        after = dict(rec.num_computed_tokens)
        finished = dict(rec.finished)
        slots = []
        for i, spec in enumerate(ordered):
            rid = spec.id
            ntok = spec.prompt_len + outputs[rid]
            n = sched.get(rid, 0)
            now = after.get(rid, ncomp[rid])
            sampled = n > 0 and now >= ntok
            preemptions[rid] += rid in rec.preempted
            blocks = (cdiv(min(now, cfg.max_model_len), cfg.block_size)
                      if rid in rec.running else 0)
            queue_key = rec.waiting.index(rid) if rid in rec.waiting else 0
            slots.append(SlotObs(
                held=rid in was_running or rid in was_waiting, was_running=rid in was_running,
                was_waiting=rid in was_waiting, scheduled=n, serve_rank=rank.get(rid, 0),
                admitted=rid in rec.admitted, resumed=rid in rec.resumed,
                preempted=rid in rec.preempted, finished=rid in finished,
                finished_stop=finished.get(rid) == "stop", sampled=sampled, num_tokens=ntok,
                num_computed_tokens_before=ncomp[rid], num_computed_tokens=now,
                num_output_tokens=outputs[rid] + int(sampled), blocks=blocks,
                num_preemptions=preemptions[rid], running_after=rid in rec.running,
                waiting_after=rid in rec.waiting, queue_key=queue_key,
                run_key=rec.running.index(rid) if rid in rec.running else 0,
                prompt_len=spec.prompt_len, max_tokens=spec.max_tokens,
                priority=spec.priority,
                arrival_time=i))
            outputs[rid] += int(sampled)
            ncomp[rid] = now
        finished_blocks = sum(o.blocks for o in slots if o.finished)
        steps.append(Step(
            step=rec.step, slots=tuple(slots), free_blocks=rec.free_blocks,
            free_blocks_end=rec.free_blocks + finished_blocks,
            token_budget_left=rec.token_budget_left, num_running=len(rec.running),
            num_running_end=len(rec.running) - sum(1 for r in rec.running if r in finished),
            any_preempted=bool(rec.preempted), cfg=rcfg))
        running = tuple(r for r in rec.running if r not in finished)
        waiting = rec.waiting
    return tuple(steps)


def replay(cex: Counterexample) -> ReplayResult:
    """Run the counterexample's workload on the reference; raise DivergenceError unless
    the property fails there at the same step (or, for a lasso, the run cycles)."""
    prop = catalogue.get(cex.property, **dict(cex.params))
    if prop.kind == "lasso":
        return _replay_lasso(cex)
    records = simulate(cex.workload)
    steps = records_to_steps(cex.workload, records)
    failing = [t for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    if not failing:
        raise DivergenceError(
            f"{cex.property}: the reference satisfies the property on all {len(steps)} steps "
            "of the counterexample; the rules and the reference disagree")
    if failing[0] + 1 != cex.violated_at:
        raise DivergenceError(
            f"{cex.property}: the reference fails at step {failing[0] + 1}, the rules at "
            f"step {cex.violated_at}")
    return ReplayResult(records, failing[0] + 1)


def _replay_lasso(cex: Counterexample) -> ReplayResult:
    """Run the loop twice more and check the reference repeats it with a request that
    never finishes."""
    assert cex.loop is not None
    period = cex.violated_at - cex.loop
    longer = replace(cex.workload, steps=cex.violated_at + 2 * period)
    records = simulate(longer)
    finished = {rid for rec in records for rid, _ in rec.finished}
    stuck = [r.id for r in cex.workload.requests if r.id not in finished]
    if not stuck:
        raise DivergenceError(f"{cex.property}: every request finishes on the reference")
    for j in range(cex.loop, cex.violated_at + period):
        a, b = records[j], records[j + period]
        if _behaviour(a) != _behaviour(b):
            raise DivergenceError(
                f"{cex.property}: the reference does not repeat step {j + 1} at step "
                f"{j + 1 + period}")
    return ReplayResult(records, cex.violated_at, cex.loop)


def _behaviour(rec: StepRecord) -> tuple[object, ...]:
    return (rec.scheduled, rec.admitted, rec.resumed, rec.preempted, rec.finished,
            rec.free_blocks, rec.num_computed_tokens, rec.running, rec.waiting)
