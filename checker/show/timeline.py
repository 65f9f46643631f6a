"""A run as columns: one per step, as tall as the token budget, one block per scheduled
request sized by its tokens (seed 000's chart). Engine-neutral: it reads only the
StepRecords of the simulation contract and, when known, the workload's requests.

A chunk is a *decode* when it is the one newest sampled token of a request that already
has output (num_computed_tokens before the step == num_tokens - 1, as vLLM's display
convention in model/vllm/reference.chunk_phase); any other chunk, including the
recomputation of a preempted request, is a *prefill* chunk. Without the requests (a
simulation document that carries only steps) the prompt lengths are unknown and so is
the phase.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from model.core.types import FINISH_STOP, RequestSpec, StepRecord, Workload

PREFILL, DECODE, UNKNOWN = "prefill", "decode", "unknown"


class StepEvents(Protocol):
    """What a cell's marks read of a step: a StepRecord or a `Column`."""

    admitted: tuple[str, ...]
    resumed: tuple[str, ...]
    preempted: tuple[str, ...]
    finished: tuple[tuple[str, str], ...]


def marked(text: str, rid: str, step: StepEvents) -> str:
    """A timeline cell's `text` (its tokens) with the request's events in the step marked,
    as every timeline shows them: `+` admitted and `^` resumed before it, `!` preempted,
    then `$` finished by EOS or `#` by length after it."""
    if rid in step.admitted:
        text = "+" + text
    if rid in step.resumed:
        text = "^" + text
    if rid in step.preempted:
        text += "!"
    why = dict(step.finished).get(rid)
    if why is not None:
        text += "$" if why == FINISH_STOP else "#"
    return text


@dataclass(frozen=True, slots=True)
class Block:
    """The tokens one request got in one step."""

    request: str
    tokens: int
    phase: str  # PREFILL | DECODE | UNKNOWN


@dataclass(frozen=True, slots=True)
class Column:
    """One step: its blocks in service order and the events of its requests."""

    step: int
    blocks: tuple[Block, ...]
    admitted: tuple[str, ...]
    resumed: tuple[str, ...]
    preempted: tuple[str, ...]
    finished: tuple[tuple[str, str], ...]  # (id, "stop" | "length")
    idle: tuple[str, ...]  # waiting after scheduling with 0 tokens in this step
    free_blocks: int

    @property
    def tokens(self) -> int:
        """Tokens scheduled in this step."""
        return sum(b.tokens for b in self.blocks)

    def marks(self) -> tuple[tuple[str, str], ...]:
        """(mark, request id) events in a fixed order: + admitted, ^ resumed,
        ! preempted, $ finished by EOS, # finished by length."""
        out = [("+", r) for r in self.admitted] + [("^", r) for r in self.resumed]
        out += [("!", r) for r in self.preempted]
        out += [("$" if why == FINISH_STOP else "#", r) for r, why in self.finished]
        return tuple(out)


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """A request as the legend shows it; `detail` is empty when the workload is unknown."""

    id: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Timeline:
    """Everything a rendering draws. `violated_at` is the 1-based violating step; `loop`
    is the ITF loop index: the run repeats from step `loop + 1`."""

    title: str
    subtitle: str
    budget: int
    requests: tuple[RequestInfo, ...]
    columns: tuple[Column, ...]
    violated_at: int | None = None
    loop: int | None = None
    phases_known: bool = True

    @property
    def loop_step(self) -> int | None:
        """The step the lasso returns to, or None."""
        return None if self.loop is None else self.loop + 1


MARK_NAMES = (("+", "admitted"), ("^", "resumed"), ("!", "preempted"),
              ("$", "finished (EOS)"), ("#", "finished (length)"))


def request_detail(spec: RequestSpec) -> str:
    """One line about a request spec: prompt, max_tokens, arrival, priority."""
    text = (f"prompt {spec.prompt_len}, max_tokens {spec.max_tokens}, "
            f"arrives at step {spec.arrival_step}")
    return text + (f", priority {spec.priority}" if spec.priority else "")


def phases(workload: Workload, records: Sequence[StepRecord]) -> tuple[dict[str, str], ...]:
    """For each record, the phase of each scheduled chunk, derived from the records and
    the prompt lengths alone (no engine internals)."""
    prompt = {r.id: r.prompt_len for r in workload.requests}
    computed: dict[str, int] = {}
    outputs: dict[str, int] = {}
    out = []
    for rec in records:
        facts = dict(rec.extra)
        drafts, accepted = facts.get("spec_scheduled", {}), facts.get("accepted", {})
        assert isinstance(drafts, dict) and isinstance(accepted, dict)
        # vLLM counts a step's drafts as computed until the verify rejects them; what the
        # next step starts from is the verified tokens (the drafts less the rejected).
        after = {rid: n - drafts.get(rid, 0) + accepted.get(rid, 0)
                 for rid, n in rec.num_computed_tokens}
        step_phases = {}
        for rid, n in rec.scheduled:
            before = computed.get(rid, 0)
            num_tokens = prompt[rid] + outputs.get(rid, 0)
            # A decode starts from every token but the newest sampled one; it computes that
            # one, and with speculative decoding commits a run of them (SGLang's EAGLE
            # records the run, vLLM the drafts beside it). An admission or a resumption
            # is a prefill (a recomputation) however many tokens it keeps.
            is_decode = (outputs.get(rid, 0) > 0 and before == num_tokens - 1
                         and rid not in rec.admitted and rid not in rec.resumed)
            step_phases[rid] = DECODE if is_decode else PREFILL
            reached = after.get(rid, before + n)
            if n > 0 and reached >= num_tokens:
                outputs[rid] = outputs.get(rid, 0) + reached - num_tokens + 1
        computed = after
        out.append(step_phases)
    return tuple(out)


def _column(rec: StepRecord, step_phases: dict[str, str] | None) -> Column:
    scheduled = dict(rec.scheduled)
    blocks = tuple(Block(rid, n, step_phases[rid] if step_phases is not None else UNKNOWN)
                   for rid, n in rec.scheduled if n > 0)
    idle = tuple(r for r in rec.waiting if scheduled.get(r, 0) == 0)
    return Column(step=rec.step, blocks=blocks, admitted=rec.admitted, resumed=rec.resumed,
                  preempted=rec.preempted, finished=rec.finished, idle=idle,
                  free_blocks=rec.free_blocks)


def from_run(workload: Workload, records: Sequence[StepRecord], budget: int, title: str,
             subtitle: str = "", violated_at: int | None = None,
             loop: int | None = None) -> Timeline:
    """The timeline of a run whose workload is known (requests in arrival order)."""
    ordered = workload.arrival_order()
    known = {r.id for r in ordered}
    extra = _first_seen(records, known)
    requests = tuple(RequestInfo(r.id, request_detail(r)) for r in ordered)
    requests += tuple(RequestInfo(rid) for rid in extra)
    if extra:  # records name a request the workload lacks: no prompt, no phase
        columns = tuple(_column(rec, None) for rec in records)
        known_phases = False
    else:
        columns = tuple(_column(rec, p) for rec, p in zip(records, phases(workload, records),
                                                           strict=True))
        known_phases = True
    return Timeline(title=title, subtitle=subtitle, budget=budget, requests=requests,
                    columns=columns, violated_at=violated_at, loop=loop,
                    phases_known=known_phases)


def from_records(records: Sequence[StepRecord], budget: int, title: str,
                 subtitle: str = "") -> Timeline:
    """The timeline of records alone: requests in order of first appearance, phases
    unknown (the prompt lengths are not in the records)."""
    requests = tuple(RequestInfo(rid) for rid in _first_seen(records, set()))
    return Timeline(title=title, subtitle=subtitle, budget=budget, requests=requests,
                    columns=tuple(_column(rec, None) for rec in records),
                    phases_known=False)


def _first_seen(records: Sequence[StepRecord], known: set[str]) -> tuple[str, ...]:
    seen: list[str] = []
    for rec in records:
        for rid in (*(r for r, _ in rec.scheduled), *(r for r, _ in rec.num_computed_tokens),
                    *rec.running, *rec.waiting, *rec.preempted, *(r for r, _ in rec.finished)):
            if rid not in known and rid not in seen:
                seen.append(rid)
    return tuple(seen)
