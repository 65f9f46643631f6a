"""No verdict outside the model's scope, and no argument whose premise the config breaks
(issue 14, items 1 and 2): each case is a config that breaks one premise or turns on one
feature the model leaves out."""

import json
from dataclasses import replace

from checker.cli.main import main
from checker.config.hazards import (
    HAZARDS,
    WITNESSED,
    Envelope,
    HazardResult,
    Witness,
    _with_prefix_caching,
    decide,
)
from checker.methods.jobs import Job, run
from checker.methods.replay import replay
from checker.methods.symbolic import Family
from checker.methods.theorems import for_engine
from checker.show.itf import read_counterexample
from model import registry
from model.sglang.config import Config as SGLangConfig
from model.vllm.config import Config
from model.vllm.deployment import MODEL_SCOPE, Deployment, serve_deployment
from model.vllm.startup import SpecDecode
from properties.manifest import custom_config, with_bounds

# A pool just above one max_model_len request: 9 usable blocks of 2 for max_model_len 16.
JUST_FITS = ("--max-model-len", "16", "--max-num-batched-tokens", "4", "--max-num-seqs", "4",
             "--block-size", "2", "--num-gpu-blocks", "10", "--concurrency", "2",
             "--depth", "4")


def config_json(capsys, *argv):
    code = main(["config", *argv, "--json"])
    out = capsys.readouterr().out
    return code, {h["hazard"]: h for h in json.loads(out)["hazards"]}, json.loads(out)


def test_lookahead_blocks_keep_a_lone_request_within_one_max_model_len_request(capsys):
    # EAGLE k=3 reserves 3 lookahead slots, but allocate_slots asks for at most
    # min(C + n + 3, max_model_len) tokens (kv_cache_manager.py:541-544): 8 blocks, which
    # the startup check guarantees (9 usable), so the argument holds with the lookahead.
    code, hazards, doc = config_json(capsys, *JUST_FITS, "--spec-method", "eagle",
                                     "--spec-model", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                                     "--spec-tokens", "3", "--no-enable-prefix-caching",
                                     "--no-async-scheduling", "--hazard", "self_preemption")
    detail = hazards["self_preemption"]["detail"]
    assert hazards["self_preemption"]["verdict"] == "PROVED absent"
    assert "cdiv(min(max_model_len - 1 + 3 lookahead, max_model_len), block_size) = 8" in detail
    assert "with speculative decoding on too" in detail
    assert code == 0


def test_without_speculative_decoding_the_same_pool_is_proved_free_of_it(capsys):
    code, hazards, _ = config_json(capsys, *JUST_FITS, "--no-enable-prefix-caching",
                                   "--no-async-scheduling", "--hazard", "self_preemption")
    assert hazards["self_preemption"]["verdict"] == "PROVED absent"
    assert code == 0


def test_plain_vllm_serve_flags_model_prefix_caching_and_async_scheduling(capsys):
    # vllm serve on a GPU runs both, and the model covers both: on a config small enough
    # for the symbolic prefix cache the hazards are searched with the cache and the
    # AsyncScheduler, and nothing is left outside.
    small = ("--max-model-len", "8", "--max-num-batched-tokens", "4", "--max-num-seqs", "4",
             "--block-size", "2", "--num-gpu-blocks", "5", "--concurrency", "2",
             "--depth", "3")
    code, hazards, doc = config_json(capsys, *small, "--hazard", "starvation",
                                     "--hazard", "unchunked_blocking")
    assert doc["outside_model"] == []
    assert hazards["unchunked_blocking"]["verdict"] == "PROVED absent"
    assert "outside the model" not in hazards["starvation"]["detail"]
    assert hazards["starvation"]["verdict"] in ("WITNESSED", "HOLDS within bounds")
    assert code == 0


def test_async_scheduling_is_searched_on_the_async_scheduler(capsys):
    code, hazards, _ = config_json(
        capsys, "--max-model-len", "16", "--max-num-batched-tokens", "4", "--max-num-seqs",
        "4", "--block-size", "2", "--num-gpu-blocks", "9", "--concurrency", "3", "--depth",
        "4", "--no-enable-prefix-caching", "--hazard", "head_of_line")
    witness = hazards["head_of_line"]["witness"]
    assert hazards["head_of_line"]["verdict"] == "WITNESSED"
    assert witness is not None
    assert code == 0


def test_a_large_pool_leaves_prefix_caching_outside_the_symbolic_model(capsys):
    # A bounded search over max_model_len 64 in blocks of 2 would carry 32-entry block
    # tables: too large for the symbolic cache, so prefix caching stays outside.
    code, hazards, doc = config_json(
        capsys, "--max-model-len", "64", "--max-num-batched-tokens", "64", "--max-num-seqs",
        "4", "--block-size", "2", "--num-gpu-blocks", "40", "--concurrency", "1", "--depth",
        "2", "--no-async-scheduling", "--hazard", "starvation", "--hazard",
        "unchunked_blocking")
    assert doc["outside_model"] == []  # the deployment's features are all modelled ...
    detail = hazards["starvation"]["detail"]
    assert hazards["starvation"]["verdict"] == "UNKNOWN"  # ... but not at this size
    assert detail.startswith("outside the model: prefix caching (the model found: ")
    assert hazards["unchunked_blocking"]["verdict"] == "PROVED absent"
    assert code == 3


def test_unmodelled_features_still_make_the_model_s_verdicts_unknown(capsys):
    code, hazards, doc = config_json(capsys, *JUST_FITS, "--kv-transfer-config", "{}",
                                     "--hazard", "starvation", "--hazard",
                                     "priority_inversion")
    assert doc["outside_model"] == ["KV connector"]
    assert hazards["starvation"]["verdict"] == "UNKNOWN"
    assert hazards["starvation"]["detail"].startswith("outside the model: ")
    assert "KV connector" in hazards["starvation"]["detail"]
    # An argument that needs a setting the config lacks holds whatever the engine turns on.
    assert hazards["priority_inversion"]["verdict"] == "PROVED absent"
    assert code == 3


def test_the_cpu_platform_runs_the_synchronous_scheduler():
    dep = serve_deployment(None, None, None, False, cpu_platform=True, pipeline_parallel=1)
    assert not dep.async_scheduling and dep.prefix_caching
    gpu = serve_deployment(None, None, None, False, cpu_platform=False, pipeline_parallel=1)
    assert gpu.async_scheduling
    ngram = serve_deployment(None, None, SpecDecode(3, "ngram"), False, False, 1)
    assert not ngram.async_scheduling  # config/vllm.py:1597-1617
    gpu_ngram = serve_deployment(None, None, SpecDecode(3, "ngram_gpu"), False, False, 1)
    assert gpu_ngram.async_scheduling  # NgramGPUTypes keep it (1563-1580)
    unpadded = SpecDecode(3, "eagle", disable_padded_drafter_batch=True)
    assert not serve_deployment(None, None, unpadded, False, False, 1).async_scheduling
    pp = serve_deployment(None, None, None, False, False, pipeline_parallel=2)
    assert not pp.async_scheduling and [f.name for f in pp.others] == ["pipeline parallelism"]


def _hazard(name):
    return next(h for h in HAZARDS if h.name == name)


TINY = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
              num_gpu_blocks=9)
ENV = Envelope(slots=3, depth=4, timeout_s=60)


# max_model_len 64 in blocks of 2: a prefix cache too large for the symbolic rules.
WIDE = Config(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64, block_size=2,
              num_gpu_blocks=40)


# max_model_len 8 in blocks of 2 on 4 usable blocks: small enough for the symbolic cache.
SMALL_CACHE = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=8, block_size=2,
                     num_gpu_blocks=5)


def test_prefix_caching_is_searched_with_the_cache_when_it_fits():
    result = decide(_hazard("starvation"), SMALL_CACHE,
                    Envelope(slots=2, depth=3, starvation_steps=2), True,
                    Deployment(prefix_caching=True))
    assert result.verdict == "WITNESSED"
    assert result.witness.workload.config.enable_prefix_caching
    assert "outside the model" not in result.detail


def test_a_cache_too_large_keeps_a_witness_that_preempts_nothing():
    dep = Deployment(prefix_caching=True)
    result = decide(_hazard("starvation"), WIDE, Envelope(slots=2, depth=3), True, dep)
    assert result.verdict == "WITNESSED"
    assert not result.witness.workload.config.enable_prefix_caching
    assert not any(rec.preempted for rec in result.witness.replayed.records)
    assert "share no prefix and none is preempted" in result.detail


def test_a_cache_too_large_turns_a_bound_into_unknown():
    hazard = _hazard("unchunked_blocking")
    off = replace(WIDE, enable_chunked_prefill=False)
    bounded = decide(hazard, off, Envelope(slots=1, depth=2), True, MODEL_SCOPE)
    assert bounded.verdict == "HOLDS within bounds"
    result = decide(hazard, off, Envelope(slots=1, depth=2), True,
                    Deployment(prefix_caching=True))
    assert result.verdict == "UNKNOWN"
    assert result.detail.startswith("outside the model: prefix caching (the model found: "
                                    "HOLDS within bounds")


def test_the_capacity_argument_still_holds_with_prefix_caching():
    ample = Config(max_num_batched_tokens=4, max_num_seqs=2, max_model_len=16, block_size=2,
                   num_gpu_blocks=40)
    result = decide(_hazard("repeated_preemption"), ample, ENV, True,
                    Deployment(prefix_caching=True))
    assert result.verdict == "PROVED absent"
    assert "with prefix caching on too:" in result.detail


def test_a_lone_prompt_over_the_budget_breaks_the_self_preemption_argument():
    # Chunked prefill off and max_num_scheduled_tokens 4 below max_model_len - 1: a lone
    # prompt of 5..15 tokens is refused every step (scheduler.py:1160-1167).
    cfg = Config(max_num_batched_tokens=16, max_num_seqs=4, max_model_len=16, block_size=2,
                 num_gpu_blocks=9, enable_chunked_prefill=False, max_num_scheduled_tokens=4)
    result = decide(_hazard("self_preemption"), cfg, Envelope(slots=1, depth=3), True)
    assert result.verdict == "WITNESSED"
    assert "lone_prompt" not in result.detail  # the text, not the name, is shown
    assert "does not apply: a lone prompt can be scheduled" in result.detail


def _job(prop, cfg, validated=True, **bounds):
    nc = with_bounds(custom_config("premise", cfg, validated=validated), **bounds)
    return Job(engine="vllm-v1", property=prop, params=(), config=nc, expected=None,
               timeout_s=120)


def test_a_scheduled_token_cap_below_the_seats_breaks_the_companion_theorem():
    # max_num_scheduled_tokens 2 is the budget; SchedulerConfig never compares it with
    # max_num_seqs 3, so two decodes exhaust it with a seat to spare.
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=3, max_model_len=16, block_size=2,
                 num_gpu_blocks=20, max_num_scheduled_tokens=2)
    theorem = registry.get("vllm-v1")
    broken = for_engine(theorem)["exhausting_decodes_fill_max_num_seqs"].broken(
        Family(base=cfg))
    assert [p.name for p in broken] == ["token_budget_ge_max_num_seqs"]
    res = run(_job("exhausting_decodes_fill_max_num_seqs", cfg, slots=2, depth=3,
                   max_prompt_len=2, max_max_tokens=3))
    assert res.verdict.verdict == "VIOLATED" and res.verdict.method == "bmc"
    assert "theorem does not apply: the token budget" in res.verdict.detail


def test_the_companion_theorem_still_proves_the_validated_default():
    res = run(_job("exhausting_decodes_fill_max_num_seqs", TINY, slots=2, depth=3))
    assert res.verdict.verdict == "PROVED" and res.verdict.method == "theorem"


def test_mixed_chunk_breaks_the_sglang_stall_theorem():
    theorems = for_engine(registry.get("sglang"))
    stall = theorems["decode_stall_ceil_l_over_c"]
    assert stall.broken(Family(base=SGLangConfig(), engine="sglang")) == ()
    mixed = Family(base=SGLangConfig(enable_mixed_chunk=True), engine="sglang")
    assert [p.name for p in stall.broken(mixed)] == ["mixed_chunk_off"]
    off = Family(base=SGLangConfig(chunked_prefill_size=-1), engine="sglang")
    assert [p.name for p in stall.broken(off)] == ["chunked_prefill_on"]


def test_prefix_caching_drops_a_witness_that_preempts():
    # A resumed request looks its own cached blocks up again (scheduler.py:960-967), so a
    # run with preemption may run otherwise with the cache on. The stored preemption-storm
    # run is such a witness.
    cex = read_counterexample("counterexamples/vllm_v1/preemption_storm__tiny_fcfs.itf.json")
    replayed = replay(cex)
    assert any(rec.preempted for rec in replayed.records[: cex.violated_at])
    witnessed = HazardResult("repeated_preemption", "t", WITNESSED, "found",
                             witness=Witness(cex.workload, replayed, cex.violated_at, True))
    cached = _with_prefix_caching(witnessed)
    assert cached.verdict == "UNKNOWN" and cached.witness is None
    assert cached.detail == ("outside the model: prefix caching (the model found: "
                             "WITNESSED: found)")
