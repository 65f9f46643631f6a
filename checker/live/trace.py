"""Read a live trace (checker/live/recorder.py) into what the rest of batchproof reads: the
workload the engine ran (its config, the requests as they arrived, the EOS/stop tokens,
accepted and proposed drafts, the clients' aborts) and the StepRecords of the real run,
field for field as the conformance harness (checker/conformance/vllm_real.py) records
them, so the reference can be replayed on the workload and compared step by step.

What the model does not cover is refused with the reason, never guessed: a trace whose
engine set-up or requests reach outside it (KV connectors, KV cache groups other than
full, sliding-window and Mamba "none" without prefix caching, LoRA,
structured output, ...), an engine call pattern the model's step does not have (two
schedules without an update in a synchronous engine), prompts whose shared prefixes the
workload format cannot say, a finish the contract has no reason for. A trace cut short (the
server killed mid-step) keeps its complete steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker.live.recorder import FORMAT, SCHEMA
from model.core.checks import MAX_FILE_BYTES
from model.core.errors import InputError, shown
from model.core.types import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    AbortEvent,
    AcceptEvent,
    DraftEvent,
    EosEvent,
    RequestSpec,
    StepRecord,
    Workload,
)
from model.vllm.config import ENGINE_VLLM_V1, VERSIONS, parse_config
from model.vllm.validation import NEWER_FIELDS

_FIX = "record one with BATCHPROOF_TRACE=FILE vllm serve ... (docs/live.md)"


class OutsideModel(InputError):
    """The trace records something the model does not cover; the message says what."""


@dataclass(frozen=True, slots=True)
class LiveTrace:
    """A live trace read: the workload it ran, the real StepRecords, and per request how it
    ended (`ends`: "stop", "length", "abort", or "held" when the trace ends first), the
    requests added after the last complete step (`late`), the ids aborted before they
    reached the scheduler (`aborted_unseen`: the front end aborted them while they were
    still on their way), and whether the recorder stopped early (`recorder_error`)."""

    path: str
    vllm_version: str
    scheduler: str
    workload: Workload
    records: tuple[StepRecord, ...]
    ends: Mapping[str, str]
    late: tuple[str, ...] = ()
    recorder_error: str = ""
    cut_short: bool = False
    aborted_unseen: tuple[str, ...] = ()  # aborted before they reached the scheduler
    stopped: str = ""  # why the walk stopped before the trace's end (outside the model)
    notes: tuple[str, ...] = field(default_factory=tuple)


def is_live_trace(path: str | Path) -> bool:
    """Whether the file's first line is a live trace header."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline(4096)
        head = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and head.get("format") == FORMAT


def load_live(path: str | Path) -> LiveTrace:
    """Read the live trace at `path` (see the module doc); InputError for a file that is
    not one, OutsideModel for one the model does not cover."""
    lines = list(_lines(path))
    if not lines or lines[0].get("ev") != "header" or lines[0].get("format") != FORMAT:
        raise InputError(f"{path} is not a live trace: its first line is no "
                         f"{FORMAT!r} header; {_FIX}")
    head = lines[0]
    if head.get("schema") != SCHEMA:
        raise InputError(f"{path} is a live trace of schema {shown(head.get('schema'))}; this "
                         f"batchproof reads schema {SCHEMA}")
    raw_cfg = dict(head.get("config") or {})
    outside = raw_cfg.pop("outside", [])
    if outside:
        raise OutsideModel(f"{path}: the engine ran with {'; '.join(outside)}, which the "
                           "model does not cover (docs/live.md, limits)")
    version = str(head.get("vllm_version"))
    if version not in VERSIONS:
        raise OutsideModel(f"{path} was recorded on vLLM {version}; the model has the rules "
                           f"of {', '.join(VERSIONS)}")
    raw_cfg = {k: v for k, v in raw_cfg.items()
               if not (k in _NEWER and not getattr(VERSIONS[version], _NEWER[k]))}
    config = parse_config(raw_cfg, version=version)
    return _Builder(str(path), head, config).build(lines[1:])


# Fields an older release's SchedulerConfig lacks: the recorder reads none there.
_NEWER = {name: switch for name, switch, _, _ in NEWER_FIELDS}


def _lines(path: str | Path) -> Iterator[dict[str, Any]]:
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; {_FIX}") from None
    if size > MAX_FILE_BYTES * 16:
        raise InputError(f"{path} is {size} bytes, more than the {MAX_FILE_BYTES * 16} a "
                         "live trace may have; record a shorter run")
    with p.open(encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except ValueError:
                if n > 1 and not text.endswith("\n"):
                    return  # the server died while writing its last line
                raise InputError(f"{path}:{n} is not JSON; {_FIX}") from None
            if not isinstance(line, dict) or not isinstance(line.get("ev"), str):
                raise InputError(f"{path}:{n} is not a live trace event: {shown(line)}")
            yield line


@dataclass
class _Step:
    schedule: dict[str, Any]
    aborts_before: list[str] = field(default_factory=list)
    aborts_after: list[str] = field(default_factory=list)
    update: dict[str, Any] | None = None
    crash: str = ""
    released_by_aborts: int = 0  # blocks the after-schedule aborts freed (no update yet)


class _Builder:
    """Walks the events once, step by step."""

    def __init__(self, path: str, head: dict[str, Any], config: Any) -> None:
        self.path, self.head, self.cfg = path, head, config
        self.requests: dict[str, RequestSpec] = {}
        self.blocks: dict[str, tuple[str, ...]] = {}
        self.steps: list[_Step] = []
        self.pending_aborts: list[str] = []  # before the next schedule
        self.accepted: dict[int, dict[str, int]] = {}  # output of step -> id -> count
        self.eos: list[EosEvent] = []
        self.drafts: list[DraftEvent] = []
        self.recorder_error = ""
        self.unheld_aborts: list[str] = []  # aborted before the scheduler had them
        self.stopped = ""  # the call pattern the model's step lacks, where the walk stopped

    def _complete(self, step: int) -> bool:
        """Step `step` (1-based) has all its calls: its update (none is due after the
        first schedule of an async engine, whose output the next step processes)."""
        s = self.steps[step - 1]
        return bool(s.crash) or s.update is not None or (
            self.cfg.async_scheduling and step == 1 and len(self.steps) > 1)

    def build(self, events: Sequence[dict[str, Any]]) -> LiveTrace:
        for e in events:
            getattr(self, "on_" + e["ev"], self.on_unknown)(e)
            if self.recorder_error or self.stopped:
                break
        n = sum(1 for i in range(1, len(self.steps) + 1) if self._complete(i))
        if any(self._complete(i) for i in range(n + 1, len(self.steps) + 1)):
            raise InputError(f"{self.path}: a step without its update precedes complete "
                             "ones; the trace is damaged")
        cut_short = n < len(self.steps) and not self.stopped
        complete = self.steps[:n]
        records = tuple(self._record(i + 1, s) for i, s in enumerate(complete))
        arrived = {rid: r for rid, r in self.requests.items() if r.arrival_step <= n}
        late = tuple(rid for rid in self.requests if rid not in arrived)
        requests = _with_prefix_groups(tuple(arrived.values()), self.blocks,
                                       self.cfg.block_size, self.path)
        aborts = tuple(AbortEvent(rid, i + 1, after) for i, s in enumerate(complete)
                       for after, ids in ((False, s.aborts_before), (True, s.aborts_after))
                       for rid in ids)
        accepted = tuple(AcceptEvent(rid, step, c) for step, m in sorted(self.accepted.items())
                         if step <= n for rid, c in m.items() if c)
        workload = Workload(
            config=self.cfg, requests=requests, engine=ENGINE_VLLM_V1, steps=max(n, 1),
            eos=tuple(e for e in self.eos if e.step <= n), accepted=accepted,
            drafts=tuple(d for d in self.drafts if d.step < n), aborts=aborts)
        return LiveTrace(path=self.path, vllm_version=str(self.head.get("vllm_version")),
                         scheduler=str(self.head.get("scheduler")), workload=workload,
                         records=records, ends=_ends(requests, records), late=late,
                         recorder_error=self.recorder_error, cut_short=cut_short,
                         stopped=self.stopped,
                         aborted_unseen=tuple(dict.fromkeys(
                             rid for rid in self.unheld_aborts if rid not in self.requests)))

    # ---- events --------------------------------------------------------------------------

    def on_add(self, e: dict[str, Any]) -> None:
        if e.get("outside"):
            raise OutsideModel(f"{self.path}: request {e['id']} uses "
                               f"{', '.join(e['outside'])}, which the model does not cover")
        rid = e["id"]
        if rid in self.requests:
            raise OutsideModel(f"{self.path}: request id {rid} was added twice")
        self.requests[rid] = RequestSpec(id=rid, prompt_len=int(e["prompt_len"]),
                                         max_tokens=int(e["max_tokens"]),
                                         arrival_step=int(e["step"]),
                                         priority=int(e.get("priority", 0)))
        self.blocks[rid] = tuple(e.get("blocks", ()))

    def on_abort(self, e: dict[str, Any]) -> None:
        self.unheld_aborts.extend(rid for rid in e.get("unheld", ())
                                  if rid not in self.requests)
        if not e["ids"]:
            return
        if e.get("after_schedule"):
            if not self.steps or self.steps[-1].update is not None:
                raise InputError(f"{self.path}: an abort after a schedule that has none")
            self.steps[-1].aborts_after.extend(e["ids"])
            if "free_blocks" in e and self.steps[-1].schedule:
                self.steps[-1].released_by_aborts = (int(e["free_blocks"])
                                                     - int(self.steps[-1].schedule["free_blocks"]))
        else:
            self.pending_aborts.extend(e["ids"])

    def on_finish(self, e: dict[str, Any]) -> None:
        raise OutsideModel(f"{self.path}: step {e['step']}: the engine finished "
                           f"{', '.join(e['ids'])} from outside with {e.get('status')}, "
                           "which the contract has no reason for")

    def on_schedule(self, e: dict[str, Any]) -> None:
        first_async = self.cfg.async_scheduling and len(self.steps) == 1
        if self.steps and not (self._complete(len(self.steps)) or first_async):
            self.stopped = (
                f"step {e['step']} was scheduled before step {len(self.steps)}'s update "
                "(the engine core's batch queue ran two schedules in a row around an empty "
                "batch, core.py:743-750); the model's step has one update between two "
                "schedules")
            return
        if e["step"] != len(self.steps) + 1:
            raise InputError(f"{self.path}: schedule of step {e['step']} after "
                             f"{len(self.steps)} steps; the trace is damaged")
        if sorted(e["preempted"]) != sorted(e["preempted_ids"]):
            raise InputError(f"{self.path}: step {e['step']}: preemptions recorded "
                             f"{e['preempted']} but the SchedulerOutput says "
                             f"{e['preempted_ids']}")
        self.steps.append(_Step(schedule=e, aborts_before=self.pending_aborts))
        self.pending_aborts = []

    def on_crash(self, e: dict[str, Any]) -> None:
        self.steps.append(_Step(schedule={}, aborts_before=self.pending_aborts,
                                crash=e["assertion"]))
        self.pending_aborts = []

    def on_update(self, e: dict[str, Any]) -> None:
        if not self.steps or self.steps[-1].update is not None:
            self.stopped = (f"an update with no schedule before it after step {e['step']} "
                            "(the engine core drained its batch queue while idle, "
                            "core.py:752-760); the model's step schedules before each update")
            return
        expected = len(self.steps) - 1 if self.cfg.async_scheduling else len(self.steps)
        if e.get("output_of") != expected:
            raise InputError(f"{self.path}: the update in step {len(self.steps)} processes "
                             f"step {e.get('output_of')}'s output, not step {expected}'s; "
                             "the trace is damaged")
        step = self.steps[-1]
        step.update = e
        source = e.get("output_of")
        origin = self.steps[source - 1] if isinstance(source, int) else None
        if origin is None:
            return
        spec = origin.schedule.get("spec_scheduled", {})
        entering = set(origin.schedule.get("admitted", ())) | set(
            origin.schedule.get("resumed", ()))
        tokens = e.get("tokens", {})
        self.accepted[source] = {rid: max(tokens.get(rid, 1) - 1, 0)
                                 for rid in spec if rid not in entering}
        for rid, reason in e["finished"]:
            if reason == FINISH_STOP:
                self.eos.append(EosEvent(rid, source))
            elif reason != FINISH_LENGTH:
                raise OutsideModel(f"{self.path}: step {e['step']}: request {rid} finished "
                                   f"with {reason!r}, which the contract has no reason for")

    def on_drafts(self, e: dict[str, Any]) -> None:
        k = self.cfg.num_spec_tokens
        step = int(e["step"])
        scheduled = self.steps[step - 1].schedule.get("scheduled", {}) if step else {}
        for rid, count in e["counts"].items():
            if count != k and rid in scheduled:
                self.drafts.append(DraftEvent(rid, step, int(count)))

    def on_error(self, e: dict[str, Any]) -> None:
        self.recorder_error = f"step {e.get('step')}: {e.get('error')} in {e.get('in')}"

    def on_header(self, e: dict[str, Any]) -> None:
        raise InputError(f"{self.path}: a second header: two engines wrote to one file "
                         "(data parallel, or a restart); record one engine per file")

    def on_unknown(self, e: dict[str, Any]) -> None:
        raise InputError(f"{self.path}: unknown event {e['ev']!r}")

    # ---- records ---------------------------------------------------------------------------

    def _record(self, step: int, s: _Step) -> StepRecord:
        aborted = tuple((rid, FINISH_ABORT) for rid in (*s.aborts_before, *s.aborts_after))
        if s.crash:
            return StepRecord(step=step, scheduled=(), admitted=(), resumed=(),
                              preempted=(), finished=(), free_blocks=0,
                              num_computed_tokens=(), extra=(("assertion", s.crash),))
        e, u = s.schedule, s.update or {}
        scheduled = tuple((rid, int(n)) for rid, n in e["scheduled"].items())
        extra: list[tuple[str, object]] = []
        if self.cfg.enable_prefix_caching:
            extra += list(e["cache"].items())
            released = u.get("released_blocks", s.released_by_aborts)
            extra.append(("released_blocks", int(released)))
        if self.cfg.async_scheduling:
            extra.append(("sampled", tuple(e["samples"])))
        if self.cfg.num_spec_tokens:
            extra += [("spec_scheduled", dict(e.get("spec_scheduled", {}))),
                      ("accepted", {rid: self.accepted.get(step, {}).get(rid, 0)
                                    for rid in e.get("spec_scheduled", {})})]
        if self.cfg.hybrid_kv:
            groups = {rid: tuple(int(n) for n in held)
                      for rid, held in e.get("group_blocks", {}).items()}
            extra += [("blocks_held", {rid: sum(held) for rid, held in groups.items()}),
                      ("group_blocks", groups)]
        elif self.cfg.num_spec_tokens:
            extra.append(("blocks_held", dict(e.get("blocks_held", {}))))
        return StepRecord(
            step=step, scheduled=scheduled, admitted=tuple(e["admitted"]),
            resumed=tuple(e["resumed"]), preempted=tuple(e["preempted"]),
            finished=aborted + tuple((rid, reason) for rid, reason in u.get("finished", ())),
            free_blocks=int(e["free_blocks"]),
            num_computed_tokens=tuple(e["num_computed_tokens"].items()),
            running=tuple(e["running"]), waiting=tuple(e["waiting"]),
            token_budget_left=self.cfg.token_budget - sum(n for _, n in scheduled),
            extra=tuple(extra))


def _with_prefix_groups(requests: tuple[RequestSpec, ...], blocks: Mapping[str, tuple[str, ...]],
                        block_size: int, path: str) -> tuple[RequestSpec, ...]:
    """The requests with prefix groups that say which full prompt blocks they share
    (docs/simulation_contract.md: two requests of a group share block j when both share
    (j + 1) * block_size tokens). A group is the requests whose first block is the same;
    a request's shared prefix is the most blocks it has in common with another one. That
    is exact only when any two share the lesser of their two shared prefixes; otherwise
    OutsideModel names the two."""
    groups: dict[str, list[str]] = {}
    for r in requests:
        if blocks.get(r.id):
            groups.setdefault(blocks[r.id][0], []).append(r.id)
    shared: dict[str, int] = {}
    name: dict[str, str] = {}
    for g, (first, members) in enumerate(groups.items()):
        if len(members) < 2:
            continue
        for a in members:
            shared[a] = max(_common(blocks[a], blocks[b]) for b in members if b != a)
            name[a] = f"p{g}"
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if _common(blocks[a], blocks[b]) != min(shared[a], shared[b]):
                    raise OutsideModel(
                        f"{path}: requests {a} and {b} share {_common(blocks[a], blocks[b])} "
                        f"prompt blocks, not the lesser of the {shared[a]} and {shared[b]} "
                        "each shares with another request: prefixes that branch like this "
                        "are beyond the workload format's prefix groups")
        del first
    out = []
    for r in requests:
        if r.id in shared:
            out.append(RequestSpec(id=r.id, prompt_len=r.prompt_len, max_tokens=r.max_tokens,
                                   arrival_step=r.arrival_step, priority=r.priority,
                                   prefix_group=name[r.id],
                                   shared_prefix_len=shared[r.id] * block_size))
        else:
            out.append(r)
    return tuple(out)


def _common(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _ends(requests: Sequence[RequestSpec], records: Sequence[StepRecord]) -> dict[str, str]:
    """How each request ended in the trace: its finish reason, or "held"."""
    out = {r.id: "held" for r in requests}
    for rec in records:
        for rid, reason in rec.finished:
            out[rid] = reason
    return out
