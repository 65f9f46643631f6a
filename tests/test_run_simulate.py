"""model/run.simulate, the driver every replay, diff and report uses, passes each
environment choice the workload makes to the engine's reference, or refuses it: a replay
that dropped an accepted draft or an abort would be another run than the one it names."""

from __future__ import annotations

import pytest

from model.core.errors import InputError
from model.core.types import AbortEvent, AcceptEvent, RequestSpec, Workload
from model.run import simulate
from model.vllm import reference
from model.vllm.config import Config


def _spec_workload() -> Workload:
    cfg = Config(max_num_batched_tokens=16, max_num_seqs=2, max_model_len=32, block_size=4,
                 num_gpu_blocks=20, enable_prefix_caching=False, async_scheduling=False,
                 speculative_method="ngram", num_speculative_tokens=2)
    return Workload(cfg, (RequestSpec("r0", 4, 8, 1), RequestSpec("r1", 4, 8, 1)), steps=6,
                    accepted=(AcceptEvent("r0", 3, 2),),
                    aborts=(AbortEvent("r1", 4, False),))


def test_vllm_accepted_drafts_and_aborts_reach_the_reference():
    w = _spec_workload()
    records = simulate(w)
    assert records == reference.simulate(w)
    assert dict(records[2].extra)["accepted"]["r0"] == 2
    assert any(rid == "r1" for rid, _ in records[3].finished)


def test_an_engine_whose_reference_takes_no_aborts_refuses_them():
    from model.registry import get

    sglang = get("sglang")
    cfg = sglang.parse_config({})
    w = Workload(cfg, (RequestSpec("r0", 4, 4, 1),), steps=3, engine="sglang",
                 aborts=(AbortEvent("r0", 2, False),))
    with pytest.raises(InputError, match="aborts"):
        simulate(w)
