"""Any engine's workload on the rules' fixed slots, under the engine's own rule config
(model/core/slots.py lays it out), and the rules run there as a simulator."""

from __future__ import annotations

from model import registry as engines
from model.core.ops import CONCRETE
from model.core.slots import SlotWorkload, lay_out
from model.core.types import Step, Workload

__all__ = ["SlotWorkload", "run_rules", "to_slots"]


def to_slots(workload: Workload, num_slots: int | None = None) -> SlotWorkload:
    """Lay a workload on slots in arrival order, under its engine's rule config; extra slots
    stay unused."""
    cfg = engines.get(workload.engine).rule_config(workload.config)
    return lay_out(workload, cfg, num_slots)


def run_rules(sw: SlotWorkload) -> tuple[Step, ...]:
    """Run the engine's rules under ConcreteOps: the rules as a simulator."""
    engine = engines.get(sw.engine)
    state = engine.initial_state(len(sw.specs), sw.cfg)
    out = []
    for t, eos in enumerate(sw.eos):
        if sw.spec:  # speculative decoding's choices
            state, observed = engine.step(CONCRETE, sw.cfg, sw.specs, state, eos,
                                          spec=sw.spec[t])  # type: ignore[call-arg]
        else:
            state, observed = engine.step(CONCRETE, sw.cfg, sw.specs, state, eos)
        out.append(observed)
    return tuple(out)
