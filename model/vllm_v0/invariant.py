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

A swap config (`preemption_mode="swap"`) has its own statement, `_swap_well_formed`: the
facts above, with a SWAPPED request held as a RUNNING one is (it was running when swapped
out with its computed tokens and table kept, S:1807-1838) but keyed in `swapped`
(distinct keys below the tail) and preempted at least once; the GPU pool conserved over
the tables not on the CPU while the engine runs (a dead engine keeps the GPU pool the
RuntimeError left mid-step, S:1829-1835, beside the slots as the step found them); and
the CPU pool's free blocks never negative, and with the swapped tables never above its
size: below it once a swapped group the whole GPU can never hold was ignored, whose CPU
blocks nothing gives back (S:1696-1715).

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

from model.core.ops import Bool, Int, Ops
from model.core.types import SlotSpec
from model.vllm_v0.state import (
    ABSENT,
    FINISHED,
    RUNNING,
    SWAPPED,
    WAITING,
    RuleConfig,
    SchedState,
    SlotState,
)


def _live(ops: Ops, cfg: RuleConfig, spec: SlotSpec, x: SlotState, ntok: Int) -> list[Bool]:
    """What holds of a request still held: fewer outputs than max_tokens, and once it has
    sampled, shorter than max_model_len (the stop check, SC:31-92)."""
    return [x.num_output_tokens >= 0, x.num_output_tokens < spec.max_tokens,
            ops.or_(x.num_output_tokens == 0, ntok < cfg.max_model_len)]


def _not_yet_running(ops: Ops, spec: SlotSpec, x: SlotState, s: SchedState,
                     live: Sequence[Bool]) -> list[Bool]:
    """The facts of both statements about an ABSENT slot (untouched, not yet arrived), an
    arrived one, and a WAITING one (no table, nothing computed, S:1795-1805; its key
    between the waiting queue's ends)."""
    return [
        x.num_preemptions >= 0,
        ops.implies(x.status == ABSENT, ops.and_(
            x.num_computed_tokens == 0, x.num_output_tokens == 0,
            ops.not_(x.decode_stage), x.table_tokens == 0, x.num_preemptions == 0,
            ops.or_(spec.arrival_step == 0, spec.arrival_step > s.step))),
        ops.implies(x.status != ABSENT, ops.and_(spec.arrival_step >= 1,
                                                 spec.arrival_step <= s.step)),
        ops.implies(x.status == WAITING, ops.and_(
            x.num_computed_tokens == 0, x.table_tokens == 0, ops.not_(x.decode_stage),
            x.wait_key > s.wait_head, x.wait_key < s.wait_tail, *live)),
    ]


def well_formed(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], s: SchedState) -> Bool:
    """Every reachable state of the rules satisfies this (see the module docstring)."""
    if cfg.swaps:
        return _swap_well_formed(ops, cfg, specs, s)
    cons: list[Bool] = [s.step >= 0, s.wait_head < s.wait_tail]
    tables = []
    for spec, x in zip(specs, s.slots, strict=True):
        ntok = spec.prompt_len + x.num_output_tokens
        live = _live(ops, cfg, spec, x, ntok)
        running = [x.num_computed_tokens >= 1, x.num_computed_tokens <= ntok - 1,
                   x.table_tokens >= x.num_computed_tokens, x.table_tokens <= ntok,
                   x.run_key >= 0, x.run_key < s.next_run_key, *live]
        cons += [
            x.status >= ABSENT, x.status <= FINISHED, *_not_yet_running(ops, spec, x, s, live),
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


def _swap_well_formed(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec],
                      s: SchedState) -> Bool:
    """The invariant of a swap config: the recompute facts with SWAPPED slots (a RUNNING
    request's facts but its key, which orders `swapped`: distinct, below the tail), the
    GPU pool conserved over the tables not on the CPU while the engine runs (a dead
    engine's pool stays as the RuntimeError left it, mid-step), and the CPU pool never
    negative and never above its size with the swapped tables (an ignored swapped group's
    blocks are lost to it, S:1696-1715)."""
    pool = s.cpu[0]
    n = len(specs)
    cons: list[Bool] = [s.step >= 0, s.wait_head < s.wait_tail, pool.crashed >= 0,
                        pool.crashed <= n, pool.free_blocks >= 0, pool.swap_tail >= 0]
    gpu, cpu = [], []
    for spec, x in zip(specs, s.slots, strict=True):
        ntok = spec.prompt_len + x.num_output_tokens
        live = _live(ops, cfg, spec, x, ntok)
        held = [x.num_computed_tokens >= 1, x.num_computed_tokens <= ntok - 1,
                x.table_tokens >= x.num_computed_tokens, x.table_tokens <= ntok, *live]
        key = x.swap_key[0]
        cons += [
            x.status >= ABSENT, x.status <= SWAPPED, *_not_yet_running(ops, spec, x, s, live),
            ops.implies(x.status == RUNNING, ops.and_(
                *held, x.run_key >= 0, x.run_key < s.next_run_key)),
            ops.implies(x.status == SWAPPED, ops.and_(
                *held, x.num_preemptions >= 1, key >= 0, key < pool.swap_tail)),
            ops.implies(x.status == FINISHED, x.table_tokens == 0),
        ]
        blocks = ops.cdiv(x.table_tokens, cfg.block_size)
        gpu.append(ops.ite(x.status == SWAPPED, 0, blocks))
        cpu.append(ops.ite(x.status == SWAPPED, blocks, 0))
    cons.append(ops.implies(pool.crashed == 0,
                            s.free_blocks + ops.sum(gpu) == cfg.usable_blocks))
    cons.append(pool.free_blocks + ops.sum(cpu) <= cfg.num_cpu_blocks)
    status = [x.status for x in s.slots]
    for i in range(n):
        for j in range(i + 1, n):
            a, b = s.slots[i], s.slots[j]
            for st, ka, kb in ((RUNNING, a.run_key, b.run_key),
                               (WAITING, a.wait_key, b.wait_key),
                               (SWAPPED, a.swap_key[0], b.swap_key[0])):
                cons.append(ops.implies(ops.and_(status[i] == st, status[j] == st),
                                        ka != kb))
    cons.append(ops.sum([ops.to_int(st == RUNNING) for st in status]) <= cfg.max_num_seqs)
    return ops.and_(*cons)
