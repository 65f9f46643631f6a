"""The reference refines the rules: both run the same random workloads, and every step's
observables must be equal (DESIGN.md, "Three semantics, kept honest")."""


from dataclasses import replace

from hypothesis import assume, given
from hypothesis import strategies as st

from model.core.ops import CONCRETE
from model.core.types import EosEvent, RequestSpec, Workload
from model.run import without_unsampled_eos
from model.slots import run_rules, to_slots
from model.vllm.config import Config, VllmRules
from model.vllm.engine import ENGINE
from model.vllm.records import to_record
from model.vllm.reference import simulate
from model.vllm.validation import is_valid


@st.composite
def workloads(draw):
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    cfg = Config(
        max_num_batched_tokens=draw(st.integers(1, 24)),
        max_num_seqs=draw(st.integers(1, 6)),
        max_model_len=draw(st.integers(4, 40)),
        block_size=block_size,
        num_gpu_blocks=draw(st.integers(2, 14)),
        enable_chunked_prefill=draw(st.booleans()),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 3, 5])),
        long_prefill_token_threshold_adaptive=draw(st.booleans()),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
        scheduler_reserve_full_isl=draw(st.booleans()),
        max_num_active_seqs=draw(st.sampled_from([None, None, 1, 2])),
        max_num_scheduled_tokens=draw(st.sampled_from([None, None, 3, 8])),
    )
    n = draw(st.integers(1, 5))
    steps = draw(st.integers(1, 14))
    requests = tuple(
        RequestSpec(id=f"q{i}", prompt_len=draw(st.integers(1, cfg.max_model_len - 1)),
                    max_tokens=draw(st.integers(1, 8)), arrival_step=draw(st.integers(1, steps)),
                    priority=draw(st.integers(0, 2)))
        for i in range(n))
    eos = tuple(EosEvent(id=f"q{draw(st.integers(0, n - 1))}", step=draw(st.integers(1, steps)))
                for _ in range(draw(st.integers(0, 3))))
    return Workload(config=cfg, requests=requests, eos=eos, steps=steps)


def assert_agree(w: Workload) -> None:
    """The reference's records of `w` (EOS entries that take no effect dropped) and the
    rules' run of it on slots are equal, step by step."""
    w = without_unsampled_eos(w)
    reference = simulate(w)
    sw = to_slots(w)
    by_rules = tuple(to_record(s, sw.ids) for s in run_rules(sw))
    for ref, got in zip(reference, by_rules, strict=True):
        assert got == ref, f"step {ref.step}:\n reference {ref}\n rules     {got}"


@given(workloads())
def test_reference_and_rules_agree_on_every_step(w):
    assert_agree(w)


@given(workloads())
def test_the_induction_invariant_holds_on_every_state_the_rules_reach(w):
    # model/vllm/invariant.py is proved inductive over validated configs; every concrete
    # run of such a config must stay inside it.
    assume(is_valid(w.config))
    sw = to_slots(w)
    state = ENGINE.initial_state(len(sw.specs), sw.cfg)
    assert ENGINE.well_formed(CONCRETE, sw.cfg, sw.specs, state)
    for eos in sw.eos:
        state, _ = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, eos)
        assert ENGINE.well_formed(CONCRETE, sw.cfg, sw.specs, state), state


@st.composite
def cached_workloads(draw):
    """Workloads under prefix caching whose requests mostly share one prefix group, with
    staggered arrivals so later requests find earlier ones' blocks cached."""
    base = draw(workloads())
    cfg = replace(base.config, enable_prefix_caching=True,
                  block_size=draw(st.sampled_from([1, 2, 4])))
    steps = draw(st.integers(2, 14))
    requests = []
    for i in range(draw(st.integers(1, 5))):
        prompt = draw(st.integers(1, cfg.max_model_len - 1))
        group = draw(st.sampled_from(["a", "a", "a", "b", None]))
        shared = draw(st.integers(max(1, prompt - 4), prompt)) if group else 0
        requests.append(RequestSpec(
            id=f"q{i}", prompt_len=prompt, max_tokens=draw(st.integers(1, 6)),
            arrival_step=draw(st.integers(1, steps)), priority=draw(st.integers(0, 2)),
            prefix_group=group, shared_prefix_len=shared))
    eos = tuple(EosEvent(id=f"q{draw(st.integers(0, len(requests) - 1))}",
                         step=draw(st.integers(1, steps)))
                for _ in range(draw(st.integers(0, 3))))
    return Workload(config=cfg, requests=tuple(requests), eos=eos, steps=steps)


@given(cached_workloads())
def test_reference_and_rules_agree_on_every_step_with_prefix_caching(w):
    assert_agree(w)


@given(cached_workloads(), st.booleans())
def test_reference_and_rules_agree_on_every_step_under_async_scheduling(w, caching):
    # The AsyncScheduler: each step schedules, then delivers the previous schedule's output.
    assert_agree(replace(w, config=replace(
        w.config, async_scheduling=True, enable_prefix_caching=caching)))


@given(cached_workloads(), st.booleans())
def test_reference_and_rules_agree_without_the_prefix_hit_cap_up_to_the_crash(w, asynchronous):
    # rules.cap_prefix_hit off: a hit may cover every token and both die at
    # scheduler.py:1170 in the same step, with the same pool; from there the reference
    # records the crash and the rules only flag it (as at scheduler.py:1372).
    w = without_unsampled_eos(replace(w, config=replace(
        w.config, async_scheduling=asynchronous, rules=VllmRules(cap_prefix_hit=False))))
    sw = to_slots(w)
    by_rules = run_rules(sw)
    for ref, observed in zip(simulate(w), by_rules, strict=True):
        got = to_record(observed, sw.ids)
        crash = dict(ref.extra).get("assertion")
        assert (crash is not None) == bool(observed.assertion), f"step {ref.step}"
        if crash is None:
            assert got == ref, f"step {ref.step}:\n reference {ref}\n rules     {got}"
            continue
        # the same request asserted against (joining with 0 tokens), the same pool
        assert crash.startswith("scheduler.py:1170 AssertionError: request ")
        assert len(ref.admitted + ref.resumed) == 1 and ref.scheduled[0][1] == 0
        assert replace(got, extra=()) == replace(ref, extra=()), f"step {ref.step}"
        break
