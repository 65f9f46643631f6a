"""vLLM's older releases as switches of the one rule set (model/vllm/config.py VERSIONS):
the reference refines the rules under every switch combination and at every named
release, each release's engine parses and validates as that release, and the workloads
that tell the releases apart do so in the reference."""

from dataclasses import asdict, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rules_refinement import assert_agree, cached_workloads, workloads

from model import registry
from model.core.errors import ConfigError
from model.core.types import RequestSpec, Workload
from model.vllm.config import VERSIONS, VLLM_VERSION, Config, VllmRules
from model.vllm.engine import ENGINE
from model.vllm.reference import simulate

# The switches older releases turn off (cap_prefix_hit is an ablation, tested elsewhere).
OLDER = ("threshold_off_when_alone", "adaptive_threshold", "active_seqs_cap", "input_budget",
         "priority_victim_reindex")


def _with_rules(w: Workload, rules: VllmRules) -> Workload:
    return replace(w, config=replace(w.config, rules=rules))


@given(workloads(), st.fixed_dictionaries({name: st.booleans() for name in OLDER}))
def test_reference_and_rules_agree_under_every_switch_combination(w, switches):
    # The fields a release lacks are left set on purpose: both sides must ignore them alike.
    assert_agree(_with_rules(w, VllmRules(**switches)))


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != VLLM_VERSION])
@given(w=workloads())
def test_reference_and_rules_agree_at_every_older_release(version, w):
    assert_agree(_with_rules(w, VERSIONS[version]))


def _agree_with_cache_and_async(version: str, w: Workload, asynchronous: bool) -> None:
    cfg = replace(w.config, rules=VERSIONS[version], async_scheduling=asynchronous)
    assert_agree(replace(w, config=cfg))


# Every older release with the profile's count of cached workloads (100, or 200 in CI; 5-8 s
# of CPU each) in the slow suite; 0.30.0 with a quarter of them in the default suite, where
# the full count was its second longest test.
@pytest.mark.slow
@pytest.mark.parametrize("version", [v for v in VERSIONS if v != VLLM_VERSION])
@given(w=cached_workloads(), asynchronous=st.booleans())
def test_reference_and_rules_agree_at_older_releases_with_cache_and_async(version, w,
                                                                           asynchronous):
    _agree_with_cache_and_async(version, w, asynchronous)


@settings(max_examples=25)
@given(w=cached_workloads(), asynchronous=st.booleans())
def test_reference_and_rules_agree_at_0_30_0_with_cache_and_async_on_fewer_workloads(
        w, asynchronous):
    _agree_with_cache_and_async("0.30.0", w, asynchronous)


def test_the_bare_name_is_the_pinned_release_and_the_others_are_named():
    assert registry.get("vllm-v1") is ENGINE
    assert registry.get(f"vllm-v1@{VLLM_VERSION}") is ENGINE
    for version in ("0.30.0", "0.27.1"):
        engine = registry.get(f"vllm-v1@{version}")
        assert engine.name == f"vllm-v1@{version}" and engine.version == version
        cfg = engine.parse_config({})
        assert cfg.rules == VERSIONS[version] and cfg.version == version
        assert "rules" not in cfg.to_dict()  # relative to its own release
        assert engine.parse_config(cfg.to_dict()) == cfg
    assert ENGINE.parse_config({}) == Config()
    assert "rules" not in Config().to_dict()


def test_an_ablation_is_spelt_relative_to_its_release():
    engine = registry.get("vllm-v1@0.30.0")
    cfg = engine.parse_config({"rules": {"threshold_off_when_alone": True}})
    assert cfg.to_dict()["rules"] == {"threshold_off_when_alone": True}
    assert engine.parse_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize("version", ["0.30.0", "0.27.1"])
@pytest.mark.parametrize("field, value", [("max_num_active_seqs", 2),
                                          ("long_prefill_token_threshold_adaptive", True)])
def test_a_field_the_release_lacks_is_refused_in_one_line(version, field, value):
    engine = registry.get(f"vllm-v1@{version}")
    rejected = engine.rejection(engine.parse_config({field: value}))
    assert isinstance(rejected, ConfigError) and rejected.rule == "field_in_version"
    assert f"does not exist in vLLM {version}" in str(rejected) and "\n" not in str(rejected)
    assert ENGINE.rejection(ENGINE.parse_config({field: value})) is None


def _run(version: str, config: dict, requests: tuple[RequestSpec, ...], steps: int):
    cfg = registry.get(f"vllm-v1@{version}").parse_config(config)
    return simulate(Workload(config=cfg, requests=requests, steps=steps))


def test_a_lone_request_is_cut_by_the_threshold_only_before_0_31():
    # One prompt of 20, threshold 4, budget 16 (docs/vllm_versions.md).
    config = {"max_num_batched_tokens": 16, "long_prefill_token_threshold": 4}
    lone = (RequestSpec(id="a", prompt_len=20, max_tokens=2),)
    new = [dict(r.scheduled).get("a", 0) for r in _run(VLLM_VERSION, config, lone, 3)]
    old = [dict(r.scheduled).get("a", 0) for r in _run("0.30.0", config, lone, 3)]
    assert new == [16, 4, 1] and old == [4, 4, 4]


def test_a_scheduled_cap_above_the_batch_is_the_budget_only_before_0_28():
    config = {"max_num_batched_tokens": 8, "max_num_seqs": 4, "max_num_scheduled_tokens": 16}
    two = (RequestSpec(id="a", prompt_len=7, max_tokens=2),
           RequestSpec(id="b", prompt_len=7, max_tokens=2))
    assert dict(_run("0.30.0", config, two, 1)[0].scheduled) == {"a": 7, "b": 1}
    assert dict(_run("0.27.1", config, two, 1)[0].scheduled) == {"a": 7, "b": 7}


def test_a_priority_victim_passed_over_passes_over_the_next_request_only_before_0_28():
    # The AsyncScheduler under PRIORITY with 5 usable blocks of 1 token: at step 3 r1
    # (priority 1) is passed over, its last output in flight; r0 finds no free block and
    # preempts r1, which stood before it. 0.28.0+ moves the loop's index back and serves r2;
    # 0.27.1 does not, so r2 is passed over too (vllm#49097). Both real schedulers agree
    # with the reference on this workload (checker/conformance, their overlays).
    config = {"max_num_batched_tokens": 12, "max_num_seqs": 4, "max_model_len": 12,
              "block_size": 1, "num_gpu_blocks": 6, "policy": "priority",
              "async_scheduling": True}
    reqs = (RequestSpec(id="r0", prompt_len=2, max_tokens=4, arrival_step=2),
            RequestSpec(id="r1", prompt_len=1, max_tokens=2, arrival_step=1, priority=1),
            RequestSpec(id="r2", prompt_len=1, max_tokens=2, arrival_step=2))
    for version, served in (("0.30.0", {"r0": 1, "r2": 1}), ("0.27.1", {"r0": 1})):
        cfg = registry.get(f"vllm-v1@{version}").parse_config(config)
        w = Workload(config=cfg, requests=reqs, steps=3)
        last = simulate(w)[-1]
        assert dict(last.scheduled) == served and last.preempted == ("r1",)
        assert_agree(w)


def test_versions_differ_by_the_switches_the_evidence_names():
    versions = ENGINE.extra["versions"]
    for rules in VERSIONS.values():
        for name in VllmRules().changed(rules):
            assert "0.3" in versions.evidence(name) or "0.2" in versions.evidence(name)
    # cap_prefix_hit and threshold_skips_padding are bug-class switches, the speculative
    # ones older releases' forms too (tests/test_vllm_versions_spec.py), the rest ablations
    assert set(asdict(VllmRules())) == {*OLDER, "cap_prefix_hit", "spec_pad_room",
                                        "per_request_draft_slots", "pad_after_prefix_hit",
                                        "eagle_drop_flag", "pad_assertion",
                                        "running_tokens_clamp",
                                        "threshold_skips_padding", "preemption_gate",
                                        "watermark_check", "full_sequence_check",
                                        "long_prefill_cap", "victim_latest"}
