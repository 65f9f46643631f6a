"""vLLM V1's prefix cache counted, not carried block by block: the abstraction the rules
take when the exact pool (model/vllm/cache_rules.py) is too large for z3, so that a
question at a deployment's pool size (tens of thousands of blocks, tables of thousands of
entries) still has rules. Same call shape as cache_rules (lookup, adopt, take, cache,
release), over counts instead of a pool.

What is kept: the blocks in use (ref_cnt > 0) and the table positions of all holders, so
the free count is exact and the shared references are their difference; per request, the
most full blocks it has ever cached (`num_cached`, never reset: eviction is not tracked).
What is forgotten: which block a position names, hashes, the free queue's order. Where
the exact rules read those, the environment chooses (`PoolChoice`, one per slot and step)
and the choice is clamped to what every exact pool allows, so every exact run is a run of
the abstraction (tests/test_abstract_cache.py replays exact runs through it):

- a lookup hits h whole blocks, h <= the hit's cap (K:289-300), h <= what the request
  itself or a request of its prefix group has cached before (a block's hash is the hash of
  one chain position, computed only once a request computed that block, K:607-616,
  T:476-533), and h <= the blocks other holders can share plus the free ones;
- e of them are evictable (ref_cnt 0, in the free queue, T:175-265): e <= h, e <= free,
  and the h - e held ones are blocks of the shared prefix that a running member of the
  group holds (own-chain blocks of a waiting request have no other holder);
- a release of d table positions frees f blocks, d - (shared references) <= f <= d and
  f <= in use (P:774-805: a block is freed by its last holder, K:620-629).

K = v1/core/kv_cache_manager.py, P = v1/core/block_pool.py,
T = v1/core/single_type_kv_cache_manager.py (v0.32.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.core.ops import Bool, Int, Ops
from model.core.rule_parts import pick
from model.core.types import SlotSpec
from model.vllm.state import RuleConfig, SchedState


@dataclass(frozen=True, slots=True)
class PoolChoice:
    """One slot's choices in one step, any integers (clamped where they are read): the
    blocks a lookup hits and how many of them are evictable, the blocks a release frees
    when the request is preempted (each at most once per slot and step), and its share
    of the blocks the step's finished requests free together (`release_finished`)."""

    hit: Int = 0
    evictable: Int = 0
    freed_preempted: Int = 0
    freed_finished: Int = 0


@dataclass(frozen=True, slots=True)
class CountHit:
    """A lookup's result over the counts: whole blocks hit, and how many were evictable."""

    blocks: Int
    evictable: Int


@dataclass(slots=True)
class CountWork:
    """Mutable scratch of the counted pool for one step."""

    usable: Int
    used: Int  # blocks some request holds (ref_cnt > 0)
    positions: Int  # table positions of all holders (a shared block counts per holder)
    num_cached: list[Int]  # per slot: the most full blocks it has cached so far
    choices: tuple[PoolChoice, ...]

    @staticmethod
    def of(state: SchedState, cfg: RuleConfig, ops: Ops,
           choices: Sequence[PoolChoice] | None) -> CountWork:
        """The scratch of a state: every block not free is in use (block_pool.py:666-805
        moves a block between the two), every holder's blocks are table positions."""
        picked = tuple(choices) if choices is not None else tuple(
            PoolChoice() for _ in state.slots)
        return CountWork(usable=cfg.usable_blocks, used=cfg.usable_blocks - state.free_blocks,
                         positions=ops.sum([s.blocks for s in state.slots]),
                         num_cached=[s.num_cached for s in state.slots], choices=picked)

    def checkpoint(self, ops: Ops) -> None:
        """Name every accumulator (flat terms for the solver)."""
        self.used = ops.name(self.used)
        self.positions = ops.name(self.positions)
        self.num_cached = [ops.name(v) for v in self.num_cached]

    def shared(self) -> Int:
        """Shared block references: table positions less the blocks they name."""
        return self.positions - self.used


def _clamp(ops: Ops, value: Int, lo: Int, hi: Int) -> Int:
    return ops.max(lo, ops.min(value, hi))


def _shared_prefix_blocks(ops: Ops, cfg: RuleConfig, spec: SlotSpec) -> Int:
    """Blocks of the request's prompt that are its prefix group's (cache_rules.block_hash:
    block j is the group's while (j + 1) * block_size <= shared_prefix_len)."""
    return ops.ite(spec.prefix_group > 0, ops.floordiv(spec.shared_prefix_len, cfg.block_size),
                   0)


def _from_group(ops: Ops, specs: Sequence[SlotSpec], i: int, per_slot: Sequence[Int],
                shared: Sequence[Int]) -> Int:
    """The most of `per_slot` (capped at their shared blocks) among slot i's group."""
    best: Int = 0
    for j, spec in enumerate(specs):
        if j != i:
            same = ops.and_(spec.prefix_group > 0, spec.prefix_group == specs[i].prefix_group)
            best = ops.max(best, ops.ite(same, ops.min(per_slot[j], shared[j]), 0))
    return ops.min(best, shared[i])


def lookup(ops: Ops, cfg: RuleConfig, c: CountWork, specs: Sequence[SlotSpec],
           sel: Sequence[Bool], num_tokens: Int, holders: Sequence[Int]) -> CountHit:
    """The selected slot's hit, as the environment chooses it within what an exact pool
    allows (see the module's docstring); `holders` are the slots' blocks now."""
    free = c.usable - c.used
    shared = [_shared_prefix_blocks(ops, cfg, s) for s in specs]
    cached = [ops.max(c.num_cached[i], _from_group(ops, specs, i, c.num_cached, shared))
              for i in range(len(specs))]
    held = [ops.min(_from_group(ops, specs, i, holders, shared), c.used)
            for i in range(len(specs))]
    cap = ops.floordiv(num_tokens - (1 if cfg.cap_prefix_hit else 0), cfg.block_size)
    can_hold = pick(ops, sel, held)
    most = ops.min(ops.min(cap, pick(ops, sel, cached)), can_hold + free)
    blocks = ops.name(_clamp(ops, pick(ops, sel, [x.hit for x in c.choices]), 0, most))
    evictable = _clamp(ops, pick(ops, sel, [x.evictable for x in c.choices]),
                       ops.max(0, blocks - can_hold), ops.min(blocks, free))
    return CountHit(blocks, ops.name(evictable))


def adopt(ops: Ops, c: CountWork, sel: Sequence[Bool], hit: CountHit, do: Bool) -> None:
    """The hit blocks join the request's table; the evictable ones come into use."""
    c.positions = ops.ite(do, c.positions + hit.blocks, c.positions)
    c.used = ops.ite(do, c.used + hit.evictable, c.used)


def take(ops: Ops, c: CountWork, count: Int, do: Bool) -> None:
    """`count` free blocks join the request's table and come into use."""
    c.positions = ops.ite(do, c.positions + count, c.positions)
    c.used = ops.ite(do, c.used + count, c.used)
    c.checkpoint(ops)


def cache(ops: Ops, cfg: RuleConfig, c: CountWork, sel: Sequence[Bool], num_tokens: Int,
          do: Bool) -> None:
    """The selected slot has cached its full blocks up to `num_tokens` tokens."""
    full = ops.floordiv(num_tokens, cfg.block_size)
    for i, s in enumerate(sel):
        c.num_cached[i] = ops.ite(ops.and_(do, s), ops.max(c.num_cached[i], full),
                                  c.num_cached[i])
    c.checkpoint(ops)


def release(ops: Ops, c: CountWork, slot: int, num_blocks: Int, do: Bool) -> Int:
    """The preempted slot gives up its `num_blocks` table positions; returns the blocks
    freed (as chosen, within what an exact pool allows)."""
    return _give_up(ops, c, c.choices[slot].freed_preempted, ops.ite(do, num_blocks, 0))


def release_finished(ops: Ops, c: CountWork, num_blocks: Sequence[Int],
                     finished: Sequence[Bool]) -> Int:
    """The finished slots give up their table positions together; returns the blocks
    freed. One choice for all, since the counts do not depend on their order: each
    position not freed names a block some request still holds afterwards, so at most the
    shared references before them all stay held, as for one release (scheduler.py
    2220-2240 frees them one after another)."""
    positions = ops.sum([ops.ite(f, n, 0) for n, f in zip(num_blocks, finished, strict=True)])
    return _give_up(ops, c, ops.sum([x.freed_finished for x in c.choices]), positions)


def _give_up(ops: Ops, c: CountWork, raw: Int, positions: Int) -> Int:
    freed = ops.name(_clamp(ops, raw, ops.max(0, positions - c.shared()),
                            ops.min(positions, c.used)))
    c.used = c.used - freed
    c.positions = c.positions - positions
    c.checkpoint(ops)
    return freed
