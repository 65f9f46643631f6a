"""The mistral.rs reference refines the rules: both run the same random workloads, under
random rule switches (every version and every combination no version had), and every
StepRecord field must agree (DESIGN.md, "Three semantics, kept honest"); the rules build
under SymbolicOps (the twin test: they are branch-free)."""

from dataclasses import replace

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st

from model.core.ops import CONCRETE, SymbolicOps, as_python
from model.core.types import EosEvent, RequestSpec, SlotSpec, Workload
from model.mistralrs import engine, rules
from model.mistralrs.config import SWITCH_NAMES, VERSIONS, MistralrsConfig, MistralrsRules
from model.run import simulate, without_unsampled_eos
from model.slots import to_slots


@st.composite
def workloads(draw):
    cfg = MistralrsConfig(
        max_num_batched_tokens=draw(st.integers(1, 10)), max_num_seqs=draw(st.integers(1, 4)),
        max_decode_steps_before_prefill=draw(st.integers(1, 4)),
        block_size=draw(st.sampled_from([1, 2, 4])), num_gpu_blocks=draw(st.integers(2, 10)),
        waiting_timeout=draw(st.sampled_from([1, 2, 64])),
        rules=MistralrsRules(**{name: draw(st.booleans()) for name in SWITCH_NAMES}))
    n = draw(st.integers(1, 4))
    steps = draw(st.integers(1, 14))
    requests = tuple(
        RequestSpec(id=f"q{i}", prompt_len=draw(st.integers(1, cfg.token_capacity - 1)),
                    max_tokens=draw(st.integers(1, 6)), arrival_step=draw(st.integers(1, steps)))
        for i in range(n))
    eos = tuple(EosEvent(id=f"q{draw(st.integers(0, n - 1))}", step=draw(st.integers(1, steps)))
                for _ in range(draw(st.integers(0, 3))))
    return Workload(config=cfg, requests=requests, eos=eos, steps=steps, engine="mistralrs")


def run_rules(w: Workload):
    """The rules under ConcreteOps as StepRecords (slot i = i-th request in arrival order)."""
    sw = to_slots(w)
    state = rules.initial_state(len(sw.specs), sw.cfg)
    out = []
    for eos in sw.eos:
        state, observed, chunk = rules.step_with_chunk(CONCRETE, sw.cfg, sw.specs, state, eos)
        out.append(engine.rules_to_record(observed, sw.ids, chunk,
                                          state.decode_steps_since_prefill))
    return out


def _once(record):
    """The reference's record is the call's event log: a request preempted or resumed twice
    in one step is listed at each event, as upstream preempts it and allocates its blocks
    twice (S:585, the admission loop, revisits an escape's victims; e.g. a single escape
    preempts it, rejects the head, re-admits it, and the length bucketing or a later
    escape preempts it again), and engine.observe counts its preemptions from the list.
    The rules keep one flag per slot, so their record lists such a request once, at its
    last event: preempted by its last queue key, resumed by its run key, which its last
    admission set. (`admitted` never repeats: after a preemption an admission resumes.)"""
    def last_only(ids):
        last = {rid: k for k, rid in enumerate(ids)}
        return tuple(r for k, r in enumerate(ids) if last[r] == k)
    return replace(record, preempted=last_only(record.preempted),
                   resumed=last_only(record.resumed))


def assert_agree(w):
    w = without_unsampled_eos(w)
    reference = simulate(w)
    by_rules = run_rules(w)
    for ref, got in zip(reference, by_rules, strict=True):
        assert got == _once(ref), f"step {ref.step}:\n reference {ref}\n rules     {got}"


@given(workloads())
def test_reference_and_rules_agree_on_every_step(w):
    assert_agree(w)


@pytest.mark.parametrize("version", list(VERSIONS))
@given(w=workloads())
def test_reference_and_rules_agree_at_every_named_version(version, w):
    assert_agree(replace(w, config=replace(w.config, rules=VERSIONS[version])))


def test_rules_build_under_symbolic_ops():
    ops = SymbolicOps()
    cfg = rules.MistralrsRuleConfig.from_config(MistralrsConfig(
        max_num_batched_tokens=4, max_num_seqs=2, max_decode_steps_before_prefill=2,
        block_size=2, num_gpu_blocks=5, waiting_timeout=1))
    specs = [SlotSpec(z3.Int(f"p{i}"), z3.Int(f"m{i}"), z3.Int(f"a{i}")) for i in range(2)]
    state = rules.initial_state(2, cfg)
    for t in range(2):
        state, observed = rules.step(ops, cfg, specs, state, [z3.Bool(f"e{t}{i}")
                                                              for i in range(2)])
    assert isinstance(observed.slots[0].scheduled, z3.ExprRef)


def test_symbolic_rules_evaluate_to_the_concrete_ones():
    """The twin: one symbolic unrolling, pinned to a concrete workload by constraints,
    gives the same observables as the concrete run."""
    cfg = rules.MistralrsRuleConfig.from_config(MistralrsConfig(
        max_num_batched_tokens=4, max_num_seqs=2, max_decode_steps_before_prefill=2,
        block_size=2, num_gpu_blocks=5, waiting_timeout=1))
    values = [(5, 2, 1), (3, 2, 1)]
    concrete_specs = [SlotSpec(*v) for v in values]
    ops = SymbolicOps()
    specs = [SlotSpec(z3.Int(f"p{i}"), z3.Int(f"m{i}"), z3.Int(f"a{i}")) for i in range(2)]
    pins = [x == v for s, vals in zip(specs, values, strict=True)
            for x, v in zip((s.prompt_len, s.max_tokens, s.arrival_step), vals, strict=True)]
    sym, conc = rules.initial_state(2, cfg), rules.initial_state(2, cfg)
    pairs = []
    for _ in range(5):
        sym, s_obs = rules.step(ops, cfg, specs, sym, [False, False])
        conc, c_obs = rules.step(CONCRETE, cfg, concrete_specs, conc, [False, False])
        pairs.append((s_obs, c_obs))
    solver = z3.Solver()
    solver.add(*ops.take_definitions(), *pins)
    assert solver.check() == z3.sat
    model = solver.model()
    for s_obs, c_obs in pairs:
        for so, co in zip(s_obs.slots, c_obs.slots, strict=True):
            for field in ("scheduled", "preempted", "admitted", "finished", "blocks"):
                got = getattr(so, field)
                if isinstance(got, z3.ExprRef):
                    got = as_python(model.eval(got, model_completion=True))
                assert int(got) == int(getattr(co, field)), field
