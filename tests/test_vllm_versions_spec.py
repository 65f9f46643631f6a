"""Speculative decoding at vLLM's older releases (issue 31 item 5): the switches
per_request_draft_slots, pad_after_prefix_hit, eagle_drop_flag and spec_pad_room as each
release has them (model/vllm/config.py VERSIONS), the reference and the rules agreeing on
random speculative workloads at each release, the release's startup rule for the draft
slots, and the `config` hazard of the drafter's buffers (checker/config/hazards.py)."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_spec_decode import rules_agree_up_to_a_crash, spec_workloads

from checker.config.hazards import ABSENT, HAZARDS, WITNESSED, Envelope, decide
from checker.conformance.generate import at_release
from model import registry
from model.core.errors import ConfigError
from model.core.ops import CONCRETE
from model.core.types import RequestSpec, Workload
from model.vllm.config import VERSIONS, VLLM_VERSION, Config, VllmRules
from model.vllm.engine import records_to_steps
from model.vllm.reference import simulate

NEW = ("per_request_draft_slots", "pad_after_prefix_hit", "eagle_drop_flag", "spec_pad_room",
       "pad_assertion", "running_tokens_clamp")
OLDER = [v for v in VERSIONS if v != VLLM_VERSION]


@pytest.mark.parametrize("version", OLDER)
@given(w=spec_workloads())
def test_reference_and_rules_agree_on_speculative_workloads_at_older_releases(version, w):
    # at_release: the release's switches, the fields it lacks unset, and (0.27.1) the seats
    # lowered so that the startup reservation of the draft slots leaves a budget.
    rules_agree_up_to_a_crash(at_release(w, version))


@given(w=spec_workloads(), switches=st.fixed_dictionaries({n: st.booleans() for n in NEW}))
def test_reference_and_rules_agree_under_every_combination_of_the_spec_switches(w, switches):
    rules = replace(w.config.rules, **switches)
    rules_agree_up_to_a_crash(replace(w, config=replace(w.config, rules=rules)))


def _run(version: str, config: dict, requests: tuple[RequestSpec, ...], steps: int):
    name = "vllm-v1" if version == VLLM_VERSION else f"vllm-v1@{version}"
    engine = registry.get(name)
    cfg = engine.parse_config(config)
    assert engine.rejection(cfg) is None
    w = Workload(config=cfg, requests=requests, steps=steps)
    rules_agree_up_to_a_crash(w)
    return [dict(r.scheduled) for r in simulate(w)]


DRAFT = {"max_num_batched_tokens": 16, "max_num_seqs": 4, "max_model_len": 64,
         "block_size": 4, "num_gpu_blocks": 40, "speculative_method": "draft_model",
         "num_speculative_tokens": 3}


def test_draft_slots_are_charged_per_request_from_0_28_and_reserved_at_startup_before():
    # A draft model has 1 draft slot. 0.28.0+ charge it to each scheduled request
    # (0.30.0 scheduler.py:808, 1263): two 7-token prompts cost 16, the third waits. 0.27.1
    # takes 1 x max_num_seqs 4 off the budget at startup (config/vllm.py:1737-1745): a
    # budget of 12 and nothing per request, so r1 gets the 5 tokens left.
    three = tuple(RequestSpec(id=f"r{i}", prompt_len=7, max_tokens=3) for i in range(3))
    assert _run("0.30.0", DRAFT, three, 1) == _run(VLLM_VERSION, DRAFT, three, 1) \
        == [{"r0": 7, "r1": 7}]
    assert _run("0.27.1", DRAFT, three, 1) == [{"r0": 7, "r1": 5}]
    cfg = registry.get("vllm-v1@0.27.1").parse_config(DRAFT)
    assert (cfg.token_budget, cfg.step_draft_slots, cfg.reserved_draft_slots) == (12, 0, 4)


def test_a_one_token_prompt_after_a_prefix_hit_is_padded_alone_only_from_0_30():
    # b hits 8 of its 9 tokens and no running request is scheduled at step 3: 0.30.0
    # pads it to 1 + k (scheduler.py:1045-1050, `or num_computed_tokens > 0`), 0.27.1
    # only pads beside scheduled running requests (884-888), so b gets its one token.
    config = dict(DRAFT, speculative_method="ngram", enable_prefix_caching=True)
    reqs = (RequestSpec(id="a", prompt_len=9, max_tokens=1, prefix_group="g",
                        shared_prefix_len=8),
            RequestSpec(id="b", prompt_len=9, max_tokens=3, arrival_step=3, prefix_group="g",
                        shared_prefix_len=8))
    assert _run("0.30.0", config, reqs, 3)[-1] == {"b": 4}
    assert _run("0.27.1", config, reqs, 3)[-1] == {"b": 1}


def test_a_padded_admission_cut_by_the_threshold_crashes_only_from_0_30():
    # b (one token) is padded to 1 + 2 beside a's decode and the threshold 1 cuts it. 0.30.0
    # asserts num_new_tokens == 1 + k (scheduler.py:1267): the engine dies. 0.27.1 has no
    # such assertion (1076-1079): b gets 1 token and 2 placeholder drafts, both rejected
    # with its output, so its computed tokens fall back below its prompt (2108-2128).
    config = {"max_num_batched_tokens": 16, "max_num_seqs": 4, "max_model_len": 64,
              "block_size": 4, "num_gpu_blocks": 40, "speculative_method": "ngram",
              "num_speculative_tokens": 2, "long_prefill_token_threshold": 1}
    reqs = (RequestSpec(id="a", prompt_len=1, max_tokens=4),
            RequestSpec(id="b", prompt_len=1, max_tokens=4, arrival_step=2))
    for version, crash in (("0.30.0", "scheduler.py:1267 AssertionError: request 'b'"),
                           ("0.27.1", None)):
        cfg = registry.get(f"vllm-v1@{version}").parse_config(config)
        w = Workload(config=cfg, requests=reqs, steps=4)
        second = simulate(w)[1]
        assert (dict(second.extra).get("assertion") or None) is None if crash is None \
            else dict(second.extra)["assertion"].startswith(crash)
        rules_agree_up_to_a_crash(w)
    old = simulate(Workload(config=registry.get("vllm-v1@0.27.1").parse_config(config),
                            requests=reqs, steps=3))
    assert dict(old[1].scheduled) == {"a": 1, "b": 1}
    assert dict(old[1].extra)["spec_scheduled"] == {"b": 2}
    assert dict(old[2].num_computed_tokens)["b"] == 0


def test_dflash_has_k_minus_1_draft_slots_before_0_28_and_k_after():
    # 0.27.1 config/speculative.py:1357-1371 with dflash forced parallel (984-985); the
    # table of 0.28.0+ (0.30.0 config/speculative.py:1853-1891) gives dflash K.
    for version, slots in (("0.27.1", 2), ("0.30.0", 3), (VLLM_VERSION, 3)):
        cfg = Config(speculative_method="dflash", num_speculative_tokens=3,
                     rules=VERSIONS[version], version=version)
        assert cfg.draft_slots == slots


def test_0_27_1_refuses_a_config_whose_reserved_draft_slots_leave_no_budget():
    engine = registry.get("vllm-v1@0.27.1")
    tight = engine.rejection(engine.parse_config(dict(DRAFT, max_num_batched_tokens=4)))
    assert isinstance(tight, ConfigError) and tight.rule == "draft_slots_reserved"
    assert "leaves no token to schedule" in str(tight) and "\n" not in str(tight)
    assert "config/vllm.py:1728-1776" in str(tight)
    # a max_num_scheduled_tokens must leave room for them (1766-1776), with no slots too
    over = engine.rejection(engine.parse_config(dict(DRAFT, max_num_scheduled_tokens=13)))
    assert isinstance(over, ConfigError) and over.rule == "draft_slots_reserved"
    ngram = dict(DRAFT, speculative_method="ngram", max_num_scheduled_tokens=17)
    assert engine.rejection(engine.parse_config(ngram)).rule == "draft_slots_reserved"
    # 0.30.0 charges per request and accepts both (its rule: budget > draft slots)
    later = registry.get("vllm-v1@0.30.0")
    assert later.rejection(later.parse_config(dict(DRAFT, max_num_batched_tokens=4))) is None
    assert later.rejection(later.parse_config(ngram)) is None


def test_disable_eagle_block_drop_does_not_exist_in_0_27_1():
    config = dict(DRAFT, speculative_method="eagle", disable_eagle_block_drop=True)
    old = registry.get("vllm-v1@0.27.1")
    rejected = old.rejection(old.parse_config(config))
    assert isinstance(rejected, ConfigError) and rejected.rule == "field_in_version"
    assert "disable_eagle_block_drop does not exist in vLLM 0.27.1" in str(rejected)
    later = registry.get("vllm-v1@0.30.0")
    assert later.rejection(later.parse_config(config)) is None
    assert not later.parse_config(config).eagle_block_drop


def test_0_27_1_async_speculative_decoding_that_can_pad_to_max_model_len_is_refused():
    # Not modelled: 0.27.1 pads a request up to max_model_len (no room kept for the sampled
    # token) and, without 0.28.0's clamp, the AsyncScheduler then gives it -1 tokens and
    # update_from_output asserts (scheduler.py:1734); found by the conformance harness on
    # spec-async-prefix seed 169. Refused in one line, never run with another release's rules.
    from model.core.errors import InputError
    engine = registry.get("vllm-v1@0.27.1")
    config = dict(DRAFT, async_scheduling=True, enable_prefix_caching=True)
    with pytest.raises(InputError) as refused:
        engine.rejection(engine.parse_config(config))
    message = str(refused.value)
    assert "\n" not in message and "scheduler.py:1734" in message
    assert "vLLM 0.27.1's AsyncScheduler" in message and "vllm-v1@0.30.0" in message
    # without prefix caching a waiting request has nothing computed, so padding reaches
    # max_model_len only when it is at most 1 + k
    assert engine.rejection(engine.parse_config(dict(config, enable_prefix_caching=False))) \
        is None
    later = registry.get("vllm-v1@0.30.0")
    assert later.rejection(later.parse_config(config)) is None


def test_each_release_has_the_spec_switches_its_sources_show():
    assert all(getattr(VERSIONS["0.30.0"], n) for n in NEW)
    assert not any(getattr(VERSIONS["0.27.1"], n) for n in NEW)
    assert all(getattr(VllmRules(), n) for n in NEW)


# --- the drafter's buffers (checker/config/hazards.py spec_drafter_buffer) -----------------

DRAFTER = next(h for h in HAZARDS if h.name == "spec_drafter_buffer")


@pytest.mark.parametrize("cfg, why", [
    (Config(speculative_method="draft_model", num_speculative_tokens=3),
     "costs its tokens plus 1 draft slots"),
    (Config(speculative_method="eagle3", num_speculative_tokens=4, parallel_drafting=True,
            max_num_batched_tokens=64, max_num_seqs=8, max_model_len=256),
     "plus 3 draft slots (>= the drafter's 3 extra slots) of a step's input budget of 64"),
    (Config(speculative_method="draft_model", num_speculative_tokens=3,
            max_num_batched_tokens=64, max_num_seqs=4, max_model_len=256,
            rules=VERSIONS["0.27.1"], version="0.27.1"),
     "at most min(token budget 60, input budget 60) and at most 4 requests run"),
    (Config(speculative_method="ngram", num_speculative_tokens=3), "sizes no buffer"),
])
def test_the_drafter_buffer_hazard_is_proved_absent_where_the_budget_rules_it_out(cfg, why):
    result = decide(DRAFTER, cfg, Envelope(timeout_s=20), pool_known=False)
    assert result.verdict == ABSENT and why in result.detail and result.witness is None


def test_the_drafter_buffer_hazard_is_witnessed_where_a_budget_above_the_buffers_binds():
    # No release: 0.32.0's per-request draft slots charged to one budget (input_budget
    # off) of max_num_scheduled_tokens 32 above max_num_batched_tokens 16. Four 8-token
    # prompts: 28 tokens scheduled, plus a draft model's 1 extra slot each, 32 > 16.
    cfg = Config(speculative_method="draft_model", num_speculative_tokens=3,
                 max_num_batched_tokens=16, max_num_scheduled_tokens=32, max_num_seqs=4,
                 max_model_len=64, rules=VllmRules(input_budget=False))
    result = decide(DRAFTER, cfg, Envelope(timeout_s=20), pool_known=False)
    assert result.verdict == WITNESSED and result.witness is not None
    w = result.witness
    steps = records_to_steps(w.workload, tuple(simulate(w.workload)))
    prop = DRAFTER.prop(Envelope(), cfg)
    failing = [t + 1 for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    assert failing[:1] == [w.violated_at] == [1]
    scheduled = dict(w.replayed.records[0].scheduled)
    assert sum(scheduled.values()) + len(scheduled) > cfg.max_num_batched_tokens
    # with the input budget (every release from 0.28.0) the same numbers rule it out
    fixed = replace(cfg, rules=VllmRules())
    assert decide(DRAFTER, fixed, Envelope(timeout_s=20), pool_known=False).verdict == ABSENT


SERVE = ("--max-model-len", "4096", "--max-num-batched-tokens", "512", "--max-num-seqs", "8",
         "--num-gpu-blocks", "2000", "--no-async-scheduling", "--json")


def _config_hazards(capsys, spec: str, exit_code: int) -> dict:
    import json

    from checker.cli.main import main
    code = main(["config", *SERVE, "--speculative-config", spec, "--hazard",
                 "spec_drafter_buffer", "--hazard", "spec_drafts_cut"])
    out, _ = capsys.readouterr()
    assert code == exit_code  # 3: some verdict is UNKNOWN (checker/cli/config.py:68)
    return {h["hazard"]: h for h in json.loads(out)["hazards"]}


def test_config_proves_the_drafter_buffer_absent_for_a_modelled_method(capsys):
    got = _config_hazards(capsys, '{"method": "draft_model", "num_speculative_tokens": 3, '
                                  '"model": "x"}', 0)
    assert got["spec_drafter_buffer"]["verdict"] == ABSENT
    assert "at most 512 query tokens" in got["spec_drafter_buffer"]["detail"]


def test_config_says_unknown_for_the_spec_hazards_of_a_method_outside_the_model(capsys):
    # dspark is outside the model: its Config carries no speculative method, and the spec
    # hazards must not read that as "no speculative decoding" (they did: PROVED absent).
    got = _config_hazards(capsys, '{"method": "dspark", "num_speculative_tokens": 3, '
                                  '"model": "x"}', 3)
    for name in ("spec_drafter_buffer", "spec_drafts_cut"):
        assert got[name]["verdict"] == "UNKNOWN"
        assert "outside the model: speculative decoding (speculative method dspark)" \
            in got[name]["detail"]
