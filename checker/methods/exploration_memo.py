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
from collections.abc import Sequence
from typing import Any

from checker.methods import proof_cache
from properties.catalogue import Property

ENV = "BATCHPROOF_EXPLORE_MEMO"


def _prop_key(prop: Property) -> tuple[object, ...]:
    """A property by what decides its verdict (its function by name: the sources digest
    covers its code)."""
    return (prop.name, prop.kind, prop.window, prop.params, prop.holds.__module__,
            prop.holds.__qualname__)


def _name(props: Sequence[Property], *question: object) -> str | None:
    """The store's name for the search of `props` on `question`, or None when the memo is
    off."""
    if os.environ.get(ENV) != "1":
        return None
    return proof_cache.key("exploration", tuple(_prop_key(p) for p in props), *question)


def recalled(props: Sequence[Property], *question: object) -> tuple[Any, ...] | None:
    """The kept results of this search (`question`: the family, bounds and options the
    results depend on), or None."""
    name = _name(props, *question)
    results = proof_cache.load_object(name) if name is not None else None
    return results if isinstance(results, tuple) and len(results) == len(props) else None


def keep(props: Sequence[Property], results: tuple[Any, ...], *question: object) -> None:
    """Keep `results` of this search when every one is decided (not "unknown"); a memo
    that cannot be written only costs a search, as a proof store's does."""
    name = _name(props, *question)
    if name is not None and all(r.status != "unknown" for r in results):
        proof_cache.store_object(name, results)
