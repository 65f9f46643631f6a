"""vLLM's engine-start rules beyond SchedulerConfig, and the speculative-decoding settings
`vllm serve` reads from --speculative-config (v0.32.0; lines relative to vllm/).

- The KV cache must hold one request of max_model_len tokens, on the usable blocks (the
  pool less the null block): v1/core/kv_cache_utils.py:1003-1040 (the check), 2605-2647
  (with num_gpu_blocks_override the capacity is override blocks, and one block is set
  aside for the null block before checking), kv_cache_interface.py:602-607 (a full-
  attention layer needs cdiv(max_model_len, block_size) blocks per request).
- With speculative decoding and LoRA, max_num_batched_tokens must cover max_num_seqs *
  (num_speculative_tokens + 1) (engine/arg_utils.py:2671-2683); an explicit
  --async-scheduling needs a method with async support (config/vllm.py:1563-1580). The
  draft-slot rule, max_num_batched_tokens > draft slots (config/vllm.py:2285-2290), is
  SchedulerConfig-time and lives with the other rules (model/vllm/validation.RULES); for a
  method outside the model it is applied here, on the same Config.draft_slots.

These are kept apart from model/vllm/validation.RULES on purpose (the same `Rule` type, in
another set: `simulate` names a rejection by either alike): those are the rules the
manifest's configurations are validated against (some manifest configs study pools below
one max_model_len request). `start_rejection` applies both, as every command does to a
configuration a user gives (model/workload.py).

The speculative settings have one source of truth, Config's fields (model/vllm/config.py:
speculative_method, num_speculative_tokens, parallel_drafting, disable_eagle_block_drop and
what upstream derives from them). `SpecDecode` is --speculative-config as given; `on` maps
it onto those fields. A method the model does not cover keeps its reason (`outside`), and
only the rules that do not depend on the step are applied to it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from model.core.errors import ConfigError
from model.vllm.config import SPEC_METHODS_MODELLED, Config
from model.vllm.validation import RULES, Rule, check_field_types, rejection

KV_HOLDS_ONE_REQUEST = Rule(
    "kv_holds_one_max_model_len_request",
    "vllm/v1/core/kv_cache_utils.py:1003-1040, 2605-2647",
    "cdiv(max_model_len, block_size) <= num_gpu_blocks - 1 (block 0 is the null block)")
LORA_SPEC_BUDGET = Rule(
    "lora_spec_budget", "vllm/engine/arg_utils.py:2671-2683",
    "max_num_batched_tokens >= max_num_seqs * (num_speculative_tokens + 1) with LoRA")
ASYNC_SPEC_METHOD = Rule(
    "async_scheduling_spec_method", "vllm/config/vllm.py:1563-1580",
    "an explicit --async-scheduling needs an EAGLE/MTP/draft-model/ngram_gpu/DSpark/DFlash "
    "speculative method")
SPEC_DRAFT_SLOTS = next(r for r in RULES if r.name == "batched_tokens_gt_draft_slots")

STARTUP_RULES: tuple[Rule, ...] = (KV_HOLDS_ONE_REQUEST, LORA_SPEC_BUDGET, ASYNC_SPEC_METHOD)

# Upstream's methods the model leaves out (config/speculative.py:73-83), each with why.
# Every one still has its draft slots from Config.draft_slots (they depend only on the
# method, k and parallel_drafting, config/speculative.py:1887-1926).
SPEC_METHODS_OUTSIDE: dict[str, str] = {
    "dspark": "its lookahead is k or k+1 by the draft model's hf_config.sample_from_anchor "
              "(config/vllm.py:625-640), which batchproof does not read",
    "custom_class": "a user-supplied proposer class (config/speculative.py:1131-1134, "
                    "1177-1184)",
    "extract_hidden_states": "a hidden-state extractor run as a drafter "
                             "(config/speculative.py:1966-1974), not modelled",
}
SPEC_METHODS: tuple[str, ...] = SPEC_METHODS_MODELLED + tuple(SPEC_METHODS_OUTSIDE)
MULTI_MODULE_MTP = ("multi-module MTP: the prefill lookahead is k instead of 1 "
                    "(config/vllm.py:655-662, config/speculative.py:1982-1988)")
# Methods that keep async scheduling (config/vllm.py:1563-1575, 1597-1617): EagleModelTypes
# (with every MTP type and dflash), ngram_gpu, draft_model, dspark.
ASYNC_SPEC_METHODS = ("eagle", "eagle3", "mtp", "dflash", "extract_hidden_states",
                      "ngram_gpu", "draft_model", "dspark")
# Methods whose parallel_drafting upstream forces on (config/speculative.py:1468-1469).
FORCED_PARALLEL = ("dflash", "dspark")


@dataclass(frozen=True, slots=True)
class SpecDecode:
    """--speculative-config as `vllm serve` reads it: the method (one of SPEC_METHODS),
    k = num_speculative_tokens, and the two switches that size the step. `mtp_layers` is
    the draft's num_nextn_predict_layers (None: not given; batchproof does not read the
    model's config.json)."""

    num_speculative_tokens: int
    method: str
    parallel_drafting: bool = False
    disable_eagle_block_drop: bool = False
    mtp_layers: int | None = None
    dynamic: bool = False  # num_speculative_tokens_per_batch_size given
    disable_padded_drafter_batch: bool = False

    @property
    def keeps_async(self) -> bool:
        """Async scheduling is compatible (config/vllm.py:1563-1580, 1597-1617)."""
        return self.method in ASYNC_SPEC_METHODS and not self.disable_padded_drafter_batch

    def outside(self) -> str | None:
        """Why the model does not cover this setting, or None when it does."""
        if self.dynamic:
            return ("dynamic speculative decoding: k follows the batch size "
                    "(num_speculative_tokens_per_batch_size, scheduler.py:1485-1490)")
        if self.method in SPEC_METHODS_OUTSIDE:
            return f"speculative method {self.method}: {SPEC_METHODS_OUTSIDE[self.method]}"
        if self.method == "mtp" and self.num_speculative_tokens > 1:
            if self.mtp_layers is None:
                return ("MTP with k > 1 and num_nextn_predict_layers not given (give "
                        "--mtp-layers N from the model's config.json): 1 layer is modelled, "
                        "more is " + MULTI_MODULE_MTP)
            if self.mtp_layers > 1:
                return MULTI_MODULE_MTP
        return None

    def fields(self) -> dict[str, object]:
        """The Config fields of this setting (parallel_drafting as upstream forces it)."""
        return {"speculative_method": self.method,
                "num_speculative_tokens": self.num_speculative_tokens,
                "parallel_drafting": self.parallel_drafting or self.method in FORCED_PARALLEL,
                "disable_eagle_block_drop": self.disable_eagle_block_drop}

    def sized(self, cfg: Config) -> Config:
        """`cfg` with these fields, whether or not the model covers the method: for the
        sizes upstream derives (Config.draft_slots, num_lookahead_tokens). Not a config
        the model runs when `outside()` says why."""
        return replace(cfg, **self.fields())  # type: ignore[arg-type]

    def on(self, cfg: Config) -> Config:
        """The Config the model runs: `cfg` with speculative decoding, when the model
        covers it; `cfg` unchanged otherwise."""
        return cfg if self.outside() is not None else self.sized(cfg)

    def lookahead_text(self, cfg: Config) -> str:
        """num_lookahead_tokens as upstream derives it (config/vllm.py:615-641)."""
        k = self.num_speculative_tokens
        if self.method == "dspark":
            return f"{k} or {k + 1} (hf_config.sample_from_anchor of the draft model)"
        return str(self.sized(cfg).num_lookahead_tokens)

    def block_drop(self, cfg: Config) -> bool:
        """EAGLE's last-block drop on prefix hits (config/speculative.py:1944-1952): the
        use_eagle() methods, dspark among them, unless disable_eagle_block_drop."""
        if self.method == "dspark":
            return not self.disable_eagle_block_drop
        return self.sized(cfg).eagle_block_drop


def blocks_for_one_request(cfg: Config) -> int:
    """Blocks one max_model_len request needs: cdiv(max_model_len, block_size) with one
    full-attention group; with KV cache groups the sum of each group's
    (_max_memory_usage_bytes_from_groups, kv_cache_utils.py:2337-2366; Config.
    group_blocks_per_request)."""
    return sum(cfg.group_blocks_per_request(g) for g in cfg.kv_cache_groups)


def kv_rejection(cfg: Config) -> ConfigError | None:
    """The KV startup check's error, or None when the pool holds one max_model_len
    request."""
    need = blocks_for_one_request(cfg)
    if need <= cfg.usable_blocks:
        return None
    if cfg.hybrid_kv:
        parts = " + ".join(f"{g.describe()} {cfg.group_blocks_per_request(g)}"
                           for g in cfg.kv_cache_groups)
        return ConfigError(
            KV_HOLDS_ONE_REQUEST.name,
            f"the KV cache cannot hold one request of max_model_len ({cfg.max_model_len}) "
            f"over its groups: it needs {need} blocks of {cfg.block_size} tokens ({parts}), "
            f"the pool has {cfg.usable_blocks} usable ({cfg.num_gpu_blocks} less the null "
            f"block); lower max_model_len or give the pool at least {need + 1} blocks "
            f"({KV_HOLDS_ONE_REQUEST.upstream}, 2337-2366)")
    largest = cfg.usable_blocks * cfg.block_size
    return ConfigError(
        KV_HOLDS_ONE_REQUEST.name,
        f"the KV cache cannot hold one request of max_model_len ({cfg.max_model_len}): it "
        f"needs {need} blocks of {cfg.block_size} tokens, the pool has {cfg.usable_blocks} "
        f"usable ({cfg.num_gpu_blocks} less the null block); lower max_model_len to at most "
        f"{largest} or give the pool at least {need + 1} blocks "
        f"({KV_HOLDS_ONE_REQUEST.upstream})")


def start_rejection(cfg: Config) -> ConfigError | None:
    """The first error vLLM stops with for `cfg` as a command receives it: SchedulerConfig's
    rules (model/vllm/validation.py), then the KV startup check. Field types are checked
    first and raise (no configuration can have them, `--no-validate` or not)."""
    check_field_types(cfg)
    return rejection(cfg) or kv_rejection(cfg)


def spec_rejection(cfg: Config, spec: SpecDecode, lora: bool,
                   async_flag: bool | None = None) -> ConfigError | None:
    """The speculative-decoding rules' first error for `cfg` (SchedulerConfig's rules
    already applied, with `spec.on(cfg)`), or None: LoRA's budget (create_engine_config,
    engine/arg_utils.py:2671-2683), an explicit --async-scheduling (`async_flag` True) with a
    method without async support (VllmConfig.__post_init__, config/vllm.py:1563-1580), and
    the draft-slot rule (config/vllm.py:2285-2290) for a method outside the model."""
    k = spec.num_speculative_tokens
    need = cfg.max_num_seqs * (k + 1)
    if lora and cfg.max_num_batched_tokens < need:
        return ConfigError(
            LORA_SPEC_BUDGET.name,
            f"with LoRA, max_num_batched_tokens ({cfg.max_num_batched_tokens}) must be at "
            f"least max_num_seqs ({cfg.max_num_seqs}) * (num_speculative_tokens ({k}) + 1) = "
            f"{need}; raise max_num_batched_tokens to {need}, lower max_num_seqs or "
            f"num_speculative_tokens ({LORA_SPEC_BUDGET.upstream})")
    if async_flag and not spec.keeps_async:
        what = (f"speculative method {spec.method}" if spec.method not in ASYNC_SPEC_METHODS
                else "disable_padded_drafter_batch")
        return ConfigError(
            ASYNC_SPEC_METHOD.name,
            f"--async-scheduling is not supported with {what} (async needs one of "
            f"{', '.join(ASYNC_SPEC_METHODS)}, padded drafter batch on); drop "
            f"--async-scheduling ({ASYNC_SPEC_METHOD.upstream})")
    slots = spec.sized(cfg).draft_slots
    if spec.outside() is not None and cfg.max_num_batched_tokens <= slots:
        return ConfigError(
            SPEC_DRAFT_SLOTS.name,
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) must exceed the "
            f"{slots} draft slots per request of {spec.method} with num_speculative_tokens="
            f"{k}; raise it above {slots} ({SPEC_DRAFT_SLOTS.upstream})")
    return None
