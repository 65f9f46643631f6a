"""`batchproof config` at deployment size (issue 26 item 4): with `vllm serve`'s defaults
(prefix caching and the AsyncScheduler on) every hazard of the example configs is decided,
none UNKNOWN for a modelled feature; repeated preemption is WITNESSED by a constructed run
that the reference, with the deployment's own switches, confirms; the witness is reported
only when that run preempts one request more than M times (mutations of the construction
and of the reference's rule are not WITNESSED)."""

import argparse
from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

import checker.config.hazards as hazards
from checker.cli.config import add_arguments, merged_args, parse_request
from checker.config.hazards import (
    HAZARDS,
    UNKNOWN_LABEL,
    WITNESSED,
    Envelope,
    _repeat_workload,
    decide,
    decide_all,
)
from checker.config.resolve import check_config
from checker.methods.replay import DivergenceError
from model.core.ops import CONCRETE
from model.vllm.config import Config
from model.vllm.deployment import Deployment
from model.vllm.engine import records_to_steps
from model.vllm.reference import VllmV1Scheduler, simulate
from properties import catalogue

ROOT = Path(__file__).resolve().parents[1]
H = {h.name: h for h in HAZARDS}
SERVE = Deployment(prefix_caching=True, async_scheduling=True)
# Small enough to construct in milliseconds: 11 long requests of 1984 tokens fill the
# 1000 usable blocks (max_model_len 2048, blocks of 16).
SMALL = Config(max_num_batched_tokens=256, max_num_seqs=64, max_model_len=2048, block_size=16,
               num_gpu_blocks=1001)
ENV = Envelope()


def deployed(name):
    """What `batchproof config --config examples/configs/<name> --device h100` decides
    with: the effective config, the envelope, whether the pool is known, the deployment."""
    parser = argparse.ArgumentParser(prog="config")
    add_arguments(parser)
    args = parser.parse_args(["--config", str(ROOT / "examples" / "configs" / name),
                              "--device", "h100"])
    req = parse_request(merged_args(args))
    checked = check_config(req)
    assert checked.error is None and checked.config is not None
    return checked.config, req.envelope, checked.pool_known, req.deployment


@cache
def deployed_verdicts(name):
    """Every hazard's verdict for the example config `name` as `deployed` reads it, by
    hazard name: decided once per process, for the tests that read one hazard's verdict
    or all of them (decide_all is decide on each hazard; the module runs on one xdist
    worker, tests/conftest.py GROUPED)."""
    cfg, env, pool_known, deployment = deployed(name)
    return {r.name: r for r in decide_all(cfg, env, pool_known, deployment=deployment)}


def preemptions(workload):
    """How often the reference preempts each request in the workload's run, and the run."""
    records = simulate(workload)
    return Counter(rid for rec in records for rid in rec.preempted), records


def assert_repeated_on_reference(result, m=1):
    """The witness, run again on the reference with prefix caching and async scheduling
    on, preempts one request more than m times, resumed from its own cached blocks, and
    violates the property at the step it states."""
    assert result.verdict == WITNESSED and not result.witness.minimal
    workload = result.witness.workload
    assert workload.config.enable_prefix_caching and workload.config.async_scheduling
    counts, records = preemptions(workload)
    (victim, times), = counts.most_common(1)
    assert times > m
    hits = [dict(rec.extra)["prefix_hits"].get(victim, 0) for rec in records
            if victim in rec.resumed]
    assert hits and all(hit > 0 for hit in hits)  # resumed from its cached blocks
    prop = catalogue.get("repeated_preemption", m=m)
    steps = records_to_steps(workload, records)
    failing = [t + 1 for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    assert failing and failing[0] == result.witness.violated_at == len(records)


# --- the example configs at deployment size ------------------------------------------------

def test_llama8b_h100_repeated_preemption_is_witnessed_on_the_serve_defaults():
    _, _, _, deployment = deployed("llama8b_h100.yaml")
    assert deployment.prefix_caching and deployment.async_scheduling
    result = deployed_verdicts("llama8b_h100.yaml")["repeated_preemption"]
    assert_repeated_on_reference(result)
    assert "prefix caching on and async scheduling on" in result.detail


@pytest.mark.slow  # about 3.5 s: the 8B config's witness above is the same check, smaller
def test_llama8b_128k_h100_repeated_preemption_is_witnessed_on_the_serve_defaults():
    cfg, env, pool_known, deployment = deployed("llama8b_128k_h100.yaml")
    assert cfg.max_model_len == 131072
    assert_repeated_on_reference(decide(H["repeated_preemption"], cfg, env, pool_known,
                                        deployment))


@pytest.mark.slow  # about 6 s; the 8B config's witness runs in the default suite
def test_llama70b_tp8_h100_repeated_preemption_is_witnessed_on_the_serve_defaults():
    cfg, env, pool_known, deployment = deployed("llama70b_tp8_h100.yaml")
    result = decide(H["repeated_preemption"], cfg, env, pool_known, deployment)
    assert_repeated_on_reference(result)
    assert len(result.witness.workload.requests) == 42  # 40 fill the pool, + victim + short


@pytest.mark.slow  # about 12 s: three constructed preemptions; the 8B witness above has one
def test_more_preemptions_take_one_short_request_each():
    cfg, env, pool_known, deployment = deployed("llama8b_h100.yaml")
    result = decide(H["repeated_preemption"], cfg, replace(env, max_preemptions=3),
                    pool_known, deployment)
    assert_repeated_on_reference(result, m=3)
    assert len(result.witness.workload.eos) == 3


# The 128k and 70B configs' full hazard lists are deep: the default suite keeps the 8B
# one.
@pytest.mark.parametrize("name", [
    "llama8b_h100.yaml", pytest.param("llama8b_128k_h100.yaml", marks=pytest.mark.slow),
    pytest.param("llama70b_tp8_h100.yaml", marks=pytest.mark.slow)])
def test_no_hazard_of_the_example_configs_is_unknown(name):
    results = deployed_verdicts(name).values()
    assert [r.name for r in results if r.verdict == UNKNOWN_LABEL] == []
    assert {r.name for r in results if r.verdict == WITNESSED} == {
        "starvation", "head_of_line", "repeated_preemption"}
    for r in results:
        if r.verdict == WITNESSED and r.witness.workload.config.enable_prefix_caching:
            # every witness run on the cache is the deployment's run: async on too
            assert r.witness.workload.config.async_scheduling


def test_a_model_witness_is_confirmed_with_the_deployment_s_switches():
    # starvation's minimal trace is found without the cache (too large for the symbolic
    # one); the same workload with the cache and async on fails at the same step.
    _, env, _, _ = deployed("llama8b_h100.yaml")
    result = deployed_verdicts("llama8b_h100.yaml")["starvation"]
    assert result.verdict == WITNESSED and "the same violation at step" in result.detail
    w = result.witness
    on = replace(w.workload, config=replace(w.workload.config, enable_prefix_caching=True,
                                            async_scheduling=True))
    prop = catalogue.get("starvation", k=env.starvation_steps)
    steps = records_to_steps(on, simulate(on))
    failing = [t + 1 for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    assert failing[0] == w.violated_at


# --- small and fast: every switch, and the mutations ------------------------------------------

@pytest.mark.parametrize("prefix, async_", [(True, True), (True, False), (False, True),
                                            (False, False)])
def test_the_constructed_run_preempts_one_request_twice_with_every_switch(prefix, async_):
    result = decide(H["repeated_preemption"], SMALL, ENV, True,
                    Deployment(prefix_caching=prefix, async_scheduling=async_))
    assert result.verdict == WITNESSED
    cfg = result.witness.workload.config
    assert (cfg.enable_prefix_caching, cfg.async_scheduling) == (prefix, async_)
    counts, _ = preemptions(result.witness.workload)
    assert max(counts.values()) == 2


@pytest.mark.parametrize("change", [
    dict(watermark=0.01), dict(policy="priority"), dict(long_prefill_token_threshold=64),
    dict(enable_chunked_prefill=False, max_num_batched_tokens=2048),
    dict(speculative_method="ngram", num_speculative_tokens=4),
    dict(speculative_method="eagle", num_speculative_tokens=3)])
def test_the_constructed_run_preempts_one_request_twice_with_other_settings(change):
    result = decide(H["repeated_preemption"], replace(SMALL, **change), ENV, True, SERVE)
    assert_repeated_on_reference(result)
    assert all(getattr(result.witness.workload.config, k) == v for k, v in change.items())


def _pool_never_runs_out(monkeypatch):
    """A wrong rule: allocate_slots never fails (the pool grows on demand), so the RUNNING
    loop never preempts."""
    allocate = VllmV1Scheduler._allocate_slots

    def never_short(self, request, num_new_tokens, hit=None, **kwargs):
        if allocate(self, request, num_new_tokens, hit, **kwargs):
            return True
        self.pool.num_unhashed_free += self.cfg.num_gpu_blocks
        return allocate(self, request, num_new_tokens, hit, **kwargs)
    monkeypatch.setattr(VllmV1Scheduler, "_allocate_slots", never_short)


def test_a_reference_that_never_preempts_gives_no_witness(monkeypatch):
    _pool_never_runs_out(monkeypatch)
    result = decide(H["repeated_preemption"], SMALL, ENV, True, SERVE)
    assert result.verdict != WITNESSED and result.witness is None


def test_the_witness_is_reported_only_when_the_reference_confirms_it(monkeypatch):
    # The construction is right (built on the true reference), the reference that checks
    # it is not: the run preempts nobody, and nothing is witnessed.
    workload = _repeat_workload(replace(SMALL, enable_prefix_caching=True,
                                        async_scheduling=True), ENV)
    assert workload is not None and max(preemptions(workload)[0].values()) == 2
    _pool_never_runs_out(monkeypatch)
    assert not preemptions(workload)[0]
    stored = replace(H["repeated_preemption"], construct=lambda cfg, env: workload)
    result = decide(stored, SMALL, ENV, True, SERVE)
    assert result.verdict != WITNESSED and result.witness is None


def test_a_construction_without_the_short_request_s_eos_is_not_a_witness():
    # Without the EOS that frees the short request's blocks the victim never comes back:
    # preempted once, which M = 1 allows.
    workload = _repeat_workload(replace(SMALL, enable_prefix_caching=True,
                                        async_scheduling=True), ENV)
    wrong = replace(workload, eos=(), steps=workload.steps + 50)
    assert max(preemptions(wrong)[0].values()) == 1
    broken = replace(H["repeated_preemption"], construct=lambda cfg, env: wrong)
    result = decide(broken, SMALL, ENV, True, SERVE)
    assert result.verdict != WITNESSED


def test_a_model_witness_the_deployment_runs_otherwise_is_unknown(monkeypatch):
    def diverges(cex):
        raise DivergenceError("the reference fails at step 4, the rules at step 3")
    monkeypatch.setattr(hazards, "replay", diverges)
    cfg, env, pool_known, deployment = deployed("llama8b_h100.yaml")
    result = decide(H["starvation"], cfg, env, pool_known, deployment)
    assert result.verdict == UNKNOWN_LABEL and result.witness is None
    assert result.detail.startswith("outside the model: prefix caching (the model found a "
                                    "witness without the cache")
