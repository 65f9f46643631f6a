"""Markdown timelines: a table with steps as columns and a column chart in a code block
(each column as tall as the token budget, one letter per request: upper case for a
prefill chunk, lower case for a decode, '.' for budget left unused)."""

from __future__ import annotations

import math

from checker.show.timeline import DECODE, MARK_NAMES, PREFILL, Column, Timeline, marked

MAX_ROWS = 16  # chart rows; a larger budget puts several tokens in a row
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _cell_text(text: str) -> str:
    return text.replace("|", "\\|")


def cell(col: Column, rid: str) -> str:
    """`+4p`: admitted with a 4-token prefill chunk; marks as in the text timeline, the
    phase as p (prefill) or d (decode); '.' waiting with 0 tokens."""
    tokens = {b.request: b for b in col.blocks}
    text = ""
    if rid in tokens:
        b = tokens[rid]
        text = str(b.tokens) + {PREFILL: "p", DECODE: "d"}.get(b.phase, "")
    text = marked(text, rid, col)
    if not text and rid in col.idle:
        text = "."
    return text


def _step_head(tl: Timeline, col: Column) -> str:
    notes = []
    if col.step == tl.loop_step:
        notes.append("loop")
    if col.step == tl.violated_at:
        notes.append("**violated**")
    return str(col.step) + (f" ({', '.join(notes)})" if notes else "")


def table(tl: Timeline) -> list[str]:
    """Steps as columns, one row per request, then tokens and free blocks."""
    cols = tl.columns
    lines = ["| step | " + " | ".join(_step_head(tl, c) for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for req in tl.requests:
        lines.append(f"| {_cell_text(req.id)} | "
                     + " | ".join(_cell_text(cell(c, req.id)) for c in cols) + " |")
    lines.append(f"| tokens / {tl.budget} | " + " | ".join(str(c.tokens) for c in cols) + " |")
    lines.append("| free blocks | " + " | ".join(str(c.free_blocks) for c in cols) + " |")
    return lines


def letters(tl: Timeline) -> dict[str, str]:
    """One letter per request ('*' past the 26th)."""
    return {r.id: LETTERS[i] if i < len(LETTERS) else "*" for i, r in enumerate(tl.requests)}


def chart(tl: Timeline) -> list[str]:
    """The column chart: row 0 is the top of the budget."""
    per_row = max(1, math.ceil(tl.budget / MAX_ROWS))
    rows = math.ceil(tl.budget / per_row)
    key = letters(tl)
    grid = []
    for col in tl.columns:
        cells = ["."] * rows
        used = 0
        for b in col.blocks:
            start, used = round(used / per_row), used + b.tokens
            mark = key[b.request].lower() if b.phase == DECODE else key[b.request]
            for r in range(start, min(round(used / per_row), rows)):
                cells[r] = mark
        grid.append(cells)
    width = len(str(tl.budget))
    out = []
    for r in reversed(range(rows)):
        label = str(min((r + 1) * per_row, tl.budget)).rjust(width)
        out.append(f"{label} |" + "".join(f" {g[r] * 3}" for g in grid))
    out.append(" " * width + " +" + "----" * len(grid))
    out.append((" " * width + "  " + "".join(f" {str(c.step).center(3)}"
                                            for c in tl.columns)).rstrip())
    if tl.violated_at is not None:
        out.append(" " * width + "  " + "".join(
            f" {'^^^' if c.step == tl.violated_at else '   '}" for c in tl.columns).rstrip()
            + " violated")
    return out


def render(tl: Timeline) -> str:
    """The timeline as a markdown section."""
    key = letters(tl)
    lines = [f"## {tl.title}", ""]
    if tl.subtitle:
        lines += [tl.subtitle, ""]
    if any(r.detail for r in tl.requests):
        lines += ["| request | workload |", "|---|---|"]
        lines += [f"| {_cell_text(r.id)} | {r.detail} |" for r in tl.requests]
        lines.append("")
    lines += table(tl)
    marks = ", ".join(f"`{m}` {name}" for m, name in MARK_NAMES)
    lines += ["", f"Cells: tokens, `p` prefill chunk, `d` decode; {marks}; `.` waiting with "
                  "0 tokens." + ("" if tl.phases_known else
                                 " Phases are unknown: the input has no prompt lengths."),
              ""]
    per_row = max(1, math.ceil(tl.budget / MAX_ROWS))
    lines += ["```text", *chart(tl), "```", ""]
    legend = ", ".join(f"{key[r.id]} = {r.id}" for r in tl.requests)
    lines.append(f"Chart: one column per step, as tall as the token budget ({tl.budget}); "
                 + (f"{legend}; " if legend else "")
                 + "upper case a prefill chunk, lower case a decode, `.` budget left unused"
                 + (f"; one row = {per_row} tokens." if per_row > 1 else "."))
    return "\n".join(lines) + "\n"
