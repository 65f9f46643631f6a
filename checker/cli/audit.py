"""`batchproof audit`: drive the real scheduler of the engine installed in this
environment (a release, or your checkout installed with `pip install -e`) through the
stored counterexamples, BMC's witnesses and the conformance generator's modes; check
every catalogue property on each real trace, compare it step by step with the
reference, and catch any exception the engine raises. Findings are grouped by cause (the
rule at which the real engine and the reference part), each shrunk to a minimal workload
and printed as soon as it is found, while the audit goes on; the summary with every
group's final counts comes at the end (checker/conformance/audit.py).

Exit codes: 0 clean; 1 a finding (a divergence, a new property violation, a crash);
2 bad usage, or the engine's real scheduler is not available here; 3 inconclusive
(nothing found, but the time limit stopped the audit or every workload was skipped)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TextIO

from checker.cli.check import _check_writable, _writing
from checker.config.flags import bounded_int, bounded_seconds
from checker.conformance import audit
from checker.conformance.audit import (
    CRASH,
    DIVERGENCE,
    DRIVER_ERROR,
    VIOLATION,
    Finding,
    Head,
    Report,
)
from checker.show import svg
from checker.show import timeline as tl
from checker.show.sources import token_budget
from model.core.errors import InputError
from model.core.types import StepRecord, Workload
from model.workload import workload_to_json

# bump it when the --json shape changes meaning (2: findings are groups by cause, with
# `cause` and `symptoms`; `refused`)
JSON_SCHEMA = 2
MAX_COUNT = 1_000_000
MAX_STEPS = 1_000
SHOWN_SKIPPED = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof audit`."""
    parser.add_argument("--trace", metavar="LIVE.jsonl",
                        help="audit a trace recorded from a running vllm serve "
                        "(BATCHPROOF_TRACE, docs/live.md) instead of random workloads: "
                        "its properties, every step against the reference, and a "
                        "disagreement shrunk with the vLLM this process imports")
    parser.add_argument("--vllm", metavar="PATH",
                        help="audit the vLLM at PATH instead of the one `import vllm` finds: "
                        "a source checkout's root (no build needed) or a tree holding vllm/ "
                        "(an overlay, python -m checker.conformance.vllm_overlay), run over "
                        "this environment's dependencies on the CPU; the first line names it")
    parser.add_argument("--engine", default="vllm-v1",
                        help="the engine whose real scheduler is audited: vllm-v1 "
                        "(default) or sglang")
    parser.add_argument("--seed", type=bounded_int(0, 2**63 - 1),
                        help="first seed of the random workloads (default: a fresh one, "
                        "printed; give a fixed seed in CI)")
    parser.add_argument("--count", type=bounded_int(0, MAX_COUNT), default=100,
                        help="random workloads per mode (default 100)")
    parser.add_argument("--steps", type=bounded_int(1, MAX_STEPS), default=30,
                        help="steps of each random workload (default 30)")
    parser.add_argument("--modes", metavar="LIST",
                        help="comma-separated generator modes (default: every mode of the "
                        "engine's harness; vllm-v1: those of checker/conformance/modes.py)")
    parser.add_argument("--sources", metavar="LIST", default="counterexamples,witnesses,random",
                        help="comma-separated: counterexamples (the stored ones), witnesses "
                        "(BMC's, cached), random (default: all three); counterexamples and "
                        "random are audited in the order listed, witnesses last")
    parser.add_argument("--property", action="append", metavar="NAME",
                        help="check only this property on the real traces (repeatable; "
                        "default every property the engine's manifest names)")
    parser.add_argument("--witness-timeout", type=bounded_seconds(3600.0), default=10.0,
                        metavar="S", help="seconds per BMC witness search (default 10)")
    parser.add_argument("--jobs", type=bounded_int(1, 256), default=2,
                        help="processes for the witness searches (default 2)")
    parser.add_argument("--no-cache", action="store_true",
                        help="search the BMC witnesses again instead of reading them from "
                        "the cache ($XDG_CACHE_HOME/batchproof)")
    parser.add_argument("--shrink-calls", type=bounded_int(0, 100_000), default=400,
                        metavar="N", help="real runs a shrink may take per finding (default "
                        "400; 0: report findings unshrunk)")
    parser.add_argument("--timeout", type=bounded_seconds(86_400.0), default=20.0,
                        metavar="S", help="seconds the real engine may take on one workload "
                        "before it is a crash (a hang; default 20)")
    parser.add_argument("--time-limit", type=bounded_seconds(86_400.0), metavar="S",
                        help="start no workload after S seconds (an audit stopped by it with "
                        "nothing found is inconclusive, exit 3)")
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop at the first workload with a finding (still shrunk)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--junit", metavar="FILE",
                        help="also write JUnit XML: one testcase per source and per finding")
    parser.add_argument("--html", metavar="FILE",
                        help="also write an HTML report: real and reference timelines side "
                        "by side for each finding")
    parser.add_argument("--save", metavar="DIR",
                        help="write each finding's minimal workload and real trace (a "
                        "check-trace document) to DIR")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress line on stderr (shown only on a terminal)")


def _list(text: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def run(args: argparse.Namespace) -> int:
    """Run the audit; print the summary or JSON; write the files asked for."""
    if args.vllm:
        use_vllm_tree(args.vllm, args.engine)
    if args.trace:
        from checker.cli.live import run_live

        return run_live(args, shrink_divergence=True)
    for flag in ("junit", "html"):
        if getattr(args, flag):
            _check_writable(f"--{flag}", getattr(args, flag))
    if args.save and Path(args.save).exists() and not Path(args.save).is_dir():
        raise InputError(f"--save {args.save} is a file; give a folder")
    fresh = args.seed is None
    seed = int.from_bytes(os.urandom(4), "big") if fresh else args.seed
    options = audit.Options(
        engine=args.engine, seed=seed, count=args.count, steps=args.steps,
        modes=_list(args.modes), sources=_list(args.sources),
        properties=tuple(args.property or ()), witness_timeout_s=args.witness_timeout,
        jobs=args.jobs, cache_dir=None if args.no_cache else audit.default_cache_dir(),
        shrink_calls=args.shrink_calls, timeout_s=args.timeout,
        time_limit_s=args.time_limit or 0.0, fail_fast=args.fail_fast)
    line = _ProgressLine(sys.stderr, show=not args.quiet and not args.json)
    out = sys.stdout
    shown: list[Finding] = []

    def start(head: Head) -> None:
        if not args.json:
            line.clear()
            out.write("\n".join(head_lines(head, fresh)) + "\n")
            out.flush()

    def found(finding: Finding) -> None:
        shown.append(finding)
        if not args.json:
            line.clear()
            print_finding(finding, len(shown), out)

    try:
        report = audit.audit(options, progress=line.say, on_start=start, on_finding=found)
    finally:
        line.close()
    code = audit.exit_code(report)
    if args.json:
        json.dump(json_document(report, code, fresh), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n".join(summary_lines(report, code)))
    if args.junit:
        _writing("--junit", args.junit, lambda: Path(args.junit).write_text(
            render_junit(report), encoding="utf-8"))
    if args.html:
        _writing("--html", args.html, lambda: Path(args.html).write_text(
            render_html(report, code, fresh), encoding="utf-8"))
    if args.save:
        _writing("--save", args.save, lambda: save_findings(report, Path(args.save)))
    return code


class _ProgressLine:
    """One overwritten status line on a terminal, at most ten redraws a second."""

    def __init__(self, stream: TextIO, show: bool) -> None:
        self._stream = stream
        self._show = show and getattr(stream, "isatty", lambda: False)()
        self._last = 0.0

    def say(self, text: str) -> None:
        now = time.monotonic()
        if self._show and now - self._last > 0.1:
            self._last = now
            self._stream.write(f"\r\x1b[Kaudit: {text[:100]}")
            self._stream.flush()

    def clear(self) -> None:
        """Wipe the line before other output (it is redrawn by the next `say`)."""
        if self._show:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._last = 0.0

    def close(self) -> None:
        if self._show:
            self._stream.write("\r\x1b[K")
            self._stream.flush()


def use_vllm_tree(path: str, engine: str) -> Path:
    """Put the vLLM tree at `path` first on this process's import path and on its
    workers' (PYTHONPATH), as the conformance harness runs an overlay. InputError when
    there is no vllm package there, the engine is not vLLM, or vLLM is already imported
    here (the tree would not be the one audited)."""
    root = Path(path).expanduser().resolve()
    if root.name == "vllm" and (root / "__init__.py").is_file():
        root = root.parent
    if not (root / "vllm" / "__init__.py").is_file():
        raise InputError(f"--vllm {path}: no vllm package there; give a source checkout's "
                         "root or a tree holding vllm/ (python -m "
                         "checker.conformance.vllm_overlay VERSION DIR builds one)")
    if not engine.startswith("vllm"):
        raise InputError(f"--vllm is for vLLM; --engine is {engine}")
    if "vllm" in sys.modules:
        raise InputError(f"--vllm {path}: vLLM is already imported in this process; run "
                         "batchproof audit --vllm in a fresh process")
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    # A source checkout has no build metadata saying "cpu" (none, or an sdist's
    # vllm.egg-info with the bare version), so vLLM's platform detection
    # (platforms/__init__.py:174-203 in 0.32.0) finds no platform and the engine's config
    # fails to infer a device. The audit drives the scheduler on the CPU whatever the tree,
    # so say so unless the caller did; the tree's compiled extensions (a checkout has
    # none) are not loaded by the scheduler.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return root


# ----------------------------------------------------------------------- text

def version_line(report: Report | Head) -> str:
    """The installed version and the model's pinned one; when they differ, what that
    means for a divergence."""
    line = (f"version: {report.title} {report.installed} installed ({report.location}); "
            f"the model is pinned to {report.pinned}")
    if "@" in report.engine:  # an older release the model has as rule switches
        line = (f"version: {report.title} {report.installed} installed ({report.location}); "
                f"the model follows it as {report.engine} (that release's rule switches)")
    if not report.same_version:
        line += (f"; they differ, so a divergence may be an intended change of "
                 f"{report.installed} that the model does not follow yet")
    return line


def _seed_line(report: Report | Head, fresh: bool) -> str:
    how = (f"fresh; repeat this audit with --seed {report.seed}" if fresh
           else "given with --seed")
    return f"seed: {report.seed} ({how})"


def _sources_line(report: Report) -> str:
    o = report.options
    parts = []
    if "counterexamples" in o.sources:
        parts.append(f"{report.sources.get('counterexamples', 0)} stored counterexamples")
    if "witnesses" in o.sources:
        how = "cached" if report.witnesses_cached else f"{report.timing.witnesses:.1f} s"
        unknown = (f", {len(report.witness_unknown)} hit the time limit"
                   if report.witness_unknown else "")
        parts.append(f"{report.sources.get('witnesses', 0)} BMC witnesses "
                     f"({report.witness_searches} searches, {how}{unknown})")
    if "random" in o.sources:
        parts.append(f"{report.sources.get('random', 0)} random workloads (modes "
                     f"{', '.join(report.modes)}; {o.count} each, {o.steps} steps)")
    return "sources: " + ", ".join(parts)


def _throughput(report: Report) -> str:
    t = report.timing
    per_workload = t.engine + t.batchproof
    rate = report.audited / per_workload if per_workload > 0 else 0.0
    share = 100.0 * t.engine / per_workload if per_workload > 0 else 0.0
    return (f"audited {report.audited} workloads ({report.steps} steps) in "
            f"{per_workload:.1f} s, {rate:.1f} workloads/s: {t.engine:.1f} s in the real "
            f"engine ({share:.0f}%), {t.batchproof:.1f} s in batchproof (reference, "
            f"comparison, properties); shrinking {t.shrink:.1f} s, start-up {t.startup:.1f} s, "
            f"in all {t.total:.1f} s")


def head_lines(head: Report | Head, fresh: bool) -> list[str]:
    """What is audited, printed before the first workload: the engine with its version and
    the path it is imported from (what --vllm chose), the version line and the seed line."""
    return [f"batchproof audit: {head.title} {head.installed}'s real scheduler at "
            f"{head.location}", version_line(head), _seed_line(head, fresh)]


def summary_lines(report: Report, code: int) -> list[str]:
    """What is printed after the last workload: the sources, the throughput, what was
    skipped or refused, the known violations and each finding group's final counts."""
    lines = [_sources_line(report), _throughput(report)]
    if report.skipped:
        lines.append(f"skipped {len(report.skipped)} workload(s) the engine refuses:")
        lines += [f"  {label}: {_clip(why)}" for label, why in report.skipped[:SHOWN_SKIPPED]]
        if len(report.skipped) > SHOWN_SKIPPED:
            lines.append(f"  ... and {len(report.skipped) - SHOWN_SKIPPED} more")
    if report.refused:
        lines.append(f"not compared: {len(report.refused)} workload(s) the reference refuses "
                     "as input (not a finding about the engine), the first: "
                     f"{report.refused[0][0]}: {_clip(report.refused[0][1], 160)}")
    lines.append(f"properties checked on every real trace: {len(report.properties)}")
    if report.expected:
        lines.append("expected violations (the manifest records them, the reference shows "
                     "them at the same step): " + ", ".join(
                         f"{name} ({n})" for name, n in report.expected.items()))
    if report.stopped:
        lines.append(f"stopped early: {report.stopped}")
    if not report.findings:
        verdict = ("inconclusive (exit 3)" if code == 3 else "none: the real scheduler agrees "
                   "with the reference on every step and breaks no property it should hold")
        lines.append(f"findings: {verdict}")
        return lines
    first = (f"; the first printed {report.first_finding_s:.1f} s after the start"
             if report.first_finding_s is not None else "")
    lines.append(f"findings: {len(report.findings)} group(s) by cause (exit 1){first}")
    lines += [f"  {group_line(i, f)}" for i, f in enumerate(report.findings, start=1)]
    return lines


def group_line(i: int, f: Finding) -> str:
    """`[1] scheduler.py:912 in Scheduler.schedule: 42 workload(s); follow-ons: ...`."""
    where = f.cause.headline if f.cause is not None else f.title
    follow = f.follow_ons
    folded = ("; folded under it: " + ", ".join(f"{k} ({n})" for k, n in follow.items())
              if follow else "")
    return (f"[{i}] {_clip(where, 160)}: {f.count} workload(s), {f.symptoms.get(f.own, 0)} "
            f"with the {_clip(f.own, 80)}{folded}")


def _own(f: Finding) -> str:
    return "driver error" if f.kind == DRIVER_ERROR else f.kind


def print_finding(finding: Finding, number: int, stream: TextIO) -> None:
    """Print finding `number` to `stream` at once (flushed), a blank line after it: what
    the CLI calls for each finding as the audit finds it."""
    stream.write("\n".join([*finding_lines(number, finding), ""]) + "\n")
    stream.flush()


def _size(requests: int, steps: int) -> str:
    return f"{requests} request(s) x {steps} step(s)"


def finding_lines(i: int, f: Finding) -> list[str]:
    """One finding as text: title; where the real engine and the reference part (the
    rule's lines as installed, the line they part at marked `>`) or the rules involved;
    where it was first seen; the minimal workload and the detail."""
    lines = [f"[{i}] {_own(f)}: {f.title}"]
    if f.cause is not None:
        c = f.cause
        lines.append(f"    {c.detail}")
        lines.append(f"    {c.span}, as installed:")
        width = len(str(c.lines[-1][0])) if c.lines else 1
        lines += [f"    {'>' if n == c.line else ' '} {n:>{width}} | {text}"
                  for n, text in c.lines]
        for _, reference, rules in c.rows[:1]:
            lines.append(f"    in the model: reference {reference}, rules {rules} "
                         f"(docs/rules_{_folder(f)}.md)")
    else:
        for upstream, reference, rules in f.rules:
            lines.append(f"    rule involved: {upstream}  (reference {reference}, rules "
                         f"{rules}; docs/rules_{_folder(f)}.md)")
    lines.append(f"    first seen on workload {f.first_index} of the audit ({f.first.label})")
    shrunk = (f"shrunk from {_size(*f.original_size)} to "
              f"{_size(len(f.workload.requests), f.workload.steps)}" if f.shrunk
              else "not shrunk")
    lines.append(f"    minimal workload ({shrunk}):")
    lines.append("    " + json.dumps(workload_to_json(f.workload)))
    lines += ["    " + line for line in f.text.rstrip("\n").split("\n")]
    return lines


def _folder(f: Finding) -> str:
    from model import registry

    return registry.get(f.workload.engine).folder


# ----------------------------------------------------------------------- JSON

def _records(records: Sequence[StepRecord] | None) -> list[dict[str, object]] | None:
    return None if records is None else [r.to_json() for r in records]


def finding_json(f: Finding) -> dict[str, object]:
    """The `--json` object of one finding."""
    return {
        "kind": f.kind, "signature": f.signature, "title": f.title, "count": f.count,
        "first": {"source": f.first.source, "label": f.first.label, "seed": f.first.seed,
                  "index": f.first_index},
        "step": f.step,
        "rules": [{"upstream": a, "reference": b, "rules": c} for a, b, c in f.rules],
        "workload": workload_to_json(f.workload), "shrunk": f.shrunk,
        "original": {"requests": f.original_size[0], "steps": f.original_size[1]},
        "real": _records(f.real), "reference": _records(f.reference),
        "reference_error": f.reference_error or None, "facts": dict(f.facts), "text": f.text,
        "cause": cause_json(f.cause) if f.cause is not None else None,
        "symptoms": dict(f.symptoms),
    }


def cause_json(c: audit.Cause) -> dict[str, object]:
    """The `--json` object of a finding's cause."""
    return {"key": c.key, "how": c.how, "file": c.file, "function": c.function,
            "line": c.line, "statement": c.statement, "span": c.span,
            "lines": [{"line": n, "text": t} for n, t in c.lines], "detail": c.detail,
            "step": c.step}


def json_document(report: Report, code: int, fresh: bool) -> dict[str, object]:
    """The `--json` document, schema 1."""
    t = report.timing
    per_workload = t.engine + t.batchproof
    kinds = {k: sum(f.kind == k for f in report.findings)
             for k in (DIVERGENCE, VIOLATION, CRASH, DRIVER_ERROR)}
    return {
        "schema": JSON_SCHEMA, "command": "audit", "engine": report.engine,
        "version": {"installed": report.installed, "location": report.location,
                    "pinned": report.pinned, "same": report.same_version,
                    "line": version_line(report)},
        "seed": report.seed, "fresh_seed": fresh, "modes": list(report.modes),
        "count": report.options.count, "steps_per_workload": report.options.steps,
        "properties": list(report.properties),
        "sources": dict(report.sources),
        "witnesses": {"searches": report.witness_searches, "cached": report.witnesses_cached,
                      "unknown": list(report.witness_unknown)},
        "skipped": [{"label": a, "why": b} for a, b in report.skipped],
        "refused": [{"label": a, "why": b} for a, b in report.refused],
        "expected_violations": dict(report.expected),
        "findings": [finding_json(f) for f in report.findings],
        "summary": {"audited": report.audited, "steps": report.steps,
                    "skipped": len(report.skipped), "refused": len(report.refused),
                    "findings": len(report.findings),
                    **{f"{k}s": n for k, n in kinds.items()}, "stopped": report.stopped or None,
                    "exit_code": code},
        "timing": {"engine_s": round(t.engine, 3), "batchproof_s": round(t.batchproof, 3),
                   "shrink_s": round(t.shrink, 3), "witnesses_s": round(t.witnesses, 3),
                   "startup_s": round(t.startup, 3), "total_s": round(t.total, 3),
                   "first_finding_s": round(report.first_finding_s, 3)
                   if report.first_finding_s is not None else None,
                   "workloads_per_s": round(report.audited / per_workload, 2)
                   if per_workload > 0 else None,
                   "engine_share": round(t.engine / per_workload, 3)
                   if per_workload > 0 else None},
    }


# ---------------------------------------------------------------------- JUnit

def render_junit(report: Report) -> str:
    """JUnit XML: one testsuite for the engine; a passing testcase per source audited,
    a failure per divergence or new violation, an error per crash, and a skipped case
    when the audit stopped early."""
    root = ET.Element("testsuites", name="batchproof audit")
    suite = ET.SubElement(root, "testsuite", name=f"audit {report.engine}")
    per_source = report.timing.engine + report.timing.batchproof
    for source, n in report.sources.items():
        case = ET.SubElement(suite, "testcase", classname=report.engine,
                             name=f"{source} ({n} workloads)",
                             time=f"{per_source * n / max(report.audited, 1):.3f}")
        ET.SubElement(case, "system-out").text = version_line(report)
    for i, f in enumerate(report.findings, start=1):
        case = ET.SubElement(suite, "testcase", classname=report.engine,
                             name=f"[{i}] {f.kind}: {f.title}"[:200], time="0.000")
        tag = "error" if f.kind in (CRASH, DRIVER_ERROR) else "failure"
        ET.SubElement(case, tag, type=f.kind, message=f"{f.title}; first: {f.first.label}"
                      ).text = "\n".join(finding_lines(i, f))
    if report.stopped:
        case = ET.SubElement(suite, "testcase", classname=report.engine, name="audit stopped")
        ET.SubElement(case, "skipped", message=report.stopped)
    cases = suite.findall("testcase")
    counts = {"tests": len(cases),
              "failures": sum(c.find("failure") is not None for c in cases),
              "errors": sum(c.find("error") is not None for c in cases),
              "skipped": sum(c.find("skipped") is not None for c in cases)}
    for element in (suite, root):
        for k, n in counts.items():
            element.set(k, str(n))
        element.set("time", f"{report.timing.total:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


# ----------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1600px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}pre{font-size:12px;background:#f8f8f8;padding:8px;overflow-x:auto}
.ok{color:#1a7f37;font-weight:bold}.bad{color:#cf222e;font-weight:bold}
.unknown{color:#9a6700;font-weight:bold}.muted{color:#666}
.finding{border:1px solid #ddd;padding:8px 16px;margin:16px 0}
.sides{display:flex;gap:16px;align-items:flex-start}
.sides figure{margin:0;flex:1 1 0;min-width:0;overflow-x:auto}
figcaption{font-weight:bold;margin-bottom:4px}
"""


def _timeline_svg(workload: Workload, records: Sequence[StepRecord] | None, title: str,
                  subtitle: str, step: int | None, ids: str) -> str:
    if records is None:
        return f'<p class="muted">{escape(subtitle)}</p>'
    budget = token_budget(workload.engine, workload.config)
    drawn = tl.from_run(workload, records, budget, title=title, subtitle=subtitle,
                        violated_at=step)
    return svg.render(drawn, ids=ids)


def _finding_html(i: int, f: Finding) -> list[str]:
    real_title = "real engine" + (" (up to the crash)" if f.kind in (CRASH, DRIVER_ERROR) else "")
    ref_sub = (f"the reference raised {f.reference_error}" if f.reference is None
               else "model/<engine>/reference.py")
    out = [f'<section class="finding" id="finding-{i}">',
           f"<h2>[{i}] {escape(f.kind)}: {escape(f.title)}</h2>",
           f"<p>seen on {f.count} workload(s); first: <code>{escape(f.first.label)}</code> "
           f"(workload {f.first_index} of the audit); minimal workload "
           f"{escape(_size(len(f.workload.requests), f.workload.steps))}"
           + (f", shrunk from {escape(_size(*f.original_size))}" if f.shrunk else "")
           + "</p>"]
    if f.cause is not None:
        c = f.cause
        out.append(f"<p>{escape(c.detail)}</p><pre>" + "\n".join(
            f"{'&gt;' if n == c.line else ' '} {n} | {escape(text)}" for n, text in c.lines)
            + f"</pre><p class=\"muted\">{escape(c.span)}, as installed</p>")
    if f.follow_ons:
        out.append("<p>folded under it: " + escape(", ".join(
            f"{k} ({n})" for k, n in f.follow_ons.items())) + "</p>")
    if f.rules:
        out.append("<table><tr><th>rule involved: upstream file:line</th><th>reference "
                   "function</th><th>rules function</th></tr>")
        out += [f"<tr><td><code>{escape(a)}</code></td><td><code>{escape(b)}</code></td>"
                f"<td><code>{escape(c)}</code></td></tr>" for a, b, c in f.rules]
        out.append("</table>")
    out += ['<div class="sides">',
            f"<figure><figcaption>{escape(real_title)}</figcaption>"
            + _timeline_svg(f.workload, f.real, "real engine", f.first.label, f.step,
                            f"f{i}-real-") + "</figure>",
            "<figure><figcaption>reference</figcaption>"
            + _timeline_svg(f.workload, f.reference, "reference", ref_sub, f.step,
                            f"f{i}-ref-") + "</figure>",
            "</div>",
            f"<pre>{escape(f.text)}</pre>",
            "<details><summary>minimal workload (JSON)</summary>"
            f"<pre>{escape(json.dumps(workload_to_json(f.workload), indent=1))}</pre>"
            "</details>", "</section>"]
    return out


def render_html(report: Report, code: int, fresh: bool) -> str:
    """One self-contained page (inline CSS and SVG, no script): the summary lines and,
    for each finding, the real and reference timelines side by side."""
    cls = "bad" if report.findings else "unknown" if code == 3 else "ok"
    verdict = (f"{len(report.findings)} finding(s)" if report.findings
               else "inconclusive" if code == 3 else "no findings")
    head = [version_line(report), _seed_line(report, fresh), _sources_line(report),
            _throughput(report)]
    if report.expected:
        head.append("expected violations: " + ", ".join(
            f"{k} ({n})" for k, n in report.expected.items()))
    body = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            "<title>batchproof audit report</title>", f"<style>{_CSS}</style></head><body>",
            f"<h1>batchproof audit: {escape(report.title)}</h1>",
            f'<p class="{cls}" id="summary">{escape(verdict)} (exit {code})</p>',
            "<ul>", *(f"<li>{escape(line)}</li>" for line in head), "</ul>"]
    for i, f in enumerate(report.findings, start=1):
        body += _finding_html(i, f)
    body.append("</body></html>")
    return "\n".join(body) + "\n"


# ----------------------------------------------------------------------- files

def trace_document(workload: Workload, records: Sequence[StepRecord], version: str
                   ) -> dict[str, object]:
    """A run in the simulation contract with its workload: what `check-trace` reads."""
    doc = workload_to_json(workload)
    return {"engine": workload.engine, "version": version, "validated": True,
            "config": doc["config"], "requests": doc["requests"], "eos": doc["eos"],
            "steps": [r.to_json() for r in records]}


def save_findings(report: Report, folder: Path) -> None:
    """finding-N-KIND.workload.json (the minimal workload) and finding-N-KIND.real.json
    (its real trace, a check-trace document) for each finding."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(report.findings, start=1):
        stem = folder / f"finding-{i}-{f.kind}"
        Path(f"{stem}.workload.json").write_text(
            json.dumps(workload_to_json(f.workload), indent=1) + "\n")
        Path(f"{stem}.real.json").write_text(
            json.dumps(trace_document(f.workload, f.real, report.installed), indent=1) + "\n")


def _clip(why: str, most: int = 240) -> str:
    """One line of at most `most` characters, cut at a word and marked when cut."""
    why = " ".join(why.split())
    if len(why) <= most:
        return why
    return why[: why.rfind(" ", 0, most - 4)] + " ..."
