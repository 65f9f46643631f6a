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
    """Offsets and widths of some key columns, and where each lands in the words."""

    lo: tuple[int, ...]
    bits: tuple[int, ...]
    word: tuple[int, ...]
    shift: tuple[int, ...]
    words: int

    @staticmethod
    def fit(lo: Sequence[int], hi: Sequence[int]) -> Layout:
        """Room for [lo, hi] in each column (widths of at least 1 bit; a column never
        straddles two words, so a word holds at most 63 bits)."""
        bits = [max(1, int(h - lo_).bit_length()) for lo_, h in zip(lo, hi, strict=True)]
        word, shift = [], []
        w, s = 0, 0
        for b in bits:
            if b > 63:
                raise ValueError("a key column needs more than 63 bits")
            if s + b > 63:
                w, s = w + 1, 0
            word.append(w)
            shift.append(s)
            s += b
        return Layout(tuple(int(x) for x in lo), tuple(bits), tuple(word), tuple(shift),
                      w + 1 if bits else 1)

    @property
    def width(self) -> int:
        """Bits of a one-word layout."""
        return max((s + b for s, b in zip(self.shift, self.bits, strict=True)), default=1)

    def holds(self, mins: Sequence[int], maxs: Sequence[int]) -> bool:
        """Every column's values fit."""
        return all(m >= lo and x - lo < (1 << b)
                   for m, x, lo, b in zip(mins, maxs, self.lo, self.bits, strict=True))

    def code(self, cols: Sequence[Any], word: int = 0) -> Any:
        """One word of the columns as int64, at their broadcast shape (ints fold)."""
        acc: Any = 0
        for c, lo, w, s in zip(cols, self.lo, self.word, self.shift, strict=True):
            if w != word:
                continue
            if isinstance(c, (bool, int)):
                acc = acc + ((int(c) - lo) << s)
            else:
                acc = acc + np.left_shift(np.asarray(c).astype(np.int64), s)
                acc = acc - (lo << s)
        return acc

    def pack(self, cols: Sequence[Any], rows: int) -> np.ndarray:
        """(rows, words) uint64 from one int array (or int) per column."""
        return np.stack([np.broadcast_to(np.asarray(self.code(cols, w), dtype=np.int64),
                                         (rows,)).view(np.uint64)
                         for w in range(self.words)], axis=1)

    def unpack(self, words: np.ndarray) -> list[np.ndarray]:
        """The int64 columns of packed rows."""
        out = []
        for lo, b, w, s in zip(self.lo, self.bits, self.word, self.shift, strict=True):
            mask = np.uint64((1 << b) - 1)
            out.append(((words[:, w] >> np.uint64(s)) & mask).astype(np.int64) + lo)
        return out


class Codec:
    """Keys of states with `slots` request slots: global columns, then per slot the same
    columns. Each slot's columns are one code; under symmetry the slot codes are put in a
    canonical order: "full" sorts them, "priority" is the stable sort by the slot column
    `priority_col` (slots of equal priority keep their order). When the global columns
    and a slot each fit one word, the key is the bit string [global | slot 0 | slot 1 | ...]
    cut into as few words as it needs. Column ranges are learnt from the values seen; a
    value outside them makes a wider codec (`Search._fit`) and every stored key is
    re-encoded (`recode`)."""

    def __init__(self, glob: Layout, slot: Layout, slots: int, symmetry: str,
                 priority_col: int | None) -> None:
        self.glob, self.slot, self.slots = glob, slot, slots
        self.symmetry, self.priority_col = symmetry, priority_col
        self.compact = glob.words == 1 and slot.words == 1
        if self.compact:
            self.fields = [glob.width] + [slot.width] * slots
            self.words = -(-sum(self.fields) // 64)
        else:
            self.words = glob.words + slots * slot.words

    @staticmethod
    def fit(gmin: Sequence[int], gmax: Sequence[int], smin: Sequence[int],
            smax: Sequence[int], slots: int, symmetry: str, priority_col: int | None
            ) -> Codec:
        """A codec with room for these ranges."""
        return Codec(Layout.fit(gmin, gmax), Layout.fit(smin, smax), slots, symmetry,
                     priority_col)

    def holds(self, gmin: Sequence[int], gmax: Sequence[int], smin: Sequence[int],
              smax: Sequence[int]) -> bool:
        """Every value fits."""
        return self.glob.holds(gmin, gmax) and self.slot.holds(smin, smax)

    def encode(self, glob: Sequence[Any], slots: Sequence[Sequence[Any]], rows: int
               ) -> np.ndarray:
        """Packed, canonical keys of columns of `rows` rows."""
        def take(x: Any) -> Any:
            return x
        return self.encode_wide(glob, slots, take, rows)

    def encode_wide(self, glob: Sequence[Any], slots: Sequence[Sequence[Any]],
                    take: Any, rows: int) -> np.ndarray:
        """Packed, canonical keys of columns at their broadcast shapes: the codes are
        computed at those shapes, then `take` gathers each code's rows."""
        def rows_of(x: Any) -> np.ndarray:
            return np.broadcast_to(np.asarray(take(x), dtype=np.int64), (rows,))

        prio = None
        if self.symmetry == "priority" and self.priority_col is not None:
            prio = np.stack([rows_of(cols[self.priority_col]) for cols in slots], axis=1)
        if self.compact:
            g = rows_of(self.glob.code(glob))
            sc = np.stack([rows_of(self.slot.code(cols)) for cols in slots], axis=1)
            sc = self._canonical(sc[:, :, None], prio)[:, :, 0]
            return self._stream(g, sc)
        gw = np.stack([rows_of(self.glob.code(glob, w)) for w in range(self.glob.words)],
                      axis=1)
        sw = np.stack([np.stack([rows_of(self.slot.code(cols, w))
                                 for w in range(self.slot.words)], axis=1)
                       for cols in slots], axis=1)
        sw = self._canonical(sw, prio)
        return np.concatenate([gw, sw.reshape(rows, -1)], axis=1).view(np.uint64)

    def encode_codes(self, glob: Any, slots: Sequence[Any], prio: Sequence[Any] | None,
                     rows: int) -> np.ndarray:
        """Packed, canonical keys of a compact codec from the global code and each slot's
        code (int64 per row, as `Layout.code` makes them)."""
        g = np.broadcast_to(np.asarray(glob, dtype=np.int64), (rows,))
        sc = np.stack([np.broadcast_to(np.asarray(c, dtype=np.int64), (rows,)) for c in slots],
                      axis=1)
        p = None if prio is None else np.stack(
            [np.broadcast_to(np.asarray(x, dtype=np.int64), (rows,)) for x in prio], axis=1)
        return self._stream(g, self._canonical(sc[:, :, None], p)[:, :, 0])

    def _canonical(self, sw: np.ndarray, prio: np.ndarray | None) -> np.ndarray:
        if self.symmetry == "none" or self.slots < 2:
            return sw
        if self.symmetry == "priority":
            if prio is None:
                return sw
            order = np.argsort(prio, axis=1, kind="stable")
        elif sw.shape[2] == 1:
            return np.sort(sw, axis=1)
        else:
            h = hash_rows(sw.reshape(-1, sw.shape[2]).view(np.uint64)).reshape(sw.shape[:2])
            order = np.argsort(h, axis=1, kind="stable")
        return np.take_along_axis(sw, order[:, :, None], axis=1)

    def _stream(self, g: np.ndarray, sc: np.ndarray) -> np.ndarray:
        """The bit string [g | sc[:, 0] | sc[:, 1] | ...] as uint64 words."""
        out = np.zeros((len(g), self.words), dtype=np.uint64)
        offset = 0
        for k, b in enumerate(self.fields):
            v = (g if k == 0 else sc[:, k - 1]).view(np.uint64)
            w, sh = divmod(offset, 64)
            out[:, w] |= v << np.uint64(sh)
            if sh + b > 64:
                out[:, w + 1] |= v >> np.uint64(64 - sh)
            offset += b
        return out

    def _unstream(self, words: np.ndarray) -> list[np.ndarray]:
        out, offset = [], 0
        for b in self.fields:
            w, sh = divmod(offset, 64)
            v = words[:, w] >> np.uint64(sh)
            if sh + b > 64:
                v = v | (words[:, w + 1] << np.uint64(64 - sh))
            out.append((v & np.uint64((1 << b) - 1)).reshape(-1, 1))
            offset += b
        return out

    def decode(self, words: np.ndarray) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """The columns of packed keys (slots in their canonical order)."""
        if self.compact:
            parts = self._unstream(words)
            return self.glob.unpack(parts[0]), [self.slot.unpack(p) for p in parts[1:]]
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
    if not order_keys and words.shape[1] == 1:
        return np.unique(words[:, 0], return_index=True)[1]
    h = hash_rows(words)
    order = np.lexsort((*order_keys, h)) if order_keys else np.argsort(h, kind="stable")
    hs = h[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = hs[1:] != hs[:-1]
    if words.shape[1] > 1 and len(order) > 1:
        dup = np.nonzero(~starts)[0]
        if len(dup) and np.any(words[order[dup]] != words[order[dup - 1]]):
            return _exact_first(words, order)
    return order[starts]


def _exact_first(words: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The first row (in `order`) of each distinct row, exactly (hash clash fallback)."""
    ws = np.ascontiguousarray(words[order])
    view = ws.view(np.dtype((np.void, ws.dtype.itemsize * ws.shape[1]))).ravel()
    _, first = np.unique(view, return_index=True)
    return order[first]


class Visited:
    """Every key seen so far (with its node id): sorted runs merged as they grow.

    A run holds each key's 64-bit hash, the key's words but the last, and the ids. The
    last word need not be stored: `hash_rows` ends with splitmix64 of (the hash of the
    other words) xor (the last word), and splitmix64 is a bijection of 64-bit words, so
    two keys with equal hashes and equal other words have equal last words (a one-word
    key is its own hash). Equality stays exact; `words_of` gives the last word back.
    Runs are merged pairwise (a linear merge of two sorted runs) while the newer is at
    least half the older, but not past `merge_cap` keys, so that a merge never needs a
    second copy of the whole set: the set is then a few runs of at most that size."""

    merge_cap = 1 << 25

    def __init__(self, exact: bool = True) -> None:
        self.exact = exact
        self.runs: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]] = []
        self.count = 0

    def lookup(self, words: np.ndarray) -> np.ndarray:
        """Per row, the node id of an equal stored key, or -1."""
        h = hash_rows(words)
        head = words[:, :-1]
        found = np.full(len(h), -1, dtype=np.int64)
        for hs, ws, ids in self.runs:
            pos = np.searchsorted(hs, h)
            pos_c = np.minimum(pos, len(hs) - 1)
            hit = (pos < len(hs)) & (hs[pos_c] == h) & (found < 0)
            if ws is not None and ws.shape[1] and hit.any():
                idx = np.nonzero(hit)[0]
                same = np.all(ws[pos_c[idx]] == head[idx], axis=1)
                # Equal hashes of different keys: look along the run of equal hashes.
                for k in idx[~same]:
                    p = pos_c[k]
                    while p < len(hs) and hs[p] == h[k]:
                        if np.array_equal(ws[p], head[k]):
                            found[k] = ids[p]
                            break
                        p += 1
                hit[idx[~same]] = False
            found[hit] = ids[pos_c[hit]]
        return found

    def add(self, words: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Store new keys (not already present), with their node ids if given (a lookup
        then finds the id; without ids it finds 0)."""
        if len(words) == 0:
            return
        h = hash_rows(words)
        order = np.argsort(h, kind="stable")
        kept_ids = (np.zeros(len(h), dtype=np.int8) if ids is None else ids[order])
        self.runs.append((h[order], words[order, :-1] if self.exact else None, kept_ids))
        self.count += len(words)
        self._settle()

    def absorb(self, other: Visited, id_offset: int | None = None) -> None:
        """Take over another set's runs (keys not already here): its ids plus
        `id_offset`, or no ids (0) when None."""
        for hs, ws, ids in other.runs:
            ids = (np.zeros(len(hs), dtype=np.int8) if id_offset is None
                   else ids.astype(np.int64) + id_offset)
            self.runs.append((hs, ws, ids))
            self.count += len(hs)
            self._settle()
        other.runs, other.count = [], 0

    def _settle(self) -> None:
        while (len(self.runs) > 1 and len(self.runs[-1][0]) * 2 >= len(self.runs[-2][0])
               and len(self.runs[-1][0]) + len(self.runs[-2][0]) <= self.merge_cap):
            self._merge_last()
        if len(self.runs) > 24:
            self._merge_last()

    def _merge_last(self) -> None:
        (h1, w1, i1), (h2, w2, i2) = self.runs[-2], self.runs[-1]
        # where each of the newer run's keys lands (after the older run's equal hashes)
        at = np.searchsorted(h1, h2, side="right") + np.arange(len(h2))
        older = np.ones(len(h1) + len(h2), dtype=bool)
        older[at] = False

        def merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            dtype = np.result_type(a, b)
            out = np.empty((len(a) + len(b), *a.shape[1:]), dtype=dtype)
            out[older], out[at] = a, b
            return out
        w = None if w1 is None or w2 is None else merged(w1, w2)
        self.runs[-2:] = [(merged(h1, h2), w, merged(i1, i2))]

    def words_of(self, run: int, rows: slice = slice(None)) -> np.ndarray:
        """The whole keys of one run, or of some of its rows (the last word recovered
        from the hash)."""
        hs, ws, _ = self.runs[run]
        assert ws is not None
        hs, ws = hs[rows], ws[rows]
        if ws.shape[1] == 0:
            return hs.reshape(-1, 1).copy()
        last = _unsplitmix(hs) ^ hash_rows_chain(ws)
        return np.concatenate([ws, last.reshape(-1, 1)], axis=1)

    def repack(self, old: Codec, new: Codec, piece: int = 1 << 20) -> None:
        """Re-encode every stored key under a wider codec: a run at a time, `piece` keys
        at a time (decoding a whole run's columns at once would take more memory than the
        set)."""
        if not self.exact:
            raise ValueError("a hash-compacted visited set cannot be re-encoded: give the "
                             "search exact keys, or start it with wider key columns")
        for k in range(len(self.runs)):
            size = len(self.runs[k][0])
            parts = [new.recode(self.words_of(k, slice(p, p + piece)), old)
                     for p in range(0, size, piece)]
            nw = np.concatenate(parts) if len(parts) > 1 else parts[0]
            del parts
            h = hash_rows(nw)
            order = np.argsort(h, kind="stable")
            ids = self.runs[k][2][order]
            self.runs[k] = (h[order], nw[order, :-1], ids)
            del nw, h, order

    def nbytes(self) -> int:
        """Memory held by the stored keys."""
        return sum(h.nbytes + (0 if w is None else w.nbytes) + i.nbytes
                   for h, w, i in self.runs)


def hash_rows_chain(words: np.ndarray) -> np.ndarray:
    """The splitmix chain of `hash_rows` over rows of one or more words (without the
    one-word shortcut): hash_rows(w) == splitmix(chain(w[:, :-1]) ^ w[:, -1]) for rows of
    two or more words."""
    with np.errstate(over="ignore"):
        h = np.zeros(words.shape[0], dtype=np.uint64)
        for k in range(words.shape[1]):
            h = _splitmix(h ^ words[:, k])
    return h


def _unxorshift(x: np.ndarray, s: int) -> np.ndarray:
    out, k = x.copy(), s
    while k < 64:
        out ^= x >> np.uint64(k)
        k += s
    return out


_M1_INV = np.uint64(pow(int(_M1), -1, 1 << 64))
_M2_INV = np.uint64(pow(int(_M2), -1, 1 << 64))


def _unsplitmix(x: np.ndarray) -> np.ndarray:
    """The inverse of _splitmix (each of its steps is a bijection of uint64)."""
    with np.errstate(over="ignore"):
        x = _unxorshift(x, 31) * _M2_INV
        x = _unxorshift(x, 27) * _M1_INV
        return _unxorshift(x, 30) - _MIX
