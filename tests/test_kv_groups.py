"""KV cache groups (sliding window, Mamba) in vLLM 0.32.0's reference and rules: the
per-group block accounting of model/vllm/kv_cache.py against hand-worked upstream
arithmetic, and the rules against the reference on the conformance modes' workloads
(checker/conformance/generate.py: hybrid-swa, hybrid-async, hybrid-mamba,
hybrid-mamba-spec), record by record and group by group."""

import copy
from dataclasses import replace

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st
from test_rules_refinement import workloads

from checker.conformance.generate import (
    random_hybrid_mamba_spec_workload,
    random_hybrid_mamba_workload,
    random_hybrid_swa_async_workload,
    random_hybrid_swa_workload,
)
from model.core.errors import InputError
from model.core.ops import CONCRETE, SymbolicOps, as_python
from model.core.types import AcceptEvent, DraftEvent, EosEvent, RequestSpec, Workload
from model.slots import run_rules, to_slots
from model.vllm import rules
from model.vllm.config import GROUP_FULL, GROUP_MAMBA, Config, KvGroup, parse_config
from model.vllm.engine import ENGINE
from model.vllm.records import to_record
from model.vllm.reference import VllmV1Scheduler, simulate
from model.vllm.state import SchedState
from model.vllm.validation import check_field_types

FULL, MAMBA = KvGroup(), KvGroup(GROUP_MAMBA)


def sliding(window: int) -> KvGroup:
    return KvGroup("sliding_window", window)


def facts(record):
    return dict(record.extra)


def valid_choices(w: Workload) -> Workload:
    """`w` with the environment's choices the reference would refuse dropped, step by step
    on the reference itself: accepted counts cut to the drafts scheduled, drafts only for
    requests that sample, EOS only where it is sampled."""
    sched = VllmV1Scheduler(w.config)
    arrivals, eos = w.arrivals_by_step(), w.eos_ids_by_step()
    accepted, drafts = w.accepted_by_step(), w.drafts_by_step()
    kept_eos, kept_accepted, kept_drafts = [], [], []
    for step in range(1, w.steps + 1):
        for spec in arrivals.get(step, ()):
            sched.add_request(spec)
        probe = copy.deepcopy(sched)
        probe.step(frozenset(), None, None)
        room, _ = probe.choice_space()
        acc = {rid: min(n, room[rid]) for rid, n in (accepted.get(step) or {}).items()
               if rid in room}
        e, d = frozenset(eos.get(step, frozenset())), dict(drafts.get(step) or {})
        for trial in ((e, d), (frozenset(), d), (e, {}), (frozenset(), {})):
            try:
                copy.deepcopy(sched).step(trial[0], acc, trial[1])
            except InputError:
                continue
            e, d = trial
            break
        sched.step(e, acc, d)
        kept_eos += [EosEvent(rid, step) for rid in sorted(e)]
        kept_accepted += [AcceptEvent(rid, step, n) for rid, n in acc.items()]
        kept_drafts += [DraftEvent(rid, step, n) for rid, n in d.items()]
    return replace(w, eos=tuple(kept_eos), accepted=tuple(kept_accepted),
                   drafts=tuple(kept_drafts))


def rules_group_blocks(cfg: Config, length: int, nulled: tuple[int, ...]) -> tuple[int, ...]:
    """Each group's real blocks as the rules' slot state says them, in group order."""
    windows = iter(nulled)
    out = []
    for g in cfg.kv_cache_groups:
        if g.kind == GROUP_FULL:
            out.append(length)
        elif g.kind == GROUP_MAMBA:
            out.append(1 + cfg.num_spec_tokens if length else 0)
        else:
            out.append(length - next(windows))
    return tuple(out)


def assert_rules_agree(w: Workload) -> None:
    """The rules give the reference's records (its per-group counts aside, which the
    rules' observables do not carry) and, for every request still running after a step,
    the reference's per-group blocks from their slot state; up to an engine assertion."""
    w = valid_choices(w)
    sw = to_slots(w)
    state = ENGINE.initial_state(len(sw.specs), sw.cfg)
    for t, ref in enumerate(simulate(w)):
        if sw.spec:
            state, observed = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, sw.eos[t],
                                          spec=sw.spec[t])
        else:
            state, observed = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, sw.eos[t])
        got = to_record(observed, sw.ids)
        if "assertion" in facts(ref):
            assert "assertion" in facts(got), f"step {ref.step}"
            return
        by_group = facts(ref)["group_blocks"]
        ref = replace(ref, extra=tuple(x for x in ref.extra if x[0] != "group_blocks"))
        assert got == ref, f"step {ref.step}:\n reference {ref}\n rules     {got}"
        for i, rid in enumerate(sw.ids):
            slot = state.slots[i]
            if rid in by_group and slot.status == 2:  # RUNNING after the step
                assert rules_group_blocks(w.config, slot.blocks, slot.nulled) \
                    == by_group[rid], (ref.step, rid)


@pytest.mark.parametrize("generate", [random_hybrid_swa_workload,
                                      random_hybrid_swa_async_workload,
                                      random_hybrid_mamba_workload,
                                      random_hybrid_mamba_spec_workload])
def test_rules_agree_with_the_reference_on_every_group(generate):
    for seed in range(12):
        assert_rules_agree(generate(seed, 16))


@pytest.mark.slow
@pytest.mark.parametrize("generate", [random_hybrid_swa_workload,
                                      random_hybrid_swa_async_workload,
                                      random_hybrid_mamba_workload,
                                      random_hybrid_mamba_spec_workload])
def test_rules_agree_with_the_reference_on_every_group_deep(generate):
    for seed in range(12, 212):
        assert_rules_agree(generate(seed, 30))


def test_a_sliding_window_frees_the_blocks_behind_it_and_caps_admission():
    # block 4, window 8, budget 16: the admission cap is cdiv(min(8 - 1 + 16, 64), 4) + 1
    # = 7 (kv_cache_interface.py:859-885); after 16 tokens, 16 - 8 + 1 = 9 skipped tokens
    # free blocks 0 and 1 of the window's table (single_type_kv_cache_manager.py:1135-1170)
    cfg = Config(max_model_len=64, block_size=4, num_gpu_blocks=30, max_num_batched_tokens=16,
                 kv_cache_groups=(FULL, sliding(8), MAMBA))
    assert cfg.sliding_window_cap(8) == 7
    w = Workload(cfg, (RequestSpec("a", 30, 10),), steps=3)
    r1, r2, r3 = simulate(w)
    assert facts(r1)["group_blocks"] == {"a": (4, 4, 1)} and r1.free_blocks == 29 - 9
    # step 2: 30 slots, 8 full-attention blocks; the window's table has 8 entries, 2 null
    assert facts(r2)["group_blocks"] == {"a": (8, 6, 1)} and r2.free_blocks == 29 - 15
    assert facts(r3)["group_blocks"] == {"a": (8, 3, 1)}


def test_mamba_holds_one_plus_k_state_blocks_from_the_first_chunk():
    # mode "none": the table is sized for num_tokens + k * max_model_len slots of
    # max_model_len tokens (single_type_kv_cache_manager.py:1690-1697)
    cfg = Config(max_model_len=32, block_size=4, num_gpu_blocks=20, max_num_batched_tokens=8,
                 speculative_method="eagle", num_speculative_tokens=2,
                 kv_cache_groups=(FULL, MAMBA, MAMBA))
    r1, r2 = simulate(Workload(cfg, (RequestSpec("a", 12, 4),), steps=2))
    # 8 + 2 lookahead slots: 3 full-attention blocks, 3 state blocks in each Mamba group
    assert facts(r1)["group_blocks"] == {"a": (3, 3, 3)}
    assert facts(r1)["blocks_held"] == {"a": 9} and r1.free_blocks == 19 - 9


def test_the_default_is_one_full_group_and_workload_json_is_unchanged():
    assert not Config().hybrid_kv and "kv_cache_groups" not in Config().to_dict()
    cfg = parse_config({"kv_cache_groups": [{"kind": "full"},
                                            {"kind": "sliding_window", "sliding_window": 5}]})
    assert cfg.kv_cache_groups == (FULL, sliding(5))
    assert parse_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize(("raw", "words"), [
    ([], "non-empty list"),
    ([{"kind": "local"}], "needs a kind"),
    ([{"kind": "sliding_window"}], "sliding_window must be an integer >= 1"),
    ([{"kind": "mamba", "sliding_window": 4}], "only a sliding_window group"),
])
def test_a_bad_group_list_is_one_input_error(raw, words):
    with pytest.raises(InputError, match=words):
        parse_config({"kv_cache_groups": raw})


def test_prefix_caching_beside_hybrid_groups_is_refused():
    cfg = Config(enable_prefix_caching=True, kv_cache_groups=(FULL, sliding(8)))
    with pytest.raises(InputError, match="prefix caching with KV cache groups"):
        check_field_types(cfg)


def _value(model, x):
    if isinstance(x, tuple):
        return tuple(_value(model, v) for v in x)
    return as_python(model.eval(x, model_completion=True)) if isinstance(x, z3.ExprRef) else x


@pytest.mark.parametrize("groups", [(FULL, sliding(3), sliding(5)), (FULL, MAMBA),
                                    (sliding(2),)])
def test_the_group_rules_are_branch_free_and_give_the_same_steps_symbolically(groups):
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=3, max_model_len=16, block_size=2,
                 num_gpu_blocks=12, kv_cache_groups=groups)
    w = Workload(cfg, (RequestSpec("a", 5, 4, 1, 1), RequestSpec("b", 7, 3, 1, 0),
                       RequestSpec("c", 2, 3, 2, 0)), (EosEvent("a", 5),), steps=8)
    sw = to_slots(w)
    state = SchedState.initial(len(sw.specs), sw.cfg)
    for eos, expected in zip(sw.eos, run_rules(sw), strict=True):
        ops = SymbolicOps()
        state, got = rules.step(ops, sw.cfg, sw.specs, state, eos)
        solver = z3.Solver()
        solver.add(*ops.take_definitions())
        assert solver.check() == z3.sat
        model = solver.model()
        state = replace(state, slots=tuple(
            replace(s, **{f: _value(model, getattr(s, f)) for f in s.__slots__})
            for s in state.slots), free_blocks=_value(model, state.free_blocks),
            next_run_key=_value(model, state.next_run_key),
            wait_head=_value(model, state.wait_head))
        for o_sym, o_con in zip(got.slots, expected.slots, strict=True):
            for f in o_con.__slots__:
                assert _value(model, getattr(o_sym, f)) == getattr(o_con, f), (expected.step, f)
        assert _value(model, got.free_blocks) == expected.free_blocks


@st.composite
def grouped_workloads(draw):
    """A workload of tests/test_rules_refinement.py's strategy with KV cache groups: zero to
    two full-attention groups beside one to three sliding windows (1..6 tokens) or one or
    two Mamba groups, prefix caching off."""
    w = draw(workloads())
    full = draw(st.integers(0, 2))
    if draw(st.booleans()):
        rest = tuple(sliding(draw(st.integers(1, 6))) for _ in range(draw(st.integers(1, 3))))
    else:
        rest = (MAMBA,) * draw(st.integers(1, 2))
    return replace(w, config=replace(w.config, kv_cache_groups=(FULL,) * full + rest,
                                     num_gpu_blocks=draw(st.integers(2, 30))))


@given(grouped_workloads())
def test_rules_agree_with_the_reference_on_random_group_mixes(w):
    assert_rules_agree(w)
