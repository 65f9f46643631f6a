"""Proofs kept on disk between processes and runs, keyed on the sources they read.

A proof that took minutes (the prefix-cache pool's invariant on tiny_cached: about two)
is paid once per machine, not once per `check` worker and run: its result is stored under
a key that digests the question (its family and bounds, as `repr`) with every source file
the proof reads (model/, properties/, checker/methods/) and z3's version. Any edit there
gives a new key, so a stored result is only ever read back by the same code asking the
same question.

Where: $BATCHPROOF_PROOF_CACHE, else $XDG_CACHE_HOME/batchproof/proofs
(~/.cache/batchproof/proofs); BATCHPROOF_PROOF_CACHE=off turns it off. A decided result
(a proof, or a refutation the solver showed) is stored under its question. A result that a
solver's limit left undecided is stored only where that limit is deterministic (z3's
resource count, `rlimit`, never wall time: a loaded machine must not store what a quiet
one decides), the caller puts the limit in the question and marks the result with
`mark_undecided`: a repeat of the same question at the same limit by the same sources then
reads "undecided at N units" back (`undecided`) instead of paying the limit again, and
stays undecided (a reduction left unproved stays off); a larger limit, or any edit of the
sources, asks anew."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import z3

ROOT = Path(__file__).resolve().parents[2]
#: The folders whose sources a proof reads.
SOURCES = ("model", "properties", "checker/methods")
OFF = "off"

_disabled = 0


@lru_cache(maxsize=1)
def sources_key() -> str:
    """A digest of every source a proof or a search reads: the model, the properties (and
    manifests) and the checking methods (read once per process)."""
    digest = hashlib.sha256()
    for part in SOURCES:
        for path in sorted((ROOT / part).rglob("*")):
            if path.suffix in (".py", ".toml") and path.is_file():
                digest.update(str(path.relative_to(ROOT)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_home() -> Path:
    """batchproof's cache folder: $XDG_CACHE_HOME/batchproof (~/.cache/batchproof)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "batchproof"


def cache_dir() -> Path | None:
    """Where proofs are kept, or None when the cache is off."""
    chosen = os.environ.get("BATCHPROOF_PROOF_CACHE")
    if _disabled or chosen == OFF:
        return None
    return Path(chosen) if chosen else cache_home() / "proofs"


def key(kind: str, *question: object) -> str:
    """The key of a `kind` of proof of `question` (objects with a complete, stable repr)
    by the current sources."""
    text = repr((kind, sources_key(), z3.get_version_string(), question))
    return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def load(name: str) -> dict[str, Any] | None:
    """The stored result of `key` `name`, or None (not stored, unreadable, or off)."""
    where = cache_dir()
    if where is None:
        return None
    try:
        value = json.loads((where / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def store(name: str, value: dict[str, Any]) -> None:
    """Keep `value` under `name`; a cache that cannot be written is skipped silently (the
    proof stands; only the next run pays it again)."""
    _write(f"{name}.json", json.dumps(value, sort_keys=True).encode())


def load_object(name: str) -> Any:
    """What `store_object` kept under `name`, or None (not stored, unreadable, or off)."""
    where = cache_dir()
    if where is None:
        return None
    try:
        return pickle.loads((where / f"{name}.pickle").read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None


def store_object(name: str, value: Any) -> None:
    """Keep `value` (pickled: a result whose dataclasses must come back equal, not
    re-parsed) under `name`, skipped silently as `store` is."""
    _write(f"{name}.pickle", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _write(file_name: str, data: bytes) -> None:
    """Write `data` to the store's `file_name` whole or not at all (parallel workers may
    race), or not at all when the store is off or cannot be written."""
    where = cache_dir()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        partial = where / f".{file_name}.{os.getpid()}.tmp"
        partial.write_bytes(data)
        partial.replace(where / file_name)
    except OSError:
        return


#: The field of a stored result that a time limit left partly undecided.
UNDECIDED = "undecided"


def mark_undecided(value: dict[str, Any], count: int, rlimit: int) -> dict[str, Any]:
    """`value` marked as computed with `count` solver answers undecided at `rlimit` of z3's
    resource units each (`count` 0: `value` as it is). The key it is stored under must hold
    the limit."""
    if count <= 0:
        return value
    return {**value, UNDECIDED: {"count": count, "rlimit": rlimit}}


def undecided(value: dict[str, Any]) -> int:
    """How many solver answers a stored result left undecided (0: every one decided)."""
    mark = value.get(UNDECIDED)
    if not isinstance(mark, dict):
        return 0
    count = mark.get("count", 0)
    return count if isinstance(count, int) and count > 0 else 0


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Neither read nor write the cache inside (a test that patches the rules)."""
    global _disabled
    _disabled += 1
    try:
        yield
    finally:
        _disabled -= 1
