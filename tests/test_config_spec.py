"""`batchproof config` with speculative decoding (issue 16): the settings map onto Config's
fields (one draft-slot table), the sizes per method as v0.32.0 derives them, what stays
outside the model, the rules speculative decoding adds, its hazards with witnesses run on
the reference, and capacity arguments that count the lookahead. Everything through the CLI."""

import json

import pytest

from checker.cli.main import main

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


# --- hazards speculative decoding adds, witnessed on the reference ------------------------

@pytest.mark.parametrize("threshold, why", [("4", "at least 1+k"), ("0", "is 0")])
def test_a_threshold_above_k_or_off_never_cuts_a_padded_request(capsys, threshold, why):
    code, doc, _ = config(capsys, *SMALL, "--long-prefill-token-threshold", threshold,
                          "--hazard", "spec_padding_assertion", *spec_config("ngram"))
    h = hazards(doc)["spec_padding_assertion"]
    assert code == 0 and h["verdict"] == "PROVED absent" and why in h["detail"]


def test_without_speculative_decoding_its_hazards_are_absent(capsys):
    code, doc, _ = config(capsys, *SMALL, "--long-prefill-token-threshold", "2", "--hazard",
                          "spec_padding_assertion", "--hazard", "spec_drafts_cut", "--hazard",
                          "spec_one_request_per_step")
    assert code == 0
    assert {h["verdict"] for h in doc["hazards"]} == {"PROVED absent"}
