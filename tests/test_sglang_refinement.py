"""SGLang: the reference refines the rules (every StepRecord field and the ratio after every
step agree on random workloads, at page sizes 1, 2, 4 and 16), and the rules are branch-free
(one symbolic run builds and evaluates to the concrete one, at page sizes 1 and 4)."""

from dataclasses import replace

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st

from model.core.ops import SymbolicOps, as_python
from model.core.types import EosEvent, RequestSpec, Workload
from model.run import simulate, without_unsampled_eos
from model.sglang import rules
from model.sglang.config import Config
from model.sglang.engine import run_rules, to_record

PAGE_SIZES = (1, 2, 4, 16)


@st.composite
def workloads(draw, page=1):
    """Page size 1: pools of 14-26 tokens, chunks of 2-8. Larger pages: pools of 3-13 whole
    pages (at least 14 tokens), chunks of 1-8 pages (a multiple, as SGLang requires)."""
    if page == 1:
        pool = draw(st.integers(14, 26))
        chunk = draw(st.sampled_from([None, 2, 3, 4, 8]))
        prefill = draw(st.sampled_from([2, 4, 8, 16]))
        most_tokens = 12
    else:
        pool = page * draw(st.integers(max(3, -(-14 // page)), max(6, -(-26 // page))))
        chunk = draw(st.sampled_from([None, page, 2 * page, 3 * page, 8 * page]))
        prefill = draw(st.sampled_from([2, 4, 8, 16, 2 * page, 4 * page]))
        most_tokens = 12 + 2 * page
    cfg = Config(
        max_total_num_tokens=pool,
        chunked_prefill_size=chunk,
        max_prefill_tokens=prefill,
        page_size=page,
        max_running_requests=draw(st.sampled_from([None, 1, 2, 3, 8])),
        schedule_policy=draw(st.sampled_from(["fcfs", "lof", "lpm"])),
        schedule_conservativeness=draw(st.sampled_from([1.0, 0.1, 0.3, 2.0])),
        enable_mixed_chunk=draw(st.booleans()),
        disable_radix_cache=draw(st.booleans()),
        context_length=draw(st.sampled_from([20, 64])),
        new_token_ratio_decay_steps=draw(st.sampled_from([600, 2])),
    )
    if cfg.mixed_chunk and cfg.chunked_prefill_size <= cfg.effective_max_running_requests:
        cfg = replace(cfg, enable_mixed_chunk=False)
    steps = draw(st.integers(1, 18))
    n = draw(st.integers(1, 4))
    requests = []
    for i in range(n):
        p = draw(st.integers(1, cfg.max_req_input_len - 1))
        requests.append(RequestSpec(f"q{i}", p, draw(st.integers(1, most_tokens)),
                                    draw(st.integers(1, min(steps, 4))), 0,
                                    draw(st.integers(0, p))))
    eos = tuple(EosEvent(f"q{draw(st.integers(0, n - 1))}", draw(st.integers(1, steps)))
                for _ in range(draw(st.integers(0, 2))))
    return Workload(config=cfg, requests=tuple(requests), eos=eos, steps=steps,
                    engine="sglang")


@pytest.mark.parametrize("page", PAGE_SIZES)
@given(data=st.data())
def test_reference_and_rules_agree_on_every_step_and_ratio(page, data):
    w = without_unsampled_eos(data.draw(workloads(page)))
    reference = simulate(w)
    run = run_rules(w)
    for ref, observed, state in zip(reference, run.steps, run.states[1:], strict=True):
        got = to_record(observed, run.ids)
        assert got == replace(ref, extra=()), f"step {ref.step}:\n ref {ref}\n got {got}"
        extra = dict(ref.extra)
        ratio = run.cfg.ratio(state.ratio_n, state.ratio_b)
        assert round(float(ratio), 6) == extra["new_token_ratio_after"]
        kind = {"prefill": rules.KIND_PREFILL, "decode": rules.KIND_DECODE}.get(
            extra["batch"], rules.KIND_OTHER)
        assert observed.step_kind == kind


def test_refinement_covers_retraction_chunking_and_mixed_batches():
    """A fixed workload that exercises what random ones rarely reach."""
    cfg = Config(max_total_num_tokens=14, chunked_prefill_size=6, max_prefill_tokens=16,
                 max_running_requests=3, schedule_conservativeness=0.1,
                 enable_mixed_chunk=True, context_length=64, disable_radix_cache=True)
    reqs = (RequestSpec("c", 1, 6, 2), RequestSpec("b", 1, 5, 3), RequestSpec("a", 1, 4, 4))
    w = Workload(config=cfg, requests=reqs, steps=16, engine="sglang")
    reference = simulate(w)
    kinds = {dict(r.extra)["batch"] for r in reference}
    assert {"prefill", "mixed", "decode"} <= kinds
    assert any(r.preempted for r in reference) and any(r.resumed for r in reference)
    run = run_rules(w)
    for ref, observed in zip(reference, run.steps, strict=True):
        assert to_record(observed, run.ids) == replace(ref, extra=())


def test_refinement_covers_paged_chunking_decode_pages_and_retraction():
    """Page size 4: a chunk cut to whole pages, a continuation that is not, decodes that
    take a page only on a boundary, a retraction, and a fully cached prompt of whole pages
    giving its last page back."""
    cfg = Config(max_total_num_tokens=32, chunked_prefill_size=8, max_prefill_tokens=16,
                 max_running_requests=3, schedule_conservativeness=0.1, page_size=4,
                 context_length=64, retract_decode_steps=64)
    reqs = (RequestSpec("a", 11, 14, 1), RequestSpec("b", 3, 12, 2),
            RequestSpec("c", 8, 6, 3, cached_prefix_len=8))
    w = Workload(config=cfg, requests=reqs, steps=20, engine="sglang")
    reference = simulate(w)
    assert dict(reference[0].scheduled) == {"a": 8}  # 11 > 8: chunked at 2 pages
    assert any(r.preempted for r in reference)
    assert any(dict(r.scheduled).get("c") == 4 for r in reference)  # the recomputed page
    assert all(r.free_blocks % 4 == 0 for r in reference)
    run = run_rules(w)
    for ref, observed in zip(reference, run.steps, strict=True):
        assert to_record(observed, run.ids) == replace(ref, extra=())


@pytest.mark.parametrize("page", (1, 4))
def test_rules_are_branch_free_one_symbolic_run_equals_the_concrete_one(page):
    cfg = Config(max_total_num_tokens=14 if page == 1 else 24,
                 chunked_prefill_size=3 if page == 1 else 4, max_prefill_tokens=8,
                 max_running_requests=3, schedule_policy="lof", enable_mixed_chunk=False,
                 schedule_conservativeness=0.3, context_length=64, page_size=page)
    w = Workload(config=cfg, requests=(RequestSpec("a", 5, 4, 1), RequestSpec("b", 2, 6, 1),
                                       RequestSpec("c", 4, 3, 2)), steps=8, engine="sglang")
    concrete = run_rules(w)
    ops = SymbolicOps()
    state = concrete.states[0]
    solver = z3.Solver()
    for t, expected in enumerate(concrete.states[1:], start=1):
        eos = tuple(z3.BoolVal(False) for _ in concrete.specs)
        state, _ = rules.step(ops, concrete.cfg, concrete.specs, state, eos)
        solver.add(*ops.take_definitions())
        assert solver.check() == z3.sat
        model = solver.model()
        for got, want in zip(state.slots, expected.slots, strict=True):
            for name in ("status", "kv", "computed", "outputs"):
                value = getattr(got, name)
                value = model.eval(value, model_completion=True) if isinstance(
                    value, z3.ExprRef) else value
                assert as_python(value) == getattr(want, name), (t, name)
        free = model.eval(state.free, model_completion=True) if isinstance(
            state.free, z3.ExprRef) else state.free
        assert as_python(free) == expected.free
