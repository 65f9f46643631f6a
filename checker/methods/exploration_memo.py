"""Reference explorations kept between the processes of one CI run (BATCHPROOF_EXPLORE_MEMO).

CI step 4 runs the reference explorer on every manifest entry (`check --method both`), and
step 5's agreement tests (tests/explorer_agreement.py) run it again on the same entries to
compare the array explorer with it: the same search of the same sources twice. With
BATCHPROOF_EXPLORE_MEMO=1, a decided result of `explore.check_many` is kept in the proof
store (checker/methods/proof_cache.py: under a key that digests the question with every
source under model/, properties/ and checker/methods/, in the store's folder, so a test
that patches the rules, which gets an empty store of its own, never reads one), and the
same search by the same sources reads it back. A result with an UNKNOWN is never kept: it
depends on the time limit and the machine. Off by default: a user's repeated `check`
searches again and reports its own time.

The results are pickled (frozen dataclasses, compared whole by the agreement tests:
workloads, configs and stats come back equal, not re-parsed).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checker.methods import proof_cache
from properties.catalogue import Property

ENV = "BATCHPROOF_EXPLORE_MEMO"


def _prop_key(prop: Property) -> tuple[object, ...]:
    """A property by what decides its verdict (its function by name: the sources digest
    covers its code)."""
    return (prop.name, prop.kind, prop.window, prop.params, prop.holds.__module__,
            prop.holds.__qualname__)


def _path(props: Sequence[Property], *question: object) -> Path | None:
    """Where the search of `props` on `question` is kept, or None when the memo is off."""
    if os.environ.get(ENV) != "1":
        return None
    where = proof_cache.cache_dir()
    if where is None:
        return None
    name = proof_cache.key("exploration", tuple(_prop_key(p) for p in props), *question)
    return where / f"{name}.pickle"


def recalled(props: Sequence[Property], *question: object) -> tuple[Any, ...] | None:
    """The kept results of this search (`question`: the family, bounds and options the
    results depend on), or None."""
    path = _path(props, *question)
    if path is None or not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            results = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
        return None  # unreadable: search again
    return results if isinstance(results, tuple) and len(results) == len(props) else None


def keep(props: Sequence[Property], results: tuple[Any, ...], *question: object) -> None:
    """Keep `results` of this search when every one is decided (not "unknown")."""
    path = _path(props, *question)
    if path is None or any(r.status == "unknown" for r in results):
        return
    partial = path.with_suffix(f".{os.getpid()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("wb") as f:
            pickle.dump(results, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)  # whole or not at all, for a reader in another process
    except OSError:
        return  # as the proof store: a memo that cannot be written only costs a search
