"""The baselines' reference refines their rules: static and dynamic batching run the same
random workloads through both and every StepRecord field must agree; the rules build under
SymbolicOps (the twin test)."""

from dataclasses import replace

import z3
from hypothesis import given
from hypothesis import strategies as st

from model.baselines import rules
from model.baselines.config import DYNAMIC_DEFAULTS, STATIC_DEFAULTS
from model.baselines.static import rules_to_record
from model.core.ops import SymbolicOps
from model.core.types import EosEvent, RequestSpec, SlotSpec, Workload
from model.run import simulate, without_unsampled_eos
from model.slots import run_rules as slot_rules
from model.slots import to_slots


@st.composite
def workloads(draw):
    engine = draw(st.sampled_from(["static", "dynamic"]))
    base = STATIC_DEFAULTS if engine == "static" else DYNAMIC_DEFAULTS
    cfg = replace(base, max_batch_size=draw(st.integers(1, 4)),
                  block_size=draw(st.sampled_from([1, 2, 4])),
                  num_kv_blocks=draw(st.integers(4, 12)),
                  flush_timeout=draw(st.sampled_from([0, 1, 3])),
                  pad_finished=draw(st.booleans()))
    n = draw(st.integers(1, 4))
    steps = draw(st.integers(1, 14))
    requests = []
    for i in range(n):
        prompt = draw(st.integers(1, min(6, cfg.num_kv_blocks * cfg.block_size - 1)))
        cap = cfg.num_kv_blocks * cfg.block_size - prompt
        requests.append(RequestSpec(id=f"q{i}", prompt_len=prompt,
                                    max_tokens=draw(st.integers(1, max(1, min(5, cap)))),
                                    arrival_step=draw(st.integers(1, steps))))
    eos = tuple(EosEvent(id=f"q{draw(st.integers(0, n - 1))}", step=draw(st.integers(1, steps)))
                for _ in range(draw(st.integers(0, 3))))
    return Workload(config=cfg, requests=tuple(requests), eos=eos, steps=steps, engine=engine)


def run_rules(w: Workload):
    """The rules under ConcreteOps as StepRecords."""
    sw = to_slots(w)
    return [rules_to_record(observed, sw.ids) for observed in slot_rules(sw)]


@given(workloads())
def test_reference_and_rules_agree_on_every_step(w):
    w = without_unsampled_eos(w)
    for ref, got in zip(simulate(w), run_rules(w), strict=True):
        assert got == ref, f"step {ref.step}:\n reference {ref}\n rules     {got}"


def test_rules_build_under_symbolic_ops():
    ops = SymbolicOps()
    cfg = rules.BaselineRuleConfig.from_config(replace(STATIC_DEFAULTS, max_batch_size=2,
                                                       block_size=2, num_kv_blocks=6))
    specs = [SlotSpec(z3.Int(f"p{i}"), z3.Int(f"m{i}"), z3.Int(f"a{i}")) for i in range(2)]
    state = rules.initial_state(2, cfg)
    for t in range(2):
        state, observed = rules.step(ops, cfg, specs, state,
                                     [z3.Bool(f"e{t}{i}") for i in range(2)])
    assert isinstance(observed.slots[0].scheduled, z3.ExprRef)
