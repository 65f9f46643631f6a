"""Fixed-slot state of vLLM V1's rules (model/vllm/rules.py). Every field is a Python
int/bool OR a z3 term, so one rule serves as simulator and as transition relation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from model.core.memo import per_config
from model.core.ops import Ops
from model.core.rule_parts import QueueState, SlotProgress
from model.vllm.config import GROUP_FULL, GROUP_MAMBA, GROUP_SLIDING, POLICY_PRIORITY, Config

# Config fields a query may give a range (checker/methods/symbolic.py); the rest are fixed.
RANGED_FIELDS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_gpu_blocks",
                 "long_prefill_token_threshold")

# Slot status codes. A waiting request that was preempted keeps PREEMPTED (vLLM keeps
# RequestStatus.PREEMPTED until it is re-admitted, request.py:370-386). REMOTE is
# WAITING_FOR_REMOTE_KVS, reached only with a KV connector (scheduler.py:1320-1341).
ABSENT, WAITING, RUNNING, PREEMPTED, FINISHED, REMOTE = 0, 1, 2, 3, 4, 5

@dataclass(frozen=True, slots=True)
class RuleConfig:
    """The configuration as the rules read it: each field fixed (int/bool) or a z3 term.

    `policy_priority` and `block_size` are always concrete: the first changes the shape of
    the victim choice, the second would make block arithmetic non-linear.
    """

    token_budget: object
    max_num_batched_tokens: object
    max_num_active_reqs: object
    max_num_seqs: object
    max_model_len: object
    usable_blocks: object
    watermark_blocks: object
    enable_chunked_prefill: object
    long_prefill_token_threshold: object
    scheduler_reserve_full_isl: object
    block_size: int
    policy_priority: bool
    long_prefill_token_threshold_adaptive: bool = False
    # Prefix caching changes the state's shape (a pool of blocks, a block table per slot),
    # so it and the sizes of both are concrete: `pool_blocks` usable blocks, and
    # `table_len` = cdiv(max_model_len, block_size) entries per slot.
    prefix_caching: bool = False
    cap_prefix_hit: bool = True  # VllmRules.cap_prefix_hit
    # VllmRules.threshold_off_when_alone and .input_budget (older releases off); the other
    # two switches of older releases are folded in below: adaptive_threshold off leaves
    # the adaptive flag unread, active_seqs_cap off makes max_num_seqs the admission cap.
    threshold_off_when_alone: bool = True
    separate_input_budget: bool = True
    pool_blocks: int = 0
    table_len: int = 0
    # The prefix cache counted, not carried block by block (model/vllm/abstract_cache.py):
    # `within_bounds` picks it when the exact pool is beyond MAX_SYMBOLIC_*; no pool, no
    # tables (`pool_blocks` and `table_len` stay the exact ones, for the notes), and
    # SlotState.num_cached is then the most blocks the request ever cached.
    abstract_cache: bool = False
    # The AsyncScheduler changes the state's shape too (what is in flight per slot).
    async_scheduling: bool = False
    # Blocks one allocation can take: a chunk of at most token_budget tokens spans at most
    # cdiv(token_budget + block_size - 1, block_size) blocks (table_len when the budget is
    # symbolic).
    max_new_blocks: int = 0
    # Speculative decoding (Config.speculative_method; concrete, it shapes the state): k,
    # the extra input slots per scheduled request, the lookahead slots, EAGLE's block drop,
    # whether the drafter may propose fewer than k. `draft_slots` is what each scheduled
    # request costs the input budget: 0 before 0.28.0, whose slots come out of token_budget
    # at startup (Config.step_draft_slots, VllmRules.per_request_draft_slots).
    num_spec_tokens: int = 0
    draft_slots: int = 0
    num_lookahead_tokens: int = 0
    eagle_block_drop: bool = False
    drafts_vary: bool = False
    spec_pad_room: bool = True  # VllmRules.spec_pad_room
    pad_after_prefix_hit: bool = True  # VllmRules.pad_after_prefix_hit (0.27.1 off)
    pad_assertion: bool = True  # VllmRules.pad_assertion (0.27.1 off)
    threshold_skips_padding: bool = False  # VllmRules.threshold_skips_padding
    preemption_gate: bool = True  # VllmRules.preemption_gate
    victim_latest: bool = True  # VllmRules.victim_latest
    victim_reindex: bool = True  # VllmRules.priority_victim_reindex (0.27.1 off)
    # KV cache groups (Config.kv_cache_groups; concrete, they shape the state), without
    # prefix caching: how many full-attention groups, each sliding-window group's window
    # and admission cap (Config.sliding_window_cap), how many Mamba groups and the state
    # blocks each holds per request (1 + k). The default is one full-attention group.
    kv_full: int = 1
    kv_windows: tuple[int, ...] = ()
    kv_window_caps: tuple[int, ...] = ()
    kv_mamba: int = 0
    kv_mamba_blocks: int = 0
    # A KV connector (Config.kv_connector; concrete, it shapes the state: model/vllm/
    # connector_rules.py) and its kv_load_failure_policy ("recompute" or "fail").
    kv_connector: bool = False
    kv_recompute: bool = False

    @property
    def kv_groups(self) -> bool:
        """Whether the KV cache is other than one full-attention group."""
        return self.kv_full != 1 or bool(self.kv_windows) or bool(self.kv_mamba)

    @property
    def pool_choices(self) -> tuple[str, ...]:
        """The names of each slot's pool choices in a step (abstract_cache.PoolChoice's
        fields), none with the exact pool or none."""
        if not self.abstract_cache:
            return ()
        return ("hit", "evictable", "freed_preempted", "freed_finished")

    @property
    def can_crash(self) -> bool:
        """Whether the engine can reach an assertion of its own under this config, so the
        rules carry the crash flag: scheduler.py:1372 with speculative decoding (a padded
        admission cut by the threshold), scheduler.py:1170 with a prefix hit that may cover
        every token (prefix caching on, cap_prefix_hit off) or a KV connector's synchronous
        hit of every token (nothing caps it, scheduler.py:1170)."""
        return (bool(self.num_spec_tokens) or (self.prefix_caching and not self.cap_prefix_hit)
                or self.kv_connector)

    # Kept per config: the reference explorer observes every transition's run from its
    # config (records_to_steps), 8 % of its time on a speculative config before.
    @staticmethod
    @per_config
    def from_config(cfg: Config) -> RuleConfig:
        """The concrete RuleConfig of a Config. A rule switch the rules cannot read under
        this config takes its pinned value (so two configs that differ only by such a
        switch have equal rule configs: `batchproof diff` proves them equivalent at once)."""
        return _unread_switches_pinned(RuleConfig(
            token_budget=cfg.token_budget,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_active_reqs=(cfg.max_num_active_reqs if cfg.rules.active_seqs_cap
                                 else cfg.max_num_seqs),
            max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len,
            usable_blocks=cfg.usable_blocks,
            watermark_blocks=cfg.watermark_blocks,
            enable_chunked_prefill=cfg.enable_chunked_prefill,
            long_prefill_token_threshold=cfg.prefill_threshold,
            scheduler_reserve_full_isl=cfg.full_sequence_must_fit,
            block_size=cfg.block_size,
            policy_priority=cfg.policy == POLICY_PRIORITY,
            long_prefill_token_threshold_adaptive=(cfg.long_prefill_token_threshold_adaptive
                                                   and cfg.rules.adaptive_threshold),
            threshold_off_when_alone=cfg.rules.threshold_off_when_alone,
            separate_input_budget=cfg.rules.input_budget,
            prefix_caching=cfg.enable_prefix_caching, cap_prefix_hit=cfg.rules.cap_prefix_hit,
            async_scheduling=cfg.async_scheduling,
            pool_blocks=cfg.usable_blocks if cfg.enable_prefix_caching else 0,
            table_len=(-(-cfg.max_model_len // cfg.block_size)
                       if cfg.enable_prefix_caching else 0),
            max_new_blocks=(_span(cfg.token_budget + cfg.num_lookahead_tokens, cfg.block_size,
                                  cfg.max_model_len)
                            if cfg.enable_prefix_caching else 0),
            num_spec_tokens=cfg.num_spec_tokens, draft_slots=cfg.step_draft_slots,
            num_lookahead_tokens=cfg.num_lookahead_tokens,
            eagle_block_drop=cfg.eagle_block_drop, drafts_vary=cfg.drafts_vary,
            spec_pad_room=cfg.rules.spec_pad_room,
            pad_after_prefix_hit=cfg.rules.pad_after_prefix_hit,
            pad_assertion=cfg.rules.pad_assertion,
            threshold_skips_padding=cfg.rules.threshold_skips_padding,
            preemption_gate=cfg.rules.preemption_gate, victim_latest=cfg.rules.victim_latest,
            victim_reindex=cfg.rules.priority_victim_reindex,
            kv_connector=cfg.kv_connector,
            kv_recompute=cfg.kv_connector and cfg.kv_load_failure_policy == "recompute",
            **_kv_fields(cfg),
        ))


def _kv_fields(cfg: Config) -> dict[str, object]:
    """The RuleConfig fields of the config's KV cache groups (none for one full group)."""
    if not cfg.hybrid_kv:
        return {}
    kinds = [g.kind for g in cfg.kv_cache_groups]
    windows = tuple(g.sliding_window for g in cfg.kv_cache_groups if g.kind == GROUP_SLIDING)
    return {"kv_full": kinds.count(GROUP_FULL), "kv_windows": windows,
            "kv_window_caps": tuple(cfg.sliding_window_cap(w) for w in windows),
            "kv_mamba": kinds.count(GROUP_MAMBA), "kv_mamba_blocks": 1 + cfg.num_spec_tokens}


def kv_held(ops: Ops, cfg: RuleConfig, length: object, nulled: Sequence[object]) -> object:
    """The real blocks a request holds over every group: `length` is its attention
    tables' length (one full-attention group: its blocks), `nulled` each sliding-window
    group's blocks freed and replaced by the null block (a prefix of the table), and each
    Mamba group holds its state blocks once the request has allocated."""
    if not cfg.kv_groups:
        return length
    held: object = 0 if cfg.kv_full == 0 else length * cfg.kv_full
    for n in nulled:
        held = held + (length - n)
    if cfg.kv_mamba:
        held = held + ops.ite(length > 0, cfg.kv_mamba * cfg.kv_mamba_blocks, 0)
    return held


@dataclass(frozen=True, slots=True)
class SlotState(SlotProgress):
    """One request slot between two steps.

    `run_key` orders the running list and `wait_key` the FCFS waiting deque (smaller is
    nearer the front); only their relative order matters.
    """

    blocks: object = 0
    run_key: object = 0
    wait_key: object = 0
    num_preemptions: object = 0
    # With prefix caching: the pool index + 1 of each block the request holds (0: none),
    # and how many of them are cached (single_type_kv_cache_manager.py:267-324).
    table: tuple[object, ...] = ()
    num_cached: object = 0
    # With async scheduling: one InFlight (an empty tuple otherwise).
    in_flight: tuple[InFlight, ...] = ()
    # With speculative decoding (synchronous): one Drafts (an empty tuple otherwise).
    drafts: tuple[Drafts, ...] = ()
    # With sliding-window groups: per group, the blocks at the table's head freed as the
    # window moved (replaced by the null block); `blocks` is then the tables' length.
    nulled: tuple[object, ...] = ()
    # With a KV connector: one KVSlot (an empty tuple otherwise).
    kv: tuple[KVSlot, ...] = ()


@dataclass(frozen=True, slots=True)
class KVSlot:
    """A slot's KV-connector state between two steps (model/vllm/connector.py):
    `holding` in kv_holding_waiting (scheduler.py:227, drained first, 913-917) with
    `hold_key` its FCFS order there; `loading` its asynchronous load runs (the worker has
    not reported it); `recved` reported and not yet taken up (finished_recving, S:247),
    `failed` reported failed under the policy "recompute" (failed_recving, S:248);
    `inflight` in _inflight_prefills (S:434: an async load, or a chunk short of the
    prompt), whose remaining blocks an async load must leave free (S:3088-3092)."""

    holding: object = False
    hold_key: object = 0
    loading: object = False
    recved: object = False
    failed: object = False
    inflight: object = False


@dataclass(frozen=True, slots=True)
class Drafts:
    """A slot's speculative-decoding state between two synchronous steps: the drafts it
    carries into the next step (request.py:183) and whether its last chunk was a prefill
    chunk (scheduler.py:1634-1636), which the next step's padding rule reads (852, 1137)."""

    count: object = 0
    prefill_chunk: object = False


@dataclass(frozen=True, slots=True)
class InFlight:
    """What of one slot's request is in flight under the AsyncScheduler: output
    placeholders, scheduled tokens not yet processed and the stale share of them
    (request.py:162, 184-201; scheduler.py:1597-1607), whether its last chunk was a
    prefill chunk, and the previous schedule's output for it, delivered in this step:
    tokens scheduled, a sampled token and whether it is EOS, and the order it was served."""

    placeholders: object = 0
    tokens: object = 0
    stale: object = 0
    prefill_chunk: object = False
    pending_tokens: object = 0
    pending_sample: object = False
    pending_eos: object = False
    pending_rank: object = 0
    # with speculative decoding: drafts it scheduled and how many of them are accepted
    pending_spec: object = 0
    pending_accepted: object = 0


@dataclass(frozen=True, slots=True)
class PoolBlock:
    """One usable KV block, with prefix caching: how many requests hold it, the hash of
    the full block it caches (0: none), its place in the free queue's cached tail when
    nobody holds it, and the order it entered the cache in (a lookup takes the first of
    several blocks with one hash, block_pool.py:35-133)."""

    ref_cnt: object = 0
    block_hash: object = 0
    queue_key: object = 0
    cached_at: object = 0


@dataclass(frozen=True, slots=True)
class SchedState(QueueState[SlotState]):
    """The scheduler between two steps: slots, free blocks and the queue-key counters;
    with prefix caching, the pool's blocks and the counters that order its free queue's
    tail and its cache."""

    pool: tuple[PoolBlock, ...] = ()
    queue_tail: object = 0
    next_cached_at: object = 0
    # The engine reached one of its assertions (scheduler.py:1372 or 1170): it is dead.
    crashed: object = False
    # With a KV connector: (the next kv_holding_waiting key,); empty otherwise.
    kv: tuple[object, ...] = ()

    @staticmethod
    def initial(num_slots: int, cfg: RuleConfig) -> SchedState:
        """No request has arrived; every usable block is free (and, with prefix caching,
        holds no hash)."""
        exact = not cfg.abstract_cache
        slot = SlotState(table=(0,) * (cfg.table_len if exact else 0),
                         in_flight=(InFlight(),) if cfg.async_scheduling else (),
                         drafts=(Drafts(),) if cfg.num_spec_tokens else (),
                         nulled=(0,) * len(cfg.kv_windows),
                         kv=(KVSlot(),) if cfg.kv_connector else ())
        return SchedState(slots=tuple(slot for _ in range(num_slots)),
                          free_blocks=cfg.usable_blocks, kv=(0,) if cfg.kv_connector else (),
                          pool=tuple(PoolBlock() for _ in range(cfg.pool_blocks if exact else 0)))


def _unread_switches_pinned(cfg: RuleConfig) -> RuleConfig:
    """`cfg` with each switch its rules do not read set to the pinned release's value: the
    prefix-hit cap without a prefix cache (cache_rules.lookup), the lone-request threshold
    rule with no threshold (rules._threshold gives 0 either way), the separate input
    budget when both budgets are the same number, the padding forms without speculative
    decoding (rules._padding) and the prefix-hit occasion of padding without a prefix cache
    (a waiting request has computed tokens only from a hit), the FCFS victim rule under
    PRIORITY (rules._victim), and the index fix-up of a victim ahead of the running loop's
    index when the victim is always running[-1] (FCFS, rules._running_loop)."""
    return replace(
        cfg,
        cap_prefix_hit=cfg.cap_prefix_hit or not cfg.prefix_caching,
        threshold_off_when_alone=cfg.threshold_off_when_alone
        or cfg.long_prefill_token_threshold == 0,
        separate_input_budget=cfg.separate_input_budget
        or cfg.token_budget == cfg.max_num_batched_tokens,
        spec_pad_room=cfg.spec_pad_room or not cfg.num_spec_tokens,
        pad_after_prefix_hit=(cfg.pad_after_prefix_hit or not cfg.num_spec_tokens
                              or not cfg.prefix_caching),
        pad_assertion=cfg.pad_assertion or not cfg.num_spec_tokens,
        threshold_skips_padding=cfg.threshold_skips_padding and bool(cfg.num_spec_tokens),
        victim_latest=cfg.victim_latest or cfg.policy_priority,
        victim_reindex=(cfg.victim_reindex
                        or not (cfg.policy_priority or not cfg.victim_latest)))


def _span(tokens: int, block_size: int, max_model_len: int) -> int:
    return min(-(-(tokens + block_size - 1) // block_size), -(-max_model_len // block_size))


def within_bounds(cfg: RuleConfig, slots: int, depth: int, num_tokens: int) -> RuleConfig:
    """The rule config for a bounded query: `slots` requests of at most `num_tokens` tokens
    over `depth` steps. Block tables need only cdiv(num_tokens, block_size) entries, and
    the pool only as many blocks as the run can ever allocate (at most one allocation per
    request and step): the pool's other blocks stay free and without a hash all along, and
    such blocks are interchangeable (the free queue gives them out first, in any order), so
    they are counted in `free_blocks` but need no state. Nothing the scheduler decides
    changes."""
    if not cfg.prefix_caching or cfg.abstract_cache:
        return cfg
    # Drafts and lookahead slots reach past a request's tokens (kv_cache_manager.py:541-544).
    num_tokens += cfg.num_spec_tokens + cfg.num_lookahead_tokens
    entries = min(cfg.table_len, -(-num_tokens // cfg.block_size))
    new_blocks = min(cfg.max_new_blocks, entries)
    exact = replace(cfg, table_len=entries, max_new_blocks=new_blocks,
                    pool_blocks=min(cfg.pool_blocks, depth * slots * new_blocks))
    return exact if cache_model_fits(exact) else counted_cache(exact)


def counted_cache(cfg: RuleConfig) -> RuleConfig:
    """The rule config with its prefix cache counted (model/vllm/abstract_cache.py): an
    over-approximation of the exact pool at any size, so a bounded HOLDS on it holds on
    the exact rules, and a witness is kept only once the exact reference confirms it."""
    return replace(cfg, abstract_cache=True)


def ranged_rule_config(ops: Ops, base: Config, values: Mapping[str, object]) -> RuleConfig:
    """The RuleConfig of `base` with the RANGED_FIELDS taken from `values` (ints or
    symbolic terms), derived fields following them as Config's properties derive them."""
    if base.enable_prefix_caching and not all(
            isinstance(values[name], int) for name in ("num_gpu_blocks", "max_model_len")):
        # The pool and the block tables are the state's shape: their sizes stay fixed.
        raise ValueError("with prefix caching, num_gpu_blocks and max_model_len cannot be "
                         "ranged; give them fixed values")
    if base.hybrid_kv and not all(isinstance(values[name], int) for name in (
            "max_model_len", "max_num_batched_tokens")):
        # A sliding window's admission cap and Mamba's block size follow them.
        raise ValueError("with KV cache groups, max_model_len and max_num_batched_tokens "
                         "cannot be ranged; give them fixed values")
    # The switches from_config pins when unread may be read once fields are ranged.
    cfg = replace(RuleConfig.from_config(base),
                  threshold_off_when_alone=base.rules.threshold_off_when_alone,
                  separate_input_budget=base.rules.input_budget)
    blocks = values["num_gpu_blocks"]
    wm = cfg.watermark_blocks
    if not isinstance(blocks, int) and base.watermark and base.rules.watermark_check:
        # int(watermark * num_blocks) (kv_cache_manager.py:205-208) with a symbolic pool:
        # the floor of the exact rational product.
        w = Fraction(str(base.watermark))
        wm = ops.floordiv(blocks * w.numerator, w.denominator)
    budget = values["max_num_batched_tokens"]
    if base.max_num_scheduled_tokens is not None:
        budget = base.max_num_scheduled_tokens
    seqs = values["max_num_seqs"]
    if cfg.prefix_caching and not isinstance(budget, int):
        cfg = replace(cfg, max_new_blocks=cfg.table_len)
    return replace(
        cfg, token_budget=budget, max_num_batched_tokens=values["max_num_batched_tokens"],
        max_num_seqs=seqs,
        max_num_active_reqs=(seqs if base.max_num_active_seqs is None
                             or not base.rules.active_seqs_cap else base.max_num_active_seqs),
        max_model_len=values["max_model_len"], usable_blocks=blocks - 1, watermark_blocks=wm,
        long_prefill_token_threshold=(values["long_prefill_token_threshold"]
                                      if base.rules.long_prefill_cap else 0))


# The largest prefix-cache state the symbolic rules take on (after `within_bounds`): the
# pool's blocks and the block tables are encoded block by block, so a larger one is left
# to the explicit explorer and is outside what `batchproof config` can search.
MAX_SYMBOLIC_TABLE = 4
MAX_SYMBOLIC_POOL = 8


def cache_model_fits(cfg: RuleConfig) -> bool:
    """The prefix-cache state of a bounded rule config is small enough for z3."""
    return not cfg.prefix_caching or cfg.abstract_cache or (
        cfg.table_len <= MAX_SYMBOLIC_TABLE and cfg.pool_blocks <= MAX_SYMBOLIC_POOL)


def counted_pool(cfg: RuleConfig) -> str | None:
    """Why a bounded rule config carries its prefix cache counted (`counted_cache`), or
    None when it carries the exact pool or none."""
    if not cfg.abstract_cache:
        return None
    return (f"the prefix cache is counted, not carried block by block (the exact pool would "
            f"need {cfg.table_len}-entry block tables and a {cfg.pool_blocks}-block pool, the "
            f"symbolic rules carry at most {MAX_SYMBOLIC_TABLE} and {MAX_SYMBOLIC_POOL}): an "
            "over-approximation, so HOLDS holds on the exact rules and a witness counts "
            "only once the exact reference confirms it")


def symbolic_limit(cfg: RuleConfig) -> str | None:
    """Why z3 cannot take this bounded rule config (its prefix cache, or the AsyncScheduler
    with speculative decoding), or None."""
    if cache_model_fits(cfg):
        return None
    return (f"beyond the symbolic prefix cache: the bounded query needs {cfg.table_len}-entry "
            f"block tables and a {cfg.pool_blocks}-block pool, the symbolic rules take at "
            f"most {MAX_SYMBOLIC_TABLE} and {MAX_SYMBOLIC_POOL} (fewer --slots or --depth, a "
            "larger block size, --method explore, or --no-enable-prefix-caching)")
