"""Counterexamples and verdicts: the values that checking methods produce."""

from __future__ import annotations

from dataclasses import dataclass

from model.core.types import Workload

PROVED, HOLDS, VIOLATED, UNKNOWN = "PROVED", "HOLDS", "VIOLATED", "UNKNOWN"
# A verdict's standing against the manifest (the `status` of `check --json`); ANSWERED is
# a decided verdict of a question without a manifest expectation (the verdict is the
# answer: exit 0 for PROVED / HOLDS, 1 for VIOLATED).
AS_EXPECTED, DEPARTS, INCONCLUSIVE = "as_expected", "departs", "inconclusive"
ANSWERED = "answered"


@dataclass(frozen=True, slots=True)
class Counterexample:
    """A concrete run that violates a property: the workload that drives it (config,
    requests, EOS choices, number of steps), and for a lasso the step index the run loops
    back to (state `loop` equals the final state)."""

    engine: str
    property: str
    params: tuple[tuple[str, int], ...]
    config_name: str
    workload: Workload
    method: str
    bounds: tuple[tuple[str, int], ...]
    violated_at: int  # 1-based step where the property fails (the last step)
    loop: int | None = None
    minimal: bool = True  # False when minimisation ran out of time


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one check: engine x property x config x method."""

    engine: str
    property: str
    config: str
    method: str
    verdict: str
    depth: int
    seconds: float
    expected: str | None = None
    counterexample: str | None = None
    detail: str = ""
    params: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        """PROVED / HOLDS(k) / VIOLATED / UNKNOWN as the table prints it."""
        return f"HOLDS({self.depth})" if self.verdict == HOLDS else self.verdict

    @property
    def as_expected(self) -> bool:
        """The verdict meets the manifest: PROVED meets an expected HOLDS too."""
        if self.expected is None:
            return self.verdict != UNKNOWN
        if self.expected == HOLDS:
            return self.verdict in (HOLDS, PROVED)
        if self.expected == PROVED and self.method == "explore":
            # The explorer only bounds; the proof is the other method's to give.
            return self.verdict == HOLDS
        return self.verdict == self.expected

    @property
    def status(self) -> str:
        """`inconclusive` for UNKNOWN (whatever was expected); `answered` for a decided
        verdict with no expectation (a question: its verdict is the answer); else
        `as_expected` or `departs` (exit 3, 0 or 1 by the verdict, 0, 1)."""
        if self.verdict == UNKNOWN:
            return INCONCLUSIVE
        if self.expected is None:
            return ANSWERED
        return AS_EXPECTED if self.as_expected else DEPARTS

    def to_json(self, agreement: str | None = None) -> dict[str, object]:
        """The `--json` object for this verdict; `agreement` is how the other method's
        verdict on the same check compares (`check --method both`), else None."""
        return {
            "engine": self.engine, "property": self.property, "config": self.config,
            "method": self.method, "verdict": self.verdict, "label": self.label,
            "depth": self.depth, "seconds": round(self.seconds, 3), "expected": self.expected,
            "as_expected": self.as_expected, "status": self.status,
            "agreement": agreement, "counterexample": self.counterexample,
            "detail": self.detail, "params": dict(self.params),
        }
