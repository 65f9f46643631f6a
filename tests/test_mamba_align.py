"""Mamba's align mode (vLLM 0.32.0's mamba_cache_mode "align", which prefix caching turns on
for a Mamba model, model_executor/models/config.py:685-701) on the REAL Scheduler, at the
smallest pool vLLM's startup check accepts: cdiv(max_model_len, block_size) per
full-attention group plus 2 + k state blocks per Mamba group (kv_cache_interface.py:
1076-1082), plus the null block.

What decides it (lines relative to vllm/v1/core/): in align mode a Mamba table is indexed by
position over the main model's tokens, the scheduled drafts included (kv_cache_manager.py:
541-544; single_type_kv_cache_manager.py:1711-1728: cdiv(tokens, block_size) + k entries),
and the state block of two steps back is freed only once the *processed* tokens (in-flight
ones excluded, kv_cache_manager.py:546-558) pass it (single_type_kv_cache_manager.py:
1613-1641, the index set at 1817-1830). Under the AsyncScheduler the processed tokens lag
one batch, so right after a prompt's last chunk a request still holds the old state: 3 + k
state blocks where the startup check counted 2 + k. The decode step then cannot allocate,
the request preempts itself (sched/scheduler.py:777-848) with its sampled token still in
flight (dropped as stale, 1597-1607), is re-admitted from its cached first block, and the
cycle repeats with no token ever delivered: a livelock at a pool vLLM starts. Without
async scheduling rejected drafts leave the same gap (processed tokens advance by one while
the table advanced by 1 + k), so a lone request preempts itself again and again, but each
round delivers tokens and it finishes.

The reference runs align mode (model/vllm/align_cache.py) and replays these runs step by
step, record for record (the conformance tests below compare them with the real
Scheduler; checker/conformance modes hybrid-mamba-align, hybrid-mamba-align-spec,
hybrid-mamba-align-async-spec run 1000 workloads each).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from checker.conformance.vllm_real import vllm_available, vllm_unavailable_reason

needs_vllm = pytest.mark.skipif(not vllm_available(), reason=f"{vllm_unavailable_reason()}")


def _witness(num_gpu_blocks: int, async_scheduling: bool = True):
    from model.core.types import RequestSpec, Workload
    from model.vllm.config import Config, KvGroup

    # cdiv(12, 4) = 3 full-attention blocks + 2 + 1 state blocks = 6 usable: 7 with the null
    # block is vLLM's startup minimum.
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=1, max_model_len=12, block_size=4,
                 num_gpu_blocks=num_gpu_blocks, enable_prefix_caching=True,
                 async_scheduling=async_scheduling, speculative_method="eagle",
                 num_speculative_tokens=1,
                 kv_cache_groups=(KvGroup("full"), KvGroup("mamba")))
    return Workload(cfg, (RequestSpec("r0", 8, 4, 1),), steps=12)


def test_the_witness_pool_is_vllms_startup_minimum_in_align_mode():
    from checker.config.model_kind import KIND_MAMBA, KvSizing, ModelKind, blocks_per_request

    w = _witness(7)
    sizing = KvSizing(max_model_len=12, block_size=4, num_gpu_blocks=7,
                      max_num_batched_tokens=4, num_speculative_tokens=1, mamba_mode="align")
    need = blocks_per_request(ModelKind(KIND_MAMBA, full_layers=1, mamba_layers=1), sizing)
    assert need == 3 + 2 + 1 == w.config.num_gpu_blocks - 1
    sizing_none = replace(sizing, mamba_mode="none")
    assert blocks_per_request(ModelKind(KIND_MAMBA, full_layers=1, mamba_layers=1),
                              sizing_none) == need - 1


@needs_vllm
@pytest.mark.conformance
def test_align_mode_livelocks_a_lone_request_at_vllms_minimum_under_async():
    from checker.conformance.vllm_real import run_real_vllm

    real = run_real_vllm(_witness(7))
    # prompt 8 in two chunks of 4 (steps 1-2); the decode step preempts it, re-admission
    # recomputes from its cached first block, and so on: never a finish
    assert [r.step for r in real if r.preempted] == [3, 5, 7, 9, 11]
    assert not any(r.finished for r in real)
    assert [dict(r.extra)["group_blocks"].get("r0") for r in real[:2]] == [(2, 2), (3, 3)]
    assert all(r.num_computed_tokens == (("r0", 8),) for r in real[3::2])  # no progress


def test_the_reference_replays_the_livelock_step_by_step():
    from model.vllm.reference import simulate

    ref = simulate(_witness(7))
    assert [r.step for r in ref if r.preempted] == [3, 5, 7, 9, 11]
    assert not any(r.finished for r in ref)
    assert [dict(r.extra)["group_blocks"].get("r0") for r in ref[:2]] == [(2, 2), (3, 3)]
    assert all(r.num_computed_tokens == (("r0", 8),) for r in ref[3::2])
    # each re-admission hits the cached first block (4 tokens: EAGLE drops the second)
    assert [dict(r.extra)["prefix_hits"] for r in ref[3::2]] == [{"r0": 4}] * 5
    # the decode step cannot allocate (the old state is not freed yet: its token is in
    # flight), so the request preempts itself and gives back all 6 usable blocks
    assert ref[2].free_blocks == 6 and ref[2].preempted == ("r0",)


def test_the_reference_controls_finish_with_one_block_more_or_synchronously():
    from model.vllm.reference import simulate

    bigger = simulate(_witness(8))
    assert not any(r.preempted for r in bigger)
    assert [r.step for r in bigger if r.finished] == [6]
    sync = simulate(_witness(7, async_scheduling=False))
    assert [r.step for r in sync if r.finished] == [5]


@needs_vllm
@pytest.mark.conformance
def test_the_reference_agrees_with_the_real_scheduler_on_the_witness_and_controls():
    from checker.conformance.compare import compare

    for w in (_witness(7), _witness(8), _witness(7, async_scheduling=False)):
        assert compare(w) is None, w.config


@needs_vllm
@pytest.mark.conformance
@pytest.mark.parametrize("mode", ["hybrid-mamba-align", "hybrid-mamba-align-spec",
                                  "hybrid-mamba-align-async-spec"])
def test_align_modes_agree_with_the_real_scheduler_on_a_few_workloads(mode):
    from checker.conformance.compare import compare
    from checker.conformance.modes import MODES

    for seed in range(8):
        w = MODES[mode].generate(seed, 30)
        assert w.config.enable_prefix_caching and w.config.hybrid_kv
        assert compare(w) is None, (mode, seed)


def test_align_mode_workloads_are_valid_and_seeded():
    from checker.conformance.modes import MODES
    from model.vllm.config import GROUP_MAMBA

    for mode in ("hybrid-mamba-align", "hybrid-mamba-align-spec",
                 "hybrid-mamba-align-async-spec"):
        ws = [MODES[mode].generate(s, 30) for s in range(20)]
        assert ws[3] == MODES[mode].generate(3, 30)
        for w in ws:
            kinds = {g.kind for g in w.config.kv_cache_groups}
            assert GROUP_MAMBA in kinds and w.config.enable_prefix_caching
            assert w.config.async_scheduling == mode.endswith("async-spec")
        assert any(r.prefix_group for w in ws for r in w.requests)


@needs_vllm
@pytest.mark.conformance
def test_one_block_more_or_synchronous_scheduling_finishes():
    from checker.conformance.vllm_real import run_real_vllm

    bigger = run_real_vllm(_witness(8))
    assert not any(r.preempted for r in bigger)
    assert [r.step for r in bigger if r.finished] == [6]
    sync = run_real_vllm(_witness(7, async_scheduling=False))
    assert any(r.finished for r in sync)


def _config_line(num_gpu_blocks: int) -> list[str]:
    """`batchproof config` on the witness's serve line (1 full + 1 Mamba layer, EAGLE k=1,
    vllm serve's defaults: prefix caching, so align mode, and async scheduling)."""
    return ["config", "--max-model-len", "12", "--max-num-batched-tokens", "4",
            "--max-num-seqs", "1", "--block-size", "4", "--num-gpu-blocks",
            str(num_gpu_blocks), "--device", "h100", "--speculative-config",
            '{"method": "eagle", "model": "x/eagle", "num_speculative_tokens": 1}',
            "--model-kind", "hybrid-mamba", "--mamba-layers", "1",
            "--full-attention-layers", "1", "--hazard", "self_preemption"]


def test_config_witnesses_self_preemption_in_align_mode_on_the_reference(capsys):
    from checker.cli.main import main

    code = main(_config_line(7))
    out = capsys.readouterr().out
    # vllm serve's defaults on a GPU: prefix caching (so align mode) and async scheduling
    assert "enable_prefix_caching                     on" in out
    assert "async_scheduling                          on" in out
    assert code == 0 and "[WITNESSED] self_preemption" in out, out
    assert "replayed on the reference" in out
    assert "searched by the reference explorer" in out and "align_cache.py" in out
    assert "L loop starts" in out  # a lasso: the run repeats, the request never finishes


def test_config_does_not_prove_align_mode_safe_with_the_mode_none_count(capsys):
    # One block more: the reference explorer finds no witness within its bounds, and the
    # closed-form argument (1 + k state blocks per Mamba group) is not claimed in align
    # mode, where a lone request holds more while its token is in flight.
    from checker.cli.main import main

    code = main(_config_line(8))
    out = capsys.readouterr().out
    assert "[HOLDS within bounds] self_preemption" in out, out
    assert "PROVED absent] self_preemption" not in out and code == 0


def _vllm_starts(num_gpu_blocks: int) -> bool:
    """vLLM's own startup check (get_kv_cache_configs, num_gpu_blocks_override) on the
    witness's layers: one full-attention layer, one Mamba layer in align mode with one
    speculative block, the Mamba page padded to the attention page."""
    import torch
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    from checker.conformance.vllm_real import _vllm_config
    from model.vllm.config import Config

    vc = _vllm_config(Config(max_num_batched_tokens=4, max_num_seqs=1, max_model_len=12,
                             block_size=4, num_gpu_blocks=num_gpu_blocks))
    vc.cache_config.kv_cache_layout = "LBHNC"
    vc.cache_config.num_gpu_blocks_override = num_gpu_blocks
    vc.cache_config.mamba_cache_mode = "align"
    full = FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8, dtype=torch.float16)
    mamba = MambaSpec(block_size=4, shapes=((4,),), dtypes=(torch.float16,),
                      page_size_padded=full.page_size_bytes, mamba_cache_mode="align",
                      num_speculative_blocks=1)
    try:
        get_kv_cache_configs(vc, [{"model.layers.0.attn": full,
                                   "model.layers.1.mixer": mamba}], [10**12])
    except ValueError:
        return False
    finally:
        vc.cache_config.mamba_cache_mode = "none"  # the cached config is shared
        vc.cache_config.num_gpu_blocks_override = None
    return True


@needs_vllm
@pytest.mark.conformance
def test_vllm_starts_the_witness_pool_and_refuses_one_block_less():
    assert _vllm_starts(7)
    assert not _vllm_starts(6)


def test_check_never_finishes_is_violated_in_align_mode_by_the_reference_explorer(capsys,
                                                                                 tmp_path):
    from checker.cli.main import main

    flags = ["check", "--property", "never_finishes", "--max-model-len", "12",
             "--max-num-batched-tokens", "4", "--max-num-seqs", "1", "--block-size", "4",
             "--num-gpu-blocks", "7", "--model-kind", "hybrid-mamba", "--mamba-layers",
             "1", "--full-attention-layers", "1", "--speculative-config",
             '{"method": "eagle", "model": "x/eagle", "num_speculative_tokens": 1}',
             "--async-scheduling", "--requests", "1", "--depth", "8"]
    code = main([*flags, "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1 and "never_finishes  custom  VIOLATED" in out, out + err
    assert "explore" in out and "align mode" in err
    # BMC runs the rules, which do not carry align mode: UNKNOWN with the reason
    code = main([*flags, "--method", "bmc", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 3 and "modelled in the reference only" in out + err, out + err


def test_prefix_caching_is_modelled_beside_mamba_groups_and_refused_beside_a_window():
    from model.core.errors import InputError
    from model.vllm.config import GROUP_SLIDING, KvGroup
    from model.vllm.engine import reference_only
    from model.vllm.validation import check_field_types

    align = _witness(7).config
    check_field_types(align)  # full + Mamba with prefix caching: align mode, modelled
    assert reference_only(align) is not None  # ... by the reference only
    assert reference_only(replace(align, enable_prefix_caching=False)) is None
    for groups in ((KvGroup("full"), KvGroup(GROUP_SLIDING, 4)),
                   (KvGroup(GROUP_SLIDING, 4), KvGroup("mamba")),
                   (KvGroup("full"), KvGroup("full"))):
        with pytest.raises(InputError, match="prefix caching with KV cache groups"):
            check_field_types(replace(align, kv_cache_groups=groups))
    # vLLM's startup check counts 2 + k state blocks per Mamba group in align mode
    assert align.group_blocks_per_request(KvGroup("mamba")) == 2 + 1
    assert replace(align, enable_prefix_caching=False).group_blocks_per_request(
        KvGroup("mamba")) == 1 + 1
