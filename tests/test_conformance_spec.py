"""Conformance with speculative decoding: the reference against vLLM's real Scheduler and
AsyncScheduler (v0.32.0, CPU) with draft tokens fed through fake model outputs.

Tests marked `conformance` need vLLM (see tests/test_conformance.py); without it they are
skipped with the reason. The generator tests are pure.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from checker.conformance.generate import (
    SPEC_ASYNC_STATIC_FEATURES,
    SPEC_STATIC_FEATURES,
    random_spec_async_prefix_workload,
    random_spec_async_workload,
    random_spec_prefix_workload,
    random_spec_workload,
    workload_features,
)
from checker.conformance.modes import MODES
from checker.conformance.shrink import is_admissible
from checker.conformance.vllm_real import (
    SPEC_METHODS_BUILT,
    SPEC_METHODS_UNBUILDABLE,
    check_spec_buildable,
    vllm_available,
    vllm_unavailable_reason,
)
from model.core.errors import InputError
from model.core.types import AcceptEvent, DraftEvent, RequestSpec, Workload
from model.vllm.config import SPEC_METHODS_MODELLED, Config
from model.workload import parse_workload, workload_to_json

needs_vllm = pytest.mark.skipif(not vllm_available(), reason=f"{vllm_unavailable_reason()}")

SPEC_MODES = ("spec", "spec-prefix", "spec-async", "spec-async-prefix")
GENERATORS = {"spec": random_spec_workload, "spec-prefix": random_spec_prefix_workload,
              "spec-async": random_spec_async_workload,
              "spec-async-prefix": random_spec_async_prefix_workload}
HANDFUL = range(12)  # the seeds of each mode the fast agreement test runs


# ------------------------------------------------------------------- generator (pure)

@pytest.mark.parametrize("mode", SPEC_MODES)
def test_spec_workloads_are_seeded_valid_buildable_and_survive_the_json_contract(mode):
    generate = GENERATORS[mode]
    assert MODES[mode].generate is generate
    assert generate(4) == generate(4)
    for seed in range(400):
        w = generate(seed)
        cfg = w.config
        assert is_admissible(w), (seed, w)
        assert cfg.speculative_method in ("ngram", "draft_model", "eagle", "eagle3")
        assert 1 <= cfg.num_speculative_tokens <= 4
        assert cfg.async_scheduling == ("async" in mode)
        assert cfg.enable_prefix_caching == ("prefix" in mode)
        check_spec_buildable(cfg)  # never a method the harness cannot build
        if cfg.async_scheduling:  # vLLM refuses ngram with async; no drafts choices there
            assert cfg.speculative_method != "ngram" and not w.drafts
        if not cfg.drafts_vary:
            assert not w.drafts
        k = cfg.num_speculative_tokens
        assert all(0 <= e.count <= k for e in (*w.accepted, *w.drafts))
        assert parse_workload(workload_to_json(w)) == w


@pytest.mark.parametrize("mode", SPEC_MODES)
def test_a_batch_of_spec_workloads_has_every_static_spec_feature(mode):
    wanted = SPEC_ASYNC_STATIC_FEATURES if "async" in mode else SPEC_STATIC_FEATURES
    seen = set().union(*(workload_features(GENERATORS[mode](s)) for s in range(150)))
    assert set(wanted) - seen == set()


def test_methods_the_harness_cannot_build_are_refused_with_the_reason():
    assert set(SPEC_METHODS_BUILT) | set(SPEC_METHODS_UNBUILDABLE) == set(SPEC_METHODS_MODELLED)
    for method, why in SPEC_METHODS_UNBUILDABLE.items():
        cfg = Config(speculative_method=method, num_speculative_tokens=2)
        with pytest.raises(InputError, match="conformance harness cannot build") as info:
            check_spec_buildable(cfg)
        assert why in str(info.value)
    with pytest.raises(InputError, match="refuses async scheduling"):
        check_spec_buildable(Config(speculative_method="ngram", num_speculative_tokens=2,
                                    async_scheduling=True))
    check_spec_buildable(Config(speculative_method="eagle", num_speculative_tokens=2,
                                async_scheduling=True))


# ----------------------------------------------------- real vLLM (conformance marker)

def _cfg(**kw) -> Config:
    base = dict(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=256, block_size=16,
                num_gpu_blocks=20, speculative_method="ngram", num_speculative_tokens=3)
    return Config(**{**base, **kw})


def _req(rid: str, prompt: int, max_tokens: int = 30, arrival: int = 1) -> RequestSpec:
    return RequestSpec(id=rid, prompt_len=prompt, max_tokens=max_tokens, arrival_step=arrival)


def _agree(w: Workload):
    """The real run of `w`, after checking the reference agrees on every step of it."""
    from checker.conformance.__main__ import compare_effective
    from checker.conformance.vllm_real import run_real_vllm_detailed

    divergence = compare_effective(w)
    assert divergence is None, divergence.render()
    return run_real_vllm_detailed(w)


def _facts(run, step: int) -> dict:
    return dict(run.records[step - 1].extra)


@pytest.mark.conformance
@needs_vllm
@pytest.mark.parametrize("mode", SPEC_MODES)
def test_the_reference_agrees_on_a_handful_of_generated_spec_workloads(mode):
    from checker.conformance.__main__ import compare_effective

    for seed in HANDFUL:
        w = MODES[mode].generate(seed, 30)
        divergence = compare_effective(w)
        assert divergence is None, f"{mode} seed {seed}:\n{divergence.render()}"


@pytest.mark.conformance
@needs_vllm
@pytest.mark.parametrize(("method", "parallel"), [
    ("ngram", False), ("ngram_gpu", False), ("draft_model", False), ("draft_model", True),
    ("eagle", False), ("eagle", True), ("eagle3", False), ("medusa", False)])
def test_the_real_schedulers_speculative_sizes_are_the_configs(method, parallel):
    from checker.conformance.vllm_real import _vllm_config, new_scheduler

    cfg = _cfg(speculative_method=method, parallel_drafting=parallel)
    sched = new_scheduler(cfg)  # raises if any size differs from the Config's
    assert sched.num_spec_tokens == cfg.num_spec_tokens == 3
    assert sched.num_lookahead_tokens == cfg.num_lookahead_tokens
    assert (_vllm_config(cfg).speculative_config.max_num_new_slots_for_drafting
            == cfg.draft_slots)
    assert sched.use_eagle_block_drop == cfg.eagle_block_drop


@pytest.mark.conformance
@needs_vllm
def test_a_size_the_model_gets_wrong_fails_loudly(monkeypatch):
    from checker.conformance import vllm_real

    monkeypatch.setattr(Config, "draft_slots", property(lambda self: 7))
    with pytest.raises(RuntimeError, match="draft_slots.*model/vllm/config.py is wrong"):
        vllm_real.new_scheduler(_cfg(speculative_method="draft_model", max_num_batched_tokens=63))


@pytest.mark.conformance
@needs_vllm
def test_the_pad_assertion_is_recorded_and_the_engine_stays_dead():
    """Trace L of notes/vllm_spec_asserts.md: ngram k=3, long_prefill_token_threshold 2; a
    decodes; p (a 1-token prompt) arrives and is padded to 1+3, then the threshold cuts it
    to 2: the real schedule() raises AssertionError at scheduler.py:1372."""
    from checker.conformance.vllm_real import run_real_vllm_detailed

    w = Workload(config=_cfg(long_prefill_token_threshold=2),
                 requests=(_req("a", 2), _req("p", 1, arrival=2)), steps=4)
    run = run_real_vllm_detailed(w)
    expected = ("scheduler.py:1372 AssertionError: request 'p' was padded to 1 + 3 tokens "
                "and the long-prefill threshold cut it to 2 (assert num_new_tokens == 1 + "
                "num_spec_tokens)")
    assert dict(run.records[0].scheduled) == {"a": 2}
    for record in run.records[1:]:
        assert dict(record.extra) == {"assertion": expected}
        assert record.scheduled == record.num_computed_tokens == record.running == ()
    assert "spec:assertion" in run.events[1]
    _agree(w)


@pytest.mark.conformance
@needs_vllm
def test_the_pad_assertion_with_a_prefix_hit():
    """Trace L2: prefix caching, threshold 3, b has a's 17-token prompt (hit 16, 1 left)."""
    w = Workload(config=_cfg(long_prefill_token_threshold=3, enable_prefix_caching=True),
                 requests=(RequestSpec(id="a", prompt_len=17, max_tokens=30, arrival_step=1,
                                       prefix_group="g", shared_prefix_len=17),
                           RequestSpec(id="b", prompt_len=17, max_tokens=30, arrival_step=2,
                                       prefix_group="g", shared_prefix_len=17)),
                 steps=3)
    run = _agree(w)
    assert _facts(run, 2)["assertion"].startswith("scheduler.py:1372 AssertionError: "
                                                  "request 'b'")


@pytest.mark.conformance
@needs_vllm
def test_accepted_counts_are_applied_at_most_the_drafts_and_never_to_padding():
    """Trace A and H: accepted 3, 1, then 9 (capped at the 3 scheduled); drafts 2 after
    step 3 (ngram proposes fewer); p, a 1-token prompt arriving while a decodes, is padded
    with -1 drafts and accepts none although the workload says 3."""
    w = Workload(config=_cfg(), requests=(_req("a", 10), _req("p", 1, arrival=4)), steps=6,
                 accepted=(AcceptEvent("a", 2, 3), AcceptEvent("a", 3, 1),
                           AcceptEvent("a", 5, 9), AcceptEvent("p", 4, 3)),
                 drafts=(DraftEvent("a", 3, 2),))
    run = _agree(w)
    assert [_facts(run, s)["spec_scheduled"] for s in range(1, 6)] == [
        {}, {"a": 3}, {"a": 3}, {"a": 2, "p": 3}, {"a": 3, "p": 3}]
    assert _facts(run, 4)["accepted"] == {"a": 0, "p": 0}  # p padded
    assert _facts(run, 5)["accepted"] == {"a": 3, "p": 0}  # 9 capped at 3
    assert run.effective_accepted(w) == (AcceptEvent("a", 2, 3), AcceptEvent("a", 3, 1),
                                         AcceptEvent("a", 5, 3))
    computed = dict(run.records[2].num_computed_tokens)
    assert computed["a"] == 18  # 10 + 4 (3 accepted) + 4 scheduled in step 3


@pytest.mark.conformance
@needs_vllm
def test_async_spec_placeholders_and_acceptance_one_step_late():
    """Trace J: eagle k=3 on the AsyncScheduler; the accepted count of step s is that
    schedule's output, processed in step s+1."""
    w = Workload(config=_cfg(speculative_method="eagle", async_scheduling=True),
                 requests=(_req("a", 5, 40),), steps=5,
                 accepted=(AcceptEvent("a", 2, 3), AcceptEvent("a", 3, 1),
                           AcceptEvent("a", 4, 2)))
    run = _agree(w)
    assert [dict(r.num_computed_tokens)["a"] for r in run.records] == [5, 9, 13, 17, 19]


@pytest.mark.conformance
@needs_vllm
def test_lookahead_blocks_preempt_earlier_and_the_comparison_sees_them(monkeypatch):
    """Trace D: 4 usable blocks, two 24-token prompts, k=3, every draft rejected: eagle's
    lookahead preempts b at step 4, ngram's none at step 7. A real scheduler without the
    lookahead diverges from the reference."""
    from checker.conformance import vllm_real
    from checker.conformance.__main__ import compare_effective

    reqs = (_req("a", 24, 40), _req("b", 24, 40))
    eagle = Workload(config=_cfg(speculative_method="eagle", num_gpu_blocks=5),
                     requests=reqs, steps=8)
    ngram = replace(eagle, config=replace(eagle.config, speculative_method="ngram"))
    first = {name: next(r.step for r in _agree(w).records if r.preempted)
             for name, w in (("eagle", eagle), ("ngram", ngram))}
    assert first == {"eagle": 4, "ngram": 7}
    original = vllm_real.new_scheduler

    def without_lookahead(cfg):
        sched = original(cfg)
        sched.num_lookahead_tokens = 0
        return sched

    monkeypatch.setattr(vllm_real, "new_scheduler", without_lookahead)
    divergence = compare_effective(eagle)
    assert divergence is not None and divergence.step == 4


@pytest.mark.conformance
@needs_vllm
def test_draft_slots_starve_a_third_request():
    """Trace C: draft_model k=3 (1 draft slot), B=10, three 1-token prompts, all accepted:
    two decodes of 1+3 cost 5 input slots each, so c gets nothing."""
    w = Workload(config=_cfg(speculative_method="draft_model", max_num_batched_tokens=10,
                             max_num_seqs=3, num_gpu_blocks=30),
                 requests=(_req("a", 1, 40), _req("b", 1, 40), _req("c", 1, 40)), steps=4,
                 accepted=tuple(AcceptEvent(r, s, 3) for r in "abc" for s in range(2, 5)))
    run = _agree(w)
    assert [dict(r.scheduled) for r in run.records[1:]] == [{"a": 4, "b": 4}] * 3


@pytest.mark.conformance
@needs_vllm
def test_spec_config_rules_match_vllms_config():
    """The speculative rules are VllmConfig's (config/vllm.py:2285-2290): draft_model's one
    draft slot needs max_num_batched_tokens >= 2; validation and vLLM agree."""
    from checker.conformance.vllm_real import _vllm_config
    from model.vllm.validation import validate

    for budget, ok in ((1, False), (2, True)):
        cfg = _cfg(speculative_method="draft_model", max_num_batched_tokens=budget,
                   max_num_seqs=1, max_model_len=32)
        try:
            validate(cfg)
            ours = True
        except InputError:
            ours = False
        try:
            _vllm_config(cfg)
            theirs = True
        except InputError as exc:
            assert "not have enough slots" in str(exc)
            theirs = False
        assert ours == theirs == ok, budget
