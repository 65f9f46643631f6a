"""BMC and the explorer must agree: the same verdict for every check at the same bounds.

PROVED and HOLDS(k) both say "no violation within the bounds"; VIOLATED must be found by
both at the same (shortest) depth; an UNKNOWN on either side is a disagreement too, since
it leaves the verdict unconfirmed.
"""

from __future__ import annotations

from checker.trace import HOLDS, PROVED, UNKNOWN, VIOLATED, Verdict


def outcome(v: Verdict) -> str:
    """`holds`, `violated@<depth>` or `unknown`: what two methods must share."""
    if v.verdict in (PROVED, HOLDS):
        return "holds"
    if v.verdict == VIOLATED:
        return f"violated@{v.depth}"
    assert v.verdict == UNKNOWN
    return "unknown"


def disagreements(pairs: list[tuple[Verdict, Verdict]]) -> list[str]:
    """One line per (bmc, explore) pair whose outcomes differ."""
    out = []
    for a, b in pairs:
        if outcome(a) != outcome(b) or outcome(a) == "unknown":
            out.append(f"{a.property} on {a.config}: {a.method} {a.label} (depth {a.depth}), "
                       f"{b.method} {b.label} (depth {b.depth})")
    return out


def pairs(verdicts: list[Verdict]) -> list[tuple[Verdict, Verdict]]:
    """(bmc, explore) verdicts of the same check, in order; a check run by one method only
    (the manifest's `methods`) has no pair."""
    def key(v: Verdict) -> tuple[object, ...]:
        return (v.engine, v.property, v.config, v.params)
    bmc = [v for v in verdicts if v.method != "explore"]
    explored = [v for v in verdicts if v.method == "explore"]
    out = []
    for b in bmc:
        match = next((x for x in explored if key(x) == key(b)), None)
        if match is not None:
            explored.remove(match)
            out.append((b, match))
    return out
