"""The strengthening invariant of vLLM V0's reachable rule states, over Ops.

k-induction (checker/methods/induction.py) proves it inductive first, then uses it to
prove step properties for all request lengths. Line numbers are relative to `vllm/` of the
0.10.2 wheel (S = core/scheduler.py, BM = core/block_manager.py, BT =
core/block/block_table.py, SQ = sequence.py). It says:

- an ABSENT slot is untouched and its request has not arrived yet; every other slot's
  request has arrived;
- a WAITING request holds no block table, is not in DECODE stage and has computed
  nothing: it never ran, or a recompute preemption freed its table and reset it
  (S:1795-1805, SQ's `reset_state_for_recompute`); it keeps the outputs it had;
- a RUNNING request has computed at least one token and less than its whole sequence (a
  step that computes the last token samples the next, S:1563-1576), and its table holds
  at least its computed tokens and at most its tokens (`allocate` sizes it to the whole
  sequence, BM:166-205; `append_slots` to `get_len()`, BM:236-252);
- a live (WAITING or RUNNING) request has fewer outputs than max_tokens, and once it has
  sampled a token its sequence is shorter than max_model_len (the stop check after every
  sampled token, engine/output_processor/stop_checker.py:84-92; a preempted request keeps
  its outputs, and resumed in chunks it samples nothing until its last chunk); before its
  first token it may be as long as max_model_len (LLMEngine admits a prompt of exactly
  max_model_len tokens, engine/llm_engine.py:1768-1769, and chunks may run it);
- a FINISHED request holds no table (S:1696-1715 frees it);
- the pool is conserved: free blocks plus every table's cdiv(tokens, block_size) blocks
  is num_gpu_blocks (tables are sized exactly, BT:84-108; the naive allocator has no null
  block, BM:95-100);
- waiting keys are distinct and strictly between `wait_head` and `wait_tail` (arrivals
  take the tail's key, victims the head's, `extendleft` at S:1273, 1401); running keys
  are distinct and below `next_run_key` (the running count before the step's finished
  requests left, so admissions take keys above every old one);
- `running` holds at most max_num_seqs requests (SchedulingBudget, S:1176-1183, asserted
  at S:1396-1397).

Left out because no proof needs them (the invariant without them is proved on the
manifest configs and ranged families, and proves every HOLDS entry): free blocks >= 0
(the step restores it); a RUNNING request in DECODE stage lacks exactly one token, and
without chunked prefill every RUNNING request is in DECODE; a waiting request never
preempted has no outputs; a RUNNING request's sequence is within max_model_len before its
first token (false for the reference on an over-long prompt run in chunks, which
LLMEngine refuses before scheduling).
"""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Ops
from model.core.types import SlotSpec
from model.vllm_v0.state import ABSENT, FINISHED, RUNNING, WAITING, RuleConfig, SchedState


def well_formed(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], s: SchedState) -> Bool:
    """Every reachable state of the rules satisfies this (see the module docstring)."""
    cons: list[Bool] = [s.step >= 0, s.wait_head < s.wait_tail]
    tables = []
    for spec, x in zip(specs, s.slots, strict=True):
        ntok = spec.prompt_len + x.num_output_tokens
        live = [x.num_output_tokens >= 0, x.num_output_tokens < spec.max_tokens,
                ops.or_(x.num_output_tokens == 0, ntok < cfg.max_model_len)]
        running = [x.num_computed_tokens >= 1, x.num_computed_tokens <= ntok - 1,
                   x.table_tokens >= x.num_computed_tokens, x.table_tokens <= ntok,
                   x.run_key >= 0, x.run_key < s.next_run_key, *live]
        cons += [
            x.status >= ABSENT, x.status <= FINISHED, x.num_preemptions >= 0,
            ops.implies(x.status == ABSENT, ops.and_(
                x.num_computed_tokens == 0, x.num_output_tokens == 0,
                ops.not_(x.decode_stage), x.table_tokens == 0, x.num_preemptions == 0,
                ops.or_(spec.arrival_step == 0, spec.arrival_step > s.step))),
            ops.implies(x.status != ABSENT, ops.and_(spec.arrival_step >= 1,
                                                     spec.arrival_step <= s.step)),
            ops.implies(x.status == WAITING, ops.and_(
                x.num_computed_tokens == 0, x.table_tokens == 0, ops.not_(x.decode_stage),
                x.wait_key > s.wait_head, x.wait_key < s.wait_tail, *live)),
            ops.implies(x.status == RUNNING, ops.and_(*running)),
            ops.implies(x.status == FINISHED, x.table_tokens == 0),
        ]
        tables.append(ops.cdiv(x.table_tokens, cfg.block_size))
    cons.append(s.free_blocks + ops.sum(tables) == cfg.usable_blocks)
    n = len(specs)
    waiting = [x.status == WAITING for x in s.slots]
    running_now = [x.status == RUNNING for x in s.slots]
    for i in range(n):
        for j in range(i + 1, n):
            a, b = s.slots[i], s.slots[j]
            cons.append(ops.implies(ops.and_(running_now[i], running_now[j]),
                                    a.run_key != b.run_key))
            cons.append(ops.implies(ops.and_(waiting[i], waiting[j]),
                                    a.wait_key != b.wait_key))
    cons.append(ops.sum([ops.to_int(r) for r in running_now]) <= cfg.max_num_seqs)
    return ops.and_(*cons)
