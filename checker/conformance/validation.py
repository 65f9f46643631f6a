"""Config-validation conformance: does vLLM's real `SchedulerConfig` accept a config?

`real_vllm_accepts(cfg)` builds `vllm.config.SchedulerConfig` from the scheduler fields of
`cfg` (with `max_model_len` and `is_encoder_decoder=False`, the two InitVars) and reports
acceptance and vLLM's error message. `vllm_rules(message)` maps that message to the rule
names of `model.vllm_config.RULES`, so a test can check that our `validate` rejects the
same configs *for the same reason*. block_size and num_gpu_blocks are not SchedulerConfig
fields (CacheConfig and the KV-cache profiler own them), so they are not passed.
"""

from __future__ import annotations

from typing import Any

from model.core.errors import InputError
from model.vllm.config import Config
from model.vllm.validation import NEWER_FIELDS, validate

# vLLM's messages (vllm/config/scheduler.py:315-357) -> our rule names.
_MESSAGE_RULES: tuple[tuple[str, str], ...] = (
    ("is smaller than max_model_len", "batched_tokens_ge_model_len_without_chunking"),
    ("must be greater than or equal to max_num_seqs", "batched_tokens_ge_num_seqs"),
    ("cannot be greater than max_num_seqs", "active_seqs_le_num_seqs"),
    ("cannot be greater than the max_model_len", "long_prefill_threshold_le_model_len"),
)
# pydantic field constraints (vllm/config/scheduler.py:48-90, 159, 196-201) -> rule names.
_FIELD_RULES: dict[str, str] = {
    "max_num_batched_tokens": "positive_fields",
    "max_num_scheduled_tokens": "positive_fields",
    "max_num_seqs": "positive_fields",
    "max_num_active_seqs": "positive_fields",
    "long_prefill_token_threshold": "positive_fields",
    "watermark": "watermark_range",
    "policy": "policy_known",
}


def scheduler_config_kwargs(cfg: Config) -> dict[str, Any]:
    """The keyword arguments of vLLM's `SchedulerConfig` for `cfg` (sync scheduling),
    without the fields an older release's SchedulerConfig lacks (model/vllm/validation.py
    NEWER_FIELDS: its validation refuses them when set, so they are at their defaults)."""
    out = {
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_scheduled_tokens": cfg.max_num_scheduled_tokens,
        "max_num_active_seqs": cfg.max_num_active_seqs,
        "long_prefill_token_threshold": cfg.long_prefill_token_threshold,
        "long_prefill_token_threshold_adaptive": cfg.long_prefill_token_threshold_adaptive,
        "enable_chunked_prefill": cfg.enable_chunked_prefill,
        "policy": cfg.policy,
        "watermark": cfg.watermark,
        "scheduler_reserve_full_isl": cfg.scheduler_reserve_full_isl,
        "async_scheduling": False,
        "max_model_len": cfg.max_model_len,
        "is_encoder_decoder": False,
    }
    for name, switch, _, _ in NEWER_FIELDS:
        if not getattr(cfg.rules, switch):
            out.pop(name, None)  # disable_eagle_block_drop is SpeculativeConfig's
    return out


def real_vllm_accepts(cfg: Config) -> tuple[bool, str | None]:
    """(True, None) when vLLM's SchedulerConfig accepts `cfg`, else (False, its message)."""
    from vllm.config import SchedulerConfig  # lazy: vLLM is an optional extra

    try:
        SchedulerConfig(**scheduler_config_kwargs(cfg))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        return False, str(exc)
    return True, None


def vllm_rules(message: str) -> frozenset[str]:
    """The rule names (model.vllm_config.RULES) that vLLM's error `message` reports.

    pydantic reports every broken field constraint at once; `__post_init__` raises the
    first broken cross-field rule. An empty set means the message is not recognised.
    """
    rules = {rule for text, rule in _MESSAGE_RULES if text in message}
    lines = message.splitlines()
    for i, line in enumerate(lines[:-1]):
        field = line.strip()
        if field in _FIELD_RULES and lines[i + 1].lstrip().startswith(
                ("Input should", "Value error")):
            rules.add(_FIELD_RULES[field])
    return frozenset(rules)


def our_verdict(cfg: Config) -> tuple[bool, str | None, str | None]:
    """(accepted, rule name or None, message or None) from `model.vllm_config.validate`.

    An InputError without a rule (a field-type check) gives rule None.
    """
    try:
        validate(cfg)
    except InputError as exc:
        return False, getattr(exc, "rule", None), str(exc)
    return True, None, None
