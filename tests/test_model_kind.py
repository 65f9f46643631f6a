"""The served model's KV cache layout (issue 31 item 1): `--model-kind`, the layer mix and
the window (or an hf_config JSON / --hf-overrides), vLLM 0.32.0's KV startup check per kind
(hand-computed from upstream's formulas here; against vLLM's own get_kv_cache_configs in
the conformance test), the scope line, and verdicts that rest on one full-attention group.

Hand figures, upstream's formulas (v1/kv_cache_interface.py:602-607 full attention,
859-896 sliding window, 1076-1082 Mamba; groups by v1/core/kv_cache_utils.py:1362-1502):
a request at max_model_len L needs, summed over the groups, cdiv(L, bs) per full-attention
group, cdiv(min(W - 1 + in-flight tokens, L), bs) + 1 per sliding-window group and
1 + k (align mode: 2 + k) per Mamba group; the pool less the null block must hold it."""

import json
import re
from dataclasses import replace

import pytest
from test_bad_input import run

from checker.cli.main import main
from checker.config.model_kind import (
    KIND_MAMBA,
    KIND_SLIDING,
    KvGroups,
    KvSizing,
    ModelKind,
    blocks_per_request,
    estimated_max_model_len,
    kv_groups,
    kv_startup_rejection,
)
from checker.conformance.vllm_real import vllm_available, vllm_unavailable_reason
from model.core.errors import ConfigError

needs_vllm = pytest.mark.skipif(not vllm_available(), reason=f"{vllm_unavailable_reason()}")

# Gemma 3 27B's layout: 62 layers, every 6th full attention (10), 52 sliding of 1024.
GEMMA3 = ModelKind(KIND_SLIDING, sliding_window=1024, full_layers=10, sliding_layers=52)
# Every layer sliding (Mistral 7B v0.1's layout, 32 layers of 4096).
ALL_SLIDING = ModelKind(KIND_SLIDING, sliding_window=4096, full_layers=0, sliding_layers=32)
# Qwen3-Next's layout: 48 layers, every 4th full attention (12), 36 linear attention.
QWEN3_NEXT = ModelKind(KIND_MAMBA, full_layers=12, mamba_layers=36)


def sizing(**kw):
    base = dict(max_model_len=131072, block_size=16, num_gpu_blocks=20000,
                max_num_batched_tokens=8192)
    return KvSizing(**{**base, **kw})


# --- the arithmetic, by hand ---------------------------------------------------------------

def test_groups_follow_vllms_group_size_rule():
    # 10 full, 52 sliding: group size 10, so 1 + cdiv(52, 10) = 6 sliding groups.
    assert kv_groups(GEMMA3) == KvGroups(1, 6, 0)
    # 13 full, 12 sliding (gpt-oss-20b with an EAGLE layer): 13 < 1.5 * 12, size 13.
    assert kv_groups(ModelKind(KIND_SLIDING, 128, 13, 12)) == KvGroups(1, 1, 0)
    assert kv_groups(ALL_SLIDING) == KvGroups(0, 1, 0)
    # 12 full, 36 linear attention: group size 12, 1 + 3 Mamba groups.
    assert kv_groups(QWEN3_NEXT) == KvGroups(1, 0, 3)


def test_gemma3_long_context_needs_the_windows_blocks_besides_the_full_groups():
    # Async scheduling: 2 batches of 8192 in flight. A sliding group: cdiv(min(1023 +
    # 16384, 131072), 16) + 1 = 1088 + 1; the full group cdiv(131072, 16) = 8192.
    s = sizing(async_scheduling=True)
    assert blocks_per_request(GEMMA3, s) == 8192 + 6 * 1089 == 14726
    assert kv_startup_rejection(GEMMA3, sizing(async_scheduling=True,
                                               num_gpu_blocks=14727)) is None
    refused = kv_startup_rejection(GEMMA3, sizing(async_scheduling=True, num_gpu_blocks=14726))
    assert refused is not None
    text = str(refused)
    assert "needs 14726 blocks" in text and "14725 usable" in text
    assert "1 full-attention group x 8192 + 6 sliding-window groups x 1089" in text
    # vLLM's estimate: cdiv(L', 16) + 6 * 1089 <= 14725 gives L' <= 8191 * 16.
    assert "maximum model length for this pool is 131056" in text
    # Synchronous: one batch in flight, cdiv(1023 + 8192, 16) + 1 = 576 + 1.
    assert blocks_per_request(GEMMA3, sizing()) == 8192 + 6 * 577


def test_all_sliding_model_starts_on_a_pool_far_below_max_model_len():
    # cdiv(min(4095 + 2048, 131072), 16) + 1 = 384 + 1: a 386-block pool starts, where
    # one full-attention group would need cdiv(131072, 16) = 8192 blocks.
    s = sizing(max_num_batched_tokens=2048, num_gpu_blocks=386)
    assert blocks_per_request(ALL_SLIDING, s) == 385
    assert kv_startup_rejection(ALL_SLIDING, s) is None
    assert kv_startup_rejection(ALL_SLIDING, sizing(max_num_batched_tokens=2048,
                                                    num_gpu_blocks=385)) is not None


def test_mamba_state_blocks_grow_with_speculative_tokens_and_align_mode():
    s = sizing(max_model_len=32768, num_speculative_tokens=3)
    # 1 full group of cdiv(32768, 16) = 2048, 3 Mamba groups of 1 + 3.
    assert blocks_per_request(QWEN3_NEXT, s) == 2048 + 3 * 4
    # Align mode (prefix caching on): 2 + k each.
    aligned = sizing(max_model_len=32768, num_speculative_tokens=3, mamba_mode="align")
    assert blocks_per_request(QWEN3_NEXT, aligned) == 2048 + 3 * 5
    assert blocks_per_request(QWEN3_NEXT, sizing(max_model_len=32768)) == 2048 + 3


def test_multi_module_mtp_retains_extra_window_tokens():
    # num_prefill_lookahead_tokens = k for multi-module MTP: k - 1 = 2 tokens retained.
    s = sizing(max_num_batched_tokens=16, block_size=16, num_speculative_tokens=3,
               multi_module_mtp=True)
    kind = ModelKind(KIND_SLIDING, sliding_window=17, full_layers=0, sliding_layers=4)
    # cdiv(16 + 2 + 16, 16) + 1 = 3 + 1 (without the retained tokens: cdiv(32, 16) + 1).
    assert blocks_per_request(kind, s) == 4
    assert blocks_per_request(kind, sizing(max_num_batched_tokens=16)) == 3


def test_without_the_hybrid_manager_sliding_layers_are_full_and_mamba_cannot_start():
    off = ModelKind(KIND_SLIDING, 1024, 10, 52, hybrid_manager=False)
    assert off.one_full_group and kv_groups(off) == KvGroups(1, 0, 0)
    with pytest.raises(ConfigError, match="Failed to promote"):
        kv_groups(ModelKind(KIND_MAMBA, full_layers=12, mamba_layers=36, hybrid_manager=False))


def test_estimate_is_the_longest_length_that_fits():
    s = sizing(async_scheduling=True, num_gpu_blocks=14726)
    best = estimated_max_model_len(GEMMA3, s)
    assert blocks_per_request(GEMMA3, s, best) <= 14725 < blocks_per_request(GEMMA3, s, best + 1)


# --- the commands ------------------------------------------------------------------------

LONG = ("config", "--max-model-len", "131072", "--max-num-batched-tokens", "2048",
        "--max-num-seqs", "16", "--block-size", "16", "--device", "cpu")
ONLY = ("--hazard", "priority_inversion")


def test_config_accepts_a_long_context_sliding_window_server_vllm_starts(capsys):
    code, out, err = run(capsys, *LONG, "--num-gpu-blocks", "386", *ONLY)
    assert code == 2 and "needs 8192 blocks" in err  # one full-attention group: refused
    assert "this assumes one full-attention KV cache group" in err
    code, out, err = run(capsys, *LONG, "--num-gpu-blocks", "386", "--model-kind",
                         "sliding-window", "--sliding-window", "4096",
                         "--sliding-window-layers", "32", "--full-attention-layers", "0", *ONLY)
    assert code == 0, err
    assert "validation: valid" in out
    assert "kv cache: model kind sliding-window (window 4096, 32 sliding-window layers)" in out
    code, out, err = run(capsys, *LONG, "--num-gpu-blocks", "385", "--model-kind",
                         "sliding-window", "--sliding-window", "4096",
                         "--sliding-window-layers", "32", "--full-attention-layers", "0", *ONLY)
    assert code == 2 and "needs 385 blocks" in err and "384 usable" in err


GEMMA_JSON = {"architectures": ["Gemma3ForConditionalGeneration"],
              "text_config": {"num_hidden_layers": 62, "sliding_window": 1024,
                              "sliding_window_pattern": 6}}


def test_config_refuses_a_gemma3_pool_the_one_group_check_accepted(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA_JSON))
    base = ("config", "--max-model-len", "131072", "--device", "h100", "--block-size", "16",
            "--num-gpu-blocks", "14726", *ONLY)
    code, out, err = run(capsys, *base)
    assert code == 0, err  # cdiv(131072, 16) = 8192 blocks fit
    code, out, err = run(capsys, *base, "--hf-config", str(path))
    assert code == 2
    assert "needs 14726 blocks" in err and "131056" in err, err
    code, out, err = run(capsys, *base[:-4], "--num-gpu-blocks", "14727", *ONLY,
                         "--hf-config", str(path), "--json")
    assert code == 0, err  # valid; priority_inversion is PROVED (fcfs) whatever the layout
    doc = json.loads(out)
    assert doc["model_kind"]["full_attention_layers"] == 10
    assert doc["model_kind"]["sliding_window_layers"] == 52
    assert doc["valid"] and any("sliding-window KV cache groups" in f
                                for f in doc["outside_model"])


SPEC_POOL = ("config", "--max-model-len", "64", "--max-num-batched-tokens", "64",
             "--max-num-seqs", "2", "--block-size", "16", "--num-gpu-blocks", "64",
             "--device", "h100", "--speculative-config",
             '{"method": "ngram", "num_speculative_tokens": 3}',
             "--hazard", "self_preemption")


def test_self_preemption_is_proved_absent_for_one_full_attention_group(capsys):
    code, out, err = run(capsys, *SPEC_POOL)
    assert "[PROVED absent] self_preemption" in out, out
    assert "premise: one full-attention KV cache group (the model kind was not stated" in out
    code, out, err = run(capsys, *SPEC_POOL, "--model-kind", "full")
    assert "[PROVED absent] self_preemption" in out
    assert "premise: one full-attention KV cache group (--model-kind full)" in out


# Deep, not broad (a reference search that runs to its 40 s limit on a loaded machine):
# the slow suite's. Its fast siblings: the test above (the same config, one group) and
# tests/test_mamba_align.py's witness at the minimum.
@pytest.mark.slow
def test_self_preemption_is_not_proved_for_a_hybrid_mamba_model_with_spec_decoding(capsys):
    code, out, err = run(capsys, *SPEC_POOL, "--model-kind", "hybrid-mamba",
                         "--full-attention-layers", "4", "--mamba-layers", "12")
    # prefix caching on (vllm serve's default): Mamba's align mode, which the reference runs;
    # the mode-"none" count (1 + k state blocks) proves nothing there, the reference
    # explorer searches it (tests/test_mamba_align.py has its witness at the minimum)
    # (within its bounds, or UNKNOWN when its time limit ends the search on a loaded machine)
    assert "[PROVED absent] self_preemption" not in out
    assert re.search(r"\[(HOLDS within bounds|UNKNOWN)\] self_preemption", out), out
    assert "searched by the reference explorer" in out
    assert code in (0, 3)


def test_hybrid_mamba_startup_counts_the_state_blocks(capsys):
    # 1 full group of cdiv(64, 16) = 4, 3 Mamba groups of 2 + 3 (prefix caching on:
    # align mode): 19 blocks, 20 with the null block.
    # the startup count and its warning come before the hazard's search, which this test
    # does not read: 2 s for it, not the default 40 (its result: the test above)
    base = [*SPEC_POOL[:9], "--num-gpu-blocks", "19", *SPEC_POOL[11:], "--model-kind",
            "hybrid-mamba", "--full-attention-layers", "4", "--mamba-layers", "12",
            "--timeout", "2"]
    code, out, err = run(capsys, *base)
    assert code == 2 and "needs 19 blocks" in err and "3 Mamba groups x 5" in err, err
    base[base.index("19")] = "20"
    code, out, err = run(capsys, *base)
    assert code != 2, err
    assert "Mamba2 mixer" in out  # one checkpoint block more would not fit


SWA_CHECK = ("check", "--property", "never_finishes", "--max-num-seqs", "2",
             "--max-model-len", "64", "--max-num-batched-tokens", "16", "--block-size", "4",
             "--model-kind", "sliding-window", "--sliding-window", "6",
             "--sliding-window-layers", "8", "--full-attention-layers", "2",
             "--no-async-scheduling", "--method", "bmc", "--depth", "3", "--requests", "2")


def test_check_runs_the_kinds_groups_and_names_them(capsys):
    # 2 full-attention and 8 sliding-window layers: groups of 2, so 1 full-attention and 4
    # sliding-window groups; a request at 64 tokens needs 16 + 4 x (cdiv(min(5 + 16, 64),
    # 4) + 1 = 7) = 44 blocks, 45 with the null block (vLLM's startup check per group; one
    # batch in flight without async scheduling)
    code, out, err = run(capsys, *SWA_CHECK, "--num-gpu-blocks", "45",
                         "--no-enable-prefix-caching")
    assert code == 0, err
    assert re.search(r"never_finishes +custom +HOLDS\(3\) +- +bmc", out), out
    assert ("KV cache groups 1 full-attention, 4 sliding-window, each with its own block "
            "accounting") in out
    code, out, err = run(capsys, *SWA_CHECK, "--num-gpu-blocks", "44",
                         "--no-enable-prefix-caching")
    assert code == 2 and "needs 44 blocks" in err and "sliding_window(6) 7" in err, err


def test_prefix_caching_beside_groups_and_other_commands_are_refused_in_one_line(capsys):
    code, out, err = run(capsys, *SWA_CHECK, "--num-gpu-blocks", "45")  # vllm serve: on
    assert code == 2 and "prefix caching with KV cache groups" in err
    assert "--no-enable-prefix-caching" in err and err.count("\n") == 1
    code, out, err = run(capsys, "worst", "--metric", "preemptions", "--max-num-seqs", "2",
                         "--model-kind", "hybrid-mamba", "--full-attention-layers", "1",
                         "--mamba-layers", "3")
    assert code == 2 and "not modelled by worst" in err and "check and simulate" in err


def test_simulate_counts_the_mamba_state_blocks(capsys):
    # seed_group_a.json: 10 one-token prompts at step 1, pool 64 (63 usable); 1 full and 3
    # Mamba groups hold 1 + 3 blocks per request: 23 free after step 1, 53 with one group
    code, out, err = run(capsys, "simulate", "examples/seed_group_a.json", "--model-kind",
                         "hybrid-mamba", "--full-attention-layers", "1", "--mamba-layers", "3")
    assert code == 0, err
    first = next(line for line in out.splitlines() if line.lstrip().startswith("1 "))
    assert re.search(r" 23 +d0 d1 d2", first), first  # free blocks, then running
    assert "KV cache groups 1 full-attention, 3 Mamba" in out
    code, out, err = run(capsys, "simulate", "examples/seed_group_a.json")
    first = next(line for line in out.splitlines() if line.lstrip().startswith("1 "))
    assert re.search(r" 53 +d0 d1 d2", first), first


def test_simulate_says_which_layout_its_run_assumes(capsys):
    code, out, err = run(capsys, "simulate", "examples/seed_group_a.json")
    assert code == 0, err
    assert "kv cache: model kind not stated: the model has one full-attention KV cache group" in out
    code, out, err = run(capsys, "simulate", "examples/seed_group_a.json", "--model-kind", "full")
    assert "kv cache: model kind full: one full-attention KV cache group, as the model has" in out


@pytest.mark.parametrize(("argv", "needle"), [
    (("--model-kind", "sliding-window", "--sliding-window-layers", "4"), "--sliding-window N"),
    (("--model-kind", "sliding-window", "--sliding-window", "64"), "--sliding-window-layers N"),
    (("--model-kind", "hybrid-mamba", "--full-attention-layers", "2"), "--mamba-layers N"),
    (("--mamba-layers", "4",), "add --model-kind"),
    (("--model-kind", "full", "--mamba-layers", "4"), "only full-attention layers"),
    (("--hf-config", "/nonexistent/config.json"), "no such file"),
    (("--hf-overrides", "{not json"), "not a JSON object"),
    (("--hf-overrides", '{"sliding_window": 4096, "num_hidden_layers": 32}'),
     "no layer pattern batchproof knows"),
])
def test_bad_layout_input_is_one_line_and_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *LONG, "--num-gpu-blocks", "9000", *ONLY, *argv)
    assert code == 2 and needle in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_layer_count_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([*LONG, "--num-gpu-blocks", "9000", "--mamba-layers", "-1"])
    assert exc.value.code == 2
    assert "--mamba-layers '-1' must be an integer in 0..1000000" in capsys.readouterr().err


@pytest.mark.parametrize(("doc", "kind", "full", "sliding", "mamba"), [
    (GEMMA_JSON, "sliding-window", 10, 52, 0),
    ({"num_hidden_layers": 32, "attn_layer_period": 8, "attn_layer_offset": 4},
     "hybrid-mamba", 4, 0, 28),  # Jamba
    ({"num_hidden_layers": 48, "full_attention_interval": 4}, "hybrid-mamba", 12, 0, 36),
    ({"layer_types": ["sliding_attention", "full_attention"] * 12, "sliding_window": 128},
     "sliding-window", 12, 12, 0),  # gpt-oss
    ({"num_hidden_layers": 28, "sliding_window": 4096, "use_sliding_window": False},
     "full", 28, 0, 0),  # Qwen2: the window is off
    ({"model_type": "gemma2", "num_hidden_layers": 42, "sliding_window": 4096},
     "sliding-window", 21, 21, 0),  # transformers' default: alternating, sliding first
    ({"model_type": "mistral", "num_hidden_layers": 32, "sliding_window": 4096},
     "sliding-window", 0, 32, 0),
])
def test_hf_config_layouts(capsys, tmp_path, doc, kind, full, sliding, mamba):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, *LONG, "--num-gpu-blocks", "90000", *ONLY, "--json",
                         "--hf-config", str(path))
    assert code in (0, 3), err
    got = json.loads(out)["model_kind"]
    assert (got["kind"], got["full_attention_layers"], got["sliding_window_layers"],
            got["mamba_layers"]) == (kind, full, sliding, mamba)


def test_hf_overrides_and_yaml_keys_give_the_layout(capsys, tmp_path):
    code, out, err = run(capsys, *LONG, "--num-gpu-blocks", "386", *ONLY, "--hf-overrides",
                         '{"sliding_window": 4096, "num_hidden_layers": 32, '
                         '"model_type": "mistral"}')
    assert code == 0, err
    assert "model kind sliding-window (window 4096, 32 sliding-window layers" in out
    ignored = [line for line in out.splitlines() if line.startswith("ignored vLLM flags")]
    assert not any("--hf-overrides" in line for line in ignored)  # read by the KV check
    yaml = tmp_path / "serve.yaml"
    yaml.write_text("max-model-len: 131072\nmax-num-batched-tokens: 2048\nmax-num-seqs: 16\n"
                    "block-size: 16\nnum-gpu-blocks-override: 386\nmodel-kind: sliding-window\n"
                    "sliding-window: 4096\nsliding-window-layers: 32\n"
                    "full-attention-layers: 0\n")
    code, out, err = run(capsys, "config", "--config", str(yaml), "--device", "cpu", *ONLY)
    assert code == 0, err
    assert "model kind sliding-window" in out


def test_disable_hybrid_manager_makes_the_sliding_model_one_full_group(capsys):
    argv = (*LONG, "--num-gpu-blocks", "9000", "--model-kind", "sliding-window",
            "--sliding-window", "4096", "--sliding-window-layers", "20",
            "--full-attention-layers", "4", *ONLY)
    code, out, err = run(capsys, *argv, "--disable-hybrid-kv-cache-manager")
    assert code == 0, err  # cdiv(131072, 16) = 8192 <= 8999, and the model covers it
    assert "as the model has" in out
    code, out, err = run(capsys, *argv)
    # With the manager: 8192 + 5 * (cdiv(4095 + 2048, 16) + 1) = 8192 + 5 * 385.
    assert code == 2 and "needs 10117 blocks" in err, err


# --- against vLLM's own get_kv_cache_configs ----------------------------------------------

def _vllm_accepts(kind: ModelKind, s: KvSizing) -> tuple[bool, str]:
    """Build the layers' specs, run vLLM's get_kv_cache_configs with the pool as
    num_gpu_blocks_override; (started, vLLM's message)."""
    import torch
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec

    from checker.conformance.vllm_real import _vllm_config
    from model.vllm.config import Config

    vc = _vllm_config(Config(max_num_batched_tokens=s.max_num_batched_tokens, max_num_seqs=1,
                             max_model_len=s.max_model_len, block_size=s.block_size,
                             num_gpu_blocks=s.num_gpu_blocks))
    vc.cache_config.kv_cache_layout = "LBHNC"  # the engine core resolves it (uniform pages)
    vc.cache_config.num_gpu_blocks_override = s.num_gpu_blocks
    vc.cache_config.mamba_cache_mode = s.mamba_mode
    vc.scheduler_config.async_scheduling = s.async_scheduling
    vc.scheduler_config.disable_hybrid_kv_cache_manager = not kind.hybrid_manager
    attn = dict(block_size=s.block_size, num_kv_heads=1, head_size=8, dtype=torch.float16)
    full = FullAttentionSpec(**attn)
    specs = {}
    for _ in range(kind.full_layers or 0):
        specs[f"model.layers.{len(specs)}.attn"] = full
    for _ in range(kind.sliding_layers or 0):
        specs[f"model.layers.{len(specs)}.attn"] = SlidingWindowSpec(
            **attn, sliding_window=kind.sliding_window)
    for _ in range(kind.mamba_layers or 0):
        specs[f"model.layers.{len(specs)}.mixer"] = MambaSpec(
            block_size=s.max_model_len, shapes=((4,),), dtypes=(torch.float16,),
            page_size_padded=full.page_size_bytes, mamba_cache_mode=s.mamba_mode,
            num_speculative_blocks=s.num_speculative_tokens)
    try:
        get_kv_cache_configs(vc, [specs], [10**12])
    except ValueError as exc:
        return False, str(exc)
    return True, ""


CASES = [
    (ModelKind(KIND_SLIDING, 32, 2, 10), dict()),
    (ModelKind(KIND_SLIDING, 32, 2, 10), dict(async_scheduling=True)),
    (ModelKind(KIND_SLIDING, 100, 0, 4), dict()),
    (ModelKind(KIND_SLIDING, 7, 13, 12), dict(max_model_len=300)),
    (ModelKind(KIND_SLIDING, 1000, 1, 5), dict()),  # the window longer than max_model_len
    (ModelKind(KIND_MAMBA, full_layers=2, mamba_layers=6), dict(num_speculative_tokens=2)),
    (ModelKind(KIND_MAMBA, full_layers=3, mamba_layers=4), dict(num_speculative_tokens=1,
                                                               mamba_mode="align")),
    (ModelKind(KIND_MAMBA, full_layers=0, mamba_layers=5), dict()),
    (ModelKind(KIND_SLIDING, 32, 2, 10, hybrid_manager=False), dict()),  # one full group
]


@needs_vllm
@pytest.mark.conformance
@pytest.mark.parametrize(("kind", "extra"), CASES)
def test_startup_rule_agrees_with_vllms_get_kv_cache_configs(kind, extra):
    base = KvSizing(**{"max_model_len": 512, "block_size": 16, "num_gpu_blocks": 2,
                       "max_num_batched_tokens": 64, **extra})
    need = blocks_per_request(kind, base)
    for pool in (need, need + 1, need + 7):
        s = replace(base, num_gpu_blocks=pool)
        started, message = _vllm_accepts(kind, s)
        ours = kv_startup_rejection(kind, s)
        assert started == (ours is None), (kind, s, message, ours)
        if not started:
            estimate = re.search(r"estimated maximum model length is (\d+)", message)
            assert estimate is None or int(estimate.group(1)) == estimated_max_model_len(
                kind, s), message


@needs_vllm
@pytest.mark.conformance
def test_vllm_cannot_start_mamba_layers_without_the_hybrid_manager():
    kind = ModelKind(KIND_MAMBA, full_layers=2, mamba_layers=6, hybrid_manager=False)
    started, message = _vllm_accepts(kind, KvSizing(max_model_len=512, block_size=16,
                                                    num_gpu_blocks=1000,
                                                    max_num_batched_tokens=64))
    assert not started and "Failed to promote" in message
    with pytest.raises(ConfigError, match="Failed to promote"):
        kv_groups(kind)


# A model whose every layer slides (window 2) with EAGLE, k = 2: vLLM's startup check
# counts the window's admission cap, cdiv(min(2 - 1 + 4, 20), 1) + 1 = 6 blocks, and 6
# usable blocks start. A lone prompt of 8 takes 4 tokens + 2 lookahead slots (6 blocks);
# next step the window frees 3 blocks (4 - 2 + 1 skipped tokens) but the table must grow
# to 4 + 4 + 2 = 10 entries, 4 new blocks for 3 free: it preempts itself, and again after
# every re-admission (kv_cache_interface.py:859-885 leaves out the lookahead slots that
# allocate_slots reserves, kv_cache_manager.py:541-571).
SWA_EAGLE = ("config", "--max-model-len", "20", "--max-num-batched-tokens", "4",
             "--max-num-seqs", "1", "--block-size", "1", "--speculative-config",
             '{"method": "eagle", "model": "x/eagle", "num_speculative_tokens": 2}',
             "--model-kind", "sliding-window", "--sliding-window", "2",
             "--sliding-window-layers", "1", "--full-attention-layers", "0",
             "--no-enable-prefix-caching", "--no-async-scheduling",
             "--hazard", "self_preemption")


def test_config_witnesses_self_preemption_of_a_sliding_window_model_at_vllms_minimum(capsys):
    code, out, err = run(capsys, *SWA_EAGLE, "--num-gpu-blocks", "6")
    assert code == 2 and "needs 6 blocks" in err  # below vLLM's startup check
    code, out, err = run(capsys, *SWA_EAGLE, "--num-gpu-blocks", "7")
    assert code == 0, err
    assert "[WITNESSED] self_preemption" in out
    assert "r0: prompt_len=8 max_tokens=1 arrival_step=1" in out
    assert re.search(r"r0 +\+4 +! +\^4", out), out
    # a pool that holds the longest table (20 blocks) rules it out
    code, out, err = run(capsys, *SWA_EAGLE, "--num-gpu-blocks", "21")
    assert "[PROVED absent] self_preemption" in out and "over its KV cache groups" in out


def test_config_proves_a_hybrid_mamba_pool_at_vllms_minimum_free_of_self_preemption(capsys):
    # mode "none" (prefix caching off): a lone request holds cdiv(64, 16) = 4 blocks of the
    # full-attention group and 1 + 3 in each of the 3 Mamba groups, 16 in all: the startup
    # minimum (17 with the null block) holds it
    code, out, err = run(capsys, *SPEC_POOL[:9], "--num-gpu-blocks", "17", *SPEC_POOL[11:],
                         "--model-kind", "hybrid-mamba", "--full-attention-layers", "4",
                         "--mamba-layers", "12", "--no-enable-prefix-caching")
    assert code == 0, err
    assert "[PROVED absent] self_preemption" in out
    assert "holds at most 16 blocks over its KV cache groups" in out


@needs_vllm
@pytest.mark.conformance
def test_the_sliding_window_livelock_is_the_real_schedulers():
    from checker.conformance.vllm_real import run_real_vllm
    from model.core.types import RequestSpec, Workload
    from model.vllm.config import Config, KvGroup
    from model.vllm.reference import simulate

    cfg = Config(max_num_batched_tokens=4, max_num_seqs=1, max_model_len=20, block_size=1,
                 num_gpu_blocks=7, speculative_method="eagle", num_speculative_tokens=2,
                 kv_cache_groups=(KvGroup("sliding_window", 2),))
    w = Workload(cfg, (RequestSpec("r0", 8, 1, 1),), steps=6)
    real = run_real_vllm(w)
    assert real == simulate(w)
    assert [r.preempted for r in real] == [(), ("r0",)] * 3


def test_a_property_stated_over_one_groups_blocks_is_unknown_with_groups(capsys):
    # no_spurious_preemption's "need" is cdiv(tokens, block_size), one table's: with Mamba
    # state blocks the array explorer found it "violated" at step 2 on tiny_fcfs + one
    # Mamba group, a preemption the engine makes for the state blocks the statement omits.
    code, out, err = run(capsys, *SWA_CHECK, "--num-gpu-blocks", "45",
                         "--no-enable-prefix-caching", "--property", "no_spurious_preemption")
    assert code == 3, err
    assert re.search(r"no_spurious_preemption +custom +UNKNOWN", out), out
    assert re.search(r"never_finishes +custom +HOLDS\(3\)", out), out
    assert "counts a request's blocks as one full-attention table's" in out
    code, out, err = run(capsys, "check", "--property", "no_spurious_preemption",
                         *SWA_CHECK[3:SWA_CHECK.index("--model-kind")], "--no-async-scheduling",
                         "--method", "bmc", "--depth", "3", "--requests", "2",
                         "--num-gpu-blocks", "45", "--no-enable-prefix-caching")
    assert code == 0 and re.search(r"no_spurious_preemption +custom +(PROVED|HOLDS)", out), out


def test_a_job_run_alone_is_unknown_outside_its_statement_too():
    # hazards and sweeps call jobs.run directly, with method bmc: the same UNKNOWN as check
    from checker.methods.jobs import Job, run
    from model.vllm.config import KvGroup
    from properties import manifest

    nc = manifest.load().configs["tiny_fcfs"]
    nc = replace(nc, config=replace(nc.config, kv_cache_groups=(KvGroup("full"),
                                                                  KvGroup("mamba"))))
    job = Job("vllm-v1", "no_spurious_preemption", (), nc, None, 60, method="bmc")
    v = run(job).verdict
    assert v.verdict == "UNKNOWN" and "outside the property" in v.detail, v


def test_config_does_not_witness_head_of_line_by_one_group_s_count_on_a_hybrid_model(capsys):
    # "Fits" in head_of_line_blocking is cdiv(tokens, block_size) of one full-attention
    # table; with 3 Mamba groups a request needs 3 more blocks, so a witness by that count
    # may show a request that does not fit: UNKNOWN with the reason, not WITNESSED.
    line = ("config", "--max-model-len", "64", "--max-num-batched-tokens", "32",
            "--max-num-seqs", "2", "--block-size", "16", "--num-gpu-blocks", "12",
            "--device", "h100", "--no-enable-prefix-caching", "--hazard", "head_of_line")
    code, out, err = run(capsys, *line, "--model-kind", "hybrid-mamba",
                         "--full-attention-layers", "1", "--mamba-layers", "3")
    assert "[UNKNOWN] head_of_line" in out, out
    assert "outside the property: head_of_line_blocking counts a request's blocks" in out
    assert code == 3
    # One full-attention group on a pool that two requests outgrow: searched and witnessed.
    small = [a if a != "12" else "6" for a in line]
    code, out, err = run(capsys, *small, "--model-kind", "full")
    assert "[WITNESSED] head_of_line" in out, out
