"""BMC and the explorer must agree: the same verdict for every check at the same bounds.

PROVED and HOLDS(k) both say "no violation within the bounds"; VIOLATED must be found by
both at the same (shortest) depth and with the same least counterexample (both order
workloads by checker/methods/minimize.py's key, the explorer over the runs it keeps); an UNKNOWN
on either side is a disagreement too, since it leaves the verdict unconfirmed.
"""

from __future__ import annotations

from collections.abc import Sequence

from checker.methods.jobs import JobResult
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED, Verdict


def outcome(v: Verdict) -> str:
    """`holds`, `violated@<depth>` or `unknown`: what two methods must share."""
    if v.verdict in (PROVED, HOLDS):
        return "holds"
    if v.verdict == VIOLATED:
        return f"violated@{v.depth}"
    assert v.verdict == UNKNOWN
    return "unknown"


def disagreements(pairs: Sequence[tuple[JobResult, JobResult]]) -> list[str]:
    """One line per (bmc, explore) pair whose outcomes, or counterexamples, differ."""
    out = []
    for x, y in pairs:
        a, b = x.verdict, y.verdict
        head = f"{a.property} on {a.config}: {a.method} {a.label} (depth {a.depth}), " \
               f"{b.method} {b.label} (depth {b.depth})"
        if outcome(a) != outcome(b) or outcome(a) == "unknown":
            out.append(head)
        elif x.counterexample is not None and y.counterexample is not None \
                and x.counterexample.workload != y.counterexample.workload:
            out.append(head + ": different least counterexamples")
    return out


def pairs(results: Sequence[JobResult]) -> list[tuple[JobResult, JobResult]]:
    """(bmc, explore) results of the same check, in order; a check run by one method only
    (the manifest's `methods`) has no pair."""
    def key(r: JobResult) -> tuple[object, ...]:
        v = r.verdict
        return (v.engine, v.property, v.config, v.params)
    bmc = [r for r in results if r.verdict.method != "explore"]
    explored = [r for r in results if r.verdict.method == "explore"]
    out = []
    for b in bmc:
        match = next((x for x in explored if key(x) == key(b)), None)
        if match is not None:
            explored.remove(match)
            out.append((b, match))
    return out
