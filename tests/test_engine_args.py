"""EngineArgs resolution (model/vllm/engine_args.py) tier by tier, and vLLM's startup rules
(model/vllm/startup.py), against engine/arg_utils.py and v1/core/kv_cache_utils.py."""

from dataclasses import replace

import pytest

from model.core.errors import InputError
from model.vllm.config import Config
from model.vllm.engine_args import (
    ORIGIN_CLAMPED,
    ORIGIN_DEFAULT,
    ORIGIN_DOUBLED,
    ORIGIN_TIER,
    ORIGIN_USER,
    EngineArgs,
    batch_defaults,
    device_named,
    device_with_memory,
    resolve,
)
from model.vllm.startup import SpecDecode, kv_rejection, spec_rejection
from model.vllm.validation import rejection

GPU_24GB = device_with_memory(22.0)


def sizes(device, **kw):
    eff = resolve(EngineArgs(**{"max_model_len": 32768, **kw}), device)
    return (eff.value("max_num_batched_tokens"), eff.value("max_num_seqs"),
            eff.get("max_num_batched_tokens").origin, eff.get("max_num_seqs").origin)


@pytest.mark.parametrize("device, usage, expected", [
    (device_named("b200"), "serve", (16384, 1024)),
    (device_named("b200"), "llm", (16384, 1024)),
    (device_named("h100"), "serve", (8192, 1024)),
    (device_named("h100"), "llm", (16384, 1024)),
    (device_named("h200"), "serve", (8192, 1024)),
    (device_named("a100-80gb"), "serve", (2048, 256)),  # the A100 exception
    (device_named("a100-80gb"), "llm", (8192, 256)),
    (device_named("l4"), "serve", (2048, 256)),
    (device_named("l4"), "llm", (8192, 256)),
    (device_named("tpu-v6e"), "serve", (1024, 256)),
    (device_named("tpu-v5e"), "llm", (1024, 256)),
    (device_named("cpu"), "serve", (2048, 128)),
    (device_named("cpu"), "llm", (4096, 256)),
    (device_with_memory(160.0), "serve", (16384, 1024)),
    (device_with_memory(159.9), "serve", (8192, 1024)),
    (device_with_memory(70.0), "serve", (8192, 1024)),
    (device_with_memory(69.9), "serve", (2048, 256)),
])
def test_each_default_tier_of_get_batch_defaults(device, usage, expected):
    tokens, seqs, t_origin, s_origin = sizes(device, usage=usage)
    assert (tokens, seqs) == expected
    assert t_origin == s_origin == ORIGIN_TIER


def test_tpu_v5p_token_count_then_caps_max_num_seqs():
    # memory tier gives 1024 seqs, the V5P entry 256 tokens; seqs are capped at the tokens
    tokens, seqs, t_origin, s_origin = sizes(device_named("tpu-v5p"))
    assert (tokens, seqs, t_origin, s_origin) == (256, 256, ORIGIN_TIER, ORIGIN_CLAMPED)


def test_cpu_defaults_scale_with_world_size():
    assert batch_defaults(device_named("cpu"), "serve", 4).tokens == 8192
    assert batch_defaults(device_named("cpu"), "serve", 4).seqs == 512


def test_a_context_without_an_entry_falls_back_to_scheduler_config_defaults():
    tokens, seqs, t_origin, _ = sizes(device_named("h100"), usage="engine")
    assert (tokens, seqs, t_origin) == (2048, 128, ORIGIN_DEFAULT)


def test_digest_cases_on_a_24gb_gpu():
    # vllm_v1_rules.md section 1.7: checked on vLLM's own function with max_model_len 32768
    assert sizes(GPU_24GB)[:2] == (2048, 256)
    assert sizes(GPU_24GB, performance_mode="throughput")[:2] == (4096, 512)
    assert sizes(GPU_24GB, performance_mode="throughput", max_num_seqs=64)[:2] == (4096, 64)
    assert sizes(GPU_24GB, enable_chunked_prefill=False)[:2] == (32768, 256)
    assert sizes(GPU_24GB, performance_mode="interactivity")[:2] == (2048, 256)


def test_throughput_doubles_only_what_the_user_did_not_set():
    tokens, seqs, t_origin, s_origin = sizes(GPU_24GB, performance_mode="throughput",
                                             max_num_batched_tokens=3000)
    assert (tokens, seqs, t_origin, s_origin) == (3000, 512, ORIGIN_USER, ORIGIN_DOUBLED)


def test_chunked_prefill_off_raises_a_default_budget_to_max_model_len():
    eff = resolve(EngineArgs(max_model_len=20000, enable_chunked_prefill=False),
                  device_named("h100"))
    tokens = eff.get("max_num_batched_tokens")
    assert (tokens.value, tokens.origin) == (20000, ORIGIN_CLAMPED)
    assert "3140-3146" in tokens.why


def test_a_user_budget_is_not_raised_even_with_chunked_prefill_off():
    tokens, *_ = sizes(device_named("h100"), enable_chunked_prefill=False,
                       max_num_batched_tokens=4096)
    assert tokens == 4096


def test_default_budget_is_capped_at_max_num_seqs_times_max_model_len():
    eff = resolve(EngineArgs(max_model_len=16, max_num_seqs=4), device_named("h100"))
    tokens = eff.get("max_num_batched_tokens")
    assert (tokens.value, tokens.origin) == (64, ORIGIN_CLAMPED)


def test_default_max_num_seqs_is_capped_at_the_budget():
    eff = resolve(EngineArgs(max_model_len=4096, max_num_batched_tokens=100),
                  device_named("h100"))
    seqs = eff.get("max_num_seqs")
    assert (seqs.value, seqs.origin) == (100, ORIGIN_CLAMPED)


def test_doubling_happens_before_the_clamps():
    # 2 * 8192 = 16384 > 1024 * 8 = 8192: doubled, then capped
    eff = resolve(EngineArgs(max_model_len=8, performance_mode="throughput"),
                  device_named("h100"))
    assert eff.value("max_num_batched_tokens") == 2048 * 8
    assert "doubled" in eff.get("max_num_batched_tokens").why


def test_block_size_defaults_by_platform_and_chunked_prefill_defaults_on():
    gpu = resolve(EngineArgs(max_model_len=64), device_named("h100"))
    cpu = resolve(EngineArgs(max_model_len=64), device_named("cpu"))
    assert (gpu.value("block_size"), cpu.value("block_size")) == (16, 128)
    assert gpu.value("enable_chunked_prefill") is True
    assert gpu.get("enable_chunked_prefill").origin == ORIGIN_DEFAULT


def test_to_config_carries_every_resolved_value():
    eff = resolve(EngineArgs(max_model_len=4096, policy="priority", num_gpu_blocks=900,
                             watermark=0.01), device_named("l4"))
    cfg = eff.to_config()
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.policy, cfg.num_gpu_blocks,
            cfg.watermark) == (2048, 256, "priority", 900, 0.01)


def test_unknown_device_names_the_known_ones():
    with pytest.raises(InputError, match="unknown device 'v100'.*h100"):
        device_named("v100")


# --- startup rules ------------------------------------------------------------------------

def test_kv_check_needs_one_max_model_len_request_besides_the_null_block():
    fits = Config(max_model_len=64, block_size=16, num_gpu_blocks=5)  # 4 needed, 4 usable
    assert kv_rejection(fits) is None
    short = Config(max_model_len=65, block_size=16, num_gpu_blocks=5)  # 5 needed
    err = kv_rejection(short)
    assert err is not None and err.rule == "kv_holds_one_max_model_len_request"
    assert "65" in str(err) and "at least 6 blocks" in str(err) and "at most 64" in str(err)


@pytest.mark.parametrize("spec, slots", [
    (SpecDecode(3, "eagle3"), 0), (SpecDecode(3, "ngram"), 0), (SpecDecode(3, "mtp"), 0),
    (SpecDecode(3, "draft_model"), 1), (SpecDecode(3, "dflash"), 3),
    (SpecDecode(3, "eagle3", parallel_drafting=True), 2),
    (SpecDecode(3, "draft_model", parallel_drafting=True), 3),
])
def test_draft_slots_follow_the_speculative_config_table(spec, slots):
    assert spec.sized(Config()).draft_slots == slots


def test_budget_must_exceed_the_draft_slots():
    # dflash is modelled: the rule is SchedulerConfig-time (validation); dspark is not, and
    # spec_rejection applies it with dspark's forced parallel drafting, k - 1 slots
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=4)
    assert rejection(SpecDecode(4, "dflash").on(cfg)).rule == "batched_tokens_gt_draft_slots"
    assert rejection(SpecDecode(4, "dflash").on(replace(cfg, max_num_batched_tokens=5))) is None
    err = spec_rejection(replace(cfg, max_num_batched_tokens=3), SpecDecode(4, "dspark"),
                         lora=False)
    assert err is not None and err.rule == "batched_tokens_gt_draft_slots"
    assert spec_rejection(cfg, SpecDecode(4, "dspark"), lora=False) is None


def test_lora_with_speculation_needs_seqs_times_tokens_plus_one():
    cfg = Config(max_num_batched_tokens=1000, max_num_seqs=256)
    assert spec_rejection(cfg, SpecDecode(3, "eagle3"), lora=False) is None
    err = spec_rejection(cfg, SpecDecode(3, "eagle3"), lora=True)
    assert err is not None and err.rule == "lora_spec_budget" and "1024" in str(err)
