"""SGLang (v0.5.22) scheduler configuration: the fields the model reads, with SGLang's names,
parsing of the workload's "config" object, validation, and the derived values
(max_running_requests, the new-token-ratio constants as exact fractions).

Paths are relative to `sglang/srt/` of the v0.5.22 wheel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from model.core.checks import MAX_INT
from model.core.errors import ConfigError, InputError, refuse_unknown, shown

SGLANG_VERSION = "0.5.22"
ENGINE_SGLANG = "sglang"

POLICY_FCFS = "fcfs"
POLICY_LOF = "lof"
POLICY_LPM = "lpm"
POLICIES = (POLICY_FCFS, POLICY_LOF, POLICY_LPM)
# Accepted by the CLI (arg_groups/fields/schedule.py:82-98) but not modelled here.
_UNMODELLED_POLICIES = ("random", "dfs-weight", "routing-key", "hrrn",
                        "shortest-prefill-first")

SPEC_EAGLE = "EAGLE"
SPEC_EAGLE3 = "EAGLE3"
# The EAGLE family on the synchronous spec-v2 path (arg_groups/speculative_hook.py:985-1015);
# EAGLE3 differs from EAGLE only in the draft model, not in the scheduler's accounting.
SPEC_ALGORITHMS = (SPEC_EAGLE, SPEC_EAGLE3)
SPEC_FIELDS = ("speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens")
EAGLE_DEFAULT_MAX_RUNNING_REQUESTS = 48  # arg_groups/speculative_hook.py:996-1006

CLIP_MAX_NEW_TOKENS = 4096  # managers/schedule_policy.py:85-87
WAITING_QUEUE_PREFIX_MATCH_MAX = 128  # managers/schedule_policy.py:133


@dataclass(frozen=True, slots=True)
class Config:
    """The SGLang server arguments the scheduler model reads.

    Defaults: arg_groups/fields/schedule.py:67-77 (max_prefill_tokens 16384), 82-98
    (schedule_policy fcfs), 135-138 (schedule_conservativeness 1.0), 202-205
    (enable_mixed_chunk off); arg_groups/fields/memory.py:64-70 (radix cache on).
    `chunked_prefill_size` is chosen by GPU memory upstream (arg_groups/memory_hook.py:90-178);
    4096 is its "memory unknown" value; None or a value <= 0 turns chunking off
    (managers/scheduler.py:1316-1337). `max_total_num_tokens` (the KV pool in tokens) and
    `context_length` come from memory profiling and the model upstream; ours are defaults.
    The ratio fields are environment variables (environ.py:595-598): SGLANG_INIT_NEW_TOKEN_RATIO,
    SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS,
    SGLANG_RETRACT_DECODE_STEPS. `page_size` is `--page-size` (tokens per KV page; 1 gives
    the token allocator, more the paged one, mem_cache/kv_cache_configurator.py:2594-2616);
    the pool is then whole pages (model_executor/pool_configurator.py:623-629) and a chunk
    size a multiple of the page (arg_groups/validation_hook.py:242-245).
    `speculative_algorithm` (EAGLE or EAGLE3; None: off) with its three knobs
    (`--speculative-num-steps`, `--speculative-eagle-topk`,
    `--speculative-num-draft-tokens`) turns on EAGLE speculative decoding as the CPU server
    runs it: the non-overlap loop with the synchronous spec-v2 worker
    (arg_groups/speculative_hook.py:65-80, 1005-1011).
    """

    max_total_num_tokens: int = 8192
    chunked_prefill_size: int | None = 4096
    max_prefill_tokens: int = 16384
    max_running_requests: int | None = None
    schedule_policy: str = POLICY_FCFS
    schedule_conservativeness: float = 1.0
    enable_mixed_chunk: bool = False
    disable_radix_cache: bool = False
    context_length: int = 8192
    init_new_token_ratio: float = 0.7
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    retract_decode_steps: int = 20
    page_size: int = 1
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None

    # ---- derived values --------------------------------------------------------------

    @property
    def token_budget(self) -> int:
        """The nearest to vLLM's per-step token budget: max_prefill_tokens, the input cap of
        one prefill batch (managers/schedule_policy.py:607). Decode batches are not capped."""
        return self.max_prefill_tokens

    @property
    def chunking(self) -> bool:
        """Chunked prefill is on (managers/scheduler.py:1335-1336: a size <= 0 means off)."""
        return self.chunked_prefill_size is not None and self.chunked_prefill_size > 0

    @property
    def mixed_chunk(self) -> bool:
        """`is_mixed_chunk`: mixing needs chunked prefill on (scheduler.py:1338-1340)."""
        return self.chunking and self.enable_mixed_chunk

    @property
    def effective_max_running_requests(self) -> int:
        """`resolve_max_num_reqs` (mem_cache/kv_cache_configurator.py:2800-2813), one DP
        rank, one PP stage: the user's value capped at half the pool, or else an estimate
        from pool size and context length clamped to [2048, 4096], capped likewise."""
        half = self.max_total_num_tokens // 2
        if self.max_running_requests is not None:
            return min(self.max_running_requests, half)
        if self.speculative:  # the EAGLE family's default (speculative_hook.py:996-1006)
            return min(EAGLE_DEFAULT_MAX_RUNNING_REQUESTS, half)
        estimated = int(self.max_total_num_tokens / self.context_length * 512)
        return min(max(min(estimated, 4096), 2048), half)

    @property
    def speculative(self) -> bool:
        """EAGLE speculative decoding is on."""
        return self.speculative_algorithm is not None

    @property
    def alloc_len_per_decode(self) -> int:
        """`get_alloc_len_per_decode` (mem_cache/allocation_sizing.py:28-60): 1 without
        speculative decoding; `max(steps x topk, draft tokens)`, or with pages and topk > 1
        the page-aligned footprint of every topk branch."""
        if not self.speculative:
            return 1
        steps, topk = self.speculative_num_steps or 1, self.speculative_eagle_topk or 1
        tokens = self.speculative_num_draft_tokens or 0
        page = self.page_size
        if page == 1 or topk == 1:
            return max(steps * topk, tokens)
        pages_per_branch = (page - 1 + steps + page - 1) // page
        return max(pages_per_branch * page * topk, tokens)

    @property
    def decode_reserve(self) -> int:
        """`get_alloc_reserve_per_decode` (allocation_sizing.py:63-69): twice the length one
        decode may allocate (a double buffer for the overlap loop's lag, kept on this path
        too)."""
        return 2 * self.alloc_len_per_decode

    @property
    def max_accept_len(self) -> int:
        """Most tokens one verify commits for a request: the accepted path of the draft
        tree, at most `num_steps` drafts deep, plus the bonus token (the verify's accept
        index is `[bs, spec_steps + 1]`, managers/utils.py GenerationBatchResult), and at
        most the verify width. 1 without speculative decoding."""
        if not self.speculative:
            return 1
        return min(self.speculative_num_draft_tokens or 1, (self.speculative_num_steps or 0) + 1)

    @property
    def max_req_len(self) -> int:
        """`min(context_len - 1, kv_capacity - 1)` (managers/tp_worker.py:549-552)."""
        return min(self.context_length - 1, self.max_total_num_tokens - 1)

    @property
    def max_req_input_len(self) -> int:
        """Prompts of this many tokens or more are refused (tp_worker.py:553;
        managers/utils.py:254-282)."""
        return self.max_req_len - 5

    @property
    def active_policy_is_lpm(self) -> bool:
        """LPM survives only with the radix cache on (schedule_policy.py:320-340)."""
        return self.schedule_policy == POLICY_LPM and not self.disable_radix_cache

    def ratio_init(self) -> Fraction:
        """`min(init * conservativeness, 1)` (new_token_ratio_tracker.py:21-26), exact."""
        return min(_frac(self.init_new_token_ratio) * _frac(self.schedule_conservativeness),
                   Fraction(1))

    def ratio_floor(self) -> Fraction:
        """`min(init * factor, 1)` (new_token_ratio_tracker.py:27-30), exact."""
        return min(self.ratio_init() * _frac(self.min_new_token_ratio_factor), Fraction(1))

    def ratio_decay(self) -> Fraction:
        """`(init - min) / decay_steps` (new_token_ratio_tracker.py:31), exact."""
        return (self.ratio_init() - self.ratio_floor()) / self.new_token_ratio_decay_steps

    def pages(self, tokens: int) -> int:
        """`tokens` rounded up to whole pages, in tokens (`ceil_paged_tokens`,
        schedule_policy.py:827-828, prefill_budget.py:76-77)."""
        return -(-tokens // self.page_size) * self.page_size

    def clip_max_new_tokens(self, prompt_len: int, max_tokens: int) -> int:
        """`init_req_max_new_tokens` (managers/scheduler.py:2585-2630): capped by the
        context (`max_req_len - input - 1`) and by an empty pool
        (mem_cache/allocator/base.py:86-105: `capacity - ceil_page(input) - page - 1`)."""
        cap = min(max_tokens, self.max_req_len - prompt_len - 1,
                  self.max_total_num_tokens - self.pages(prompt_len) - self.page_size - 1)
        return max(0, cap)

    def to_dict(self) -> dict[str, object]:
        """The config as workload JSON spells it (SGLang's names). `page_size` is written
        only when it is not 1, the one page size the model had before it: a document, a
        counterexample and a question's file name (`check.query_slug`) without it stay
        as they were; the speculative fields likewise only when speculative decoding is
        on."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if (f.name != "page_size" or self.page_size != 1)
                and (f.name not in ("speculative_algorithm", *SPEC_FIELDS) or self.speculative)}


CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Config))


def _frac(value: float) -> Fraction:
    """A float as the exact decimal it was written as (0.7 -> 7/10), not its binary value.
    Upstream computes in binary floats; the two differ only at exact ties."""
    return Fraction(str(value))


_INT_FIELDS = ("max_total_num_tokens", "max_prefill_tokens", "context_length",
               "new_token_ratio_decay_steps", "retract_decode_steps", "page_size")
_UNMODELLED_SPEC = ("NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "MTP",
                    "FROZEN_KV_MTP")
_FLOAT_FIELDS = ("schedule_conservativeness", "init_new_token_ratio",
                 "min_new_token_ratio_factor")
_BOOL_FIELDS = ("enable_mixed_chunk", "disable_radix_cache")


def parse_config(raw: Any) -> Config:
    """A Config from the workload's "config" object (SGLang names); InputError on an
    unknown field, a wrong type or a value out of range."""
    if not isinstance(raw, dict):
        raise InputError("'config' must be a JSON object of SGLang server-argument names, "
                         f"got {shown(raw)}")
    refuse_unknown(raw, CONFIG_FIELDS, "unknown SGLang config field",
                   f"known fields: {', '.join(CONFIG_FIELDS)}")
    for name, value in raw.items():
        _check_field(name, value)
    return Config(**raw)


def _check_field(name: str, value: Any) -> None:
    if name in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
            raise InputError(f"config {name} must be a positive integer of at most 64 bits, "
                             f"got {shown(value)}")
    elif name in ("chunked_prefill_size", "max_running_requests"):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or abs(value) > MAX_INT):
            raise InputError(f"config {name} must be an integer of at most 64 bits or null, "
                             f"got {shown(value)}")
        if name == "max_running_requests" and value is not None and value < 1:
            raise InputError(f"config max_running_requests must be >= 1, got {value}")
    elif name in _FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not (math.isfinite(value) and 0 <= value <= MAX_INT):
            raise InputError(f"config {name} must be a finite non-negative number, got "
                             f"{shown(value)}")
    elif name in SPEC_FIELDS:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= 64):
            raise InputError(f"config {name} must be an integer in [1, 64] or null, got "
                             f"{shown(value)}")
    elif name == "speculative_algorithm":
        if value is not None and value not in SPEC_ALGORITHMS:
            hint = (" is not modelled" if isinstance(value, str)
                    and value.upper() in _UNMODELLED_SPEC else " is unknown")
            raise InputError(f"config speculative_algorithm {shown(value)}{hint}; use one of "
                             f"{', '.join(SPEC_ALGORITHMS)} or null (off)")
    elif name in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise InputError(f"config {name} must be true or false, got {shown(value)}")
    elif name == "schedule_policy":
        if value in _UNMODELLED_POLICIES:
            raise InputError(f"schedule_policy {value!r} is not modelled; use one of "
                             f"{', '.join(POLICIES)}")
        if value not in POLICIES:
            raise InputError(f"unknown schedule_policy {shown(value)}; use one of "
                             f"{', '.join(POLICIES)}")


def rejection(cfg: Config) -> ConfigError | None:
    """The rule SGLang (or this model's scope) rejects the configuration by, or None."""
    spec = _spec_rejection(cfg)
    if spec is not None:
        return spec
    page = cfg.page_size
    if cfg.max_total_num_tokens % page:
        return ConfigError(
            "pool_not_page_aligned",
            f"max_total_num_tokens {cfg.max_total_num_tokens} is not a whole number of "
            f"{page}-token pages: SGLang floors the pool to pages "
            "(model_executor/pool_configurator.py:623-629), so the pool would be "
            f"{cfg.max_total_num_tokens // page * page}; give that value")
    if cfg.chunking and cfg.chunked_prefill_size % page:
        return ConfigError(
            "chunk_not_page_aligned",
            f"chunked_prefill_size {cfg.chunked_prefill_size} is not a multiple of "
            f"page_size {page}: SGLang refuses to start (arg_groups/validation_hook.py:"
            f"242-245); use a multiple of {page}")
    if cfg.max_req_input_len < 1:
        return ConfigError(
            "pool_too_small",
            f"max_total_num_tokens {cfg.max_total_num_tokens} and context_length "
            f"{cfg.context_length} leave no room for a prompt (max_req_input_len = "
            f"min(context_length, max_total_num_tokens) - 6 = {cfg.max_req_input_len}, "
            "managers/tp_worker.py:549-553); raise them")
    if cfg.effective_max_running_requests < 1:
        return ConfigError(
            "no_request_slots",
            "max_running_requests resolves to 0 (kv_cache_configurator.py:2800-2813 caps it "
            "at max_total_num_tokens // 2); raise max_total_num_tokens")
    if cfg.mixed_chunk and cfg.chunked_prefill_size <= cfg.effective_max_running_requests:
        return ConfigError(
            "mixed_chunk_budget",
            f"with enable_mixed_chunk the model needs chunked_prefill_size "
            f"({cfg.chunked_prefill_size}) > max_running_requests "
            f"({cfg.effective_max_running_requests}): otherwise the decode tokens can use "
            "the whole chunk and upstream would schedule a non-positive chunk "
            "(schedule_policy.py:623-624, prefill_budget.py:141-144); raise "
            "chunked_prefill_size or lower max_running_requests")
    return None


def _spec_rejection(cfg: Config) -> ConfigError | None:
    """The speculative knobs as the model takes them: all three with EAGLE, none without;
    with topk 1 upstream sets the verify width to steps + 1 (speculative_hook.py:1165-1176),
    so the model asks for that value. (Upstream picks the knobs by model architecture when
    none is given, speculative_hook.py:1068-1083: the model needs them stated.)"""
    given = [name for name in SPEC_FIELDS if getattr(cfg, name) is not None]
    if not cfg.speculative:
        if given:
            return ConfigError(
                "spec_knobs_without_algorithm",
                f"{', '.join(given)} given but speculative_algorithm is null; set "
                f"speculative_algorithm to {' or '.join(SPEC_ALGORITHMS)} or drop them")
        return None
    missing = [name for name in SPEC_FIELDS if getattr(cfg, name) is None]
    if missing:
        return ConfigError(
            "spec_knobs_missing",
            f"speculative_algorithm {cfg.speculative_algorithm} needs {', '.join(missing)}: "
            "SGLang chooses them from the model architecture when none is given "
            "(arg_groups/speculative_hook.py:1068-1083), which the model cannot know; give "
            "all three (e.g. 3, 1, 4)")
    steps, topk = cfg.speculative_num_steps, cfg.speculative_eagle_topk
    if topk == 1 and cfg.speculative_num_draft_tokens != steps + 1:
        return ConfigError(
            "spec_draft_tokens_adjusted",
            f"with speculative_eagle_topk 1 SGLang sets speculative_num_draft_tokens to "
            f"speculative_num_steps + 1 = {steps + 1} (arg_groups/speculative_hook.py:"
            f"1165-1176), not {cfg.speculative_num_draft_tokens}; give {steps + 1}")
    return None
