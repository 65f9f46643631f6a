"""check-trace on a long trace evaluates each step on the requests present around it
(checker/methods/trace_check.py `first_violation_compact`): the verdicts and first
failing steps must be those of the full evaluation, on runs that violate properties."""

from __future__ import annotations

import random

import pytest

from checker.methods import trace_check
from checker.methods.trace_check import check_trace, properties_for
from model.core.types import RequestSpec, Workload
from model.vllm.config import Config
from model.vllm.reference import simulate


def _busy_workload(seed: int, caching: bool) -> Workload:
    """Many short requests through a tight pool: preemptions, waiting, known violations."""
    rng = random.Random(seed)
    requests = tuple(RequestSpec(id=f"r{i}", prompt_len=rng.randint(1, 20),
                                 max_tokens=rng.randint(1, 8), arrival_step=rng.randint(1, 40),
                                 priority=rng.randint(0, 2),
                                 prefix_group="g" if caching and i % 3 == 0 else None,
                                 shared_prefix_len=0)
                     for i in range(60))
    requests = tuple(r if r.prefix_group is None else
                     RequestSpec(**{**{f: getattr(r, f) for f in r.__slots__},
                                    "shared_prefix_len": r.prompt_len})
                     for r in requests)
    cfg = Config(max_num_batched_tokens=24, max_num_seqs=6, num_gpu_blocks=14, block_size=4,
                 max_model_len=32, enable_prefix_caching=caching,
                 policy="priority" if seed % 2 else "fcfs",
                 enable_chunked_prefill=seed % 3 != 0)
    return Workload(config=cfg, requests=requests, steps=70)


@pytest.mark.parametrize("seed,caching", [(0, False), (1, False), (2, True), (3, True),
                                          (4, False)])
def test_compact_evaluation_gives_the_full_verdicts(seed, caching, monkeypatch):
    w = _busy_workload(seed, caching)
    assert len(w.requests) > trace_check.COMPACT_ABOVE  # the compact path is the one taken
    records = simulate(w)
    props = properties_for(w.engine)
    compact = check_trace(w.engine, w, records, props)
    monkeypatch.setattr(trace_check, "COMPACT_ABOVE", 10**9)
    full = check_trace(w.engine, w, records, props)
    assert [(v.name, v.verdict, v.violated_at) for v in compact] == \
        [(v.name, v.verdict, v.violated_at) for v in full]
    assert any(v.verdict == "VIOLATED" for v in full)  # the runs do exercise violations
