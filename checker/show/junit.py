"""`batchproof check --junit FILE`: the verdicts as JUnit XML, one testcase per check.

A testcase is one (engine, property, config, method): classname the engine, name
`property[config] (method)` (`property[config, k=3] (method)` when the property has
parameters, so two entries that differ only in them stay two testcases). Its result:
- an error when `--method both` finds the two methods disagree (exit 1);
- a failure when the verdict departs from the manifest (exit 1);
- skipped when the verdict is UNKNOWN (inconclusive, exit 3);
- passed otherwise.
Each message names the counterexample file when there is one.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from checker.methods.agreement import DISAGREE, INCONCLUSIVE, Agreement, by_check, row_key
from checker.methods.verdict import DEPARTS, Verdict
from checker.methods.verdict import INCONCLUSIVE as UNDECIDED


def case_name(v: Verdict) -> str:
    """`property[config] (method)`, with the property's parameters inside the brackets."""
    inside = ", ".join([v.config, *(f"{k}={n}" for k, n in v.params)])
    return f"{v.property}[{inside}] ({v.method})"


def _where(v: Verdict) -> str:
    return f"counterexample {v.counterexample}" if v.counterexample else "no counterexample"


def _case(v: Verdict, pair: Agreement | None) -> ET.Element:
    case = ET.Element("testcase", classname=v.engine, name=case_name(v),
                      time=f"{v.seconds:.3f}")
    detail = f" ({v.detail})" if v.detail else ""
    if pair is not None and pair.status == DISAGREE:
        ET.SubElement(case, "error", type="disagreement",
                      message=f"bmc and explore disagree: {pair.line}; {_where(v)}")
    elif v.status == DEPARTS:
        ET.SubElement(case, "failure", type="departure",
                      message=f"{v.label}, expected {v.expected}{detail}; {_where(v)}")
    elif v.status == UNDECIDED:
        ET.SubElement(case, "skipped",
                      message=f"inconclusive: {v.label}{detail}; {_where(v)}")
    out = [f"{v.label} (expected {v.expected or '-'}); {_where(v)}"]
    if pair is not None and pair.status == INCONCLUSIVE:
        out.append(f"methods inconclusive: {pair.line}")
    ET.SubElement(case, "system-out").text = "\n".join(out)
    return case


def render_junit(verdicts: Sequence[Verdict], agreements: Sequence[Agreement] = ()) -> str:
    """The JUnit XML document: one testsuite per engine, in the order verdicts name them."""
    pairs = by_check(agreements)
    root = ET.Element("testsuites", name="batchproof check")
    suites: dict[str, ET.Element] = {}
    for v in verdicts:
        suite = suites.get(v.engine)
        if suite is None:
            suite = suites[v.engine] = ET.SubElement(root, "testsuite", name=v.engine)
        suite.append(_case(v, pairs.get(row_key(v))))
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    seconds_all = 0.0
    for suite in suites.values():
        cases = suite.findall("testcase")
        counts = {"tests": len(cases),
                  "failures": sum(c.find("failure") is not None for c in cases),
                  "errors": sum(c.find("error") is not None for c in cases),
                  "skipped": sum(c.find("skipped") is not None for c in cases)}
        seconds = sum(float(c.get("time", "0")) for c in cases)
        seconds_all += seconds
        for k, n in counts.items():
            suite.set(k, str(n))
            totals[k] += n
        suite.set("time", f"{seconds:.3f}")
    for k, n in totals.items():
        root.set(k, str(n))
    root.set("time", f"{seconds_all:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def write_junit(path: str | Path, verdicts: Sequence[Verdict],
                agreements: Sequence[Agreement] = ()) -> None:
    """Write `render_junit` to `path`."""
    Path(path).write_text(render_junit(verdicts, agreements), encoding="utf-8")
