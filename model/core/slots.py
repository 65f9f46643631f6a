"""Between a workload (request ids) and the rules' fixed slots (indices), both ways.

Slot i holds the i-th request in arrival order, so a slot's index is its `arrival_time`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model.core.types import DEFAULT_ENGINE, SlotSpec, Workload


@dataclass(frozen=True, slots=True)
class SlotWorkload:
    """A workload laid out on slots: specs, the EOS matrix eos[t][i], and the ids."""

    cfg: Any  # the engine's rule config
    specs: tuple[SlotSpec, ...]
    eos: tuple[tuple[bool, ...], ...]
    ids: tuple[str, ...]
    engine: str = DEFAULT_ENGINE
    # Speculative decoding: spec[t][i] = (drafts accepted, drafts proposed), () without it
    spec: tuple[tuple[tuple[int, int], ...], ...] = ()


def lay_out(workload: Workload, rule_cfg: Any, num_slots: int | None = None) -> SlotWorkload:
    """Lay a workload on slots in arrival order under the rules' config `rule_cfg`; extra
    slots stay unused."""
    ordered = workload.arrival_order()
    n = len(ordered) if num_slots is None else num_slots
    if n < len(ordered):
        raise ValueError(f"{len(ordered)} requests do not fit in {n} slots")
    groups: dict[str, int] = {}
    for r in ordered:
        if r.prefix_group is not None:
            groups.setdefault(r.prefix_group, len(groups) + 1)
    specs = [SlotSpec(r.prompt_len, r.max_tokens, r.arrival_step, r.priority, r.cached_prefix_len,
                      groups.get(r.prefix_group, 0) if r.prefix_group is not None else 0,
                      r.shared_prefix_len) for r in ordered]
    specs += [SlotSpec(1, 1, 0, 0)] * (n - len(ordered))
    ids = tuple(r.id for r in ordered)
    eos_steps = workload.eos_steps()
    eos = tuple(
        tuple(i < len(ids) and t in eos_steps.get(ids[i], ()) for i in range(n))
        for t in range(1, workload.steps + 1)
    )
    k = getattr(rule_cfg, "num_spec_tokens", 0)
    spec: tuple[tuple[tuple[int, int], ...], ...] = ()
    if k:
        accepted, drafts = workload.accepted_by_step(), workload.drafts_by_step()
        spec = tuple(tuple((accepted.get(t, {}).get(ids[i], 0) if i < len(ids) else 0,
                            drafts.get(t, {}).get(ids[i], k) if i < len(ids) else k)
                           for i in range(n)) for t in range(1, workload.steps + 1))
    return SlotWorkload(rule_cfg, tuple(specs), eos, ids, workload.engine, spec)
