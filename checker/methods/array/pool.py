"""A paged KV pool in the array explorer's key: pool blocks named by first appearance,
a finished request's block hashes as "gone", and request slots in a canonical order
(the reference explorer's `_cache_key` quotient, model/vllm/reference.py).

The rule state of a prefix cache (model/vllm/state.py) holds a global tuple `pool` of
blocks (ref_cnt, block_hash, queue_key, cached_at) and, per request slot, a `table` of
pool index + 1 per block position (0: none). A request's own block hashes are ids of its
slot: 1 + slot * table_len + j for its block j (cache_rules.block_hash); a shared prefix
group's ids come after every slot's. The key made here holds:

- the slots in a canonical order: live slots (a status other than the initial one and a
  retired one) first, by their key columns other than the table (a running request's rank
  among the running, a waiting one's among the waiting: two live slots never have equal
  columns), then the others. Sound because a swap of two arrived slots that also swaps
  their own hash ids commutes with the step from every state inside the engine's
  invariant, and keeps the invariant (z3, `analysis.renamed_swap`, at the proof's slot
  count, as the plain symmetry is proved), so states that differ by a permutation of
  slots (hashes renamed along) have the same futures up to that permutation; the
  properties searched read only observables the swap carries along (the same proof), and
  the search checks the invariant on every state it reaches. Where the proof is not made
  (a pool beyond analysis.RENAMED_SWAP_LIMIT, a property reading arrival_time) the slots
  keep their arrival order and only the two renamings below are applied;
- each pool block by its first appearance: in the live slots' tables (canonical order,
  then block position), then the free queue's cached tail (ref_cnt 0 and a hash, by
  queue_key), then any other block that is not bare (held by no live table: none in a
  reachable state, kept for soundness). A bare free block (ref_cnt 0, no hash) has no name:
  such blocks are interchangeable, because the rules read them only as "free and without
  a hash" and take them in pool-index order (cache_rules.take), so a permutation of the
  pool (every table entry renamed alike) maps a state's successors onto the permuted
  state's, up to which bare block is taken, itself such a permutation; their queue_key is
  read only once they are cached and freed (release gives a new one) and their cached_at
  only among blocks of one hash (cache gives a new one). Per name the key holds the
  block's ref_cnt, its hash (renamed, below) and the name of the previous copy of its
  hash by cache order (a lookup takes the first copy, block_pool.py:62-71), so the free
  queue's order (name order of the tail) and every lookup's choice are kept;
- a hash by what may still look it up: a live slot's own id by that slot's canonical
  index, a shared group's id as it is, and a slot's own id once the slot is no longer live
  as one value, "gone": a slot is never reused (slot index = arrival order) and a finished
  request never looks up again, so no later lookup wants it, and a renaming of such ids
  that keeps which blocks share one (the copies above) maps the step's runs onto each
  other.

The counters (queue_tail, next_cached_at) are out of the key already (analysis.Shape):
a new cache entry or tail entry always takes a larger one than any held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from checker.methods.array.keys import hash_columns
from checker.methods.array.layout import Leaf, Path

_BLOCK_FIELDS = ("ref_cnt", "block_hash", "queue_key", "cached_at")
GONE = -1  # the renamed hash of a slot that is no longer live


@dataclass(frozen=True, slots=True)
class PoolLayout:
    """Where the pool and the block tables are among the state's leaves."""

    blocks: int
    table_len: int
    block_leaves: tuple[tuple[Path, ...], ...]  # per field of _BLOCK_FIELDS, per block
    table_fields: tuple[Path, ...]  # in-slot paths ("table", j)

    @property
    def global_paths(self) -> frozenset[Path]:
        """Every pool leaf."""
        return frozenset(p for per in self.block_leaves for p in per)

    def own_range(self, slot: int) -> tuple[int, int]:
        """The hash ids of a slot's own blocks (cache_rules.block_hash)."""
        return 1 + slot * self.table_len, (slot + 1) * self.table_len


def layout_of(leaves: Sequence[Leaf]) -> PoolLayout | None:
    """The pool's layout, or None when the state has no pool of this shape."""
    paths = {leaf.path for leaf in leaves}
    blocks = sorted({int(p[1]) for p in paths if len(p) == 3 and p[0] == "pool"})
    if not blocks or blocks != list(range(len(blocks))):
        return None
    per_field = tuple(tuple(("pool", b, f) for b in blocks) for f in _BLOCK_FIELDS)
    if not all(p in paths for per in per_field for p in per):
        return None
    table = sorted({leaf.field for leaf in leaves if leaf.slot == 0
                    and len(leaf.field) == 2 and leaf.field[0] == "table"},
                   key=lambda f: int(f[1]))
    if not table or [int(f[1]) for f in table] != list(range(len(table))):
        return None
    return PoolLayout(len(blocks), len(table), per_field, tuple(table))


def rename_hash(h: Any, slot: int, table_len: int, ite: Callable[..., Any],
                and_: Callable[..., Any]) -> Any:
    """A hash id with slots `slot` and `slot + 1`'s own ids swapped (Ops-style: ints or
    z3 terms), as a swap of those two slots renames them."""
    lo, hi = 1 + slot * table_len, (slot + 1) * table_len
    mine = and_(h >= lo, h <= hi)
    theirs = and_(h >= lo + table_len, h <= hi + table_len)
    return ite(mine, h + table_len, ite(theirs, h - table_len, h))


def _rows(x: Any, rows: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=np.int64), (rows,))


def canonical(lay: PoolLayout, n: int, live: np.ndarray, sort_cols: Sequence[Sequence[Any]],
              tables: Sequence[Sequence[Any]], block: Sequence[Sequence[Any]], rows: int,
              reorder: bool = True
              ) -> tuple[np.ndarray, list[list[np.ndarray]], list[np.ndarray]]:
    """The canonical slot order (rows, n) of raw slot indices, each raw slot's table as
    block names + 1 (0: none; a slot that is not live: all 0), and the global columns:
    per name, the block's ref_cnt, renamed hash and previous copy's name + 1.

    `live` is (rows, n) bool; `sort_cols[s]` are slot s's key columns other than the
    table; `tables[s][j]` its table entries; `block[f][b]` field f of pool block b. With
    `reorder` False the slots keep their order (no slot swap proved: the blocks and the
    gone hashes are still named canonically, which needs no proof about the step)."""
    P, L = lay.blocks, lay.table_len
    if reorder:
        # live slots first, then by their own columns (hashed: an order, not an identity)
        h = np.stack([hash_columns([_rows(c, rows) for c in cols]) if cols
                      else np.zeros(rows, dtype=np.uint64) for cols in sort_cols], axis=1)
        order = np.lexsort((h, ~live), axis=1)
    else:
        order = np.broadcast_to(np.arange(n), (rows, n))
    index = np.empty_like(order)
    np.put_along_axis(index, order, np.arange(n)[None, :].repeat(rows, axis=0), axis=1)
    tab = np.stack([np.stack([_rows(tables[s][j], rows) for j in range(L)], axis=1)
                    for s in range(n)], axis=1)  # (rows, n, L): pool index + 1
    tab = np.where(live[:, :, None], tab, 0)
    ref, hsh, qk, ca = (np.stack([_rows(x, rows) for x in block[f]], axis=1)
                        for f in range(4))
    # first appearance: live tables in canonical order, the cached free tail, the rest
    scan_tables = np.take_along_axis(tab, order[:, :, None], axis=1).reshape(rows, n * L) - 1
    free_cached = (ref == 0) & (hsh != 0)
    tail_order = np.lexsort((qk, ~free_cached), axis=1)
    tail = np.where(np.take_along_axis(free_cached, tail_order, axis=1), tail_order, -1)
    rest = np.where((ref != 0) | (hsh != 0), np.arange(P)[None, :], -1)
    scan = np.concatenate([scan_tables, tail, rest], axis=1)
    never = scan.shape[1]
    first = np.stack([np.where((scan == b).any(axis=1), np.argmax(scan == b, axis=1), never)
                      for b in range(P)], axis=1)  # (rows, P)
    named = first < never
    name = np.where(named, (first[:, None, :] < first[:, :, None]).sum(axis=2), -1)
    # hashes renamed: a live slot's own ids by its canonical index, a dead slot's as gone
    own = (hsh >= 1) & (hsh <= n * L)
    owner = np.clip((hsh - 1) // L, 0, n - 1)
    owner_live = np.take_along_axis(live, owner, axis=1)
    owner_index = np.take_along_axis(index, owner, axis=1)
    renamed = np.where(own, np.where(owner_live, 1 + owner_index * L + (hsh - 1) % L, GONE),
                       hsh)
    # the previous copy of a block's hash in cache order (a lookup takes the first)
    prev = np.full((rows, P), -1, dtype=np.int64)
    prev_at = np.full((rows, P), np.iinfo(np.int64).min, dtype=np.int64)
    for b in range(P):
        for c in range(P):
            if b == c:
                continue
            earlier = (hsh[:, c] == hsh[:, b]) & (hsh[:, b] != 0) & (ca[:, c] < ca[:, b])
            better = earlier & (ca[:, c] > prev_at[:, b])
            prev[:, b] = np.where(better, c, prev[:, b])
            prev_at[:, b] = np.where(better, ca[:, c], prev_at[:, b])
    prev_name = np.where(prev >= 0, np.take_along_axis(name, np.maximum(prev, 0), axis=1), -1)
    glob: list[np.ndarray] = []
    for m in range(P):
        at = named & (name == m)  # (rows, P): the block named m, if any
        has = at.any(axis=1)
        b = np.argmax(at, axis=1)[:, None]
        for values in (ref, renamed, prev_name + 1):
            glob.append(np.where(has, np.take_along_axis(values, b, axis=1)[:, 0], -2))
    names = np.where(tab > 0, np.take_along_axis(
        name, np.maximum(tab - 1, 0).reshape(rows, n * L), axis=1).reshape(rows, n, L) + 1, 0)
    slot_tables = [[names[:, s, j] for j in range(L)] for s in range(n)]
    return order, slot_tables, glob
