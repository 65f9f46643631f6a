"""The reference's KV cache: vLLM V1's block pool and full-attention block table, with or
without prefix caching (v0.32.0; P = v1/core/block_pool.py, K = v1/core/kv_cache_manager.py,
T = v1/core/single_type_kv_cache_manager.py, U = v1/core/kv_cache_utils.py).

Blocks in use and cached blocks are modelled one by one, as upstream keeps them: a
reference count, the hash of the full block they hold once cached, and their place in the
free queue. The free queue is ordered: freed blocks without a hash go to its head (reused
first), cached ones to its tail (evicted last, least recently freed first), and allocation
takes from the head, evicting a cached block's hash only when the block is reused
(P:666-700, 774-805).

A block's hash is abstract: the workload contract says which requests share how long a
prefix, so block j of a request is ("g", group, j) when the request's first (j+1) *
block_size prompt tokens are its prefix group's, else ("r", request_id, j), unique to it
(outputs are the request's own too). Equal abstract hashes mean equal whole prefixes, as
upstream's chained hashes do (U:695-725).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from model.core.memo import CopiedByFields


@dataclass(slots=True, eq=False)
class KVBlock(CopiedByFields):
    """One physical block (U:175-238). Mutable: the pool updates it in place."""

    block_id: int
    ref_cnt: int = 0
    block_hash: Hashable | None = None


def null_out(table: list[KVBlock | None], first: int, last: int, past_a_hole: bool
             ) -> list[KVBlock]:
    """Replace table[first:last] by the null block (None), last position first, and return
    the blocks taken out, in that order (the order they are freed in). A position already
    null ends the walk (a sliding window's table, T:698-706: everything before it was
    freed before), or is skipped over when `past_a_hole` (Mamba's align mode, whose
    tables hold nulls between live blocks)."""
    freed: list[KVBlock] = []
    for i in range(last - 1, first - 1, -1):
        block = table[i]
        if block is None:
            if past_a_hole:
                continue
            break
        freed.append(block)
        table[i] = None
    return freed


def copied_tables(blocks: dict[str, list[KVBlock | None]], memo: dict[int, object]
                  ) -> dict[str, list[KVBlock | None]]:
    """Per-request block tables as `copy.deepcopy` copies them: each block once, through
    `memo` (the pool's copy and the other groups' tables reach the same blocks)."""
    return {r: [copy.deepcopy(b, memo) for b in held] for r, held in blocks.items()}


class BlockPool:
    """`BlockPool` (P:157-196): block 0 is the null block, never usable; the others start in
    the free queue.

    The free queue is always a run of blocks without a hash followed by the cached ones in
    least-recently-freed order: blocks without a hash only ever join at the head
    (prepend_n) and cached ones at the tail (append_n), so the queue never mixes them
    (P:774-805). Blocks without a hash are interchangeable (nothing reads their id), so that
    run is kept as a count; each cached block is an object, since its hash, its place and
    the order of copies of one hash steer later decisions.
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        self.enable_caching = enable_caching
        self.num_gpu_blocks = num_gpu_blocks
        self.num_unhashed_free = num_gpu_blocks - 1  # P:185-188: block 0 is the null block
        self.evictable: OrderedDict[int, KVBlock] = OrderedDict()  # the queue's cached tail
        # hash -> {block_id: block} in insertion order; the first is the one a lookup
        # returns (P:35-133: duplicates are kept, get_one_block returns the first).
        self.cached: dict[Hashable, dict[int, KVBlock]] = {}
        self._next_id = num_gpu_blocks

    def __deepcopy__(self, memo: dict[int, object]) -> BlockPool:
        """A copy sharing no block: what `copy.deepcopy` makes (each block copied once,
        through `memo`, whichever of the free queue, the cache or a table reaches it
        first), written out for speed (the explorer copies a scheduler per transition)."""
        twin = object.__new__(BlockPool)
        memo[id(self)] = twin
        twin.__dict__.update(self.__dict__)
        twin.evictable = OrderedDict((i, copy.deepcopy(b, memo))
                                     for i, b in self.evictable.items())
        twin.cached = {h: {i: copy.deepcopy(b, memo) for i, b in copies.items()}
                       for h, copies in self.cached.items()}
        return twin

    @property
    def num_free_blocks(self) -> int:
        """The free-queue length, evictable cached blocks included (P:868-875)."""
        return self.num_unhashed_free + len(self.evictable)

    def get_cached_block(self, block_hash: Hashable) -> KVBlock | None:
        """A block holding this hash, the first cached (P:198-224)."""
        copies = self.cached.get(block_hash)
        return next(iter(copies.values())) if copies else None

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """A prefix hit takes the blocks: ref_cnt + 1, out of the free queue if it was 0
        (P:752-768)."""
        for b in blocks:
            if b.ref_cnt == 0:
                del self.evictable[b.block_id]
            b.ref_cnt += 1

    def get_new_blocks(self, num_blocks: int) -> list[KVBlock]:
        """Pop `num_blocks` from the head: blocks without a hash first, then the least
        recently freed cached ones, which lose their hash (P:666-750)."""
        if num_blocks > self.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        fresh = min(num_blocks, self.num_unhashed_free)
        self.num_unhashed_free -= fresh
        out = [self._new_block() for _ in range(fresh)]
        for _ in range(num_blocks - fresh):
            _, b = self.evictable.popitem(last=False)
            assert b.block_hash is not None and b.ref_cnt == 0
            copies = self.cached[b.block_hash]
            del copies[b.block_id]
            if not copies:
                del self.cached[b.block_hash]
            b.block_hash = None
            b.ref_cnt = 1
            out.append(b)
        return out

    def _new_block(self) -> KVBlock:
        self._next_id += 1
        return KVBlock(self._next_id, ref_cnt=1)

    def cache_block(self, block: KVBlock, block_hash: Hashable) -> None:
        """Give a full block its hash and enter it in the cache (P:226-344, 626-646)."""
        block.block_hash = block_hash
        self.cached.setdefault(block_hash, {})[block.block_id] = block

    def free_blocks(self, ordered: Iterable[KVBlock]) -> None:
        """ref_cnt - 1; a block reaching 0 goes to the head of the free queue when it has no
        hash, to the tail when it is cached, in the order given (P:774-805)."""
        for b in ordered:
            b.ref_cnt -= 1
            if b.ref_cnt > 0:
                continue
            if b.block_hash is None:
                self.num_unhashed_free += 1
            else:
                self.evictable[b.block_id] = b

    def num_cached_blocks(self) -> int:
        """Blocks holding a hash, in use or evictable."""
        return sum(len(copies) for copies in self.cached.values())

    def num_evictable_blocks(self) -> int:
        """Cached blocks nobody holds: free, and hit again until evicted."""
        return len(self.evictable)


class BlockTable:
    """Per request, the blocks it holds and how many of them are cached: the
    `FullAttentionManager`'s req_to_blocks and num_cached_block (T:267-324, 476-589)."""

    def __init__(self, pool: BlockPool, block_size: int) -> None:
        self.pool = pool
        self.block_size = block_size
        self.blocks: dict[str, list[KVBlock]] = {}
        self.num_cached: dict[str, int] = {}

    def __deepcopy__(self, memo: dict[int, object]) -> BlockTable:
        """`copy.deepcopy`'s copy (the pool's copy, each block once), written out for
        speed, as `BlockPool.__deepcopy__`."""
        twin = object.__new__(BlockTable)
        memo[id(self)] = twin
        twin.__dict__.update(self.__dict__)
        twin.pool = copy.deepcopy(self.pool, memo)
        twin.blocks = copied_tables(self.blocks, memo)  # type: ignore[arg-type]
        twin.num_cached = dict(self.num_cached)
        return twin

    def held(self, request_id: str) -> int:
        """Blocks the request holds now."""
        return len(self.blocks.get(request_id, ()))

    def longest_hit(self, hashes: list[Hashable], max_length: int) -> list[KVBlock]:
        """The cached blocks of the longest cached prefix of whole blocks within
        `max_length` tokens (K:268-300, T:733-828)."""
        hit = []
        for h in hashes[: max_length // self.block_size]:
            b = self.pool.get_cached_block(h)
            if b is None:
                break
            hit.append(b)
        return hit

    def num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                               hit: list[KVBlock]) -> int:
        """Blocks the free queue must give for `num_tokens` slots: cdiv(num_tokens,
        block_size) less those already held; a hit block counts only when someone already
        holds it, an evictable one comes out of the free queue like a new block
        (T:175-265)."""
        required = -(-num_tokens // self.block_size)
        if request_id in self.blocks:  # T:229-235, the request holds blocks already
            return max(required - self.held(request_id), 0)
        evictable = sum(1 for b in hit if b.ref_cnt == 0)
        return max(required - len(hit), 0) + evictable

    def allocate(self, request_id: str, hit: list[KVBlock], num_tokens: int) -> None:
        """Adopt the hit blocks, then allocate new ones up to `num_tokens` slots
        (K:581-600; T:267-324, 369-410)."""
        if request_id not in self.blocks:
            self.pool.touch(hit)
            self.blocks[request_id] = list(hit)
            self.num_cached[request_id] = len(hit)
        table = self.blocks[request_id]
        required = -(-num_tokens // self.block_size)
        if required > len(table):
            table += self.pool.get_new_blocks(required - len(table))

    def cache(self, request_id: str, hashes: list[Hashable], num_tokens: int) -> None:
        """Cache the request's full blocks up to `num_tokens` tokens (T:476-533, 830-847)."""
        if not self.pool.enable_caching:
            return
        num_full = num_tokens // self.block_size
        done = self.num_cached.get(request_id, 0)
        if done >= num_full:
            return
        for j in range(done, num_full):
            self.pool.cache_block(self.blocks[request_id][j], hashes[j])
        self.num_cached[request_id] = num_full

    def free(self, request_id: str) -> None:
        """Free the request's blocks, last block first (K:620-629, T:562-589)."""
        self.pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))

    def pop_blocks_for_free(self, request_id: str) -> list[KVBlock]:
        """Forget the request's blocks without returning them to the pool (K:651-663): the
        caller frees them later, last block first."""
        self.num_cached.pop(request_id, None)
        return self.blocks.pop(request_id, [])

    def num_blocks_to_allocate_in_groups(self, request_id: str, num_tokens: int,
                                         hit: list[KVBlock], total_computed_tokens: int = 0,
                                         admission: bool = False) -> int:
        """`num_blocks_to_allocate` under the coordinator's signature (the tables of
        `GroupTables` take the computed tokens and the admission cap): full attention skips
        no tokens and has no cap, so both are ignored (T:712-723)."""
        del total_computed_tokens, admission
        return self.num_blocks_to_allocate(request_id, num_tokens, hit)

    def remove_skipped_blocks(self, request_id: str, processed_tokens: int) -> None:
        """Full attention skips no tokens: nothing to free (T:672-702, 712-723)."""
        del request_id, processed_tokens


# ---------------------------------------------------------------------------------------
# Several KV cache groups (the hybrid KV cache manager), without prefix caching
# ---------------------------------------------------------------------------------------
# C = v1/core/kv_cache_coordinator.py, I = v1/kv_cache_interface.py. With prefix caching off
# vLLM runs KVCacheCoordinatorNoPrefixCache (C:995-1008): every group's manager draws from
# the one BlockPool, no block is ever hashed, and no request ever enters a manager's
# num_cached_block (only add_local_computed_blocks and cache_blocks fill it, neither runs
# without caching: K:581-600, C:336-340), so each manager's count takes its general path
# (T:226-262). Prefix caching beside such groups is model/vllm/align_cache.py (full
# attention and Mamba in align mode); beside a sliding window it is refused by the
# config's validation.


class GroupTable:
    """One KV cache group's `SingleTypeKVCacheManager` without prefix caching: per request
    its block table, a null block (None here) where a block was freed and replaced
    (T:638-670). Full attention skips no tokens and has no admission cap."""

    def __init__(self, pool: BlockPool, block_size: int) -> None:
        self.pool = pool
        self.block_size = block_size
        self.blocks: dict[str, list[KVBlock | None]] = {}

    def __deepcopy__(self, memo: dict[int, object]) -> GroupTable:
        """`copy.deepcopy`'s copy, written out for speed (`BlockPool.__deepcopy__`); the
        subclasses add only numbers."""
        twin = object.__new__(type(self))
        memo[id(self)] = twin
        twin.__dict__.update(self.__dict__)
        twin.pool = copy.deepcopy(self.pool, memo)
        twin.blocks = copied_tables(self.blocks, memo)
        return twin

    def skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens whose blocks attention no longer reads (T:712-723: none)."""
        del num_computed_tokens
        return 0

    def slot_tokens(self, num_tokens: int) -> int:
        """The slots the table is sized for when a request needs `num_tokens` (Mamba adds
        its speculative blocks here)."""
        return num_tokens

    def admission_cap(self) -> int | None:
        """The per-request cap of the full-sequence admission check (None: no cap)."""
        return None

    def held(self, request_id: str) -> int:
        """Real blocks the request holds (null blocks left out)."""
        return sum(b is not None for b in self.blocks.get(request_id, ()))

    def length(self, request_id: str) -> int:
        """The table's length, null blocks included (what the allocation counts read)."""
        return len(self.blocks.get(request_id, ()))

    def num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                               total_computed_tokens: int, admission: bool) -> int:
        """T:175-265 without a prefix hit: the blocks for cdiv(slots, block_size) (capped at
        admission for groups that recycle blocks, T:216-230) beyond the table's length or
        the skipped blocks, whichever is more (T:245-252)."""
        required = -(-self.slot_tokens(num_tokens) // self.block_size)
        cap = self.admission_cap()
        if admission and cap is not None:
            required = min(required, cap)
        skipped = self.skipped_tokens(total_computed_tokens) // self.block_size
        return max(required - max(skipped, self.length(request_id)), 0)

    def remove_skipped_blocks(self, request_id: str, processed_tokens: int) -> None:
        """Free the blocks wholly before the skipped tokens, last first, replacing each by
        the null block and stopping at one already null (T:638-710)."""
        skipped = self.skipped_tokens(processed_tokens)
        if skipped <= 0 or request_id not in self.blocks:
            return
        table = self.blocks[request_id]
        last = min(skipped // self.block_size, len(table))
        self.pool.free_blocks(null_out(table, 0, last, past_a_hole=False))

    def allocate(self, request_id: str, num_tokens: int) -> None:
        """Append new blocks up to cdiv(slots, block_size) (T:369-410)."""
        table = self.blocks.setdefault(request_id, [])
        required = -(-self.slot_tokens(num_tokens) // self.block_size)
        if required > len(table):
            table += self.pool.get_new_blocks(required - len(table))

    def free(self, request_id: str) -> None:
        """Free the request's real blocks, last first (T:562-589; the pool skips the null
        block, P:774-805)."""
        table = self.blocks.pop(request_id, [])
        self.pool.free_blocks(b for b in reversed(table) if b is not None)


class SlidingWindowTable(GroupTable):
    """`SlidingWindowManager` (T:933-1170): tokens before the window's start are skipped,
    and the full-sequence admission check caps a request at the window's blocks
    (`SlidingWindowSpec.max_admission_blocks_per_request`, I:859-885, set by T:2613-2628)."""

    def __init__(self, pool: BlockPool, block_size: int, window: int, cap: int) -> None:
        super().__init__(pool, block_size)
        self.window = window
        self.cap = cap

    def skipped_tokens(self, num_computed_tokens: int) -> int:
        """num_computed_tokens - window + 1, at least 0 (T:1135-1170; no extra retained
        tokens: multi-module MTP is outside the model)."""
        return max(0, num_computed_tokens - self.window + 1)

    def admission_cap(self) -> int | None:
        return self.cap


class MambaTable(GroupTable):
    """`MambaManager` in mamba_cache_mode "none" (T:1415-1960): its block size is
    max_model_len (model_executor/models/config.py:705-709), the table is sized for
    `num_speculative_blocks` (= k, model_executor/layers/mamba/abstract.py:76-82) blocks
    more (T:1690-1697, 1783-1788), and only the last computed token's state is kept
    (T:1954-1960). A request thus holds 1 + k blocks from its first allocation until it is
    freed or preempted."""

    def __init__(self, pool: BlockPool, block_size: int, num_speculative_blocks: int) -> None:
        super().__init__(pool, block_size)
        self.num_speculative_blocks = num_speculative_blocks

    def skipped_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens - 1

    def slot_tokens(self, num_tokens: int) -> int:
        return num_tokens + self.block_size * self.num_speculative_blocks


class GroupTables:
    """`KVCacheCoordinatorNoPrefixCache` (C:80-420 with C:995-1008): the groups' tables over
    one pool, asked in group order. Same interface as `BlockTable` where the reference
    calls it."""

    def __init__(self, pool: BlockPool, tables: list[GroupTable]) -> None:
        self.pool = pool
        self.tables = tables

    def __deepcopy__(self, memo: dict[int, object]) -> GroupTables:
        """`copy.deepcopy`'s copy, written out for speed; a subclass's other attributes
        are deep-copied the generic way."""
        twin = object.__new__(type(self))
        memo[id(self)] = twin
        for name, value in self.__dict__.items():
            twin.__dict__[name] = copy.deepcopy(value, memo)
        return twin

    @property
    def blocks(self) -> dict[str, list[KVBlock | None]]:
        """The first group's tables (prefix-cache facts read them; caching is off here)."""
        return self.tables[0].blocks

    def held(self, request_id: str) -> int:
        """Real blocks the request holds, summed over the groups."""
        return sum(t.held(request_id) for t in self.tables)

    def group_key(self, request_id: str) -> tuple[tuple[int, int], ...]:
        """Per group (table length, real blocks): what steers the request's later counts."""
        return tuple((t.length(request_id), t.held(request_id)) for t in self.tables)

    def held_by_group(self, request_id: str) -> tuple[int, ...]:
        """Real blocks the request holds in each group."""
        return tuple(t.held(request_id) for t in self.tables)

    def longest_hit(self, hashes: list[Hashable], max_length: int) -> list[KVBlock]:
        """No prefix caching: no hit."""
        del hashes, max_length
        return []

    def num_blocks_to_allocate_in_groups(self, request_id: str, num_tokens: int,
                                         hit: list[KVBlock], total_computed_tokens: int = 0,
                                         admission: bool = False) -> int:
        """The sum of every group's count (C:190-263)."""
        assert not hit
        return sum(t.num_blocks_to_allocate(request_id, num_tokens, total_computed_tokens,
                                            admission) for t in self.tables)

    def remove_skipped_blocks(self, request_id: str, processed_tokens: int) -> None:
        """Each group frees what fell out of its attention (C:429-445)."""
        for t in self.tables:
            t.remove_skipped_blocks(request_id, processed_tokens)

    def allocate(self, request_id: str, hit: list[KVBlock], num_tokens: int) -> None:
        """Each group allocates up to its slots, in group order (C:303-334)."""
        assert not hit
        for t in self.tables:
            t.allocate(request_id, num_tokens)

    def cache(self, request_id: str, hashes: list[Hashable], num_tokens: int) -> None:
        """No prefix caching: nothing is cached (C:351-374 skip every manager)."""
        del request_id, hashes, num_tokens

    def free(self, request_id: str) -> None:
        """Each group frees the request's blocks, in group order (C:400-409)."""
        for t in self.tables:
            t.free(request_id)
