"""The properties, with their parameters, on which both explorers' symmetry tests compare
the verdicts with and without the reduction (tests/test_explore.py for the explorer,
tests/test_array_explore.py for the array explorer): the same cases, so that the two
explorers are held to the same claim."""

from __future__ import annotations

from typing import Any

CASES: list[tuple[str, dict[str, Any]]] = [
    ("starvation", {"k": 2}),
    ("head_of_line", {"k": 2}),
    ("running_before_waiting", {}),
    ("preemption_storm", {"m": 0}),
]
