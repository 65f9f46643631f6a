"""SGLang's EAGLE speculative decoding (v0.5.22, the CPU server's synchronous spec-v2 path):
the config's knobs, the reference's over-allocation, decode check, accepted runs and
finishes, the generator, and (marked `conformance`, skipped without SGLang) the reference
against SGLang's real scheduler.

Upstream paths are relative to `sglang/srt/`.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import z3
from test_conformance import assert_all_agree

from checker.conformance.sglang_generate import (
    SPEC_FEATURES,
    in_scope,
    random_sglang_workload,
    run_features,
)
from checker.conformance.sglang_real import sglang_available, sglang_unavailable_reason
from model.core.errors import InputError
from model.core.ops import SymbolicOps, as_python
from model.core.slots import lay_out
from model.core.types import AcceptEvent, EosEvent, StepRecord, Workload
from model.run import simulate
from model.sglang import rules
from model.sglang.config import Config, parse_config, rejection
from model.sglang.engine import records_to_steps, run_rules, to_record
from model.sglang.reference import SGLangScheduler
from model.workload import parse_workload

needs_sglang = pytest.mark.skipif(not sglang_available(),
                                  reason=f"{sglang_unavailable_reason()}")

EAGLE = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}


def _workload(config: dict, requests: list[tuple], steps: int, eos: tuple = (),
              accepted: tuple = ()) -> object:
    """A workload from (id, prompt_len, max_tokens, arrival_step), eos (id, step) and
    accepted (id, step, count)."""
    return parse_workload({
        "engine": "sglang", "config": config, "steps": steps,
        "requests": [{"id": r[0], "prompt_len": r[1], "max_tokens": r[2],
                      "arrival_step": r[3]} for r in requests],
        "eos": [{"id": i, "step": s} for i, s in eos],
        "accepted": [{"id": i, "step": s, "count": c} for i, s, c in accepted]})


# r0 decodes alone at steps 2-3 with runs of 4 and 3 tokens; r1's prefill at step 4; both
# decode at 5 (r0's ninth output is its last), r1 ends by EOS at 6. The reserve is
# 2 x max(3 x 1, 4) = 8 tokens past the committed length.
HAND = _workload({"max_total_num_tokens": 64, "chunked_prefill_size": 8, **EAGLE},
                 [("r0", 5, 9, 1), ("r1", 3, 6, 4)], 6, eos=(("r1", 6),),
                 accepted=(("r0", 2, 3), ("r0", 3, 2)))
# A lone request whose decode reserve does not fit is aborted (B:3352-3374); its prefill
# batch had been merged into a running batch still listing r1 (finished), so it stands
# apart, lists r0, and the loop is not idle: the ratio keeps the estimate 0 (S:5168-5190).
ABORT_APART = _workload(
    {"max_total_num_tokens": 14, "chunked_prefill_size": None, "max_prefill_tokens": 1,
     "disable_radix_cache": True, "context_length": 10, "speculative_algorithm": "EAGLE3",
     "speculative_num_steps": 3, "speculative_eagle_topk": 2,
     "speculative_num_draft_tokens": 3}, [("r0", 3, 2, 4), ("r1", 1, 3, 1)], 5)
# The same abort when the prefill batch became the running batch: idle, the ratio resets.
ABORT_REPLACED = _workload(
    {"max_total_num_tokens": 8, "chunked_prefill_size": None, "max_prefill_tokens": 1,
     "disable_radix_cache": True, "context_length": 8, "speculative_algorithm": "EAGLE3",
     "speculative_num_steps": 4, "speculative_eagle_topk": 2,
     "speculative_num_draft_tokens": 5}, [("r0", 1, 2, 1)], 2)
TARGETED = {"hand": HAND, "abort_apart": ABORT_APART, "abort_replaced": ABORT_REPLACED}


# ---------------------------------------------------------------------------- config

def test_the_eagle_knobs_parse_and_are_written_only_when_on():
    cfg = parse_config({"max_total_num_tokens": 64, **EAGLE})
    assert cfg.speculative and cfg.to_dict()["speculative_num_draft_tokens"] == 4
    assert not any(k.startswith("speculative") for k in Config().to_dict())
    with pytest.raises(InputError, match="NGRAM.*not modelled"):
        parse_config({"speculative_algorithm": "NGRAM"})
    with pytest.raises(InputError, match="speculative_num_steps"):
        parse_config({**EAGLE, "speculative_num_steps": 0})


def test_the_model_refuses_incomplete_or_adjusted_knobs():
    assert rejection(Config(**EAGLE)) is None
    missing = rejection(Config(speculative_algorithm="EAGLE", speculative_num_steps=3))
    assert missing is not None and missing.rule == "spec_knobs_missing"
    adjusted = rejection(Config(**{**EAGLE, "speculative_num_draft_tokens": 6}))
    assert adjusted is not None and adjusted.rule == "spec_draft_tokens_adjusted"
    assert "give 4" in str(adjusted)
    stray = rejection(Config(speculative_num_steps=3))
    assert stray is not None and stray.rule == "spec_knobs_without_algorithm"


def test_eagle_defaults_to_48_running_requests_capped_at_half_the_pool():
    assert Config(max_total_num_tokens=8192, **EAGLE).effective_max_running_requests == 48
    assert Config(max_total_num_tokens=40, **EAGLE).effective_max_running_requests == 20
    assert Config(max_total_num_tokens=8192, max_running_requests=7,
                  **EAGLE).effective_max_running_requests == 7
    assert Config(max_total_num_tokens=8192).effective_max_running_requests == 2048


@pytest.mark.parametrize(("page", "steps", "topk", "tokens", "alloc"), [
    (1, 3, 1, 4, 4),  # max(3 x 1, 4)
    (1, 3, 2, 4, 6),  # max(3 x 2, 4)
    (16, 3, 1, 4, 4),  # topk 1: the same at any page size
    (16, 3, 2, 4, 64),  # ceil((15 + 3 + 15) / 16) = 2 pages per branch, 2 branches
    (4, 1, 2, 3, 8),  # (3 + 1 + 3) // 4 = 1 page per branch, 2 branches
    (4, 1, 2, 9, 9),  # the verify width when larger
])
def test_the_decode_allocation_follows_allocation_sizing(page, steps, topk, tokens, alloc):
    """`get_alloc_len_per_decode` (mem_cache/allocation_sizing.py:28-60) and the reserve,
    twice that (63-69)."""
    cfg = Config(page_size=page, max_total_num_tokens=64 * page, chunked_prefill_size=page,
                 speculative_algorithm="EAGLE", speculative_num_steps=steps,
                 speculative_eagle_topk=topk, speculative_num_draft_tokens=tokens)
    assert cfg.alloc_len_per_decode == alloc
    assert cfg.decode_reserve == 2 * alloc
    assert cfg.max_accept_len == min(tokens, steps + 1)


# ------------------------------------------------------------------------- reference

def test_a_decode_allocates_the_reserve_and_commits_the_accepted_run():
    rows = [(r.scheduled, r.num_computed_tokens, r.free_blocks, r.finished,
             dict(r.extra)["kv_allocated"]) for r in simulate(HAND)]
    assert rows == [
        ((("r0", 5),), (("r0", 5),), 59, (), [["r0", 5]]),
        ((("r0", 4),), (("r0", 9),), 51, (), [["r0", 13]]),  # 5 + 8 reserved; 1 + 3 run
        ((("r0", 3),), (("r0", 12),), 47, (), [["r0", 17]]),
        ((("r1", 3),), (("r0", 12), ("r1", 3)), 44, (), [["r0", 17], ["r1", 3]]),
        ((("r0", 1), ("r1", 1)), (("r0", 13), ("r1", 4)), 33, (("r0", "length"),),
         [["r0", 20], ["r1", 11]]),
        ((("r1", 1),), (("r1", 5),), 52, (("r1", "stop"),), [["r1", 12]]),
    ]


def test_a_run_crossing_max_new_tokens_is_a_length_finish_even_ending_in_eos():
    """The EOS is the run's last token; past max_new_tokens it is demoted
    (schedule_batch.py:1901-1911, 1940-1942)."""
    cfg = {"max_total_num_tokens": 64, **EAGLE}
    crossing = _workload(cfg, [("a", 2, 3, 1)], 2, eos=(("a", 2),), accepted=(("a", 2, 3),))
    assert simulate(crossing)[-1].finished == (("a", "length"),)
    inside = _workload(cfg, [("a", 2, 5, 1)], 2, eos=(("a", 2),), accepted=(("a", 2, 3),))
    assert simulate(inside)[-1].finished == (("a", "stop"),)


def test_accepted_counts_are_checked():
    cfg = {"max_total_num_tokens": 64, **EAGLE}
    with pytest.raises(InputError, match="no speculative decoding"):
        simulate(_workload({"max_total_num_tokens": 64}, [("a", 2, 5, 1)], 2,
                           accepted=(("a", 2, 1),)))
    with pytest.raises(InputError, match="not in that step's decode batch"):
        simulate(_workload(cfg, [("a", 2, 5, 1)], 2, accepted=(("a", 1, 1),)))
    with pytest.raises(InputError, match=r"must be in \[0, 3\]"):
        simulate(_workload(cfg, [("a", 2, 5, 1)], 2, accepted=(("a", 2, 4),)))


def test_a_lone_request_without_room_for_its_reserve_is_aborted():
    apart = simulate(ABORT_APART)[-1]
    assert apart.finished == (("r0", "abort"),) and dict(apart.extra)["aborted"] == ["r0"]
    assert dict(apart.extra)["new_token_ratio_after"] == 0
    replaced = simulate(ABORT_REPLACED)[-1]
    assert replaced.finished == (("r0", "abort"),)
    assert dict(replaced.extra)["new_token_ratio_after"] == 0.7


def test_the_explorer_branches_on_every_accepted_count_of_a_decode():
    """`step_choices`: after an EAGLE decode of two requests with at most 3 accepted drafts,
    every pair of counts but (0, 0); none after a prefill or without EAGLE."""
    from model.sglang.engine import step_choices

    sched = SGLangScheduler(HAND.config)
    for spec in HAND.requests:
        sched.add_request(replace(spec, arrival_step=1))
    sched.step()
    assert step_choices(sched) == ()  # the prefill of both
    sched.step()
    choices = step_choices(sched)
    assert len(choices) == 4 * 4 - 1 and {"accepted": {"r0": 3, "r1": 3}} in choices
    plain = SGLangScheduler(Config(max_total_num_tokens=64))
    plain.add_request(HAND.requests[0])
    plain.step()
    plain.step()
    assert step_choices(plain) == ()


def test_spec_off_records_carry_no_kv_allocated():
    off = replace(HAND, accepted=(), config=replace(
        HAND.config, speculative_algorithm=None, speculative_num_steps=None,
        speculative_eagle_topk=None, speculative_num_draft_tokens=None))
    assert all("kv_allocated" not in dict(r.extra) for r in simulate(off))


# ------------------------------------------------------------------------- generator

def test_eagle_workloads_stay_in_scope_and_spec_off_draws_as_before():
    for seed in range(60):
        w = random_sglang_workload(seed, spec=True)
        assert in_scope(w) and w.config.speculative
        assert random_sglang_workload(seed, spec=True) == w
        assert random_sglang_workload(seed) == random_sglang_workload(seed, spec=False)
        assert not random_sglang_workload(seed).accepted


def test_eagle_workloads_reach_every_spec_feature_on_the_reference():
    reached: set[str] = set()
    for seed in range(300):
        w = random_sglang_workload(seed, spec=True)
        records = _reference_records(w)
        reached |= run_features(w, records)
    assert set(SPEC_FEATURES) <= reached, set(SPEC_FEATURES) - reached


def _effective(w: Workload) -> Workload:
    """`w` with only the EOS entries and accepted counts that name a request sampling
    (verifying) in their step, as the real run keeps them: each step is first tried on a
    copy without any to see its batch."""
    sched = SGLangScheduler(w.config)
    arrivals, eos, accepted = w.arrivals_by_step(), w.eos_ids_by_step(), w.accepted_by_step()
    kept_eos: list[EosEvent] = []
    kept_accepted: list[AcceptEvent] = []
    for step in range(1, w.steps + 1):
        for spec in arrivals.get(step, ()):
            sched.add_request(spec)
        probe = copy.deepcopy(sched).step()
        extra = dict(probe.extra)
        ran = {rid for rid, _ in probe.scheduled if rid != extra["chunked_req"]}
        verifying = ran if extra["batch"] == "decode" else set()
        ends = frozenset(eos.get(step, frozenset()) & ran)
        counts = {k: v for k, v in accepted.get(step, {}).items() if k in verifying}
        kept_eos += [EosEvent(rid, step) for rid in sorted(ends)]
        kept_accepted += [AcceptEvent(rid, step, c) for rid, c in sorted(counts.items())]
        sched.step(ends, counts)
    return replace(w, eos=tuple(kept_eos), accepted=tuple(kept_accepted))


def _reference_records(w: Workload) -> tuple[StepRecord, ...]:
    """The reference's records of `_effective(w)`."""
    return simulate(_effective(w))


# ------------------------------------------------------------------------------ rules

#: The Step fields the reference's observables and the rules' are compared on (the order
#: keys are relative orders, compared through `to_record`).
_COMPARED = ("scheduled", "sampled", "finished", "finished_stop", "num_output_tokens",
             "blocks", "admitted", "resumed", "preempted", "spec_scheduled", "spec_accepted",
             "running_after", "waiting_after", "num_tokens")


def _assert_rules_agree(page: int, seeds: range) -> None:
    """Every record, the ratio after every step, the pool after the finishes, and each
    slot's observables (blocks include the over-allocation) on the generated EAGLE
    workloads of `seeds`."""
    for seed in seeds:
        w = _effective(random_sglang_workload(seed, "any", page, True))
        reference = simulate(w)
        run = run_rules(w)
        observed_ref = records_to_steps(w, reference)
        for ref, observed, state, mine in zip(reference, run.steps, run.states[1:],
                                              observed_ref, strict=True):
            where = f"seed {seed} step {ref.step}"
            assert to_record(observed, run.ids) == replace(ref, extra=()), where
            ratio = run.cfg.ratio(state.ratio_n, state.ratio_b)
            assert round(float(ratio), 6) == dict(ref.extra)["new_token_ratio_after"], where
            assert observed.free_blocks_end == mine.free_blocks_end, where
            for a, b in zip(observed.slots, mine.slots, strict=True):
                assert ([getattr(a, f) for f in _COMPARED]
                        == [getattr(b, f) for f in _COMPARED]), where


@pytest.mark.parametrize("page", (1, 4, 16))
def test_reference_and_rules_agree_on_generated_eagle_workloads(page):
    _assert_rules_agree(page, range(15))


@pytest.mark.slow
@pytest.mark.parametrize("page", (1, 4, 16))
def test_reference_and_rules_agree_on_300_generated_eagle_workloads(page):
    _assert_rules_agree(page, range(15, 300))


def test_the_rules_agree_on_the_targeted_eagle_workloads():
    for name, w in TARGETED.items():
        run = run_rules(w)
        for ref, observed in zip(simulate(w), run.steps, strict=True):
            assert to_record(observed, run.ids) == replace(ref, extra=()), (name, ref.step)
    assert run_rules(ABORT_APART).states[-1].ratio_n == 0  # the estimate kept, no reset


def test_the_eagle_rules_are_branch_free_one_symbolic_run_equals_the_concrete_one():
    """The accepted counts as z3 integers fixed by constraints: the symbolic step builds
    and evaluates to the concrete one."""
    concrete = run_rules(HAND)
    ops = SymbolicOps()
    state = concrete.states[0]
    solver = z3.Solver()
    laid = lay_out(HAND, concrete.cfg)
    for t, expected in enumerate(concrete.states[1:], start=1):
        eos = tuple(z3.BoolVal(e) for e in laid.eos[t - 1])
        acc = [z3.Int(f"acc{t}.{i}") for i in range(len(concrete.specs))]
        solver.add(*[a == c for a, (c, _) in zip(acc, laid.spec[t - 1], strict=True)])
        state, _ = rules.step(ops, concrete.cfg, concrete.specs, state, eos,
                              [(a, 0) for a in acc])
        solver.add(*ops.take_definitions())
        assert solver.check() == z3.sat
        model = solver.model()
        for got, want in zip(state.slots, expected.slots, strict=True):
            for name in ("status", "kv", "computed", "allocated", "outputs"):
                value = getattr(got, name)
                value = model.eval(value, model_completion=True) if isinstance(
                    value, z3.ExprRef) else value
                assert as_python(value) == getattr(want, name), (t, name)


# ------------------------------------------------------------- the real scheduler

# TARGETED is run against SGLang's real scheduler with the other targeted workloads, by
# test_sglang_conformance.py's test_the_targeted_workloads_agree_with_sglangs_real_scheduler.

@pytest.mark.conformance
@needs_sglang
@pytest.mark.parametrize("page", (1, 16))
def test_generated_eagle_workloads_agree_on_every_step(page):
    from checker.conformance.sglang_real import compare

    assert_all_agree(compare, lambda seed: random_sglang_workload(seed, "any", page, True),
                     range(100))


@pytest.mark.conformance
@needs_sglang
def test_the_runner_catches_a_reference_with_a_single_reserve(monkeypatch, capsys):
    """A reference that reserves one decode allocation, not upstream's two
    (allocation_sizing.py:63-69), diverges from the real over-allocation."""
    from checker.conformance.sglang_real import main

    assert main(["--count", "10", "--seed", "0", "--spec"]) == 0
    assert "workloads agreeing: 10/10 (100.0%)" in capsys.readouterr().out
    monkeypatch.setattr(Config, "decode_reserve",
                        property(lambda self: self.alloc_len_per_decode))
    assert main(["--count", "10", "--seed", "0", "--spec", "--no-shrink"]) == 1
    out = capsys.readouterr().out
    assert "first diverging workload" in out and "* kv_allocated" in out
