"""The strengthening invariant of vLLM V1's reachable rule states, over Ops.

k-induction (checker/methods/induction.py) proves it inductive first, then uses it to
prove step properties for all request lengths. It says: statuses and their counters are
consistent (a WAITING request has computed nothing, a PREEMPTED one has lost its blocks,
request.py:370-386 and scheduler.py:1571-1614), a RUNNING request holds exactly
cdiv(num_computed_tokens, block_size) blocks (kv_cache_manager.py:541-571 with prefix
caching off; at least that many with speculative decoding), the pool is conserved, queue
keys are distinct, and `running` stays within max_num_active_reqs (scheduler.py:129-136).
On the AsyncScheduler it also says what is in flight: a slot that is not running has
nothing in flight, and a held request's in-flight tokens are exactly the last schedule's,
none stale; a running request's num_computed_tokens counts its output placeholders as
tokens. With speculative decoding on the AsyncScheduler, a running request has 1 + d
placeholders exactly when its last chunk sampled with d drafts, has then computed every
known token but the last, and the output in flight accepts at most the drafts scheduled.
With prefix caching the pool replaces the conservation of blocks (a shared block is held
by several requests and counted once): a block's ref_cnt is the number of table positions
naming it, the free count is the blocks nobody holds, and the free queue's and the
cache's orders are total; on the AsyncScheduler the cache also reads the placeholders and
the delivery order. `facts` names each conjunct, so a proof that fails says which breaks.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Int, Ops
from model.core.types import SlotSpec
from model.vllm.state import (
    ABSENT,
    FINISHED,
    PREEMPTED,
    RUNNING,
    WAITING,
    RuleConfig,
    SchedState,
    SlotState,
    kv_held,
)

# The largest prefix-cache pool the invariant's proof is taken to (in blocks): tiny_cached's
# 4-block pool proves in about 150 s; the 8-block pools of the speculative cached configs
# did not finish in 15 minutes, and a serve-sized pool is far beyond. k-induction leaves a
# larger pool to BMC and the explorer rather than spending their time limit.
MAX_PROVED_POOL = 4


def covers(cfg: RuleConfig) -> bool:
    """The invariant's proof is within reach on this rule config: no prefix cache, or a
    pool of at most MAX_PROVED_POOL blocks (its pool facts are of the exact pool, not the
    counted one of model/vllm/abstract_cache.py). Not with a KV connector: its facts say
    nothing of a load's blocks or of WAITING_FOR_REMOTE_KVS."""
    if cfg.kv_connector:
        return False
    if cfg.abstract_cache:  # the counted pool's facts (`_counted`) are of every size
        return True
    return not cfg.prefix_caching or cfg.pool_blocks <= MAX_PROVED_POOL


# Pools up to this size prove in seconds (a 3-block pool in about 11 s); tiny_cached's 4
# blocks take minutes.
MAX_QUICK_POOL = 3


def quick(cfg: RuleConfig) -> bool:
    """The invariant's proof on this rule config takes seconds, not minutes."""
    if cfg.kv_connector:  # not described (`covers`): nothing to prove
        return False
    return not cfg.prefix_caching or cfg.abstract_cache or cfg.pool_blocks <= MAX_QUICK_POOL


Fact = tuple[str, Bool]
"""One conjunct of the invariant, named for the report of a proof that fails."""


def well_formed(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], s: SchedState) -> Bool:
    """Every reachable state satisfies this (see the module docstring)."""
    return ops.and_(*[fact for _, fact in facts(ops, cfg, specs, s)])


def facts(ops: Ops, cfg: RuleConfig, specs: Sequence[SlotSpec], s: SchedState) -> list[Fact]:
    """The invariant's conjuncts, each with its name (r0, r1, ... are the slots)."""
    out: list[Fact] = [("counters", ops.and_(s.free_blocks >= 0, s.step >= 0,
                                             s.wait_head < s.wait_tail))]
    for i, (spec, x) in enumerate(zip(specs, s.slots, strict=True)):
        out += [(f"r{i}: {name}", fact) for name, fact in _slot_facts(ops, cfg, spec, s, x)]
    if cfg.abstract_cache:
        out += _counted(ops, cfg, s)
    elif cfg.prefix_caching:
        out += _pool(ops, cfg, s)
    else:
        out.append(("free + held blocks = usable blocks", s.free_blocks + ops.sum(
            [kv_held(ops, cfg, x.blocks, x.nulled) for x in s.slots]) == cfg.usable_blocks))
        # Sliding-window groups: the nulled head of a table is within it.
        out += [(f"r{i}: nulled within the table", ops.and_(*[
            ops.and_(n >= 0, n <= x.blocks) for n in x.nulled]))
            for i, x in enumerate(s.slots) if x.nulled]
    n = len(specs)
    waiting = [ops.or_(x.status == WAITING, x.status == PREEMPTED) for x in s.slots]
    running = [x.status == RUNNING for x in s.slots]
    for i in range(n):
        for j in range(i + 1, n):
            a, b = s.slots[i], s.slots[j]
            out.append((f"r{i}, r{j}: distinct queue keys", ops.and_(
                ops.implies(ops.and_(running[i], running[j]), a.run_key != b.run_key),
                ops.implies(ops.and_(waiting[i], waiting[j]), a.wait_key != b.wait_key))))
    out.append(("running within max_num_active_reqs",
                ops.sum([ops.to_int(r) for r in running]) <= cfg.max_num_active_reqs))
    return out


def _slot_facts(ops: Ops, cfg: RuleConfig, spec: SlotSpec, s: SchedState, x: SlotState
                ) -> list[Fact]:
    """One slot's conjuncts: its status's counters, what it has in flight, its blocks."""
    ntok = spec.prompt_len + x.num_output_tokens
    live = [x.num_output_tokens >= 0, x.num_output_tokens < spec.max_tokens,
            ntok < cfg.max_model_len]
    queued = [x.wait_key > s.wait_head, x.wait_key < s.wait_tail]
    out: list[Fact] = [
        ("status", ops.and_(x.status >= ABSENT, x.status <= FINISHED,
                            x.num_preemptions >= 0)),
        ("ABSENT", ops.implies(x.status == ABSENT, ops.and_(
            x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
            x.num_preemptions == 0,
            ops.or_(spec.arrival_step == 0, spec.arrival_step > s.step)))),
        ("arrived", ops.implies(x.status != ABSENT, ops.and_(spec.arrival_step >= 1,
                                                             spec.arrival_step <= s.step))),
        ("WAITING", ops.implies(x.status == WAITING, ops.and_(
            x.num_computed_tokens == 0, x.num_output_tokens == 0, x.blocks == 0,
            x.num_preemptions == 0, *queued))),
        ("PREEMPTED", ops.implies(x.status == PREEMPTED, ops.and_(
            x.num_computed_tokens == 0, x.blocks == 0, x.num_preemptions >= 1,
            *queued, *live))),
        ("RUNNING", ops.implies(x.status == RUNNING, ops.and_(
            x.num_computed_tokens >= 1,
            x.num_computed_tokens <= _last_computed(ntok, x),
            _blocks_held(ops, cfg, x), x.run_key < s.next_run_key, *live))),
        ("FINISHED", ops.implies(x.status == FINISHED, x.blocks == 0)),
    ]
    if cfg.async_scheduling:
        out += _in_flight(ops, cfg, ntok, x)
    if cfg.abstract_cache:
        out.append(("cached blocks >= 0", x.num_cached >= 0))
    elif cfg.prefix_caching:
        # Not needed for the proof, but the solver's: tiny_cached's proof took 191 s
        # without these facts and 146 s with them.
        out += _block_table(ops, cfg, x)
        if cfg.async_scheduling:
            out.append(("in flight: delivery order",
                        _delivery_order(ops, len(s.slots), x)))
    return out


def _counted(ops: Ops, cfg: RuleConfig, s: SchedState) -> list[Fact]:
    """The counted pool (model/vllm/abstract_cache.py): the blocks in use (those not free)
    are at most the table positions naming them, since each names one
    (block_pool.py:752-805: a block is in use while a table holds it)."""
    in_use = cfg.usable_blocks - s.free_blocks
    return [("in use <= table positions",
             ops.and_(in_use >= 0, in_use <= ops.sum([x.blocks for x in s.slots])))]


def _blocks_held(ops: Ops, cfg: RuleConfig, x: SlotState) -> Bool:
    """A running request's blocks: exactly cdiv(num_computed_tokens, block_size)
    (kv_cache_manager.py:541-571); with speculative decoding at least that many, the
    lookahead slots (541-544) and the rolled-back drafts' slots (scheduler.py:2113-2126)
    keeping theirs."""
    computed = ops.cdiv(x.num_computed_tokens, cfg.block_size)
    if not cfg.num_spec_tokens:
        return x.blocks == computed
    return x.blocks >= computed


def _last_computed(ntok: Int, x: SlotState) -> Int:
    """The most tokens a running request can have computed: all but its last token, and
    under async its placeholders count as tokens (scheduler.py:703-721 offers
    num_tokens + num_output_placeholders - num_computed_tokens)."""
    if not x.in_flight:
        return ntok - 1
    return ntok + x.in_flight[0].placeholders - 1


def _in_flight(ops: Ops, cfg: RuleConfig, ntok: Int, x: SlotState) -> list[Fact]:
    """What the AsyncScheduler has in flight for a slot between two steps (`ntok`: its
    num_tokens). Without drafts the first two facts are inductive on their own; the
    other three, true there too, are stated only with drafts, where they are needed (with
    them the 4-slot proof of tiny_async took 25% longer)."""
    out = [("in flight: idle", _idle(ops, x)),
           ("in flight: the last schedule's", _last_schedule_in_flight(ops, x))]
    if cfg.num_spec_tokens or cfg.prefix_caching:
        # The prefix cache caches a request's blocks up to its computed tokens less its
        # placeholders when its output arrives (async_scheduler.py:73-77): it reads them.
        out.append(("in flight: placeholders", _running_placeholders(ops, cfg, x)))
    if cfg.num_spec_tokens:
        out += [("in flight: sampled computes all", _sampled_computes_all(ops, ntok, x)),
                ("in flight: drafts", _drafts_in_flight(ops, x))]
    return out


def _idle(ops: Ops, x: SlotState) -> Bool:
    """A slot that is not running has nothing in flight: an arrival was never scheduled,
    and a victim's placeholders are dropped (scheduler.py:1597-1607), its in-flight output is
    delivered (as stale) in the step that preempted it, and that step does not re-admit
    it (scheduler.py:900, and 934-939 while stale output is in flight)."""
    f = x.in_flight[0]
    return ops.implies(
        ops.or_(x.status == ABSENT, x.status == WAITING, x.status == PREEMPTED),
        ops.and_(f.placeholders == 0, f.tokens == 0, f.stale == 0, f.pending_tokens == 0))


def _last_schedule_in_flight(ops: Ops, x: SlotState) -> Bool:
    """A held request's in-flight tokens are exactly the last schedule's, none stale: each
    step delivers the previous schedule's output (core.py:698-792), stale output included
    (scheduler.py:2080-2103); a token is sampled only by a scheduled chunk
    (scheduler.py:1634-1636)."""
    f = x.in_flight[0]
    held = ops.or_(x.status == WAITING, x.status == RUNNING, x.status == PREEMPTED)
    return ops.implies(held, ops.and_(
        f.tokens == f.pending_tokens, f.pending_tokens >= 0, f.stale == 0,
        ops.implies(f.pending_sample, f.pending_tokens > 0)))


def _running_placeholders(ops: Ops, cfg: RuleConfig, x: SlotState) -> Bool:
    """A running request has placeholders exactly when its last chunk sampled: one for
    the sampled token and one per draft it scheduled. The schedule adds them
    (async_scheduler.py:25-56) and the next step's delivery frees them
    (async_scheduler.py:58-78; rejected drafts, scheduler.py:2108-2128)."""
    f = x.in_flight[0]
    drafts = f.pending_spec if cfg.num_spec_tokens else 0  # unread without drafts
    return ops.implies(x.status == RUNNING,
                       f.placeholders == ops.ite(f.pending_sample, 1 + drafts, 0))


def _sampled_computes_all(ops: Ops, ntok: Int, x: SlotState) -> Bool:
    """A running request whose last chunk sampled has computed every known token but its
    last, placeholders included: it was offered num_tokens + num_output_placeholders -
    num_computed_tokens (scheduler.py:703-721), and a delivery moves tokens from
    placeholders to outputs and rolls rejected drafts back from both (2108-2128)."""
    f = x.in_flight[0]
    return ops.implies(ops.and_(x.status == RUNNING, f.pending_sample),
                       x.num_computed_tokens == ntok + f.placeholders - 1)


def _drafts_in_flight(ops: Ops, x: SlotState) -> Bool:
    """The last schedule's output accepts at most the drafts it scheduled (its other
    drafts are rolled back at delivery, scheduler.py:2108-2128)."""
    f = x.in_flight[0]
    return ops.and_(f.pending_accepted >= 0, f.pending_accepted <= f.pending_spec)


# --- prefix caching (model/vllm/cache_rules.py) ----------------------------------------


def _block_table(ops: Ops, cfg: RuleConfig, x: SlotState) -> list[Fact]:
    """A running request's block table names a pool block at each of its first `blocks`
    positions and nothing after them (the table is the request's blocks in order,
    single_type_kv_cache_manager.py:267-324: hit blocks first, then new ones); a request
    that holds nothing has an empty table and nothing cached (a preemption or a finish
    frees the whole table, kv_cache_manager.py:620-629)."""
    held = [ops.and_(j < x.blocks, e >= 1, e <= cfg.pool_blocks) for j, e in
            enumerate(x.table)]
    unused = [ops.implies(j >= x.blocks, e == 0) for j, e in enumerate(x.table)]
    running = ops.and_(x.blocks <= cfg.table_len, x.num_cached >= 0,
                       x.num_cached <= x.blocks,
                       *[ops.implies(j < x.blocks, h) for j, h in enumerate(held)], *unused)
    empty = ops.and_(x.num_cached == 0, *[e == 0 for e in x.table])
    return [("block table", ops.implies(x.status == RUNNING, running)),
            ("no block table", ops.implies(x.status != RUNNING, empty))]


def _pool(ops: Ops, cfg: RuleConfig, s: SchedState) -> list[Fact]:
    """The pool agrees with the tables: a block's ref_cnt is the number of table
    positions naming it (block_pool.py:752-768 touches a hit block once per request that
    adopts it; 774-805 frees it once per request that releases it), the free count is the
    blocks nobody holds (the pool's blocks beyond `pool_blocks` are free and bare,
    state.within_bounds), and the free queue's cached tail has one key per block, each
    below the next to be given (P:774-805 appends at the tail): the eviction order is a
    total order. So is the order blocks entered the cache in, which picks the copy a
    lookup hits among blocks of one hash (P:62-71)."""
    out: list[Fact] = []
    for b, block in enumerate(s.pool):
        holders = ops.sum([ops.to_int(ops.and_(x.status == RUNNING, j < x.blocks, e == b + 1))
                           for x in s.slots for j, e in enumerate(x.table)])
        out.append((f"block {b}: ref_cnt = table positions naming it",
                    block.ref_cnt == holders))
    nobody = ops.sum([ops.to_int(block.ref_cnt == 0) for block in s.pool])
    out.append(("free blocks = blocks nobody holds",
                s.free_blocks == cfg.usable_blocks - cfg.pool_blocks + nobody))
    queued = [ops.and_(block.ref_cnt == 0, block.block_hash != 0) for block in s.pool]
    for b, (q, block) in enumerate(zip(queued, s.pool, strict=True)):
        order = [ops.implies(ops.and_(q, queued[a]), block.queue_key != s.pool[a].queue_key)
                 for a in range(b)]
        out.append((f"block {b}: free queue key", ops.and_(
            ops.implies(q, block.queue_key < s.queue_tail), *order)))
    hashed = [block.block_hash != 0 for block in s.pool]
    for b, (h, block) in enumerate(zip(hashed, s.pool, strict=True)):
        order = [ops.implies(ops.and_(h, hashed[a]), block.cached_at != s.pool[a].cached_at)
                 for a in range(b)]
        out.append((f"block {b}: cache order", ops.and_(
            ops.implies(h, block.cached_at < s.next_cached_at), *order)))
    return out


def _delivery_order(ops: Ops, num_slots: int, x: SlotState) -> Bool:
    """Output in flight is delivered in the order its schedule served the requests, one
    of the step's ranks (core.py:698-792 walks the scheduler output's requests in order):
    with the prefix cache that order decides which of a finished request's blocks join
    the free queue first (scheduler.py:2220-2240)."""
    f = x.in_flight[0]
    return ops.implies(f.pending_tokens > 0,
                       ops.and_(f.pending_rank >= 0, f.pending_rank < num_slots))
