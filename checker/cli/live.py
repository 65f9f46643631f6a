"""`batchproof check-trace LIVE.jsonl` and `batchproof audit --trace LIVE.jsonl`: a trace
recorded from a running `vllm serve` (docs/live.md), checked by checker/live/verdict.py.

Exit codes: 0 clean (no property the manifest expects to hold is violated, every step
agrees with the reference, every request accounted for); 1 a finding; 2 bad input;
3 UNKNOWN: the trace records something outside the model (the reason is printed), or
the engine made calls the model's step does not have from some step on (the steps before
are checked and printed, clean)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from checker.live.trace import LiveTrace, OutsideModel, load_live
from checker.live.verdict import (
    LiveReport,
    check_live,
    cut_at,
    minimal_workload,
    real_disagrees,
    violates_on_reference,
)
from checker.show.trace_table import render_text
from model.workload import workload_to_json

JSON_SCHEMA = 1


def run_live(args: argparse.Namespace, shrink_divergence: bool = False) -> int:
    """Check the live trace `args.trace`; print the report (or JSON); the exit code.
    `shrink_divergence` (audit --trace): shrink a disagreement with the real Scheduler
    in this process; check-trace only points to it."""
    try:
        trace = load_live(args.trace)
    except OutsideModel as exc:
        print(f"UNKNOWN: outside the model: {exc}")
        return 3
    report = check_live(trace, getattr(args, "property", None) or ())
    if trace.stopped and report.clean:  # clean as far as it goes, which is not the end
        code_if_clean = 3
    else:
        code_if_clean = 0
    minimal, minimal_of = finding_workload(report, shrink_divergence)
    code = code_if_clean if report.clean else 1
    if getattr(args, "json", False):
        json.dump(live_json(args.trace, report, minimal, minimal_of, code), sys.stdout,
                  indent=1)
        sys.stdout.write("\n")
    else:
        print(render_live(args.trace, report, minimal, minimal_of, shrink_divergence))
    return code


def finding_workload(report: LiveReport, shrink_divergence: bool) -> tuple[Any, str]:
    """(the minimal workload of the report's first finding or None, what it shows).
    A disagreement is shrunk with the real Scheduler in this process when
    `shrink_divergence` (it names the code that is wrong: the engine's or the model's);
    otherwise a departing violation is shrunk on the reference, when the reference
    violates it too."""
    trace = report.trace
    if report.divergence is not None and shrink_divergence:
        fails = real_disagrees()
        start = cut_at(trace.workload, report.divergence.step)
        if not fails(start):
            why = getattr(fails, "refused", "") or "is this the vLLM the server ran?"
            return None, ("the in-process Scheduler does not reproduce the live run's "
                          f"disagreement on its first {start.steps} steps ({why})")
        return (minimal_workload(start, fails, report.divergence.step),
                "the real Scheduler and the reference disagree (shrunk with both)")
    if not report.departs:
        return None, ""
    first = min(report.departs, key=lambda v: v.violated_at or 0)
    fails = violates_on_reference(first.property)
    if not fails(trace.workload):
        return None, (f"{first.name}: the reference does not violate it on the trace's "
                      "workload, so the real engine departs from the model there (see "
                      "agreement)")
    return (minimal_workload(trace.workload, fails, first.violated_at or 1),
            f"{first.name} violated (shrunk on the reference)")


def render_live(path: str, report: LiveReport, minimal: Any, minimal_of: str,
                audited: bool) -> str:
    """The properties table, then agreement, accounting and any minimal workload."""
    t = report.trace
    lines = [f"live trace {path}: vLLM {t.vllm_version} {t.scheduler}, "
             f"{len(t.records)} steps, {len(t.workload.requests)} requests"]
    lines += _notes(t)
    # A live run has hundreds of requests: the minimal workload explains a finding, not a
    # drawing of the whole run.
    lines.append(render_text(path, t.workload, t.records, list(report.verdicts),
                             timeline=False))
    lines.append("")
    if report.divergence is None and not report.reference_error:
        lines.append(f"agreement: {report.steps_agreeing}/{len(t.records)} steps agree with "
                     "the reference replayed on the same arrivals, aborts and stops")
    elif report.divergence is not None:
        lines.append(f"agreement: DIVERGES at step {report.divergence.step} of the live run "
                     f"({report.steps_agreeing}/{len(t.records)} steps agree)")
        lines.append(report.divergence.render().rstrip())
        if not audited:
            lines.append("for the minimal workload, run `batchproof audit --trace "
                         f"{path}` where vLLM is installed")
    else:
        lines.append(f"agreement: {report.reference_error}")
    ends = Counter(t.ends.values())
    lines.append("accounting: " + ", ".join(f"{n} {k}" for k, n in sorted(ends.items()))
                 + f"; {len(report.lost)} lost"
                 + (f"; {len(t.late)} arrived after the last step" if t.late else "")
                 + (f"; {len(t.aborted_unseen)} aborted before reaching the scheduler"
                    if t.aborted_unseen else ""))
    if minimal is not None:
        lines.append(f"\nminimal workload ({minimal_of}): {len(minimal.requests)} requests, "
                     f"{minimal.steps} steps")
        lines.append(json.dumps(workload_to_json(minimal)))
    elif minimal_of:
        lines.append(f"\nno minimal workload: {minimal_of}")
    return "\n".join(lines)


def _notes(t: LiveTrace) -> list[str]:
    out = []
    if t.cut_short:
        out.append("note: the trace ends mid-step (the server stopped); its complete "
                   "steps are checked")
    if t.stopped:
        out.append(f"UNKNOWN beyond step {len(t.records)}: outside the model: {t.stopped}; "
                   f"steps 1-{len(t.records)} are checked")
    if t.recorder_error:
        out.append(f"note: the recorder stopped at {t.recorder_error}; the steps before "
                   "are checked")
    return out


def live_json(path: str, report: LiveReport, minimal: Any, minimal_of: str, code: int
              ) -> dict[str, object]:
    """The `--json` document of a live trace, schema 1."""
    t = report.trace
    return {"schema": JSON_SCHEMA, "command": "check-trace", "trace": path, "live": True,
            "vllm_version": t.vllm_version, "scheduler": t.scheduler,
            "steps": len(t.records), "requests": len(t.workload.requests),
            "verdicts": [v.to_json() for v in report.verdicts],
            "agreement": {"steps": len(t.records), "agreeing": report.steps_agreeing,
                          "diverges_at": report.divergence.step
                          if report.divergence is not None else None,
                          "fields": list(report.divergence.fields)
                          if report.divergence is not None else [],
                          "error": report.reference_error},
            "accounting": {"ends": dict(Counter(t.ends.values())), "lost": list(report.lost),
                           "late": len(t.late),
                           "aborted_before_scheduler": list(t.aborted_unseen)},
            "cut_short": t.cut_short, "recorder_error": t.recorder_error,
            "stopped": t.stopped,
            "minimal": workload_to_json(minimal) if minimal is not None else None,
            "minimal_of": minimal_of, "exit_code": code}
