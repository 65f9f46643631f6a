"""Conformance of the vLLM reference with vLLM's real Scheduler (v0.32.0, on CPU).

Tests marked `conformance` need vLLM: in a separate venv, `pip install -e '.[vllm]'`,
then `pip uninstall -y torchvision torchaudio torchcodec` (README), then
`pytest -m conformance`. Without vLLM they are skipped; the pure tests (generator,
shrinker, rendering) always run.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from checker.conformance.compare import Divergence, first_divergence
from checker.conformance.generate import (
    BREAKABLE_RULES,
    STATIC_FEATURES,
    random_any_config,
    random_workload,
    workload_features,
)
from checker.conformance.shrink import candidates, is_admissible, shrink
from checker.conformance.validation import our_verdict, vllm_rules
from checker.conformance.vllm_real import vllm_available, vllm_unavailable_reason
from model.core.types import EosEvent, RequestSpec, StepRecord, Workload
from model.vllm.config import Config
from model.vllm.validation import RULES

needs_vllm = pytest.mark.skipif(
    not vllm_available(), reason=f"{vllm_unavailable_reason()}")

BATCH = range(100)  # the seeds of the generated batch the conformance tests run


# ------------------------------------------------------------------- generator (pure)

def test_the_same_seed_gives_the_same_workload():
    assert random_workload(7) == random_workload(7)
    assert random_workload(7, steps=12) == random_workload(7, steps=12)
    assert len({random_workload(s) for s in range(30)}) == 30


def test_generated_workloads_pass_validation_and_the_input_processor():
    for seed in range(300):
        w = random_workload(seed)
        assert is_admissible(w), (seed, w)
        assert all(1 <= e.step <= w.steps for e in w.eos)


def test_a_batch_of_generated_workloads_has_every_static_feature():
    seen = set().union(*(workload_features(random_workload(s)) for s in BATCH))
    assert set(STATIC_FEATURES) - seen == set()


def test_generated_configs_break_every_rule_and_some_break_none():
    rules = {our_verdict(random_any_config(s))[1] for s in range(400)}
    accepted = sum(our_verdict(random_any_config(s))[0] for s in range(400))
    assert set(BREAKABLE_RULES) <= rules
    assert set(BREAKABLE_RULES) == {r.name for r in RULES}
    assert 40 < accepted < 300


def test_vllm_messages_map_to_rule_names():
    pydantic = ("2 validation errors for SchedulerConfig\nmax_num_seqs\n  Input should be "
                "greater than or equal to 1 [type=greater_than_equal]\npolicy\n  Input "
                "should be 'fcfs' or 'priority' [type=literal_error]")
    assert vllm_rules(pydantic) == {"positive_fields", "policy_known"}
    assert vllm_rules("max_num_active_seqs (9) cannot be greater than max_num_seqs (4).") == {
        "active_seqs_le_num_seqs"}
    assert vllm_rules("something else") == frozenset()


# -------------------------------------------------------------------- shrinker (pure)

def _big_workload() -> Workload:
    cfg = Config(max_num_batched_tokens=32, max_num_seqs=8, max_model_len=64, block_size=4,
                 num_gpu_blocks=40, policy="priority", watermark=0.1)
    reqs = tuple(RequestSpec(id=f"x{i}", prompt_len=5 + 3 * i, max_tokens=9, arrival_step=i + 1,
                             priority=i % 3) for i in range(5))
    return Workload(config=cfg, requests=reqs, eos=(EosEvent("x1", 6), EosEvent("x3", 9)),
                    steps=20)


def test_shrinking_keeps_the_failure_and_reaches_the_smallest_workload():
    def fails(w: Workload) -> bool:  # "a prompt of >= 12 tokens and a pool of >= 6 blocks"
        return any(r.prompt_len >= 12 for r in w.requests) and w.config.num_gpu_blocks >= 6

    small = shrink(_big_workload(), fails)
    assert fails(small)
    assert small.steps == 1 and small.eos == ()
    assert [(r.id, r.prompt_len, r.max_tokens, r.arrival_step, r.priority)
            for r in small.requests] == [("r0", 12, 1, 1, 0)]
    assert small.config.num_gpu_blocks == 6
    assert small.config.policy == "fcfs" and small.config.watermark == 0.0
    assert small.config.max_model_len == 13  # the smallest that admits a 12-token prompt


def test_shrinking_returns_the_workload_when_nothing_smaller_fails():
    w = _big_workload()
    assert shrink(w, lambda c: c == w) == w


def test_every_shrink_candidate_is_smaller_in_one_respect():
    w = _big_workload()
    for c in candidates(w):
        assert c != w
        assert (c.steps < w.steps or len(c.requests) < len(w.requests)
                or len(c.eos) < len(w.eos) or c.requests != w.requests or c.config != w.config)


# ------------------------------------------------------------------ rendering (pure)

def _record(step: int, scheduled: tuple[tuple[str, int], ...], free: int) -> StepRecord:
    return StepRecord(step=step, scheduled=scheduled, admitted=(), resumed=(), preempted=(),
                      finished=(), free_blocks=free, num_computed_tokens=scheduled)


def test_the_first_differing_step_is_reported_side_by_side():
    w = _big_workload()
    real = (_record(1, (("a", 4),), 9), _record(2, (("a", 1), ("b", 3)), 8))
    ref = (_record(1, (("a", 4),), 9), _record(2, (("a", 1),), 8))
    d = first_divergence(w, real, ref)
    assert isinstance(d, Divergence)
    assert (d.step, d.fields) == (2, ("scheduled", "num_computed_tokens"))
    assert d.render() == (
        "first divergence at step 2 (2 field(s): scheduled, num_computed_tokens)\n"
        "  field               | vLLM 0.32.0 (real) | model.reference.vllm_v1\n"
        "* scheduled           | a:1 b:3            | a:1\n"
        "  admitted            | -                  | -\n"
        "  resumed             | -                  | -\n"
        "  preempted           | -                  | -\n"
        "  finished            | -                  | -\n"
        "  free_blocks         | 8                  | 8\n"
        "* num_computed_tokens | a:1 b:3            | a:1\n"
        "  running             | -                  | -\n"
        "  waiting             | -                  | -\n"
        "  token_budget_left   | 0                  | 0\n")
    assert first_divergence(w, real, real) is None


def test_a_missing_step_is_a_divergence():
    w = _big_workload()
    real = (_record(1, (("a", 4),), 9),)
    d = first_divergence(w, real, ())
    assert d is not None and d.step == 1 and d.reference is None


def test_the_driver_module_imports_without_vllm():
    assert isinstance(vllm_available(), bool)
    assert (vllm_unavailable_reason() is None) == vllm_available()


# ----------------------------------------------------- real vLLM (conformance marker)

def _decodes(n: int, max_tokens: int = 40, priority=lambda i: 0) -> tuple[RequestSpec, ...]:
    return tuple(RequestSpec(id=f"d{i}", prompt_len=1, max_tokens=max_tokens,
                             priority=priority(i)) for i in range(n))


P24 = RequestSpec(id="P24", prompt_len=24, max_tokens=4, arrival_step=2)
B16 = Config(max_num_batched_tokens=16, max_num_seqs=16, block_size=16, max_model_len=128,
             num_gpu_blocks=40)


def _real(w: Workload) -> dict[int, StepRecord]:
    from checker.conformance.vllm_real import run_real_vllm

    records = run_real_vllm(w)
    assert [r.step for r in records] == list(range(1, w.steps + 1))
    return {r.step: r for r in records}


# The digest's scenarios (shared/reference/vllm_v1_rules.md, Part 2). Its step k is our
# step k + 1 in A..E: there the decodes are admitted at a step 0 and P24 arrives after it.

@pytest.mark.conformance
@needs_vllm
def test_scenario_a_ample_kv_chunked_prefill():
    s = _real(Workload(B16, _decodes(10) + (P24,), steps=6))
    assert dict(s[2].scheduled) == {**{f"d{i}": 1 for i in range(10)}, "P24": 6}
    assert (s[2].admitted, s[2].free_blocks) == (("P24",), 28)
    assert [dict(s[k].num_computed_tokens)["P24"] for k in (2, 3, 4, 5)] == [6, 12, 18, 24]
    assert s[4].free_blocks == 27
    assert sum(n for _, n in s[6].scheduled) == 11 and dict(s[6].scheduled)["P24"] == 1
    assert s[2].token_budget_left == 0 and s[6].token_budget_left == 5


@pytest.mark.conformance
@needs_vllm
def test_scenario_b_full_decode_batch_starves_the_prefill():
    s = _real(Workload(B16, _decodes(16) + (P24,), steps=4))
    for k in (2, 3, 4):
        assert len(s[k].scheduled) == 16 and s[k].admitted == ()
        assert (len(s[k].running), s[k].waiting) == (16, ("P24",))
        assert dict(s[k].num_computed_tokens)["P24"] == 0


@pytest.mark.conformance
@needs_vllm
def test_scenario_c_scarce_kv_fcfs_preempts_from_the_tail_and_self_preempts():
    s = _real(Workload(replace(B16, num_gpu_blocks=12), _decodes(10) + (P24,), steps=23))
    for k in range(2, 17):
        assert (len(s[k].scheduled), s[k].waiting, s[k].free_blocks) == (10, ("P24",), 1)
    assert dict(s[17].scheduled) == {f"d{i}": 1 for i in range(5)}
    assert s[17].preempted == ("d9", "d8", "d7", "d6", "d5")  # in preemption order
    assert s[17].waiting == ("d5", "d6", "d7", "d8", "d9", "P24")
    assert (len(s[17].running), s[17].free_blocks) == (5, 1)
    assert all(s[k].admitted == s[k].resumed == () for k in range(18, 24))


@pytest.mark.conformance
@needs_vllm
def test_scenario_c2_scarce_kv_priority_victims():
    cfg = replace(B16, num_gpu_blocks=12, policy="priority")
    s = _real(Workload(cfg, _decodes(10, priority=lambda i: i % 3) + (P24,), steps=17))
    assert s[1].admitted == ("d0", "d3", "d6", "d9", "d1", "d4", "d7", "d2", "d5", "d8")
    assert dict(s[17].scheduled) == {d: 1 for d in ("d0", "d3", "d6", "d9", "d1")}
    assert s[17].preempted == ("d8", "d5", "d2", "d7", "d4")


@pytest.mark.conformance
@needs_vllm
def test_scenario_d_no_chunking_breaks_on_a_prompt_over_the_budget_left():
    cfg = replace(B16, max_num_batched_tokens=32, max_model_len=32,
                  enable_chunked_prefill=False)
    s = _real(Workload(cfg, _decodes(10, max_tokens=20) + (P24,), steps=5))
    for k in (2, 3, 4, 5):
        assert sum(n for _, n in s[k].scheduled) == 10
        assert dict(s[k].num_computed_tokens)["P24"] == 0


@pytest.mark.conformance
@needs_vllm
def test_scenario_e_eos_length_preemption_and_resume():
    w = Workload(replace(B16, num_gpu_blocks=12), _decodes(10, max_tokens=20) + (P24,),
                 eos=(EosEvent("d1", 4),), steps=28)
    s = _real(w)
    assert s[4].finished == (("d1", "stop"),)
    assert s[5].admitted == ("P24",) and dict(s[5].scheduled)["P24"] == 7
    assert dict(s[8].scheduled)["P24"] == 3
    assert s[11].finished == (("P24", "length"),)
    assert s[17].preempted == ("d9", "d8", "d7", "d6")
    assert s[20].finished == tuple((d, "length") for d in ("d0", "d2", "d3", "d4", "d5"))
    assert (dict(s[21].scheduled), s[21].resumed) == ({"d6": 16}, ("d6",))
    assert (dict(s[22].scheduled), s[22].resumed) == ({"d6": 1, "d7": 15}, ("d7",))
    assert dict(s[23].scheduled) == {"d6": 1, "d7": 2, "d8": 13}
    assert dict(s[24].scheduled) == {"d6": 1, "d7": 1, "d8": 4, "d9": 10}
    assert [s[k].finished for k in (25, 26, 27, 28)] == [
        ((d, "length"),) for d in ("d6", "d7", "d8", "d9")]


@pytest.mark.conformance
@needs_vllm
def test_scenario_f_no_admission_in_a_step_that_preempted():
    cfg = Config(max_num_batched_tokens=64, max_num_seqs=16, block_size=16, max_model_len=128,
                 num_gpu_blocks=5, policy="priority")
    reqs = (RequestSpec("d0", 15, 20, 1, 0), RequestSpec("L", 40, 20, 1, 1),
            RequestSpec("W", 4, 20, 2, 0))
    s = _real(Workload(cfg, reqs, steps=4))
    assert (dict(s[1].scheduled), s[1].admitted, s[1].free_blocks) == (
        {"d0": 15, "L": 40}, ("d0", "L"), 0)
    assert (dict(s[2].scheduled), s[2].waiting, s[2].free_blocks) == ({"d0": 1, "L": 1},
                                                                      ("W",), 0)
    assert (dict(s[3].scheduled), s[3].preempted, s[3].waiting, s[3].free_blocks) == (
        {"d0": 1}, ("L",), ("W", "L"), 2)
    assert dict(s[3].num_computed_tokens)["L"] == 0
    assert (dict(s[4].scheduled), s[4].admitted, s[4].waiting, s[4].free_blocks) == (
        {"d0": 1, "W": 4}, ("W",), ("L",), 1)


@pytest.mark.conformance
@needs_vllm
def test_an_eos_entry_on_a_step_without_sampling_has_no_effect():
    from checker.conformance.vllm_real import run_real_vllm_detailed

    w = Workload(B16, _decodes(2) + (P24,), eos=(EosEvent("P24", 2), EosEvent("d0", 3)),
                 steps=4)
    run = run_real_vllm_detailed(w)
    assert run.effective_eos(w) == (EosEvent("d0", 3),)  # P24 is mid-prefill at step 2
    assert run.records == run_real_vllm_detailed(replace(w, eos=run.effective_eos(w))).records


@pytest.mark.conformance
@needs_vllm
def test_the_generated_batch_reaches_every_reachable_upstream_branch():
    from checker.conformance.branches import branch_counts, missing_reachable

    counts = branch_counts(random_workload(s) for s in BATCH)
    assert missing_reachable(counts) == ()


@pytest.mark.conformance
@needs_vllm
def test_the_reference_agrees_with_the_real_scheduler_on_every_generated_step():
    from checker.conformance.compare import compare

    for seed in BATCH:
        divergence = compare(random_workload(seed))
        assert divergence is None, f"seed {seed}:\n{divergence.render()}"


# The one known departure: model/vllm_config.check_field_types raises a plain InputError
# (no rule) for max_num_batched_tokens / max_num_seqs < 1, where vLLM's pydantic
# constraint (vllm/config/scheduler.py:48, 62: ge=1) is RULES' "positive_fields".
_NO_RULE_FIELDS: tuple[str, ...] = ()


def _rule_free_case(cfg: Config) -> bool:
    return any(getattr(cfg, f) < 1 for f in _NO_RULE_FIELDS)


@pytest.mark.conformance
@needs_vllm
def test_validate_accepts_and_rejects_what_vllm_does_and_for_the_same_rule():
    from checker.conformance.validation import real_vllm_accepts

    for seed in range(600):
        cfg = random_any_config(seed)
        accepted, message = real_vllm_accepts(cfg)
        ours, rule, our_message = our_verdict(cfg)
        assert ours == accepted, (seed, cfg, message, our_message)
        if not accepted and not _rule_free_case(cfg):
            assert rule in vllm_rules(message or ""), (seed, cfg, rule, message)


@pytest.mark.conformance
@needs_vllm
def test_non_positive_batch_sizes_are_rejected_under_positive_fields():
    for cfg in (replace(Config(), max_num_batched_tokens=0), replace(Config(), max_num_seqs=0)):
        assert our_verdict(cfg)[1] == "positive_fields"


@pytest.mark.conformance
@needs_vllm
def test_a_departing_reference_is_caught_shrunk_and_reported(monkeypatch, capsys):
    import model.vllm.reference as reference
    from checker.conformance.__main__ import main

    honest = reference.iter_steps

    def reversed_preemptions(workload):  # a reference that lists victims backwards
        for views, record in honest(workload):
            yield views, replace(record, preempted=record.preempted[::-1])

    monkeypatch.setattr(reference, "iter_steps", reversed_preemptions)
    assert main(["--count", "1", "--seed", "1"]) == 1
    out = capsys.readouterr().out
    assert "seed 1: step 7: preempted differ" in out
    assert "workloads agreeing: 0/1 (0.0%)" in out
    assert "minimal diverging workload (from seed 1):" in out
    assert "* preempted           | r0 r2              | r2 r0" in out
