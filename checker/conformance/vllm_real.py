"""Drive vLLM's REAL V1 `Scheduler` (v0.32.0, on CPU) over a workload; record each step.

Set-up (recipe: shared/reference/vllm_v1_rules.md, Part 2). The synchronous `Scheduler`
(`async_scheduling=False`), prefix caching off, a stub Llama `config.json` in a temporary
directory (no weights, no tokenizer, `HF_HUB_OFFLINE=1`), a fake `KVCacheConfig` with
`num_blocks = cfg.num_gpu_blocks` and one full-attention group of `cfg.block_size`, and
fake model outputs. vLLM is imported lazily: this module imports without it.

The workload contract, as driven here:
- steps count from 1; step s = add the requests with `arrival_step == s` (workload list
  order), then one `schedule()`, then one `update_from_output()`;
- `Request.arrival_time` = the request's position in `Workload.arrival_order()`;
- `priority` as given; `max_tokens` through `SamplingParams`; EOS token id 2;
- a request samples a token in a step only if, after `schedule()`, its
  `num_computed_tokens >= num_tokens` (a partial prefill chunk samples nothing); the
  token is EOS when the workload has an EOS entry (request, step), else token 100.

How each StepRecord field is read (all right after `schedule()` unless said otherwise):
- `scheduled`: `SchedulerOutput.num_scheduled_tokens` items. It is a plain dict filled
  in service order (scheduler.py:855 running loop, 1365 waiting loop); under PRIORITY a
  victim that was already scheduled is popped from it (scheduler.py:817), as it should;
- `admitted`: `scheduled_new_reqs` ids (admission order); `resumed`: the ids of
  `scheduled_cached_reqs.req_ids` that are in its `resumed_req_ids` set, which are the
  tail of that list in admission order (scheduler.py:1709-1719). When vLLM runs its V2
  model runner it reports resumed requests as new (scheduler.py:1418-1420); the driver
  then splits them by the status each had before `schedule()` (WAITING vs PREEMPTED);
- `preempted`: `SchedulerOutput.preempted_req_ids` is a set, so the order comes from a
  wrapper around this scheduler instance's `_preempt_request` that records each victim's
  id as it is called (call order = preemption order); the driver checks that the recorded
  ids equal the set;
- `finished`: after `update_from_output()`, each scheduled request (service order) whose
  status is finished: FINISHED_STOPPED -> "stop", FINISHED_LENGTH_CAPPED -> "length";
- `free_blocks`: `kv_cache_manager.block_pool.get_num_free_blocks()`;
- `num_computed_tokens`, `running`, `waiting`: every request the scheduler holds,
  `running` list order then waiting order (`kv_holding_waiting` then `waiting`, each in
  its pop order: a PRIORITY queue iterates in heap-pop order);
- `token_budget_left`: `cfg.token_budget - sum(scheduled)`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from model.core.errors import InputError
from model.core.types import FINISH_LENGTH, FINISH_STOP, EosEvent, RequestSpec, StepRecord, Workload
from model.vllm.config import Config, check_requests_admissible

EOS_TOKEN_ID = 2
OTHER_TOKEN_ID = 100
PROMPT_TOKEN_ID = 7
INSTALL_HINT = (
    "vLLM's real scheduler is needed: in a separate venv run "
    "`pip install -e '.[vllm]'` then `pip uninstall -y torchvision torchaudio torchcodec` "
    "(see README), then `pytest -m conformance`"
)

# A tiny Llama: only its shape is read (no weights, no tokenizer are loaded).
_STUB_MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 1024,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}


@functools.cache
def vllm_unavailable_reason() -> str | None:
    """None when vLLM's scheduler imports, else why not (with the fix)."""
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed. {INSTALL_HINT}"
    try:
        _vllm()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
        return f"vllm does not import ({type(exc).__name__}: {exc}). {INSTALL_HINT}"
    return None


def vllm_available() -> bool:
    """True when vLLM's real Scheduler can be imported here."""
    return vllm_unavailable_reason() is None


@functools.cache
def _vllm() -> SimpleNamespace:
    """vLLM's classes, imported once, quietly and offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus
    from vllm.v1.structured_output import StructuredOutputManager

    init_none_hash(sha256)
    return SimpleNamespace(
        torch=torch, CacheConfig=CacheConfig, ModelConfig=ModelConfig,
        SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig, SamplingParams=SamplingParams,
        sha256=sha256, get_request_block_hasher=get_request_block_hasher, Scheduler=Scheduler,
        FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
        Request=Request, RequestStatus=RequestStatus,
        StructuredOutputManager=StructuredOutputManager,
    )


@functools.cache
def _stub_model_dir() -> str:
    """A directory holding only the stub config.json (kept for the process's lifetime)."""
    path = tempfile.mkdtemp(prefix="batchproof-vllm-stub-")
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(_STUB_MODEL_CONFIG, f)
    return path


@functools.cache
def _vllm_config(cfg: Config) -> Any:
    """vLLM's VllmConfig for `cfg` (cached: building it is the slow part)."""
    from checker.conformance.validation import scheduler_config_kwargs

    v = _vllm()
    try:
        scheduler_config = v.SchedulerConfig(**scheduler_config_kwargs(cfg))
    except ValueError as exc:
        raise InputError(f"vLLM's SchedulerConfig rejects the config: {exc}") from None
    model_config = v.ModelConfig(model=_stub_model_dir(), skip_tokenizer_init=True,
                                 max_model_len=cfg.max_model_len)
    cache_config = v.CacheConfig(block_size=cfg.block_size, enable_prefix_caching=False)
    vllm_config = v.VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                               cache_config=cache_config)
    vllm_config.cache_config.num_gpu_blocks = cfg.num_gpu_blocks
    _check_config_kept(cfg, vllm_config)
    return vllm_config


def _check_config_kept(cfg: Config, vllm_config: Any) -> None:
    """VllmConfig's post-init may rewrite fields; fail loudly if it changed ours."""
    sc = vllm_config.scheduler_config
    want = _scheduler_fields(cfg)
    got = {k: getattr(sc, k) for k in want if k != "max_model_len"}
    got["max_model_len"] = vllm_config.model_config.max_model_len
    if got != want:
        changed = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        raise RuntimeError(f"vLLM rewrote scheduler settings (ours, vLLM's): {changed}")
    if vllm_config.scheduler_config.async_scheduling:
        raise RuntimeError("vLLM turned async scheduling on; the driver needs the sync Scheduler")


def _scheduler_fields(cfg: Config) -> dict[str, Any]:
    from checker.conformance.validation import scheduler_config_kwargs

    fields = scheduler_config_kwargs(cfg)
    fields.pop("is_encoder_decoder")
    fields.pop("async_scheduling")
    return fields


def new_scheduler(cfg: Config) -> Any:
    """A fresh real `Scheduler` for `cfg` with a fake KV cache of `cfg.num_gpu_blocks`."""
    v = _vllm()
    vllm_config = _vllm_config(cfg)
    _check_config_kept(cfg, vllm_config)  # the cached config must not drift between runs
    spec = v.FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=1, head_size=1,
                               dtype=v.torch.float32)
    kv_cache_config = v.KVCacheConfig(
        num_blocks=cfg.num_gpu_blocks, kv_cache_tensors=[],
        kv_cache_groups=[v.KVCacheGroupSpec(["layer"], spec)])
    return v.Scheduler(vllm_config, kv_cache_config, v.StructuredOutputManager(vllm_config),
                       block_size=cfg.block_size)


def make_request(spec: RequestSpec, arrival_time: int, block_size: int) -> Any:
    """vLLM's Request for `spec`: prompt of `prompt_len` tokens, EOS id 2."""
    v = _vllm()
    params = v.SamplingParams(max_tokens=spec.max_tokens)
    params.update_from_generation_config({}, eos_token_id=EOS_TOKEN_ID)
    return v.Request(
        request_id=spec.id,
        prompt_token_ids=[PROMPT_TOKEN_ID] * spec.prompt_len,
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(arrival_time),
        priority=spec.priority,
        block_hasher=v.get_request_block_hasher(block_size, v.sha256),
    )


def _waiting(sched: Any) -> Iterator[Any]:
    yield from sched.kv_holding_waiting
    yield from sched.waiting


def _admitted_resumed(v: SimpleNamespace, sched: Any, out: Any,
                      status_before: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(admitted, resumed) ids of this step, each in admission order."""
    new_ids = tuple(r.req_id for r in out.scheduled_new_reqs)
    cached = out.scheduled_cached_reqs
    resumed = tuple(rid for rid in cached.req_ids if rid in cached.resumed_req_ids)
    if getattr(sched, "use_v2_model_runner", False):  # resumed reported as new
        preempted = v.RequestStatus.PREEMPTED
        resumed = tuple(rid for rid in new_ids if status_before.get(rid) == preempted)
        new_ids = tuple(rid for rid in new_ids if status_before.get(rid) != preempted)
    return new_ids, resumed


class _PreemptionLog:
    """Wraps one scheduler instance's `_preempt_request` to record victims in order."""

    def __init__(self, sched: Any) -> None:
        self.ids: list[str] = []
        original = sched._preempt_request

        def recording(request: Any, *args: Any, **kwargs: Any) -> Any:
            self.ids.append(request.request_id)
            return original(request, *args, **kwargs)

        sched._preempt_request = recording


@dataclass(frozen=True, slots=True)
class RealRun:
    """One run of the real scheduler: its records and, per step, the requests that
    sampled a token in that step (so an EOS entry there would take effect)."""

    records: tuple[StepRecord, ...]
    sampled: tuple[frozenset[str], ...]

    def effective_eos(self, workload: Workload) -> tuple[EosEvent, ...]:
        """The EOS entries of `workload` that name a step in which the request sampled.

        The others had no effect on this run, so dropping them leaves it unchanged.
        """
        return tuple(e for e in workload.eos
                     if 1 <= e.step <= len(self.sampled) and e.id in self.sampled[e.step - 1])


def run_real_vllm(workload: Workload) -> tuple[StepRecord, ...]:
    """The StepRecords of vLLM's real Scheduler on `workload` (see the module doc)."""
    return run_real_vllm_detailed(workload).records


def run_real_vllm_detailed(workload: Workload) -> RealRun:
    """`run_real_vllm`, also returning which requests sampled in each step."""
    if (reason := vllm_unavailable_reason()) is not None:
        raise RuntimeError(reason)
    check_requests_admissible(workload)
    v = _vllm()
    cfg = workload.config
    sched = new_scheduler(cfg)
    log = _PreemptionLog(sched)
    arrivals: dict[int, list[tuple[int, RequestSpec]]] = {}
    for position, spec in enumerate(workload.arrival_order()):
        arrivals.setdefault(spec.arrival_step, []).append((position, spec))
    eos = workload.eos_steps()
    held: dict[str, Any] = {}
    finish_names = {v.RequestStatus.FINISHED_STOPPED: FINISH_STOP,
                    v.RequestStatus.FINISHED_LENGTH_CAPPED: FINISH_LENGTH}
    records: list[StepRecord] = []
    sampled_ids: list[frozenset[str]] = []
    for step in range(1, workload.steps + 1):
        for position, spec in arrivals.get(step, ()):
            held[spec.id] = make_request(spec, position, cfg.block_size)
            sched.add_request(held[spec.id])
        status_before = {r.request_id: r.status for r in _waiting(sched)}
        log.ids.clear()
        out = sched.schedule()
        scheduled = tuple(out.num_scheduled_tokens.items())
        admitted, resumed = _admitted_resumed(v, sched, out, status_before)
        preempted = tuple(log.ids)
        if set(preempted) != set(out.preempted_req_ids or ()):
            raise RuntimeError(f"step {step}: recorded preemptions {preempted} != "
                               f"SchedulerOutput.preempted_req_ids {out.preempted_req_ids}")
        running = tuple(r.request_id for r in sched.running)
        waiting = tuple(r.request_id for r in _waiting(sched))
        computed = tuple((r.request_id, r.num_computed_tokens)
                         for r in (*sched.running, *_waiting(sched)))
        free_blocks = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        req_ids = [rid for rid, _ in scheduled]
        sampled = [
            [EOS_TOKEN_ID if step in eos.get(rid, ()) else OTHER_TOKEN_ID]
            if held[rid].num_computed_tokens >= held[rid].num_tokens else []
            for rid in req_ids
        ]
        sampled_ids.append(frozenset(rid for rid, t in zip(req_ids, sampled, strict=True) if t))
        sched.update_from_output(out, v.ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled))
        finished = tuple((rid, finish_names.get(held[rid].status, held[rid].status.name.lower()))
                         for rid in req_ids if held[rid].is_finished())
        records.append(StepRecord(
            step=step,
            scheduled=scheduled,
            admitted=admitted,
            resumed=resumed,
            preempted=preempted,
            finished=finished,
            free_blocks=free_blocks,
            num_computed_tokens=computed,
            running=running,
            waiting=waiting,
            token_budget_left=cfg.token_budget - sum(n for _, n in scheduled),
        ))
    return RealRun(records=tuple(records), sampled=tuple(sampled_ids))
