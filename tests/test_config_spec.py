"""`batchproof config` with speculative decoding (issue 16): the settings map onto Config's
fields (one draft-slot table), the sizes per method as v0.32.0 derives them, what stays
outside the model, the rules speculative decoding adds, its hazards with witnesses run on
the reference, and capacity arguments that count the lookahead. Everything through the CLI."""

import json

import pytest

from checker.cli.main import main
from model.core.types import RequestSpec, Workload
from model.vllm.config import Config
from model.vllm.reference import simulate

# Both batch sizes given, so no device is needed; the synchronous Scheduler, no cache.
SMALL = ("--max-model-len", "64", "--max-num-batched-tokens", "32", "--max-num-seqs", "4",
         "--block-size", "4", "--num-gpu-blocks", "64", "--concurrency", "2", "--depth", "4",
         "--no-enable-prefix-caching", "--no-async-scheduling")
FAST = ("--hazard", "priority_inversion")  # decided without a search under fcfs


def config(capsys, *argv):
    """Exit code, JSON document (None when the output is not JSON) and stderr."""
    code = main(["config", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def text(capsys, *argv):
    code = main(["config", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def spec_config(method=None, k=3, **extra):
    doc = {"num_speculative_tokens": k, **extra}
    if method is not None:
        doc["method"] = method
    return ("--speculative-config", json.dumps(doc))


def hazards(doc):
    return {h["hazard"]: h for h in doc["hazards"]}


# --- sizes per method, as config/speculative.py:1887-1952 and config/vllm.py:615-641 ------

EAGLE = "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"


@pytest.mark.parametrize("spec, slots, lookahead, drop", [
    (spec_config("eagle", model=EAGLE), 0, 3, True),
    (spec_config("eagle3", model="AngelSlim/Qwen3-8B_eagle3"), 0, 3, True),
    (spec_config("eagle3", model="x/p-eagle3", parallel_drafting=True), 2, 3, True),  # P-EAGLE
    (spec_config("eagle", model=EAGLE, disable_eagle_block_drop=True), 0, 3, False),
    (spec_config("mtp", k=1), 0, 1, True),
    (spec_config("mtp") + ("--mtp-layers", "1"), 0, 3, True),
    (spec_config("dflash", model="z-lab/Qwen3-8B-DFlash"), 3, 4, True),  # forced parallel
    (spec_config("draft_model", model="Qwen/Qwen3-0.6B"), 1, 3, False),
    (spec_config("draft_model", model="amd/PARD-Qwen3-0.6B", parallel_drafting=True), 3, 3,
     False),
    (spec_config("ngram"), 0, 0, False),
    (spec_config("ngram_gpu"), 0, 0, False),
    (spec_config("suffix"), 0, 0, False),
    (spec_config("medusa", model="FasterDecoding/medusa-vicuna-7b"), 0, 0, False),
    (spec_config("mlp_speculator", model="ibm/granite-accelerator"), 0, 0, False),
])
def test_draft_slots_lookahead_and_block_drop_per_method(capsys, spec, slots, lookahead, drop):
    code, doc, err = config(capsys, *SMALL, *FAST, *spec)
    assert code == 0, err
    got = doc["speculative"]
    assert (got["draft_slots"], got["num_lookahead_tokens"], got["eagle_block_drop"]) == (
        slots, lookahead, drop)
    assert got["modelled"] is True and got["outside"] is None
    code, out, _ = text(capsys, *SMALL, *FAST, *spec)
    line = next(li for li in out.splitlines() if "speculative decoding:" in li)
    assert f"{slots} draft slot(s) per request" in line
    assert f"lookahead {lookahead} KV slot(s)" in line
    assert f"EAGLE block drop {'on' if drop else 'off'}" in line


def test_dspark_is_forced_parallel_and_its_lookahead_is_the_draft_model_s(capsys):
    code, doc, _ = config(capsys, *SMALL, *FAST, *spec_config("dspark"))
    got = doc["speculative"]
    assert (got["draft_slots"], got["parallel_drafting"], got["eagle_block_drop"]) == (
        2, True, True)  # k - 1 (config/speculative.py:1468-1469, 1913-1920)
    assert got["num_lookahead_tokens"] is None and got["lookahead"].startswith("3 or 4")
    assert got["modelled"] is False and "sample_from_anchor" in got["outside"]


def test_dspark_still_gets_the_draft_slot_rule(capsys):
    tight = ("--max-model-len", "64", "--max-num-batched-tokens", "2", "--max-num-seqs", "2")
    code, out, err = text(capsys, *tight, *spec_config("dspark"))
    assert code == 2 and "INVALID" in out
    assert err.count("\n") == 1 and "rule batched_tokens_gt_draft_slots" in err
    assert "2 draft slots per request of dspark" in err and "config/vllm.py:2285-2290" in err
    loose = ("--max-model-len", "64", "--max-num-batched-tokens", "3", "--max-num-seqs", "2")
    assert text(capsys, *loose, *FAST, *spec_config("dspark"))[0] == 0  # valid


# --- the method as SpeculativeConfig resolves it ----------------------------------------

@pytest.mark.parametrize("spec, method", [
    (spec_config(model=EAGLE), "eagle"),  # method unset: draft_model, then the name decides
    (spec_config(model="ngram"), "ngram"),
    (spec_config("draft_model", model="z-lab/Qwen3-8B-DFlash"), "dflash"),
    (spec_config("deepseek_mtp", k=1), "mtp"),
    (spec_config(model="Qwen/Qwen3-0.6B"), "draft_model"),
])
def test_the_method_is_resolved_as_upstream_resolves_it(capsys, spec, method):
    code, doc, err = config(capsys, *SMALL, *FAST, *spec)
    assert code == 0, err
    assert doc["speculative"]["method"] == method


@pytest.mark.parametrize("spec, needle", [
    (spec_config(), "needs the draft model"),
    (spec_config("eagle3"), "needs the draft model"),
    (spec_config("eagle", k=0, model=EAGLE), "positive integer"),
    (spec_config("warp", model="x"), "unknown speculative method 'warp'"),
    (spec_config("eagle", model=EAGLE, parallel_drafting="yes"), "true or false"),
])
def test_malformed_speculative_settings_are_one_line_errors(capsys, spec, needle):
    code, _, err = text(capsys, *SMALL, *spec)
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_an_explicit_async_flag_with_ngram_is_refused(capsys):
    argv = [a for a in SMALL if a != "--no-async-scheduling"]
    code, _, err = text(capsys, *argv, "--async-scheduling", *spec_config("ngram"))
    assert code == 2 and err.count("\n") == 1
    assert "rule async_scheduling_spec_method" in err and "config/vllm.py:1563-1580" in err
    # left unset, ngram turns async scheduling off (config/vllm.py:1597-1617)
    code, doc, _ = config(capsys, *argv, *FAST, *spec_config("ngram"))
    assert code == 0 and "async scheduling" not in doc["scope"].split("covers")[0]
    code, doc, _ = config(capsys, *argv, *FAST, "--async-scheduling",
                          *spec_config("eagle", model=EAGLE))
    assert code == 0


# --- what stays outside the model ---------------------------------------------------------

@pytest.mark.parametrize("spec, reason", [
    (spec_config("dspark"), "speculative method dspark"),
    (spec_config("custom_class", model="my_module.MyProposer"), "custom_class"),
    (spec_config("extract_hidden_states"), "extract_hidden_states"),
    (spec_config("mtp") + ("--mtp-layers", "2"), "multi-module MTP"),
    (spec_config("mtp"), "num_nextn_predict_layers not given"),
    (spec_config("eagle", model=EAGLE, num_speculative_tokens_per_batch_size=[[1, 4, 3]]),
     "dynamic speculative decoding"),
])
def test_settings_outside_the_model_are_unknown_for_the_step(capsys, spec, reason):
    code, doc, _ = config(capsys, *SMALL, "--hazard", "starvation", "--hazard",
                          "priority_inversion", "--hazard", "spec_padding_assertion", *spec)
    h = hazards(doc)
    assert code == 3
    assert h["starvation"]["verdict"] == "UNKNOWN"
    assert h["starvation"]["detail"].startswith("outside the model: speculative decoding (")
    assert reason in h["starvation"]["detail"]
    assert doc["outside_model"] and reason in doc["outside_model"][0] or reason in str(
        doc["speculative"]["outside"])
    # what does not depend on the step still holds: fcfs has no inversion, and with the
    # threshold off nothing cuts a padded request
    assert h["priority_inversion"]["verdict"] == "PROVED absent"
    assert h["spec_padding_assertion"]["verdict"] == "PROVED absent"


def test_single_module_mtp_is_modelled(capsys):
    code, doc, _ = config(capsys, *SMALL, *FAST, *spec_config("mtp", k=1))
    assert code == 0 and doc["outside_model"] == []


# --- hazards speculative decoding adds, witnessed on the reference ------------------------

def witness_steps(h):
    return {s["step"]: s for s in h["witness"]["steps"]}


def test_a_threshold_at_most_k_crashes_the_engine_at_scheduler_1372(capsys):
    # ngram k=3, long_prefill_token_threshold 2: a 1-token prompt arriving while r0 decodes
    # is padded to 1+3 and cut to 2 (vllm-project/vllm#54028)
    argv = (*SMALL, "--long-prefill-token-threshold", "2", "--hazard",
            "spec_padding_assertion", *spec_config("ngram"))
    code, doc, _ = config(capsys, *argv)
    h = hazards(doc)["spec_padding_assertion"]
    assert code == 0 and h["verdict"] == "WITNESSED"
    assert "scheduler.py:1372" in h["detail"] and "#54028" in h["detail"]
    w = h["witness"]
    crash = witness_steps(h)[w["violated_at"]]
    assert crash["assertion"].startswith("scheduler.py:1372")
    assert crash["scheduled"] == {}
    # replayed on the reference: the same workload crashes there at the same step
    cfg = Config(max_num_batched_tokens=32, max_num_seqs=4, max_model_len=64, block_size=4,
                 num_gpu_blocks=64, long_prefill_token_threshold=2,
                 speculative_method="ngram", num_speculative_tokens=3)
    wl = Workload(config=cfg, requests=tuple(
        RequestSpec(r["id"], r["prompt_len"], r["max_tokens"], r["arrival_step"])
        for r in w["requests"]), steps=w["violated_at"])
    recs = simulate(wl)
    assert "assertion" in dict(recs[w["violated_at"] - 1].extra)
    code, out, _ = text(capsys, *argv, "--strict")
    assert code == 1
    assert "step 2: the engine crashes: scheduler.py:1372 AssertionError" in out


@pytest.mark.parametrize("threshold, why", [("4", "at least 1+k"), ("0", "is 0")])
def test_a_threshold_above_k_or_off_never_cuts_a_padded_request(capsys, threshold, why):
    code, doc, _ = config(capsys, *SMALL, "--long-prefill-token-threshold", threshold,
                          "--hazard", "spec_padding_assertion", *spec_config("ngram"))
    h = hazards(doc)["spec_padding_assertion"]
    assert code == 0 and h["verdict"] == "PROVED absent" and why in h["detail"]


def test_the_adaptive_threshold_crashes_too_with_enough_requests(capsys):
    # the floor max_num_batched_tokens // requests reaches k = 3 with 9 requests
    code, doc, _ = config(capsys, *SMALL, "--long-prefill-token-threshold", "2",
                          "--long-prefill-token-threshold-adaptive", "--hazard",
                          "spec_padding_assertion", *spec_config("ngram"))
    h = hazards(doc)["spec_padding_assertion"]
    assert h["verdict"] == "WITNESSED" and len(h["witness"]["requests"]) == 9


def test_a_budget_below_draft_slots_plus_one_plus_k_cuts_every_decode(capsys):
    # draft_model k=3: 1 draft slot, so a decode gets at most 4 - 1 = 3 tokens: 2 drafts
    tight = ("--max-model-len", "64", "--max-num-batched-tokens", "4", "--max-num-seqs", "2",
             "--block-size", "4", "--num-gpu-blocks", "64", "--no-enable-prefix-caching",
             "--no-async-scheduling", "--hazard", "spec_drafts_cut")
    code, doc, _ = config(capsys, *tight, *spec_config("draft_model", model="Qwen/Qwen3-0.6B"))
    h = hazards(doc)["spec_drafts_cut"]
    assert code == 0 and h["verdict"] == "WITNESSED"
    step = witness_steps(h)[h["witness"]["violated_at"]]
    assert step["scheduled"] == {"r0": 3} and step["spec_scheduled"] == {"r0": 2}
    code, doc, _ = config(capsys, *tight[:3], "5", *tight[4:],
                          *spec_config("draft_model", model="Qwen/Qwen3-0.6B"))
    assert hazards(doc)["spec_drafts_cut"]["verdict"] == "PROVED absent"


def test_a_budget_below_twice_the_draft_slots_plus_one_serves_one_request_per_step(capsys):
    # PARD k=8: 8 draft slots; max_num_batched_tokens 9 < 2 * 9 (trace M2 of the notes)
    pard = spec_config("draft_model", k=8, model="amd/PARD-Qwen3-0.6B", parallel_drafting=True)
    argv = ("--max-model-len", "64", "--max-num-batched-tokens", "9", "--max-num-seqs", "2",
            "--block-size", "4", "--num-gpu-blocks", "64", "--no-enable-prefix-caching",
            "--no-async-scheduling", "--hazard", "spec_one_request_per_step")
    code, doc, _ = config(capsys, *argv, *pard)
    h = hazards(doc)["spec_one_request_per_step"]
    assert code == 0 and h["verdict"] == "WITNESSED"
    step = witness_steps(h)[h["witness"]["violated_at"]]
    assert list(step["scheduled"]) == ["r0"] and "r1" in step["waiting"]
    code, doc, _ = config(capsys, *argv[:3], "18", *argv[4:], *pard)
    assert hazards(doc)["spec_one_request_per_step"]["verdict"] == "PROVED absent"


def test_without_speculative_decoding_its_hazards_are_absent(capsys):
    code, doc, _ = config(capsys, *SMALL, "--long-prefill-token-threshold", "2", "--hazard",
                          "spec_padding_assertion", "--hazard", "spec_drafts_cut", "--hazard",
                          "spec_one_request_per_step")
    assert code == 0
    assert {h["verdict"] for h in doc["hazards"]} == {"PROVED absent"}


# --- scope ------------------------------------------------------------------------------

def test_a_modelled_method_is_inside_the_model(capsys):
    code, doc, _ = config(capsys, *SMALL, *FAST, *spec_config("eagle", model=EAGLE))
    assert code == 0 and doc["outside_model"] == []
    assert "speculative decoding" in doc["scope"]
    _, out, _ = text(capsys, *SMALL, *FAST, *spec_config("eagle", model=EAGLE))
    assert "no speculative decoding" not in out and "outside the model" not in out


# --- capacity arguments count the lookahead --------------------------------------------------

# max_model_len 17 in blocks of 2 on 16 usable blocks: two requests of cdiv(16, 2) = 8 blocks
# fit without lookahead; with EAGLE's 3 lookahead slots a request asks for up to
# cdiv(min(16 + 3, 17), 2) = 9 (kv_cache_manager.py:541-544), and two no longer fit.
TWO = ("--max-model-len", "17", "--max-num-batched-tokens", "32", "--max-num-seqs", "2",
       "--block-size", "2", "--num-gpu-blocks", "17", "--concurrency", "3", "--depth", "2",
       "--no-enable-prefix-caching", "--hazard", "head_of_line", "--hazard",
       "repeated_preemption")


def replays(h, cfg):
    """The witness's workload fails the hazard's property on the reference where stated."""
    from checker.config.hazards import HAZARDS, Envelope
    from model.core.ops import CONCRETE
    from model.vllm.engine import records_to_steps
    w = h["witness"]
    wl = Workload(config=cfg, requests=tuple(
        RequestSpec(r["id"], r["prompt_len"], r["max_tokens"], r["arrival_step"])
        for r in w["requests"]), steps=w["violated_at"])
    prop = next(x for x in HAZARDS if x.name == h["hazard"]).prop(Envelope())
    steps = records_to_steps(wl, simulate(wl))
    failing = [t + 1 for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    return failing[:1] == [w["violated_at"]]


def test_lookahead_makes_two_requests_collide_where_they_fit_without_it(capsys):
    code, doc, _ = config(capsys, *TWO, "--no-async-scheduling")
    without = hazards(doc)
    assert code == 0
    assert {h["verdict"] for h in without.values()} == {"PROVED absent"}
    assert "cdiv(max_model_len - 1, block_size) = 8 blocks" in without["head_of_line"]["detail"]
    code, doc, _ = config(capsys, *TWO, "--no-async-scheduling",
                          *spec_config("eagle", model=EAGLE))
    with_spec = hazards(doc)
    hol = with_spec["head_of_line"]
    assert hol["verdict"] == "WITNESSED" and hol["witness"]["minimal"]
    # the head passes the full-sequence check (cdiv(14, 2) = 7 <= 8 free) and fails the
    # allocation with its lookahead (cdiv(min(14 + 3, 17), 2) = 9), so a 1-token request
    # behind it waits (kv_cache_manager.py:522-539 against 541-579)
    first = hol["witness"]["steps"][0]
    assert first["free_blocks"] == 8 and len(first["scheduled"]) == 1
    cfg = Config(max_num_batched_tokens=32, max_num_seqs=2, max_model_len=17, block_size=2,
                 num_gpu_blocks=17, speculative_method="eagle", num_speculative_tokens=3)
    assert replays(hol, cfg)
    assert with_spec["repeated_preemption"]["verdict"] == "HOLDS within bounds"
    assert "(9 blocks each)" in with_spec["repeated_preemption"]["detail"]


def test_async_speculative_decoding_is_searched_by_bmc(capsys):
    # the symbolic rules model speculative decoding with the AsyncScheduler too (placeholder
    # drafts, acceptance delivered a step later); the witness replays on the reference
    small = ("--max-model-len", "9", "--max-num-batched-tokens", "16", "--max-num-seqs", "2",
             "--block-size", "2", "--num-gpu-blocks", "9", "--concurrency", "3", "--depth",
             "1", "--no-enable-prefix-caching", "--hazard", "head_of_line")
    code, doc, _ = config(capsys, *small, *spec_config("eagle", k=1, model=EAGLE))
    hol = hazards(doc)["head_of_line"]
    assert doc["outside_model"] == [] and hol["verdict"] == "WITNESSED"
    assert "found by bmc" in hol["detail"]
    cfg = Config(max_num_batched_tokens=16, max_num_seqs=2, max_model_len=9, block_size=2,
                 num_gpu_blocks=9, speculative_method="eagle", num_speculative_tokens=1,
                 async_scheduling=True)
    assert replays(hol, cfg)


def test_explain_rules_shows_what_the_draft_slot_rule_prevents():
    from checker.config.rule_reasons import RULE_PROBES, _probe
    probe = next(p for p in RULE_PROBES if p.rule == "batched_tokens_gt_draft_slots")
    reason = _probe(probe.rule, "t", "u", probe, 60)
    assert reason.verdict == "WITNESSED" and "scheduler.py:661, 918" in reason.detail
    shown = reason.result.witness.shown()
    assert all(rec.scheduled == () for rec in shown)  # nothing is ever scheduled
