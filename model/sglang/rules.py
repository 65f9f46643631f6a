"""SGLang (v0.5.22) scheduler iteration as one branch-free step over a fixed number of request
slots, written once over Ops: the merge of the last extend batch, `PrefillAdder` (three
budgets, the chunked request first, head-of-line stop), the decode check with retraction,
the new-token-ratio tracker, and the results, with EAGLE's over-allocated KV rows and
accepted runs when it is on. Any page size P (`page_size`): the pool and
each request's KV are counted in tokens, always whole pages; the reference
(model/sglang/reference.py) states the scope. At P = 1 no page arithmetic is emitted
(`paged` and friends return their argument), so the page-size-1 formulas are unchanged.

Fractions are exact integers. The ratio is a pair (n, b) meaning n / (b * Q), with Q the
least common denominator of the initial ratio, its floor and its decay (a config constant):
a decay is `n - decay*Q*b`, the floor `floor*Q*b`, the estimate after a retraction
`a / e` is (a*Q, e), so the state update stays linear. Comparing a reservation R*ratio
with an integer X is `R * n < X * b * Q`. Upstream uses binary floats (T:21-49); the two
can differ only when a comparison is an exact tie.

Line numbers are relative to `sglang/srt/` in v0.5.22 (S = managers/scheduler.py,
P = managers/schedule_policy.py, B = managers/schedule_batch.py, PB =
mem_cache/prefill_budget.py, T = managers/scheduler_components/new_token_ratio_tracker.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from model.core.memo import per_config
from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import arrive_at_tail, pick, select_min
from model.core.types import SlotObs, SlotSpec, Step
from model.sglang.config import CLIP_MAX_NEW_TOKENS, WAITING_QUEUE_PREFIX_MATCH_MAX, Config

# Slot status codes. STALE: finished in a decode step, still listed in running_batch.reqs
# until the next decode or mixed step filters it (B:3659-3676; S:4335-4345).
# EXTEND: joined this step's extend batch (scratch only, never in a state between steps).
ABSENT, WAITING, RUNNING, STALE, CHUNKED, FINISHED, EXTEND = 0, 1, 2, 3, 4, 5, 6

# Step kinds (model.state.Step.step_kind): 0 mixed or idle, 1 prefill only, 2 decode only.
KIND_OTHER, KIND_PREFILL, KIND_DECODE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class SGLangRuleConfig:
    """The configuration as the rules read it (concrete values).

    Shared names, with their nearest SGLang meaning: `token_budget` and
    `max_num_batched_tokens` = max_prefill_tokens (the per-batch input cap);
    `max_num_seqs` = the effective max_running_requests; `usable_blocks` =
    max_total_num_tokens (a block is a token; with `page_size` P > 1 the pool and each
    request's KV are whole pages, counted in tokens); `max_model_len` =
    max_req_input_len (prompts must be shorter); `block_size` = 1; `watermark_blocks` = 0;
    `enable_chunked_prefill` = chunked prefill on; `policy_priority` = False (priority
    scheduling is not modelled).
    """

    token_budget: int
    max_num_batched_tokens: int
    max_num_seqs: int
    usable_blocks: int
    max_model_len: int
    enable_chunked_prefill: bool
    chunked_prefill_size: int  # 0 when chunking is off
    enable_mixed_chunk: bool  # effective: needs chunking (S:1338-1340)
    radix_cache: bool
    policy_lof: bool
    policy_lpm: bool  # effective: LPM with the radix cache on
    max_req_len: int
    ratio_scale: int  # Q
    ratio_init: int  # init * Q
    ratio_floor: int  # floor * Q
    ratio_decay: int  # decay * Q
    retract_decode_steps: int
    page_size: int = 1
    block_size: int = 1
    watermark_blocks: int = 0
    policy_priority: bool = False
    # EAGLE (speculative_hook.py:985-1015): the decode reserve past the committed length
    # (`Config.decode_reserve`) and the most drafts a verify accepts (the generic
    # speculative choices range over 0..num_spec_tokens, checker/methods/symbolic.py).
    speculative: bool = False
    decode_reserve: int = 0
    num_spec_tokens: int = 0

    # Kept per config: the reference explorer observes every transition's run from its config
    # (records_to_steps), 16 % of its time before (the ratios' Fractions).
    @staticmethod
    @per_config
    def from_config(cfg: Config) -> SGLangRuleConfig:
        """The rules' view of an SGLang Config."""
        init, floor, decay = cfg.ratio_init(), cfg.ratio_floor(), cfg.ratio_decay()
        q = math.lcm(init.denominator, floor.denominator, decay.denominator)
        return SGLangRuleConfig(
            token_budget=cfg.max_prefill_tokens, max_num_batched_tokens=cfg.max_prefill_tokens,
            max_num_seqs=cfg.effective_max_running_requests,
            usable_blocks=cfg.max_total_num_tokens, max_model_len=cfg.max_req_input_len,
            enable_chunked_prefill=cfg.chunking,
            chunked_prefill_size=cfg.chunked_prefill_size if cfg.chunking else 0,
            enable_mixed_chunk=cfg.mixed_chunk, radix_cache=not cfg.disable_radix_cache,
            policy_lof=cfg.schedule_policy == "lof", policy_lpm=cfg.active_policy_is_lpm,
            max_req_len=cfg.max_req_len, ratio_scale=q, ratio_init=int(init * q),
            ratio_floor=int(floor * q), ratio_decay=int(decay * q),
            retract_decode_steps=cfg.retract_decode_steps, page_size=cfg.page_size,
            speculative=cfg.speculative,
            decode_reserve=cfg.decode_reserve if cfg.speculative else 0,
            num_spec_tokens=cfg.max_accept_len - 1)

    def ratio(self, n: int, b: int) -> Fraction:
        """The ratio a concrete (n, b) pair stands for."""
        return Fraction(n, b * self.ratio_scale)


@dataclass(frozen=True, slots=True)
class SGLangSlot:
    """One request slot between two steps. `kv`: own KV tokens in the pool; `computed`:
    tokens whose KV exists (cache hit + own, 0 while waiting); `run_key` orders
    running_batch.reqs and `wait_key` the waiting list. `allocated`: under EAGLE the KV
    row's end (`kv_allocated_len`, past `computed` after a decode); 0 without it."""

    status: Int = ABSENT
    kv: Int = 0
    computed: Int = 0
    allocated: Int = 0
    outputs: Int = 0
    run_key: Int = 0
    wait_key: Int = 0
    retracted: Bool = False
    num_retractions: Int = 0


@dataclass(frozen=True, slots=True)
class SGLangState:
    """The scheduler between two iterations (the last extend batch already merged)."""

    slots: tuple[SGLangSlot, ...]
    free: Int
    batch_is_full: Bool
    ratio_n: Int
    ratio_b: Int
    next_run_key: Int = 0
    wait_tail: Int = 0
    step: int = 0
    # Under EAGLE: the last extend batch was appended to a non-empty running batch and
    # kept a request, so it stands apart and is not empty (`SGLangScheduler._last_apart`).
    last_apart: Bool = False


def initial_state(num_slots: int, cfg: SGLangRuleConfig) -> SGLangState:
    """No request yet, the whole pool free, the ratio at its initial value."""
    return SGLangState(slots=tuple(SGLangSlot() for _ in range(num_slots)),
                       free=cfg.usable_blocks, batch_is_full=False,
                       ratio_n=cfg.ratio_init, ratio_b=1)


# ---------------------------------------------------------------------------------------
# Pure token arithmetic (also used by checker/methods/theorems/sglang.py)
# ---------------------------------------------------------------------------------------


def paged(ops: Ops, tokens: Int, page: int) -> Int:
    """`tokens` rounded up to whole pages, in tokens (`ceil_paged_tokens`, P:827-828)."""
    return tokens if page == 1 else ops.cdiv(tokens, page) * page


def page_floor(ops: Ops, tokens: Int, page: int) -> Int:
    """`tokens` rounded down to whole pages, in tokens."""
    return tokens if page == 1 else ops.floordiv(tokens, page) * page


def _on_page_boundary(ops: Ops, tokens: Int, page: int) -> Bool:
    """`tokens % page == 0`."""
    return True if page == 1 else tokens == page_floor(ops, tokens, page)


def max_new_tokens(ops: Ops, cfg: SGLangRuleConfig, spec: SlotSpec) -> Int:
    """`init_req_max_new_tokens` (S:2585-2630; allocator/base.py:86-105: the empty pool
    less the paged prompt, one page and one token)."""
    pool_cap = (cfg.usable_blocks - spec.prompt_len - 2 if cfg.page_size == 1 else
                cfg.usable_blocks - paged(ops, spec.prompt_len, cfg.page_size)
                - cfg.page_size - 1)
    cap = ops.min(spec.max_tokens, ops.min(cfg.max_req_len - spec.prompt_len - 1, pool_cap))
    return ops.max(cap, 0)


def new_chunk_len(ops: Ops, extend: Int, rem_chunk: Int, page: int = 1) -> tuple[Bool, Int]:
    """A new request is chunked when its paged extend exceeds the chunk budget, and then
    gets the budget's whole pages (P:1549-1575; its cache hit is whole pages, so the
    chunk's end is on a page boundary too): (chunked, extend admitted)."""
    chunked = paged(ops, extend, page) > rem_chunk
    return chunked, ops.ite(chunked, page_floor(ops, rem_chunk, page), extend)


def continuation_len(ops: Ops, remaining: Int, rem_chunk: Int, mem_floor: Int) -> Int:
    """The continuing chunk (P:1092-1173; PB:141-144): `min(rem_chunk, int(rem_total))`
    when that is positive, else the whole chunk budget (progress first); at most what is
    left. `mem_floor` is int(rem_total)."""
    available = ops.min(rem_chunk, mem_floor)
    limit = ops.ite(available > 0, available, rem_chunk)
    return ops.min(remaining, limit)


def decode_runs(ops: Ops, prefill_formed: Bool, mixed: Bool, decode_fits: Bool) -> Bool:
    """Running requests decode in a step without a prefill batch (S:3870-3881), or inside
    it when mixed chunk is on and their decode fits (S:4251-4288)."""
    return ops.or_(ops.not_(prefill_formed), ops.and_(mixed, decode_fits))


# ---------------------------------------------------------------------------------------
# Ratio arithmetic
# ---------------------------------------------------------------------------------------


def _reservation_below(ops: Ops, cfg: SGLangRuleConfig, res: Int, x: Int, n: Int,
                       b: Int) -> Bool:
    """res * ratio < x."""
    return res * n < x * b * cfg.ratio_scale


def _mem_floor(ops: Ops, cfg: SGLangRuleConfig, y: Int, res: Int, n: Int, b: Int,
               cap: int) -> Int:
    """int(y - res*ratio) (PB:141-144) where only values in (0, cap) matter: the caller
    takes the min with a chunk budget <= cap, and any value <= 0 acts alike. Concretely
    the exact value; symbolically #{j in 1..cap : y - res*ratio >= j}, which avoids
    dividing by the ratio's symbolic denominator."""
    if not getattr(ops, "symbolic", False):
        return math.trunc(y - Fraction(res * n, b * cfg.ratio_scale))
    count: Int = 0
    for j in range(1, cap + 1):
        count = count + ops.to_int(res * n <= (y - j) * b * cfg.ratio_scale)
    return count


def _decayed(ops: Ops, cfg: SGLangRuleConfig, n: Int, b: Int) -> Int:
    """`max(current - decay, min)` (T:34-35) on the numerator."""
    down = n - cfg.ratio_decay * b
    floor = cfg.ratio_floor * b
    return ops.ite(down >= floor, down, floor)


# ---------------------------------------------------------------------------------------
# One step
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Work:
    """Mutable scratch of one iteration (a fold accumulator, not a state type)."""

    status: list[Int]
    kv: list[Int]
    computed: list[Int]
    allocated: list[Int]
    run: list[Int]  # tokens a sampling row appends (an EAGLE decode row: its accepted run)
    spec_accepted: list[Int]
    run_key: list[Int]
    wait_key: list[Int]
    retracted: list[Bool]
    num_retractions: list[Int]
    scheduled: list[Int]
    serve_rank: list[Int]
    in_batch: list[Bool]  # member of this step's batch (samples unless still chunked)
    joined: list[Bool]  # left the waiting list this step
    preempted: list[Bool]
    aborted: list[Bool]
    free: Int
    full: Bool
    ratio_n: Int
    ratio_b: Int
    next_run_key: Int
    wait_tail: Int
    served: Int


def _checkpoint(ops: Ops, w: _Work) -> None:
    """Name every accumulator (identity under ConcreteOps; flat terms for the solver)."""
    for name in ("status", "kv", "computed", "allocated", "run", "spec_accepted", "run_key",
                 "wait_key", "retracted",
                 "num_retractions", "scheduled", "serve_rank", "in_batch", "joined",
                 "preempted", "aborted"):
        setattr(w, name, [ops.name(v) for v in getattr(w, name)])
    for name in ("free", "full", "ratio_n", "ratio_b", "next_run_key", "wait_tail", "served"):
        setattr(w, name, ops.name(getattr(w, name)))


def _arrive(ops: Ops, specs: Sequence[SlotSpec], state: SGLangState, t: int) -> SGLangState:
    """Arrivals join the waiting tail in slot order (S:3353-3368)."""
    return arrive_at_tail(ops, specs, state, t, ABSENT, WAITING)


def _in_running_batch(ops: Ops, status: Int) -> Bool:
    return ops.or_(status == RUNNING, status == STALE)


def _serve(ops: Ops, cfg: SGLangRuleConfig, w: _Work, i: int, hit: Bool, n: Int) -> None:
    """Extend slot i by `n` KV tokens when `hit` (prepare_for_extend / for_decode): the
    pages past its last partly filled one (allocator/paged.py:62-76, 117-133)."""
    page = cfg.page_size
    taken = (n if page == 1 else
             paged(ops, w.computed[i] + n, page) - paged(ops, w.computed[i], page))
    w.scheduled[i] = ops.ite(hit, n, w.scheduled[i])
    w.kv[i] = ops.ite(hit, w.kv[i] + taken, w.kv[i])
    w.computed[i] = ops.ite(hit, w.computed[i] + n, w.computed[i])
    if cfg.speculative:  # kv_allocated_len = seq_len (mem_cache/allocation.py:476-478)
        w.allocated[i] = ops.ite(hit, w.computed[i], w.allocated[i])
    w.serve_rank[i] = ops.ite(hit, w.served, w.serve_rank[i])
    w.in_batch[i] = ops.or_(w.in_batch[i], hit)
    w.free = ops.ite(hit, w.free - taken, w.free)


def _spec_row_end(ops: Ops, cfg: SGLangRuleConfig, computed: Int) -> Int:
    """Where an EAGLE decode wants slot's KV row to end: the committed length plus the
    reserve, in whole pages (allocation_sizing.py:72-93)."""
    return paged(ops, computed + cfg.decode_reserve, cfg.page_size)


def _serve_spec(ops: Ops, cfg: SGLangRuleConfig, w: _Work, i: int, hit: Bool,
                commit: Int) -> None:
    """An EAGLE decode (or mixed decode) row when `hit`: the row grown to `_spec_row_end`
    (eagle_utils.py:1112-1170; the new pages are those past the pages held,
    mem_cache/allocation.py:773-841), then `commit` tokens committed (the accepted run,
    batch_result_processor.py:818-826; a mixed row's pending token, 370-378)."""
    page = cfg.page_size
    end = ops.max(w.allocated[i], _spec_row_end(ops, cfg, w.computed[i]))
    taken = end - paged(ops, w.allocated[i], page)
    w.scheduled[i] = ops.ite(hit, commit, w.scheduled[i])
    w.kv[i] = ops.ite(hit, w.kv[i] + taken, w.kv[i])
    w.allocated[i] = ops.ite(hit, end, w.allocated[i])
    w.computed[i] = ops.ite(hit, w.computed[i] + commit, w.computed[i])
    w.serve_rank[i] = ops.ite(hit, w.served, w.serve_rank[i])
    w.in_batch[i] = ops.or_(w.in_batch[i], hit)
    w.free = ops.ite(hit, w.free - taken, w.free)


def _decode_need(ops: Ops, cfg: SGLangRuleConfig, w: _Work, members: Sequence[Bool]) -> Int:
    """`new_tokens_required_next_decode` (B:3250-3264): a page for each member whose KV
    ends on a page boundary; under EAGLE the spec-v2 estimate (B:3268-3278): each member's
    row grown to the committed length plus the reserve, in pages, less the pages held."""
    page = cfg.page_size
    if cfg.speculative:
        return ops.sum([ops.ite(m, ops.max(
            _spec_row_end(ops, cfg, c) - paged(ops, a, page), 0), 0)
            for m, c, a in zip(members, w.computed, w.allocated, strict=True)])
    if page == 1:
        return ops.sum([ops.to_int(m) for m in members])
    return page * ops.sum([ops.to_int(ops.and_(m, _on_page_boundary(ops, c, page)))
                           for m, c in zip(members, w.computed, strict=True)])


def _sort_waiting(ops: Ops, cfg: SGLangRuleConfig, specs: Sequence[SlotSpec], w: _Work,
                  mnew: Sequence[Int], match_len: Sequence[Int], do: Bool) -> None:
    """`calc_priority` (P:209-298): a stable in-place sort, so the new order is by
    (policy key, current position). FCFS does not sort; LPM does not above 128 waiting."""
    if not (cfg.policy_lof or cfg.policy_lpm):
        return
    n = len(specs)
    waiting = [s == WAITING for s in w.status]
    keys = [-mnew[i] if cfg.policy_lof else -match_len[i] for i in range(n)]
    if cfg.policy_lpm:
        do = ops.and_(do, ops.sum([ops.to_int(x) for x in waiting])
                      <= WAITING_QUEUE_PREFIX_MATCH_MAX)
    new_keys = []
    for i in range(n):
        before = ops.sum([ops.to_int(ops.and_(waiting[j], ops.or_(
            keys[j] < keys[i], ops.and_(keys[j] == keys[i], w.wait_key[j] < w.wait_key[i]))))
            for j in range(n) if j != i])
        new_keys.append(ops.ite(ops.and_(do, waiting[i]), w.wait_tail - n + before,
                                w.wait_key[i]))
    w.wait_key = new_keys


@dataclass(slots=True)
class _Adder:
    """The PrefillAdder's budgets (P:581-900; PB:62-168)."""

    avail: Int  # free tokens at the start of the pass (PB:90-96; allocation comes later)
    rem_input: Int
    rem_chunk: Int
    total_off: Int  # integer part of total_offset; the ratio part is res * ratio
    cur_off: Int
    res: Int
    count: Int  # len(can_run_list)

    def charge(self, ops: Ops, page: int, do: Bool, extend: Int, max_new: Int) -> None:
        """`_update_prefill_budget` with `reserve` (P:851-900; PB:155-167): the extend
        in whole pages, one page of slack."""
        extend = paged(ops, extend, page)
        self.total_off = ops.ite(do, self.total_off + extend + page + max_new, self.total_off)
        self.cur_off = ops.ite(do, self.cur_off + extend + page, self.cur_off)
        self.rem_input = ops.ite(do, self.rem_input - extend, self.rem_input)
        self.rem_chunk = ops.ite(do, self.rem_chunk - extend, self.rem_chunk)
        self.count = ops.ite(do, self.count + 1, self.count)

    def name(self, ops: Ops) -> None:
        for f in ("rem_input", "rem_chunk", "total_off", "cur_off", "count"):
            setattr(self, f, ops.name(getattr(self, f)))


def _prefill(ops: Ops, cfg: SGLangRuleConfig, specs: Sequence[SlotSpec], w: _Work,
             mnew: Sequence[Int], fill: Sequence[Int], outputs: Sequence[Int]
             ) -> tuple[Bool, list[Bool], _Adder]:
    """`_get_new_batch_prefill_raw` (S:3954-4290): (batch formed, still-chunked flags,
    budgets after the pass)."""
    n = len(specs)
    in_r = [_in_running_batch(ops, s) for s in w.status]
    running_bs = ops.sum([ops.to_int(x) for x in in_r])
    is_c = [s == CHUNKED for s in w.status]
    has_c = ops.or_(*is_c)
    num_waiting = ops.sum([ops.to_int(s == WAITING) for s in w.status])
    w.full = ops.and_(w.full, running_bs > 0)  # S:3967-3971
    attempt = ops.or_(has_c, ops.and_(ops.not_(w.full), num_waiting > 0))  # S:3973-3976
    # S:3907-3925: the cap less the running batch (finished-but-listed requests count), and
    # the free request slots (finished requests gave theirs back; the chunked one holds one).
    live = ops.sum([ops.to_int(s == RUNNING) for s in w.status])
    allocatable = ops.min(cfg.max_num_seqs - running_bs,
                          cfg.max_num_seqs - live - ops.to_int(has_c))
    blocked = ops.and_(attempt, ops.not_(has_c), allocatable <= 0)  # S:3997-4004
    w.full = ops.or_(w.full, blocked)
    go = ops.and_(attempt, ops.not_(blocked))
    hit_len = [ops.ite(cfg.radix_cache, page_floor(ops, ops.min(specs[i].cached_prefix_len,
                                                                 fill[i] - 1), cfg.page_size), 0)
               for i in range(n)]
    # LPM's key matches the whole fill, then caps it at fill - 1 (mem_cache/common.py:
    # 203-245); at page size 1 that is the admission hit.
    lpm_len = hit_len if cfg.page_size == 1 else [
        ops.ite(cfg.radix_cache, ops.min(page_floor(ops, ops.min(specs[i].cached_prefix_len,
                                                                 fill[i]), cfg.page_size),
                                         fill[i] - 1), 0) for i in range(n)]
    _sort_waiting(ops, cfg, specs, w, mnew, lpm_len, go)
    mixed_tokens = running_bs if cfg.enable_mixed_chunk else 0
    res = ops.sum([ops.ite(in_r[i], ops.min(mnew[i] - outputs[i], CLIP_MAX_NEW_TOKENS), 0)
                   for i in range(n)])
    a = _Adder(avail=w.free, rem_input=cfg.max_num_batched_tokens - mixed_tokens,
               rem_chunk=cfg.chunked_prefill_size - mixed_tokens, total_off=mixed_tokens,
               cur_off=mixed_tokens, res=ops.name(res), count=0)
    still_chunked = _continue_chunk(ops, cfg, w, a, is_c, ops.and_(go, has_c), mnew, fill)
    _admit_waiting(ops, cfg, specs, w, a, go, allocatable, running_bs, mnew, fill, outputs,
                   hit_len, still_chunked)
    return a.count > 0, still_chunked, a


def _mem_terms(cfg: SGLangRuleConfig, w: _Work, a: _Adder) -> Int:
    """Free tokens less the integer offsets: rem_total is this less res * ratio."""
    return a.avail - a.total_off


def _continue_chunk(ops: Ops, cfg: SGLangRuleConfig, w: _Work, a: _Adder, is_c: list[Bool],
                    do: Bool, mnew: Sequence[Int], fill: Sequence[Int]) -> list[Bool]:
    """`add_chunked_req` (P:1092-1173): the chunked request goes first."""
    if not cfg.enable_chunked_prefill:
        return [False] * len(is_c)
    remaining = pick(ops, is_c, [fill[i] - w.computed[i] for i in range(len(is_c))])
    floor = _mem_floor(ops, cfg, _mem_terms(cfg, w, a), a.res, w.ratio_n, w.ratio_b,
                       cfg.chunked_prefill_size)
    e = ops.name(continuation_len(ops, remaining, a.rem_chunk, floor))
    truncated = remaining > e
    mn = ops.ite(truncated, 0, ops.min(pick(ops, is_c, list(mnew)), CLIP_MAX_NEW_TOKENS))
    a.charge(ops, cfg.page_size, do, e, mn)
    for i in range(len(is_c)):
        _serve(ops, cfg, w, i, ops.and_(do, is_c[i]), e)
        w.status[i] = ops.ite(ops.and_(do, is_c[i]), EXTEND, w.status[i])
    w.served = ops.ite(do, w.served + 1, w.served)
    return [ops.and_(c, ops.or_(ops.not_(do), truncated)) for c in is_c]


def _admit_waiting(ops: Ops, cfg: SGLangRuleConfig, specs: Sequence[SlotSpec], w: _Work,
                   a: _Adder, go: Bool, allocatable: Int, running_bs: Int,
                   mnew: Sequence[Int], fill: Sequence[Int], outputs: Sequence[Int],
                   hit_len: Sequence[Int], still_chunked: list[Bool]) -> None:
    """The waiting loop (S:4081-4180) with `add_one_req` (P:1336-1584)."""
    n = len(specs)
    stopped: Bool = ops.not_(go)
    visited: list[Bool] = [False] * n
    for _ in range(n):
        eligible = [ops.and_(w.status[i] == WAITING, ops.not_(visited[i])) for i in range(n)]
        sel = select_min(ops, eligible, [(k,) for k in w.wait_key])
        present = ops.and_(ops.not_(stopped), ops.or_(*eligible))
        w.full = ops.or_(w.full, ops.and_(present, a.count >= allocatable))
        active = ops.and_(present, ops.not_(w.full))
        extend = pick(ops, sel, [fill[i] - hit_len[i] for i in range(n)])
        left = ops.min(ops.max(pick(ops, sel, [mnew[i] - outputs[i] for i in range(n)]), 0),
                       CLIP_MAX_NEW_TOKENS)
        y = _mem_terms(cfg, w, a) - (extend + left + cfg.page_size)
        mem_ok = _reservation_below(ops, cfg, a.res, y, w.ratio_n, w.ratio_b)
        other = ops.and_(ops.not_(cfg.enable_chunked_prefill), a.count > 0,
                         paged(ops, extend, cfg.page_size) >= a.rem_input)  # P:1530-1536
        if cfg.enable_chunked_prefill:
            chunked, e = new_chunk_len(ops, extend, a.rem_chunk, cfg.page_size)
            other = ops.or_(other, ops.and_(chunked, e <= 0))
        else:
            chunked, e = False, extend
        admit = ops.and_(active, mem_ok, ops.not_(other))
        mn = ops.ite(chunked, 0, ops.min(pick(ops, sel, list(mnew)), CLIP_MAX_NEW_TOKENS))
        a.charge(ops, cfg.page_size, admit, e, mn)
        for i in range(n):
            hit = ops.and_(admit, sel[i])
            w.computed[i] = ops.ite(hit, hit_len[i], w.computed[i])
            w.status[i] = ops.ite(hit, EXTEND, w.status[i])
            _serve(ops, cfg, w, i, hit, e)
            w.joined[i] = ops.or_(w.joined[i], hit)
            still_chunked[i] = ops.or_(still_chunked[i], ops.and_(hit, chunked))
            visited[i] = ops.or_(visited[i], ops.and_(active, sel[i]))
        w.served = ops.ite(admit, w.served + 1, w.served)
        # The verdict for the next candidate (P:830-849) or the refusal of this one.
        rem_total_pos = _reservation_below(ops, cfg, a.res, _mem_terms(cfg, w, a), w.ratio_n,
                                           w.ratio_b)
        no_token = ops.or_(ops.not_(mem_ok), ops.not_(rem_total_pos), a.avail - a.cur_off <= 0)
        other_next = ops.or_(other, a.rem_input <= 0,
                             ops.and_(cfg.enable_chunked_prefill, a.rem_chunk <= 0))
        w.full = ops.ite(ops.and_(active, no_token),
                         ops.or_(a.count > 0, running_bs > 0), w.full)  # S:4155-4160
        stopped = ops.name(ops.or_(stopped, ops.not_(active), no_token, other_next))
        visited = [ops.name(v) for v in visited]
        for i in range(n):
            still_chunked[i] = ops.name(still_chunked[i])
        a.name(ops)
        _checkpoint(ops, w)


def _mix(ops: Ops, cfg: SGLangRuleConfig, w: _Work, formed: Bool) -> Bool:
    """Mixed chunk (S:4251-4288): finished requests leave the running batch; if the
    decode fits after the prefill's allocation, every running request decodes one token
    inside the batch. Returns whether they did."""
    if not cfg.enable_mixed_chunk:
        return False
    nonempty = ops.or_(*[_in_running_batch(ops, s) for s in w.status])
    do = ops.and_(formed, nonempty)
    w.status = [ops.ite(ops.and_(do, s == STALE), FINISHED, s) for s in w.status]
    running = [s == RUNNING for s in w.status]
    live = ops.sum([ops.to_int(r) for r in running])
    mixed = ops.and_(do, live > 0, w.free >= _decode_need(ops, cfg, w, running))
    _serve_running(ops, cfg, w, mixed, [1] * len(w.status))
    return mixed


def _serve_running(ops: Ops, cfg: SGLangRuleConfig, w: _Work, do: Bool,
                   commits: Sequence[Int]) -> None:
    """One decode token to each running request, in running order, when `do`; under
    EAGLE the reserve allocated and `commits[i]` tokens committed."""
    n = len(w.status)
    visited: list[Bool] = [False] * n
    for _ in range(n):
        eligible = [ops.and_(w.status[i] == RUNNING, ops.not_(visited[i])) for i in range(n)]
        sel = select_min(ops, eligible, [(k,) for k in w.run_key])
        for i in range(n):
            if cfg.speculative:
                _serve_spec(ops, cfg, w, i, ops.and_(do, sel[i]), commits[i])
            else:
                _serve(ops, cfg, w, i, ops.and_(do, sel[i]), 1)
            visited[i] = ops.or_(visited[i], sel[i])
        w.served = ops.ite(ops.and_(do, ops.or_(*eligible)), w.served + 1, w.served)
        _checkpoint(ops, w)
        visited = [ops.name(v) for v in visited]


def _decode(ops: Ops, cfg: SGLangRuleConfig, specs: Sequence[SlotSpec], w: _Work,
            mnew: Sequence[Int], outputs: Sequence[Int], do: Bool,
            accepted: Sequence[Int]) -> Bool:
    """`update_running_batch` (S:4335-4428): filter finished requests, retract if the
    decode does not fit, else decay the ratio; decode the rest (under EAGLE each commits
    its accepted run, 1 + `accepted[i]`). Returns "decoded"."""
    n = len(specs)
    initial_bs = ops.sum([ops.to_int(_in_running_batch(ops, s)) for s in w.status])
    w.status = [ops.ite(ops.and_(do, s == STALE), FINISHED, s) for s in w.status]
    running = [s == RUNNING for s in w.status]
    live = ops.sum([ops.to_int(r) for r in running])
    w.full = ops.and_(w.full, ops.not_(ops.and_(do, live == 0)))
    active = ops.and_(do, live > 0)
    fits = w.free >= _decode_need(ops, cfg, w, running)
    retract = ops.and_(active, ops.not_(fits))
    _retract(ops, cfg, specs, w, outputs, retract)
    kept = [ops.and_(s == RUNNING, ops.not_(p)) for s, p in zip(w.status, w.preempted,
                                                                strict=True)]
    a = ops.sum([ops.ite(kept[i], outputs[i], 0) for i in range(n)])
    count = ops.sum([ops.to_int(k) for k in kept])
    e = ops.sum([ops.ite(kept[i], mnew[i], 0) for i in range(n)]) + 1
    a = a + cfg.retract_decode_steps * count
    _keep_retraction_order(ops, specs, w, outputs, kept, count, retract)
    capped = a >= e  # T:48
    est_n = ops.ite(capped, cfg.ratio_scale, a * cfg.ratio_scale)
    est_b = ops.ite(capped, 1, e)
    decayed = _decayed(ops, cfg, w.ratio_n, w.ratio_b)
    decay = ops.and_(active, fits)
    w.ratio_n = ops.ite(retract, est_n, ops.ite(decay, decayed, w.ratio_n))
    w.ratio_b = ops.ite(retract, est_b, w.ratio_b)
    w.full = ops.and_(w.full, ops.not_(ops.and_(do, count < initial_bs)))
    runs = [1 + a for a in accepted]
    _serve_running(ops, cfg, w, active, runs)
    if cfg.speculative:
        for i in range(n):
            row = ops.and_(active, w.status[i] == RUNNING, w.scheduled[i] > 0)
            w.run[i] = ops.ite(row, runs[i], w.run[i])
            w.spec_accepted[i] = ops.ite(row, accepted[i], w.spec_accepted[i])
    return ops.and_(active, count > 0)


def _keep_retraction_order(ops: Ops, specs: Sequence[SlotSpec], w: _Work,
                           outputs: Sequence[Int], kept: Sequence[Bool], count: Int,
                           do: Bool) -> None:
    """After a retraction the running batch is in retraction-sort order, most outputs
    first, then the shortest prompt, then the earlier in running order:
    `filter_batch(keep_indices=sorted_indices)` (B:3379, 3698). The survivors get fresh
    run keys in that order."""
    n = len(specs)
    new_keys = []
    for i in range(n):
        before = ops.sum([ops.to_int(ops.and_(kept[j], ops.or_(
            outputs[j] > outputs[i],
            ops.and_(outputs[j] == outputs[i], ops.or_(
                specs[j].prompt_len < specs[i].prompt_len,
                ops.and_(specs[j].prompt_len == specs[i].prompt_len,
                         w.run_key[j] < w.run_key[i]))))))
            for j in range(n) if j != i])
        new_keys.append(ops.ite(ops.and_(do, kept[i]), w.next_run_key + before, w.run_key[i]))
    w.run_key = new_keys
    w.next_run_key = ops.ite(do, w.next_run_key + count, w.next_run_key)


def _retract(ops: Ops, cfg: SGLangRuleConfig, specs: Sequence[SlotSpec], w: _Work,
             outputs: Sequence[Int], do: Bool) -> None:
    """`retract_decode` (B:3298-3385): pop the request with the fewest outputs, then the
    longest prompt, then the latest in running order, until the decode fits (at least
    one, keeping one); abort a last request that still does not fit. Retracted requests
    join the waiting list's tail in retraction order."""
    n = len(specs)
    first: Bool = True
    for _ in range(n):
        left = [ops.and_(w.status[i] == RUNNING, ops.not_(w.preempted[i])) for i in range(n)]
        count = ops.sum([ops.to_int(x) for x in left])
        fits = w.free >= _decode_need(ops, cfg, w, left)
        want = ops.and_(do, ops.or_(first, ops.not_(fits)), count > 1)
        victim = select_min(ops, left, [(outputs[i], -specs[i].prompt_len, -w.run_key[i])
                                         for i in range(n)])
        for i in range(n):
            hit = ops.and_(want, victim[i])
            w.free = ops.ite(hit, w.free + w.kv[i], w.free)
            w.kv[i] = ops.ite(hit, 0, w.kv[i])
            w.computed[i] = ops.ite(hit, 0, w.computed[i])
            if cfg.speculative:  # mark_kv_released (B:995-1000)
                w.allocated[i] = ops.ite(hit, 0, w.allocated[i])
            w.preempted[i] = ops.or_(w.preempted[i], hit)
            w.retracted[i] = ops.or_(w.retracted[i], hit)
            w.num_retractions[i] = ops.ite(hit, w.num_retractions[i] + 1,
                                           w.num_retractions[i])
            w.wait_key[i] = ops.ite(hit, w.wait_tail, w.wait_key[i])
        w.wait_tail = ops.ite(want, w.wait_tail + 1, w.wait_tail)
        first = ops.and_(first, ops.not_(do))
        _checkpoint(ops, w)
    left = [ops.and_(w.status[i] == RUNNING, ops.not_(w.preempted[i])) for i in range(n)]
    count = ops.sum([ops.to_int(x) for x in left])
    abort = ops.and_(do, count <= 1, ops.not_(w.free >= _decode_need(ops, cfg, w, left)))
    for i in range(n):
        hit = ops.and_(abort, left[i])
        w.free = ops.ite(hit, w.free + w.kv[i], w.free)
        w.kv[i] = ops.ite(hit, 0, w.kv[i])
        if cfg.speculative:
            w.allocated[i] = ops.ite(hit, 0, w.allocated[i])
        w.aborted[i] = ops.or_(w.aborted[i], hit)
        w.status[i] = ops.ite(hit, FINISHED, w.status[i])
    w.status = [ops.ite(p, WAITING, s) for s, p in zip(w.status, w.preempted, strict=True)]
    _checkpoint(ops, w)


def step(ops: Ops, cfg: SGLangRuleConfig, specs: Sequence[SlotSpec], state: SGLangState,
         eos: Sequence[Bool], spec: Sequence[tuple[Int, Int]] | None = None
         ) -> tuple[SGLangState, Step]:
    """One iteration: arrivals, prefill formation or else decode, a fake model output
    with the environment's EOS choices (`eos[i]` matters only if slot i samples), then
    the merge of the extend batch into the running batch (S:3785-3835). Under EAGLE,
    `spec[i]` = (drafts accepted, drafts proposed) is the verify's choice for slot i
    (matters only if it decodes; the proposed count is the verify width, fixed)."""
    n = len(specs)
    accepted: list[Int] = [0] * n if spec is None else [a for a, _ in spec]
    state = _arrive(ops, specs, state, state.step + 1)
    before = state.slots
    mnew = [ops.name(max_new_tokens(ops, cfg, s)) for s in specs]
    outputs = [s.outputs for s in before]
    fill = [spec.prompt_len + s.outputs for spec, s in zip(specs, before, strict=True)]
    w = _Work(
        status=[s.status for s in before], kv=[s.kv for s in before],
        computed=[s.computed for s in before], allocated=[s.allocated for s in before],
        run=[1] * n, spec_accepted=[0] * n, run_key=[s.run_key for s in before],
        wait_key=[s.wait_key for s in before], retracted=[s.retracted for s in before],
        num_retractions=[s.num_retractions for s in before], scheduled=[0] * n,
        serve_rank=[0] * n, in_batch=[False] * n, joined=[False] * n, preempted=[False] * n,
        aborted=[False] * n, free=state.free, full=state.batch_is_full,
        ratio_n=state.ratio_n, ratio_b=state.ratio_b, next_run_key=state.next_run_key,
        wait_tail=state.wait_tail, served=0)
    formed, still_chunked, adder = _prefill(ops, cfg, specs, w, mnew, fill, outputs)
    _checkpoint(ops, w)
    mixed = _mix(ops, cfg, w, formed)
    nonempty_r = ops.or_(*[_in_running_batch(ops, s) for s in w.status])
    decoded = _decode(ops, cfg, specs, w, mnew, outputs, ops.and_(ops.not_(formed),
                                                                   nonempty_r), accepted)
    idle = ops.and_(ops.not_(formed), ops.not_(decoded))
    # Under EAGLE a lone request can be aborted; an extend batch that stands apart still
    # lists it, so the loop is not idle (S:5168-5190).
    apart = (ops.not_(state.last_apart),) if cfg.speculative else ()
    fully_idle = ops.and_(idle, *[ops.and_(s != RUNNING, s != WAITING, s != CHUNKED)
                                  for s in w.status], *apart)
    w.ratio_n = ops.ite(fully_idle, cfg.ratio_init, w.ratio_n)  # S:5149
    w.ratio_b = ops.ite(fully_idle, 1, w.ratio_b)
    kind = ops.ite(formed, ops.ite(mixed, KIND_OTHER, KIND_PREFILL),
                   ops.ite(decoded, KIND_DECODE, KIND_OTHER))
    _checkpoint(ops, w)
    return _finish(ops, cfg, specs, state, before, w, mnew, fill, eos, formed, still_chunked,
                   kind, adder)


def _finish(ops: Ops, cfg: SGLangRuleConfig, specs: Sequence[SlotSpec], state: SGLangState,
            before: Sequence[SGLangSlot], w: _Work, mnew: Sequence[Int], fill: Sequence[Int],
            eos: Sequence[Bool], formed: Bool, still_chunked: Sequence[Bool], kind: Int,
            adder: _Adder) -> tuple[SGLangState, Step]:
    """Results (EOS first, then max_new_tokens; B:1913-1950), the merge of the extend
    batch (appended to running order, the latch cleared if it dropped anyone), the new
    state and the observables."""
    n = len(specs)
    # New run keys: the extend batch joins the running batch in batch order.
    run_key = list(w.run_key)
    next_key = w.next_run_key
    order_pos = w.serve_rank
    for rank in range(n):
        for i in range(n):
            joins = ops.and_(formed, w.in_batch[i], ops.not_(still_chunked[i]),
                             order_pos[i] == rank)
            run_key[i] = ops.ite(joins, next_key + rank, run_key[i])
    next_key = ops.ite(formed, next_key + w.served, next_key)
    free_end = w.free
    slots, obs = [], []
    dropped: Bool = False
    kept: Bool = False  # the extend batch keeps a request for the running batch
    running_left: Bool = False  # the running batch holds a request outside the batch
    for i, spec in enumerate(specs):
        sampled = ops.and_(w.in_batch[i], ops.not_(still_chunked[i]))
        out = (before[i].outputs + ops.ite(sampled, w.run[i], 0) if cfg.speculative
               else before[i].outputs + ops.to_int(sampled))
        # An EOS past max_new_tokens is a length finish (B:1901-1911, 1940-1942); only a
        # request clipped to 0 new tokens samples past it, which needs a page size > 1,
        # or an EAGLE run (its last token the EOS) crossing max_new_tokens.
        stop = (ops.and_(sampled, eos[i]) if cfg.page_size == 1 and not cfg.speculative
                else ops.and_(sampled, eos[i], out <= mnew[i]))
        length = ops.and_(sampled, out >= mnew[i])
        finished = ops.or_(stop, length)
        # A fully cached prompt's recomputed last token is the tree's after the prefill's
        # checkpoint (BR:394; mem_cache/unified_radix_cache.py:1080-1154).
        # With pages, only a prompt of whole pages is all in the tree (its last page).
        whole = (() if cfg.page_size == 1
                 else (_on_page_boundary(ops, spec.prompt_len, cfg.page_size),))
        dedup = ops.and_(cfg.radix_cache, sampled, ops.not_(finished),
                         before[i].outputs == 0, spec.cached_prefix_len >= spec.prompt_len,
                         *whole)
        returned = (ops.to_int(dedup) if cfg.page_size == 1
                    else cfg.page_size * ops.to_int(dedup))
        free_end = free_end + ops.ite(finished, w.kv[i], returned)
        extend_member = ops.and_(formed, w.in_batch[i])
        dropped = ops.or_(dropped, ops.and_(extend_member, ops.or_(finished, still_chunked[i])))
        kept = ops.or_(kept, ops.and_(extend_member, ops.not_(still_chunked[i]),
                                      ops.not_(finished)))
        running_left = ops.or_(running_left, ops.and_(_in_running_batch(ops, w.status[i]),
                                                      ops.not_(extend_member)))
        status = ops.ite(still_chunked[i], CHUNKED,
                         ops.ite(extend_member, ops.ite(finished, FINISHED, RUNNING),
                                 ops.ite(ops.and_(finished, w.status[i] == RUNNING), STALE,
                                         w.status[i])))
        running_after = ops.or_(ops.and_(extend_member, ops.not_(still_chunked[i])),
                                ops.and_(ops.not_(extend_member), w.status[i] == RUNNING))
        slots.append(SGLangSlot(
            status=status, kv=ops.ite(finished, 0, w.kv[i] - returned),
            computed=w.computed[i],
            allocated=ops.ite(finished, 0, w.allocated[i]) if cfg.speculative else 0,
            outputs=out, run_key=run_key[i], wait_key=w.wait_key[i],
            retracted=ops.and_(w.retracted[i], ops.not_(w.joined[i])),
            num_retractions=w.num_retractions[i]))
        obs.append(SlotObs(
            held=ops.or_(before[i].status == WAITING, before[i].status == RUNNING,
                         before[i].status == CHUNKED),
            was_running=before[i].status == RUNNING, was_waiting=before[i].status == WAITING,
            scheduled=w.scheduled[i], serve_rank=w.serve_rank[i],
            admitted=ops.and_(w.joined[i], ops.not_(before[i].retracted)),
            resumed=ops.and_(w.joined[i], before[i].retracted),
            preempted=w.preempted[i], finished=ops.or_(finished, w.aborted[i]),
            finished_stop=stop, sampled=sampled, num_tokens=fill[i],
            num_computed_tokens_before=before[i].computed,
            num_computed_tokens=w.computed[i], num_output_tokens=out, blocks=w.kv[i],
            num_preemptions=w.num_retractions[i], running_after=running_after,
            waiting_after=w.status[i] == WAITING, queue_key=w.wait_key[i],
            run_key=run_key[i], prompt_len=spec.prompt_len, max_tokens=mnew[i],
            priority=0, arrival_time=i,
            spec_scheduled=(ops.ite(ops.and_(kind == KIND_DECODE, sampled),
                                    cfg.num_spec_tokens, 0) if cfg.speculative else 0),
            spec_accepted=w.spec_accepted[i] if cfg.speculative else 0))
    # S:3824-3825 clear the latch when the merge drops a request; S:3830-3833 replace an
    # empty running batch by the extend batch, whose latch is False (B:2364).
    full = ops.and_(w.full, ops.not_(dropped), ops.not_(ops.and_(kept, ops.not_(running_left))))
    num_running = ops.sum([ops.to_int(o.running_after) for o in obs])
    num_running_end = ops.sum([ops.to_int(ops.and_(o.running_after, ops.not_(o.finished)))
                               for o in obs])
    # Under EAGLE: the merge appended a kept request to a non-empty running batch, so the
    # extend batch stays a batch of its own (S:3830-3833; see `step`'s idle check).
    last_apart = ops.and_(formed, kept, running_left) if cfg.speculative else False
    new_state = SGLangState(slots=tuple(slots), free=free_end, batch_is_full=full,
                            ratio_n=w.ratio_n, ratio_b=w.ratio_b, next_run_key=next_key,
                            wait_tail=w.wait_tail, step=state.step + 1,
                            last_apart=last_apart)
    total = ops.sum([o.scheduled for o in obs])
    observed = Step(step=state.step + 1, slots=tuple(obs), free_blocks=w.free,
                    free_blocks_end=free_end, token_budget_left=cfg.token_budget - total,
                    num_running=num_running, num_running_end=num_running_end,
                    any_preempted=ops.or_(*w.preempted), cfg=cfg, step_kind=kind)
    return new_state, observed
