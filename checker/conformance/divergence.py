"""The first step where a real engine's records and our reference's differ: what both
conformance comparisons (vLLM's compare.py, SGLang's sglang_real.py) find and report.

A record is compared field by field (`RECORD_FIELDS`, every StepRecord field but the step
and `extra`), then each engine-specific fact of `extra` as a field named by its key, in
order of first appearance; the order of `extra` does not matter. Each engine's module
subclasses `StepDivergence` with the names and the cell text of its rendering and passes
its own equality.
"""

from __future__ import annotations

import operator
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from model.core.types import StepRecord, Workload

RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(StepRecord)
                                       if f.name not in ("step", "extra"))
CELL_WIDTH = 44  # the widest a column of `StepDivergence.side_by_side` is padded to


@dataclass(frozen=True, slots=True)
class StepDivergence:
    """The first step at which the reference departs from an engine's real scheduler.

    `fields` names the StepRecord fields that differ (an `extra` fact by its key); `real`
    / `reference` are the two records of that step (None when that side has no record of
    it). When the reference raised instead of producing the record of `step`, `error`
    holds its message.
    """

    workload: Workload
    step: int
    fields: tuple[str, ...]
    real: StepRecord | None
    reference: StepRecord | None
    error: str | None = None

    # Set by each engine's subclass: the real engine as the error line names it (and, by
    # default, the real column's heading), the reference column's heading, and whether
    # `render` wraps long cells.
    real_engine: ClassVar[str] = "the real engine"
    reference_name: ClassVar[str] = "the reference"
    wrap_cells: ClassVar[bool] = False

    def real_name(self) -> str:
        """The real column's heading in `render`."""
        return self.real_engine

    def show(self, name: str, record: StepRecord | None) -> str:
        """A cell of `render`: the field (or `extra` fact) `name` of `record` as text."""
        return value_text(name, record)

    def render(self) -> str:
        """The diverging step side by side (`side_by_side`, differing rows marked *); when
        the reference raised instead, the summary and the real engine's record of it."""
        if self.error is not None:
            return f"{self.summary()}\n{self.real_engine}'s record of that step: {self.real}\n"
        return self.side_by_side(self.real_name(), self.reference_name, self.show,
                                 wrap=self.wrap_cells)

    def summary(self) -> str:
        """One line: where and in what the two schedulers differ."""
        if self.error is not None:
            return f"step {self.step}: the reference raised {self.error}"
        return f"step {self.step}: {', '.join(self.fields)} differ"

    def side_by_side(self, real_name: str, reference_name: str,
                     show: Callable[[str, StepRecord | None], str], wrap: bool = False) -> str:
        """The diverging step as a table: a row per compared name (differing rows marked
        *), the real record's cell as `show` writes it beside the reference's, the real
        column padded to at most `CELL_WIDTH`; with `wrap`, long cells wrap at that width
        onto continuation lines."""
        rows = [("", "field", real_name, reference_name)]
        for name in compared_names(self.real, self.reference):
            rows.append(("*" if name in self.fields else "", name,
                         show(name, self.real), show(name, self.reference)))
        width1 = max(len(r[1]) for r in rows)
        width2 = min(CELL_WIDTH, max(len(r[2]) for r in rows))
        lines = [f"first divergence at step {self.step} "
                 f"({len(self.fields)} field(s): {', '.join(self.fields)})"]
        for mark, name, real, ref in rows:
            if not wrap:
                lines.append(f"{mark:1} {name:<{width1}} | {real:<{width2}} | {ref}".rstrip())
                continue
            left = textwrap.wrap(real, width2) or [""]
            right = textwrap.wrap(ref, CELL_WIDTH) or [""]
            for i in range(max(len(left), len(right))):
                a = left[i] if i < len(left) else ""
                b = right[i] if i < len(right) else ""
                head = f"{mark:1} {name:<{width1}}" if i == 0 else " " * (width1 + 2)
                lines.append(f"{head} | {a:<{width2}} | {b}".rstrip())
        return "\n".join(lines) + "\n"


D = TypeVar("D", bound=StepDivergence)


def compared_names(*records: StepRecord | None) -> tuple[str, ...]:
    """`RECORD_FIELDS`, then the `extra` keys of the records in order of first appearance."""
    names: dict[str, None] = {}
    for record in records:
        if record is not None:
            names.update((k, None) for k, _ in record.extra)
    return (*RECORD_FIELDS, *names)


def record_value(name: str, record: StepRecord) -> object:
    """A StepRecord field, or the `extra` fact of that name (None when absent)."""
    if name in RECORD_FIELDS:
        return getattr(record, name)
    return dict(record.extra).get(name)


def items_text(value: Sequence[Any]) -> str:
    """A sequence as compact text: `a:1 b:2` for (key, value) pairs, `a b` for an id list,
    `-` when empty."""
    if not value:
        return "-"
    if all(isinstance(x, tuple) for x in value):
        return " ".join(f"{k}:{v}" for k, v in value)
    return " ".join(str(x) for x in value)


def value_text(name: str, record: StepRecord | None, absent: str = "None") -> str:
    """A record's field (or `extra` fact) as compact text: a mapping or a tuple as
    `items_text` writes it, a fact the record lacks as `absent`."""
    if record is None:
        return "(no record)"
    value = record_value(name, record)
    if value is None:
        return absent
    if isinstance(value, dict):
        value = tuple(value.items())
    if isinstance(value, tuple):
        return items_text(value)
    return str(value)


def first_divergence_of(divergence: type[D], workload: Workload,
                        real: Sequence[StepRecord], reference: Sequence[StepRecord],
                        same: Callable[[object, object], bool] = operator.eq) -> D | None:
    """The first step whose records differ (a compared name whose values are not `same`)
    or that only one side has, as a `divergence`; None when every step agrees."""
    for i in range(max(len(real), len(reference))):
        a = real[i] if i < len(real) else None
        b = reference[i] if i < len(reference) else None
        names = compared_names(a, b)
        if a is None or b is None:
            differing = names
        else:
            differing = tuple(n for n in names
                              if not same(record_value(n, a), record_value(n, b)))
            if not differing:
                continue
        return divergence(workload=workload, step=i + 1, fields=differing, real=a,
                          reference=b)
    return None
