"""SGLang (v0.5.22) as an EngineModel: the rules of model/sglang/rules.py, the reference of
model/sglang/reference.py, and the Step observables of a reference run."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from model.core.engine import EngineModel
from model.core.errors import InputError
from model.core.observe import StepFold, observed_step
from model.core.ops import CONCRETE, Bool, Ops
from model.core.rule_parts import same_queue_orders
from model.core.slots import lay_out
from model.core.types import (
    FINISH_LENGTH,
    FINISH_STOP,
    SlotObs,
    SlotSpec,
    Step,
    StepRecord,
    Workload,
)
from model.sglang import rules
from model.sglang.config import ENGINE_SGLANG, SGLANG_VERSION, Config, parse_config, rejection
from model.sglang.reference import (
    BATCH_DECODE,
    BATCH_MIXED,
    BATCH_PREFILL,
    FINISH_ABORT,
    SGLangScheduler,
    check_prompt,
)

_KIND = {BATCH_PREFILL: rules.KIND_PREFILL, BATCH_DECODE: rules.KIND_DECODE,
         BATCH_MIXED: rules.KIND_OTHER}


def check_admissible(workload: Workload) -> None:
    """Requests SGLang refuses before scheduling (see check_prompt)."""
    for r in workload.requests:
        check_prompt(workload.config, r)


def records_to_steps(workload: Workload, records: Sequence[StepRecord]) -> tuple[Step, ...]:
    """Step observables of a reference run, slot i = i-th request in arrival order.

    The record names the running batch, the chunked request and the waiting list after
    scheduling; a request's own KV (`blocks`) is its computed tokens rounded up to pages
    less the cache hit it was admitted with (computed - scheduled in the step it joined;
    whole pages), less the last prompt page of a fully cached prompt from the step after its
    prefill on (the tree's copy, model/sglang/reference.py `_process_results`)."""
    observer = StepObserver(workload)
    return tuple(observer.advance(rec) for rec in records)


class StepObserver(StepFold):
    """`records_to_steps` one record at a time (StepFold): each request's outputs, computed
    tokens, cache hit, retractions and deduplicated pages, the queues and the chunked
    request."""

    FORKED = ("outputs", "computed", "hits", "retractions", "deduped")

    def __init__(self, workload: Workload) -> None:
        self.cfg: Config = workload.config
        self.rcfg = rules.SGLangRuleConfig.from_config(self.cfg)
        self.ordered = workload.arrival_order()
        self.outputs = {r.id: 0 for r in self.ordered}
        self.computed = {r.id: 0 for r in self.ordered}
        self.hits = {r.id: 0 for r in self.ordered}
        self.retractions = {r.id: 0 for r in self.ordered}
        self.deduped = {r.id: 0 for r in self.ordered}
        self.running: tuple[str, ...] = ()
        self.waiting: tuple[str, ...] = ()
        self.chunked: str | None = None

    def advance(self, rec: StepRecord) -> Step:
        """The observables of the next record's step."""
        extra = dict(rec.extra)
        # Under EAGLE a running request's KV row ends at kv_allocated (past its committed
        # length after a decode), and a decode row appends its whole accepted run.
        allocated = {rid: n for rid, n in extra.get("kv_allocated", ())}
        spec_decode = self.cfg.speculative and extra["batch"] == "decode"
        arrived = {r.id for r in self.ordered if r.arrival_step == rec.step}
        sched = dict(rec.scheduled)
        rank = {rid: k for k, (rid, _) in enumerate(rec.scheduled)}
        after = dict(rec.num_computed_tokens)
        finished = dict(rec.finished)
        now_chunked = extra["chunked_req"]
        slots = []
        released = 0
        for i, spec in enumerate(self.ordered):
            rid = spec.id
            n = sched.get(rid, 0)
            now = after.get(rid, 0)
            if rid in rec.admitted or rid in rec.resumed:
                self.hits[rid] = now - n
            if rid in rec.preempted:
                self.deduped[rid] = 0
            sampled = n > 0 and rid != now_chunked
            run = n if spec_decode else 1
            held_now = rid in rec.running or rid == now_chunked
            self.retractions[rid] += rid in rec.preempted
            slots.append(SlotObs(
                held=(rid in self.running or rid in self.waiting or rid in arrived
                      or rid == self.chunked),
                was_running=rid in self.running,
                was_waiting=rid in self.waiting or rid in arrived,
                scheduled=n, serve_rank=rank.get(rid, 0), admitted=rid in rec.admitted,
                resumed=rid in rec.resumed, preempted=rid in rec.preempted,
                finished=rid in finished, finished_stop=finished.get(rid) == FINISH_STOP,
                sampled=sampled, num_tokens=spec.prompt_len + self.outputs[rid],
                num_computed_tokens_before=self.computed[rid], num_computed_tokens=now,
                num_output_tokens=self.outputs[rid] + run * int(sampled),
                blocks=(self.cfg.pages(allocated.get(rid, now)) - self.hits[rid]
                        - self.deduped[rid] if held_now else 0),
                num_preemptions=self.retractions[rid], running_after=rid in rec.running,
                waiting_after=rid in rec.waiting,
                queue_key=rec.waiting.index(rid) if rid in rec.waiting else 0,
                run_key=rec.running.index(rid) if rid in rec.running else 0,
                prompt_len=spec.prompt_len,
                max_tokens=self.cfg.clip_max_new_tokens(spec.prompt_len, spec.max_tokens),
                priority=0, arrival_time=i,
                spec_scheduled=self.rcfg.num_spec_tokens if spec_decode and sampled else 0,
                spec_accepted=n - 1 if spec_decode and sampled else 0))
            dedup = (sampled and self.outputs[rid] == 0 and rid not in finished
                     and not self.cfg.disable_radix_cache
                     and spec.cached_prefix_len >= spec.prompt_len
                     and spec.prompt_len % self.cfg.page_size == 0)
            self.deduped[rid] += self.cfg.page_size * int(dedup)
            released += self.cfg.page_size * int(dedup)
            self.outputs[rid] += run * int(sampled)
            self.computed[rid] = now
        released += sum(o.blocks for o in slots if o.finished)
        step = observed_step(rec, slots, self.rcfg, released,
                             step_kind=_KIND.get(extra["batch"], rules.KIND_OTHER))
        self.running = tuple(r for r in rec.running if r not in finished)
        self.waiting = rec.waiting
        self.chunked = now_chunked
        return step


def same_behaviour(ops: Ops, a: rules.SGLangState, b: rules.SGLangState) -> Bool:
    """Two states from which the scheduler behaves the same: equal slots, pool, latch and
    ratio, both queues in the same relative order. Key counters and retraction counts
    steer nothing."""
    cons: list[Bool] = [a.free == b.free, a.batch_is_full == b.batch_is_full,
                        a.ratio_n == b.ratio_n, a.ratio_b == b.ratio_b,
                        a.last_apart == b.last_apart]
    for x, y in zip(a.slots, b.slots, strict=True):
        cons += [x.status == y.status, x.kv == y.kv, x.computed == y.computed,
                 x.allocated == y.allocated, x.outputs == y.outputs,
                 x.retracted == y.retracted]
    cons += same_queue_orders(ops, a.slots, b.slots, (
        (lambda s: ops.or_(s.status == rules.RUNNING, s.status == rules.STALE),
         lambda s: s.run_key),
        (lambda s: s.status == rules.WAITING, lambda s: s.wait_key)))
    return ops.and_(*cons)


# ---------------------------------------------------------------------------------------
# The rules as a simulator, and their StepRecords (for refinement tests)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotRun:
    """A workload laid out on slots and the rules' concrete run of it."""

    cfg: rules.SGLangRuleConfig
    specs: tuple[SlotSpec, ...]
    ids: tuple[str, ...]
    states: tuple[rules.SGLangState, ...]
    steps: tuple[Step, ...]


def run_rules(workload: Workload) -> SlotRun:
    """Run the rules under ConcreteOps on a workload (slot i = i-th arrival)."""
    sw = lay_out(workload, rules.SGLangRuleConfig.from_config(workload.config))
    state = rules.initial_state(len(sw.specs), sw.cfg)
    states, steps = [state], []
    for t, eos in enumerate(sw.eos):
        spec = sw.spec[t] if sw.spec else None  # EAGLE's verify choices
        state, observed = rules.step(CONCRETE, sw.cfg, sw.specs, state, eos, spec)
        states.append(state)
        steps.append(observed)
    return SlotRun(sw.cfg, sw.specs, sw.ids, tuple(states), tuple(steps))


def to_record(observed: Step, ids: Sequence[str]) -> StepRecord:
    """The StepRecord of a concrete rules Step, without the engine-specific extras."""
    slots = list(enumerate(observed.slots))
    served = sorted((o.serve_rank, i) for i, o in slots if o.scheduled > 0)
    running = sorted((o.run_key, i) for i, o in slots if o.running_after)
    waiting = sorted((o.queue_key, i) for i, o in slots if o.waiting_after)
    chunked = [i for i, o in slots if o.scheduled > 0 and not o.sampled]
    victims = sorted((o.queue_key, i) for i, o in slots if o.preempted)
    finished = [(k, i) for k, i in served if observed.slots[i].finished]
    finished += [(len(slots), i) for i, o in slots if o.finished and o.scheduled == 0]

    def reason(o: SlotObs) -> str:
        if not o.sampled:
            return FINISH_ABORT
        return FINISH_STOP if o.finished_stop else FINISH_LENGTH

    held = [i for _, i in running] + chunked + [i for _, i in waiting]
    return StepRecord(
        step=observed.step,
        scheduled=tuple((ids[i], observed.slots[i].scheduled) for _, i in served),
        admitted=tuple(ids[i] for _, i in served if observed.slots[i].admitted),
        resumed=tuple(ids[i] for _, i in served if observed.slots[i].resumed),
        preempted=tuple(ids[i] for _, i in victims),
        finished=tuple((ids[i], reason(observed.slots[i])) for _, i in finished),
        free_blocks=observed.free_blocks,
        num_computed_tokens=tuple((ids[i], observed.slots[i].num_computed_tokens
                                   if not observed.slots[i].waiting_after else 0)
                                  for i in held),
        running=tuple(ids[i] for _, i in running),
        waiting=tuple(ids[i] for _, i in waiting),
        token_budget_left=observed.token_budget_left,
    )


def describe_step(record: StepRecord) -> str:
    """One line of SGLang facts: batch kind, budgets, ratio, latch, retractions, and under
    EAGLE the KV rows' ends."""
    x = dict(record.extra)
    parts = [f"{x['batch']}"]
    if x["rem_input_tokens"] is not None:
        parts.append(f"rem_input={x['rem_input_tokens']}")
    if x["rem_chunk_tokens"] is not None:
        parts.append(f"rem_chunk={x['rem_chunk_tokens']}")
    if x["rem_total_tokens"] is not None:
        parts.append(f"rem_total={x['rem_total_tokens']}")
    parts.append(f"ratio={x['new_token_ratio']}")
    if x["new_token_ratio_after"] != x["new_token_ratio"]:
        parts[-1] += f"->{x['new_token_ratio_after']}"
    if x["batch_is_full"]:
        parts.append("batch_is_full")
    if x["chunked_req"] is not None:
        parts.append(f"chunked={x['chunked_req']}")
    if x["retracted"]:
        parts.append("retracted=" + ",".join(x["retracted"]))
    if x["aborted"]:
        parts.append("aborted=" + ",".join(x["aborted"]))
    if x.get("kv_allocated"):  # EAGLE: each request's KV row end
        parts.append("kv_allocated=" + ",".join(f"{rid}:{n}" for rid, n in x["kv_allocated"]))
    return " ".join(parts)


def step_choices(scheduler: SGLangScheduler) -> tuple[dict[str, dict[str, int]], ...]:
    """EAGLE's choices of the step the scheduler just ran, other than the default (every
    verify accepting no draft), as `step` keyword arguments: every accepted count from 0
    to the most a verify accepts less one, for each request the step's decode verified."""
    ids = scheduler.last_verified
    top = scheduler.cfg.max_accept_len - 1
    out = []
    for counts in itertools.product(range(top + 1), repeat=len(ids)):
        accepted = {rid: c for rid, c in zip(ids, counts, strict=True) if c}
        if accepted:
            out.append({"accepted": accepted})
    return tuple(out)


def _parse(raw: object) -> Config:
    return parse_config(raw)


def _scheduler(cfg: Config) -> SGLangScheduler:
    if not isinstance(cfg, Config):
        raise InputError("the sglang engine needs an SGLang config")
    return SGLangScheduler(cfg)


RULES_TABLE: tuple[tuple[str, str, str], ...] = (
    ("managers/scheduler.py:3785-3835 (3830-3833: an empty running batch becomes the last "
     "batch, latch False, schedule_batch.py:2364)", "SGLangScheduler._merge_last_batch",
     "rules._finish (merge at the end of the step)"),
    ("managers/scheduler.py:3954-4004", "SGLangScheduler._get_new_batch_prefill", "rules._prefill"),
    ("managers/scheduler.py:3907-3925", "SGLangScheduler._num_allocatable_reqs",
     "rules._prefill (allocatable)"),
    ("managers/schedule_policy.py:209-311, 437-515", "SGLangScheduler._sort_waiting",
     "rules._sort_waiting"),
    ("managers/schedule_policy.py:1092-1173; mem_cache/prefill_budget.py:141-144",
     "PrefillAdder.add_chunked_req", "rules._continue_chunk, rules.continuation_len"),
    ("managers/schedule_policy.py:1336-1584; mem_cache/prefill_budget.py:114-129",
     "PrefillAdder.add_one_req", "rules._admit_waiting, rules.new_chunk_len"),
    ("managers/schedule_policy.py:830-900; mem_cache/prefill_budget.py:155-167",
     "PrefillAdder.budget_state, _charge", "rules._Adder.charge, rules._admit_waiting"),
    ("managers/scheduler.py:4251-4288", "SGLangScheduler._mix_running", "rules._mix"),
    ("managers/scheduler.py:4335-4428", "SGLangScheduler._update_running_batch",
     "rules._decode"),
    ("managers/schedule_batch.py:3298-3426 (3379: survivors kept in retraction-sort order)",
     "SGLangScheduler._retract_decode", "rules._retract, rules._keep_retraction_order"),
    ("managers/scheduler_components/new_token_ratio_tracker.py:21-49", "RatioTracker",
     "rules._decayed, rules._decode (estimate), rules.step (reset)"),
    ("managers/schedule_batch.py:1913-1950 (1901-1911: an EOS past max_new_tokens is a "
     "length finish)", "SGLangScheduler._process_results", "rules._finish"),
    ("managers/scheduler_components/batch_result_processor.py:394; "
     "mem_cache/unified_radix_cache.py:1080-1154", "SGLangScheduler._process_results "
     "(a fully cached prompt's recomputed token, or last page)", "rules._finish (dedup)"),
    ("page size: managers/schedule_policy.py:827-828, 851-900, 1345-1353, 1516-1573 "
     "(paged extends in the budgets, one page per request, a new chunk cut to whole pages)",
     "PrefillAdder._pages, _charge, add_one_req", "rules.paged, rules.page_floor, "
     "rules._Adder.charge, rules.new_chunk_len"),
    ("page size: mem_cache/allocator/paged.py:41-133, 136-170 (pages past the last partly "
     "filled one); mem_cache/allocator/base.py:86-105 (max_new_tokens clip)",
     "SGLangScheduler._allocate, Config.clip_max_new_tokens", "rules._serve, "
     "rules.max_new_tokens"),
    ("page size: managers/schedule_batch.py:3250-3296 (a page per request on a page "
     "boundary)", "SGLangScheduler._decode_fits", "rules._decode_need"),
    ("page size: mem_cache/unified_radix_cache.py:1148; mem_cache/common.py:203-245; "
     "managers/schedule_policy.py:342-352, 437-446 (whole-page matches; LPM's key)",
     "SGLangScheduler._cache_hit, _lpm_match", "rules._prefill (hit_len, lpm_len)"),
    ("EAGLE: arg_groups/speculative_hook.py:985-1015, 1165-1176 (the non-overlap spec-v2 "
     "path on CPU, 48 running requests by default, topk 1 verifies steps + 1 tokens); "
     "mem_cache/allocation_sizing.py:28-93 (the reserve, twice the per-decode length)",
     "Config.speculative, alloc_len_per_decode, decode_reserve, max_accept_len",
     "SGLangRuleConfig.from_config (decode_reserve, num_spec_tokens)"),
    ("EAGLE: managers/schedule_batch.py:3260-3278 (the spec-v2 decode need), 3298-3385 "
     "(retraction converges on it)", "SGLangScheduler._decode_fits, _spec_decode_need",
     "rules._decode_need"),
    ("EAGLE: speculative/eagle_utils.py:1112-1170; mem_cache/allocation.py:773-841 (the "
     "row grown to ceil_page(committed + reserve), kv_allocated_len)",
     "SGLangScheduler._spec_allocate", "rules._serve_spec, rules._spec_row_end"),
    ("EAGLE: managers/scheduler_components/batch_result_processor.py:766-830, 942-1060 "
     "(the accepted run committed and appended); managers/schedule_batch.py:1901-1950 "
     "(EOS in the run, a run past max_new_tokens a length finish)",
     "SGLangScheduler._update_running_batch, _process_results",
     "rules._decode (runs), rules._finish (out, stop)"),
    ("EAGLE: managers/schedule_batch.py:3143-3240; batch_result_processor.py:370-378 "
     "(a mixed decode row allocates the reserve and commits one token)",
     "SGLangScheduler._mix_running", "rules._mix, rules._serve_spec"),
    ("managers/scheduler.py:5168-5190, 3820-3833 (not idle while the last extend batch, "
     "merged into a non-empty running batch, still lists an aborted request)",
     "SGLangScheduler._is_fully_idle, _last_apart", "rules.step (fully_idle), "
     "SGLangState.last_apart"),
)


ENGINE = EngineModel(
    name=ENGINE_SGLANG, folder="sglang", title="SGLang", version=SGLANG_VERSION,
    parse_config=_parse, config_to_dict=Config.to_dict, rejection=rejection,
    check_admissible=check_admissible, rule_config=rules.SGLangRuleConfig.from_config,
    initial_state=rules.initial_state, step=rules.step, same_behaviour=same_behaviour,
    scheduler=_scheduler, observe=records_to_steps, observer=StepObserver,
    describe_step=describe_step, rules_table=RULES_TABLE, step_choices=step_choices,  # type: ignore[arg-type]
)
