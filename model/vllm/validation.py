"""vLLM V1 configuration rules: field checks and SchedulerConfig validation (v0.32.0).

Messages are our own words; each rule names the upstream line that enforces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from model.core.errors import ConfigError, InputError, shown
from model.vllm.config import (
    CONFIG_FIELDS,
    GROUP_KINDS,
    GROUP_MAMBA,
    GROUP_SLIDING,
    OPTIONAL_INT_FIELDS,
    POLICY_FCFS,
    POLICY_PRIORITY,
    SPEC_METHODS_MODELLED,
    VLLM_VERSION,
    Config,
    KvGroup,
    check_value,
)


@dataclass(frozen=True, slots=True)
class Rule:
    """A SchedulerConfig validation rule."""

    name: str
    upstream: str
    text: str


RULES: tuple[Rule, ...] = (
    Rule("batched_tokens_ge_model_len_without_chunking", "vllm/config/scheduler.py:315-326",
         "max_num_batched_tokens >= max_model_len when chunked prefill is off"),
    Rule("batched_tokens_ge_num_seqs", "vllm/config/scheduler.py:328-333",
         "max_num_batched_tokens >= max_num_seqs"),
    Rule("active_seqs_le_num_seqs", "vllm/config/scheduler.py:335-342",
         "max_num_active_seqs <= max_num_seqs"),
    Rule("long_prefill_threshold_le_model_len", "vllm/config/scheduler.py:352-357",
         "long_prefill_token_threshold <= max_model_len"),
    Rule("positive_fields", "vllm/config/scheduler.py:48-77 (pydantic ge=1)",
         "max_num_batched_tokens, max_num_seqs, max_num_scheduled_tokens, "
         "max_num_active_seqs >= 1; long_prefill_token_threshold >= 0"),
    Rule("watermark_range", "vllm/config/scheduler.py:196-201 (pydantic ge=0, lt=1)",
         "0 <= watermark < 1"),
    Rule("policy_known", "vllm/config/scheduler.py:21, 159; scheduler.py:216-221",
         "policy is 'fcfs' or 'priority'"),
    Rule("speculative_tokens_positive", "vllm/config/speculative.py:393, 1812-1830",
         "num_speculative_tokens >= 1 with a speculative method"),
    Rule("batched_tokens_gt_draft_slots", "vllm/config/vllm.py:2285-2290",
         "max_num_batched_tokens > draft slots per request (speculative decoding)"),
)


# Fields an older release's SchedulerConfig does not have, by the switch that is off in it:
# (field, switch, first release with it, its upstream lines there). pydantic refuses an
# unknown keyword, so such a config cannot be built in that release; the model refuses
# the field (set to anything but its default) with the rule name `field_in_version`.
NEWER_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("max_num_active_seqs", "active_seqs_cap", "0.31.0", "config/scheduler.py:69-77"),
    ("long_prefill_token_threshold_adaptive", "adaptive_threshold", "0.31.0",
     "config/scheduler.py:86-90"),
    # In 0.30.0 (config/speculative.py:440, 1915-1917), not in 0.28.0; 0.29.0 was not read.
    ("disable_eagle_block_drop", "eagle_drop_flag", "0.29.0-0.30.0",
     "config/speculative.py:440 of 0.30.0"),
)

# Before 0.28.0 (VllmRules.per_request_draft_slots off) VllmConfig reserves the draft slots
# of max_num_seqs requests at startup and refuses a config that leaves no token to schedule
# (0.27.1 config/vllm.py:1728-1776). Like `field_in_version`, a rule of the older releases
# only, not one of RULES (0.32.0's).
DRAFT_SLOTS_RESERVED = Rule(
    "draft_slots_reserved", "vllm/config/vllm.py:1728-1776 (0.27.1)",
    "before 0.28.0, with speculative decoding: max_num_batched_tokens - draft slots * "
    "max_num_seqs >= 1 (unset max_num_scheduled_tokens) or >= max_num_scheduled_tokens")


def check_version_fields(cfg: Config) -> None:
    """ConfigError when `cfg` sets a field its rules' release does not have."""
    defaults = Config()
    for name, switch, since, where in NEWER_FIELDS:
        if not getattr(cfg.rules, switch) and getattr(cfg, name) != getattr(defaults, name):
            raise ConfigError(
                "field_in_version",
                f"{name} does not exist in vLLM {cfg.version} (it came in {since}, {where}; "
                f"switch {switch} is off); leave it unset")


def check_field_types(cfg: Config) -> None:
    """Reject values no configuration can have (wrong type, non-positive sizes).

    These checks hold even under `--no-validate`: the model cannot run without them.
    """
    for name in CONFIG_FIELDS:
        check_value(name, getattr(cfg, name))
    for name in ("max_num_batched_tokens", "max_num_seqs"):
        if getattr(cfg, name) < 1:
            raise ConfigError(
                "positive_fields",
                f"{name} must be >= 1, got {getattr(cfg, name)}; use a positive value "
                "(vllm/config/scheduler.py:48, 62)")
    for name in ("max_model_len", "block_size"):
        if getattr(cfg, name) < 1:
            raise InputError(f"{name} must be >= 1, got {getattr(cfg, name)}; use a positive value")
    if cfg.num_gpu_blocks < 2:
        raise InputError(
            f"num_gpu_blocks must be >= 2 (block 0 is vLLM's null block), got "
            f"{cfg.num_gpu_blocks}; give the pool at least 2 blocks")
    if cfg.policy not in (POLICY_FCFS, POLICY_PRIORITY):
        raise ConfigError(
            "policy_known",
            f"policy {shown(cfg.policy)} is not a vLLM scheduling policy; use 'fcfs' or 'priority' "
            "(vllm/config/scheduler.py:21)")
    _check_spec_fields(cfg)
    _check_kv_groups(cfg)
    _check_connector(cfg)


def _check_connector(cfg: Config) -> None:
    """A KV connector is modelled beside the modes its argument was read for: the
    synchronous Scheduler or the AsyncScheduler, prefix caching on or off, no speculative
    decoding, one full-attention group, the pinned release (model/vllm/connector.py)."""
    if cfg.kv_load_failure_policy != "fail" and not cfg.kv_connector:
        raise InputError(f"kv_load_failure_policy {cfg.kv_load_failure_policy!r} without a KV "
                         "connector; set kv_connector or drop it")
    if not cfg.kv_connector:
        return
    others = [name for name, on in (
        ("speculative decoding", bool(cfg.speculative_method)),
        ("kv_cache_groups other than one full-attention group", cfg.hybrid_kv),
        (f"vLLM {cfg.version}", cfg.version != VLLM_VERSION)) if on]
    if others:
        raise InputError(
            f"a KV connector beside {', '.join(others)} is not modelled (the connector's "
            f"scheduler path is modelled for vLLM {VLLM_VERSION} with one full-attention "
            "group and no speculative decoding); turn those off or drop kv_connector")


def _check_kv_groups(cfg: Config) -> None:
    """The KV cache groups are known kinds, and the modes the model has for several groups:
    prefix caching off, the pinned release."""
    groups = cfg.kv_cache_groups
    if not isinstance(groups, tuple) or not groups or not all(
            isinstance(g, KvGroup) and g.kind in GROUP_KINDS
            and (g.sliding_window >= 1 if g.kind == GROUP_SLIDING else g.sliding_window == 0)
            for g in groups):
        raise InputError(f"kv_cache_groups {shown(groups)} must be a non-empty list of "
                         f"groups of kind {', '.join(GROUP_KINDS)} (a sliding window >= 1)")
    if not cfg.hybrid_kv:
        return
    names = ", ".join(g.describe() for g in groups)
    if cfg.enable_prefix_caching and (
            not any(g.kind == GROUP_MAMBA for g in groups)
            or any(g.kind == GROUP_SLIDING for g in groups)):
        # With Mamba groups vLLM runs align mode (model_executor/models/config.py:685-701):
        # the hybrid coordinator's hit search over full-attention and Mamba groups is
        # modelled (model/vllm/align_cache.py); a sliding window's hit search
        # (single_type_kv_cache_manager.py:943-1053) and several full-attention groups
        # without a Mamba one are not.
        raise InputError(
            f"prefix caching with KV cache groups {names} is not modelled (only full-"
            "attention groups beside Mamba groups in align mode are; a sliding window's "
            "hit search, v1/core/single_type_kv_cache_manager.py:943-1053, is not); turn "
            "it off: enable_prefix_caching false (--no-enable-prefix-caching)")
    if cfg.version != VLLM_VERSION:
        raise InputError(f"KV cache groups {names} are modelled at vLLM {VLLM_VERSION} only, "
                         f"not {cfg.version}; use vllm-v1@{VLLM_VERSION}")


def _check_spec_fields(cfg: Config) -> None:
    """The speculative-decoding fields name a modelled method and a draft count."""
    method, k = cfg.speculative_method, cfg.num_speculative_tokens
    if method and method not in SPEC_METHODS_MODELLED:
        raise InputError(
            f"speculative_method {shown(method)} is not one the model covers; use one of "
            f"{', '.join(SPEC_METHODS_MODELLED)}, or \"\" for none")
    if not method and (k or cfg.parallel_drafting):
        raise InputError(
            f"num_speculative_tokens {k} / parallel_drafting without a speculative_method; "
            "give speculative_method or leave them unset")
    if (method and cfg.async_scheduling and not cfg.rules.running_tokens_clamp
            and not cfg.rules.spec_pad_room
            and (cfg.enable_prefix_caching or cfg.max_model_len <= k + 1)):
        raise InputError(
            f"vLLM {cfg.version}'s AsyncScheduler with speculative decoding and prefix caching "
            f"(or max_model_len <= 1 + k) is not modelled: a request padded up to "
            f"max_model_len is next scheduled -1 tokens (no clamp before 0.28.0) and "
            f"update_from_output's assert (scheduler.py:1734) kills the engine; use "
            f"vllm-v1@0.30.0, --no-async-scheduling or no prefix caching")
    if method and k < 1:
        raise ConfigError(
            "speculative_tokens_positive",
            f"num_speculative_tokens must be >= 1 with speculative_method {shown(method)}, got "
            f"{k} (vllm/config/speculative.py:393)")


def validate(cfg: Config) -> None:
    """Apply every SchedulerConfig rule vLLM applies; raise ConfigError on the first broken.

    The order is vLLM's: pydantic field constraints first, then
    `verify_max_model_len` (vllm/config/scheduler.py:303-359).
    """
    check_field_types(cfg)
    check_version_fields(cfg)
    if cfg.long_prefill_token_threshold < 0:
        raise ConfigError(
            "positive_fields",
            f"long_prefill_token_threshold must be >= 0, got {cfg.long_prefill_token_threshold}; "
            "use 0 to disable it (vllm/config/scheduler.py:79)")
    for name in OPTIONAL_INT_FIELDS:
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ConfigError(
                "positive_fields",
                f"{name} must be >= 1, got {value}; leave it unset for the default "
                "(vllm/config/scheduler.py:55-77)")
    if not 0.0 <= cfg.watermark < 1.0:
        raise ConfigError(
            "watermark_range",
            f"watermark must be in [0, 1), got {cfg.watermark}; it is the fraction of KV "
            "blocks kept free at admission (vllm/config/scheduler.py:196-201)")
    if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < cfg.max_model_len:
        raise ConfigError(
            "batched_tokens_ge_model_len_without_chunking",
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is below max_model_len "
            f"({cfg.max_model_len}) with chunked prefill off, so a long prompt could never be "
            "scheduled; raise max_num_batched_tokens, lower max_model_len or enable chunked "
            "prefill (vllm/config/scheduler.py:315-326)")
    if cfg.max_num_batched_tokens < cfg.max_num_seqs:
        raise ConfigError(
            "batched_tokens_ge_num_seqs",
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is below max_num_seqs "
            f"({cfg.max_num_seqs}); raise max_num_batched_tokens to at least "
            f"{cfg.max_num_seqs} or lower max_num_seqs (vllm/config/scheduler.py:328-333)")
    if cfg.max_num_active_seqs is not None and cfg.max_num_active_seqs > cfg.max_num_seqs:
        raise ConfigError(
            "active_seqs_le_num_seqs",
            f"max_num_active_seqs ({cfg.max_num_active_seqs}) exceeds max_num_seqs "
            f"({cfg.max_num_seqs}); lower it to at most {cfg.max_num_seqs} "
            "(vllm/config/scheduler.py:335-342)")
    if cfg.speculative_method and not cfg.rules.per_request_draft_slots:
        _check_reserved_draft_slots(cfg)
    elif cfg.speculative_method and cfg.max_num_batched_tokens <= cfg.draft_slots:
        raise ConfigError(
            "batched_tokens_gt_draft_slots",
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) must exceed the "
            f"{cfg.draft_slots} draft slots per request of {cfg.speculative_method} with "
            f"num_speculative_tokens={cfg.num_speculative_tokens}; raise it above "
            f"{cfg.draft_slots} (vllm/config/vllm.py:2285-2290)")
    if cfg.long_prefill_token_threshold > cfg.max_model_len:
        raise ConfigError(
            "long_prefill_threshold_le_model_len",
            f"long_prefill_token_threshold ({cfg.long_prefill_token_threshold}) exceeds "
            f"max_model_len ({cfg.max_model_len}); lower it to at most {cfg.max_model_len} "
            "(vllm/config/scheduler.py:352-357)")


def _check_reserved_draft_slots(cfg: Config) -> None:
    """0.27.1's startup reservation of the draft slots (config/vllm.py:1737-1776): an unset
    max_num_scheduled_tokens becomes max_num_batched_tokens less the slots of max_num_seqs
    requests and must stay positive (1747-1755); a set one must leave room for them
    (1766-1776), so it cannot exceed max_num_batched_tokens even with no slots."""
    reserved, b = cfg.reserved_draft_slots, cfg.max_num_batched_tokens
    where = f"vLLM {cfg.version} {DRAFT_SLOTS_RESERVED.upstream.split(' (')[0]}"
    what = (f"{cfg.draft_slots} draft slots per request of {cfg.speculative_method} with "
            f"num_speculative_tokens={cfg.num_speculative_tokens} times max_num_seqs "
            f"({cfg.max_num_seqs}) = {reserved}")
    if cfg.max_num_scheduled_tokens is None and b - reserved < 1:
        raise ConfigError(
            DRAFT_SLOTS_RESERVED.name,
            f"max_num_batched_tokens ({b}) less the {what} leaves no token to schedule; "
            f"raise max_num_batched_tokens above {reserved} or lower max_num_seqs ({where})")
    if cfg.max_num_scheduled_tokens is not None \
            and b < cfg.max_num_scheduled_tokens + reserved:
        raise ConfigError(
            DRAFT_SLOTS_RESERVED.name,
            f"max_num_scheduled_tokens ({cfg.max_num_scheduled_tokens}) plus the {what} "
            f"exceeds max_num_batched_tokens ({b}); lower max_num_scheduled_tokens to "
            f"{b - reserved} or leave it unset ({where})")


def rejection(cfg: Config) -> ConfigError | None:
    """The first SchedulerConfig rule that rejects `cfg`, or None if vLLM accepts it.
    Field-type errors (no vLLM rule) still raise InputError."""
    try:
        validate(cfg)
    except ConfigError as exc:
        return exc
    return None


def is_valid(cfg: Config) -> bool:
    """True when `validate` accepts the config."""
    try:
        validate(cfg)
    except InputError:
        return False
    return True


def validation_constraints(base: Config, values: Mapping[str, object]) -> list[object]:
    """SchedulerConfig's rules (vllm/config/scheduler.py:315-357) over `values`, the
    ranged fields as ints or symbolic terms: the configs of a family vLLM accepts."""
    b, s, mml = values["max_num_batched_tokens"], values["max_num_seqs"], values["max_model_len"]
    out: list[object] = [b >= s, values["long_prefill_token_threshold"] <= mml]
    if not base.enable_chunked_prefill:
        out.append(b >= mml)
    if base.max_num_active_seqs is not None:
        out.append(base.max_num_active_seqs <= s)
    return [c for c in out if c is not True]
