"""A sweep's rows on disk, under its output folder:

- rows.jsonl   the journal: one JSON row per finished job, appended and flushed as each
               arrives, so a run that is stopped (or killed) loses no finished job; a
               re-run skips every key it holds (the resume);
- rows.parquet, rows.csv   the rows of this grid, in grid order, written at the end;
- skipped.csv  the configurations the engine refuses, with the rule;
- counterexamples/<check>__<key>.itf.json and timelines/<key>.svg, named in the rows
  relative to the folder.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from checker.methods.verdict import UNKNOWN, VIOLATED
from checker.sweep.extras import require
from checker.sweep.grid import Grid, Skipped, SweepJob
from checker.sweep.work import Outcome
from model.core.errors import InputError

JOURNAL, PARQUET, CSV, SKIPPED = "rows.jsonl", "rows.parquet", "rows.csv", "skipped.csv"
CEX_DIR, TIMELINE_DIR = "counterexamples", "timelines"
# The columns after the config fields, in order.
COLUMNS = ("check", "kind", "name", "params", "method", "verdict", "label", "decided_by",
           "metric", "depth", "seconds", "counterexample", "timeline", "bounds", "detail")


@dataclass(frozen=True, slots=True)
class Row:
    """One job's row: what was checked, where, and what was decided."""

    key: str
    engine: str
    config: tuple[tuple[str, Any], ...]  # every field of the engine's Config
    check: str  # the label: 'starvation k=3', 'hazard head_of_line', 'worst ...'
    kind: str
    name: str
    params: str  # 'k=3'
    method: str  # asked for: bmc | explore | hazard | worst
    verdict: str
    label: str
    decided_by: str
    metric: float | None
    depth: int | None
    seconds: float
    counterexample: str | None
    timeline: str | None
    bounds: str  # 'slots=2 depth=4 ...'
    detail: str

    def record(self) -> dict[str, Any]:
        """The row as one flat mapping: key, engine, the config fields, then COLUMNS."""
        out: dict[str, Any] = {"key": self.key, "engine": self.engine, **dict(self.config)}
        out.update({c: getattr(self, c) for c in COLUMNS})
        out["seconds"] = round(self.seconds, 3)
        return out


def row(job: SweepJob, outcome: Outcome, config: dict[str, Any], cex: str | None,
        timeline: str | None) -> Row:
    """The row of a job and its outcome (`config`: the engine's config as a dict)."""
    return Row(
        key=job.key, engine=job.engine, config=tuple(config.items()), check=job.check.label,
        kind=job.check.kind, name=job.check.name,
        params=" ".join(f"{k}={v}" for k, v in job.check.params), method=job.method,
        verdict=outcome.verdict, label=outcome.label, decided_by=outcome.decided_by,
        metric=outcome.metric, depth=outcome.depth, seconds=outcome.seconds,
        counterexample=cex, timeline=timeline,
        bounds=" ".join(f"{k}={v}" for k, v in outcome.bounds), detail=outcome.detail)


def prepare(out: Path) -> None:
    """Create the output folder and its subfolders; InputError if it cannot be."""
    try:
        for d in (out, out / CEX_DIR, out / TIMELINE_DIR):
            d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output folder {out}: {exc.strerror or exc}; "
                         "give another --out") from None


def write_files(out: Path, job: SweepJob, outcome: Outcome) -> tuple[str | None, str | None]:
    """Write the outcome's counterexample and timeline; their paths relative to `out`
    (the folder of rows.csv), so the rows do not depend on where the folder is."""
    cex = timeline = None
    if outcome.itf is not None:
        cex = f"{CEX_DIR}/{job.check.name}__{job.key}.itf.json"
        (out / cex).write_text(outcome.itf)
    if outcome.timeline is not None:
        timeline = f"{TIMELINE_DIR}/{job.key}.svg"
        (out / timeline).write_text(outcome.timeline)
    return cex, timeline


class Journal:
    """The append-only journal of finished rows."""

    def __init__(self, out: Path) -> None:
        """Open (or create) `out`/rows.jsonl for appending."""
        self._file: IO[str] = open(out / JOURNAL, "a", encoding="utf-8")

    def add(self, rec: dict[str, Any]) -> None:
        """Append one row and flush it, so a kill keeps it."""
        self._file.write(json.dumps(rec, sort_keys=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def done(out: Path, retry_unknown: bool = False) -> dict[str, dict[str, Any]]:
    """Rows already in the output (journal and Parquet), by key: the jobs a re-run skips.
    A VIOLATED row whose counterexample file is gone, and with `retry_unknown` an UNKNOWN
    row, is left out so that it runs again."""
    found: dict[str, dict[str, Any]] = {}
    parquet = out / PARQUET
    if parquet.exists():
        pq = require("pyarrow.parquet")
        try:
            for rec in pq.read_table(parquet).to_pylist():
                found[rec["key"]] = rec
        except Exception:  # a damaged table: the journal still holds the rows
            pass
    journal = out / JOURNAL
    if journal.exists():
        for line in journal.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # the last line of a killed run may be cut
                continue
            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                found[rec["key"]] = rec
    return {k: r for k, r in found.items() if _still_good(out, r, retry_unknown)}


def _still_good(out: Path, rec: dict[str, Any], retry_unknown: bool) -> bool:
    if retry_unknown and rec.get("verdict") == UNKNOWN:
        return False
    cex = rec.get("counterexample")
    return not (rec.get("verdict") == VIOLATED and cex and not (out / cex).exists())


def write_tables(out: Path, records: Sequence[dict[str, Any]]) -> tuple[Path, Path]:
    """rows.parquet and rows.csv of `records` (each replaced whole, never half-written)."""
    pa = require("pyarrow")
    pq = require("pyarrow.parquet")
    columns = _columns(records)
    table = pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in records])
    parquet, csv_path = out / PARQUET, out / CSV
    _atomic(parquet, lambda tmp: pq.write_table(table, tmp))
    _atomic(csv_path, lambda tmp: _write_csv(tmp, columns, records))
    return parquet, csv_path


def _columns(records: Iterable[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        seen.update(dict.fromkeys(r))
    return list(seen)


def _write_csv(path: Path, columns: list[str], records: Iterable[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in records:
            writer.writerow({c: _cell(r.get(c)) for c in columns})


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else value


def _atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def write_skipped(out: Path, grid: Grid, skipped: Sequence[Skipped]) -> Path:
    """skipped.csv: each refused configuration's swept values, the rule and the reason."""
    path = out / SKIPPED
    names = [a.name for a in grid.axes]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*names, "rule", "reason"])
        for s in skipped:
            writer.writerow([*(_cell(v) for _, v in s.values), s.rule, s.message])
    return path
