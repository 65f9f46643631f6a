"""States as packed integer keys: columns of small ints -> rows of uint64 words, and a
visited set of such rows (exact, or hash-compacted as SPIN's -DHC).

A key column has an offset and a bit width; a row packs its columns into as few 64-bit
words as fit. When a value falls outside its column's range the layout widens and every
stored key is unpacked and packed again (rare: widths start from the first values seen,
with headroom). Deduplication sorts a 64-bit hash of the words (the words themselves when
a key fits one word) and compares the words of equal hashes, so two different states are
never merged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_MIX = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + _MIX
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def hash_rows(words: np.ndarray) -> np.ndarray:
    """A 64-bit hash per row of uint64 words (the word itself for one-word rows)."""
    if words.shape[1] == 1:
        return words[:, 0].copy()
    with np.errstate(over="ignore"):
        h = np.zeros(words.shape[0], dtype=np.uint64)
        for k in range(words.shape[1]):
            h = _splitmix(h ^ words[:, k])
    return h


def hash_columns(cols: Sequence[np.ndarray]) -> np.ndarray:
    """A 64-bit hash per row of int columns (for a canonical order, not for identity)."""
    with np.errstate(over="ignore"):
        h = np.zeros(len(cols[0]) if cols else 0, dtype=np.uint64)
        for c in cols:
            h = _splitmix(h ^ c.astype(np.int64).view(np.uint64))
    return h


@dataclass(frozen=True, slots=True)
class Layout:
    """Offsets and widths of the key columns, and where each lands in the words."""

    lo: tuple[int, ...]
    bits: tuple[int, ...]
    word: tuple[int, ...]
    shift: tuple[int, ...]
    words: int

    @staticmethod
    def fit(lo: Sequence[int], hi: Sequence[int]) -> Layout:
        """Room for [lo, hi] in each column with one spare bit (widths of at least 1)."""
        bits = [max(1, int(h - lo_).bit_length() + 1) for lo_, h in zip(lo, hi, strict=True)]
        word, shift = [], []
        w, s = 0, 0
        for b in bits:
            if b > 64:
                raise ValueError("a key column needs more than 64 bits")
            if s + b > 64:
                w, s = w + 1, 0
            word.append(w)
            shift.append(s)
            s += b
        return Layout(tuple(int(x) for x in lo), tuple(bits), tuple(word), tuple(shift),
                      w + 1 if bits else 1)

    def holds(self, mins: Sequence[int], maxs: Sequence[int]) -> bool:
        """Every column's values fit."""
        return all(m >= lo and x - lo < (1 << b)
                   for m, x, lo, b in zip(mins, maxs, self.lo, self.bits, strict=True))

    def pack(self, cols: Sequence[Any], rows: int) -> np.ndarray:
        """(rows, words) uint64 from one int array (or int) per column."""
        out = np.zeros((rows, self.words), dtype=np.uint64)
        for c, lo, w, s in zip(cols, self.lo, self.word, self.shift, strict=True):
            v = np.asarray(c, dtype=np.int64) - lo
            out[:, w] |= np.broadcast_to(v, (rows,)).astype(np.uint64) << np.uint64(s)
        return out

    def unpack(self, words: np.ndarray) -> list[np.ndarray]:
        """The int64 columns of packed rows."""
        out = []
        for lo, b, w, s in zip(self.lo, self.bits, self.word, self.shift, strict=True):
            mask = np.uint64((1 << b) - 1)
            out.append(((words[:, w] >> np.uint64(s)) & mask).astype(np.int64) + lo)
        return out


class Codec:
    """Keys of states with `slots` request slots: global columns, then per slot the same
    columns, packed as [global words | slot 0 words | slot 1 words | ...]. Under symmetry
    the slot blocks are put in a canonical order: "full" sorts them (by their words when a
    slot fits one word, else by a hash of its words), "priority" is the stable sort by the
    slot column `priority_col` (slots of equal priority keep their order). Column ranges are
    learnt from the values seen; a value outside them makes a wider codec (`widen`)."""

    def __init__(self, glob: Layout, slot: Layout, slots: int, symmetry: str,
                 priority_col: int | None) -> None:
        self.glob, self.slot, self.slots = glob, slot, slots
        self.symmetry, self.priority_col = symmetry, priority_col
        self.words = glob.words + slots * slot.words

    @staticmethod
    def fit(gmin: Sequence[int], gmax: Sequence[int], smin: Sequence[int],
            smax: Sequence[int], slots: int, symmetry: str, priority_col: int | None
            ) -> Codec:
        """A codec with room for these ranges (one spare bit per column)."""
        return Codec(Layout.fit(gmin, gmax), Layout.fit(smin, smax), slots, symmetry,
                     priority_col)

    def holds(self, gmin: Sequence[int], gmax: Sequence[int], smin: Sequence[int],
              smax: Sequence[int]) -> bool:
        """Every value fits."""
        return self.glob.holds(gmin, gmax) and self.slot.holds(smin, smax)

    def encode(self, glob: Sequence[Any], slots: Sequence[Sequence[Any]], rows: int
               ) -> np.ndarray:
        """Packed, canonical keys."""
        gw = self.glob.pack(glob, rows)
        sw = np.stack([self.slot.pack(cols, rows) for cols in slots], axis=1)
        if self.symmetry != "none" and self.slots > 1:
            sw = self._canonical(sw, slots)
        return np.concatenate([gw, sw.reshape(rows, -1)], axis=1)

    def _canonical(self, sw: np.ndarray, slots: Sequence[Sequence[Any]]) -> np.ndarray:
        if self.symmetry == "priority":
            if self.priority_col is None:
                return sw
            pr = np.stack([np.asarray(cols[self.priority_col], dtype=np.int64)
                           for cols in slots], axis=1)
            order = np.argsort(pr, axis=1, kind="stable")
        elif sw.shape[2] == 1:
            return np.sort(sw, axis=1)
        else:
            h = hash_rows(sw.reshape(-1, sw.shape[2])).reshape(sw.shape[:2])
            order = np.argsort(h, axis=1, kind="stable")
        return np.take_along_axis(sw, order[:, :, None], axis=1)

    def decode(self, words: np.ndarray) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """The columns of packed keys (slots in their canonical order)."""
        g = self.glob.words
        glob = self.glob.unpack(words[:, :g])
        slots = [self.slot.unpack(words[:, g + s * self.slot.words:
                                        g + (s + 1) * self.slot.words])
                 for s in range(self.slots)]
        return glob, slots

    def recode(self, words: np.ndarray, old: Codec) -> np.ndarray:
        """Keys packed by `old`, packed by this codec (and put in its canonical order)."""
        glob, slots = old.decode(words)
        return self.encode(glob, slots, len(words))


def first_of_each(words: np.ndarray, order_keys: Sequence[np.ndarray] = ()
                  ) -> np.ndarray:
    """Indices of one row per distinct row: the first in `order_keys` order (lexicographic,
    most significant last, as np.lexsort takes them), else the first in row order."""
    h = hash_rows(words)
    order = np.lexsort((*order_keys, h)) if order_keys else np.argsort(h, kind="stable")
    hs = h[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = hs[1:] != hs[:-1]
    if words.shape[1] > 1 and len(order) > 1:
        same_h = ~starts
        ws = words[order]
        clash = same_h & np.any(ws != np.roll(ws, 1, axis=0), axis=1)
        if clash.any():
            return _exact_first(words, order)
    return order[starts]


def _exact_first(words: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The first row (in `order`) of each distinct row, exactly (hash clash fallback)."""
    ws = np.ascontiguousarray(words[order])
    view = ws.view(np.dtype((np.void, ws.dtype.itemsize * ws.shape[1]))).ravel()
    _, first = np.unique(view, return_index=True)
    return order[first]


class Visited:
    """Every key seen so far (with its node id): sorted runs merged as they grow."""

    def __init__(self, exact: bool = True) -> None:
        self.exact = exact
        self.runs: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]] = []
        self.count = 0

    def lookup(self, words: np.ndarray) -> np.ndarray:
        """Per row, the node id of an equal stored key, or -1."""
        h = hash_rows(words)
        found = np.full(len(h), -1, dtype=np.int64)
        for hs, ws, ids in self.runs:
            pos = np.searchsorted(hs, h)
            pos_c = np.minimum(pos, len(hs) - 1)
            hit = (pos < len(hs)) & (hs[pos_c] == h) & (found < 0)
            if ws is not None and hit.any():
                idx = np.nonzero(hit)[0]
                same = np.all(ws[pos_c[idx]] == words[idx], axis=1)
                # Equal hashes of different keys: look along the run of equal hashes.
                for k in idx[~same]:
                    p = pos_c[k]
                    while p < len(hs) and hs[p] == h[k]:
                        if np.array_equal(ws[p], words[k]):
                            found[k] = ids[p]
                            break
                        p += 1
                hit[idx[~same]] = False
            found[hit] = ids[pos_c[hit]]
        return found

    def add(self, words: np.ndarray, ids: np.ndarray) -> None:
        """Store new keys (not already present) with their node ids."""
        if len(words) == 0:
            return
        h = hash_rows(words)
        order = np.argsort(h, kind="stable")
        self.runs.append((h[order], words[order] if self.exact else None, ids[order]))
        self.count += len(words)
        while len(self.runs) > 1 and len(self.runs[-1][0]) * 2 >= len(self.runs[-2][0]):
            self._merge_last()
        if len(self.runs) > 24:
            self._merge_last()

    def _merge_last(self) -> None:
        (h1, w1, i1), (h2, w2, i2) = self.runs[-2], self.runs[-1]
        h = np.concatenate([h1, h2])
        order = np.argsort(h, kind="stable")
        w = None if w1 is None or w2 is None else np.concatenate([w1, w2])[order]
        self.runs[-2:] = [(h[order], w, np.concatenate([i1, i2])[order])]

    def repack(self, old: Codec, new: Codec) -> None:
        """Re-encode every stored key under a wider codec."""
        if not self.exact:
            raise ValueError("a hash-compacted visited set cannot be re-encoded: give the "
                             "search exact keys, or start it with wider key columns")
        runs = []
        for _, ws, ids in self.runs:
            assert ws is not None
            nw = new.recode(ws, old)
            h = hash_rows(nw)
            order = np.argsort(h, kind="stable")
            runs.append((h[order], nw[order], ids[order]))
        self.runs = runs

    def nbytes(self) -> int:
        """Memory held by the stored keys."""
        return sum(h.nbytes + (0 if w is None else w.nbytes) + i.nbytes
                   for h, w, i in self.runs)
