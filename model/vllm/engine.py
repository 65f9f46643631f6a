"""vLLM V1 (v0.32.0) as an EngineModel: the rules of model/vllm/rules.py, the reference
of model/vllm/reference.py, and the Step observables of a reference run; and older
releases (`vllm-v1@0.30.0`, `vllm-v1@0.27.1`), the same EngineModel over another set of
rule switches (model/vllm/config.py VERSIONS), through `ENGINE.extra["versions"]`."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cache

from model.core.arith import cdiv
from model.core.engine import EngineModel
from model.core.errors import InputError
from model.core.observe import StepFold, observed_step
from model.core.ops import Bool, Ops
from model.core.switches import RuleVersions, engine_at_version
from model.core.types import FINISH_ABORT, RequestSpec, SlotObs, Step, StepRecord, Workload
from model.vllm import rules
from model.vllm.config import (
    ENGINE_VLLM_V1,
    VERSIONS,
    VLLM_VERSION,
    Config,
    check_requests_admissible,
    parse_config,
    with_switches,
)
from model.vllm.connector_rules import scope_error
from model.vllm.invariant import covers, facts, quick, well_formed
from model.vllm.reference import VllmV1Scheduler, simulate
from model.vllm.state import (
    PREEMPTED,
    RANGED_FIELDS,
    RUNNING,
    WAITING,
    RuleConfig,
    SchedState,
    counted_cache,
    counted_pool,
    ranged_rule_config,
    symbolic_limit,
    within_bounds,
)
from model.vllm.validation import rejection, validation_constraints


def records_to_steps(workload: Workload, records: Sequence[StepRecord]) -> tuple[Step, ...]:
    """Step observables of a reference run, slot i = i-th request in arrival order.

    The reference reports free blocks but not blocks per request; with prefix caching off
    a running request holds exactly cdiv(min(num_computed_tokens, max_model_len),
    block_size) blocks (kv_cache_manager.py:541-571), a waiting one none, so the
    conservation property still cross-checks the reference's own pool accounting. With
    speculative decoding lookahead slots and rolled-back drafts keep their blocks, so the
    record gives each running request's blocks, and an output carries one token plus the
    accepted drafts.
    """
    observer = StepObserver(workload)
    return tuple(observer.advance(rec) for rec in records)


class StepObserver(StepFold):
    """`records_to_steps` one record at a time (StepFold): what the observation has folded
    so far (each request's outputs, computed tokens and preemptions, the queues, the async
    scheduler's pending output)."""

    FORKED = ("outputs", "ncomp", "preemptions", "gone")

    def __init__(self, workload: Workload) -> None:
        cfg = workload.config
        if cfg.kv_connector and cfg.async_scheduling:  # blocks neither free nor held
            raise InputError("the step observables do not cover a KV connector's deferred "
                             "block frees under the AsyncScheduler (scheduler.py:186-191, "
                             "2766-2801); check such a run with properties/connector.py")
        self.cfg = cfg
        self.rcfg = RuleConfig.from_config(cfg)
        self.ordered = workload.arrival_order()
        self.outputs = {r.id: 0 for r in self.ordered}
        self.ncomp = {r.id: 0 for r in self.ordered}
        self.preemptions = {r.id: 0 for r in self.ordered}
        self.running: tuple[str, ...] = ()
        self.waiting: tuple[str, ...] = ()
        # async: sampled by the previous schedule, and its drafts and accepted drafts
        self.pending: frozenset[str] = frozenset()
        self.pending_spec: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self.gone: set[str] = set()

    def advance(self, rec: StepRecord) -> Step:
        """The observables of the next record's step."""
        facts = dict(rec.extra)
        if "assertion" in facts:
            return _crashed(rec, self.ordered, self.rcfg, self.running, self.ncomp, self.outputs,
                            self.preemptions, self.gone)
        arrived = tuple(r.id for r in self.ordered if r.arrival_step == rec.step)
        was_waiting = set(self.waiting) | set(arrived)
        was_running = set(self.running)
        sched = dict(rec.scheduled)
        rank = {rid: k for k, (rid, _) in enumerate(rec.scheduled)}
        after = dict(rec.num_computed_tokens)
        finished = dict(rec.finished)
        spec = _spec_facts(facts)
        held_blocks = facts.get("blocks_held")
        slots = []
        for i, req in enumerate(self.ordered):
            rid = req.id
            ntok = req.prompt_len + self.outputs[rid]
            n = sched.get(rid, 0)
            now = after.get(rid, self.ncomp[rid])
            if self.rcfg.async_scheduling:  # this schedule's token is delivered next step
                sampled = rid in facts["sampled"]  # type: ignore[operator]
                got = rid in self.pending and rid not in self.gone
                drafts, accepted = self.pending_spec
            else:
                sampled = got = n > 0 and now >= ntok
                drafts, accepted = spec
            got = got and finished.get(rid) != FINISH_ABORT  # an aborted output is dropped
            delivered = _delivered(req, self.outputs[rid], accepted.get(rid, 0),
                                   self.cfg.max_model_len, rid in finished) if got else 0
            self.preemptions[rid] += rid in rec.preempted
            if isinstance(held_blocks, dict):
                blocks = held_blocks.get(rid, 0)
            else:
                blocks = (cdiv(min(now, self.cfg.max_model_len), self.cfg.block_size)
                          if rid in rec.running else 0)
            kv_held = facts.get("kv_held")
            before = self.ncomp[rid]
            if isinstance(kv_held, dict):
                # A KV connector: a request waiting for (or after) its load, or finished
                # while it runs, holds blocks outside `running` (the record says them); one
                # admitted after its load starts from what it loaded, cut one short of its
                # tokens (scheduler.py:3171-3172), not from the load's count.
                blocks = blocks if rid in rec.running else kv_held.get(rid, 0)
                if before and (rid in rec.admitted or rid in rec.resumed):
                    before = now - n
            queue_key = rec.waiting.index(rid) if rid in rec.waiting else 0
            slots.append(SlotObs(
                held=rid in was_running or rid in was_waiting, was_running=rid in was_running,
                was_waiting=rid in was_waiting, scheduled=n, serve_rank=rank.get(rid, 0),
                admitted=rid in rec.admitted, resumed=rid in rec.resumed,
                preempted=rid in rec.preempted, finished=rid in finished,
                finished_stop=finished.get(rid) == "stop", sampled=sampled, num_tokens=ntok,
                num_computed_tokens_before=before, num_computed_tokens=now,
                num_output_tokens=self.outputs[rid] + delivered, blocks=blocks,
                num_preemptions=self.preemptions[rid], running_after=rid in rec.running,
                waiting_after=rid in rec.waiting, queue_key=queue_key,
                run_key=rec.running.index(rid) if rid in rec.running else 0,
                prompt_len=req.prompt_len, max_tokens=req.max_tokens,
                priority=req.priority, arrival_time=i,
                prefix_hit=facts.get("prefix_hits", {}).get(rid, 0),
                spec_scheduled=spec[0].get(rid, 0),
                spec_accepted=spec[1].get(rid, 0) if spec[0].get(rid, 0) else 0))
            self.outputs[rid] += delivered
            # S:2108-2128: the rejected drafts of the output processed roll back (not a
            # stale one: preempted since, its progress is already 0)
            rejected = drafts.get(rid, 0) - accepted.get(rid, 0) if got else 0
            self.ncomp[rid] = now - rejected if now > 0 and rid not in rec.preempted else now
        step = _observed(rec, slots, self.rcfg, facts)
        self.running = tuple(r for r in rec.running if r not in finished)
        self.waiting = tuple(r for r in rec.waiting if r not in finished)
        self.gone |= set(finished)
        self.pending = frozenset(facts.get("sampled", ()))  # type: ignore[arg-type]
        self.pending_spec = spec
        return step


def step_choices(scheduler: VllmV1Scheduler) -> tuple[dict[str, dict[str, int]], ...]:
    """The speculative-decoding choices of the step the scheduler just ran, other than the
    default (nothing accepted, k drafts proposed), as `step` keyword arguments: every
    accepted count up to the drafts scheduled, times every number of drafts a proposer
    that may find fewer could propose."""
    room, draft_ids = scheduler.choice_space()
    k = scheduler.cfg.num_spec_tokens
    accepts = [dict(zip(room, counts, strict=True))
               for counts in itertools.product(*(range(n + 1) for n in room.values()))]
    proposals = [dict(zip(draft_ids, counts, strict=True))
                 for counts in itertools.product(range(k + 1), repeat=len(draft_ids))]
    out = []
    for a in accepts:
        for d in proposals:
            kw = {"accepted": {r: c for r, c in a.items() if c},
                  "drafts": {r: c for r, c in d.items() if c != k}}
            if kw["accepted"] or kw["drafts"]:
                out.append(kw)
    return tuple(out)


def _spec_facts(facts: Mapping[str, object]) -> tuple[dict[str, int], dict[str, int]]:
    """A record's drafts scheduled and accepted counts by request ({} without them)."""
    drafts, accepted = facts.get("spec_scheduled", {}), facts.get("accepted", {})
    assert isinstance(drafts, dict) and isinstance(accepted, dict)
    return drafts, accepted


def _delivered(req: RequestSpec, outputs: int, accepted: int, max_model_len: int,
               finished: bool) -> int:
    """Tokens an output adds: one plus the accepted drafts, cut where check_stop stops
    the request (max_tokens, max_model_len; an EOS is the last token, S:2493-2510)."""
    tokens = 1 + accepted
    if finished:
        tokens = min(tokens, req.max_tokens - outputs,
                     max_model_len - req.prompt_len - outputs)
    return max(tokens, 1)


def _crashed(rec: StepRecord, ordered: Sequence[RequestSpec], rcfg: RuleConfig,
             running: tuple[str, ...], ncomp: Mapping[str, int],
             outputs: Mapping[str, int], preemptions: Mapping[str, int],
             gone: set[str]) -> Step:
    """The step in which the engine reached an assertion (and every later one): nothing is
    scheduled or finished; requests stand as the step found them. At scheduler.py:1170
    the record lists the request that reached it as admitted (or resumed) with 0 tokens,
    the admission the engine asserted against: observed so, as the rules observe it
    (rules.py `_slot_obs`), for `admitted_with_tokens` to judge."""
    held = set(running) | {r.id for r in ordered if r.arrival_step <= rec.step} - gone
    slots = [SlotObs(
        held=r.id in held, was_running=r.id in running, was_waiting=r.id in held
        and r.id not in running, scheduled=0, serve_rank=0, admitted=r.id in rec.admitted,
        resumed=r.id in rec.resumed,
        preempted=False, finished=False, finished_stop=False, sampled=False,
        num_tokens=r.prompt_len + outputs[r.id], num_computed_tokens_before=ncomp[r.id],
        num_computed_tokens=ncomp[r.id], num_output_tokens=outputs[r.id], blocks=0,
        num_preemptions=preemptions[r.id], running_after=False, waiting_after=False,
        queue_key=0, run_key=0, prompt_len=r.prompt_len, max_tokens=r.max_tokens,
        priority=r.priority, arrival_time=i) for i, r in enumerate(ordered)]
    return replace(observed_step(rec, slots, rcfg, 0), assertion=True)


def _observed(rec: StepRecord, slots: list[SlotObs], rcfg: RuleConfig,
              facts: dict[str, object]) -> Step:
    """The step's observables. Without prefix caching a finished request releases all its
    blocks; with it, blocks another request still holds stay held, so the reference
    records how many blocks the step's finished requests freed."""
    if not rcfg.prefix_caching and "kv_held" in facts:
        # A KV connector: a request finished while its load runs keeps its blocks.
        return observed_step(rec, slots, rcfg, int(facts["released_blocks"]))  # type: ignore[call-overload]
    if not rcfg.prefix_caching:
        released = sum(o.blocks for o in slots if o.finished)
        return observed_step(rec, slots, rcfg, released)
    in_use = int(facts["blocks_in_use"])  # type: ignore[call-overload]
    return observed_step(rec, slots, rcfg, int(facts["released_blocks"]),  # type: ignore[call-overload]
                         shared_blocks=sum(o.blocks for o in slots) - in_use,
                         cached_blocks=facts["cached_blocks"],
                         evictable_blocks=facts["evictable_blocks"])


def same_behaviour(ops: Ops, a: SchedState, b: SchedState) -> Bool:
    """Two states from which the scheduler behaves the same: equal slots and pool, queues
    (and, with prefix caching, the free queue's cached tail and the order of copies of a
    hash) in the same relative order. Key counters and preemption counts do not steer
    decisions."""
    cons: list[Bool] = [a.free_blocks == b.free_blocks]
    for x, y in zip(a.slots, b.slots, strict=True):
        cons += [x.status == y.status, x.num_computed_tokens == y.num_computed_tokens,
                 x.num_output_tokens == y.num_output_tokens, x.blocks == y.blocks]
        # With prefix caching and async scheduling, the block tables and what is in flight
        # (compared exactly: equal states behave the same).
        cons += [u == v for u, v in zip(x.table, y.table, strict=True)]
        if x.table:
            # With the cache counted (no tables) num_cached only grows, bounding later
            # hits: a loop of the exact rules may repeat with it grown, so it is left out
            # (the abstraction may then close more loops, never fewer).
            cons.append(x.num_cached == y.num_cached)
        for f, g in zip(x.in_flight, y.in_flight, strict=True):
            cons += [getattr(f, k) == getattr(g, k) for k in (
                "placeholders", "tokens", "stale", "prefill_chunk", "pending_tokens",
                "pending_sample", "pending_eos", "pending_rank", "pending_spec",
                "pending_accepted")]
        for f, g in zip(x.kv, y.kv, strict=True):  # a KV connector: where its load stands
            cons += [getattr(f, k) == getattr(g, k) for k in (
                "holding", "loading", "recved", "failed", "inflight")]
    for p, q in zip(a.pool, b.pool, strict=True):
        cons += [p.ref_cnt == q.ref_cnt, p.block_hash == q.block_hash]
    # Queue and cache order keys matter only relative to each other.
    for x, y in ((a.pool, b.pool),):
        for i in range(len(x)):
            for j in range(len(x)):
                if i != j:
                    cons.append((x[i].queue_key < x[j].queue_key)
                                == (y[i].queue_key < y[j].queue_key))
                    cons.append((x[i].cached_at < x[j].cached_at)
                                == (y[i].cached_at < y[j].cached_at))
    n = len(a.slots)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            x, y, u, v = a.slots[i], a.slots[j], b.slots[i], b.slots[j]
            both_running = ops.and_(x.status == RUNNING, y.status == RUNNING)
            both_waiting = ops.and_(ops.or_(x.status == WAITING, x.status == PREEMPTED),
                                    ops.or_(y.status == WAITING, y.status == PREEMPTED))
            cons.append(ops.implies(both_running,
                                    (x.run_key < y.run_key) == (u.run_key < v.run_key)))
            cons.append(ops.implies(both_waiting,
                                    (x.wait_key < y.wait_key) == (u.wait_key < v.wait_key)))
            if x.kv:  # kv_holding_waiting's order
                both_holding = ops.and_(x.kv[0].holding, y.kv[0].holding)
                cons.append(ops.implies(both_holding, (x.kv[0].hold_key < y.kv[0].hold_key)
                                        == (u.kv[0].hold_key < v.kv[0].hold_key)))
    return ops.and_(*cons)


#: Why the rules do not carry Mamba's align mode.
ALIGN_MODE_REFERENCE_ONLY = (
    "prefix caching beside KV cache groups (Mamba's align mode: position-indexed state "
    "tables, the hybrid coordinator's hit search, block-aligned chunks) is modelled in the "
    "reference only (model/vllm/align_cache.py, conformance modes hybrid-mamba-align*); "
    "the rules run KV cache groups with prefix caching off, so BMC, induction, the theorems "
    "and the array explorer do not apply: the reference explorer searches it "
    "(--method explore)")


def _symbolic_limit(cfg: RuleConfig) -> str | None:
    """Why z3 cannot take this bounded rule config: a KV connector beside what the rules'
    connector does not cover (connector_rules.scope_error), KV cache groups beside prefix
    caching (align mode: the reference only), or the prefix cache's size."""
    if cfg.kv_groups and cfg.prefix_caching:
        return ALIGN_MODE_REFERENCE_ONLY
    return scope_error(cfg) or symbolic_limit(cfg)


def reference_only(cfg: Config) -> str | None:
    """Why only the reference covers `cfg`: Mamba's align mode (KV cache groups with prefix
    caching), which the rules do not run."""
    if cfg.hybrid_kv and cfg.enable_prefix_caching:
        return ALIGN_MODE_REFERENCE_ONLY
    return None


def _initial_state(num_slots: int, cfg: RuleConfig) -> SchedState:
    return SchedState.initial(num_slots, cfg)


_S = "vllm/v1/core/sched/scheduler.py"
# upstream file:line (v0.32.0) -> reference (model/vllm/reference.py) -> rules
# (model/vllm/rules.py), as the two modules' docstrings cite them.
RULES_TABLE: tuple[tuple[str, str, str], ...] = (
    (f"{_S}:2616-2634", "VllmV1Scheduler.add_request", "_arrive"),
    (f"{_S}:591-1556", "VllmV1Scheduler._schedule", "step"),
    (f"{_S}:643-655", "effective_long_prefill_threshold", "_threshold"),
    (f"{_S}:657-858", "VllmV1Scheduler._schedule_running", "_running_loop"),
    (f"{_S}:703-721", "running_num_new_tokens", "running_tokens"),
    (f"{_S}:796-802", "VllmV1Scheduler._pop_victim", "_victim"),
    (f"{_S}:1571-1614", "VllmV1Scheduler._preempt_request", "_preempt"),
    (f"{_S}:912-1369", "VllmV1Scheduler._schedule_waiting", "_waiting_loop"),
    ("vllm/v1/core/kv_cache_manager.py:371-618", "VllmV1Scheduler._allocate_slots",
     "blocks_needed"),
    ("vllm/v1/core/sched/request_queue.py:75-128", "FcfsQueue", "_queue_key"),
    ("vllm/v1/core/sched/request_queue.py:131-197", "PriorityQueue", "_queue_key"),
    (f"{_S}:1616-1642", "VllmV1Scheduler._update_after_schedule", "_update"),
    (f"{_S}:2026-2295", "VllmV1Scheduler._update_from_output", "_update"),
    ("vllm/v1/core/sched/utils.py:98-119", "VllmV1Scheduler._check_stop", "_update"),
    (f"{_S}:2714-2749", "VllmV1Scheduler._free_request", "_update"),
    # A KV connector (model/vllm/connector_rules.py)
    (f"{_S}:912-1395", "VllmV1Scheduler._admit_waiting", "_waiting_loop_kv"),
    (f"{_S}:3123-3193", "VllmV1Scheduler._ready_to_schedule", "_waiting_loop_kv"),
    (f"{_S}:3088-3092", "VllmV1Scheduler._inflight_reserved_blocks", "_waiting_loop_kv"),
    (f"{_S}:2306-2330", "VllmV1Scheduler._update_from_kv_output", "_update"),
)  # older releases' lines: _SWITCH_EVIDENCE below (this table is 0.32.0's, file:line only)


def with_cache_counted(cfg: RuleConfig) -> RuleConfig:
    """The rule config with its prefix cache counted (state.counted_cache), the same
    config without one."""
    return counted_cache(cfg) if cfg.prefix_caching else cfg


def cache_free(cfg: Config) -> Config | None:
    """With prefix caching on, the same config with it off: its rules are far smaller, and
    on its workloads (no request shares a prefix with another) a hit comes only from a
    request meeting its own or a finished request's blocks again, so its witnesses often
    carry over; the reference with the cache on decides each one."""
    return replace(cfg, enable_prefix_caching=False) if cfg.enable_prefix_caching else None


# Where each rule switch's pinned form is in upstream, and what each value does; for a
# switch of an older release, its lines in both releases (S: is
# vllm/v1/core/sched/scheduler.py, C: vllm/config/scheduler.py, both of the release named).
_SWITCH_EVIDENCE = {
    "preemption_gate": "ablation (every release has it; 0.32.0 S:900): on, the waiting loop "
                       "is skipped in a step that preempted; off, it runs anyway",
    "watermark_check": "ablation (0.32.0 K:205-208, 509-516): on, admission while requests "
                       "run keeps int(watermark * num_gpu_blocks) blocks free; off, 0",
    "full_sequence_check": "ablation (0.32.0 K:522-539, S:1270): on, with "
                           "scheduler_reserve_full_isl admission needs the whole current "
                           "sequence to fit the free blocks; off, only the chunk",
    "long_prefill_cap": "ablation (0.32.0 S:708-709, 1155-1156): on, "
                        "long_prefill_token_threshold caps a request's chunk; off, it is "
                        "read as 0",
    "victim_latest": "ablation (0.32.0 S:802, 834): on, FCFS preempts running[-1], the "
                     "latest admitted; off, running[0], the oldest (which may already be "
                     "served in the step: its tokens go back, as under PRIORITY, S:814-832)",
    "spec_pad_room": "first in 0.29.0 (vllm-project/vllm#53962). On (0.29.0 S:965-981; 0.32.0 "
                     "S:1131-1153): a one-token admission is padded to 1 + k only when "
                     "num_computed_tokens + 1 + k + 1 <= max_model_len, else it is scheduled "
                     "unpadded. Off (0.27.1 S:884-897, 0.28.0 S:937-950): padded when "
                     "num_computed_tokens + 1 + k <= max_model_len, else admission stops; a "
                     "request padded up to max_model_len samples past it (#53812). The "
                     "prefix-hit alternative of 0.30.0+ is kept either way",
    "per_request_draft_slots": "first in 0.28.0. On (0.28.0 S:498, 527, 566, 701, 752, 927, "
                               "1134; 0.30.0 S:583, 614, 664, 770, 808, 859, 1035, 1263; "
                               "0.32.0 S:612-614, 661, 710-712, 857, 918-919, 1118, 1367): "
                               "every scheduled request costs max_num_new_slots_for_drafting "
                               "of the input budget (the table of 0.28.0 "
                               "config/speculative.py:1421-1460, 0.30.0 1853-1891: dflash K, "
                               "PARD K, parallel K - 1, draft model 1). Off (0.27.1 "
                               "config/vllm.py:1728-1776, S:459): nothing per request; an "
                               "unset max_num_scheduled_tokens is lowered at startup by the "
                               "slots of max_num_seqs requests, a config left with no token "
                               "or a max_num_scheduled_tokens above that is refused (rule "
                               "draft_slots_reserved); the slots are (K - 1 if parallel) + 1 "
                               "for a draft model (0.27.1 config/speculative.py:1357-1371), "
                               "dflash parallel (984-985)",
    "pad_after_prefix_hit": "after 0.28.0 (in 0.30.0). On (0.30.0 S:1045-1050; 0.32.0 "
                            "S:1134-1139): a waiting request with one token left is padded "
                            "beside scheduled running requests or after a prefix hit "
                            "(num_computed_tokens > 0). Off (0.27.1 S:884-888; 0.28.0 "
                            "S:937-941): beside scheduled running requests only",
    "eagle_drop_flag": "after 0.28.0 (in 0.30.0). On (0.30.0 config/speculative.py:440, "
                       "1915-1917, S:287, 304): SpeculativeConfig.disable_eagle_block_drop "
                       "turns off EAGLE's drop of a prefix hit's last block. Off (0.27.1 "
                       "S:256-257, 281; kv_cache_manager.py:143): every EAGLE-like method "
                       "drops it; the field does not exist and is refused (field_in_version)",
    "pad_assertion": "after 0.28.0 (in 0.30.0). On (0.30.0 S:1266-1267; 0.32.0 S:1371-1372): "
                     "a padded admission the long-prefill threshold cut below 1 + k fails "
                     "`assert num_new_tokens == 1 + self.num_spec_tokens`: the engine dies. "
                     "Off (0.27.1 S:1076-1079; 0.28.0 S:1137-1140): no assertion; the cut "
                     "request is scheduled with the threshold's tokens and k placeholder "
                     "drafts, which its output rolls back as rejected",
    "running_tokens_clamp": "first in 0.28.0 (_reserve_prefill_lookahead). On (0.32.0 "
                            "S:744-753): a running request's tokens are clamped at 0 and it "
                            "is skipped. Off (0.27.1 S:516-553): a request padded up to "
                            "max_model_len (spec_pad_room off, S:884-897) is next given "
                            "max_model_len - num_computed_tokens - 1 = -1 tokens under the "
                            "AsyncScheduler and update_from_output's `assert "
                            "num_tokens_scheduled > 0` (S:1734) fails. Not modelled: "
                            "validation refuses async + speculative decoding with prefix "
                            "caching or max_model_len <= 1 + k there",
    "threshold_skips_padding": "in no release: the fix proposed in vllm-project/vllm#54028. "
                               "Off (0.29.0-0.32.0; 0.32.0 S:1131-1156, 1371-1372): the "
                               "long-prefill threshold cuts a padded request below 1 + k and "
                               "`assert num_new_tokens == 1 + num_spec_tokens` fails. On: no "
                               "padding when 0 < threshold < 1 + k",
    "cap_prefix_hit": "kv_cache_manager.py:289-300 (0.32.0). On: a prefix hit is capped at "
                      "num_tokens - 1, so the last token is always computed. Off: a hit may "
                      "cover the whole prompt, leaving num_new_tokens = 0 at "
                      "scheduler.py:1170 (the crash of vllm-project/vllm#30320)",
    "threshold_off_when_alone": "first in 0.31.0. On (0.32.0 S:640-649, 708-709, 1155-1156): "
                                "the long-prefill threshold is 0 when running + waiting <= 1, "
                                "so a lone request is chunked only by the budget. Off (0.30.0 "
                                "S:661-662, 1066-1068; 0.27.1 S:521-522, 899-901): "
                                "long_prefill_token_threshold cuts every prefill chunk",
    "adaptive_threshold": "first in 0.31.0. On (0.32.0 C:86-90, S:142-144, 650-655): with "
                          "long_prefill_token_threshold_adaptive the threshold is floored at "
                          "max_num_batched_tokens // (running + waiting). Off (the "
                          "config/scheduler.py of 0.30.0 and of 0.27.1 has no such field; "
                          "the threshold is read as is at 0.30.0 S:661, 1066): nothing "
                          "floors it, and the field is refused (rule field_in_version)",
    "active_seqs_cap": "first in 0.31.0. On (0.32.0 C:69-77, S:129-136, 922-924): admission "
                       "stops at max_num_active_seqs (default max_num_seqs). Off (0.30.0 "
                       "S:124, 863-865; 0.27.1 S:109, 690-692): it stops at max_num_seqs; "
                       "max_num_active_seqs does not exist and is refused (field_in_version)",
    "priority_victim_reindex": "first in 0.28.0 (vllm-project/vllm#49206, for #49097). On "
                               "(0.28.0 S:648-656; 0.30.0 S:760-763; 0.32.0 S:808-812): a "
                               "PRIORITY victim removed from before the RUNNING loop's index "
                               "moves the index back. Off (0.27.1 S:590-613): only a victim "
                               "already scheduled in the step moves it back; taking one passed "
                               "over earlier (async's last-token skip, S:488-501) passes over "
                               "the request after the one being served as well",
    "input_budget": "first in 0.28.0. On (0.30.0 S:581-584, 664, 808, 859, 1035, 1263; "
                    "0.32.0 S:611-614, 710-712, 857, 918, 1118, 1367): besides token_budget "
                    "(max_num_scheduled_tokens, else max_num_batched_tokens) an input_budget "
                    "of max_num_batched_tokens caps every request and the step. Off (0.27.1 "
                    "S:459, 485, 523, 687, 907-913): token_budget is the only budget, so a "
                    "max_num_scheduled_tokens above max_num_batched_tokens (no rule refuses "
                    "it, 0.27.1 C:54-60) is the step's budget",
}


@cache
def _at_version(version: str) -> EngineModel:
    """ENGINE named `vllm-v1@VERSION`, parsing configs with that release's switches (whose
    validation refuses the fields the release lacks, model/vllm/validation.py)."""
    if version == VLLM_VERSION:
        return ENGINE
    return engine_at_version(ENGINE, version, parse_config)


ENGINE = EngineModel(
    name=ENGINE_VLLM_V1, folder="vllm_v1", title="vLLM V1", version=VLLM_VERSION,
    parse_config=parse_config, config_to_dict=Config.to_dict, rejection=rejection,
    check_admissible=check_requests_admissible, rule_config=RuleConfig.from_config,
    initial_state=_initial_state, step=rules.step, same_behaviour=same_behaviour,
    scheduler=VllmV1Scheduler, observe=records_to_steps, observer=StepObserver,
    rules_table=RULES_TABLE, simulate=simulate,
    # Not with speculative decoding yet: checker/methods/induction.py's step takes no
    # accepted/proposed draft choices (symbolic.extend gives BMC 0..k each), so its proof
    # would cover only "none accepted, k proposed" (tests/test_vllm_invariant_async.py).
    well_formed=well_formed,
    invariant_facts=facts,
    invariant_covers=covers,
    invariant_quick=quick,
    ranged_fields=RANGED_FIELDS, ranged_rule_config=ranged_rule_config,
    family_constraints=validation_constraints, within_bounds=within_bounds,
    symbolic_limit=_symbolic_limit, reference_only=reference_only,
    witness_config=cache_free, abstraction=counted_pool,
    abstract_config=with_cache_counted,
    sets_fields=("assertion",),
    step_choices=step_choices,  # type: ignore[arg-type]
    # "array_explorer_checked": checker/methods/array's explorer agrees with the reference
    # explorer on this engine (tests/test_array_explore.py, docs/bench_scale.md).
    extra={"versions": RuleVersions(versions=VERSIONS, pinned=VLLM_VERSION,
                                    at_version=_at_version, set_switches=with_switches,
                                    evidence_of=_SWITCH_EVIDENCE.__getitem__),
           "array_explorer_checked": True},
)
