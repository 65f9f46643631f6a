"""BMC and the explorer must agree: the same verdict for every check at the same bounds.

PROVED and HOLDS(k) both say "no violation within the bounds"; VIOLATED must be found by
both at the same (shortest) depth and with the same least counterexample (both order
workloads by checker/methods/minimize.py's key, the explorer over the runs it keeps).

Each pair is one of three things:
- `agree`: both decided, with the same outcome (and the same least counterexample);
- `disagree`: both decided, with different outcomes or different least counterexamples;
- `inconclusive`: either side is UNKNOWN. Two UNKNOWNs are no disagreement, and one
  UNKNOWN beside a decided verdict leaves that verdict unconfirmed: neither is evidence
  that the two semantics differ, so neither is reported as one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from checker.methods.jobs import JobResult
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED, Verdict

AGREE, DISAGREE, INCONCLUSIVE = "agree", "disagree", "inconclusive"


@dataclass(frozen=True, slots=True)
class Agreement:
    """How the two methods' results on one check compare, and the line that says so."""

    first: JobResult  # the bmc side (theorem, induction or bmc)
    second: JobResult  # the explorer
    status: str  # AGREE | DISAGREE | INCONCLUSIVE
    line: str  # what the text output prints for this pair (empty when they agree)


def outcome(v: Verdict) -> str:
    """`holds`, `violated@<depth>` or `unknown`: what two methods must share."""
    if v.verdict in (PROVED, HOLDS):
        return "holds"
    if v.verdict == VIOLATED:
        return f"violated@{v.depth}"
    assert v.verdict == UNKNOWN
    return "unknown"


def compare(x: JobResult, y: JobResult) -> Agreement:
    """Compare the (bmc, explore) results of one check; see the module docstring."""
    a, b = x.verdict, y.verdict
    head = f"{a.property} on {a.config}: {a.method} {a.label} (depth {a.depth}), " \
           f"{b.method} {b.label} (depth {b.depth})"
    if a.verdict == UNKNOWN and b.verdict == UNKNOWN:
        return Agreement(x, y, INCONCLUSIVE, head + ": neither method decided")
    if UNKNOWN in (a.verdict, b.verdict):
        decided = b if a.verdict == UNKNOWN else a
        return Agreement(x, y, INCONCLUSIVE,
                         f"{head}: the {decided.method} verdict {decided.label} is unconfirmed")
    if outcome(a) != outcome(b):
        return Agreement(x, y, DISAGREE, head)
    if x.counterexample is not None and y.counterexample is not None \
            and x.counterexample.workload != y.counterexample.workload:
        return Agreement(x, y, DISAGREE, head + ": different least counterexamples")
    return Agreement(x, y, AGREE, "")


def compare_all(pairs: Sequence[tuple[JobResult, JobResult]]) -> list[Agreement]:
    """`compare` over every pair, in order."""
    return [compare(x, y) for x, y in pairs]


def disagreements(pairs: Sequence[tuple[JobResult, JobResult]]) -> list[str]:
    """One line per (bmc, explore) pair whose decided outcomes, or counterexamples,
    differ; a pair with an UNKNOWN side is inconclusive, not listed here."""
    return [a.line for a in compare_all(pairs) if a.status == DISAGREE]


def key(v: Verdict) -> tuple[object, ...]:
    """What identifies one check across the two methods."""
    return (v.engine, v.property, v.config, v.params)


def by_check(agreements: Sequence[Agreement]) -> dict[tuple[object, ...], Agreement]:
    """Each agreement under the `row_key` of both its verdicts."""
    return {row_key(r.verdict): a for a in agreements for r in (a.first, a.second)}


def row_key(v: Verdict) -> tuple[object, ...]:
    """What identifies one verdict: the check and the method."""
    return (*key(v), v.method)


def pairs(results: Sequence[JobResult]) -> list[tuple[JobResult, JobResult]]:
    """(bmc, explore) results of the same check, in order; a check run by one method only
    (the manifest's `methods`) has no pair."""
    bmc = [r for r in results if r.verdict.method != "explore"]
    explored = [r for r in results if r.verdict.method == "explore"]
    out = []
    for b in bmc:
        match = next((x for x in explored if key(x.verdict) == key(b.verdict)), None)
        if match is not None:
            explored.remove(match)
            out.append((b, match))
    return out
