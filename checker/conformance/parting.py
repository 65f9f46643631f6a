"""Where vLLM's real scheduler and the reference part: the statement of the engine's source
at which a diverging step's control flow leaves the reference's.

The reference (model/vllm/reference.py) is a port written beside the upstream files: most
of its statements cite the upstream line they port (`# S:912`, `# K:575-579`; the letters
are its module doc's). So one step has two paths in the same words: the upstream
statements the real engine executed (a `sys.settrace` line tracer over the engine's files,
each line taken to the statement that holds it), and the upstream statements the
reference's executed statements cite. Where the first differs from the second, the last
statement both took is the decision whose outcome differed: a mutated loop condition, a
check turned around, a `break` made `continue`. That statement, not a 450-line function,
is what `batchproof audit` names as the rule where the two part (`part`).

Two things keep the comparison honest:
- *pinned numbering*: the reference cites vLLM 0.32.0's lines, and a patched engine has
  other line numbers; every executed line is taken back to the pinned release's numbering
  by aligning the installed file with the pinned one's line fingerprint (`LineMap`: a
  short hash of each stripped line, shipped in `parting_vllm.json`), so a patch that adds
  or removes lines moves nothing;
- *reliable anchors*: not every citation marks a statement the engine executes as often
  as the reference executes the citing one (a citation on a `break` whose upstream `if`
  runs every time, or prose in a comment). Only the anchors on which the two paths agree
  on every step of a calibration run over the unmodified release are compared
  (`calibrate`, `reliable` in `parting_vllm.json`), and of those only the ones that also
  agree on the steps of the diverging workload before the diverging one.

When the two paths agree on every reliable anchor of the step, the difference is in a
value, not in the control flow (a victim chosen from the other end of the list): `part`
returns None and the caller names the rule by the differing observable.

The line fingerprint also tells which statements of the installed engine are not the
pinned release's (`EngineSource.changed`: a patched line; blank lines and comments change
none), and the tracer marks each one the real engine runs. When it ran one on its way to
where the paths part, that statement is the cause (`locate`, `changed_cause`): a change is
one cause however many rules its runs reach first (a threshold both loops read, a pool
count two checks read), where the parting would make a group of each.

    python -m checker.conformance.parting calibrate   # rewrites parting_vllm.json

(run in the venv with the unmodified pinned vLLM; the conformance tests check the file.)
"""

from __future__ import annotations

import argparse
import ast
import bisect
import difflib
import functools
import hashlib
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from checker.conformance.causes import Cause, cited_lines, refused_choice, without_choice
from model.core.types import Workload

DATA = Path(__file__).with_name("parting_vllm.json")
#: The reference's citation letters (its module doc), as paths inside the vllm package.
LETTERS: Mapping[str, str] = {
    "S": "v1/core/sched/scheduler.py", "K": "v1/core/kv_cache_manager.py",
    "Q": "v1/core/sched/request_queue.py", "U": "v1/core/sched/utils.py",
    "A": "v1/core/sched/async_scheduler.py", "P": "v1/core/block_pool.py",
    "T": "v1/core/single_type_kv_cache_manager.py", "R": "v1/request.py",
}
#: A citation that opens a comment: `# S:912`, `# K:575-579: ...`, `# S:1222-1227, 1261`.
_CITE = re.compile(r"^#\s*(?P<letter>[A-Z]):(?P<lo>\d+)(?:-(?P<hi>\d+))?\b")
#: How far past a citation's first line its statement may start (a citation of a comment
#: line above the statement).
_REACH = 3
#: The most statements of the traced files an installed engine may change from the pinned
#: release for a changed statement to name a cause (`changed_cause`): more is another
#: release, or a rewrite, whose changed lines are not one change under review.
MOST_CHANGED = 40


@dataclass(frozen=True, slots=True, order=True)
class Point:
    """A statement of the engine, by its file inside the package and the line it starts at
    in the pinned release."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Parting:
    """Where the two paths of step `step` part: `decision` is the last statement both took
    (pinned numbering; `installed_line` its line in the source the engine ran), and
    `real_next` / `reference_next` the statement each took after it (None: its step
    ended there). A value parting (`kind` one of the value kinds) is a statement both
    paths take whose value differs: the victim preempted, a request's tokens."""

    step: int
    decision: Point
    installed_line: int
    real_next: Point | None
    reference_next: Point | None
    real_after: tuple[int, ...] = ()  # installed lines the real engine ran after it, in its file
    kind: str = "flow"  # "flow": the paths part there; else the value that differs there
    real_value: Any = None  # a value parting's two decisions
    reference_value: Any = None


# ------------------------------------------------------------------ the pinned lines

def _hash(line: str) -> str:
    return hashlib.sha1(line.strip().encode()).hexdigest()[:4]


def fingerprint(home: Path) -> dict[str, str]:
    """File -> the hashes of its lines, four hex digits each, of the package at `home`."""
    out = {}
    for rel in sorted(set(LETTERS.values())):
        lines = (home / rel).read_text().split("\n")
        out[rel] = "".join(_hash(line) for line in lines)
    return out


@functools.cache
def data() -> dict[str, Any]:
    """parting_vllm.json: the pinned version, its line fingerprint and reliable anchors."""
    return json.loads(DATA.read_text())


class LineMap:
    """Lines of an installed file to and from the pinned release's (see the module doc):
    equal runs of lines map one to one, a replaced run line by line as far as it goes."""

    def __init__(self, installed: Sequence[str], pinned_hashes: str) -> None:
        mine = [_hash(line) for line in installed]
        theirs = [pinned_hashes[i:i + 4] for i in range(0, len(pinned_hashes), 4)]
        self.to_pinned: dict[int, int] = {}
        # installed lines that are not the pinned release's: replaced or added, and the
        # line just after a run the installed file lacks (where the removed lines ran)
        self.changed: set[int] = set()
        matcher = difflib.SequenceMatcher(a=mine, b=theirs, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag in ("equal", "replace"):
                for k in range(min(i2 - i1, j2 - j1)):
                    self.to_pinned[i1 + k + 1] = j1 + k + 1
            # (the opcodes turn the installed lines into the pinned ones: "delete" drops
            # lines only the installed file has, "insert" adds the ones it lacks)
            if tag in ("replace", "delete"):
                self.changed.update(range(i1 + 1, i2 + 1))
            elif tag == "insert" and i1 < len(mine):
                self.changed.add(i1 + 1)
        self.to_installed = {p: i for i, p in self.to_pinned.items()}


@functools.lru_cache(maxsize=64)
def _source(path: str, mtime_ns: int) -> tuple[tuple[str, ...], ast.Module | None]:
    text = Path(path).read_text()
    try:
        return tuple(text.split("\n")), ast.parse(text, path)
    except (SyntaxError, ValueError):
        return tuple(text.split("\n")), None


def source(path: Path) -> tuple[tuple[str, ...], ast.Module | None]:
    """The lines of `path` and its syntax tree (None when it does not parse), cached per
    version of the file."""
    return _source(str(path), path.stat().st_mtime_ns)


def statements(tree: ast.Module | None) -> tuple[dict[int, int], tuple[int, ...]]:
    """(line -> first line of the innermost statement holding it, the first lines of every
    statement that is not a definition), for a syntax tree."""
    owner: dict[int, int] = {}
    starts: set[int] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                inner: set[int] = set()
                for name in ("body", "orelse", "finalbody", "handlers"):
                    for sub in getattr(child, name, None) or ():
                        inner.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    if line not in inner:
                        owner[line] = child.lineno
                if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef
                                  | ast.ClassDef):
                    starts.add(child.lineno)
            visit(child)

    if tree is not None:
        visit(tree)
    return owner, tuple(sorted(starts))


@dataclass(frozen=True)
class EngineSource:
    """One file of the installed engine: its statements and its map to pinned lines."""

    path: Path
    rel: str
    owner: Mapping[int, int]  # installed line -> its statement's first line
    pinned_starts: tuple[int, ...]  # statements' first lines, pinned numbering
    lines: LineMap
    # first lines of the statements (installed numbering) whose text is not the pinned
    # release's (none past `MOST_CHANGED`)
    changed: frozenset[int] = frozenset()


@functools.lru_cache(maxsize=16)
def _engine_sources(home: str, mtimes: tuple[int, ...]) -> dict[str, EngineSource]:
    hashes = data()["lines"]
    out = {}
    for rel in sorted(set(LETTERS.values())):
        path = Path(home) / rel
        if not path.is_file() or rel not in hashes:
            continue
        lines, tree = source(path)
        owner, starts = statements(tree)
        line_map = LineMap(lines, hashes[rel])
        pinned = tuple(sorted(line_map.to_pinned[s] for s in starts if s in line_map.to_pinned))
        # a blank or comment line changes no statement (it falls in the range of the one
        # around it)
        changed = frozenset(owner[n] for n in line_map.changed if n in owner
                            and lines[n - 1].strip()
                            and not lines[n - 1].lstrip().startswith("#"))
        out[rel] = EngineSource(path, rel, owner, pinned, line_map, changed)
    if sum(len(s.changed) for s in out.values()) > MOST_CHANGED:
        # another release, not a change to the pinned one: its changed lines say nothing
        # of one cause
        out = {rel: replace(s, changed=frozenset()) for rel, s in out.items()}
    return out


def engine_sources(home: str) -> dict[str, EngineSource]:
    """The traced files of the engine installed at `home` (the vllm package's folder)."""
    mtimes = tuple(os.stat(Path(home) / rel).st_mtime_ns if (Path(home) / rel).is_file()
                   else 0 for rel in sorted(set(LETTERS.values())))
    return _engine_sources(home, mtimes)


# -------------------------------------------------------------- the reference's cites

def _reference_path() -> Path:
    from model.vllm import reference

    return Path(reference.__file__)


def reference_cites(sources: Mapping[str, EngineSource]) -> dict[int, Point]:
    """Reference line -> the pinned statement it cites: a statement's first line cites what
    a comment opening with a citation says, on that line or on the comment lines just above
    it (prose citing a line further on, `(S:900)`, is not a citation); the cited line is
    taken to the first statement starting at it or within its range."""
    lines, tree = source(_reference_path())
    _, starts = statements(tree)
    out: dict[int, Point] = {}
    for start in starts:
        found = None
        text = lines[start - 1]
        if "#" in text:
            found = _CITE.match(text[text.index("#"):])
        k = start - 1
        while found is None and k >= 1 and lines[k - 1].lstrip().startswith("#"):
            found = _CITE.match(lines[k - 1].lstrip()) or found
            k -= 1
        if found is None:
            continue
        rel = LETTERS.get(found["letter"])
        if rel is None or rel not in sources:
            continue
        lo = int(found["lo"])
        hi = max(int(found["hi"] or lo), lo + _REACH)
        pinned = sources[rel].pinned_starts
        i = bisect.bisect_left(pinned, lo)
        if i < len(pinned) and pinned[i] <= hi:
            out[start] = Point(rel, pinned[i])
    return out


# ------------------------------------------------------------------------- tracing

#: Statements at which a step's decisions land, each once per decision and in the order
#: the record lists them: a preemption (S:836 `self._preempt_request(`, the record's
#: `preempted`), a running request's tokens (S:851) and a waiting request's (S:1365), both
#: in `scheduled`. At each the tracer reads the decision from the frame: the victim's id,
#: or the request's id and tokens (the names upstream and the reference both use).
PREEMPT = Point(LETTERS["S"], 836)
SCHEDULE_RUNNING = Point(LETTERS["S"], 851)
SCHEDULE_WAITING = Point(LETTERS["S"], 1365)
_VALUED = frozenset({PREEMPT, SCHEDULE_RUNNING, SCHEDULE_WAITING})


def _value_at(point: Point, names: Mapping[str, Any]) -> Any:
    """The decision a valued statement makes, read from its frame's locals (None when the
    names are not there)."""
    if point == PREEMPT:
        victim = names.get("preempted_req", names.get("victim"))
        return getattr(victim, "request_id", None)
    # the request's own id first: a `request_id` local may be a previous iteration's
    rid = getattr(names.get("request"), "request_id", None) or names.get("request_id")
    tokens = names.get("num_new_tokens")
    return (rid, tokens) if isinstance(rid, str) and isinstance(tokens, int) else None


@dataclass(frozen=True, slots=True)
class Visit:
    """One statement on a path: where (`point`, pinned; None for a line the pinned release
    lacks), the installed file and line, the decision a valued statement made, and
    whether the statement is not the pinned release's."""

    point: Point | None
    rel: str = ""
    line: int = 0
    value: Any = None
    changed: bool = False  # a statement whose text is not the pinned release's


class _StepTracer:
    """Visits of the traced files recorded per step while inside one of the `entries`
    functions of `entry_file`, a new step at each outermost call of `step_entry`. A
    changed statement run outside them (adding a request to a queue between two steps)
    opens the next step, without a point: it is no anchor, only where a change ran."""

    def __init__(self, files: Mapping[str, Callable[[int], Visit | None]], entry_file: str,
                 entries: frozenset[str], step_entry: str) -> None:
        self.files = files
        self.entry_file = entry_file
        self.entries = entries
        self.step_entry = step_entry
        self.steps: list[list[Visit]] = []
        self.depth = 0
        self.between: list[Visit] = []  # changed statements run outside the entries

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and self.depth > 0 and self.steps:
            visit = self.files[frame.f_code.co_filename](frame.f_lineno)
            if visit is not None:
                if visit.point in _VALUED:
                    visit = replace(visit, value=_value_at(visit.point, frame.f_locals))
                self.steps[-1].append(visit)
        elif event == "line" and self.depth == 0:
            visit = self.files[frame.f_code.co_filename](frame.f_lineno)
            if visit is not None and visit.changed:
                self.between.append(replace(visit, point=None))
        elif (event == "return" and frame.f_code.co_filename == self.entry_file
              and frame.f_code.co_name in self.entries):
            self.depth -= 1
        return self._local

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        file = frame.f_code.co_filename
        if file not in self.files:
            return None
        if file == self.entry_file and frame.f_code.co_name in self.entries:
            if frame.f_code.co_name == self.step_entry and self.depth == 0:
                self.steps.append(self.between)
                self.between = []
            self.depth += 1
        return self._local

    def run(self, body: Callable[[], Any]) -> Any:
        previous = sys.gettrace()
        sys.settrace(self._global)
        try:
            return body()
        finally:
            sys.settrace(previous)
            self.steps = [_dedupe(s) for s in self.steps]


def _dedupe(visits: Iterable[Visit]) -> list[Visit]:
    """Consecutive visits of one statement (a statement over several lines) once."""
    out: list[Visit] = []
    for v in visits:
        if not out or (out[-1].point, out[-1].rel, out[-1].line) != (v.point, v.rel, v.line):
            out.append(v)
    return out


def trace_reference(workload: Workload, sources: Mapping[str, EngineSource]
                    ) -> list[list[Visit]]:
    """The pinned statements the reference's steps cite, per step. A choice of the
    workload the reference refuses (an EOS where it does not sample, accepted drafts it
    did not schedule: the real run took them, or a crashed run's workload has them) is
    dropped and the run made again, at most once per choice; any other exception ends the
    trace before the step it raised in.

    The choices are dropped on untraced runs, and only the run of the workload they leave
    is traced: the reference is deterministic and the tracer only records, so that run
    raises (or not) as it did untraced, and its trace is the one a traced run per round
    ends with. Tracing every line of every round was a third of a mutation audit's CPU
    (a crashed run's workload drops one choice after another)."""
    from model.vllm import reference

    cites = reference_cites(sources)
    path = str(_reference_path())
    owner, _ = statements(source(_reference_path())[1])

    def visit(line: int) -> Visit | None:
        point = cites.get(owner.get(line, line))
        return Visit(point) if point is not None else None

    workload = without_refused_choices(workload, reference.simulate)
    tracer = _StepTracer({path: visit}, path, frozenset({"step"}), "step")
    try:
        tracer.run(functools.partial(reference.simulate, workload))
    except Exception:  # noqa: BLE001 - the steps before it are still a path
        return tracer.steps[:-1]  # the step it raised in is not a whole path
    return tracer.steps


def without_refused_choices(workload: Workload, simulate: Callable[[Workload], Any]
                            ) -> Workload:
    """`workload` less the choices `simulate` (the reference) refuses, one per run until a
    run raises nothing, or raises for another reason, or a run has been made once per
    choice and once more (the last one's refusal then stays: the bound of one round per
    choice)."""
    choices = len(workload.eos) + len(workload.accepted) + len(workload.drafts)
    for round_ in range(choices + 1):
        try:
            simulate(workload)
        except Exception as exc:  # noqa: BLE001 - which choice, if any, it refuses
            refused = refused_choice(f"{type(exc).__name__}: {exc}")
            smaller = without_choice(workload, refused) if refused is not None else None
            if smaller is not None and round_ < choices:
                workload = smaller
                continue
        return workload
    return workload


def trace_real(run: Callable[[Workload], Any], workload: Workload,
               sources: Mapping[str, EngineSource]) -> list[list[Visit]]:
    """The statements the real engine executes in each step (`run(workload)` the driver;
    a step is one `schedule()` and the updates after it; a crash ends the trace)."""
    def mapper(s: EngineSource) -> Callable[[int], Visit]:
        def visit(line: int) -> Visit:
            start = s.owner.get(line, line)
            at = s.lines.to_pinned.get(start)
            return Visit(Point(s.rel, at) if at is not None else None, s.rel, start,
                         changed=start in s.changed)
        return visit

    files = {str(s.path): mapper(s) for s in sources.values()}
    scheduler = str(sources[LETTERS["S"]].path)
    tracer = _StepTracer(files, scheduler, frozenset({"schedule", "update_from_output",
                                                      "update_draft_token_ids"}), "schedule")
    try:
        tracer.run(lambda: run(workload))
    except Exception:  # noqa: BLE001 - a crash ends the path where it happened
        pass
    return tracer.steps


def anchored(path: Sequence[Visit], use: frozenset[Point] | set[Point]) -> list[Visit]:
    """The visits of `path` at anchors of `use`, a repeated anchor once."""
    out: list[Visit] = []
    for v in path:
        if v.point in use and (not out or out[-1].point != v.point):
            out.append(v)
    return out


# ------------------------------------------------------------------------- parting

def _reliable() -> frozenset[Point]:
    return frozenset(Point(f, int(n)) for f, _, n in
                     (a.rpartition(":") for a in data()["reliable"]))


def _points(visits: Sequence[Visit]) -> list[Point | None]:
    return [v.point for v in visits]


def _disagreeing(reference: Sequence[Visit], real: Sequence[Visit]) -> set[Point]:
    """The anchors in the parts where two paths differ."""
    a, b = _points(reference), _points(real)
    out: set[Point] = set()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            out.update(p for p in (*a[i1:i2], *b[j1:j2]) if p is not None)
    return out


#: The kinds of a value parting: which decision differs where both paths are one.
VICTIM, RUNNING_TOKENS, WAITING_TOKENS, RUNNING_ORDER, WAITING_ORDER = (
    "victim", "running tokens", "waiting tokens", "running order", "waiting order")


def part(run: Callable[[Workload], Any], workload: Workload, step: int, home: str,
         reference_workload: Workload | None = None,
         anchors: frozenset[Point] | None = None) -> Parting | None:
    """Where the real engine's path leaves the reference's, on or before step `step` of
    `workload`: the first step whose two paths differ on the reliable anchors (a path can
    part a step or more before a record shows it), at the first decision of their common
    part that differs in value (`_value_parting`) or else at its end. None when the paths
    agree on every anchor and decision up to `step`, or nothing was traced.
    `reference_workload` is what the reference runs, when not `workload`."""
    return part_and_change(run, workload, step, home, reference_workload, anchors)[0]


@dataclass(frozen=True, slots=True)
class Change:
    """A statement whose text is not the pinned release's (`EngineSource.changed`), run by
    the real engine at `step` on its way to where the two paths part: the last such
    statement it ran before they part (or, when they part nowhere, up to the step asked)."""

    step: int
    rel: str
    line: int  # installed numbering


def part_and_change(run: Callable[[Workload], Any], workload: Workload, step: int,
                    home: str, reference_workload: Workload | None = None,
                    anchors: frozenset[Point] | None = None
                    ) -> tuple[Parting | None, Change | None]:
    """`part`'s answer and the last changed statement the real engine ran up to it
    (`Change`): on the steps before the parting step, and on that step up to the real
    path's next anchor after the decision (a changed condition runs after the anchor
    before it), up to the decision itself for a value parting; up to the end of `step`
    when the paths part nowhere."""
    sources = engine_sources(home)
    if LETTERS["S"] not in sources:
        return None, None
    use = frozenset(anchors if anchors is not None else _reliable())
    reference = trace_reference(reference_workload or workload, sources)
    real = trace_real(run, workload, sources)
    for at in range(1, min(step, len(reference), len(real)) + 1):
        a, b = anchored(reference[at - 1], use), anchored(real[at - 1], use)
        common = 0
        while common < min(len(a), len(b)) and a[common].point == b[common].point:
            common += 1
        value = _value_parting(a[:common], b[:common])
        if value is not None:
            kind, i = value
            assert b[i].point is not None
            return (Parting(at, b[i].point, b[i].line, None, None, kind=kind,
                            real_value=b[i].value, reference_value=a[i].value),
                    _last_change(real, at, b[i], inclusive=True))
        if _points(a) == _points(b):
            continue
        if common == 0:
            break  # they part before the first anchor: nothing to name
        decision = b[common - 1]
        following = b[common] if common < len(b) else None
        assert decision.point is not None
        return (Parting(at, decision.point, decision.line, following.point if following
                        else None, a[common].point if common < len(a) else None,
                        _after(real[at - 1], decision, following)),
                _last_change(real, at, following, inclusive=False))
    return None, _last_change(real, min(step, len(real)), None, inclusive=False)


def _last_change(real: Sequence[Sequence[Visit]], step: int, cut: Visit | None,
                 inclusive: bool) -> Change | None:
    """The last changed statement of `real` (per step) up to the visit `cut` of step
    `step` (inclusive or not; None: the whole step)."""
    found: Change | None = None
    for at, path in enumerate(real[:step], start=1):
        for v in path:
            if at == step and v is cut and not inclusive:
                break
            if v.changed:
                found = Change(at, v.rel, v.line)
            if at == step and v is cut:
                break
    return found


def _value_parting(reference: Sequence[Visit], real: Sequence[Visit]
                   ) -> tuple[str, int] | None:
    """(kind, index) of the first valued statement of a common part at which the two
    paths decide another value: another victim, another request scheduled, or other
    tokens for the same request. A value either side could not read is not compared."""
    for i, (a, b) in enumerate(zip(reference, real, strict=True)):
        if a.point not in _VALUED or a.value is None or b.value is None or a.value == b.value:
            continue
        if a.point == PREEMPT:
            return VICTIM, i
        running = a.point == SCHEDULE_RUNNING
        if a.value[0] == b.value[0]:
            return (RUNNING_TOKENS if running else WAITING_TOKENS), i
        return (RUNNING_ORDER if running else WAITING_ORDER), i
    return None


def _after(path: Sequence[Visit], decision: Visit, following: Visit | None
           ) -> tuple[int, ...]:
    """The statements of the decision's file the real engine ran after the decision and
    before the next anchor of its path, by installed line."""
    out: list[int] = []
    started = False
    for v in path:
        if v is decision:
            started = True
            continue
        if not started:
            continue
        if v is following:
            break
        if v.rel == decision.rel:
            out.append(v.line)
    return tuple(out)


# ----------------------------------------------------------------------- the cause

#: The rule a value parting names, by kind: what it decides and its lines in the pinned
#: release (scheduler.py), 5 to 20 in all.
VALUE_RULES: Mapping[str, tuple[str, tuple[tuple[int, int], ...]]] = {
    VICTIM: ("the preemption victim: FCFS takes running[-1], PRIORITY the max of "
             "(priority, arrival)", ((796, 802), (834, 836))),
    RUNNING_TOKENS: ("a running request's tokens", ((703, 721),)),
    WAITING_TOKENS: ("a waiting request's tokens", ((1118, 1118), (1129, 1129),
                                                    (1155, 1169))),
    RUNNING_ORDER: ("the running loop's order of service", ((657, 662), (846, 848))),
    WAITING_ORDER: ("which waiting request is admitted", ((1341, 1347),)),
}


def statement_text(path: Path, line: int) -> str:
    """The statement starting at `line` of `path` as one line: an `if`/`while`/`assert`'s
    condition unparsed, else its first line (at most 100 characters)."""
    lines, tree = source(path)
    found: ast.stmt | None = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.stmt) and node.lineno == line:
            found = node
            break
    if isinstance(found, ast.If | ast.While):
        word = "while" if isinstance(found, ast.While) else (
            "elif" if lines[line - 1].lstrip().startswith("elif") else "if")
        text = f"{word} {ast.unparse(found.test)}:"
    elif isinstance(found, ast.Assert):
        text = f"assert {ast.unparse(found.test)}"
    else:
        text = lines[line - 1].strip() if 1 <= line <= len(lines) else "?"
    return text if len(text) <= 100 else text[:97] + "..."


def enclosing(tree: ast.AST | None, line: int) -> tuple[list[str], ast.stmt | None]:
    """(the innermost function holding `line`, qualified by its classes, as names; the
    innermost statement holding it) in the parsed `tree` (([], None) without one)."""
    names: list[str] = []
    statement: ast.stmt | None = None

    def visit(node: ast.AST, scope: list[str]) -> None:
        nonlocal names, statement
        for child in ast.iter_child_nodes(node):
            lo, hi = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if lo is None or hi is None or not lo <= line <= hi:
                continue
            inner = scope
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                inner = [*scope, child.name]
                if not isinstance(child, ast.ClassDef):
                    names = inner
            if isinstance(child, ast.stmt):
                statement = child
            visit(child, inner)

    if tree is not None:
        visit(tree, [])
    return names, statement


def function_at(path: Path, line: int) -> str:
    """`Class.method` of the innermost function holding `line` of `path`."""
    _, tree = source(path)
    return ".".join(enclosing(tree, line)[0]) or "<module>"


def is_test(path: Path, line: int) -> bool:
    """The statement starting at `line` of `path` decides a way: an if, a loop, an
    assert."""
    _, tree = source(path)
    return any(isinstance(node, ast.If | ast.While | ast.For | ast.Assert)
               and node.lineno == line for node in (ast.walk(tree) if tree else ()))


def header_end(path: Path, line: int) -> int:
    """The last line of the statement starting at `line` before its body (an `if`'s or a
    loop's condition; a simple statement's own end)."""
    _, tree = source(path)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.stmt) and node.lineno == line:
            head = getattr(node, "test", None) or getattr(node, "iter", None)
            if head is not None:
                return head.end_lineno or line
            if not hasattr(node, "body"):
                return node.end_lineno or line
            return line
    return line


def _model_rows(h: Any, point: Point) -> tuple[tuple[str, str, str], ...]:
    """The model's rules-table rows whose upstream lines hold `point`, narrowest first
    (at most two)."""
    rows = []
    for row in h.model.rules_table:
        cited, _, span = row[0].split()[0].partition(":")
        lo, _, hi = span.partition("-")
        if cited.endswith(point.file) and lo.isdigit() and int(lo) <= point.line <= int(hi or lo):
            rows.append((int(hi or lo) - int(lo), row))
    return tuple(row for _, row in sorted(rows)[:2])


def locate(h: Any, workload: Workload, reference_workload: Workload, step: int, home: str
           ) -> Cause | None:
    """The `Cause` of a run that parts from the reference on or before `step`
    (`part`), with the engine's lines as installed; None when `part` finds none. When
    the real engine ran a statement that is not the pinned release's on its way there
    (`part_and_change`), that statement is the cause (`changed_cause`): where the two
    part, its detail."""
    found, change = part_and_change(h.run, workload, step, home, reference_workload)
    parted = parting_cause(h, found, home) if found is not None else None
    if change is not None:
        return changed_cause(h, change, parted, home)
    return parted


def changed_cause(h: Any, change: Change, parted: Cause | None, home: str) -> Cause:
    """The cause named by a changed statement the real engine ran (`Change`): its lines
    as installed, the changed ones among them, and where the two paths part after it
    (`parted`, the parting's cause, None when they part nowhere on the anchors). A
    changed line is the strongest evidence of where a change to the pinned release is,
    so every symptom a run shows after running it is one group, whichever rule it
    reaches first (a threshold read by both loops, a pool count read by two checks)."""
    src = engine_sources(home)[change.rel]
    start = change.line
    mine = sorted(n for n in src.lines.changed if src.owner.get(n) == start) or [start]
    lines, _ = source(src.path)
    text = (statement_text(src.path, start) if is_test(src.path, start)
            else lines[mine[0] - 1].strip()[:100])
    end = max(header_end(src.path, start), mine[-1])
    shown: tuple[tuple[int, str], ...] = ()
    for pad in (3, 5, 8):  # blank lines at either end are dropped: widen to five or more
        shown = cited_lines(src.path, [(max(start - pad, mine[0] - 8), end + pad)])
        if len(shown) >= 5:
            break
    name = change.rel.rsplit("/", 1)[-1]
    detail = (f"at step {change.step} the real engine ran {name}:{mine[0]}, which is not "
              f"vLLM {data()['version']}'s line there")
    if parted is not None:
        where = f"{parted.file.rsplit('/', 1)[-1]}:{parted.line}"
        detail += f"; the two part after it at {where}: {parted.detail}"
    else:
        detail += ("; the two paths take the same statements up to the step that differs "
                   "(the change alters a value they both read)")
    pinned = src.lines.to_pinned.get(start)
    rows = _model_rows(h, Point(change.rel, pinned)) if pinned is not None else ()
    return Cause(key=f"changed:{change.rel}:{start}", how="changed",
                 file=f"{h.package}/{change.rel}", function=function_at(src.path, start),
                 line=mine[0], statement=text, lines=shown,
                 detail=detail, step=parted.step if parted is not None else change.step,
                 rows=rows or (parted.rows if parted is not None else ()))


def parting_cause(h: Any, found: Parting, home: str) -> Cause:
    """The `Cause` of a parting (`part`): the statement where the paths part, or the
    decision whose value differs, with the engine's lines as installed."""
    sources = engine_sources(home)
    src = sources[found.decision.file]
    line = found.installed_line
    file = f"{h.package}/{found.decision.file}"
    function = function_at(src.path, line)
    text = statement_text(src.path, line)

    def where(point: Point | None) -> str:
        if point is None:
            return "the end of the step"
        there = sources[point.file]
        at = there.lines.to_installed.get(point.line, point.line)
        name = point.file.rsplit("/", 1)[-1]
        return f"{name}:{at} (`{statement_text(there.path, at)}`)"

    if found.kind == "flow":
        # the statement, what the real engine ran right after it, a few lines of context;
        # the line named is the last test the real engine ran there (the anchor may be
        # the statement before it: `x = ...` then `if x > y:`)
        after = [n for n in found.real_after if line < n <= line + 12]
        tests = [n for n in (line, *after) if is_test(src.path, n)]
        hi = max([header_end(src.path, line), *after]) + 4
        spans: list[tuple[int, int]] = [(line - 2, min(hi, line + 17))]
        line = tests[-1] if tests else line
        text = statement_text(src.path, line)
        detail = (f"at step {found.step} the real engine goes on at {where(found.real_next)}, "
                  f"the reference at {where(found.reference_next)}")
    else:
        what, pinned_spans = VALUE_RULES[found.kind]
        to = src.lines.to_installed
        spans = [(to.get(lo, lo), to.get(hi, hi)) for lo, hi in pinned_spans]
        detail = (f"at step {found.step} both reach it, deciding {what} otherwise: the real "
                  f"engine {_value_words(found.kind, found.real_value)}, the reference "
                  f"{_value_words(found.kind, found.reference_value)}")
    # the model's rows of the rule: a value's by where it is decided (the victim's choice)
    ruled = (found.decision if found.kind == "flow"
             else Point(found.decision.file, VALUE_RULES[found.kind][1][0][0]))
    return Cause(key=f"{found.kind}:{found.decision}", how=found.kind, file=file,
                 function=function, line=line, statement=text,
                 lines=cited_lines(src.path, spans), detail=detail, step=found.step,
                 rows=_model_rows(h, ruled),
                 real_stops=found.kind == "flow" and found.real_next is None)


def _value_words(kind: str, value: Any) -> str:
    if kind == VICTIM:
        return f"preempts {value}"
    if isinstance(value, tuple) and len(value) == 2:
        return f"schedules {value[0]} for {value[1]} token(s)"
    return str(value)


def calibrate(workloads: Iterable[Workload], run: Callable[[Workload], Any], home: str,
              ) -> tuple[frozenset[Point], Counter[Point]]:
    """The anchors on which the reference's and the real engine's paths agree on every
    step of `workloads` (run on an engine that agrees with the reference on them), and how
    often each anchor was seen. An anchor in a part where two paths differ is dropped and
    the comparison repeated until every step agrees."""
    sources = engine_sources(home)
    pairs = []
    for w in workloads:
        try:
            w = run(w).effective(w)  # the choices the run took: the reference refuses others
        except Exception:  # noqa: BLE001 - a workload the driver refuses calibrates nothing
            continue
        pairs += list(zip(trace_reference(w, sources), trace_real(run, w, sources),
                          strict=False))
    use = {v.point for a, b in pairs for v in (*a, *b) if v.point is not None}
    while True:
        bad: set[Point] = set()
        for a, b in pairs:
            x, y = anchored(a, use), anchored(b, use)
            if _points(x) != _points(y):
                bad |= _disagreeing(x, y)
        if not bad:
            break
        use -= bad
    seen: Counter[Point] = Counter(v.point for a, _ in pairs for v in anchored(a, use)
                                   if v.point is not None)
    return frozenset(p for p in use if seen[p] > 0), seen


def main(argv: Sequence[str] | None = None) -> int:
    """`calibrate`: rewrite parting_vllm.json from the installed (unmodified) vLLM."""
    parser = argparse.ArgumentParser(prog="python -m checker.conformance.parting",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["calibrate"])
    parser.add_argument("--seeds", type=int, default=12, help="workloads per mode")
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args(argv)
    import logging

    import vllm

    from checker.conformance.modes import MODES
    from checker.conformance.vllm_real import run_real_vllm_detailed

    logging.getLogger("vllm").setLevel(logging.ERROR)
    home = Path(vllm.__file__).parent
    lines = fingerprint(home)
    data.cache_clear()
    _engine_sources.cache_clear()
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    args.out.write_text(json.dumps({**previous, "version": vllm.__version__, "lines": lines,
                                    "reliable": previous.get("reliable", [])}))
    data.cache_clear()
    workloads = [m.generate(seed, 30) for m in MODES.values() for seed in range(args.seeds)]
    reliable, seen = calibrate(workloads, run_real_vllm_detailed, str(home))
    doc = {"version": vllm.__version__,
           "how": f"python -m checker.conformance.parting calibrate --seeds {args.seeds}: "
                  f"{len(workloads)} workloads, seeds 0..{args.seeds - 1} of every mode",
           "reliable": [str(p) for p in sorted(reliable)], "lines": lines}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(reliable)} reliable anchors ({sum(seen.values())} events); {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
