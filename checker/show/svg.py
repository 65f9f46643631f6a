"""SVG timelines: steps as columns as tall as the token budget, one coloured block per
scheduled request sized by its tokens (decodes hatched), event marks under each column,
the violating step framed in red, and a legend. Output is byte-identical run to run.

Every block is a `<rect class="block">` carrying data-step, data-request, data-tokens and
data-phase, so tests (and scripts) can read the drawing back.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from checker.show.timeline import DECODE, MARK_NAMES, Column, Timeline

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
CHART_HEIGHT = 240  # pixels for the whole budget when the budget is large
MAX_UNIT = 24  # pixels per token when the budget is small
COL_W, GAP, LEFT, TOP = 56, 16, 72, 80
LINE = 13  # text line height
SPARSE = 20  # below 1/20 of the budget in every step, the legend says blocks are small


def colour(index: int) -> str:
    """The colour of the index-th request (cycled)."""
    return PALETTE[index % len(PALETTE)]


def unit(budget: int) -> float:
    """Pixels per token."""
    return min(MAX_UNIT, CHART_HEIGHT / max(budget, 1))


def num(x: float) -> str:
    """A coordinate as short, stable text."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _text(x: float, y: float, content: str, cls: str = "", anchor: str = "start",
          fill: str = "") -> str:
    attrs = f' class="{cls}"' if cls else ""
    attrs += f' text-anchor="{anchor}"' if anchor != "start" else ""
    attrs += f" fill={quoteattr(fill)}" if fill else ""
    return f'<text x="{num(x)}" y="{num(y)}"{attrs}>{escape(content)}</text>'


def _defs(ids: str) -> str:
    return (f'<defs><pattern id="{ids}decode-hatch" width="6" height="6" '
            'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            '<rect width="3" height="6" fill="#ffffff" fill-opacity="0.55"/></pattern></defs>')


# Scoped to svg.timeline: inline in the HTML report, an SVG's style sheet is the page's.
_STYLE = ("<style>svg.timeline text{font-family:monospace;font-size:11px;fill:#222}"
          "svg.timeline .title{font-size:14px;font-weight:bold}"
          "svg.timeline .small{font-size:10px}"
          "svg.timeline .budget{fill:#f4f4f4;stroke:#888}"
          "svg.timeline .violated{fill:none;stroke:#d62728;stroke-width:3}"
          "svg.timeline .bad{fill:#d62728;font-weight:bold}"
          "svg.timeline .block{stroke:#fff}</style>")


def _column(tl: Timeline, col: Column, x: float, colours: dict[str, str], ids: str
            ) -> list[str]:
    u = unit(tl.budget)
    height = tl.budget * u
    out = [f'<g class="step" data-step="{col.step}" data-tokens="{col.tokens}">',
           f'<rect class="budget" x="{num(x)}" y="{TOP}" width="{COL_W}" '
           f'height="{num(height)}"/>']
    y = TOP + height
    for b in col.blocks:
        h = b.tokens * u
        y -= h
        attrs = (f'x="{num(x)}" y="{num(y)}" width="{COL_W}" height="{num(h)}"')
        out.append(f'<rect class="block" data-step="{col.step}" '
                   f'data-request={quoteattr(b.request)} data-tokens="{b.tokens}" '
                   f'data-phase="{b.phase}" {attrs} fill="{colours[b.request]}">'
                   f'<title>{escape(f"step {col.step}: {b.request} {b.tokens} {b.phase}")}'
                   '</title></rect>')
        if b.phase == DECODE:
            out.append(f'<rect class="hatch" {attrs} fill="url(#{ids}decode-hatch)"/>')
        if h >= 12:
            label = f"{b.request} {b.tokens}"
            label = label if len(label) * 6.6 <= COL_W - 4 else str(b.tokens)
            out.append(_text(x + COL_W / 2, y + h / 2 + 4, label, "small", "middle"))
    if col.step == tl.violated_at:
        out.append(f'<rect class="violated" x="{num(x - 4)}" y="{TOP - 4}" '
                   f'width="{COL_W + 8}" height="{num(height + 8)}"/>')
        out.append(_text(x + COL_W / 2, TOP - 10, "violated", "bad", "middle"))
    if col.step == tl.loop_step:
        out.append(_text(x + COL_W / 2, TOP - 24, "loop from here", "small", "middle"))
    base = TOP + height + 16
    out.append(_text(x + COL_W / 2, base, f"step {col.step}", "", "middle"))
    out.append(_text(x + COL_W / 2, base + LINE, f"{col.tokens}/{tl.budget}", "small",
                     "middle"))
    out.append(_text(x + COL_W / 2, base + 2 * LINE, f"kv {col.free_blocks}", "small",
                     "middle"))
    for i, (mark, rid) in enumerate(_marks(col)):
        out.append(_text(x + 2, base + (3 + i) * LINE, f"{mark}{rid}", "small",
                         fill="#888" if mark == "." else colours.get(rid, "#222")))
    out.append("</g>")
    return out


def _marks(col: Column) -> tuple[tuple[str, str], ...]:
    """The column's event marks, then '.' for each request waiting with 0 tokens."""
    return col.marks() + tuple((".", rid) for rid in col.idle if rid not in col.preempted)


def _legend_lines(tl: Timeline) -> tuple[str, ...]:
    marks = "  ".join(f"{m} {name}" for m, name in MARK_NAMES)
    lines = (f"marks: {marks}  . waiting, 0 tokens",
             f"column height = token budget ({tl.budget}); n/B = tokens used; "
             "kv = free KV blocks after scheduling")
    most = max([c.tokens for c in tl.columns] + [0])
    if 0 < most * SPARSE < tl.budget:  # blocks drawn to scale would be hard to see
        lines += (f"to scale: no step uses more than {most} of the {tl.budget} tokens; "
                  "hover a block for its tokens",)
    return lines


def _legend(tl: Timeline, y: float, colours: dict[str, str], ids: str) -> list[str]:
    out = ['<g class="legend">']
    for i, req in enumerate(tl.requests):
        yy = y + i * (LINE + 3)
        out.append(f'<rect x="{LEFT}" y="{num(yy - 10)}" width="12" height="12" '
                   f'fill="{colours[req.id]}"/>')
        out.append(_text(LEFT + 18, yy, f"{req.id}" + (f": {req.detail}" if req.detail else "")))
    y += len(tl.requests) * (LINE + 3) + 6
    if tl.phases_known:
        out += [f'<rect x="{LEFT}" y="{num(y - 10)}" width="12" height="12" fill="#888"/>',
                _text(LEFT + 18, y, "prefill chunk"),
                f'<rect x="{LEFT + 140}" y="{num(y - 10)}" width="12" height="12" '
                'fill="#888"/>',
                f'<rect x="{LEFT + 140}" y="{num(y - 10)}" width="12" height="12" '
                f'fill="url(#{ids}decode-hatch)"/>',
                _text(LEFT + 158, y, "decode (hatched)")]
    else:
        out.append(_text(LEFT, y, "prefill and decode not told apart: the input has no "
                                  "prompt lengths"))
    y += LINE + 4
    for k, line in enumerate(_legend_lines(tl)):
        out.append(_text(LEFT, y + k * LINE, line))
    out.append("</g>")
    return out


def legend_height(tl: Timeline) -> int:
    """Pixels the legend needs."""
    return len(tl.requests) * (LINE + 3) + 6 + (1 + len(_legend_lines(tl))) * LINE + 20


def render(tl: Timeline, ids: str = "") -> str:
    """The timeline as a standalone SVG document; `ids` prefixes its element ids (several
    SVGs inline in one HTML page need distinct ones)."""
    colours = {r.id: colour(i) for i, r in enumerate(tl.requests)}
    height = tl.budget * unit(tl.budget)
    most_marks = max([len(_marks(c)) for c in tl.columns] + [0])
    legend_y = TOP + height + 16 + (3 + most_marks) * LINE + 16
    longest = max([len(r.id) + len(r.detail) + 2 for r in tl.requests]
                  + [len(line) for line in _legend_lines(tl)])
    width = max(LEFT + len(tl.columns) * (COL_W + GAP) + 8, LEFT + 7 * longest,
                16 + 9 * len(tl.title), 16 + 6.2 * len(tl.subtitle))
    total_h = legend_y + legend_height(tl)
    label = f"{tl.title}. {tl.subtitle}".strip()
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{num(width)}" '
            f'height="{num(total_h)}" viewBox="0 0 {num(width)} {num(total_h)}" role="img" '
            f"aria-label={quoteattr(label)}>",
            f"<title>{escape(label)}</title>", _STYLE, _defs(ids),
            '<rect width="100%" height="100%" fill="#ffffff"/>',
            _text(8, 20, tl.title, "title"), _text(8, 36, tl.subtitle, "small"),
            _text(8, TOP + 10, f"budget {tl.budget}", "small"),
            _text(8, TOP + height, "0", "small")]
    for i, col in enumerate(tl.columns):
        body += _column(tl, col, LEFT + i * (COL_W + GAP), colours, ids)
    body += _legend(tl, legend_y, colours, ids)
    body.append("</svg>")
    return "\n".join(body) + "\n"

