"""The vLLM V0 reference refines its rules: both run the same workloads in both scheduling
paths (default and chunked prefill), with recompute and with swap preemption, and every
StepRecord field agrees, step by step (DESIGN.md, "Three semantics, kept honest"): tokens
scheduled per request and their order, admitted, resumed, preempted and its order, finished
(the ignored ones too), free blocks, computed tokens, both queues in order, the budget left;
with swap also the `swapped` queue, its CPU blocks, the CPU pool and the engine's death for
lack of CPU swap space. The rules also build under SymbolicOps (they are branch-free) and,
pinned to constants, evaluate to the concrete run."""

from __future__ import annotations

from dataclasses import replace

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st
from vllm_v0_hand import HAND_COMPUTED, SWAP_HAND_COMPUTED

from checker.conformance.vllm_v0_real import random_workload
from model.core.ops import CONCRETE, SymbolicOps, as_python
from model.core.slots import lay_out
from model.core.types import EosEvent, RequestSpec, SlotSpec, Step, StepRecord, Workload
from model.run import without_unsampled_eos
from model.vllm_v0 import rules
from model.vllm_v0.config import ENGINE_VLLM_V0, Config
from model.vllm_v0.reference import simulate
from model.vllm_v0.state import RuleConfig, SchedState


def rules_steps(w: Workload) -> tuple[tuple[str, ...], list[tuple[Step, SchedState]]]:
    """The rules under ConcreteOps on `w` laid out on slots (slot i = i-th request in
    arrival order): the slots' request ids, and each step's observation with the state it
    left."""
    sw = lay_out(w, RuleConfig.from_config(w.config))
    state = rules.initial_state(len(sw.specs), sw.cfg)
    out = []
    for eos in sw.eos:
        state, observed = rules.step(CONCRETE, sw.cfg, sw.specs, state, eos)
        out.append((observed, state))
    return tuple(sw.ids), out


def run_rules(w: Workload) -> list[StepRecord]:
    """The rules under ConcreteOps as StepRecords (slot i = i-th request in arrival order)."""
    ids, steps = rules_steps(w)
    return [rules.to_record(observed, ids, state) for observed, state in steps]


def assert_agree(w: Workload) -> None:
    reference = simulate(w)
    by_rules = run_rules(w)
    assert len(by_rules) == len(reference)
    for ref, got in zip(reference, by_rules, strict=True):
        assert got == ref, f"step {ref.step}:\n reference {ref}\n rules     {got}"


@pytest.mark.parametrize("name", list(HAND_COMPUTED))
def test_rules_agree_with_the_reference_on_the_hand_computed_workloads(name):
    assert_agree(HAND_COMPUTED[name])


@pytest.mark.parametrize("name", list(SWAP_HAND_COMPUTED))
def test_rules_agree_with_the_reference_on_the_swap_workloads(name):
    assert_agree(SWAP_HAND_COMPUTED[name])


def test_rules_swap_out_in_preemption_order_and_die_without_cpu_room():
    steps = run_rules(SWAP_HAND_COMPUTED["default path swaps the tail out and back in"])
    assert steps[1].preempted == ("r1",) and dict(steps[1].extra)["swapped"] == ("r1",)
    crash = run_rules(SWAP_HAND_COMPUTED["a CPU pool too small kills the engine"])
    assert [dict(r.extra).get("assertion", "").endswith("(swapping out r1)")
            for r in crash] == [False, True, True]
    never = run_rules(SWAP_HAND_COMPUTED["a swap-in the whole GPU can never hold is ignored"])
    assert any(r.finished == (("r0", "length"),) and dict(r.extra)["ignored"] == ["r0"]
               for r in never)


def test_rules_preempt_the_tail_and_requeue_the_victims_reversed():
    # The hand-computed preemption of tests/test_vllm_v0_reference.py, read off the rules.
    steps = run_rules(HAND_COMPUTED["recompute preemption of the running tail"])
    assert steps[1].preempted == ("c", "b") and steps[1].waiting == ("b", "c")
    assert steps[1].scheduled == (("a", 1),) and steps[1].free_blocks == 1
    assert steps[2].resumed == ("b",) and steps[2].scheduled == (("b", 2),)


def test_rules_admit_in_a_step_that_preempted_in_chunked_mode():
    steps = run_rules(HAND_COMPUTED["chunked mode admits after a preemption"])
    assert steps[1].scheduled == (("c", 1), ("a", 1)) and steps[1].preempted == ("b",)
    assert steps[1].running == ("a", "c") and steps[1].waiting == ("b",)


# Block 0 runs in the default suite, blocks 1-3 (the deep part) in the slow suite.
_BLOCKS = [0, *(pytest.param(b, marks=pytest.mark.slow) for b in range(1, 4))]


# Block 0 of the default path and of the swap path run in the default suite; the chunked
# path's blocks, and blocks 1-3, in the slow one.
_CHUNKED = [False, pytest.param(True, marks=pytest.mark.slow)]


@pytest.mark.parametrize("chunked", _CHUNKED, ids=["default", "chunked"])
@pytest.mark.parametrize("block", _BLOCKS)
def test_rules_agree_with_the_reference_on_the_conformance_generators_workloads(chunked,
                                                                                block):
    # checker/conformance/vllm_v0_real.py's generator (it needs no vLLM): 30 steps each,
    # the shapes the real V0 Scheduler was compared on; 4 x 40 seeds per mode.
    for seed in range(40 * block, 40 * (block + 1)):
        assert_agree(random_workload(seed, 30, chunked))


@pytest.mark.parametrize("chunked", _CHUNKED, ids=["swap", "swap-chunked"])
@pytest.mark.parametrize("block", _BLOCKS)
def test_rules_agree_with_the_reference_on_the_generators_swap_workloads(chunked, block):
    # The generator's swap mode (`random_workload(..., swap=True)`): 4 x 25 seeds per path.
    for seed in range(25 * block, 25 * (block + 1)):
        assert_agree(random_workload(seed, 30, chunked, swap=True))


def test_rules_put_swapped_in_decodes_before_swapped_in_prefills_in_chunked_mode():
    # Generator seed 200: at step 7 `_schedule_swapped` brings back r5 (a prefill, 5
    # tokens) and r4 (a decode); `running` takes the decodes first (S:1407-1410), while
    # `scheduled` lists the prefill first (S:1427-1431).
    w = random_workload(200, 30, True, swap=True)
    assert_agree(w)
    step = run_rules(w)[6]
    assert step.resumed == ("r5", "r4") and step.running[:2] == ("r4", "r5")


def _valid_eos(w: Workload) -> Workload:
    """The workload less the EOS entries of steps where their request samples nothing."""
    ordered = tuple(sorted(w.eos, key=lambda e: (e.step, e.id)))
    return without_unsampled_eos(replace(w, eos=ordered))


@st.composite
def workloads(draw, chunked: bool, swap: bool = False):
    model_len = draw(st.integers(2, 16))
    seqs = draw(st.integers(1, 4))
    budget = draw(st.integers(max(seqs, 1 if chunked else model_len), model_len + 8))
    block_size = draw(st.sampled_from([1, 2, 4]))
    # Mostly pools the requests outgrow (preemption), some of 100 blocks or more (the 1%
    # watermark keeps one, BM:93).
    blocks = draw(st.one_of(st.integers(1, model_len // block_size + 2),
                            st.integers(100, 110)))
    # Swap: CPU pools of a few blocks (the crash) or about the GPU's (swap-ins).
    cpu = (dict(preemption_mode="swap", num_cpu_blocks=draw(st.one_of(
        st.integers(0, 3), st.integers(blocks // 2, blocks + 4)))) if swap else {})
    cfg = Config(max_num_batched_tokens=budget, max_num_seqs=seqs, max_model_len=model_len,
                 block_size=block_size, num_gpu_blocks=blocks, enable_chunked_prefill=chunked,
                 **cpu)
    n = draw(st.integers(1, 6))
    steps = draw(st.integers(1, 16))
    late = draw(st.integers(1, steps))
    # Now and then a prompt beyond max_model_len (ignored, S:1101-1117).
    longest = model_len + 2 if draw(st.integers(0, 9)) == 0 else model_len
    requests = tuple(
        RequestSpec(id=f"q{i}", prompt_len=draw(st.integers(1, longest)),
                    max_tokens=draw(st.integers(1, 10)), arrival_step=draw(st.integers(1, late)))
        for i in range(n))
    eos = tuple(EosEvent(id=f"q{draw(st.integers(0, n - 1))}", step=draw(st.integers(1, steps)))
                for _ in range(draw(st.integers(0, 3))))
    return _valid_eos(Workload(config=cfg, requests=requests, eos=eos, steps=steps,
                               engine=ENGINE_VLLM_V0))


@given(workloads(chunked=False))
def test_rules_agree_with_the_reference_in_default_mode(w):
    assert_agree(w)


@given(workloads(chunked=True))
def test_rules_agree_with_the_reference_in_chunked_mode(w):
    assert_agree(w)


@given(workloads(chunked=False, swap=True))
def test_rules_agree_with_the_reference_in_swap_mode(w):
    assert_agree(w)


@given(workloads(chunked=True, swap=True))
def test_rules_agree_with_the_reference_in_swap_chunked_mode(w):
    assert_agree(w)


def _symbolic_specs(n: int) -> list[SlotSpec]:
    return [SlotSpec(z3.Int(f"p{i}"), z3.Int(f"m{i}"), z3.Int(f"a{i}")) for i in range(n)]


@pytest.mark.parametrize("chunked", [False, True], ids=["default", "chunked"])
def test_rules_build_under_symbolic_ops(chunked):
    ops = SymbolicOps()
    cfg = RuleConfig.from_config(Config(max_num_batched_tokens=4, max_num_seqs=2,
                                        max_model_len=4, block_size=2, num_gpu_blocks=3,
                                        enable_chunked_prefill=chunked))
    # The config's numbers may be symbolic too (a family of configs in one query).
    ranged = replace(cfg, max_num_batched_tokens=z3.Int("budget"), num_gpu_blocks=z3.Int("gpu"))
    for c in (cfg, ranged):
        state = rules.initial_state(2, c)
        state, observed = rules.step(ops, c, _symbolic_specs(2), state,
                                     [z3.Bool(f"e{i}") for i in range(2)])
        assert isinstance(observed.slots[0].scheduled, z3.ExprRef)
        assert isinstance(state.free_blocks, z3.ExprRef)
        assert isinstance(rules.same_behaviour(ops, state, state), (bool, z3.BoolRef))
    solver = z3.Solver()
    solver.add(*ops.take_definitions())
    assert solver.check() == z3.sat


@pytest.mark.parametrize("chunked", _CHUNKED, ids=["swap", "swap-chunked"])
def test_swap_rules_build_under_symbolic_ops(chunked):
    ops = SymbolicOps()
    cfg = RuleConfig.from_config(Config(max_num_batched_tokens=4, max_num_seqs=2,
                                        max_model_len=4, block_size=2, num_gpu_blocks=3,
                                        enable_chunked_prefill=chunked,
                                        preemption_mode="swap", num_cpu_blocks=2))
    ranged = replace(cfg, max_num_batched_tokens=z3.Int("budget"), num_gpu_blocks=z3.Int("gpu"))
    for c in (cfg, ranged):
        state = rules.initial_state(2, c)
        for t in range(2):
            state, observed = rules.step(ops, c, _symbolic_specs(2), state,
                                         [z3.Bool(f"e{t}_{i}") for i in range(2)])
        assert isinstance(observed.slots[0].scheduled, z3.ExprRef)
        assert isinstance(observed.assertion, z3.BoolRef)
        assert isinstance(state.cpu[0].free_blocks, z3.ExprRef)
        assert isinstance(rules.same_behaviour(ops, state, state), (bool, z3.BoolRef))
    solver = z3.Solver()
    solver.add(*ops.take_definitions())
    assert solver.check() == z3.sat


def test_recompute_states_carry_no_swap_fields():
    cfg = RuleConfig.from_config(Config(max_num_batched_tokens=4, max_num_seqs=2,
                                        max_model_len=4, block_size=2, num_gpu_blocks=3))
    state = rules.initial_state(2, cfg)
    assert state.cpu == () and all(s.swap_key == () for s in state.slots)


_TWINS = {
    "default": dict(max_num_batched_tokens=4, max_num_seqs=3, max_model_len=8, block_size=2,
                    num_gpu_blocks=3),
    "chunked": dict(max_num_batched_tokens=4, max_num_seqs=3, max_model_len=8, block_size=2,
                    num_gpu_blocks=3, enable_chunked_prefill=True),
    # a swap-out, a swap-in and (with 2 CPU blocks) the crash, on each path
    "swap": dict(max_num_batched_tokens=8, max_num_seqs=3, max_model_len=8, block_size=2,
                 num_gpu_blocks=3, preemption_mode="swap", num_cpu_blocks=8),
    "swap-chunked": dict(max_num_batched_tokens=4, max_num_seqs=3, max_model_len=8,
                         block_size=2, num_gpu_blocks=3, enable_chunked_prefill=True,
                         preemption_mode="swap", num_cpu_blocks=8),
    "swap-crash": dict(max_num_batched_tokens=8, max_num_seqs=3, max_model_len=8,
                       block_size=2, num_gpu_blocks=3, preemption_mode="swap",
                       num_cpu_blocks=1),
}


@pytest.mark.parametrize("mode", list(_TWINS))
def test_symbolic_rules_evaluate_to_the_concrete_ones(mode):
    """The twin: one symbolic unrolling, pinned to a workload by constraints, gives the
    concrete run's observables (a preemption, a re-admission and a chunk among them)."""
    cfg = RuleConfig.from_config(Config(**_TWINS[mode]))
    values = [(2, 4, 1), (1, 4, 1), (3, 2, 2)]
    eos = [[False, False, False], [False, False, False], [True, False, False],
           [False, False, False], [False, False, False]]
    concrete_specs = [SlotSpec(*v) for v in values]
    ops = SymbolicOps()
    specs = _symbolic_specs(3)
    pins = [x == v for s, vals in zip(specs, values, strict=True)
            for x, v in zip((s.prompt_len, s.max_tokens, s.arrival_step), vals, strict=True)]
    sym, conc = rules.initial_state(3, cfg), rules.initial_state(3, cfg)
    pairs = []
    for e in eos:
        sym, s_obs = rules.step(ops, cfg, specs, sym, e)
        conc, c_obs = rules.step(CONCRETE, cfg, concrete_specs, conc, e)
        pairs.append((s_obs, c_obs))
    assert any(o.preempted for _, c in pairs for o in c.slots)
    solver = z3.Solver()
    solver.add(*ops.take_definitions(), *pins)
    assert solver.check() == z3.sat
    model = solver.model()
    for s_obs, c_obs in pairs:
        for field in ("free_blocks", "free_blocks_end", "token_budget_left", "num_running",
                      "assertion"):
            got = as_python(model.eval(z3.IntVal(0) + getattr(s_obs, field),
                                       model_completion=True))
            assert got == getattr(c_obs, field), field
        for so, co in zip(s_obs.slots, c_obs.slots, strict=True):
            for field in ("scheduled", "serve_rank", "preempted", "admitted", "resumed",
                          "finished", "sampled", "blocks", "run_key", "queue_key",
                          "num_computed_tokens"):
                got = getattr(so, field)
                if isinstance(got, z3.ExprRef):
                    got = as_python(model.eval(got, model_completion=True))
                assert int(got) == int(getattr(co, field)), field
    if cfg.swaps:
        swapped = any(o.preempted for _, c in pairs for o in c.slots)
        crashed = any(c.assertion for _, c in pairs)
        assert swapped and crashed == (mode == "swap-crash")
