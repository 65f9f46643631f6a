"""vLLM's engine-start rules beyond SchedulerConfig (v0.32.0; lines relative to vllm/).

- The KV cache must hold one request of max_model_len tokens, on the usable blocks (the
  pool less the null block): v1/core/kv_cache_utils.py:1003-1040 (the check), 2605-2647
  (with num_gpu_blocks_override the capacity is override blocks, and one block is set
  aside for the null block before checking), kv_cache_interface.py:602-607 (a full-
  attention layer needs cdiv(max_model_len, block_size) blocks per request).
- With speculative decoding, max_num_batched_tokens must exceed the draft slots each
  request adds (config/vllm.py:2254-2290), and with LoRA it must cover max_num_seqs *
  (num_speculative_tokens + 1) (engine/arg_utils.py:2668-2683).

These are kept apart from model/vllm/validation.RULES on purpose: those are
SchedulerConfig's rules, which the manifest's configurations are validated against (some
manifest configs study pools below one max_model_len request). `start_rejection` applies
both, as every command does to a configuration a user gives (model/workload.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from model.core.errors import ConfigError
from model.vllm.config import Config
from model.vllm.validation import check_field_types, rejection


@dataclass(frozen=True, slots=True)
class StartupRule:
    """A rule vLLM applies when the engine starts."""

    name: str
    upstream: str
    text: str


KV_HOLDS_ONE_REQUEST = StartupRule(
    "kv_holds_one_max_model_len_request",
    "vllm/v1/core/kv_cache_utils.py:1003-1040, 2605-2647",
    "cdiv(max_model_len, block_size) <= num_gpu_blocks - 1 (block 0 is the null block)")
SPEC_DRAFT_SLOTS = StartupRule(
    "batched_tokens_gt_draft_slots", "vllm/config/vllm.py:2283-2288",
    "max_num_batched_tokens > draft slots per request (speculative decoding)")
LORA_SPEC_BUDGET = StartupRule(
    "lora_spec_budget", "vllm/engine/arg_utils.py:2668-2683",
    "max_num_batched_tokens >= max_num_seqs * (num_speculative_tokens + 1) with LoRA")

STARTUP_RULES: tuple[StartupRule, ...] = (KV_HOLDS_ONE_REQUEST, SPEC_DRAFT_SLOTS,
                                          LORA_SPEC_BUDGET)

SPEC_METHODS = ("eagle", "eagle3", "mtp", "ngram", "medusa", "draft_model", "dflash",
                "dspark", "suffix")


@dataclass(frozen=True, slots=True)
class SpecDecode:
    """The speculative-decoding settings the budget rules read."""

    num_speculative_tokens: int
    method: str = "eagle3"
    parallel_drafting: bool = False

    @property
    def draft_slots(self) -> int:
        """`max_num_new_slots_for_drafting` (config/speculative.py:1887-1926): extra
        query slots per request beyond the one every decode already has."""
        k = self.num_speculative_tokens
        if self.method == "dflash":
            return k
        if self.parallel_drafting:
            return k if self.method == "draft_model" else k - 1
        return 1 if self.method == "draft_model" else 0


def blocks_for_one_request(cfg: Config) -> int:
    """Blocks one max_model_len request needs: cdiv(max_model_len, block_size)."""
    return -(-cfg.max_model_len // cfg.block_size)


def kv_rejection(cfg: Config) -> ConfigError | None:
    """The KV startup check's error, or None when the pool holds one max_model_len
    request."""
    need = blocks_for_one_request(cfg)
    if need <= cfg.usable_blocks:
        return None
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


def spec_rejection(cfg: Config, spec: SpecDecode, lora: bool) -> ConfigError | None:
    """The speculative-decoding budget rules' error, or None."""
    slots = spec.draft_slots
    if cfg.max_num_batched_tokens <= slots:
        return ConfigError(
            SPEC_DRAFT_SLOTS.name,
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) must exceed the "
            f"{slots} draft slots per request of {spec.method} with "
            f"num_speculative_tokens={spec.num_speculative_tokens}; raise "
            f"max_num_batched_tokens above {slots} or lower num_speculative_tokens "
            f"({SPEC_DRAFT_SLOTS.upstream})")
    need = cfg.max_num_seqs * (spec.num_speculative_tokens + 1)
    if lora and cfg.max_num_batched_tokens < need:
        return ConfigError(
            LORA_SPEC_BUDGET.name,
            f"with LoRA, max_num_batched_tokens ({cfg.max_num_batched_tokens}) must be at "
            f"least max_num_seqs ({cfg.max_num_seqs}) * (num_speculative_tokens "
            f"({spec.num_speculative_tokens}) + 1) = {need}; raise max_num_batched_tokens "
            f"to {need}, lower max_num_seqs or num_speculative_tokens "
            f"({LORA_SPEC_BUDGET.upstream})")
    return None
