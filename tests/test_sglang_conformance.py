"""Conformance of the SGLang reference with SGLang's real scheduler (v0.5.22, on CPU).

Tests marked `conformance` need SGLang: in a separate venv, `pip install -e '.[sglang]'`
then `pip install --no-deps sglang==0.5.22`, then `pytest -m conformance`. Without SGLang
they are skipped with the install hint; the pure tests (generator, scope, shrinker,
rendering, and the reference and rules on the targeted workloads) always run.

The targeted workloads pin the four differences the real scheduler showed (notes of
issue 19): D1 the latch lost when an empty running batch is replaced by the last batch
(scheduler.py:3830-3833), D2 the running order after a retraction (schedule_batch.py:3379),
D3 a retracted prompt left in the radix tree (out of the model's scope), D4 a fully cached
prompt's recomputed token given back at the checkpoint (unified_radix_cache.py:1080-1154).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from test_conformance import assert_all_agree
from test_sglang_eagle import TARGETED as EAGLE_TARGETED

from checker.conformance.sglang_generate import (
    FEATURES,
    MOVES,
    PAGE_FEATURES,
    SIZES,
    in_scope,
    random_sglang_workload,
    run_features,
    shrink,
)
from checker.conformance.sglang_real import (
    INSTALL_HINT,
    Divergence,
    first_divergence,
    sglang_available,
    sglang_unavailable_reason,
)
from model.core.errors import InputError
from model.core.types import StepRecord
from model.run import simulate, without_unsampled_eos
from model.sglang.engine import run_rules, to_record
from model.sglang.reference import retracted_prompt_evicted
from model.workload import load_workload, parse_workload

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("sglang_*.json"))
needs_sglang = pytest.mark.skipif(not sglang_available(),
                                  reason=f"{sglang_unavailable_reason()}")
BATCH = range(200)  # the generated seeds the conformance test runs

_TINY = {"chunked_prefill_size": 16, "max_prefill_tokens": 16, "max_running_requests": 4,
         "context_length": 64, "schedule_conservativeness": 0.3}


def _workload(config: dict, requests: list[tuple], steps: int, eos: tuple = ()) -> object:
    """A workload from (id, prompt_len, max_tokens, arrival_step[, cached_prefix_len])."""
    reqs = [{"id": r[0], "prompt_len": r[1], "max_tokens": r[2], "arrival_step": r[3],
             **({"cached_prefix_len": r[4]} if len(r) > 4 else {})} for r in requests]
    return parse_workload({"engine": "sglang", "config": config, "requests": reqs,
                           "eos": [{"id": i, "step": s} for i, s in eos], "steps": steps})


# D1 (a): x's admission leaves no room for y (NO_TOKEN) and sets the latch on the empty
# running batch; the merge replaces it by x's batch, latch False, so y is admitted at
# step 2 (the old model left y waiting for all of x's decodes).
LATCH_NO_TOKEN = _workload({"max_total_num_tokens": 24, "disable_radix_cache": True, **_TINY},
                           [("x", 5, 10, 1), ("y", 2, 10, 1), ("z", 1, 10, 2)], 9)
# D1 (b): the latch set while a chunked request runs alone is dropped when its last chunk
# becomes the running batch; `late` is admitted at step 4.
LATCH_AFTER_CHUNK = _workload(
    {"max_total_num_tokens": 20, "chunked_prefill_size": 2, "max_prefill_tokens": 22,
     "max_running_requests": 2, "disable_radix_cache": True, "context_length": 64},
    [("long", 5, 6, 1), ("late", 2, 2, 2)], 8)
# D1 (c): every mixed step gives the running batch a new empty object (S:4284-4286);
# lof, mixed chunk, a cached prefix and an EOS.
LATCH_MIXED = _workload(
    {"max_total_num_tokens": 96, "chunked_prefill_size": 8, "max_prefill_tokens": 12,
     "max_running_requests": 4, "schedule_policy": "lof", "enable_mixed_chunk": True,
     "disable_radix_cache": False, "context_length": 64},
    [("a", 3, 6, 1), ("b", 5, 9, 1), ("long", 20, 3, 3, 6), ("c", 2, 12, 3), ("d", 4, 2, 5)],
    14, eos=(("b", 4),))
# D2: x is retracted at step 10; z and y (equal outputs) stay in sort order, the shorter
# prompt first: z before y.
RETRACT_ORDER = _workload({"max_total_num_tokens": 31, "disable_radix_cache": True, **_TINY},
                          [("x", 5, 10, 1), ("y", 2, 10, 1), ("z", 1, 10, 2)], 12)
# D4: a's whole prompt is cached; its recomputed last token goes back at the checkpoint.
FULLY_CACHED = _workload(
    {"max_total_num_tokens": 16, "chunked_prefill_size": 8, "max_prefill_tokens": 8,
     "disable_radix_cache": False, "context_length": 64},
    [("a", 3, 3, 1, 3)], 4)
# D3: RETRACT_ORDER with the radix cache on and SGLANG_RETRACT_DECODE_STEPS=1: the
# retraction evicts too little, x's prompt stays in the tree and upstream re-admits x with
# 8 tokens where the model recomputes 13. Out of the model's scope.
RETAINED_PROMPT = _workload({"max_total_num_tokens": 31, "disable_radix_cache": False,
                             "retract_decode_steps": 1, **_TINY},
                            [("x", 5, 10, 1), ("y", 2, 10, 1), ("z", 1, 10, 2)], 14)
# The same with retract_decode_steps >= the pool: every retraction empties the tree.
EVICTED_PROMPT = replace(RETAINED_PROMPT, config=replace(RETAINED_PROMPT.config,
                                                         retract_decode_steps=31))

# Page size 4 (the paged allocator and tree): a's 11 tokens exceed the 8-token chunk and
# are cut to 2 pages, its 3-token continuation ends inside a page; decodes take a page
# only on a page boundary; a is retracted; c's whole prompt (2 pages) is cached, so its
# last page is recomputed and given back; d's 6 cached tokens match as 1 page.
PAGED_4 = _workload(
    {"max_total_num_tokens": 32, "chunked_prefill_size": 8, "max_prefill_tokens": 16,
     "max_running_requests": 3, "schedule_conservativeness": 0.1, "page_size": 4,
     "context_length": 64, "retract_decode_steps": 64},
    [("a", 11, 14, 1), ("b", 3, 12, 2), ("c", 8, 6, 3, 8), ("d", 9, 3, 4, 6)], 27)
# Page size 16, mixed chunk: the decode rows take up 3 tokens of the 32-token chunk, so a
# new 40-token prompt gets only 16 (a page cut below the budget, P:1567-1573).
PAGED_16_MIXED = _workload(
    {"max_total_num_tokens": 256, "chunked_prefill_size": 32, "max_prefill_tokens": 64,
     "max_running_requests": 4, "enable_mixed_chunk": True, "page_size": 16,
     "disable_radix_cache": True, "context_length": 256},
    [("x", 5, 30, 1), ("y", 17, 20, 1), ("z", 2, 20, 1), ("w", 40, 5, 3)], 30)
# Page size 16, a 2-page pool: max_new_tokens clips to 0 (32 - 16 - 16 - 1 < 0,
# allocator/base.py:86-105), the request still samples one token, and its EOS is demoted
# to a length finish (schedule_batch.py:1901-1911).
ZERO_NEW_TOKENS = _workload(
    {"max_total_num_tokens": 32, "chunked_prefill_size": -1, "max_prefill_tokens": 1,
     "page_size": 16, "disable_radix_cache": True, "context_length": 8},
    [("r0", 1, 1, 2)], 2, eos=(("r0", 2),))

TARGETED = {"latch_no_token": LATCH_NO_TOKEN, "latch_after_chunk": LATCH_AFTER_CHUNK,
            "latch_mixed": LATCH_MIXED, "retract_order": RETRACT_ORDER,
            "fully_cached": FULLY_CACHED, "evicted_prompt": EVICTED_PROMPT,
            "paged_4": PAGED_4, "paged_16_mixed": PAGED_16_MIXED,
            "zero_new_tokens": ZERO_NEW_TOKENS}
PAGE_SIZES = (4, 16)
EVERY_TARGETED = {**TARGETED, **{f"eagle_{name}": w for name, w in EAGLE_TARGETED.items()}}


# ---------------------------------------------------------------------------- pure

def test_the_same_seed_gives_the_same_workload_and_every_size_is_drawn():
    assert random_sglang_workload(7) == random_sglang_workload(7)
    assert len({random_sglang_workload(s) for s in range(40)}) == 40
    contexts = {random_sglang_workload(s).config.context_length for s in range(100)}
    assert contexts == {64, 256}
    for size in SIZES:
        assert in_scope(random_sglang_workload(3, size))


def test_generated_workloads_stay_inside_the_models_scope():
    for seed in range(400):
        w = random_sglang_workload(seed)
        assert in_scope(w), (seed, w)
        assert retracted_prompt_evicted(w.config, w.requests)
        assert all(1 <= e.step <= w.steps for e in w.eos)


def test_generated_workloads_reach_every_feature_on_the_reference():
    reached = dict.fromkeys(FEATURES, 0)
    for seed in range(600):
        w = without_unsampled_eos(random_sglang_workload(seed))
        for name in run_features(w, simulate(w)):
            reached[name] += 1
    assert all(n for name, n in reached.items() if name not in PAGE_FEATURES), reached
    assert not any(reached[name] for name in PAGE_FEATURES)
    assert reached["retraction"] >= 20 and reached["batch:mixed"] >= 20, reached


@pytest.mark.parametrize("page", PAGE_SIZES)
def test_paged_workloads_stay_in_scope_and_reach_the_page_features(page):
    reached = dict.fromkeys(FEATURES, 0)
    for seed in range(150):
        w = random_sglang_workload(seed, "any", page)
        assert in_scope(w), (seed, w)
        assert w.config.page_size == page and w.config.max_total_num_tokens % page == 0
        assert retracted_prompt_evicted(w.config, w.requests)
        for name in run_features(w, simulate(without_unsampled_eos(w))):
            reached[name] += 1
    assert random_sglang_workload(5, "any", page) == random_sglang_workload(5, "any", page)
    paged = ("paged", "page_hit", "page_cut_chunk", "unaligned_chunk_end", "retraction",
             "fully_cached_prompt", "chunked", "batch:mixed")
    assert all(reached[name] for name in paged), reached


def test_the_paged_targeted_workloads_use_pages():
    records = simulate(PAGED_4)
    assert records[0].scheduled == (("a", 8),) and records[1].scheduled == (("a", 3),)
    assert all(r.free_blocks % 4 == 0 for r in records)
    assert any(r.preempted == ("a",) for r in records)
    c_prefill = next(r for r in records if "c" in r.admitted)
    assert dict(c_prefill.scheduled)["c"] == 4  # the recomputed last page
    d_prefill = next(r for r in records if "d" in r.admitted)
    assert dict(d_prefill.num_computed_tokens)["d"] - dict(d_prefill.scheduled)["d"] == 4
    assert simulate(ZERO_NEW_TOKENS)[1].finished == (("r0", "length"),)
    mixed = simulate(PAGED_16_MIXED)
    w_step = next(r for r in mixed if "w" in r.admitted)
    assert dict(w_step.scheduled)["w"] == 16 and dict(w_step.extra)["batch"] == "mixed"


@pytest.mark.parametrize("name", sorted(TARGETED))
def test_reference_and_rules_agree_on_the_targeted_workloads(name):
    w = without_unsampled_eos(TARGETED[name])
    run = run_rules(w)
    for ref, observed in zip(simulate(w), run.steps, strict=True):
        assert to_record(observed, run.ids) == replace(ref, extra=()), (name, ref.step)


def _extra(record: StepRecord, key: str) -> object:
    return dict(record.extra)[key]


def test_d1_an_empty_running_batch_replaced_by_the_last_batch_drops_the_latch():
    records = simulate(LATCH_NO_TOKEN)
    assert records[0].admitted == ("x",) and _extra(records[0], "batch_is_full")
    assert records[1].admitted == ("y",)  # the merge took x's batch, latch False
    records = simulate(LATCH_AFTER_CHUNK)
    assert _extra(records[2], "batch_is_full") and records[2].waiting == ("late",)
    assert records[3].admitted == ("late",)


def test_d2_the_survivors_of_a_retraction_keep_retraction_order():
    records = simulate(RETRACT_ORDER)
    assert records[8].running == ("x", "y", "z")
    assert records[9].preempted == ("x",) and records[9].running == ("z", "y")
    assert records[9].scheduled == (("z", 1), ("y", 1))


def test_d4_a_fully_cached_prompt_gives_its_recomputed_token_back():
    records = simulate(FULLY_CACHED)
    assert [r.free_blocks for r in records] == [15, 15, 14, 16]
    assert dict(records[1].num_computed_tokens) == {"a": 4}
    uncached = replace(FULLY_CACHED, config=replace(FULLY_CACHED.config,
                                                    disable_radix_cache=True))
    assert [r.free_blocks for r in simulate(uncached)][:3] == [13, 12, 11]


def test_d3_the_scope_predicate_marks_a_retained_prompt():
    assert not retracted_prompt_evicted(RETAINED_PROMPT.config, RETAINED_PROMPT.requests)
    assert not in_scope(RETAINED_PROMPT)
    assert retracted_prompt_evicted(EVICTED_PROMPT.config, EVICTED_PROMPT.requests)
    roomy = replace(RETAINED_PROMPT.config, max_total_num_tokens=50)
    assert retracted_prompt_evicted(roomy, RETAINED_PROMPT.requests)  # 50 >= 8 + 30 + 12


def test_shrink_reaches_a_minimal_workload_inside_the_scope():
    def retracts(w):
        return any(r.preempted for r in simulate(without_unsampled_eos(w)))

    seed = next(s for s in range(200) if retracts(random_sglang_workload(s, "pressure")))
    big = random_sglang_workload(seed, "pressure")
    small = shrink(big, retracts)
    assert retracts(small) and in_scope(small) and not small.eos
    assert small.steps < big.steps and len(small.requests) <= len(big.requests)
    assert [r.id for r in small.requests] == [f"r{i}" for i in range(len(small.requests))]
    for moves in MOVES:  # 1-minimal: no single move keeps it retracting
        for candidate in moves(small):
            assert candidate == small or not in_scope(candidate) or not retracts(candidate)


def test_first_divergence_compares_fields_and_extras_and_renders_them():
    w = RETRACT_ORDER
    a = StepRecord(step=1, scheduled=(("x", 5),), admitted=("x",), resumed=(), preempted=(),
                   finished=(), free_blocks=26, num_computed_tokens=(("x", 5),),
                   extra=(("batch", "prefill"), ("new_token_ratio", 0.21)))
    near = replace(a, extra=(("batch", "prefill"), ("new_token_ratio", 0.2100000001)))
    assert first_divergence(w, [a], [near]) is None  # floats to 1e-6
    b = replace(a, free_blocks=25, extra=(("batch", "decode"), ("new_token_ratio", 0.21)))
    d = first_divergence(w, [a], [b])
    assert isinstance(d, Divergence) and d.step == 1 and d.fields == ("free_blocks", "batch")
    text = d.render()
    assert "SGLang 0.5.22 (real)" in text and "* free_blocks" in text and "* batch" in text
    missing = first_divergence(w, [a, a], [a])
    assert missing is not None and missing.step == 2 and missing.reference is None


def test_without_sglang_the_reason_names_the_install():
    reason = sglang_unavailable_reason()
    assert sglang_available() == (reason is None)
    if reason is not None:
        assert INSTALL_HINT in reason


# ----------------------------------------------------------------- against SGLang

@pytest.mark.conformance
@needs_sglang
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_agree_with_sglangs_real_scheduler(path):
    from checker.conformance.sglang_real import compare

    divergence = compare(load_workload(path))
    assert divergence is None, divergence.render()


@pytest.mark.conformance
@needs_sglang
@pytest.mark.parametrize("name", sorted(EVERY_TARGETED))
def test_the_targeted_workloads_agree_with_sglangs_real_scheduler(name):
    """This file's targeted workloads and test_sglang_eagle.py's (named eagle_*)."""
    from checker.conformance.sglang_real import compare

    divergence = compare(EVERY_TARGETED[name])
    assert divergence is None, divergence.render()


@pytest.mark.conformance
@needs_sglang
def test_the_real_scheduler_shows_each_fixed_difference():
    from checker.conformance.sglang_real import run_real_sglang

    assert run_real_sglang(LATCH_NO_TOKEN)[1].admitted == ("y",)  # D1
    assert run_real_sglang(RETRACT_ORDER)[9].running == ("z", "y")  # D2
    assert [r.free_blocks for r in run_real_sglang(FULLY_CACHED)] == [15, 15, 14, 16]  # D4


@pytest.mark.conformance
@needs_sglang
def test_outside_the_scope_the_real_scheduler_reuses_the_retracted_prompt():
    from checker.conformance.sglang_real import compare

    divergence = compare(RETAINED_PROMPT)  # D3: upstream re-admits x with 8 tokens, not 13
    assert divergence is not None and divergence.step == 13
    assert divergence.real.scheduled == (("x", 8),)
    assert divergence.reference.scheduled == (("x", 13),)


@pytest.mark.conformance
@needs_sglang
def test_generated_workloads_agree_on_every_step():
    from checker.conformance.sglang_real import compare

    assert_all_agree(compare, random_sglang_workload, BATCH)


@pytest.mark.conformance
@needs_sglang
@pytest.mark.parametrize("page", PAGE_SIZES)
def test_generated_paged_workloads_agree_on_every_step(page):
    from checker.conformance.sglang_real import compare

    assert_all_agree(compare, lambda seed: random_sglang_workload(seed, "any", page),
                     range(100))


@pytest.mark.conformance
@needs_sglang
def test_the_driver_refuses_what_the_model_refuses():
    from checker.conformance.sglang_real import run_real_sglang

    too_long = _workload({"max_total_num_tokens": 16, "context_length": 64},
                         [("a", 10, 3, 1)], 2)  # max_req_input_len = 10
    with pytest.raises(InputError):
        run_real_sglang(too_long)
    grouped = replace(FULLY_CACHED, requests=(replace(FULLY_CACHED.requests[0],
                                                      prefix_group="g",
                                                      shared_prefix_len=1),))
    with pytest.raises(InputError):
        run_real_sglang(grouped)


@pytest.mark.conformance
@needs_sglang
def test_the_runner_reports_agreement(capsys):
    from checker.conformance.sglang_real import main

    assert main(["--count", "15", "--seed", "40"]) == 0
    out = capsys.readouterr().out
    assert "workloads agreeing: 15/15 (100.0%)" in out and "steps agreeing" in out
    assert main(["--count", "10", "--seed", "0", "--page-size", "16"]) == 0
    out = capsys.readouterr().out
    assert "page size 16" in out and "workloads agreeing: 10/10 (100.0%)" in out
    # --page-size repeated: each page size in turn, each report as its run alone gives it
    assert main(["--count", "10", "--seed", "0", "--page-size", "4"]) == 0
    four = capsys.readouterr().out
    assert main(["--count", "10", "--seed", "0", "--page-size", "16", "--page-size", "4"]) == 0
    both = capsys.readouterr().out

    def timeless(text):
        return re.sub(r"in \d+\.\d s", "in _ s", text)

    assert timeless(both) == timeless(out + "\n" + four)


@pytest.mark.conformance
@needs_sglang
def test_the_runner_reports_a_divergence_of_the_old_latch(monkeypatch, capsys):
    """The reference before the D1 fix (the latch kept when an empty running batch is
    replaced by the last batch) diverges from the real scheduler, and the runner says so."""
    from checker.conformance.sglang_real import main
    from model.sglang.reference import SGLangScheduler

    fixed = SGLangScheduler._merge_last_batch

    def old_merge(self):
        full, was_empty, last = self.batch_is_full, not self.running, self.last_batch
        fixed(self)
        if full and was_empty and last is not None and last.reqs and self.running:
            self.batch_is_full = True

    monkeypatch.setattr(SGLangScheduler, "_merge_last_batch", old_merge)
    assert main(["--count", "10", "--seed", "0", "--no-shrink"]) == 1
    out = capsys.readouterr().out
    assert "workloads agreeing: 9/10" in out and "first diverging workload" in out
    assert "first divergence at step 11" in out and "* rem_total_tokens" in out


@pytest.mark.conformance
@needs_sglang
def test_the_runner_reports_a_divergence_of_unpaged_cache_hits(monkeypatch, capsys):
    """A reference whose cache hit ignores the page (page size 1's `min(cached, fill - 1)`)
    diverges from the real paged tree at page size 16: the harness drives real pages."""
    from checker.conformance.sglang_real import main
    from model.sglang.reference import SGLangScheduler

    def unpaged_hit(self, req):
        if self.cfg.disable_radix_cache:
            return 0
        return min(req.cached_prefix_len, req.fill_len - 1)

    monkeypatch.setattr(SGLangScheduler, "_cache_hit", unpaged_hit)
    assert main(["--count", "10", "--seed", "0", "--page-size", "16", "--no-shrink"]) == 1
    out = capsys.readouterr().out
    assert "workloads agreeing: 7/10" in out and "* scheduled" in out
    assert "r3:16" in out and "r3:5" in out  # 34 tokens, 11 cached: 0 whole pages hit
