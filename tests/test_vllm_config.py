"""vLLM SchedulerConfig validation (model/vllm/validation.py): one test per rule, with the
boundary vLLM draws."""

import pytest

from model.core.errors import ConfigError, InputError
from model.vllm.config import Config
from model.vllm.validation import RULES, check_field_types, is_valid, validate


def rule_of(cfg):
    with pytest.raises(ConfigError) as exc:
        validate(cfg)
    return exc.value.rule


def test_vllm_defaults_are_valid():
    validate(Config())


def test_every_rule_is_exercised_below():
    tested = {"batched_tokens_ge_model_len_without_chunking", "batched_tokens_ge_num_seqs",
              "active_seqs_le_num_seqs", "long_prefill_threshold_le_model_len",
              "positive_fields", "watermark_range", "policy_known",
              "speculative_tokens_positive", "batched_tokens_gt_draft_slots"}
    assert {r.name for r in RULES} == tested


def test_without_chunking_the_batch_must_hold_max_model_len_and_equality_passes():
    assert rule_of(Config(enable_chunked_prefill=False, max_num_batched_tokens=31,
                          max_num_seqs=16, max_model_len=32)) == (
        "batched_tokens_ge_model_len_without_chunking")
    validate(Config(enable_chunked_prefill=False, max_num_batched_tokens=32,
                    max_num_seqs=16, max_model_len=32))
    validate(Config(enable_chunked_prefill=True, max_num_batched_tokens=16,
                    max_num_seqs=16, max_model_len=32))


def test_the_batch_must_hold_one_token_per_sequence():
    assert rule_of(Config(max_num_batched_tokens=16, max_num_seqs=32)) == (
        "batched_tokens_ge_num_seqs")
    validate(Config(max_num_batched_tokens=16, max_num_seqs=16))


def test_active_seqs_may_not_exceed_max_num_seqs():
    assert rule_of(Config(max_num_seqs=8, max_num_active_seqs=9)) == "active_seqs_le_num_seqs"
    validate(Config(max_num_seqs=8, max_num_active_seqs=8))


def test_long_prefill_threshold_may_not_exceed_max_model_len():
    assert rule_of(Config(max_model_len=64, long_prefill_token_threshold=65)) == (
        "long_prefill_threshold_le_model_len")
    validate(Config(max_model_len=64, long_prefill_token_threshold=64))


def test_optional_counts_must_be_positive_and_the_threshold_non_negative():
    assert rule_of(Config(max_num_scheduled_tokens=0)) == "positive_fields"
    assert rule_of(Config(max_num_active_seqs=0)) == "positive_fields"
    assert rule_of(Config(long_prefill_token_threshold=-1)) == "positive_fields"


def test_watermark_is_in_zero_one():
    assert rule_of(Config(watermark=1.0)) == "watermark_range"
    assert rule_of(Config(watermark=-0.1)) == "watermark_range"
    validate(Config(watermark=0.99))


def test_an_unknown_policy_is_rejected_even_by_the_field_checks():
    with pytest.raises(ConfigError) as exc:
        check_field_types(Config(policy="lifo"))
    assert exc.value.rule == "policy_known"


@pytest.mark.parametrize("cfg", [
    Config(max_num_batched_tokens=0), Config(max_num_seqs=0), Config(block_size=0),
    Config(max_model_len=0), Config(num_gpu_blocks=1), Config(max_num_seqs=2.5),
    Config(enable_chunked_prefill=1), Config(watermark="0.1"),
])
def test_field_checks_reject_what_no_configuration_can_have(cfg):
    with pytest.raises(InputError):
        check_field_types(cfg)
    assert not is_valid(cfg)


def test_speculative_decoding_needs_a_positive_draft_count():
    assert rule_of(Config(speculative_method="ngram", num_speculative_tokens=0)) == (
        "speculative_tokens_positive")
    validate(Config(speculative_method="ngram", num_speculative_tokens=1))


def test_the_batch_must_exceed_the_draft_slots_and_equality_fails():
    # draft_model: 1 slot; PARD (parallel draft_model): k slots (config/speculative.py:1914-1924)
    pard = Config(speculative_method="draft_model", num_speculative_tokens=8,
                  parallel_drafting=True, max_num_batched_tokens=8, max_num_seqs=1)
    assert pard.draft_slots == 8
    assert rule_of(pard) == "batched_tokens_gt_draft_slots"
    validate(Config(speculative_method="draft_model", num_speculative_tokens=8,
                    parallel_drafting=True, max_num_batched_tokens=9, max_num_seqs=1))


def test_draft_slots_and_lookahead_per_method_follow_upstream():
    def of(method, parallel=False):
        c = Config(speculative_method=method, num_speculative_tokens=3,
                   parallel_drafting=parallel)
        return c.draft_slots, c.num_lookahead_tokens, c.eagle_block_drop
    assert of("ngram") == (0, 0, False)
    assert of("eagle3") == (0, 3, True)
    assert of("eagle3", True) == (2, 3, True)
    assert of("mtp") == (0, 3, True)
    assert of("draft_model") == (1, 3, False)
    assert of("dflash") == (3, 4, True)
    assert of("medusa") == (0, 0, False)


def test_an_unmodelled_method_is_refused_naming_the_modelled_ones():
    with pytest.raises(InputError, match="dspark.*ngram"):
        check_field_types(Config(speculative_method="dspark", num_speculative_tokens=2))
