"""vLLM V1 (v0.32.0) `Scheduler.schedule()` + `update_from_output()` as one branch-free step
over a fixed number of request slots, written once over Ops.

Scope: the synchronous scheduler or the AsyncScheduler, prefix caching on or off (the cache
is model/vllm/cache_rules.py, or counted by model/vllm/abstract_cache.py where the exact pool
is too large for z3; with the hit's cap switched off, the assertion a hit of every token
reaches, scheduler.py:1170), speculative decoding with either (drafts within both
budgets, draft slots, lookahead slots, uniform-decode padding and the assertion it can
reach, rollback of rejected drafts; the environment chooses the accepted drafts and, for
n-gram-like proposers under the synchronous scheduler, how many drafts are proposed), no
KV connector, multimodal or LoRA (the reference scheduler's scope). Ordered loops are folds
over slots: each iteration selects the slot with the smallest order key among those not
yet visited, so the Python control flow never depends on a state value.

Line numbers are relative to `vllm/` in v0.32.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from model.core.errors import InputError
from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import arrive_at_tail, pick, pick_flag, select_min
from model.core.types import SlotObs, SlotSpec, Step
from model.vllm import abstract_cache, cache_rules, connector_rules
from model.vllm.abstract_cache import CountWork, PoolChoice
from model.vllm.cache_rules import CacheWork
from model.vllm.connector_rules import KVInput, KVWork
from model.vllm.state import (
    ABSENT,
    FINISHED,
    PREEMPTED,
    REMOTE,
    RUNNING,
    WAITING,
    Drafts,
    InFlight,
    KVSlot,
    RuleConfig,
    SchedState,
    SlotState,
    kv_held,
)


@dataclass(slots=True)
class _Work:
    """Mutable scratch for one step (a fold accumulator, not a state type)."""

    status: list[Int]
    ncomp: list[Int]
    blocks: list[Int]
    run_key: list[Int]
    wait_key: list[Int]
    num_preemptions: list[Int]
    scheduled: list[Int]
    serve_rank: list[Int]
    preempted: list[Bool]
    visited: list[Bool]
    free: Int
    token_budget: Int
    input_budget: Int
    next_run_key: Int
    wait_head: Int
    served: Int
    any_preempted: Bool
    prefix_hit: list[Int]
    cache: CacheWork | CountWork | None = None  # with prefix caching (exact or counted)
    # With async scheduling: output placeholders, in-flight and stale tokens per slot.
    placeholders: list[Int] | None = None
    in_flight: list[Int] | None = None
    stale: list[Int] | None = None
    # With speculative decoding: drafts carried, drafts scheduled (trimmed), padded
    # admissions, last chunk a prefill chunk (state), and the step's flags (S:852, 1372).
    drafts: list[Int] | None = None
    spec_scheduled: list[Int] | None = None
    padded: list[Bool] | None = None
    prefill_chunk: list[Bool] | None = None
    prefill_scheduled: Bool = False
    ran: Bool = False
    # The engine reached an assertion in this step (scheduler.py:1372, 1170); with a prefix
    # hit that may cover every token, the slot that reached 1170 (`_waiting_loop`).
    crash: Bool = False
    zero_tokens: list[Bool] | None = None
    dead: Bool = False  # the engine died in an earlier step
    # With sliding-window KV cache groups: per slot, each group's blocks nulled.
    nulled: list[list[Int]] | None = None
    # With a KV connector: its per-slot state and the step's environment.
    kv: KVWork | None = None


def num_tokens(spec: SlotSpec, s: SlotState) -> Int:
    """Prompt plus outputs so far (request.py:294-296)."""
    return spec.prompt_len + s.num_output_tokens


def running_tokens(ops: Ops, cfg: RuleConfig, remaining: Int, num_computed_tokens: Int,
                   threshold: Int, token_budget: Int, input_budget: Int) -> Int:
    """Tokens the running loop offers one running request (scheduler.py:703-721, 744-753):
    what it lacks (its drafts included), capped by the long-prefill threshold, the token
    budget and the input budget less the draft slots, and `max_model_len -
    num_computed_tokens - 1` (one sampled token per step), clamped at 0 (589)."""
    n = ops.ite(ops.and_(threshold > 0, threshold < remaining), threshold, remaining)
    n = ops.min(n, ops.min(token_budget, input_budget - cfg.draft_slots))
    n = ops.min(n, cfg.max_model_len - num_computed_tokens - 1)
    return n if not cfg.num_spec_tokens else ops.max(n, 0)


def blocks_needed(ops: Ops, cfg: RuleConfig, tokens: Int, held: Int) -> Int:
    """New blocks to hold `tokens` (capped at max_model_len) given `held` blocks
    (kv_cache_manager.py:541-571, single_type_kv_cache_manager.py:213-235)."""
    return ops.max(ops.cdiv(ops.min(tokens, cfg.max_model_len), cfg.block_size) - held, 0)





def _kv_need(ops: Ops, cfg: RuleConfig, tokens: Int, length: Int) -> tuple[Int, Int]:
    """(blocks the pool gives, entries the attention tables grow by) for `tokens` slots of
    a request whose attention tables have `length` entries (kv_cache_coordinator.py:
    190-263). Each attention group (full or sliding window) grows its table to
    cdiv(tokens, block_size) entries (single_type_kv_cache_manager.py:226-262: a running
    request's table is never shorter than its skipped blocks, a waiting one has nothing
    computed without prefix caching); each Mamba group takes its 1 + k state blocks at
    the first allocation (1690-1697: cdiv(tokens + k * max_model_len, max_model_len))."""
    grow = blocks_needed(ops, cfg, tokens, length)
    if not cfg.kv_groups:
        return grow, grow
    attention = cfg.kv_full + len(cfg.kv_windows)
    need: Int = 0 if attention == 0 else grow * attention
    if cfg.kv_mamba:
        need = need + ops.ite(length == 0, cfg.kv_mamba * cfg.kv_mamba_blocks, 0)
    return need, grow


def _kv_full_need(ops: Ops, cfg: RuleConfig, total: Int) -> Int:
    """The full-sequence admission check's blocks for a waiting request of `total` tokens
    (kv_cache_manager.py:522-539 with apply_admission_cap): full attention
    cdiv(total, block_size), a sliding window at most its cap
    (single_type_kv_cache_manager.py:216-230), Mamba its state blocks."""
    req = blocks_needed(ops, cfg, total, 0)
    need: Int = 0 if cfg.kv_full == 0 else req * cfg.kv_full
    for cap in cfg.kv_window_caps:
        need = need + ops.min(req, cap)
    return need + cfg.kv_mamba * cfg.kv_mamba_blocks


def _remove_skipped(ops: Ops, cfg: RuleConfig, w: _Work, sel: Sequence[Bool], do: Bool,
                    ncomp: Int) -> None:
    """Before a running request's allocation, each sliding-window group frees the blocks
    wholly before its window on the processed tokens (in-flight ones excluded), replacing
    them by the null block, whether or not the allocation then succeeds
    (kv_cache_manager.py:546-558; single_type_kv_cache_manager.py:638-710, 1135-1170:
    skipped tokens num_computed - window + 1). The freed blocks are a prefix of the table,
    so a count per group says which."""
    if w.nulled is None:
        return
    in_flight = 0 if w.in_flight is None else pick(ops, sel, w.in_flight)
    processed = ops.max(0, ops.min(ncomp, cfg.max_model_len) - in_flight)
    length = pick(ops, sel, w.blocks)
    for j, window in enumerate(cfg.kv_windows):
        now = pick(ops, sel, [x[j] for x in w.nulled])
        reach = ops.min(ops.floordiv(ops.max(0, processed - window + 1), cfg.block_size),
                        length)
        later = ops.max(now, reach)
        w.free = w.free + ops.ite(do, later - now, 0)
        for i, s in enumerate(sel):
            w.nulled[i][j] = ops.ite(ops.and_(do, s), later, w.nulled[i][j])


def _held(ops: Ops, cfg: RuleConfig, w: _Work, i: int) -> Int:
    """The real blocks slot i holds over every KV cache group (its table's blocks with one
    full-attention group)."""
    return kv_held(ops, cfg, w.blocks[i], () if w.nulled is None else w.nulled[i])


def _threshold(ops: Ops, cfg: RuleConfig, num_held: Int, num_slots: int) -> Int:
    """The effective long-prefill threshold: 0 when at most one request exists
    (scheduler.py:643-649; before 0.31.0 the configured one for any count); floored at a
    fair share when adaptive (650-655)."""
    if cfg.threshold_off_when_alone:
        thr = ops.ite(num_held > 1, cfg.long_prefill_token_threshold, 0)
    else:
        thr = cfg.long_prefill_token_threshold
    if not cfg.long_prefill_token_threshold_adaptive:
        return thr
    share: Int = 0
    for count in range(2, num_slots + 1):
        share = ops.ite(num_held == count, ops.floordiv(cfg.max_num_batched_tokens, count), share)
    return ops.ite(thr > 0, ops.max(thr, share), thr)


def _arrive(ops: Ops, specs: Sequence[SlotSpec], state: SchedState, t: int) -> SchedState:
    """Arrivals join the waiting tail in slot order (scheduler.py:2616-2634;
    request_queue.py:75-90)."""
    return arrive_at_tail(ops, specs, state, t, ABSENT, WAITING)


def _victim(ops: Ops, cfg: RuleConfig, w: _Work, specs: Sequence[SlotSpec]) -> list[Bool]:
    """The preemption victim among running slots: FCFS `running[-1]`, PRIORITY the first
    maximum of (priority, arrival_time) (scheduler.py:796-802)."""
    in_running = [s == RUNNING for s in w.status]
    if cfg.policy_priority:
        keys = [(-specs[i].priority, -i) for i in range(len(specs))]
    elif cfg.victim_latest:
        keys = [(-k,) for k in w.run_key]
    else:  # ablated: running[0], the oldest
        keys = [(k,) for k in w.run_key]
    return select_min(ops, in_running, keys)


def _preempt(ops: Ops, cfg: RuleConfig, w: _Work, victim: Sequence[Bool], do: Bool) -> None:
    """`_preempt_request` (scheduler.py:1571-1614) on the selected victim, when `do`: free
    its blocks, num_computed_tokens = 0, status PREEMPTED, prepend to waiting. Under
    PRIORITY a victim already scheduled in this step gives its tokens back (814-832)."""
    for i, v in enumerate(victim):
        hit = ops.and_(do, v)
        if w.cache is None:
            w.free = w.free + ops.ite(hit, _held(ops, cfg, w, i), 0)
        else:  # a block another request still holds stays held
            w.free = w.free + _release(ops, cfg, w, i, hit)
        if cfg.policy_priority or not cfg.victim_latest:  # a victim already served
            was_served = w.scheduled[i] > 0
            w.token_budget = w.token_budget + ops.ite(hit, w.scheduled[i], 0)
            w.input_budget = w.input_budget + ops.ite(
                hit, w.scheduled[i] + ops.ite(was_served, cfg.draft_slots, 0), 0)  # 814-821
            w.scheduled[i] = ops.ite(hit, 0, w.scheduled[i])
            if w.spec_scheduled is not None:
                w.spec_scheduled[i] = ops.ite(hit, 0, w.spec_scheduled[i])
        if w.drafts is not None:  # 1594-1595
            w.drafts[i] = ops.ite(hit, 0, w.drafts[i])
        w.blocks[i] = ops.ite(hit, 0, w.blocks[i])
        if w.nulled is not None:
            w.nulled[i] = [ops.ite(hit, 0, n) for n in w.nulled[i]]
        w.status[i] = ops.ite(hit, PREEMPTED, w.status[i])
        w.ncomp[i] = ops.ite(hit, 0, w.ncomp[i])
        w.num_preemptions[i] = ops.ite(hit, w.num_preemptions[i] + 1, w.num_preemptions[i])
        w.preempted[i] = ops.or_(w.preempted[i], hit)
        w.wait_key[i] = ops.ite(hit, w.wait_head, w.wait_key[i])
        if w.kv is not None:  # 1591: no longer an in-flight prefill
            w.kv.inflight[i] = ops.ite(hit, False, w.kv.inflight[i])
        if w.placeholders is not None and w.in_flight is not None and w.stale is not None:
            # 1597-1607: what is in flight is delivered later as stale output.
            w.stale[i] = ops.ite(hit, w.in_flight[i], w.stale[i])
            w.placeholders[i] = ops.ite(hit, 0, w.placeholders[i])
    w.wait_head = ops.ite(do, w.wait_head - 1, w.wait_head)
    w.any_preempted = ops.or_(w.any_preempted, do)


def _checkpoint(ops: Ops, w: _Work) -> None:
    """Name every accumulator (identity under ConcreteOps; flat terms for the solver)."""
    for name in ("status", "ncomp", "blocks", "run_key", "wait_key", "num_preemptions",
                 "scheduled", "serve_rank", "preempted", "visited"):
        setattr(w, name, [ops.name(v) for v in getattr(w, name)])
    for name in ("free", "token_budget", "input_budget", "next_run_key", "wait_head",
                 "served", "any_preempted"):
        setattr(w, name, ops.name(getattr(w, name)))
    w.prefix_hit = [ops.name(v) for v in w.prefix_hit]
    if w.cache is not None:
        w.cache.checkpoint(ops)
    if w.placeholders is not None:
        for name in ("placeholders", "in_flight", "stale"):
            setattr(w, name, [ops.name(v) for v in getattr(w, name)])
    if w.drafts is not None:
        for name in ("drafts", "spec_scheduled", "padded"):
            setattr(w, name, [ops.name(v) for v in getattr(w, name)])
        w.prefill_scheduled, w.ran = ops.name(w.prefill_scheduled), ops.name(w.ran)
    if w.zero_tokens is not None:
        w.zero_tokens = [ops.name(v) for v in w.zero_tokens]
    if w.nulled is not None:
        w.nulled = [[ops.name(v) for v in x] for x in w.nulled]
    if w.drafts is not None or w.zero_tokens is not None:
        w.crash = ops.name(w.crash)
    if w.kv is not None:
        w.kv.checkpoint(ops)


def _serve(ops: Ops, cfg: RuleConfig, w: _Work, sel: Sequence[Bool], do: Bool, n: Int,
           need: Int, added: Int | None = None) -> None:
    """Record `n` tokens for the selected slot, when `do` (scheduler.py:851-858 and
    1343-1369): `need` blocks leave the free queue and `added` (default `need`; with a
    prefix hit, the hit blocks too) join its block table."""
    added = need if added is None else added
    for i, s in enumerate(sel):
        hit = ops.and_(do, s)
        w.scheduled[i] = ops.ite(hit, n, w.scheduled[i])
        w.blocks[i] = ops.ite(hit, w.blocks[i] + added, w.blocks[i])
        w.serve_rank[i] = ops.ite(hit, w.served, w.serve_rank[i])
    w.free = ops.ite(do, w.free - need, w.free)
    w.token_budget = ops.ite(do, w.token_budget - n, w.token_budget)
    w.input_budget = ops.ite(do, w.input_budget - n - cfg.draft_slots, w.input_budget)
    w.served = ops.ite(do, w.served + 1, w.served)


def _running_loop(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], w: _Work,
                  ntok: Sequence[Int], thr: Int) -> None:
    """The RUNNING loop in list order (scheduler.py:657-887). A request offered 0 tokens is
    skipped (755-773); an allocation failure preempts victims until the request fits or
    preempts itself (777-844), and then the loop ends (846-848). Before 0.28.0
    (`victim_reindex` off, 0.27.1 scheduler.py:595-613) each victim passed over earlier in
    the step that a served request preempted makes the loop pass over one more request
    after it (its index was not moved back)."""
    n_slots = len(specs)
    stopped: Bool = False
    passes: Int = 0  # requests the loop's index still jumps over (victim_reindex off)
    for _ in range(n_slots):
        eligible = [ops.and_(w.status[i] == RUNNING, ops.not_(w.visited[i]))
                    for i in range(n_slots)]
        sel = select_min(ops, eligible, [(k,) for k in w.run_key])
        active = ops.and_(ops.not_(stopped), w.token_budget > 0, ops.or_(*eligible),
                          w.input_budget > cfg.draft_slots)  # 659, 661
        passing = False if cfg.victim_reindex else ops.and_(active, passes > 0)
        ncomp = pick(ops, sel, w.ncomp)
        ph = 0 if w.placeholders is None else pick(ops, sel, w.placeholders)
        drafts = 0 if w.drafts is None else pick(ops, sel, w.drafts)
        n = running_tokens(ops, cfg, pick(ops, sel, ntok) + drafts + ph - ncomp, ncomp, thr,
                           w.token_budget, w.input_budget)
        wants = ops.and_(active, ops.not_(passing), n > 0)
        if w.placeholders is not None:
            # 664-677: async, the output in flight is the last one max_tokens allows.
            last = pick(ops, sel, [sp.prompt_len + sp.max_tokens for sp in specs])
            wants = ops.and_(wants, ops.not_(ops.and_(ph > 0, ncomp + 2 - ph >= last)))
        done: Bool = False
        fits: Bool = False
        passed_victims: Int = 0
        _remove_skipped(ops, cfg, w, sel, wants, ncomp)
        for _ in range(n_slots):
            # A RUNNING request pays no watermark and no full-sequence check (509-516).
            need, _ = _kv_need(ops, cfg, ncomp + n + cfg.num_lookahead_tokens,
                               pick(ops, sel, w.blocks))
            trying = ops.and_(wants, ops.not_(done))
            ok = ops.and_(trying, need <= w.free)
            fits = ops.or_(fits, ok)
            done = ops.or_(done, ok)
            victim = _victim(ops, cfg, w, specs)
            evict = ops.and_(trying, ops.not_(ok))
            if not cfg.victim_reindex:  # a victim visited in the step but not served
                ahead = [ops.and_(v, w.visited[i], w.scheduled[i] == 0)
                         for i, v in enumerate(victim)]
                passed_victims = ops.name(passed_victims
                                          + ops.ite(ops.and_(evict, ops.or_(*ahead)), 1, 0))
            _preempt(ops, cfg, w, victim, evict)
            hits_self = [ops.and_(v, s) for v, s in zip(victim, sel, strict=True)]
            self_preempted = ops.and_(evict, ops.or_(*hits_self))
            done = ops.name(ops.or_(done, self_preempted))
            fits = ops.name(fits)
            _checkpoint(ops, w)
        held = pick(ops, sel, w.blocks)
        need, grow = _kv_need(ops, cfg, ncomp + n + cfg.num_lookahead_tokens, held)
        _serve(ops, cfg, w, sel, fits, n, need, grow if cfg.kv_groups else None)
        if w.drafts is not None:
            _schedule_drafts(ops, w, sel, fits, n + ncomp - pick(ops, sel, ntok) - ph, drafts)
        if w.cache is not None:
            _take(ops, cfg, w, sel, held, need, fits)
            _cache(ops, cfg, w, specs, sel, ops.min(ops.min(ncomp, cfg.max_model_len) + n,
                                                    pick(ops, sel, ntok)), fits)
        stopped = ops.or_(stopped, ops.and_(wants, ops.not_(fits)),
                          ops.not_(active))
        for i in range(n_slots):
            w.visited[i] = ops.or_(w.visited[i], ops.and_(active, sel[i]))
        stopped = ops.name(stopped)
        if not cfg.victim_reindex:
            passes = ops.name(passes - ops.ite(passing, 1, 0)
                              + ops.ite(fits, passed_victims, 0))
        _checkpoint(ops, w)


def _schedule_drafts(ops: Ops, w: _Work, sel: Sequence[Bool], do: Bool, room: Int,
                     drafts: Int) -> None:
    """A running request scheduled with drafts: the drafts within its tokens are scheduled
    (trimmed when the budget, threshold or max_model_len cut it), and all are cleared
    (scheduler.py:861-876); its last chunk's kind feeds the padding rule (852)."""
    assert w.drafts is not None and w.spec_scheduled is not None and w.prefill_chunk is not None
    for i, s in enumerate(sel):
        hit = ops.and_(do, s)
        w.spec_scheduled[i] = ops.ite(ops.and_(hit, drafts > 0),
                                      ops.max(0, ops.min(drafts, room)), w.spec_scheduled[i])
        w.drafts[i] = ops.ite(hit, 0, w.drafts[i])
    chunk = pick_flag(ops, sel, w.prefill_chunk)
    w.prefill_scheduled = ops.or_(w.prefill_scheduled, ops.and_(do, chunk))
    w.ran = ops.or_(w.ran, do)


def _waiting_loop(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], w: _Work,
                  ntok: Sequence[Int], thr: Int) -> None:
    """The WAITING loop (scheduler.py:900-1395), entered only when nothing was preempted in
    this step. Every failure ends it: strict head-of-line (1160-1167, 1217-1219, 1275-1282).
    With prefix caching off a waiting request has num_computed_tokens 0, so it asks for its
    whole sequence, prompt plus outputs (1129)."""
    n_slots = len(specs)
    stopped: Bool = w.any_preempted if cfg.preemption_gate else False
    for _ in range(n_slots):
        in_waiting = [ops.or_(w.status[i] == WAITING, w.status[i] == PREEMPTED)
                      for i in range(n_slots)]
        if w.stale is not None:  # 934-939: skipped while its stale output is in flight
            in_waiting = [ops.and_(q, w.stale[i] == 0) for i, q in enumerate(in_waiting)]
        if cfg.policy_priority:
            keys = [(specs[i].priority, i) for i in range(n_slots)]
        else:
            keys = [(k,) for k in w.wait_key]
        sel = select_min(ops, in_waiting, keys)
        num_running = ops.sum([ops.to_int(s == RUNNING) for s in w.status])
        active = ops.and_(ops.not_(stopped), w.token_budget > 0,
                          w.input_budget > cfg.draft_slots,  # 918-919
                          ops.or_(*in_waiting), num_running < cfg.max_num_active_reqs)
        total = pick(ops, sel, ntok)
        # With prefix caching the request starts from its longest cached prefix (960-967,
        # 1045-1047); a hit block nobody holds leaves the free queue like a new one.
        hit = _lookup(ops, cfg, w, specs, sel, total)
        hit_blocks = 0 if hit is None else hit.blocks
        evictable = 0 if hit is None else hit.evictable
        computed = hit_blocks * cfg.block_size
        req_budget = ops.min(w.token_budget, w.input_budget - cfg.draft_slots)  # 1118
        lacks = total - computed  # 1129
        pad, pad_stops = _padding(ops, cfg, w, lacks, computed, req_budget, thr)
        k = cfg.num_spec_tokens
        wanted = ops.ite(pad, 1 + k, lacks) if k else lacks
        n = ops.ite(ops.and_(thr > 0, thr < wanted), thr, wanted)
        too_long = ops.and_(ops.not_(cfg.enable_chunked_prefill), n > req_budget)
        n = ops.min(n, req_budget)
        # Watermark only while `running` is non-empty (kv_cache_manager.py:509-516; 1272).
        wm = ops.ite(num_running > 0, cfg.watermark_blocks, 0)
        if cfg.kv_groups:  # no prefix caching: no hit, nothing evictable
            full_need = _kv_full_need(ops, cfg, total)
            need, fresh = _kv_need(ops, cfg, n + cfg.num_lookahead_tokens, 0)
        else:
            full_need = blocks_needed(ops, cfg, total, hit_blocks) + evictable
            fresh = blocks_needed(ops, cfg, computed + n + cfg.num_lookahead_tokens,
                                  hit_blocks)
            need = fresh + evictable
        full_ok = ops.or_(ops.not_(cfg.scheduler_reserve_full_isl), full_need + wm <= w.free)
        ok = ops.and_(active, ops.not_(pad_stops), ops.not_(too_long), full_ok,
                      need + wm <= w.free)
        if w.zero_tokens is not None:
            # 1170 asserts num_new_tokens > 0, before any allocation (1259-1282). The budget
            # left is >= 1 (912, 918-919), so only a hit of every token leaves 0, which the
            # cap of kv_cache_manager.py:289-300 rules out; without it the engine dies here
            # with the request at the queue's head. (0 tokens pad nothing and are not too
            # long for the budget, so 1149-1167 let it through.)
            zero = ops.and_(active, n == 0)
            ok = ops.and_(ok, ops.not_(zero))
            w.zero_tokens = [ops.or_(z, ops.and_(zero, s))
                             for z, s in zip(w.zero_tokens, sel, strict=True)]
            w.crash = ops.or_(w.crash, zero)
        _serve(ops, cfg, w, sel, ok, n, need, fresh + hit_blocks)
        if w.spec_scheduled is not None and w.padded is not None:  # 1371-1375
            padded = ops.and_(ok, pad)
            for i in range(n_slots):
                w.spec_scheduled[i] = ops.ite(ops.and_(padded, sel[i]), k, w.spec_scheduled[i])
                w.padded[i] = ops.or_(w.padded[i], ops.and_(padded, sel[i]))
            # 1372: the threshold cut a padded request below 1 + k; the engine dies here.
            # Before 0.29.0 (pad_assertion off) it runs on with its k placeholder drafts.
            if cfg.pad_assertion:
                w.crash = ops.or_(w.crash, ops.and_(padded, n != 1 + k))
        if hit is not None:
            if isinstance(w.cache, CountWork):
                assert isinstance(hit, abstract_cache.CountHit)
                abstract_cache.adopt(ops, w.cache, sel, hit, ok)
            else:
                assert w.cache is not None and isinstance(hit, cache_rules.Hit)
                cache_rules.adopt(ops, w.cache, sel, hit, ok)
            _take(ops, cfg, w, sel, hit_blocks, fresh, ok)
            _cache(ops, cfg, w, specs, sel, ops.min(computed + n, total), ok)
        for i in range(n_slots):
            hit_i = ops.and_(ok, sel[i])
            w.status[i] = ops.ite(hit_i, RUNNING, w.status[i])
            w.run_key[i] = ops.ite(hit_i, w.next_run_key, w.run_key[i])
            if hit is not None:
                w.ncomp[i] = ops.ite(hit_i, computed, w.ncomp[i])
                w.prefix_hit[i] = ops.ite(hit_i, computed, w.prefix_hit[i])
        w.next_run_key = ops.ite(ok, w.next_run_key + 1, w.next_run_key)
        stopped = ops.name(ops.or_(stopped, ops.not_(ok), w.crash))
        _checkpoint(ops, w)


def _waiting_loop_kv(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], w: _Work,
                     ntok: Sequence[Int], thr: Int) -> None:
    """The WAITING loop with a KV connector (scheduler.py:900-1395, the reference's
    `_admit_waiting`; model/vllm/connector_rules.py): the requests in kv_holding_waiting
    first (913-917); one whose load runs is skipped (929-932), one whose load was reported
    is promoted back to WAITING (PREEMPTED if preempted before), its blocks freed after a
    failed load (policy "recompute"), a load of every token cut one short (3123-3193); a
    request with nothing computed asks the connector (970-1042): a synchronous hit is
    admitted with its tokens computed, an asynchronous one gets its blocks with nothing to
    compute, keeping the in-flight prefills' remaining blocks free (1109-1112, 1242-1251;
    kv_cache_manager.py:573-579), turns WAITING_FOR_REMOTE_KVS and is set aside
    (1320-1341). Every other failure ends the loop, as in `_waiting_loop`; a synchronous
    hit of every token reaches 1170's assertion (nothing caps it)."""
    kv = w.kv
    assert kv is not None and w.zero_tokens is not None
    n_slots = len(specs)
    stopped: Bool = w.any_preempted if cfg.preemption_gate else False
    skipped: list[Bool] = [False] * n_slots  # set aside in this loop (904-909)
    for _ in range(n_slots):
        queued = [ops.and_(ops.not_(skipped[i]), ops.or_(
            w.status[i] == WAITING, w.status[i] == PREEMPTED, w.status[i] == REMOTE))
            for i in range(n_slots)]
        first = [ops.ite(kv.holding[i], 0, 1) for i in range(n_slots)]
        if cfg.policy_priority:  # both queues are heaps on (priority, arrival)
            keys = [(first[i], specs[i].priority, i) for i in range(n_slots)]
        else:
            keys = [(first[i], ops.ite(kv.holding[i], kv.hold_key[i], w.wait_key[i]))
                    for i in range(n_slots)]
        sel = select_min(ops, queued, keys)
        num_running = ops.sum([ops.to_int(s == RUNNING) for s in w.status])
        active = ops.and_(ops.not_(stopped), w.token_budget > 0,
                          w.input_budget > cfg.draft_slots,  # 918-919
                          ops.or_(*queued), num_running < cfg.max_num_active_reqs)
        remote = ops.and_(active, pick(ops, sel, w.status) == REMOTE)
        waits = ops.and_(remote, ops.not_(pick_flag(ops, sel, kv.recved)))  # 929-932
        promote = ops.and_(remote, pick_flag(ops, sel, kv.recved))
        for i in range(n_slots):  # 3123-3173, 3175-3193
            p_i = ops.and_(promote, sel[i])
            freed = ops.and_(p_i, kv.failed[i])  # 3131-3147: a failed load's blocks go back
            w.free = w.free + ops.ite(freed, w.blocks[i], 0)
            w.blocks[i] = ops.ite(freed, 0, w.blocks[i])
            kv.failed[i] = ops.and_(kv.failed[i], ops.not_(p_i))
            kv.recved[i] = ops.and_(kv.recved[i], ops.not_(p_i))
            w.ncomp[i] = ops.ite(ops.and_(p_i, w.ncomp[i] == ntok[i]), ntok[i] - 1,
                                 w.ncomp[i])  # 3171-3172
            w.status[i] = ops.ite(p_i, ops.ite(w.num_preemptions[i] > 0, PREEMPTED, WAITING),
                                  w.status[i])
        tried = ops.and_(active, ops.not_(waits))
        local = pick(ops, sel, w.ncomp)
        held = pick(ops, sel, w.blocks)
        total = pick(ops, sel, ntok)
        # 960-1042: only a request with nothing computed asks; the connector answers with
        # the hit beyond the (block-aligned, here empty) local hit (D:501-532).
        asks = local == 0
        external = ops.ite(asks, ops.max(pick(ops, sel, [h.tokens for h in kv.hits]), 0), 0)
        is_async = ops.and_(asks, pick_flag(ops, sel, [h.load_async for h in kv.hits]),
                            external > 0)
        computed = local + external
        req_budget = ops.min(w.token_budget, w.input_budget - cfg.draft_slots)  # 1118
        lacks = total - computed  # 1129
        n = ops.ite(ops.and_(thr > 0, thr < lacks), thr, lacks)  # 1155-1156
        too_long = ops.and_(ops.not_(is_async), ops.not_(cfg.enable_chunked_prefill),
                            n > req_budget)  # 1160-1167
        n = ops.ite(is_async, 0, ops.min(n, req_budget))  # 1109-1112, 1169
        zero = ops.and_(tried, ops.not_(too_long), ops.not_(is_async), n <= 0)  # 1170
        wm = ops.ite(num_running > 0, cfg.watermark_blocks, 0)  # K:509-516; 1272
        full_need = blocks_needed(ops, cfg, total, held)  # K:522-539
        full_ok = ops.or_(ops.not_(cfg.scheduler_reserve_full_isl), full_need + wm <= w.free)
        need = blocks_needed(ops, cfg, ops.min(computed, cfg.max_model_len) + n, held)
        reserved = ops.ite(is_async, connector_rules.reserved_blocks(
            ops, cfg, kv, w.blocks, ntok), 0)
        ok = ops.and_(tried, ops.not_(too_long), ops.not_(zero), full_ok,
                      need + wm <= w.free - reserved)  # K:573-579
        w.zero_tokens = [ops.or_(z, ops.and_(zero, s))
                         for z, s in zip(w.zero_tokens, sel, strict=True)]
        w.crash = ops.or_(w.crash, zero)
        admit = ops.and_(ok, ops.not_(is_async))
        load = ops.and_(ok, is_async)
        _serve(ops, cfg, w, sel, admit, n, need)
        w.free = ops.ite(load, w.free - need, w.free)
        from_holding = pick_flag(ops, sel, kv.holding)
        for i in range(n_slots):
            a_i, l_i = ops.and_(admit, sel[i]), ops.and_(load, sel[i])
            w.blocks[i] = ops.ite(l_i, w.blocks[i] + need, w.blocks[i])
            w.status[i] = ops.ite(a_i, RUNNING, ops.ite(l_i, REMOTE, w.status[i]))
            w.run_key[i] = ops.ite(a_i, w.next_run_key, w.run_key[i])
            w.ncomp[i] = ops.ite(ops.or_(a_i, l_i), computed, w.ncomp[i])
            kv.inflight[i] = ops.or_(kv.inflight[i], l_i,
                                     ops.and_(a_i, computed + n < total))  # 1377-1378
            kv.loading[i] = ops.or_(kv.loading[i], l_i)  # the worker starts it
            kv.hold_key[i] = ops.ite(ops.and_(l_i, ops.not_(from_holding)), kv.next_hold,
                                     kv.hold_key[i])
            kv.holding[i] = ops.ite(a_i, False, ops.or_(kv.holding[i], l_i))  # 1343-1345
            skipped[i] = ops.or_(skipped[i], ops.and_(sel[i], ops.or_(waits, load)))
        kv.next_hold = ops.ite(ops.and_(load, ops.not_(from_holding)), kv.next_hold + 1,
                               kv.next_hold)
        w.next_run_key = ops.ite(admit, w.next_run_key + 1, w.next_run_key)
        stopped = ops.name(ops.or_(stopped, ops.not_(active), ops.and_(tried, ops.not_(ok)),
                                   w.crash))
        skipped = [ops.name(x) for x in skipped]
        _checkpoint(ops, w)


def _padding(ops: Ops, cfg: RuleConfig, w: _Work, lacks: Int, computed: Int,
             req_budget: Int, thr: Int) -> tuple[Bool, Bool]:
    """Uniform-decode padding (scheduler.py:1131-1153): a waiting request with one token
    left, admitted beside scheduled running requests and no prefill chunk (or after a
    prefix hit), gets 1+k tokens if they fit before max_model_len; when 1+k exceed the
    budget left the loop stops instead. The rule switches' forms: VllmRules. Returns
    (padded, stops)."""
    k = cfg.num_spec_tokens
    if not k:
        return False, False
    # Before 0.30.0 (pad_after_prefix_hit off, 0.27.1 scheduler.py:884-888) only beside
    # scheduled running requests.
    beside = ops.or_(w.ran, computed > 0) if cfg.pad_after_prefix_hit else w.ran
    pad = ops.and_(lacks == 1, ops.not_(w.prefill_scheduled), beside)
    if cfg.threshold_skips_padding:  # vllm#54028's fix
        pad = ops.and_(pad, ops.not_(ops.and_(thr > 0, thr < 1 + k)))
    if cfg.spec_pad_room:
        pad = ops.and_(pad, computed + 1 + k + 1 <= cfg.max_model_len)
        stops = ops.and_(pad, 1 + k > req_budget)
    else:  # 0.28.0 scheduler.py:943-950: no room or no budget stops admission
        stops = ops.and_(pad, ops.or_(1 + k > req_budget,
                                      computed + 1 + k > cfg.max_model_len))
    return ops.and_(pad, ops.not_(stops)), stops


def step(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], state: SchedState,
         eos: Sequence[Bool], spec: Sequence[tuple[Int, Int]] | None = None,
         pool: Sequence[Sequence[Int]] | None = None,
         kv: KVInput | None = None) -> tuple[SchedState, Step]:
    """One engine step: arrivals, `schedule()`, then `update_from_output()` with the
    environment's EOS choices (`eos[i]` matters only if slot i samples a token) and, with
    speculative decoding, `spec[i]` = (drafts accepted, drafts proposed for the next step):
    the first is cut to the drafts scheduled, the second read only for n-gram-like
    proposers (others propose k). With the prefix cache counted (`cfg.abstract_cache`),
    `pool[i]` is slot i's choice of hits and freed blocks (model/vllm/abstract_cache.py).
    With a KV connector, `kv` is the step's connector environment (each slot's hit and
    load report, model/vllm/connector_rules.py; None: no hits, no reports)."""
    n_slots = len(specs)
    if (why := connector_rules.scope_error(cfg)) is not None:
        raise InputError(why)
    t = state.step + 1
    state = _arrive(ops, specs, state, t)
    before = state.slots
    ntok = [num_tokens(spec, s) for spec, s in zip(specs, before, strict=True)]
    held = [ops.and_(s.status != ABSENT, s.status != FINISHED) for s in before]
    w = _Work(
        status=[s.status for s in before], ncomp=[s.num_computed_tokens for s in before],
        blocks=[s.blocks for s in before], run_key=[s.run_key for s in before],
        wait_key=[s.wait_key for s in before],
        num_preemptions=[s.num_preemptions for s in before],
        scheduled=[0] * n_slots, serve_rank=[0] * n_slots, preempted=[False] * n_slots,
        visited=[False] * n_slots, free=state.free_blocks, token_budget=cfg.token_budget,
        # Before 0.28.0 one budget: a second one equal to it never binds on its own.
        input_budget=(cfg.max_num_batched_tokens if cfg.separate_input_budget
                      else cfg.token_budget), next_run_key=state.next_run_key,
        wait_head=state.wait_head, served=0, any_preempted=False, prefix_hit=[0] * n_slots,
        cache=_cache_work(ops, cfg, state, pool))
    if cfg.num_spec_tokens:
        w.drafts = [s.drafts[0].count for s in before]
        w.prefill_chunk = [s.drafts[0].prefill_chunk for s in before]
        w.spec_scheduled, w.padded = [0] * n_slots, [False] * n_slots
    if (cfg.prefix_caching and not cfg.cap_prefix_hit) or cfg.kv_connector:
        w.zero_tokens = [False] * n_slots
    if cfg.kv_connector:
        w.kv = KVWork.of(state, kv)
    if cfg.can_crash:
        # A dead engine schedules nothing (the reference: every later step is the crash).
        w.token_budget = ops.ite(state.crashed, 0, w.token_budget)
        w.dead = state.crashed
    if cfg.kv_windows:
        w.nulled = [list(s.nulled) for s in before]
    if cfg.async_scheduling:
        w.placeholders = [s.in_flight[0].placeholders for s in before]
        w.in_flight = [s.in_flight[0].tokens for s in before]
        w.stale = [s.in_flight[0].stale for s in before]
    thr = _threshold(ops, cfg, ops.sum([ops.to_int(h) for h in held]), n_slots)
    _running_loop(ops, cfg, specs, w, ntok, thr)
    if cfg.kv_connector:
        _waiting_loop_kv(ops, cfg, specs, w, ntok, thr)
    else:
        _waiting_loop(ops, cfg, specs, w, ntok, thr)
    if cfg.async_scheduling:
        return _update_async(ops, cfg, specs, state, before, ntok, held, w, eos, spec)
    return _update(ops, cfg, specs, state, before, ntok, held, w, eos, spec)


def _queue_key(cfg: RuleConfig, specs: Sequence[SlotSpec], w: _Work, i: int,
               n_slots: int) -> Int:
    """A key whose order is the waiting queue's: the deque position under FCFS, and
    (priority, arrival_time) under PRIORITY (request_queue.py:131-197)."""
    if cfg.policy_priority:
        return specs[i].priority * n_slots + i
    return w.wait_key[i]


def _update(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], state: SchedState,
            before: Sequence[SlotState], ntok: Sequence[Int], held: Sequence[Bool],
            w: _Work, eos: Sequence[Bool], spec: Sequence[tuple[Int, Int]] | None = None
            ) -> tuple[SchedState, Step]:
    """Advance num_computed_tokens at schedule time (scheduler.py:1616-1642), then apply the
    model output: a request samples when it has no prompt left (a partial prefill chunk
    samples nothing), and `check_stop` decides EOS, then length (sched/utils.py:98-119).
    Finished requests release their blocks (scheduler.py:2228-2230)."""
    slots: list[SlotState] = []
    obs: list[SlotObs] = []
    free_end = w.free
    shared, cached, evictable = _cache_counts(ops, w)
    ends = []
    n_slots = len(specs)
    for i, slot_spec in enumerate(specs):
        ncomp = w.ncomp[i] + w.scheduled[i]
        sampled = ops.and_(w.scheduled[i] > 0, ncomp >= ntok[i])
        accepted, drafts = _spec_choice(ops, cfg, w, i, spec)
        out_before = before[i].num_output_tokens
        # 2493-2510: 1 + accepted tokens, check_stop after each, EOS the last one.
        room = ops.min(slot_spec.max_tokens - out_before,
                       cfg.max_model_len - slot_spec.prompt_len - out_before)
        tokens = ops.min(1 + accepted, room) if cfg.num_spec_tokens else 1
        outputs = out_before + ops.ite(sampled, tokens, 0)
        cut = room < 1 + accepted if cfg.num_spec_tokens else False
        stop = ops.and_(sampled, eos[i], ops.not_(cut))
        length = ops.and_(sampled, ops.not_(stop),
                          ops.or_(slot_spec.prompt_len + outputs >= cfg.max_model_len,
                                  outputs >= slot_spec.max_tokens))
        finished = ops.or_(stop, length)
        kv_slot: tuple[KVSlot, ...] = ()
        reset: Bool = False
        finish_rank: Int | None = None
        if w.kv is not None:  # the connector's part of the output (S:2306-2330)
            error, reset, after = connector_rules.after_update(
                ops, cfg, w.kv, i, w.scheduled[i], ncomp < ntok[i])
            # An error is listed after the outputs' finishes, in slot order.
            finish_rank = ops.ite(error, n_slots + i, w.serve_rank[i])
            finished = ops.or_(finished, error)
            kv_slot = (KVSlot(**{f.name: ops.ite(finished, getattr(KVSlot(), f.name),
                                                 getattr(after, f.name))
                                 for f in fields(KVSlot)}),)
        ends.append(finished)
        if w.cache is None:
            free_end = free_end + ops.ite(finished, _held(ops, cfg, w, i), 0)
        status_after_sched = w.status[i]
        slots.append(SlotState(
            status=ops.ite(finished, FINISHED, status_after_sched),
            num_computed_tokens=ops.ite(reset, 0, _rolled_back(ops, w, i, ncomp, sampled,
                                                               accepted)),
            num_output_tokens=outputs, blocks=ops.ite(finished, 0, w.blocks[i]),
            run_key=w.run_key[i], wait_key=w.wait_key[i], num_preemptions=w.num_preemptions[i],
            table=_table(w, i), num_cached=w.cache.num_cached[i] if w.cache else 0,
            drafts=_next_drafts(ops, w, i, ncomp < ntok[i], drafts),
            nulled=_nulled_after(ops, w, i, finished), kv=kv_slot))
        obs.append(_slot_obs(ops, cfg, specs, i, held, before, ntok, w, finished, stop,
                             sampled, ncomp, outputs, finish_rank, accepted=accepted))
    if w.cache is not None:
        free_end, slots = _release_finished(ops, cfg, w, ends, free_end, slots)
    return _step_of(ops, cfg, state, w, slots, obs, free_end, shared, cached, evictable)


def _nulled_after(ops: Ops, w: _Work, i: int, finished: Bool) -> tuple[Int, ...]:
    """Slot i's nulled counts after the step (a finished request freed its tables)."""
    if w.nulled is None:
        return ()
    return tuple(ops.ite(finished, 0, n) for n in w.nulled[i])


def _spec_choice(ops: Ops, cfg: RuleConfig, w: _Work, i: int,
                 spec: Sequence[tuple[Int, Int]] | None) -> tuple[Int, Int]:
    """Slot i's accepted drafts (at most those scheduled; none of padding placeholders)
    and the drafts proposed for its next step (k unless the proposer may find fewer)."""
    k = cfg.num_spec_tokens
    if not k or w.spec_scheduled is None or w.padded is None:
        return 0, 0
    chosen, proposed = spec[i] if spec is not None else (0, k)
    accepted = ops.ite(w.padded[i], 0, ops.min(ops.max(chosen, 0), w.spec_scheduled[i]))
    proposed = ops.min(ops.max(proposed, 0), k) if cfg.drafts_vary else k
    return accepted, proposed


def _rolled_back(ops: Ops, w: _Work, i: int, ncomp: Int, sampled: Bool, accepted: Int) -> Int:
    """num_computed_tokens after the rejected drafts of a sampled output roll back
    (scheduler.py:2113-2126)."""
    if w.spec_scheduled is None:
        return ncomp
    return ops.ite(sampled, ncomp - (w.spec_scheduled[i] - accepted), ncomp)


def _next_drafts(ops: Ops, w: _Work, i: int, prefill_chunk: Bool,
                 proposed: Int) -> tuple[Drafts, ...]:
    """The drafts slot i carries into the next step: a request scheduled now gets the
    drafter's proposals, or none after a prefill chunk (core.py:689-696, S:2550-2569);
    others keep theirs (cleared at preemption)."""
    if w.drafts is None or w.prefill_chunk is None:
        return ()
    scheduled = w.scheduled[i] > 0
    return (Drafts(count=ops.ite(scheduled, ops.ite(prefill_chunk, 0, proposed), w.drafts[i]),
                   prefill_chunk=ops.ite(scheduled, prefill_chunk, w.prefill_chunk[i])),)


def _slot_obs(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], i: int,
              held: Sequence[Bool], before: Sequence[SlotState], ntok: Sequence[Int],
              w: _Work, finished: Bool, stop: Bool, sampled: Bool, ncomp: Int,
              outputs: Int, finish_rank: Int | None = None, accepted: Int = 0) -> SlotObs:
    """Slot i's observables of the step (`finish_rank` defaults to this step's service
    order: a synchronous step processes the outputs of what it scheduled)."""
    spec, status_after_sched = specs[i], w.status[i]
    joined = status_after_sched == RUNNING
    scheduled, preempted = w.scheduled[i], w.preempted[i]
    if cfg.can_crash:
        # A step in which the engine dies (or is dead) is observed as the reference records
        # it: nothing scheduled, admitted, preempted or finished, whatever the rules did
        # before the assertion (they only flag it; the state is not read again, as every
        # property but two is vacuous from then on). At scheduler.py:1170 the request that
        # reached it is observed as the admission (or resumption) the engine asserted
        # against, with 0 tokens: `admitted_with_tokens` is that assertion.
        dead = ops.or_(w.dead, w.crash)
        zero = w.zero_tokens[i] if w.zero_tokens is not None else False
        joined = ops.ite(dead, zero, joined)
        scheduled = ops.ite(dead, 0, scheduled)
        preempted, finished, stop = (ops.and_(ops.not_(dead), b)
                                     for b in (preempted, finished, stop))
    was, computed_before = before[i].status, before[i].num_computed_tokens
    new, old = was == WAITING, was == PREEMPTED
    waiting_after = ops.or_(status_after_sched == WAITING, status_after_sched == PREEMPTED)
    was_waiting = ops.or_(new, old)
    queue_key = _queue_key(cfg, specs, w, i, n_slots=len(specs))
    if w.kv is not None:
        # A request back from its load joins as WAITING, or PREEMPTED if it was preempted
        # before (S:3186-3190); it starts from what it loaded, cut one short of its tokens
        # (S:3171-3172), not from the load's count. Queued requests holding KV blocks
        # come first (S:913-917).
        remote = was == REMOTE
        new = ops.or_(new, ops.and_(remote, before[i].num_preemptions == 0))
        old = ops.or_(old, ops.and_(remote, before[i].num_preemptions > 0))
        computed_before = ops.ite(ops.and_(computed_before > 0, status_after_sched == RUNNING,
                                           ops.or_(new, old)), w.ncomp[i], computed_before)
        waiting_after = ops.or_(waiting_after, status_after_sched == REMOTE)
        was_waiting = ops.or_(was_waiting, remote)
        queue_key = ops.ite(w.kv.holding[i], w.kv.hold_key[i] - connector_rules.HOLDING_FIRST
                            if not cfg.policy_priority else
                            queue_key - connector_rules.HOLDING_FIRST, queue_key)
    return SlotObs(
        held=held[i], was_running=was == RUNNING,
        was_waiting=was_waiting,
        scheduled=scheduled, serve_rank=w.serve_rank[i],
        admitted=ops.and_(new, joined),
        resumed=ops.and_(old, joined),
        preempted=preempted, finished=finished, finished_stop=stop, sampled=sampled,
        num_tokens=ntok[i], num_computed_tokens_before=computed_before,
        num_computed_tokens=ncomp, num_output_tokens=outputs, blocks=_held(ops, cfg, w, i),
        num_preemptions=w.num_preemptions[i], running_after=status_after_sched == RUNNING,
        waiting_after=waiting_after,
        queue_key=queue_key, run_key=w.run_key[i],
        prompt_len=spec.prompt_len, max_tokens=spec.max_tokens,
        priority=spec.priority, arrival_time=i, prefix_hit=w.prefix_hit[i],
        finish_rank=w.serve_rank[i] if finish_rank is None else finish_rank,
        spec_scheduled=0 if w.spec_scheduled is None else w.spec_scheduled[i],
        spec_accepted=accepted)


def _step_of(ops: Ops, cfg: RuleConfig, state: SchedState, w: _Work, slots: list[SlotState],
             obs: list[SlotObs], free_end: Int, shared: Int, cached: Int,
             evictable: Int) -> tuple[SchedState, Step]:
    """The next state and the step's observables."""
    num_running = ops.sum([ops.to_int(s == RUNNING) for s in w.status])
    num_running_end = ops.sum([ops.to_int(s.status == RUNNING) for s in slots])
    c = w.cache if isinstance(w.cache, CacheWork) else None
    crashed = ops.or_(state.crashed, w.crash) if cfg.can_crash else False
    new_state = SchedState(slots=tuple(slots), free_blocks=free_end,
                           next_run_key=w.next_run_key, wait_head=w.wait_head,
                           wait_tail=state.wait_tail, step=state.step + 1,
                           pool=c.pool() if c else (), queue_tail=c.queue_tail if c else 0,
                           next_cached_at=c.next_cached_at if c else 0, crashed=crashed,
                           kv=(w.kv.next_hold,) if w.kv is not None else ())
    observed = Step(step=state.step + 1, slots=tuple(obs), free_blocks=w.free,
                    free_blocks_end=free_end, token_budget_left=w.token_budget,
                    num_running=num_running, num_running_end=num_running_end,
                    any_preempted=w.any_preempted, cfg=cfg, shared_blocks=shared,
                    cached_blocks=cached, evictable_blocks=evictable, assertion=crashed)
    return new_state, observed


def _cache_counts(ops: Ops, w: _Work) -> tuple[Int, Int, Int]:
    """Shared block references, cached and evictable blocks, read right after scheduling
    (as free_blocks is); all 0 without prefix caching."""
    if w.cache is None:
        return 0, 0, 0
    c = w.cache
    if isinstance(c, CountWork):
        # Counted, the cache's contents are not known: no property reads these two.
        return c.shared(), 0, 0
    return (ops.sum(w.blocks) - c.in_use(ops), ops.sum([ops.to_int(h != 0) for h in c.hash]),
            ops.sum([ops.to_int(ops.and_(r == 0, h != 0))
                     for r, h in zip(c.ref, c.hash, strict=True)]))


def _update_async(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], state: SchedState,
                  before: Sequence[SlotState], ntok: Sequence[Int], held: Sequence[Bool],
                  w: _Work, eos: Sequence[Bool],
                  choices: Sequence[tuple[Int, Int]] | None = None
                  ) -> tuple[SchedState, Step]:
    """The AsyncScheduler's step after schedule(): num_computed_tokens advances and every
    request whose chunk finishes what it lacks gets an output placeholder
    (scheduler.py:1616-1642, async_scheduler.py:25-56); then the previous schedule's
    output is delivered (core.py:698-792): a request that finished meanwhile gets
    nothing, a preempted one its stale token; a token frees a placeholder unless stale,
    and `check_stop` decides (async_scheduler.py:58-78, scheduler.py:2080-2300). This
    schedule's output waits for the next step; `eos[i]` is its token's EOS choice.

    With speculative decoding (A:25-56, S:2108-2128): a request that samples gets 1 + its
    drafts scheduled as placeholders and k placeholder drafts for the next step; the output
    delivered is 1 + the drafts accepted (chosen with that schedule), and unless stale the
    rejected ones roll back num_computed_tokens and the placeholders."""
    assert w.placeholders is not None and w.in_flight is not None and w.stale is not None
    shared, cached, evictable = _cache_counts(ops, w)
    free_end = w.free
    slots: list[SlotState] = []
    obs: list[SlotObs] = []
    delivered, got_token, ends = [], [], []
    for i, spec in enumerate(specs):
        f = before[i].in_flight[0]
        scheduled = w.scheduled[i] > 0
        ncomp = w.ncomp[i] + w.scheduled[i]
        chunk = ncomp < ntok[i] + w.placeholders[i]
        sampled = ops.and_(scheduled, ops.not_(chunk))
        alive = ops.and_(w.status[i] != ABSENT, w.status[i] != FINISHED)
        deliver = ops.and_(alive, f.pending_tokens > 0)
        stale = ops.and_(deliver, w.stale[i] > 0)
        got = ops.and_(deliver, f.pending_sample)
        out_before = before[i].num_output_tokens
        k = cfg.num_spec_tokens
        room = ops.min(spec.max_tokens - out_before,
                       cfg.max_model_len - spec.prompt_len - out_before)
        tokens = ops.min(1 + f.pending_accepted, room) if k else 1
        cut = room < 1 + f.pending_accepted if k else False
        outputs = out_before + ops.ite(got, tokens, 0)
        stop = ops.and_(got, f.pending_eos, ops.not_(cut))
        length = ops.and_(got, ops.not_(stop),
                          ops.or_(spec.prompt_len + outputs >= cfg.max_model_len,
                                  outputs >= spec.max_tokens))
        finished = ops.or_(stop, length)
        fresh = ops.and_(got, ops.not_(stale))
        drafted = 0 if w.spec_scheduled is None else w.spec_scheduled[i]
        rejected = ops.ite(fresh, f.pending_spec - f.pending_accepted, 0) if k else 0
        placeholders = (w.placeholders[i] + ops.ite(sampled, 1 + drafted, 0)
                        - rejected - ops.ite(fresh, tokens, 0))
        accepted, _ = _spec_choice(ops, cfg, w, i, choices)
        delivered.append(deliver)
        got_token.append(ops.and_(got, w.status[i] == RUNNING))
        ends.append(finished)
        if w.cache is None:
            free_end = free_end + ops.ite(finished, _held(ops, cfg, w, i), 0)
        flight = InFlight(
            placeholders=placeholders,
            tokens=w.in_flight[i] + w.scheduled[i] - ops.ite(deliver, f.pending_tokens, 0),
            stale=w.stale[i] - ops.ite(stale, f.pending_tokens, 0),
            prefill_chunk=ops.ite(scheduled, chunk, f.prefill_chunk),
            pending_tokens=w.scheduled[i], pending_sample=sampled,
            pending_eos=ops.and_(sampled, eos[i]), pending_rank=w.serve_rank[i],
            pending_spec=drafted, pending_accepted=accepted)
        slots.append(SlotState(
            status=ops.ite(finished, FINISHED, w.status[i]),
            num_computed_tokens=ncomp - rejected,
            num_output_tokens=outputs, blocks=ops.ite(finished, 0, w.blocks[i]),
            run_key=w.run_key[i], wait_key=w.wait_key[i], num_preemptions=w.num_preemptions[i],
            table=_table(w, i), num_cached=w.cache.num_cached[i] if w.cache else 0,
            in_flight=(flight,),
            drafts=_async_drafts(ops, cfg, w, i, scheduled, chunk, sampled),
            nulled=_nulled_after(ops, w, i, finished)))
        obs.append(_slot_obs(ops, cfg, specs, i, held, before, ntok, w, finished, stop,
                             sampled, ncomp, outputs, f.pending_rank, accepted=accepted))
    if w.cache is not None:
        free_end, slots = _deliver_to_cache(ops, cfg, specs, w, before, delivered, got_token,
                                            ends, free_end, slots)
    return _step_of(ops, cfg, state, w, slots, obs, free_end, shared, cached, evictable)


def _async_drafts(ops: Ops, cfg: RuleConfig, w: _Work, i: int, scheduled: Bool, chunk: Bool,
                  sampled: Bool) -> tuple[Drafts, ...]:
    """Under async the scheduler itself gives a request that samples k placeholder drafts
    for its next step (async_scheduler.py:50); a prefill chunk keeps what it had."""
    if w.drafts is None or w.prefill_chunk is None:
        return ()
    return (Drafts(count=ops.ite(sampled, cfg.num_spec_tokens, w.drafts[i]),
                   prefill_chunk=ops.ite(scheduled, chunk, w.prefill_chunk[i])),)


def _deliver_to_cache(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], w: _Work,
                      before: Sequence[SlotState], delivered: Sequence[Bool],
                      got_token: Sequence[Bool], finished: Sequence[Bool], free: Int,
                      slots: list[SlotState]) -> tuple[Int, list[SlotState]]:
    """With prefix caching, the delivered outputs in the previous schedule's order: a
    running request's new token caches its computed blocks (async_scheduler.py:73-77), a
    finished request frees its blocks (scheduler.py:2220-2240)."""
    assert w.cache is not None
    n_slots = len(specs)
    if isinstance(w.cache, CountWork):  # counted, the order of the calls does not matter
        for i in range(n_slots):
            _cache(ops, cfg, w, specs, [j == i for j in range(n_slots)],
                   slots[i].num_computed_tokens - slots[i].in_flight[0].placeholders,
                   ops.and_(delivered[i], got_token[i]))
        ends = [ops.and_(d, f) for d, f in zip(delivered, finished, strict=True)]
        return free + abstract_cache.release_finished(ops, w.cache, w.blocks, ends), [
            replace(s, num_cached=w.cache.num_cached[i]) for i, s in enumerate(slots)]
    for rank in range(n_slots):
        for i in range(n_slots):
            now = ops.and_(delivered[i], before[i].in_flight[0].pending_rank == rank)
            placeholders = slots[i].in_flight[0].placeholders
            _cache(ops, cfg, w, specs, [j == i for j in range(n_slots)],
                   slots[i].num_computed_tokens - placeholders, ops.and_(now, got_token[i]))
            free = free + _release(ops, cfg, w, i, ops.and_(now, finished[i]))
    return free, [replace(s, table=_table(w, i), num_cached=w.cache.num_cached[i])
                  for i, s in enumerate(slots)]


def _release_finished(ops: Ops, cfg: RuleConfig, w: _Work, finished: Sequence[Bool],
                      free: Int, slots: list[SlotState]) -> tuple[Int, list[SlotState]]:
    """Finished requests free their blocks in the order they were served, which orders
    the cached blocks they leave in the free queue (scheduler.py:2220-2240)."""
    assert w.cache is not None
    n_slots = len(finished)
    if isinstance(w.cache, CountWork):  # counted, the order of the releases does not matter
        return free + abstract_cache.release_finished(ops, w.cache, w.blocks, finished), [
            replace(s, num_cached=w.cache.num_cached[i]) for i, s in enumerate(slots)]
    for rank in range(n_slots):
        for i in range(n_slots):
            do = ops.and_(finished[i], w.serve_rank[i] == rank)
            free = free + _release(ops, cfg, w, i, do)
    return free, [replace(s, table=_table(w, i), num_cached=w.cache.num_cached[i])
                  for i, s in enumerate(slots)]


# The prefix cache's calls, on the exact pool (cache_rules) or counted (abstract_cache).

def _cache_work(ops: Ops, cfg: RuleConfig, state: SchedState,
                pool: Sequence[Sequence[Int]] | None) -> CacheWork | CountWork | None:
    if not cfg.prefix_caching:
        return None
    if cfg.abstract_cache:
        choices = None if pool is None else [PoolChoice(*c) for c in pool]
        return CountWork.of(state, cfg, ops, choices)
    return CacheWork.of(state)


def _lookup(ops: Ops, cfg: RuleConfig, w: _Work, specs: Sequence[SlotSpec],
            sel: Sequence[Bool], total: Int) -> cache_rules.Hit | abstract_cache.CountHit | None:
    if isinstance(w.cache, CountWork):
        return abstract_cache.lookup(ops, cfg, w.cache, specs, sel, total, w.blocks)
    if w.cache is None:
        return None
    return cache_rules.lookup(ops, cfg, w.cache, specs, sel, total)


def _take(ops: Ops, cfg: RuleConfig, w: _Work, sel: Sequence[Bool], start: Int, count: Int,
          do: Bool) -> None:
    if isinstance(w.cache, CountWork):
        abstract_cache.take(ops, w.cache, count, do)
    elif w.cache is not None:
        cache_rules.take(ops, cfg, w.cache, sel, start, count, do)


def _cache(ops: Ops, cfg: RuleConfig, w: _Work, specs: Sequence[SlotSpec],
           sel: Sequence[Bool], num_tokens: Int, do: Bool) -> None:
    if isinstance(w.cache, CountWork):
        abstract_cache.cache(ops, cfg, w.cache, sel, num_tokens, do)
    elif w.cache is not None:
        cache_rules.cache(ops, cfg, w.cache, specs, sel, num_tokens, do)


def _release(ops: Ops, cfg: RuleConfig, w: _Work, i: int, do: Bool) -> Int:
    if isinstance(w.cache, CountWork):
        return abstract_cache.release(ops, w.cache, i, w.blocks[i], do)
    assert w.cache is not None
    return cache_rules.release(ops, cfg, w.cache, i, w.blocks[i], do)


def _table(w: _Work, i: int) -> tuple[Int, ...]:
    """Slot i's block table after the step (none without the exact pool)."""
    return tuple(w.cache.table[i]) if isinstance(w.cache, CacheWork) else ()
