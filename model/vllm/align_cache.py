"""The reference's KV cache with prefix caching beside several KV cache groups: vLLM
0.32.0's HybridKVCacheCoordinator (or, for one group, the UnitaryKVCacheCoordinator) over
full-attention groups and Mamba groups in mamba_cache_mode "align", the mode vLLM turns on
for a Mamba model when prefix caching is on (model_executor/models/config.py:685-701).

Citations (paths relative to `vllm/v1/`): C = core/kv_cache_coordinator.py,
T = core/single_type_kv_cache_manager.py, K = core/kv_cache_manager.py,
P = core/block_pool.py, I = kv_cache_interface.py.

Scope: every group has the scheduler's block size and hashes are at that size
(hash_block_size == block_size, so no fine-grained partial hits: kv_cache_utils.py:
750-789 turns them off, and T's partial-tail copy-on-write never runs); no Mamba2 prefill
checkpoint blocks (num_prefill_checkpoint_blocks 0: T:1426-1430), dense retention
(prefix_cache_retention_interval unset: every full block is cached, T:536-560), no
shared-prefix checkpoint, no KV connector. Sliding-window groups beside prefix caching
are not here (their hit search, T:943-1053, is not modelled): the config's validation
refuses them.

A hash key is (group id, the request's abstract block hash): vLLM keys a cached block by
its hash with the group id (P:198-224, `make_block_hash_with_group_id`).

Rules, in our words:
- Mamba align table (T:1676-1906): position-indexed, slot p holds the state after (p + 1) *
  block_size tokens. A request needs cdiv(main-model tokens, block_size) + k slots, the
  scheduled drafts counted, the lookahead slots not (T:1711-1728, 1795-1802). The count
  is capped at 1 new block per step (1 + k on a first allocation, T:1758-1763) and may be
  negative when the table is longer than needed (only a positive count is capped). On
  allocation: the last state block index is recorded (two steps back, T:1822-1830),
  skipped positions are null, the speculative blocks the step leaves behind are moved to
  the table's end (T:1841-1850, 1908-1917), and new blocks are appended.
- Freeing (T:1592-1641): the blocks wholly before the last processed token are freed and
  nulled once (a retired mark, T:1592-1611); the recorded state block of two steps back is
  freed once the processed tokens pass its next block (T:1613-1641). The processed tokens
  exclude those in flight (K:546-558): under the AsyncScheduler they lag one batch.
- Hit search (C:796-931): a fixed point over the attention groups, full attention first;
  full attention takes the longest run of cached blocks (with EAGLE: one block more, then
  one dropped, T:733-828), Mamba the rightmost cached state within that length, nulls
  before it (T:1454-1531); the full-attention hit is cut to the agreed length. A longer
  single-group hit than the agreed one is the shared-prefix junction (K:311-321).
- Caching (C:354-377, 767-794; T:476-534, 1961-2006, 2011-2112): every non-null full
  block, per group; a Mamba state block cached in this step (or the prompt's last
  reusable boundary re-offered) cannot be hit by another admission in this step
  (T:1695-1703), cleared when a step starts (C:470-473).
"""

from __future__ import annotations

import copy
from collections.abc import Hashable
from dataclasses import dataclass, field, replace

from model.vllm.kv_cache import BlockPool, GroupTables, KVBlock, copied_tables, null_out


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


def prefill_checkpoint_position(num_tokens: int, block_size: int, eagle_drop: bool) -> int:
    """`get_mamba_prefill_checkpoint_position` (I:1110-1122): the last block boundary whose
    state a later request can reuse; with EAGLE's drop one block lower, without it one
    token is left to recompute."""
    limit = num_tokens if eagle_drop else num_tokens - 1
    position = limit // block_size * block_size
    if eagle_drop:
        position -= block_size
    return max(position, 0)


@dataclass(slots=True)
class AlignHit:
    """A prefix hit over the groups (C:796-931): per group its blocks (None for a null
    block), the agreed length, and the junction (K:311-321)."""

    blocks: tuple[list[KVBlock | None], ...]
    length: int
    junction: int = 0

    def __bool__(self) -> bool:
        """Whether any group adopts a block (K:794-798: an all-empty hit is no hit)."""
        return any(self.blocks)


@dataclass(slots=True)
class CachedFullTable:
    """A full-attention group's manager with prefix caching (T:175-265, 267-324, 369-410,
    476-534, 733-828)."""

    pool: BlockPool
    block_size: int
    group_id: int
    blocks: dict[str, list[KVBlock | None]] = field(default_factory=dict)
    num_cached: dict[str, int] = field(default_factory=dict)

    kind = "full"

    def __deepcopy__(self, memo: dict[int, object]) -> CachedFullTable:
        """`copy.deepcopy`'s copy, written out for speed (kv_cache.BlockPool's)."""
        twin = replace(self, pool=copy.deepcopy(self.pool, memo),
                       blocks=copied_tables(self.blocks, memo), num_cached=dict(self.num_cached))
        memo[id(self)] = twin
        return twin

    def find(self, hashes: list[Hashable], max_length: int, group_ids: list[int],
             eagle_drop: bool) -> tuple[list[list[KVBlock | None]], int]:
        """T:733-828: the longest run of cached blocks from the start (every group of the
        attention group must hold the hash), less one block with EAGLE's drop."""
        out: list[list[KVBlock | None]] = [[] for _ in group_ids]
        for h in hashes[: max_length // self.block_size]:
            found = [self.pool.get_cached_block((g, h)) for g in group_ids]
            if any(b is None for b in found):
                break
            for lst, b in zip(out, found, strict=True):
                lst.append(b)
        length = len(out[0]) * self.block_size
        if eagle_drop and length > 0:
            length -= self.block_size
        for lst in out:
            del lst[cdiv(length, self.block_size):]
        return out, length

    def count(self, rid: str, num_tokens: int, main_tokens: int,
              hit: list[KVBlock | None], computed: int, admission: bool) -> int:
        """T:175-265 for full attention (nothing skipped, no admission cap)."""
        del main_tokens, computed, admission
        required = cdiv(num_tokens, self.block_size)
        held = len(self.blocks.get(rid, ()))
        if rid in self.num_cached:  # T:224-234: a running request has no new hit
            return max(required - held, 0)
        evictable = sum(1 for b in hit if b is not None and b.ref_cnt == 0)
        return max(required - (len(hit) + held), 0) + evictable

    def add_hit(self, rid: str, hit: list[KVBlock | None], computed: int) -> None:
        """T:267-324: adopt the hit blocks (touched), counted as cached."""
        del computed
        self.pool.touch([b for b in hit if b is not None])
        self.blocks[rid] = list(hit)
        self.num_cached[rid] = len(hit)

    def allocate(self, rid: str, num_tokens: int, main_tokens: int) -> None:
        """T:369-410: new blocks up to cdiv(num_tokens, block_size)."""
        del main_tokens
        table = self.blocks.setdefault(rid, [])
        required = cdiv(num_tokens, self.block_size)
        if required > len(table):
            table += self.pool.get_new_blocks(required - len(table))

    def remove_skipped(self, rid: str, processed: int) -> None:
        """Full attention skips nothing (T:672-723)."""
        del rid, processed

    def cache(self, rid: str, hashes: list[Hashable], num_tokens: int,
              num_prompt_tokens: int, eagle_drop: bool) -> set[Hashable]:
        """T:476-534 with P:226-344: cache the non-null full blocks up to `num_tokens`."""
        del num_prompt_tokens, eagle_drop
        before = self.num_cached.get(rid, 0)
        num_full = num_tokens // self.block_size
        if before >= num_full:
            return set()
        table = self.blocks[rid]
        for j in range(before, num_full):
            b = table[j]
            if b is not None and b.block_hash is None:
                self.pool.cache_block(b, (self.group_id, hashes[j]))
        self.num_cached[rid] = num_full
        return set()

    def pop(self, rid: str) -> list[KVBlock | None]:
        """T:562-579: forget the request, its blocks returned in table order."""
        self.num_cached.pop(rid, None)
        return self.blocks.pop(rid, [])

    def key(self, rid: str) -> tuple[object, ...]:
        """What steers later decisions beyond the blocks."""
        return (self.num_cached.get(rid),)


@dataclass(slots=True)
class MambaAlignTable:
    """`MambaManager` in mamba_cache_mode "align" (T:1415-2112), in the scope of the
    module docstring."""

    pool: BlockPool
    block_size: int
    group_id: int
    num_speculative_blocks: int
    blocks: dict[str, list[KVBlock | None]] = field(default_factory=dict)
    num_cached: dict[str, int] = field(default_factory=dict)
    allocated: set[str] = field(default_factory=set)  # T:1440: `_allocated_block_reqs`
    last_state: dict[str, int] = field(default_factory=dict)  # T:1436
    retired: dict[str, int] = field(default_factory=dict)  # T:1437
    cached_this_step: set[Hashable] = field(default_factory=set)  # T:1434

    kind = "mamba"

    def __deepcopy__(self, memo: dict[int, object]) -> MambaAlignTable:
        """`copy.deepcopy`'s copy, written out for speed (kv_cache.BlockPool's)."""
        twin = replace(self, pool=copy.deepcopy(self.pool, memo),
                       blocks=copied_tables(self.blocks, memo), num_cached=dict(self.num_cached),
                       allocated=set(self.allocated), last_state=dict(self.last_state),
                       retired=dict(self.retired), cached_this_step=set(self.cached_this_step))
        memo[id(self)] = twin
        return twin

    def find(self, hashes: list[Hashable], max_length: int, group_ids: list[int],
             eagle_drop: bool) -> tuple[list[list[KVBlock | None]], int]:
        """T:1454-1531 (block-aligned): right to left, the first position every group
        holds cached; nulls before it. Mamba never drops a block for EAGLE."""
        del eagle_drop
        for i in range(max_length // self.block_size - 1, -1, -1):
            found = [self.pool.get_cached_block((g, hashes[i])) for g in group_ids]
            if all(b is not None for b in found):
                return [[None] * i + [b] for b in found], (i + 1) * self.block_size
        return [[] for _ in group_ids], 0

    def count(self, rid: str, num_tokens: int, main_tokens: int,
              hit: list[KVBlock | None], computed: int, admission: bool) -> int:
        """T:1676-1778 without partial hits or checkpoints: cdiv(main-model tokens,
        block_size) + k slots less the hit and the table, capped at one block (1 + k on
        a first allocation) when positive; a hit on a state block cached in this step
        cannot be taken now (T:1695-1703: the count exceeds the pool)."""
        del num_tokens, computed, admission
        if hit and hit[-1] is not None and hit[-1].block_hash in self.cached_this_step:
            return self.pool_size() + 1
        required = cdiv(main_tokens, self.block_size) + self.num_speculative_blocks
        new = required - len(hit) - len(self.blocks.get(rid, ()))
        if new > 0:
            cap = 1 + (0 if rid in self.allocated else self.num_speculative_blocks)
            new = min(new, cap)
        evictable = sum(1 for b in hit if b is not None and b.ref_cnt == 0)
        return new + evictable

    def pool_size(self) -> int:
        """num_gpu_blocks of the pool (its null block included)."""
        return self.pool.num_gpu_blocks

    def add_hit(self, rid: str, hit: list[KVBlock | None], computed: int) -> None:
        """T:267-324: the state blocks before the last computed token are skipped
        (nulls); the rest is touched and adopted, counted as cached."""
        skipped = max(computed - 1, 0) // self.block_size
        kept = hit[skipped:]
        self.pool.touch([b for b in kept if b is not None])
        self.blocks[rid] = [None] * skipped + list(kept)
        self.num_cached[rid] = len(self.blocks[rid])

    def allocate(self, rid: str, num_tokens: int, main_tokens: int) -> None:
        """T:1780-1906 without partial hits or checkpoints."""
        del num_tokens
        k = self.num_speculative_blocks
        table = self.blocks.setdefault(rid, [])
        required = cdiv(main_tokens, self.block_size) + k
        if required <= len(table):  # T:1811-1817: over-allocated last round
            self.allocated.add(rid)
            return
        prev = len(table)
        done = rid in self.allocated
        if done:  # T:1822-1826: the running state sits in the last 1 + k blocks
            self.last_state[rid] = prev - 1 - k
        elif prev > 0:  # T:1827-1830: a hit's last block holds the hit state
            self.last_state[rid] = prev - 1
        skipped = required - k - 1
        if prev < skipped:  # T:1832-1840
            table += [None] * (skipped - prev)
        if done:  # T:1841-1850: speculative blocks left behind move to the end
            for i in range(prev - k, prev):
                if i >= skipped:
                    break
                table.append(table[i])
                table[i] = None
        new = max(required - len(table), 0)
        assert new <= 1 + (0 if done else k)  # T:1855-1858
        table += self.pool.get_new_blocks(new)
        self.allocated.add(rid)

    def remove_skipped(self, rid: str, processed: int) -> None:
        """T:1592-1641 over T:672-710: free (and null) the non-null blocks wholly before
        the last processed token, once per position; then the state block of two steps
        back once the processed tokens pass its next block."""
        table = self.blocks.setdefault(rid, [])  # T:698: req_to_blocks is a defaultdict
        if processed - 1 > 0:
            last = min((processed - 1) // self.block_size, len(table))
            first = self.retired.get(rid, 0)
            if first < last:
                self.pool.free_blocks(null_out(table, first, last, past_a_hole=True))
                self.retired[rid] = last
        idx = self.last_state.get(rid)
        if idx is not None and idx < cdiv(processed, self.block_size) - 1:
            b = table[idx]
            if b is not None:
                self.pool.free_blocks([b])
                table[idx] = None

    def cache(self, rid: str, hashes: list[Hashable], num_tokens: int,
              num_prompt_tokens: int, eagle_drop: bool) -> set[Hashable]:
        """T:1961-2006: the full blocks as any group caches them (nulls skipped), each
        cached one entered in this step's set; then T:2011-2112 at block granularity: at
        the prompt's last reusable boundary the state block there is offered again (and
        entered in the set)."""
        before = self.num_cached.get(rid, 0)
        num_full = num_tokens // self.block_size
        table = self.blocks[rid]
        if before < num_full:
            for j in range(before, num_full):
                b = table[j]
                if b is not None and b.block_hash is None:
                    self.pool.cache_block(b, (self.group_id, hashes[j]))
            self.num_cached[rid] = num_full
        # T:2070-2100: the prompt's boundary (hash blocks are whole blocks here)
        if num_tokens > 0 and num_tokens % self.block_size == 0 and num_tokens == \
                prefill_checkpoint_position(num_prompt_tokens, self.block_size, eagle_drop):
            idx = num_tokens // self.block_size - 1
            if idx < len(table) and table[idx] is not None:
                b = table[idx]
                h = (self.group_id, hashes[idx])
                if b.block_hash is None:
                    self.pool.cache_block(b, h)
                if b.block_hash == h:
                    self.cached_this_step.add(h)
        if self.num_cached.get(rid, 0) > before:  # T:1983-1996
            for j in range(before, self.num_cached[rid]):
                b = table[j]
                if b is not None and b.block_hash is not None:
                    self.cached_this_step.add(b.block_hash)
        return self.cached_this_step

    def pop(self, rid: str) -> list[KVBlock | None]:
        """T:1935-1952: forget the request's align bookkeeping and its blocks."""
        self.allocated.discard(rid)
        self.last_state.pop(rid, None)
        self.retired.pop(rid, None)
        self.num_cached.pop(rid, None)
        return self.blocks.pop(rid, [])

    def key(self, rid: str) -> tuple[object, ...]:
        """What steers later decisions beyond the blocks."""
        return (self.num_cached.get(rid), rid in self.allocated, self.last_state.get(rid),
                self.retired.get(rid))


GroupManager = CachedFullTable | MambaAlignTable


class AlignTables(GroupTables):
    """The coordinator with prefix caching over full-attention and Mamba-align groups
    (C:609-931, or C:524-591 for one group). Keeps `GroupTables`' reading interface
    (held, held_by_group, group_key, blocks) for the records."""

    def __init__(self, pool: BlockPool, managers: list[GroupManager], block_size: int,
                 eagle: bool) -> None:
        super().__init__(pool, [])
        self.managers = managers
        self.block_size = block_size
        self.eagle = eagle
        # C:708-765: groups of one kind share an attention group (their specs are equal
        # here), full attention first.
        kinds: dict[str, list[int]] = {}
        for gid, m in enumerate(managers):
            kinds.setdefault(m.kind, []).append(gid)
        self.attention_groups = sorted(kinds.items(), key=lambda kv: kv[0] != "full")

    # -- reading -----------------------------------------------------------------------

    @property
    def blocks(self) -> dict[str, list[KVBlock | None]]:  # type: ignore[override]
        """The first group's tables (the records' blocks_in_use read them)."""
        return self.managers[0].blocks

    def held(self, request_id: str) -> int:
        """Real blocks the request holds, summed over the groups."""
        return sum(self._real(m, request_id) for m in self.managers)

    @staticmethod
    def _real(m: GroupManager, rid: str) -> int:
        return sum(b is not None for b in m.blocks.get(rid, ()))

    def held_by_group(self, request_id: str) -> tuple[int, ...]:
        """Real blocks the request holds in each group."""
        return tuple(self._real(m, request_id) for m in self.managers)

    def group_key(self, request_id: str) -> tuple[tuple[object, ...], ...]:
        """Per group: table length, real blocks, and the manager's bookkeeping."""
        return tuple((len(m.blocks.get(request_id, ())), self._real(m, request_id),
                      *m.key(request_id)) for m in self.managers)

    def tables_of(self, request_id: str) -> tuple[tuple[KVBlock | None, ...], ...]:
        """Every group's table of the request."""
        return tuple(tuple(m.blocks.get(request_id, ())) for m in self.managers)

    # -- the coordinator ---------------------------------------------------------------

    def new_step_starts(self) -> None:
        """C:470-473, T:2008-2009: a step starts, this step's cached state blocks are
        forgotten."""
        for m in self.managers:
            if isinstance(m, MambaAlignTable):
                m.cached_this_step.clear()

    def find_hit(self, hashes: list[Hashable], max_length: int) -> AlignHit:
        """C:796-931 (C:574-591 for one group): the fixed point over the attention
        groups."""
        n = len(self.managers)
        if n == 1:  # UnitaryKVCacheCoordinator: the one finder, EAGLE drop as flagged
            blocks, length = self.managers[0].find(hashes, max_length, [0], self.eagle)
            return AlignHit((blocks[0],), length, 0)
        hit_length, longest = max_length, 0
        by_group: list[list[KVBlock | None] | None] = [None] * n
        len_by_group = [0] * n
        simple = len(self.attention_groups) == 2 and self.attention_groups[0][0] == "full"
        verified: set[int] = set()
        while True:
            curr = hit_length
            for idx, (kind, gids) in enumerate(self.attention_groups):
                first = gids[0]
                if kind == "full" and by_group[first] is not None:  # C:849-856
                    curr = min(curr, len_by_group[first])
                    continue
                drop = self.eagle and idx not in verified
                max_len = curr
                if drop and kind != "mamba":  # C:863-877: one block more, then dropped
                    max_len = min(curr + self.block_size, len(hashes) * self.block_size)
                found, new = self.managers[first].find(hashes, max_len, gids, drop)
                if drop:
                    verified.add(idx)
                elif new < curr:
                    verified.clear()
                curr = new
                for gid, b in zip(gids, found, strict=True):
                    by_group[gid] = b
                    len_by_group[gid] = new
                longest = max(longest, curr)
            if curr >= hit_length:
                break
            hit_length = curr
            if simple:
                break
        for kind, gids in self.attention_groups:  # C:907-919: full attention cut
            if kind != "full":
                continue
            for gid in gids:
                b = by_group[gid]
                if b is not None:
                    del b[cdiv(hit_length, self.block_size):]
        blocks = tuple(b if b is not None else [] for b in by_group)
        uncached = longest - hit_length
        return AlignHit(blocks, hit_length, hit_length + uncached if uncached else 0)

    def count(self, rid: str, num_tokens: int, main_tokens: int, hit: AlignHit | None,
              computed: int, admission: bool = False) -> int:
        """C:190-259: every group's count, summed."""
        return sum(m.count(rid, num_tokens, main_tokens, self._hit(hit, gid), computed,
                           admission) for gid, m in enumerate(self.managers))

    @staticmethod
    def _hit(hit: AlignHit | None, gid: int) -> list[KVBlock | None]:
        return list(hit.blocks[gid]) if hit else []

    def remove_skipped_blocks(self, request_id: str, processed_tokens: int) -> None:
        """C:429-450: each group frees what it no longer needs."""
        for m in self.managers:
            m.remove_skipped(request_id, processed_tokens)

    def allocate_align(self, rid: str, hit: AlignHit | None, num_tokens: int,
                       main_tokens: int, computed: int) -> None:
        """K:581-600: a hit is adopted by every group first (C:261-309, unless some group
        already counts the request as cached), then every group allocates (C:311-344)."""
        if hit and not any(rid in m.num_cached for m in self.managers):
            for gid, m in enumerate(self.managers):
                m.add_hit(rid, list(hit.blocks[gid]), computed)
        for m in self.managers:
            m.allocate(rid, num_tokens, main_tokens)

    def cache_align(self, rid: str, hashes: list[Hashable], num_tokens: int,
                    num_prompt_tokens: int) -> None:
        """C:354-377: each group caches its full blocks up to its cacheable tokens: all of
        them with one group (C:346-352); with several, rounded down to a block (C:767-777)
        unless EAGLE's groups take up to one block more (C:779-794), which is all of them
        once a whole block is computed. (The whole blocks are the same either way; Mamba's
        prompt boundary reads the count.)"""
        cacheable = num_tokens
        aligned = num_tokens // self.block_size * self.block_size
        if len(self.managers) > 1 and not (self.eagle and aligned > 0):
            cacheable = aligned
        for m in self.managers:
            if rid in m.blocks:
                m.cache(rid, hashes, cacheable, num_prompt_tokens, self.eagle)

    def cache(self, request_id: str, hashes: list[Hashable], num_tokens: int) -> None:
        """Not used: caching here needs the prompt length (`cache_align`)."""
        raise NotImplementedError("AlignTables.cache_align caches, with the prompt length")

    def free(self, request_id: str) -> None:
        """C:400-408: each group frees the request's blocks, last first, nulls skipped."""
        for m in self.managers:
            self.pool.free_blocks(b for b in reversed(m.pop(request_id)) if b is not None)

    def pop_blocks_for_free(self, request_id: str) -> list[KVBlock]:
        """C:410-427 (only a connector's deferred frees use it; none in scope)."""
        out: list[KVBlock] = []
        for m in self.managers:
            out += [b for b in m.pop(request_id) if b is not None]
        return out
