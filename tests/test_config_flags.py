"""Config override flags: vLLM's spelling, one per Config field, garbage rejected."""

import argparse

import pytest

from checker.config.flags import CONFIG_FLAGS, FLAG_FOR_FIELD, add_config_flags, apply_config_flags
from model.vllm.config import CONFIG_FIELDS, Config


class _Raising(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def parse(*argv):
    parser = _Raising()
    add_config_flags(parser)
    return parser.parse_args(list(argv))


def test_every_config_field_has_exactly_one_flag_entry():
    # the speculative-decoding fields come from --speculative-config (one JSON flag), the
    # connector's from --kv-transfer-config
    from model.vllm.config import CONNECTOR_FIELDS, SPEC_FIELDS
    assert sorted(f.field for f in CONFIG_FLAGS) == sorted(
        set(CONFIG_FIELDS) - set(SPEC_FIELDS) - set(CONNECTOR_FIELDS))


def test_flags_use_vllm_spelling():
    assert FLAG_FOR_FIELD == {
        "max_num_batched_tokens": "--max-num-batched-tokens",
        "max_num_seqs": "--max-num-seqs",
        "max_model_len": "--max-model-len",
        "block_size": "--block-size",
        "num_gpu_blocks": "--num-gpu-blocks-override",
        "enable_chunked_prefill": "--enable-chunked-prefill",
        "long_prefill_token_threshold": "--long-prefill-token-threshold",
        "long_prefill_token_threshold_adaptive": "--long-prefill-token-threshold-adaptive",
        "policy": "--scheduling-policy",
        "watermark": "--watermark",
        "scheduler_reserve_full_isl": "--scheduler-reserve-full-isl",
        "max_num_active_seqs": "--max-num-active-seqs",
        "max_num_scheduled_tokens": "--max-num-scheduled-tokens",
        "enable_prefix_caching": "--enable-prefix-caching",
        "async_scheduling": "--async-scheduling",
    }


def test_no_flag_leaves_the_config_unchanged():
    base = Config(max_num_batched_tokens=7, enable_chunked_prefill=False)
    assert apply_config_flags(parse(), base) == base


def test_every_flag_overrides_its_field():
    args = parse(
        "--max-num-batched-tokens", "64", "--max-num-seqs", "8", "--max-model-len", "512",
        "--block-size", "8", "--num-gpu-blocks", "100", "--no-enable-chunked-prefill",
        "--long-prefill-token-threshold", "32", "--long-prefill-token-threshold-adaptive",
        "--scheduling-policy", "priority", "--watermark", "0.25",
        "--no-scheduler-reserve-full-isl", "--max-num-active-seqs", "4",
        "--max-num-scheduled-tokens", "48")
    assert apply_config_flags(args, Config()) == Config(
        max_num_batched_tokens=64, max_num_seqs=8, max_model_len=512, block_size=8,
        num_gpu_blocks=100, enable_chunked_prefill=False, long_prefill_token_threshold=32,
        long_prefill_token_threshold_adaptive=True, policy="priority", watermark=0.25,
        scheduler_reserve_full_isl=False, max_num_active_seqs=4, max_num_scheduled_tokens=48)


def test_num_gpu_blocks_override_is_accepted_under_vllms_name_too():
    assert apply_config_flags(parse("--num-gpu-blocks-override", "9"), Config()).num_gpu_blocks == 9


def test_boolean_flags_turn_fields_on_again():
    base = Config(enable_chunked_prefill=False, scheduler_reserve_full_isl=False)
    cfg = apply_config_flags(parse("--enable-chunked-prefill", "--scheduler-reserve-full-isl"),
                             base)
    assert cfg.enable_chunked_prefill and cfg.scheduler_reserve_full_isl


@pytest.mark.parametrize("argv", [
    ("--max-num-batched-tokens", "0"), ("--max-num-batched-tokens", "-1"),
    ("--max-num-seqs", "x"), ("--max-model-len", "1e3"), ("--block-size", "-4"),
    ("--num-gpu-blocks", "1"), ("--long-prefill-token-threshold", "-1"),
    ("--watermark", "nan"), ("--watermark", "inf"), ("--watermark", "-1"),
    ("--scheduling-policy", "sjf"), ("--max-num-active-seqs", "0"),
    ("--max-num-scheduled-tokens", "0"),
])
def test_garbage_values_are_rejected_at_parse_time(argv):
    with pytest.raises(ValueError, match=argv[0]):
        parse(*argv)


def test_zero_threshold_and_zero_watermark_are_allowed():
    cfg = apply_config_flags(parse("--long-prefill-token-threshold", "0", "--watermark", "0"),
                             Config(long_prefill_token_threshold=5, watermark=0.5))
    assert cfg.long_prefill_token_threshold == 0 and cfg.watermark == 0.0


@pytest.mark.parametrize(("text", "kept", "error"), [
    ("7", 7, None),
    ("seven", None, "not a number"),
    ("0", None, "outside"),
    ("1.5", None, "not a number"),  # int() refuses a decimal
])
def test_read_number_keeps_a_value_in_range_and_names_each_failure(text, kept, error):
    from checker.config.argtypes import read_number

    def read() -> int:
        return read_number(text, int, lambda v: v > 0, "not a number", "outside")
    if error is None:
        assert read() == kept
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=error):
            read()
