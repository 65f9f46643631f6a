"""The strengthening invariant of vLLM V1's reachable rule states, over Ops.

k-induction (checker/methods/induction.py) proves it inductive first, then uses it to
prove step properties for all request lengths. It says: statuses and their counters are
consistent (a WAITING request has computed nothing, a PREEMPTED one has lost its blocks,
request.py:370-386 and scheduler.py:1571-1614), a RUNNING request holds exactly
cdiv(num_computed_tokens, block_size) blocks (kv_cache_manager.py:541-571 with prefix
caching off), the pool is conserved, queue keys are distinct, and `running` stays within
max_num_active_reqs (scheduler.py:129-136).
"""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Ops
from model.core.types import SlotSpec
from model.vllm.state import ABSENT, FINISHED, PREEMPTED, RUNNING, WAITING, RuleConfig, SchedState


def well_formed(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], s: SchedState) -> Bool:
    """Every reachable state satisfies this (see the module docstring)."""
    cons: list[Bool] = [s.free_blocks >= 0, s.step >= 0, s.wait_head < s.wait_tail]
    held_blocks = []
    for spec, x in zip(specs, s.slots, strict=True):
        ntok = spec.prompt_len + x.num_output_tokens
        live = [x.num_output_tokens >= 0, x.num_output_tokens < spec.max_tokens,
                ntok < cfg.max_model_len]
        queued = [x.wait_key > s.wait_head, x.wait_key < s.wait_tail]
        cons += [
            x.status >= ABSENT, x.status <= FINISHED, x.num_preemptions >= 0,
            ops.implies(x.status == ABSENT, ops.and_(
                x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
                x.num_preemptions == 0,
                ops.or_(spec.arrival_step == 0, spec.arrival_step > s.step))),
            ops.implies(x.status != ABSENT, ops.and_(spec.arrival_step >= 1,
                                                     spec.arrival_step <= s.step)),
            ops.implies(x.status == WAITING, ops.and_(
                x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
                x.num_preemptions == 0, *queued)),
            ops.implies(x.status == PREEMPTED, ops.and_(
                x.num_computed_tokens == 0, x.blocks == 0, x.num_preemptions >= 1,
                *queued, *live)),
            ops.implies(x.status == RUNNING, ops.and_(
                x.num_computed_tokens >= 1, x.num_computed_tokens <= ntok - 1,
                x.blocks == ops.cdiv(x.num_computed_tokens, cfg.block_size),
                x.run_key < s.next_run_key, *live)),
            ops.implies(x.status == FINISHED, x.blocks == 0),
        ]
        held_blocks.append(x.blocks)
    cons.append(s.free_blocks + ops.sum(held_blocks) == cfg.usable_blocks)
    n = len(specs)
    waiting = [ops.or_(x.status == WAITING, x.status == PREEMPTED) for x in s.slots]
    running = [x.status == RUNNING for x in s.slots]
    for i in range(n):
        for j in range(i + 1, n):
            a, b = s.slots[i], s.slots[j]
            cons.append(ops.implies(ops.and_(running[i], running[j]), a.run_key != b.run_key))
            cons.append(ops.implies(ops.and_(waiting[i], waiting[j]), a.wait_key != b.wait_key))
    cons.append(ops.sum([ops.to_int(r) for r in running]) <= cfg.max_num_active_reqs)
    return ops.and_(*cons)
