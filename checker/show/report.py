"""`batchproof check --html FILE`: one self-contained HTML page (inline CSS and SVG, no
script, no external URL): the verdict table with timings and the manifest's
expectations, each counterexample's timeline and replay status, the configurations, and
the upstream file:line behind each rule involved."""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from pathlib import Path

from checker.methods.jobs import JobResult
from checker.methods.verdict import UNKNOWN, Verdict
from checker.show import sources, svg
from checker.show.timeline import Timeline
from model import registry as engines
from model.run import simulate
from properties.manifest import Entry, Manifest, NamedConfig, load

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1280px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right}code,pre{font-size:12px}
pre{background:#f8f8f8;padding:8px;overflow-x:auto}
.ok{color:#1a7f37;font-weight:bold}.bad{color:#cf222e;font-weight:bold}
.unknown{color:#9a6700;font-weight:bold}td.why{font-size:12px}td.evidence{min-width:16em}
.cex{border:1px solid #ddd;padding:8px 16px;margin:16px 0}
figure{margin:8px 0;overflow-x:auto}.muted{color:#666}
"""

_FILE = re.compile(r"([\w./-]+\.py):(\d+)(?:-(\d+))?")
_LINES = re.compile(r"(?<![\w.])(\d{3,})(?:-(\d+))?(?![\w.])")


def citations(text: str) -> tuple[tuple[str, int, int], ...]:
    """The (file, first, last) line ranges cited in evidence text such as
    'scheduler.py:710-712 and 1118, 1169': the lines right after `file:`, and every
    later line number of three or more digits up to the next `file:`."""
    out = []
    files = list(_FILE.finditer(text))
    for k, m in enumerate(files):
        out.append((m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))))
        end = files[k + 1].start() if k + 1 < len(files) else len(text)
        out += [(m.group(1), int(n.group(1)), int(n.group(2) or n.group(1)))
                for n in _LINES.finditer(text, m.end(), end)]
    return tuple(out)


def rules_involved(engine: str, evidence: str) -> tuple[tuple[str, str, str], ...]:
    """Rows of the engine's rules table whose upstream lines overlap the evidence's."""
    try:
        table = engines.get(engine).rules_table
    except Exception:  # noqa: BLE001 - an engine being written must not break the report
        return ()
    rows = [(row, *_span(row[0])) for row in table]
    picked: set[int] = set()
    for f, a, b in citations(evidence):
        near = [(i, lo, hi) for i, (_, path, lo, hi) in enumerate(rows)
                if (path == f or path.endswith("/" + f)) and a <= hi and lo <= b]
        # an umbrella row (it contains the cited lines and a narrower row they touch)
        # says less than the narrower rows
        near = [x for x in near if not (x[1] <= a and b <= x[2] and any(
            x[1] <= lo and hi <= x[2] and (lo, hi) != (x[1], x[2]) for _, lo, hi in near))]
        around = [x for x in near if x[1] <= a and b <= x[2]]
        if around:  # the narrowest row that contains the cited lines
            picked.add(min(around, key=lambda x: (x[2] - x[1], x[0]))[0])
        else:  # the cited lines span rows: the outermost of them
            picked.update(i for i, lo, hi in near
                          if not any(lo2 <= lo and hi <= hi2 and (lo2, hi2) != (lo, hi)
                                     for _, lo2, hi2 in near))
    return tuple(rows[i][0] for i in sorted(picked))


_ROW = re.compile(r"^\s*([^\s:]+):(\d+)(?:-(\d+))?")


def _span(citation: str) -> tuple[str, int, int]:
    """(file, first, last) of a rules-table citation such as 'a/b.py:10-20 (note)';
    ('', 0, -1) when it cites no lines."""
    m = _ROW.match(citation)
    if m is None:
        return "", 0, -1
    return m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))


def _entry(manifest: Manifest, v: Verdict) -> Entry | None:
    """The manifest entry a verdict answers (by its parameters too, when it has them)."""
    params = tuple(sorted(getattr(v, "params", ()) or ()))
    for e in manifest.entries:
        if ((e.engine, e.property, e.config) == (v.engine, v.property, v.config)
                and (not params or e.params == params)):
            return e
    return None


def _verdict_class(v: Verdict) -> str:
    if v.verdict == UNKNOWN:
        return "unknown"
    return "ok" if v.as_expected else "bad"


def _anchor(i: int) -> str:
    return f"cex-{i}"


def verdict_table(results: Sequence[JobResult], verdicts: Sequence[Verdict],
                  manifest: Manifest) -> list[str]:
    """The verdicts, one row each, with the manifest's expectation and evidence (the
    engine column only when several engines were checked)."""
    several = len({v.engine for v in verdicts}) > 1
    head = (("engine",) if several else ()) + (
        "property", "config", "verdict", "expected", "as expected", "method", "depth",
        "seconds", "counterexample", "detail", "evidence (upstream)")
    rows = ["<div style=\"overflow-x:auto\"><table id=\"verdict-table\"><tr>"
            + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for i, (res, v) in enumerate(zip(results, verdicts, strict=True)):
        entry = _entry(manifest, v)
        cls = _verdict_class(v)
        link = (f'<a href="#{_anchor(i)}">timeline</a>'
                if res.counterexample is not None else "-")
        cells = ([escape(v.engine)] if several else []) + [
            escape(v.property), escape(v.config),
            f'<span class="{cls}">{escape(v.label)}</span>', escape(v.expected or "-"),
            f'<span class="{cls}">{"yes" if v.as_expected else "no"}</span>',
            escape(v.method), f'<td class="num">{v.depth}', f'<td class="num">{v.seconds:.1f}',
            link, f'<td class="why">{escape(v.detail)}',
            f'<td class="why evidence">{escape(entry.evidence if entry else "-")}']
        rows.append('<tr class="verdict">' + "".join(
            c if c.startswith("<td") else f"<td>{c}" for c in cells) + "</tr>")
    rows.append("</table></div>")
    return rows


def departures(verdicts: Sequence[Verdict]) -> list[str]:
    """One line per verdict that departs from the manifest or is unknown."""
    bad = [v for v in verdicts if not v.as_expected or v.verdict == UNKNOWN]
    if not bad:
        return []
    items = [f"<li>{escape(v.property)} on {escape(v.config)} ({escape(v.method)}): "
             f"{escape(v.label)}, expected {escape(v.expected or '-')}"
             + (f" ({escape(v.detail)})" if v.detail else "") + "</li>" for v in bad]
    return ['<ul class="bad" id="departures">', *items, "</ul>"]


def _timeline(res: JobResult) -> tuple[Timeline, str, str]:
    """The counterexample's timeline, its replay status, and its text rendering."""
    cex = res.counterexample
    assert cex is not None
    if res.replayed is not None:
        records = res.replayed.records
        status = (f"replayed on the reference: loops from step {res.replayed.loop + 1} to "
                  f"{cex.violated_at} and repeats" if res.replayed.loop is not None else
                  f"replayed on the reference: fails at step {res.replayed.violated_at}")
    else:
        records = simulate(cex.workload)
        status = f"not confirmed on the reference: {res.verdict.detail or 'no replay'}"
    source = sources.counterexample_source(cex, records)
    return source.timeline, status, sources.text_timeline(source)


def counterexample_sections(results: Sequence[JobResult], verdicts: Sequence[Verdict],
                            manifest: Manifest) -> list[str]:
    """One section per counterexample: status, evidence, rules involved, timeline."""
    out = []
    for i, (res, v) in enumerate(zip(results, verdicts, strict=True)):
        if res.counterexample is None:
            continue
        tl, status, text = _timeline(res)
        entry = _entry(manifest, v)
        evidence = entry.evidence if entry else ""
        out += [f'<section class="cex" id="{_anchor(i)}">', f"<h3>{escape(tl.title)}</h3>",
                f"<p>{escape(tl.subtitle)}</p>",
                f'<p class="{"ok" if res.replayed else "bad"}">{escape(status)}</p>']
        if v.counterexample:
            out.append(f"<p>file: <code>{escape(v.counterexample)}</code></p>")
        if evidence:
            out.append(f"<p>evidence: {escape(evidence)}</p>")
        involved = rules_involved(v.engine, evidence)
        if involved:
            out += ["<p>rules involved:</p>", *_rules_rows(involved)]
        out += [f"<figure>{svg.render(tl, ids=f'{_anchor(i)}-')}</figure>"]
        if text:
            out += ["<details><summary>text timeline</summary>",
                    f"<pre>{escape(text)}</pre></details>"]
        out.append("</section>")
    return out or ['<p class="muted">No counterexample in this run.</p>']


def _rules_rows(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    out = ["<table><tr><th>upstream file:line</th><th>reference function</th>"
           "<th>rules function</th></tr>"]
    out += [f"<tr><td><code>{escape(a)}</code></td><td><code>{escape(b)}</code></td>"
            f"<td><code>{escape(c)}</code></td></tr>" for a, b, c in rows]
    return out + ["</table>"]


def config_sections(verdicts: Sequence[Verdict], configs: dict[str, NamedConfig]) -> list[str]:
    """Every configuration the verdicts name: description, fields, ranges, bounds."""
    out = []
    for name in dict.fromkeys(v.config for v in verdicts):
        nc = configs.get(name)
        if nc is None:
            out.append(f"<h3>{escape(name)}</h3><p class=\"muted\">not in the manifest "
                       "(a configuration given on the command line)</p>")
            continue
        try:
            fields = engines.get(nc.engine).config_to_dict(nc.config)
        except Exception:  # noqa: BLE001 - show what is known even if the engine is broken
            fields = {}
        out += [f"<h3>{escape(name)} <span class=\"muted\">({escape(nc.engine)})</span></h3>",
                f"<p>{escape(nc.description)}"
                + ("" if nc.validated else " (not validated: the engine rejects it)")
                + "</p>", "<table><tr><th>field</th><th>value</th></tr>"]
        out += [f"<tr><td>{escape(k)}</td><td>{escape(str(val))}</td></tr>"
                for k, val in fields.items()]
        out += [f"<tr><td>{escape(k)} (range)</td><td>{lo}..{hi}</td></tr>"
                for k, lo, hi in nc.ranges]
        out += [f"<tr><td>bound: {escape(k)}</td><td>{val}</td></tr>" for k, val in nc.bounds]
        out.append("</table>")
    return out


def rules_sections(verdicts: Sequence[Verdict]) -> list[str]:
    """Each checked engine's rules table."""
    out = []
    for name in dict.fromkeys(v.engine for v in verdicts):
        try:
            model = engines.get(name)
        except Exception as exc:  # noqa: BLE001
            out.append(f"<p class=\"muted\">{escape(name)}: not loadable ({escape(str(exc))})"
                       "</p>")
            continue
        out.append(f"<h3>{escape(model.title)} {escape(model.version)}</h3>")
        out += _rules_rows(model.rules_table) if model.rules_table else [
            '<p class="muted">no rules table yet</p>']
    return out


def render_html(results: Sequence[JobResult], verdicts: Sequence[Verdict] | None = None,
                manifest: Manifest | None = None, command: str | None = None) -> str:
    """The whole page. `verdicts` default to the results' (check passes them with the
    counterexample paths filled in); `manifest` defaults to the loaded one."""
    verdicts = list(verdicts) if verdicts is not None else [r.verdict for r in results]
    manifest = manifest if manifest is not None else load()
    bad = sum(not v.as_expected and v.verdict != UNKNOWN for v in verdicts)
    unknown = sum(v.verdict == UNKNOWN for v in verdicts)
    cls = "bad" if bad else "unknown" if unknown else "ok"
    summary = (f"{len(verdicts)} checks, {len(verdicts) - bad - unknown} as expected, "
               f"{bad} departing from the manifest, {unknown} unknown; "
               f"{sum(v.seconds for v in verdicts):.1f} s of checking")
    body = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>batchproof check report</title>", f"<style>{_CSS}</style></head><body>",
        "<h1>batchproof check report</h1>",
        *([f"<p><code>{escape(command)}</code></p>"] if command else []),
        f'<p class="{cls}" id="summary">{escape(summary)}</p>', *departures(verdicts),
        '<p><a href="#verdicts">verdicts</a> · <a href="#counterexamples">counterexamples'
        '</a> · <a href="#configurations">configurations</a> · <a href="#rules">upstream '
        "rules</a></p>",
        '<h2 id="verdicts">Verdicts</h2>',
        "<p class=\"muted\">PROVED: unbounded proof; HOLDS(k): no violation up to k steps; "
        "VIOLATED: a minimal counterexample, replayed on the reference; UNKNOWN: solver "
        "unknown or time limit. The expectation and its evidence come from the manifest "
        "(properties/manifest*.toml).</p>",
        *verdict_table(results, verdicts, manifest),
        '<h2 id="counterexamples">Counterexamples</h2>',
        *counterexample_sections(results, verdicts, manifest),
        '<h2 id="configurations">Configurations</h2>', *config_sections(verdicts,
                                                                        manifest.configs),
        '<h2 id="rules">Upstream rules</h2>',
        "<p class=\"muted\">Each engine's rules table: the upstream file:line, the reference "
        "scheduler's function that ports it, and the rules' function that encodes it.</p>",
        *rules_sections(verdicts), "</body></html>"]
    return "\n".join(body) + "\n"


def write_html(path: str | Path, results: Sequence[JobResult],
               verdicts: Sequence[Verdict] | None = None, manifest: Manifest | None = None,
               command: str | None = None) -> None:
    """Write the report to `path`."""
    Path(path).write_text(render_html(results, verdicts, manifest, command))
