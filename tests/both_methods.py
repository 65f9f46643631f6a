"""The verdicts of `batchproof check --method both` on an engine's default suite, for the
slow tests that assert on them: read from the JSON document that CI's step 4 writes for
every engine (`check --engine all --method both --json-file FILE`, named by
BATCHPROOF_CHECK_BOTH), or, where that is not set, by running the check here. The same
command, once per CI run instead of once per test."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

SHARED = "BATCHPROOF_CHECK_BOTH"


def rows(engine: str, run: Callable[[], tuple[int, dict]]) -> tuple[int, list[dict]]:
    """(exit code, verdict rows of `engine`) of `check --method both` on the default suite:
    from CI step 4's document when BATCHPROOF_CHECK_BOTH names one (its exit code is the
    whole run's), else `run()`'s (exit code, --json document)."""
    shared = os.environ.get(SHARED)
    if shared:
        doc = json.loads(Path(shared).read_text())
        code = doc["summary"]["exit_code"]
    else:
        code, doc = run()
    return code, [r for r in doc["verdicts"] if r["engine"] == engine]
