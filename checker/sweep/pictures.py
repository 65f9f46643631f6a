"""A sweep as pictures: for the two plotted fields, one heatmap per check and method
(verdicts as categorical colours, or a metric's value), as PNG and SVG (matplotlib, Agg),
and index.html: the heatmaps inline, each with a table whose cells link to their
counterexample's timeline (timelines/<key>.svg, drawn as `explain --format svg` draws it).
The page has no script and no external URL; it links only files of the output folder.

With more swept fields than plotted, each combination of the others gets its own
heatmaps (titled with its values), up to MAX_FACETS; past that a cell shows the worst
verdict over the other fields and how many of them violate."""

from __future__ import annotations

import html
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED
from checker.sweep.extras import require
from checker.sweep.grid import Axis, Grid, Skipped

REFUSED = "REFUSED"  # a configuration the engine refuses: not run
COLOURS = {PROVED: "#1b7837", HOLDS: "#a6dba0", VIOLATED: "#c51b7d", UNKNOWN: "#bababa",
           REFUSED: "#ffffff"}  # colour-blind safe (PRGn), and every cell says it in words
TEXT_COLOURS = {PROVED: "white", VIOLATED: "white"}
# Worst first: what an aggregated cell shows.
SEVERITY = (VIOLATED, UNKNOWN, HOLDS, PROVED, REFUSED)
MAX_FACETS = 12
MAX_TABLE_ROWS = 2000  # the page's row table; rows.csv has every row
HEATMAP_DIR = "heatmaps"


@dataclass(frozen=True, slots=True)
class Cell:
    """One heatmap cell: a row's verdict (or several rows', aggregated)."""

    verdict: str
    text: str
    metric: float | None = None
    link: str | None = None  # the timeline, relative to the output folder
    title: str = ""


@dataclass(frozen=True, slots=True)
class Heatmap:
    """One picture: a check (with a method) over x and y, at fixed other fields."""

    slug: str
    title: str
    x: Axis
    y: Axis | None
    cells: tuple[tuple[tuple[int, int], Cell], ...]  # (x index, y index) -> cell
    numeric: bool
    png: Path
    svg: Path
    inline_svg: str  # links relative to the output folder, for index.html


def _short(rec: dict[str, Any]) -> str:
    v, depth = rec["verdict"], rec.get("depth")
    if rec.get("metric") is not None:
        return f"{rec['metric']:g}"
    if v == VIOLATED:
        return f"violated at {depth}" if depth is not None else "violated"
    if v == HOLDS:
        return f"holds to {depth}"
    return {PROVED: "proved", UNKNOWN: "unknown"}.get(v, v.lower())


def _cell(rec: dict[str, Any]) -> Cell:
    rel = rec.get("timeline") or None
    title = f"{rec['check']} ({rec['method']}): {rec['label']}"
    if rec.get("detail"):
        title += f"; {rec['detail']}"
    return Cell(rec["verdict"], _short(rec), rec.get("metric"), rel, title)


def _aggregate(cells: Sequence[Cell]) -> Cell:
    worst = min(cells, key=lambda c: SEVERITY.index(c.verdict))
    bad = sum(c.verdict == VIOLATED for c in cells)
    metrics = [c.metric for c in cells if c.metric is not None]
    top = max(metrics) if metrics else None
    text = f"{bad}/{len(cells)} viol." if bad else worst.text
    if top is not None:
        text = f"max {top:g}"
    return Cell(worst.verdict, text, top, worst.link,
                f"worst of {len(cells)} configs over the other fields: {worst.title}")


def heatmaps(grid: Grid, records: Sequence[dict[str, Any]], skipped: Sequence[Skipped],
             out: Path) -> list[Heatmap]:
    """Draw every heatmap of the sweep under out/heatmaps/ (PNG and SVG)."""
    if not grid.plot:
        return []
    matplotlib = require("matplotlib")
    matplotlib.use("Agg")
    x = grid.axis(grid.plot[0])
    y = grid.axis(grid.plot[1]) if len(grid.plot) > 1 else None
    others = [a for a in grid.swept if a.field not in grid.plot]
    facets = list(itertools.product(*(a.values for a in others)))
    aggregate = len(facets) > MAX_FACETS
    checks: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in records:
        checks.setdefault((rec["check"], rec["method"]), []).append(rec)
    (out / HEATMAP_DIR).mkdir(parents=True, exist_ok=True)
    refused = [dict(s.values) for s in skipped]
    drawn = []
    for n, ((check, method), recs) in enumerate(checks.items()):
        groups = [()] if aggregate else facets
        for facet in groups:
            fixed = tuple(zip((a.field for a in others), facet, strict=True))
            cells: dict[tuple[int, int], list[Cell]] = {}

            def place(values: dict[str, Any], cell: Cell, fixed: tuple = fixed,
                      cells: dict = cells) -> None:
                if any(values.get(f) != v for f, v in fixed):
                    return
                at = (x.values.index(values[x.field]),
                      y.values.index(values[y.field]) if y is not None else 0)
                cells.setdefault(at, []).append(cell)

            for rec in recs:
                place(rec, _cell(rec))
            for values in refused:
                place(values, Cell(REFUSED, "refused", title="the engine refuses this "
                                   "configuration (skipped.csv gives the rule)"))
            merged = {at: (cs[0] if len(cs) == 1 else _aggregate(cs))
                      for at, cs in cells.items()}
            label = check + ("" if method in ("hazard", "worst") else f" ({method})")
            where = " ".join(f"{_flag(grid, f)}={v}" for f, v in fixed)
            title = label + (f" at {where}" if where else "") + (
                " (worst over the other swept fields)" if aggregate and others else "")
            slug = f"{n:03d}-" + _slug(check + "-" + method + ("-" + where if where else ""))
            drawn.append(_draw(slug, title, x, y, merged, out))
    return drawn


def _flag(grid: Grid, field: str) -> str:
    return grid.axis(field).name


def _slug(text: str) -> str:
    keep = "".join(ch if ch.isalnum() else "-" for ch in text.lower())
    return "-".join(p for p in keep.split("-") if p)[:80]


def _draw(slug: str, title: str, x: Axis, y: Axis | None, cells: dict[tuple[int, int], Cell],
          out: Path) -> Heatmap:
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.colors import Normalize
    from matplotlib.patches import Patch, Rectangle

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, smaller
    plt.rcParams["svg.hashsalt"] = "batchproof-sweep"  # the same sweep, the same bytes
    nx, ny = len(x.values), len(y.values) if y is not None else 1
    numeric = bool(cells) and all(c.metric is not None or c.verdict == REFUSED
                                  for c in cells.values())
    fig, ax = plt.subplots(figsize=(min(24.0, 2.2 + 1.1 * nx), min(18.0, 1.8 + 0.55 * ny)))
    metrics = [c.metric for c in cells.values() if c.metric is not None]
    norm = Normalize(min(metrics), max(metrics)) if numeric and metrics else None
    cmap = colormaps["viridis"]
    size = max(6, min(10, 60 // max(nx, 1)))
    for (i, j), cell in sorted(cells.items()):
        if numeric and cell.metric is not None and norm is not None:
            face = cmap(norm(cell.metric))
            ink = "white" if norm(cell.metric) < 0.6 else "black"
        else:
            face, ink = COLOURS[cell.verdict], TEXT_COLOURS.get(cell.verdict, "black")
        rect = Rectangle((i, j), 1, 1, facecolor=face, edgecolor="#444444", linewidth=0.6,
                         hatch="//" if cell.verdict == REFUSED else None)
        if cell.link:
            rect.set_url(cell.link)
        ax.add_patch(rect)
        # Two lines ("violated" over "at 3") keep narrow cells legible.
        ax.text(i + 0.5, j + 0.5, cell.text.replace(" ", "\n", 1), ha="center",
                va="center", fontsize=size, color=ink)
    ax.set_xlim(0, nx)
    ax.set_ylim(0, ny)
    ax.set_xticks([i + 0.5 for i in range(nx)], [str(v) for v in x.values])
    ax.set_xlabel(x.name)
    if y is not None:
        ax.set_yticks([j + 0.5 for j in range(ny)], [str(v) for v in y.values])
        ax.set_ylabel(y.name)
    else:
        ax.set_yticks([])
    ax.set_title(title, fontsize=10)
    if numeric and norm is not None:
        fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax)
    else:
        shown = [v for v in SEVERITY if any(c.verdict == v for c in cells.values())]
        ax.legend(handles=[Patch(facecolor=COLOURS[v], edgecolor="#444444",
                                 hatch="//" if v == REFUSED else None, label=v.lower())
                           for v in shown],
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    png, svg_path = out / HEATMAP_DIR / f"{slug}.png", out / HEATMAP_DIR / f"{slug}.svg"
    fig.savefig(png, dpi=100, metadata={"Software": None})
    import io
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    inline = buf.getvalue()
    # The file sits in heatmaps/, one folder below the timelines its cells link to.
    svg_path.write_text(inline.replace('xlink:href="timelines/', 'xlink:href="../timelines/'))
    return Heatmap(slug, title, x, y, tuple(sorted(cells.items())), numeric, png, svg_path,
                   inline)


# --- the page -----------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #bbb;padding:.2em .5em;text-align:left}
th{background:#f2f2f2}
td.v-PROVED{background:#1b7837;color:#fff}td.v-HOLDS{background:#a6dba0}
td.v-VIOLATED{background:#c51b7d;color:#fff}td.v-UNKNOWN{background:#bababa}
td.v-REFUSED{background:repeating-linear-gradient(45deg,#fff,#fff 4px,#ddd 4px,#ddd 6px)}
td.v-PROVED a,td.v-VIOLATED a{color:#fff}
figure.heatmap{margin:0}figure.heatmap svg{max-width:100%;height:auto}
.summary{color:#444}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _cells_table(hm: Heatmap) -> str:
    cells = dict(hm.cells)
    ys = list(range(len(hm.y.values))) if hm.y is not None else [0]
    corner = f"{hm.y.name} \\ {hm.x.name}" if hm.y is not None else hm.x.name
    head = "".join(f"<th>{_e(v)}</th>" for v in hm.x.values)
    rows = [f'<table class="cells" data-heatmap="{_e(hm.slug)}"><tr><th>{_e(corner)}</th>'
            f"{head}</tr>"]
    for j in reversed(ys):  # the heatmap draws its first y value at the bottom
        label = _e(hm.y.values[j]) if hm.y is not None else ""
        tds = []
        for i in range(len(hm.x.values)):
            cell = cells.get((i, j))
            if cell is None:
                tds.append("<td></td>")
                continue
            inner = _e(cell.text)
            if cell.link:
                inner = f'<a class="timeline" href="{_e(cell.link)}">{inner}</a>'
            tds.append(f'<td class="v-{cell.verdict}" title="{_e(cell.title)}">{inner}</td>')
        rows.append(f"<tr><th>{label}</th>{''.join(tds)}</tr>")
    rows.append("</table>")
    return "".join(rows)


def _strip_xml_header(svg_text: str) -> str:
    start = svg_text.find("<svg")
    return svg_text[start:] if start >= 0 else svg_text


def render_html(grid: Grid, records: Sequence[dict[str, Any]], skipped: Sequence[Skipped],
                maps: Sequence[Heatmap], out: Path, summary: str) -> str:
    """index.html: the summary, each heatmap with its linked table, the refused
    configurations with their rules, and the rows."""
    parts = ["<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>batchproof sweep {_e(Path(grid.path).name)}</title>",
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>batchproof sweep {_e(Path(grid.path).name)}</h1>"]
    if grid.description:
        parts.append(f"<p>{_e(grid.description)}</p>")
    bounds = " ".join(f"{k}={v}" for k, v in grid.bounds)
    parts.append(f'<p class="summary">{_e(grid.engine)}; bounds {_e(bounds)}; method '
                 f"{_e(', '.join(grid.methods))}; timeout {grid.timeout_s:g} s per job. "
                 f"{_e(summary)}. HOLDS and VIOLATED are within the bounds: at most "
                 "that many requests (slots) and steps; PROVED by induction holds for any "
                 "number of steps and request lengths on those slots, by a theorem for "
                 "all. A cell says the verdict in words; its link opens the "
                 "counterexample's timeline. "
                 'The rows: <a href="rows.csv">rows.csv</a>, '
                 '<a href="rows.parquet">rows.parquet</a>.</p>')
    if not maps:
        parts.append("<p>No heatmap: the grid sweeps no field.</p>")
    for hm in maps:
        png, svg_file = (os.path.relpath(p, out) for p in (hm.png, hm.svg))
        parts.append(f'<section class="heatmap" id="{_e(hm.slug)}"><h2>{_e(hm.title)}</h2>'
                     f'<figure class="heatmap">{_strip_xml_header(hm.inline_svg)}</figure>'
                     f'<p><a href="{_e(png)}">PNG</a> · <a href="{_e(svg_file)}">SVG</a>'
                     "</p>" + _cells_table(hm) + "</section>")
    if skipped:
        names = [a.name for a in grid.axes]
        parts.append(f'<section id="refused"><h2>Configurations {_e(grid.engine)} refuses '
                     f"({len(skipped)}, not run)</h2><table><tr>"
                     + "".join(f"<th>{_e(n)}</th>" for n in names)
                     + "<th>rule</th><th>why</th></tr>")
        for s in skipped:
            parts.append("<tr>" + "".join(f"<td>{_e(v)}</td>" for _, v in s.values)
                         + f"<td>{_e(s.rule)}</td><td>{_e(s.message)}</td></tr>")
        parts.append("</table></section>")
    parts.append(_rows_table(grid, records))
    parts.append("</body></html>\n")
    return "".join(parts)


def _rows_table(grid: Grid, records: Sequence[dict[str, Any]]) -> str:
    swept = grid.swept
    head = ["check", "method", *(a.name for a in swept), "verdict", "depth", "seconds",
            "counterexample", "detail"]
    parts = [f'<section id="rows"><h2>Rows ({len(records)})</h2>']
    if len(records) > MAX_TABLE_ROWS:
        parts.append(f"<p>The first {MAX_TABLE_ROWS}; rows.csv has all of them.</p>")
    parts.append('<table class="rows"><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
                 + "</tr>")
    for rec in records[:MAX_TABLE_ROWS]:
        cex = rec.get("counterexample")
        link = f'<a href="{_e(cex)}">ITF</a>' if cex else ""
        if rec.get("timeline"):
            link += f' <a class="timeline" href="{_e(rec["timeline"])}">timeline</a>'
        cells = [rec["check"], rec["method"], *(rec.get(a.field) for a in swept)]
        parts.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells)
                     + f'<td class="v-{_e(rec["verdict"])}">{_e(rec["label"])}</td>'
                     + f"<td>{_e(rec.get('depth') if rec.get('depth') is not None else '')}</td>"
                     + f"<td>{rec.get('seconds', 0):.2f}</td><td>{link}</td>"
                     + f"<td>{_e(rec.get('detail') or '')}</td></tr>")
    parts.append("</table></section>")
    return "".join(parts)


def write_html(path: Path, text: str) -> None:
    """Write the page."""
    path.write_text(text, encoding="utf-8")
