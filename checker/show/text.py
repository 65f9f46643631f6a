"""Text timelines: steps as columns, one row per request, tokens per cell.

Cell marks: `+` admitted, `^` resumed, `!` preempted, `$` finished by EOS, `#` finished by
length, `.` waiting with 0 tokens, `~` swapped out to the CPU (vLLM V0 with swap
preemption); a blank cell means the request is not held.
"""

from __future__ import annotations

from collections.abc import Sequence

from checker.show.timeline import marked
from model import registry as engines
from model.core.types import StepRecord, Workload


def _cell(rec: StepRecord, rid: str) -> str:
    sched = dict(rec.scheduled)
    text = marked(str(sched[rid]) if rid in sched else "", rid, rec)
    if not text and rid in rec.waiting:
        text = "."
    if not text and rid in _swapped(rec):
        text = "~"
    return text


def _swapped(rec: StepRecord) -> tuple[str, ...]:
    """The requests an engine with swap preemption holds in its CPU pool after the step
    (vLLM V0's `swapped` queue, the record's `swapped` extra); none elsewhere."""
    return tuple(dict(rec.extra).get("swapped") or ())


def timeline(workload: Workload, records: Sequence[StepRecord], highlight: int | None = None,
             loop: int | None = None, budget: int | None = None) -> str:
    """The run as a table; `highlight` marks the violating step, `loop` the lasso start,
    `budget` the token budget shown (default: the engine's, from the workload's config)."""
    ids = [r.id for r in workload.arrival_order()]
    totals = [sum(n for _, n in r.scheduled) for r in records]
    width = max([4] + [len(_cell(rec, rid)) + 1 for rec in records for rid in ids]
                + [len(str(r.free_blocks)) + 1 for r in records]
                + [len(str(t)) + 1 for t in totals])
    label = max(len("free blocks"), *(len(i) for i in ids))
    head = "step".ljust(label) + "".join(str(r.step).rjust(width) for r in records)
    lines = [head]
    if highlight is not None or loop is not None:
        marks = []
        for r in records:
            mark = "v" if r.step == highlight else ""
            mark = "L" if loop is not None and r.step == loop + 1 else mark
            marks.append(mark.rjust(width))
        lines.append(" " * label + "".join(marks))
    for rid in ids:
        lines.append(rid.ljust(label) + "".join(_cell(r, rid).rjust(width) for r in records))
    if budget is None:
        budget = engines.get(workload.engine).rule_config(workload.config).token_budget
    lines.append("tokens".ljust(label) + "".join(str(t).rjust(width) for t in totals)
                 + f"   (budget {budget})")
    lines.append("free blocks".ljust(label) + "".join(str(r.free_blocks).rjust(width)
                                                      for r in records))
    lines += _spec_rows(records, label, width)
    lines.append("")
    lines.append("marks: +admitted ^resumed !preempted $EOS #length .waiting"
                 + ("  ~swapped out" if any(_swapped(r) for r in records) else "")
                 + ("  v violated here" if highlight is not None else "")
                 + ("  L loop starts (the run repeats from here)" if loop is not None else ""))
    crash = next((dict(r.extra)["assertion"] for r in records
                  if "assertion" in dict(r.extra)), None)
    if crash is not None:
        lines.append(f"engine assertion: {crash}")
    return "\n".join(lines) + "\n"


def _spec_rows(records: Sequence[StepRecord], label: int, width: int) -> list[str]:
    """With speculative decoding, per step the drafts scheduled and, of those, accepted."""
    facts = [dict(r.extra) for r in records]
    if not any("spec_scheduled" in f for f in facts):
        return []

    def total(f: dict[str, object], key: str) -> str:
        value = f.get(key)
        return str(sum(value.values())) if isinstance(value, dict) else ""
    return ["drafts".ljust(label) + "".join(total(f, "spec_scheduled").rjust(width)
                                            for f in facts),
            "accepted".ljust(label) + "".join(total(f, "accepted").rjust(width)
                                              for f in facts)]


def requests_table(workload: Workload) -> str:
    """The workload's requests and EOS choices, one line each."""
    lines = [f"  {r.id}: prompt_len={r.prompt_len} max_tokens={r.max_tokens} "
             f"arrival_step={r.arrival_step} priority={r.priority}" + (
                 f" prefix_group={r.prefix_group} shared_prefix_len={r.shared_prefix_len}"
                 if r.prefix_group is not None else "")
             for r in workload.arrival_order()]
    lines += [f"  EOS: {e.id} at step {e.step}" for e in workload.eos]
    lines += [f"  accepted: {e.count} draft(s) of {e.id} at step {e.step}"
              for e in workload.accepted]
    lines += [f"  drafts: {e.count} proposed for {e.id} after step {e.step}"
              for e in workload.drafts]
    lines += [f"  kv hit: {h.tokens} token(s) of {h.id}, loaded "
              + ("asynchronously" if h.load_async else "within the step")
              for h in workload.kv_hits]
    lines += [f"  kv load: {e.id}'s reported {'failed' if e.failed else 'finished'} at step "
              f"{e.step}" for e in workload.kv_loads]
    return "\n".join(lines) + "\n"


QUEUE_SHOWN = 6  # ids a queue cell shows before it counts the rest


def queue(ids: Sequence[str], shown: int = QUEUE_SHOWN) -> str:
    """A queue in order for a table cell: `-` when empty, the first `shown` ids, then how
    many more (`r0 r1 r2 r3 r4 r5 +4`)."""
    if not ids:
        return "-"
    head = " ".join(ids[:shown])
    return head + (f" +{len(ids) - shown}" if len(ids) > shown else "")
