"""Conformance of the vLLM reference with vLLM's real Scheduler (v0.32.0, on CPU).

Tests marked `conformance` need vLLM: in a separate venv, `pip install -e '.[vllm]'`,
then `pip uninstall -y torchvision torchaudio torchcodec` (README), then
`pytest -m conformance`. Without vLLM they are skipped; the pure tests (generator,
shrinker, rendering) always run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import pytest

from checker.conformance.compare import Divergence, first_divergence
from checker.conformance.generate import (
    BREAKABLE_RULES,
    PREFIX_STATIC_FEATURES,
    SPEC_CONFIG_RULES,
    STATIC_FEATURES,
    random_any_config,
    random_async_prefix_workload,
    random_async_workload,
    random_prefix_workload,
    random_workload,
    run_features,
    workload_features,
)
from checker.conformance.modes import MODES
from checker.conformance.shrink import candidates, is_admissible, shrink
from checker.conformance.validation import our_verdict, vllm_rules
from checker.conformance.vllm_real import (
    VOCAB_SIZE,
    TokenIds,
    vllm_available,
    vllm_unavailable_reason,
)
from model.core.types import EosEvent, RequestSpec, StepRecord, Workload
from model.vllm.config import Config
from model.vllm.validation import RULES
from model.workload import parse_workload, workload_to_json

needs_vllm = pytest.mark.skipif(
    not vllm_available(), reason=f"{vllm_unavailable_reason()}")

BATCH = range(100)  # the seeds of the generated batch the conformance tests run
PREFIX_BATCH = range(150)  # the same for the prefix mode (its runs are faster)
ASYNC_BATCH = range(150)  # the same for each async mode


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
    assert set(BREAKABLE_RULES) == {r.name for r in RULES} - set(SPEC_CONFIG_RULES)
    assert 40 < accepted < 300


def test_vllm_messages_map_to_rule_names():
    pydantic = ("2 validation errors for SchedulerConfig\nmax_num_seqs\n  Input should be "
                "greater than or equal to 1 [type=greater_than_equal]\npolicy\n  Input "
                "should be 'fcfs' or 'priority' [type=literal_error]")
    assert vllm_rules(pydantic) == {"positive_fields", "policy_known"}
    assert vllm_rules("max_num_active_seqs (9) cannot be greater than max_num_seqs (4).") == {
        "active_seqs_le_num_seqs"}
    assert vllm_rules("something else") == frozenset()


def test_prefix_workloads_are_seeded_valid_and_survive_the_json_contract():
    assert random_prefix_workload(3) == random_prefix_workload(3)
    assert len({random_prefix_workload(s) for s in range(30)}) == 30
    for seed in range(300):
        w = random_prefix_workload(seed)
        assert w.config.enable_prefix_caching and is_admissible(w), (seed, w)
        assert parse_workload(workload_to_json(w)) == w


def test_a_batch_of_prefix_workloads_has_every_prefix_feature():
    seen = set().union(*(workload_features(random_prefix_workload(s)) for s in PREFIX_BATCH))
    assert set(PREFIX_STATIC_FEATURES) - seen == set()
    assert set(STATIC_FEATURES) - seen == set()
    assert not set(PREFIX_STATIC_FEATURES) & workload_features(random_workload(0))


def test_the_modes_are_named_in_help():
    from checker.conformance.__main__ import build_parser, modes_of

    text = build_parser().format_help()
    assert set(MODES) == {"off", "prefix", "async", "async+prefix", "spec", "spec-prefix",
                          "spec-async", "spec-async-prefix", "connector", "connector+prefix",
                          "connector+async",
                          "hybrid-swa", "hybrid-swa-spec", "hybrid-async", "hybrid-mamba",
                          "hybrid-mamba-spec", "hybrid-mamba-align", "hybrid-mamba-align-spec",
                          "hybrid-mamba-align-async-spec"}
    for name in ("hybrid-swa", "hybrid-swa-spec", "hybrid-async", "hybrid-mamba",
                 "hybrid-mamba-spec"):  # KV cache groups, modelled with prefix caching off
        cfg = MODES[name].generate(3, 30).config
        assert cfg.hybrid_kv and not cfg.enable_prefix_caching
        assert cfg.async_scheduling == (name == "hybrid-async")
        assert bool(cfg.num_spec_tokens) == name.endswith("-spec")
    for mode in MODES.values():
        assert f"  {mode.name:17} {mode.what}" in text
    assert modes_of(build_parser().parse_args([])) == ["off"]
    assert not MODES["off"].generate(0, 30).config.enable_prefix_caching
    assert MODES["off"].generate(5, 30) == random_workload(5)
    assert modes_of(build_parser().parse_args(["--mode", "async+prefix"])) == ["async+prefix"]
    assert modes_of(build_parser().parse_args(["--mode", "spec", "--mode", "off", "--mode",
                                               "spec"])) == ["spec", "off"]
    for name, prefix in (("off", False), ("prefix", True), ("async", False),
                         ("async+prefix", True), ("spec", False), ("spec-prefix", True),
                         ("spec-async", False), ("spec-async-prefix", True)):
        cfg = MODES[name].generate(3, 30).config
        assert (cfg.enable_prefix_caching, cfg.async_scheduling) == (prefix, "async" in name)
        assert (MODES[name].scheduler == "AsyncScheduler") == ("async" in name)
        assert bool(cfg.speculative_method) == name.startswith("spec")


def test_async_workloads_are_seeded_valid_and_survive_the_json_contract():
    for generate in (random_async_workload, random_async_prefix_workload):
        assert generate(3) == generate(3)
        assert len({generate(s) for s in range(30)}) == 30
        for seed in range(300):
            w = generate(seed)
            assert w.config.async_scheduling and is_admissible(w), (seed, w)
            assert w.config.enable_prefix_caching == (generate is random_async_prefix_workload)
            assert parse_workload(workload_to_json(w)) == w
    seen = set().union(*(workload_features(random_async_workload(s)) for s in ASYNC_BATCH))
    assert set(STATIC_FEATURES) - seen == set()


def test_async_batches_time_eos_and_max_tokens_to_block_boundaries():
    # In `_async_batch` a request of prompt p prefilled at step a samples output j in step
    # a + j - 1; the next schedule opens a block when p + j - 1 is a multiple of the block
    # size. Most batch EOS entries and many max_tokens sit exactly there.
    on_boundary = total = aligned = 0
    for seed in range(200):
        w = random_async_workload(seed)
        bs = w.config.block_size
        specs = {r.id: r for r in w.requests}
        for e in w.eos:
            r = specs[e.id]
            total += 1
            on_boundary += (r.prompt_len + e.step - r.arrival_step) % bs == 0
        aligned += sum((r.prompt_len + r.max_tokens - 1) % bs == 0 for r in w.requests)
    assert on_boundary > total // 2 and aligned > 200


def test_async_run_features_read_the_one_step_late_records():
    def rec(step, scheduled=(), finished=(), preempted=(), waiting=(), admitted=(),
            sampled=()):
        return StepRecord(step=step, scheduled=scheduled, admitted=admitted, resumed=(),
                          preempted=preempted, finished=finished, free_blocks=0,
                          num_computed_tokens=(), waiting=waiting,
                          extra=(("sampled", sampled),))

    w = Workload(Config(async_scheduling=True),
                 tuple(RequestSpec(rid, 4, 9) for rid in "abcd"), steps=4)
    records = (
        rec(1, (("a", 4), ("b", 4)), admitted=("a", "b"), sampled=("a", "b")),
        # a, given one more token, is finished by the EOS sampled in step 1; b, preempted
        # with its token in flight, is finished by it from the waiting queue.
        rec(2, (("a", 1),), finished=(("a", "stop"), ("b", "length")), preempted=("b",),
            sampled=("a",)),
        rec(3, finished=(("d", "length"),), waiting=("c",)),
        rec(4, (("c", 4),), admitted=("c",), sampled=("c",)),
    )
    features = run_features(w, records, [frozenset(), frozenset({"async:phantom_preemption"}),
                                         frozenset(), frozenset()])
    assert {"async:eos_one_step_late", "async:preempted_in_flight", "async:stale_token",
            "async:stale_finish", "async:freed_blocks_next_step",
            "async:phantom_preemption"} <= features
    assert "chunked:partial_prefill" not in features
    assert not any(f.startswith("async:") for f in run_features(
        replace(w, config=Config()), records))


def _prefix_spec(rid: str, prompt: int, group: str | None, shared: int) -> RequestSpec:
    return RequestSpec(id=rid, prompt_len=prompt, max_tokens=3, prefix_group=group,
                       shared_prefix_len=shared)


def test_real_token_ids_share_exactly_the_blocks_the_contract_shares():
    bs = 4
    reqs = (_prefix_spec("a", 12, "g", 12), _prefix_spec("b", 14, "g", 8),
            _prefix_spec("c", 9, "g", 6), _prefix_spec("d", 12, "h", 12),
            _prefix_spec("e", 12, None, 0), _prefix_spec("f", 12, "g", 12))
    w = Workload(Config(block_size=bs, enable_prefix_caching=True), reqs)
    ids = TokenIds.of(w)
    prompts = {r.id: ids.prompt(r) for r in reqs}
    assert prompts["a"][:3] == [1_000, 1_001, 1_002]  # group g's row
    assert prompts["d"][:2] == [2_000, 2_001]  # group h's row
    assert all(len(prompts[r.id]) == r.prompt_len for r in reqs)
    for r in reqs:
        for q in reqs:
            for j in range(min(r.prompt_len, q.prompt_len) // bs):
                end = (j + 1) * bs
                contract = r.id == q.id or (r.prefix_group is not None
                                            and r.prefix_group == q.prefix_group
                                            and end <= min(r.shared_prefix_len,
                                                           q.shared_prefix_len))
                assert (prompts[r.id][:end] == prompts[q.id][:end]) == contract, (r, q, j)
    outputs = [ids.output(r) for r in reqs]
    everything = [t for p in prompts.values() for t in p]
    assert len(set(outputs)) == len(reqs) and not set(outputs) & set(everything)
    assert max(outputs) < VOCAB_SIZE and min(everything) > 2  # above EOS


def test_long_prompts_widen_the_rows_so_ids_never_collide():
    reqs = (_prefix_spec("a", 1_500, "g", 1_200), _prefix_spec("b", 1_500, "h", 1_000))
    ids = TokenIds.of(Workload(Config(max_model_len=4_096, enable_prefix_caching=True), reqs))
    a, b = ids.prompt(reqs[0]), ids.prompt(reqs[1])
    assert ids.width == 2_000 and not set(a) & set(b)


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


def test_a_long_descent_finishes_within_a_small_budget():
    # A value that must stay >= 50 from 184: the old ladder (floor, half-way, one less)
    # walked 92 -> 50 one unit a call round and stopped at 77 with 80 calls (a live
    # trace's shrink ran out so, leaving four requests where two showed the finding).
    w = _big_workload()
    w = replace(w, config=replace(w.config, max_model_len=200),
                requests=(replace(w.requests[0], prompt_len=184),) + w.requests[1:])
    small = shrink(w, lambda c: any(r.prompt_len >= 50 for r in c.requests), 80)
    assert [r.prompt_len for r in small.requests] == [50]
    assert small.config.max_model_len == 51


def test_shrinking_returns_the_workload_when_nothing_smaller_fails():
    w = _big_workload()
    assert shrink(w, lambda c: c == w) == w


def test_every_shrink_candidate_is_smaller_in_one_respect():
    w = _big_workload()
    for c in candidates(w):
        assert c != w
        assert (c.steps < w.steps or len(c.requests) < len(w.requests)
                or len(c.eos) < len(w.eos) or c.requests != w.requests or c.config != w.config)


def test_shrinking_keeps_prefix_groups_valid():
    w = random_prefix_workload(11)
    assert any(r.prefix_group is not None for r in w.requests)

    def fails(c: Workload) -> bool:  # "some grouped request shares at least 3 tokens"
        return any(r.prefix_group is not None and r.shared_prefix_len >= 3
                   for r in c.requests)

    w = replace(w, requests=tuple(replace(r, shared_prefix_len=max(3, r.shared_prefix_len),
                                          prompt_len=max(r.prompt_len, 3))
                                  if r.prefix_group else r for r in w.requests))
    assert fails(w) and is_admissible(w)
    for c in candidates(w):
        if is_admissible(c):
            assert parse_workload(workload_to_json(c)) == c
    for c in candidates(w):  # a shorter prompt takes its shared prefix down with it
        for r in c.requests:
            if r.prefix_group is not None:
                assert 1 <= r.shared_prefix_len <= r.prompt_len
    small = shrink(w, fails)
    assert [(r.id, r.prompt_len, r.prefix_group, r.shared_prefix_len)
            for r in small.requests] == [("r0", 3, "g0", 3)]
    assert small.steps == 1 and not small.config.enable_prefix_caching


def test_a_grouped_request_must_share_and_an_ungrouped_one_must_not():
    w = Workload(Config(enable_prefix_caching=True), (_prefix_spec("a", 8, "g", 8),))
    assert is_admissible(w)
    for bad in (_prefix_spec("a", 8, "g", 0), _prefix_spec("a", 8, "g", 9),
                _prefix_spec("a", 8, None, 2)):
        assert not is_admissible(replace(w, requests=(bad,)))


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


def test_cache_facts_are_compared_one_by_one_and_shown_by_name():
    w = _big_workload()
    facts = (("prefix_hits", {"a": 8}), ("blocks_in_use", 3), ("cached_blocks", 4))
    real = (replace(_record(1, (("a", 4),), 9), extra=facts),)
    same = (replace(_record(1, (("a", 4),), 9), extra=facts[::-1]),)  # order is no matter
    assert first_divergence(w, real, same) is None
    other = (replace(_record(1, (("a", 4),), 9),
                     extra=(("prefix_hits", {"a": 4}), *facts[1:])),)
    d = first_divergence(w, real, other)
    assert d is not None and d.fields == ("prefix_hits",)
    text = d.render()
    assert "* prefix_hits         | a:8                | a:4" in text
    assert "  cached_blocks       | 4                  | 4" in text
    missing = (_record(1, (("a", 4),), 9),)
    d = first_divergence(w, real, missing)
    assert d is not None and d.fields == ("prefix_hits", "blocks_in_use", "cached_blocks")
    assert "(absent)" in d.render()


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


@pytest.mark.conformance
@needs_vllm
def test_modes_run_in_one_process_report_as_each_alone(monkeypatch, capsys):
    """`--mode` repeated runs each mode as a run of it alone would (same workloads, same
    report but its seconds), one after the other, and exits 1 when any one diverges."""
    import model.vllm.reference as reference
    from checker.conformance.__main__ import main

    def report(argv):
        code = main(argv)
        return code, re.sub(r"in \d+\.\d s", "in _ s", capsys.readouterr().out)

    alone = [report(["--mode", m, "--count", "3", "--seed", "1"]) for m in ("off", "async")]
    both = report(["--mode", "off", "--mode", "async", "--count", "3", "--seed", "1"])
    assert [code for code, _ in alone] == [0, 0] and both[0] == 0
    assert both[1] == alone[0][1] + "\n" + alone[1][1]
    honest = reference.iter_steps

    def reversed_preemptions(workload):  # diverges in mode off's seed 1 (the test above)
        for views, record in honest(workload):
            yield views, replace(record, preempted=record.preempted[::-1])

    monkeypatch.setattr(reference, "iter_steps", reversed_preemptions)
    code, out = report(["--mode", "off", "--mode", "async", "--count", "1", "--seed", "1",
                        "--no-shrink"])
    assert code == 1 and out.count("workloads agreeing:") == 2


# ------------------------------------------- prefix caching on the real engine (marker)
# The digest's scenarios (notes/vllm_prefix_async.md, section 8), block size 4; each is
# compared step by step with the reference, and the digest's figures are pinned.

PFX = Config(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64, block_size=4,
             num_gpu_blocks=32, enable_prefix_caching=True)


def _grouped(rid: str, prompt: int, max_tokens: int, arrival: int, group: str | None = "g",
             shared: int | None = None) -> RequestSpec:
    return RequestSpec(id=rid, prompt_len=prompt, max_tokens=max_tokens, arrival_step=arrival,
                       prefix_group=group,
                       shared_prefix_len=(prompt if shared is None else shared) if group else 0)


def _agreeing(w: Workload) -> dict[int, StepRecord]:
    """The real engine's records of `w`, after checking the reference agrees on each."""
    from checker.conformance.compare import compare

    divergence = compare(w)
    assert divergence is None, divergence.render()
    return _real(w)


def _facts(record: StepRecord) -> dict[str, object]:
    return dict(record.extra)


@pytest.mark.conformance
@needs_vllm
def test_p2_a_cached_prompt_hits_all_but_its_last_block():
    w = Workload(PFX, (_grouped("A", 12, 1, 1), _grouped("B", 12, 2, 2),
                       _grouped("C", 13, 1, 3, shared=12), _grouped("D", 11, 1, 4),
                       _grouped("E", 12, 1, 5, shared=8)), steps=5)
    s = _agreeing(w)
    assert _facts(s[1])["prefix_hits"] == {"A": 0}
    # B = A's 12 tokens: the cap at num_tokens - 1 leaves block 3 out, recomputed as a
    # second copy of its hash (cached_blocks 4 for 3 hashes).
    assert (dict(s[2].scheduled), _facts(s[2])["prefix_hits"]) == ({"B": 4}, {"B": 8})
    assert dict(s[2].num_computed_tokens)["B"] == 12 and _facts(s[2])["cached_blocks"] == 4
    assert (dict(s[3].scheduled)["C"], _facts(s[3])["prefix_hits"]) == (1, {"C": 12})
    assert (dict(s[4].scheduled), _facts(s[4])["prefix_hits"]) == ({"D": 3}, {"D": 8})
    assert (dict(s[5].scheduled), _facts(s[5])["prefix_hits"]) == ({"E": 4}, {"E": 8})


@pytest.mark.conformance
@needs_vllm
def test_p3_a_request_hits_blocks_cached_earlier_in_the_same_step():
    w = Workload(PFX, (_grouped("A", 15, 2, 1, shared=12), _grouped("B", 15, 2, 1, shared=12)),
                 steps=2)
    s = _agreeing(w)
    assert dict(s[1].scheduled) == {"A": 15, "B": 3}
    assert _facts(s[1])["prefix_hits"] == {"A": 0, "B": 12}
    assert _facts(s[1])["blocks_in_use"] == 5  # A's 4 blocks and B's own last one
    # P3b: A chunked to 10 tokens caches 2 blocks; B, blocked by budget, hits all 3 after
    # A's second chunk in the next step.
    chunked = replace(w, config=replace(PFX, max_num_batched_tokens=10, max_num_seqs=2),
                      steps=3)
    s = _agreeing(chunked)
    assert (dict(s[1].scheduled), _facts(s[1])["cached_blocks"]) == ({"A": 10}, 2)
    assert (dict(s[2].scheduled), _facts(s[2])["prefix_hits"]) == ({"A": 5, "B": 3},
                                                                  {"B": 12})


@pytest.mark.conformance
@needs_vllm
def test_p4_reuse_evicts_the_least_recently_freed_and_a_chain_tail_first():
    # X's 3 cached blocks go to the free queue's tail in reverse (3# 2# 1#), its partial
    # block to the head: Y (20 tokens, no hit) takes the 4 free blocks and evicts 3#.
    w = Workload(replace(PFX, num_gpu_blocks=8),
                 (_grouped("X", 14, 1, 1), _grouped("Y", 20, 1, 2, group=None),
                  _grouped("Z", 14, 1, 3)), steps=3)
    s = _agreeing(w)
    assert (_facts(s[1])["cached_blocks"], s[1].finished) == (3, (("X", "length"),))
    assert (s[2].free_blocks, _facts(s[2])["evictable_blocks"]) == (2, 2)
    assert (dict(s[3].scheduled), _facts(s[3])["prefix_hits"]) == ({"Z": 6}, {"Z": 8})


@pytest.mark.conformance
@needs_vllm
def test_p5_an_evictable_hit_still_needs_free_blocks():
    reqs = (_grouped("A", 16, 1, 1), _grouped("B", 17, 3, 2, shared=16))
    s = _agreeing(Workload(replace(PFX, num_gpu_blocks=5), reqs, steps=3))
    # B hits A's 4 blocks, all evictable: they come out of the free queue like new ones,
    # so B needs 5 blocks against 4 free and waits.
    for k in (2, 3):
        assert (s[k].scheduled, s[k].waiting, s[k].free_blocks) == ((), ("B",), 4)
        assert _facts(s[k])["evictable_blocks"] == 4
    # P5b: one more block and B is admitted with its hit of 16, leaving 0 free.
    s = _agreeing(Workload(replace(PFX, num_gpu_blocks=6), reqs, steps=3))
    assert (dict(s[2].scheduled), _facts(s[2])["prefix_hits"], s[2].free_blocks) == (
        {"B": 1}, {"B": 16}, 0)
    # With a 6th usable block, C (the same prompt) hits B's blocks, which B holds: it
    # needs only its own last block.
    reqs += (_grouped("C", 17, 2, 3, shared=16),)
    s = _agreeing(Workload(replace(PFX, num_gpu_blocks=7), reqs, steps=4))
    assert (dict(s[3].scheduled), _facts(s[3])["prefix_hits"]) == ({"B": 1, "C": 1},
                                                                  {"C": 16})
    assert (s[3].free_blocks, _facts(s[3])["blocks_in_use"]) == (0, 6)


@pytest.mark.conformance
@needs_vllm
def test_p6_a_preempted_request_resumes_by_hitting_its_own_blocks():
    # 7 usable blocks; L and M decode from 8-token prompts until at step 6 L takes the
    # last free block and M preempts itself: its 3 full blocks stay cached (evictable).
    def run(l_max: int, steps: int) -> dict[int, StepRecord]:
        reqs = (_grouped("L", 8, l_max, 1, group=None), _grouped("M", 8, 20, 1, group=None))
        return _agreeing(Workload(replace(PFX, num_gpu_blocks=8), reqs, steps=steps))

    s = run(9, 11)
    assert (s[6].preempted, _facts(s[6])["evictable_blocks"]) == (("M",), 3)
    assert s[9].finished == (("L", "length"),)
    # M's 13 tokens: all 3 blocks hit (12, capped at num_tokens - 1), 1 token scheduled.
    assert (dict(s[10].scheduled), s[10].resumed, _facts(s[10])["prefix_hits"]) == (
        {"M": 1}, ("M",), {"M": 12})
    # When L lives two steps longer it takes M's last cached block (evicting it): M
    # resumes at step 12 with a hit of 8 and recomputes 5 tokens.
    s = run(11, 13)
    assert (dict(s[12].scheduled), s[12].resumed, _facts(s[12])["prefix_hits"]) == (
        {"M": 5}, ("M",), {"M": 8})


@pytest.mark.conformance
@needs_vllm
def test_cache_facts_appear_only_with_prefix_caching_on():
    w = Workload(PFX, (_grouped("A", 12, 2, 1), _grouped("B", 12, 2, 2)), steps=3)
    keys = ["prefix_hits", "blocks_in_use", "cached_blocks", "evictable_blocks",
            "released_blocks"]
    assert all([k for k, _ in r.extra] == keys for r in _real(w).values())
    off = replace(w, config=replace(PFX, enable_prefix_caching=False))
    assert all(r.extra == () for r in _real(off).values())
    assert dict(_real(off)[2].scheduled) == {"A": 1, "B": 12}  # no hit with caching off


@pytest.mark.conformance
@needs_vllm
def test_the_prefix_batch_reaches_every_prefix_branch_and_feature():
    from checker.conformance.branches import BRANCH_SETS, missing_reachable, trace
    from checker.conformance.generate import run_features

    branches = BRANCH_SETS["base"] + BRANCH_SETS["prefix"]
    counts = {b.name: 0 for b in branches}
    features = dict.fromkeys(MODES["prefix"].features, 0)
    for seed in PREFIX_BATCH:
        w = random_prefix_workload(seed)
        taken, run = trace(w, branches)
        for name in taken:
            counts[name] += 1
        for f in workload_features(w) | run_features(w, run.records, run.events):
            features[f] = features.get(f, 0) + 1
    from collections import Counter

    assert missing_reachable(Counter(counts), branches) == ()
    assert [f for f in MODES["prefix"].features if features[f] == 0] == []
    often = len(PREFIX_BATCH) // 20  # each prefix-caching feature in 1 run out of 20
    rare = {f: n for f, n in features.items() if f.startswith("prefix:") and n < often}
    assert rare == {}


@pytest.mark.conformance
@needs_vllm
def test_a_reference_wrong_about_hits_is_caught_and_shrunk_to_a_valid_workload(
        monkeypatch, capsys):
    import json

    import model.vllm.reference as reference
    from checker.conformance.__main__ import main
    from checker.conformance.vllm_real import run_real_vllm

    def hits(w: Workload) -> bool:
        return any(any(dict(r.extra)["prefix_hits"].values()) for r in run_real_vllm(w))

    seed = next(s for s in PREFIX_BATCH if hits(random_prefix_workload(s)))
    honest = reference.iter_steps

    def no_hits(workload):  # a reference that reports every hit as 0
        for views, record in honest(workload):
            facts = tuple((k, {r: 0 for r in v} if k == "prefix_hits" else v)
                          for k, v in record.extra)
            yield views, replace(record, extra=facts)

    monkeypatch.setattr(reference, "iter_steps", no_hits)
    assert main(["--mode", "prefix", "--count", "1", "--seed", str(seed)]) == 1
    out = capsys.readouterr().out
    assert "prefix_hits differ" in out
    line = out.split(f"minimal diverging workload (from seed {seed}):\n")[1].splitlines()[0]
    minimal = parse_workload(json.loads(line))
    assert minimal.config.enable_prefix_caching
    assert is_admissible(minimal) and len(minimal.requests) == 2
    assert "* prefix_hits" in out


# ----------------------------------------------- async scheduling on the real engine (marker)
# The digest's scenarios A1-A7 (notes/vllm_prefix_async.md, section 8): the real
# AsyncScheduler, outputs fed one engine step late; each is compared step by step with the
# reference, and the digest's figures are pinned. Block size 4 throughout.

ASYNC = Config(max_num_batched_tokens=16, max_num_seqs=8, max_model_len=256, block_size=4,
               num_gpu_blocks=32, async_scheduling=True)


def _sync(w: Workload) -> Workload:
    return replace(w, config=replace(w.config, async_scheduling=False))


def _sampled(record: StepRecord) -> object:
    return _facts(record)["sampled"]


@pytest.mark.conformance
@needs_vllm
def test_a1_max_tokens_is_anticipated_and_the_finish_lands_one_step_late():
    w = Workload(ASYNC, (RequestSpec("R", 6, 4),), steps=6)
    s = _agreeing(w)
    assert [dict(s[k].scheduled) for k in range(1, 7)] == [{"R": 6}, {"R": 1}, {"R": 1},
                                                           {"R": 1}, {}, {}]
    # Step 5 schedules nothing: R's 4th output is in flight (scheduler.py:664-677).
    assert [_sampled(s[k]) for k in range(1, 6)] == [("R",)] * 4 + [()]
    assert (s[5].finished, s[5].running) == ((("R", "length"),), ("R",))
    assert [dict(s[k].num_computed_tokens)["R"] for k in range(1, 6)] == [6, 7, 8, 9, 9]
    sync = _agreeing(_sync(w))  # the same tokens, the finish one engine step earlier
    assert [dict(sync[k].scheduled) for k in range(1, 6)] == [{"R": 6}, {"R": 1}, {"R": 1},
                                                              {"R": 1}, {}]
    assert sync[4].finished == (("R", "length"),)


@pytest.mark.conformance
@needs_vllm
def test_a2_an_eos_is_discovered_one_step_late_and_the_extra_token_dropped():
    w = Workload(ASYNC, (RequestSpec("R", 6, 10), RequestSpec("Q", 3, 10)),
                 eos=(EosEvent("R", 2),), steps=5)
    s = _agreeing(w)
    # Step 3 gives R one more token (and the block it opens) before update(2) applies the
    # EOS it sampled in step 2; that token's output is dropped in step 4 (2091-2100).
    assert (dict(s[3].scheduled), s[3].finished, s[3].free_blocks) == (
        {"R": 1, "Q": 1}, (("R", "stop"),), 27)
    assert (dict(s[4].scheduled), s[4].finished, s[4].free_blocks) == ({"Q": 1}, (), 29)
    from checker.conformance.vllm_real import run_real_vllm_detailed

    run = run_real_vllm_detailed(w)
    assert "async:eos_one_step_late" in run_features(w, run.records, run.events)
    sync = _agreeing(_sync(w))
    assert (dict(sync[2].scheduled), sync[2].finished) == ({"R": 1, "Q": 1}, (("R", "stop"),))
    assert dict(sync[3].scheduled) == {"Q": 1}


@pytest.mark.conformance
@needs_vllm
def test_a4_prefill_chunks_sample_nothing_and_the_next_step_schedules_a_decode():
    w = Workload(replace(ASYNC, max_num_batched_tokens=4, max_num_seqs=4),
                 (RequestSpec("P", 10, 3),), steps=7)
    s = _agreeing(w)
    assert [dict(s[k].scheduled).get("P", 0) for k in range(1, 8)] == [4, 4, 2, 1, 1, 0, 0]
    # No placeholder for a non-final chunk: steps 1-2 sample nothing; from step 3 on one
    # token is always in flight.
    assert [_sampled(s[k]) for k in range(1, 7)] == [(), (), ("P",), ("P",), ("P",), ()]
    assert s[6].finished == (("P", "length"),)


A_PREFIX = replace(ASYNC, num_gpu_blocks=8, enable_prefix_caching=True)


@pytest.mark.conformance
@needs_vllm
def test_a5_a_victim_loses_its_uncached_block_and_its_stale_token_is_still_delivered():
    reqs = (_grouped("L", 8, 9, 1, group=None), _grouped("M", 8, 30, 1, group=None))
    w = Workload(A_PREFIX, reqs, steps=11)
    s = _agreeing(w)
    # Step 6: L opens a block, M (running[-1]) is preempted with its step-5 token in
    # flight. Its 3rd full block is not cached yet (async caches num_computed_tokens -
    # num_output_placeholders at output time), so it is freed without a hash: 2 evictable.
    assert (s[6].preempted, s[6].free_blocks, _facts(s[6])["evictable_blocks"]) == (
        ("M",), 3, 2)
    assert "M" in _sampled(s[5]) and s[6].finished == ()  # the stale token lands, no finish
    # L finishes in step 10's update, after schedule(10): its blocks serve step 11.
    assert (s[10].scheduled, s[10].finished, _facts(s[10])["released_blocks"]) == (
        (), (("L", "length"),), 4)
    # M resumes with 8 prompt + 5 output tokens (the stale one included), hitting 8.
    assert (dict(s[11].scheduled), s[11].resumed, _facts(s[11])["prefix_hits"]) == (
        {"M": 5}, ("M",), {"M": 8})
    assert dict(s[11].num_computed_tokens)["M"] == 13
    from checker.conformance.vllm_real import run_real_vllm_detailed

    run = run_real_vllm_detailed(w)
    assert "async:uncached_block_lost" in run.events[5]
    assert {"async:stale_token", "async:freed_blocks_next_step"} <= run_features(
        w, run.records, run.events)
    # The synchronous scheduler caches that block at allocation: 3 evictable, and M
    # resumes one step earlier with a hit of 12 (P6).
    sync = _agreeing(_sync(w))
    assert (sync[6].preempted, _facts(sync[6])["evictable_blocks"]) == (("M",), 3)
    assert (dict(sync[10].scheduled), _facts(sync[10])["prefix_hits"]) == ({"M": 1},
                                                                          {"M": 12})


@pytest.mark.conformance
@needs_vllm
def test_a7_a_request_with_eos_in_flight_preempts_another():
    reqs = (_grouped("R", 7, 10, 1, group=None), _grouped("W", 7, 2, 2, group=None))
    w = Workload(replace(A_PREFIX, num_gpu_blocks=5), reqs, eos=(EosEvent("R", 2),), steps=5)
    s = _agreeing(w)
    assert (dict(s[2].scheduled), s[2].free_blocks) == ({"R": 1, "W": 7}, 0)
    # R sampled EOS in step 2; step 3 gives it a token that opens a block, with none free,
    # so W is preempted; the same step's update then finishes R and frees its 3 blocks.
    assert (dict(s[3].scheduled), s[3].preempted, s[3].finished) == (
        {"R": 1}, ("W",), (("R", "stop"),))
    assert (dict(s[4].scheduled), s[4].resumed, _facts(s[4])["prefix_hits"]) == (
        {"W": 4}, ("W",), {"W": 4})
    assert s[5].finished == (("W", "length"),)
    from checker.conformance.vllm_real import run_real_vllm_detailed

    run = run_real_vllm_detailed(w)
    assert "async:phantom_preemption" in run.events[2]
    sync = _agreeing(_sync(w))  # the synchronous scheduler never preempts here
    assert all(r.preempted == () for r in sync.values())
    assert sync[3].finished == (("W", "length"),)


def assert_all_agree(compare: Callable[[Workload], Any],
                     generate: Callable[[int], Workload], seeds: Iterable[int]) -> None:
    """`compare` (a real scheduler against the reference) finds no divergence on the
    workload `generate(seed)` of any of `seeds`; a failure renders the first one."""
    for seed in seeds:
        divergence = compare(generate(seed))
        assert divergence is None, f"seed {seed}:\n{divergence.render()}"


# Every generated batch: the base mode, prefix caching, and the two async modes.
@pytest.mark.conformance
@needs_vllm
@pytest.mark.parametrize(("generate", "seeds"), [
    (random_workload, BATCH), (random_prefix_workload, PREFIX_BATCH),
    (random_async_workload, ASYNC_BATCH), (random_async_prefix_workload, ASYNC_BATCH)])
def test_the_reference_agrees_with_the_real_scheduler_on_every_generated_step(generate, seeds):
    from checker.conformance.compare import compare

    assert_all_agree(compare, generate, seeds)


@pytest.mark.conformance
@needs_vllm
@pytest.mark.parametrize("mode", ["async", "async+prefix"])
def test_the_async_batches_reach_every_async_branch_and_feature(mode):
    from collections import Counter

    from checker.conformance.branches import BRANCH_SETS, branches_for, missing_reachable, trace

    branches = branches_for(MODES[mode].branch_sets)
    counts: Counter[str] = Counter({b.name: 0 for b in branches})
    features = dict.fromkeys(MODES[mode].features, 0)
    for seed in ASYNC_BATCH:
        w = MODES[mode].generate(seed, 30)
        taken, run = trace(w, branches)
        counts.update(taken)
        for f in workload_features(w) | run_features(w, run.records, run.events):
            features[f] = features.get(f, 0) + 1
    assert missing_reachable(counts, branches) == ()
    assert [f for f in MODES[mode].features if features[f] == 0] == []
    # The async branches, each reached by at least one workload in 30.
    async_names = {b.name for b in BRANCH_SETS["async"] + BRANCH_SETS["async+prefix"]
                   if not b.unreachable}
    rare = {n: c for n, c in counts.items() if n in async_names
            and c < len(ASYNC_BATCH) // 30}
    assert rare == {}
    assert counts["running:zero_tokens_skip"] > 0  # reachable once outputs are in flight


@pytest.mark.conformance
@needs_vllm
def test_a_reference_that_forgets_the_output_lag_is_caught_and_shrunk(monkeypatch, capsys):
    import json

    import model.vllm.reference as reference
    from checker.conformance.__main__ import main

    honest = reference.iter_steps

    def synchronous(workload):  # outputs applied in their own step, as the sync Scheduler
        if not workload.config.async_scheduling:
            yield from honest(workload)
            return
        for views, record in honest(_sync(workload)):
            sampled = tuple(rid for rid, _ in record.scheduled)
            yield views, replace(record, extra=(*record.extra, ("sampled", sampled)))

    monkeypatch.setattr(reference, "iter_steps", synchronous)
    assert main(["--mode", "async", "--count", "1", "--seed", "0"]) == 1
    out = capsys.readouterr().out
    assert "workloads agreeing: 0/1 (0.0%)" in out
    line = out.split("minimal diverging workload (from seed 0):\n")[1].splitlines()[0]
    minimal = parse_workload(json.loads(line))
    # The lag is the whole departure, so shrinking keeps async scheduling on.
    assert minimal.config.async_scheduling and is_admissible(minimal)
    assert len(minimal.requests) == 1
