"""The text of `check-trace`'s verdicts on one trace: the table (one row per property,
as `check` prints verdicts), each violation with its step, and the run drawn up to the
first violation. `check-trace` prints it for any trace; the live trace report
(checker/cli/live.py) prints it without the drawing."""

from __future__ import annotations

import json

from checker.methods.trace_check import DEPARTS, NOT_CHECKED, VIOLATED, TraceVerdict
from checker.show import text as render
from model import registry as engines
from model.core.types import StepRecord, Workload


def _status(v: TraceVerdict) -> str:
    if v.verdict == NOT_CHECKED:
        return "not checked"
    if v.verdict != VIOLATED:
        return "as expected"
    return "DEPARTS" if v.status == DEPARTS else "known violation"


def render_text(path: str, workload: Workload, records: tuple[StepRecord, ...],
                verdicts: list[TraceVerdict], timeline: bool = True) -> str:
    """The table (one row per property, as `check` prints verdicts), then each
    violation with its step (and, with `timeline`, the step's record and the run drawn up
    to the first violation)."""
    model = engines.get(workload.engine)
    lines = [f"check-trace {path}: {model.title} {model.version}, {len(records)} steps, "
             f"{len(workload.requests)} requests"]
    header = ("property", "verdict", "expected", "status")
    rows = [(v.name, v.label, v.expected or "-", _status(v)) for v in verdicts]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in [header, *rows]]
    violated = [v for v in verdicts if v.verdict == VIOLATED]
    departs = sum(v.status == DEPARTS for v in verdicts)
    lines.append(f"\n{len(verdicts)} properties: {sum(v.verdict == 'HOLDS' for v in verdicts)} "
                 f"hold, {len(violated)} violated ({departs} departing from the manifest), "
                 f"{sum(v.verdict == NOT_CHECKED for v in verdicts)} not checked")
    for v in violated:
        at = v.violated_at
        assert at is not None
        lines.append(f"\n{'departs' if v.status == DEPARTS else 'violated'}: {v.name} at step "
                     f"{at} ({v.why})")
        if timeline:
            lines.append(f"  step {at}: {json.dumps(records[at - 1].to_json())}")
    for v in verdicts:
        if v.verdict == NOT_CHECKED:
            lines.append(f"not checked: {v.name}: {v.detail}")
    if violated and timeline:
        first = min(v.violated_at or 0 for v in violated)
        lines.append("\n" + render.timeline(workload, records[: max(first, 1)],
                                            highlight=first).rstrip())
    return "\n".join(lines)
