"""vLLM V1's prefix cache in the rules (v0.32.0): the block pool and the block tables as
ite folds over fixed pools of blocks and slots, written once over Ops. The imperative
counterpart is model/vllm/kv_cache.py; both follow K = v1/core/kv_cache_manager.py,
P = v1/core/block_pool.py, T = v1/core/single_type_kv_cache_manager.py.

A pool block is free when nobody holds it (ref_cnt 0). Free blocks without a hash are
interchangeable and are taken first (the free queue's head, P:774-805); cached free blocks
are taken in queue-key order (the least recently freed first) and lose their hash. A
request's block j caches the hash of its prefix group's block j while the request's first
(j + 1) * block_size prompt tokens are the group's, else a hash of its own (ids: groups
first, then one range per slot), so equal hashes mean equal prefixes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import pick, select_min
from model.core.types import SlotSpec
from model.vllm.state import PoolBlock, RuleConfig, SchedState


@dataclass(slots=True)
class CacheWork:
    """Mutable scratch of the pool and the block tables for one step."""

    ref: list[Int]
    hash: list[Int]
    queue_key: list[Int]
    cached_at: list[Int]
    table: list[list[Int]]  # per slot: pool index + 1 of its j-th block, 0 for none
    num_cached: list[Int]
    queue_tail: Int
    next_cached_at: Int

    @staticmethod
    def of(state: SchedState) -> CacheWork:
        """The scratch of a state's pool and tables."""
        return CacheWork(
            ref=[b.ref_cnt for b in state.pool], hash=[b.block_hash for b in state.pool],
            queue_key=[b.queue_key for b in state.pool],
            cached_at=[b.cached_at for b in state.pool],
            table=[list(s.table) for s in state.slots],
            num_cached=[s.num_cached for s in state.slots], queue_tail=state.queue_tail,
            next_cached_at=state.next_cached_at)

    def pool(self) -> tuple[PoolBlock, ...]:
        """The pool after the step."""
        return tuple(PoolBlock(r, h, q, c) for r, h, q, c in
                     zip(self.ref, self.hash, self.queue_key, self.cached_at, strict=True))

    def checkpoint(self, ops: Ops) -> None:
        """Name every accumulator (flat terms for the solver)."""
        for name in ("ref", "hash", "queue_key", "cached_at", "num_cached"):
            setattr(self, name, [ops.name(v) for v in getattr(self, name)])
        self.table = [[ops.name(v) for v in row] for row in self.table]
        self.queue_tail = ops.name(self.queue_tail)
        self.next_cached_at = ops.name(self.next_cached_at)

    def in_use(self, ops: Ops) -> Int:
        """Blocks some request holds (a shared block counts once)."""
        return ops.sum([ops.to_int(r > 0) for r in self.ref])


def block_hash(ops: Ops, cfg: RuleConfig, spec: SlotSpec, slot: int, j: int,
               num_slots: int) -> Int:
    """The hash id of block j of the request in `slot` (R:272-288, U:941-1000). The slots'
    own chains come first and the groups' after them, so no group number (up to the CLI's
    --prefix-groups, which may exceed the slots) names another request's own block."""
    own = 1 + slot * cfg.table_len + j
    group = 1 + (num_slots + spec.prefix_group - 1) * cfg.table_len + j
    shared = ops.and_(spec.prefix_group > 0, (j + 1) * cfg.block_size <= spec.shared_prefix_len)
    return ops.ite(shared, group, own)


@dataclass(frozen=True, slots=True)
class Hit:
    """A lookup's result: whole blocks hit, for each block position the one-hot pool block
    it hits (all false past the hit), and how many of them are evictable."""

    blocks: Int
    chosen: tuple[tuple[Bool, ...], ...]
    evictable: Int


def lookup(ops: Ops, cfg: RuleConfig, c: CacheWork, specs: Sequence[SlotSpec],
           sel: Sequence[Bool], num_tokens: Int) -> Hit:
    """The longest cached prefix of whole blocks of the selected slot's request, capped at
    num_tokens - 1 tokens (K:268-300, T:733-828); the first cached copy of each hash
    (P:62-71); a hit block nobody holds is evictable and costs a free block (T:175-265)."""
    cap = ops.floordiv(num_tokens - (1 if cfg.cap_prefix_hit else 0), cfg.block_size)
    going: Bool = True
    runs: list[Bool] = []
    firsts = []
    for j in range(cfg.table_len):
        want = pick(ops, sel, [block_hash(ops, cfg, spec, i, j, len(specs))
                               for i, spec in enumerate(specs)])
        copies = [h == want for h in c.hash]
        firsts.append(select_min(ops, copies, [(k,) for k in c.cached_at]))
        going = ops.name(ops.and_(going, ops.or_(*copies), j < cap))
        runs.append(going)
    if cfg.eagle_block_drop:  # T:815-820: EAGLE gives the hit's last block back
        runs = [ops.and_(r, nxt) for r, nxt in zip(runs, [*runs[1:], False], strict=True)]
    hit: Int = 0
    evictable: Int = 0
    chosen = []
    for run, first in zip(runs, firsts, strict=True):
        hit = hit + ops.to_int(run)
        evictable = evictable + ops.to_int(ops.and_(run, pick(ops, first, c.ref) == 0))
        chosen.append(tuple(ops.and_(run, f) for f in first))
    return Hit(ops.name(hit), tuple(chosen), ops.name(evictable))


def adopt(ops: Ops, c: CacheWork, sel: Sequence[Bool], hit: Hit, do: Bool) -> None:
    """Touch the hit blocks (ref_cnt + 1, out of the free queue) and make them the first
    entries of the selected slot's table (P:752-768; T:267-324)."""
    for j, chosen in enumerate(hit.chosen):
        index = ops.sum([ops.ite(f, b + 1, 0) for b, f in enumerate(chosen)])
        for b, f in enumerate(chosen):
            c.ref[b] = c.ref[b] + ops.to_int(ops.and_(do, f))
        for i, s in enumerate(sel):
            taken = ops.and_(do, s, j < hit.blocks)
            c.table[i][j] = ops.ite(taken, index, c.table[i][j])
    for i, s in enumerate(sel):
        c.num_cached[i] = ops.ite(ops.and_(do, s), hit.blocks, c.num_cached[i])


def take(ops: Ops, cfg: RuleConfig, c: CacheWork, sel: Sequence[Bool], start: Int, count: Int,
         do: Bool) -> None:
    """Give the selected slot `count` free blocks at table positions start.. (P:666-750):
    blocks without a hash first (interchangeable: by pool index), then cached ones by
    queue key, which lose their hash. Each free block's rank in that order decides at once
    whether it is taken and where it goes."""
    n = len(c.ref)
    free = [r == 0 for r in c.ref]
    bare = [ops.and_(f, h == 0) for f, h in zip(free, c.hash, strict=True)]
    cached = [ops.and_(f, h != 0) for f, h in zip(free, c.hash, strict=True)]
    rank = []
    for b in range(n):
        before = [ops.or_(ops.and_(bare[a], ops.or_(cached[b], a < b)),
                          ops.and_(cached[a], cached[b], c.queue_key[a] < c.queue_key[b]))
                  for a in range(n) if a != b]
        rank.append(ops.name(ops.sum([ops.to_int(x) for x in before])))
    taken = [ops.name(ops.and_(do, free[b], rank[b] < count)) for b in range(n)]
    for i, s in enumerate(sel):
        for j in range(cfg.table_len):
            mine = [ops.and_(s, taken[b], start + rank[b] == j) for b in range(n)]
            c.table[i][j] = ops.ite(ops.or_(*mine),
                                    ops.sum([ops.ite(m, b + 1, 0) for b, m in enumerate(mine)]),
                                    c.table[i][j])
    for b in range(n):
        c.ref[b] = ops.ite(taken[b], 1, c.ref[b])
        c.hash[b] = ops.ite(taken[b], 0, c.hash[b])
    c.checkpoint(ops)


def cache(ops: Ops, cfg: RuleConfig, c: CacheWork, specs: Sequence[SlotSpec],
          sel: Sequence[Bool], num_tokens: Int, do: Bool) -> None:
    """Cache the selected slot's full blocks up to `num_tokens` tokens, in block order
    (K:607-616, T:476-533): each gets its hash and the next cache order."""
    full = ops.floordiv(num_tokens, cfg.block_size)
    for i, (spec, s) in enumerate(zip(specs, sel, strict=True)):
        mine = ops.and_(do, s)
        for j in range(cfg.table_len):
            new = ops.and_(mine, j >= c.num_cached[i], j < full)
            h = block_hash(ops, cfg, spec, i, j, len(specs))
            for b in range(len(c.ref)):
                here = ops.and_(new, c.table[i][j] == b + 1)
                c.hash[b] = ops.ite(here, h, c.hash[b])
                c.cached_at[b] = ops.ite(here, c.next_cached_at, c.cached_at[b])
            c.next_cached_at = ops.ite(new, c.next_cached_at + 1, c.next_cached_at)
        c.num_cached[i] = ops.ite(ops.and_(mine, full > c.num_cached[i]), full,
                                  c.num_cached[i])
    c.checkpoint(ops)


def release(ops: Ops, cfg: RuleConfig, c: CacheWork, slot: int, num_blocks: Int,
            do: Bool) -> Int:
    """Free the slot's blocks, last block first (K:620-629, T:562-589): ref_cnt - 1, and a
    cached block nobody holds any more joins the free queue's tail (P:774-805). Returns
    how many blocks became free."""
    freed: Int = 0
    row = c.table[slot]
    for j in reversed(range(cfg.table_len)):
        active = ops.and_(do, j < num_blocks)
        appended: Bool = False
        for b in range(len(c.ref)):
            mine = ops.and_(active, row[j] == b + 1)
            ref = c.ref[b] - ops.to_int(mine)
            now_free = ops.and_(mine, ref == 0)
            freed = freed + ops.to_int(now_free)
            tail = ops.and_(now_free, c.hash[b] != 0)
            c.queue_key[b] = ops.ite(tail, c.queue_tail, c.queue_key[b])
            c.ref[b] = ref
            appended = ops.or_(appended, tail)
        c.queue_tail = ops.ite(appended, c.queue_tail + 1, c.queue_tail)
    c.table[slot] = [ops.ite(do, 0, v) for v in row]
    c.num_cached[slot] = ops.ite(do, 0, c.num_cached[slot])
    c.checkpoint(ops)
    return ops.name(freed)
