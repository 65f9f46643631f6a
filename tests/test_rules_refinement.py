"""The reference refines the rules: both run the same random workloads, and every step's
observables must be equal (DESIGN.md, "Three semantics, kept honest")."""


from hypothesis import given
from hypothesis import strategies as st

from model.engines.run import without_unsampled_eos
from model.reference.vllm_v1 import simulate
from model.slots import run_rules, to_record, to_slots
from model.state import Config, EosEvent, RequestSpec, Workload


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


@given(workloads())
def test_reference_and_rules_agree_on_every_step(w):
    w = without_unsampled_eos(w)
    reference = simulate(w)
    sw = to_slots(w)
    by_rules = tuple(to_record(s, sw.ids) for s in run_rules(sw))
    for ref, got in zip(reference, by_rules, strict=True):
        assert got == ref, f"step {ref.step}:\n reference {ref}\n rules     {got}"
