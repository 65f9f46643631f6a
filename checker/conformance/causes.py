"""A finding's cause: the rule at which an engine's real scheduler and batchproof's
reference part, as `batchproof audit` names it (checker/conformance/audit.py groups its
findings by it; checker/conformance/parting.py locates it for vLLM), with the engine's
lines as they are installed."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from model.core.types import Workload


@dataclass(frozen=True, slots=True)
class Cause:
    """The rule at which the real engine and the reference part, for one group of
    findings: a statement of the engine's source as it is installed (`file` inside the
    package's parent, `function`, `line`, `statement`: its first line), the lines cited
    around it (`lines`: (number, text), 5 to 20 of them), what each side did there
    (`detail`), the step at which they part, and the model's rows for that rule (`rows`:
    upstream file:line, reference function, rules function). `key` is what two findings
    share to be one group; `how` is "flow" (the two paths through the step part at the
    statement), a value kind (both take the statement, deciding another value: see
    `checker.conformance.parting`) or "observable" (located by the first differing
    observable alone)."""

    key: str
    how: str
    file: str
    function: str
    line: int | None
    statement: str
    lines: tuple[tuple[int, str], ...]
    detail: str
    step: int | None = None
    rows: tuple[tuple[str, str, str], ...] = ()
    real_stops: bool = False  # the real engine's path ends there (it raised in that step)

    @property
    def span(self) -> str:
        """`vllm/v1/core/sched/scheduler.py:909-916` (ranges joined by commas)."""
        runs: list[list[int]] = []
        for n, _ in self.lines:
            if runs and n == runs[-1][1] + 1:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        parts = [f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in runs]
        return f"{self.file}:{', '.join(parts)}" if parts else self.file

    @property
    def headline(self) -> str:
        """One line: where, in which function, at which statement."""
        at = f"{self.file}:{self.line}" if self.line is not None else self.span
        return f"{at} in {self.function}" + (f": `{self.statement}`" if self.statement else "")


def cited_lines(path: Path, spans: Sequence[tuple[int, int]], most: int = 20,
                least: int = 5) -> tuple[tuple[int, str], ...]:
    """The lines `spans` cover in the source file `path` (installed numbering), at most
    `most` in all (a span is cut at its end), a lone short span widened around its middle
    to `least`; blank lines at either end dropped."""
    try:
        text = path.read_text().split("\n")
    except OSError:
        return ()
    spans = [(max(1, lo), min(len(text), hi)) for lo, hi in spans if lo <= hi]
    if len(spans) == 1 and spans[0][1] - spans[0][0] + 1 < least:
        lo, hi = spans[0]
        grow = least - (hi - lo + 1)
        spans = [(max(1, lo - grow // 2), min(len(text), hi + grow - grow // 2))]
    numbers: list[int] = []
    for lo, hi in spans:
        numbers += [n for n in range(lo, hi + 1) if n not in numbers]
    numbers = numbers[:most]
    while numbers and not text[numbers[0] - 1].strip():
        numbers.pop(0)
    while numbers and not text[numbers[-1] - 1].strip():
        numbers.pop()
    return tuple((n, text[n - 1].rstrip()) for n in numbers)


#: A choice of the workload the reference refuses, by kind, request and step (the
#: reference's InputErrors for an EOS, accepted count or drafts that its own run cannot
#: take: model/vllm/reference.py `_check_eos`, `_check_accepted`, `_update_draft_token_ids`),
#: and the most it would take where it says (`give 0..N`).
_REFUSED = re.compile(r"^InputError: (?P<what>eos|accepted|drafts)\b[^']*? for request "
                      r"'(?P<id>[^']+)' (?:in|after) step (?P<step>\d+)"
                      r"(?:.*?give 0(?:\.\.(?P<most>\d+))?\b)?", re.S)


def refused_choice(error: str | None) -> tuple[str, str, int, int | None] | None:
    """(workload field, request, step, the most the reference takes or None) of the
    choice a reference's error refuses, or None (the field is named as the error names
    the choice: eos, accepted, drafts)."""
    found = _REFUSED.match(error or "")
    if found is None:
        return None
    most = (int(found["most"]) if found["most"] else 0) if "give 0" in found[0] else None
    return found["what"], found["id"], int(found["step"]), most


def without_choice(workload: Workload, refused: tuple[str, str, int, int | None]
                   ) -> Workload | None:
    """`workload` with the choice `refused` names (`refused_choice`) cut to what the
    reference takes (an accepted count above the drafts scheduled: as the driver applies
    it), or dropped; None when it has no such entry."""
    name, rid, step, most = refused
    entries = getattr(workload, name)
    kept = tuple(e if (e.id, e.step) != (rid, step)
                 else replace(e, count=most) if most else None for e in entries)
    if all(a is b for a, b in zip(kept, entries, strict=True)):
        return None
    return replace(workload, **{name: tuple(e for e in kept if e is not None)})
