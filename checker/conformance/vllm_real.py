"""Drive vLLM's REAL V1 `Scheduler` or `AsyncScheduler` (v0.32.0, on CPU) over a workload;
record each step.

Set-up (recipe: shared/reference/vllm_v1_rules.md, Part 2). A `VllmConfig` with
`async_scheduling=False`, a stub Llama `config.json` in a temporary directory (no
weights, no tokenizer, `HF_HUB_OFFLINE=1`), a fake `KVCacheConfig` with
`num_blocks = cfg.num_gpu_blocks` and one full-attention group of `cfg.block_size` (or,
with `cfg.kv_cache_groups`, one group per entry: FullAttentionSpec, SlidingWindowSpec,
MambaSpec in mode "none", or "align" with prefix caching, every page the same size;
`_new_hybrid_scheduler`), and fake
model outputs. With several groups `extra` holds `blocks_held`, {id: real blocks over every
group} for each running request, and `group_blocks`, {id: (real blocks per group)}, read
right after `schedule()` (the null blocks a sliding window leaves are not counted). vLLM
is imported lazily: this module imports without it.

The scheduler class follows `cfg.async_scheduling`: off, the synchronous `Scheduler`; on,
`AsyncScheduler` built directly from the same VllmConfig (notes/vllm_prefix_async.md,
section 8). The CPU platform forces `async_scheduling` off in the VllmConfig
(platforms/cpu.py:329-331), which the class does not read; what async changes in scope is
the class (async_scheduler.py:25-78) and the engine loop, emulated here.

Two cache modes, chosen by the workload's `cfg.enable_prefix_caching`:
- off: `CacheConfig(enable_prefix_caching=False)`; every prompt token is 7 and every
  sampled (non-EOS) token 100 (nothing is hashed into a cache, so ids do not matter);
- prefix: `CacheConfig(enable_prefix_caching=True)`, `init_none_hash(sha256)` and a sha256
  block hasher on every Request (as EngineCore builds them, v1/engine/core.py:231-240),
  and REAL token ids laid out by `TokenIds`: the tokens a prefix group shares are the
  same ids for every request of the group, every other prompt token and each request's
  sampled token are its own. Equal block hashes then mean exactly what the workload
  contract says: a request's block j is its group's when its first (j+1) * block_size
  prompt tokens are the group's, else its own (outputs are always its own).

The workload contract, as driven here:
- steps count from 1; step s = add the requests with `arrival_step == s` (workload list
  order), then one `schedule()`, then one `update_from_output()`: synchronous, of that
  schedule's output (v1/engine/core.py:657-687); async, of the previous step's schedule
  (none in step 1), as `EngineCore.step_with_batch_queue` runs a batch queue of two
  (core.py:698-792, config/vllm.py:577-587): engine step k = schedule(k), then
  update_from_output(k-1);
- `Request.arrival_time` = the request's position in `Workload.arrival_order()`;
- `priority` as given; `max_tokens` through `SamplingParams`; EOS token id 2;
- a request samples a token in a step only if, right after `schedule()`, its chunk is not
  a prefill chunk (`not request.is_prefill_chunk`, set by `_update_after_schedule`,
  scheduler.py:1634-1636; before any update, so under async it is read before the
  previous output lands); the token, planned then and delivered with that schedule's
  output, is EOS when the workload has an EOS entry (request, step), else the request's
  sampled token.

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
- `finished`: the requests this step's `update_from_output()` finished, in the service
  order of the schedule it updates (async: the previous one), each whose status turned
  finished in that call: FINISHED_STOPPED -> "stop", FINISHED_LENGTH_CAPPED -> "length".
  Under async a request preempted meanwhile still gets its stale token and may finish
  from the waiting queue; one finished meanwhile gets nothing (scheduler.py:2080-2100);
- `free_blocks`: `kv_cache_manager.block_pool.get_num_free_blocks()`;
- `num_computed_tokens`, `running`, `waiting`: every request the scheduler holds,
  `running` list order then waiting order (`kv_holding_waiting` then `waiting`, each in
  its pop order: a PRIORITY queue iterates in heap-pop order);
- `token_budget_left`: `cfg.token_budget - sum(scheduled)`.

With prefix caching on, `extra` holds the reference's cache facts, read from the real
engine (model/vllm/reference.py defines them), in the reference's order:
- `prefix_hits`: for each request admitted or resumed in the step (admission order),
  its `num_computed_tokens` right after `schedule()` minus the tokens scheduled for it
  (the waiting loop sets `num_computed_tokens` to the hit, scheduler.py:1369, and
  `_update_after_schedule` adds the scheduled tokens, 1616-1631);
- `blocks_in_use`: the distinct blocks in the full-attention manager's `req_to_blocks`
  right after `schedule()` (a block shared by two requests counts once);
- `cached_blocks`: the blocks `block_pool.cached_block_hash_to_block` maps to, every copy
  of a hash counted (block_pool.py:35-133);
- `evictable_blocks`: the blocks of the free queue that hold a hash;
- `released_blocks`: free blocks after `update_from_output()` minus `free_blocks`.

With async scheduling, `extra` also holds `sampled`: the ids, in service order, whose
chunk in this step's schedule samples a token (delivered by the next step's update).

Speculative decoding (`cfg.speculative_method`; notes/vllm_spec_asserts.md, A5). The
VllmConfig gets a SpeculativeConfig built offline: ngram (and ngram_gpu) with no draft
model, draft_model (and medusa) with the stub as draft, eagle/eagle3 with the stub's
config.json in a directory whose path contains "eagle-" (`SPEC_METHODS_BUILT`); mtp,
suffix, dflash and mlp_speculator cannot be built here and are refused with the reason
(`SPEC_METHODS_UNBUILDABLE`), as is async scheduling with a method vLLM refuses it for.
`new_scheduler` checks that the real scheduler's num_spec_tokens, num_lookahead_tokens,
draft slots (`max_num_new_slots_for_drafting`) and EAGLE block drop are the Config's
derived values, and fails loudly otherwise (a model bug). The fake output of a request
whose chunk samples is 1 + a tokens, the last one EOS when the workload says so, where for
a request with s spec tokens scheduled a = min(the workload's accepted count for (id,
step), s), and a = 0 for a padded admission (a request admitted or resumed with spec
tokens: the waiting loop gives drafts only as -1 placeholders, scheduler.py:1371-1375);
`step` is the schedule's step, as for EOS (under async the output is processed in the next
step). Never `[]` for a request with spec tokens (that stalls it, scheduler.py:2113-2114).
Synchronously, after `update_from_output`, when the step scheduled any token
(EngineCore.post_step, core.py:689-696), `update_draft_token_ids` gives every request of
the batch still alive the workload's draft count for (id, step) (default k) of its sampled
token id; the scheduler itself clears a prefill chunk's. Under async no drafts are given:
the AsyncScheduler sets k -1 placeholders itself (async_scheduler.py:50). `extra` holds,
read right after `schedule()`: `spec_scheduled`, {id: s} for each request with s > 0
spec tokens scheduled (`scheduled_spec_decode_tokens`, service order, padded ones
included); `accepted`, {id: a} for the same requests, the counts applied to this
schedule's output; `blocks_held`, {id: blocks} for each running request (lookahead slots
and rolled-back drafts keep theirs). An AssertionError raised in scheduler.py's
`schedule()` (in scope scheduler.py:1372, `assert num_new_tokens == 1 +
self.num_spec_tokens`, notes B.1, with speculative decoding; and in any mode
scheduler.py:1170, `assert num_new_tokens > 0`, reached by a prefix hit of every token,
which kv_cache_manager.py:289-300's cap rules out) is not a harness failure: the step's
record carries `extra["assertion"]`, worded as the reference words it from the failing
frame's request and token count, with nothing scheduled, admitted, preempted or finished
(at 1170 the request asserted against listed as admitted, or resumed, with 0 tokens), no
requests listed, `free_blocks` as the pool stood; the engine is dead, so every later step
records the same.

A KV connector (`cfg.kv_connector`; checker/conformance/vllm_connector.py). The VllmConfig
gets a KVTransferConfig naming the harness's own connector (`kv_role` kv_consumer, the
workload's `kv_load_failure_policy`), which vLLM imports and builds itself; the driver
gives it the workload's `kv_hits` to answer `get_num_new_matched_tokens` with. A load is in
flight from the schedule whose connector answer was async and left the request
WAITING_FOR_REMOTE_KVS until the worker reports it: a `kv_loads` entry of step s puts it
in the `KVConnectorOutput` of the output that step's `update_from_output()` processes
(finished_recving; a failed one in failed_recving too), one report per load, others
dropped; under async none in step 1. `finished` then lists the requests a failed load
ended (FINISHED_ERROR -> "error"), in the order reported. `extra` holds `kv_held` (the
blocks of every request the scheduler holds outside `running`, right after `schedule()`)
and, without prefix caching, `released_blocks`. Under async the driver sets the
scheduler's `defer_block_free` as two batches in flight would (scheduler.py:186-191).
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from checker.conformance.importing import unavailable_reason
from model.core.errors import InputError
from model.core.types import (
    FINISH_ABORT,
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    AcceptEvent,
    DraftEvent,
    EosEvent,
    KVLoadEvent,
    RequestSpec,
    StepRecord,
    Workload,
)
from model.vllm.config import GROUP_MAMBA, GROUP_SLIDING, Config, KvGroup, check_requests_admissible
from model.vllm.reference import ZERO_TOKENS_ASSERTION, zero_tokens_assertion

EOS_TOKEN_ID = 2
OTHER_TOKEN_ID = 100  # prefix caching off: every sampled token
PROMPT_TOKEN_ID = 7  # prefix caching off: every prompt token
VOCAB_SIZE = 1 << 24  # the stub's vocabulary: above every id `TokenIds` hands out
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
    "vocab_size": VOCAB_SIZE,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}


@functools.cache
def vllm_unavailable_reason() -> str | None:
    """None when vLLM's scheduler imports, else why not (with the fix)."""
    return unavailable_reason("vllm", _vllm, INSTALL_HINT)


def vllm_available() -> bool:
    """True when vLLM's real Scheduler can be imported here."""
    return vllm_unavailable_reason() is None


def real_vllm_version() -> str:
    """The release of the vLLM this process imports (`vllm.__version__`, less `+cpu`): an
    older release's overlay (checker/conformance/vllm_overlay.py) on sys.path shows as
    that release."""
    return str(_vllm().version)


@functools.cache
def _vllm() -> SimpleNamespace:
    """vLLM's classes, imported once, quietly and offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # vLLM's own caches in a folder per release (0.27.1's model files evict 0.32.0's)
    _cache_root_per_release()
    import torch
    import vllm

    # vLLM may have been imported before the environment could set its level (the live
    # trace's reader does); a shrink builds a Scheduler per candidate, each of which logs
    # the CPU platform's warnings (block size, SSM cache dtype) otherwise.
    logging.getLogger("vllm").setLevel(logging.ERROR)
    from vllm.config import (
        CacheConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.config.kv_transfer import KVTransferConfig
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import (
        get_request_block_hasher,
        init_none_hash,
        make_block_hash_with_group_id,
    )
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        MambaSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.outputs import DraftTokenIds, KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus
    from vllm.v1.structured_output import StructuredOutputManager

    init_none_hash(sha256)
    # the stub's Hugging Face config parsed once (a deep copy for each ModelConfig)
    _memoize_stub_hf_config(importlib.import_module("vllm.config.model"))
    return SimpleNamespace(
        version=vllm.__version__.split("+")[0], torch=torch, CacheConfig=CacheConfig,
        ModelConfig=ModelConfig, ParallelConfig=ParallelConfig,
        SpeculativeConfig=SpeculativeConfig, DraftTokenIds=DraftTokenIds,
        SchedulerConfig=SchedulerConfig, VllmConfig=VllmConfig, SamplingParams=SamplingParams,
        sha256=sha256, get_request_block_hasher=get_request_block_hasher, Scheduler=Scheduler,
        AsyncScheduler=AsyncScheduler,
        make_block_hash_with_group_id=make_block_hash_with_group_id,
        FullAttentionSpec=FullAttentionSpec, KVCacheConfig=KVCacheConfig,
        SlidingWindowSpec=SlidingWindowSpec, MambaSpec=MambaSpec,
        KVCacheGroupSpec=KVCacheGroupSpec, ModelRunnerOutput=ModelRunnerOutput,
        Request=Request, RequestStatus=RequestStatus,
        StructuredOutputManager=StructuredOutputManager, KVTransferConfig=KVTransferConfig,
        KVConnectorOutput=KVConnectorOutput,
    )


@functools.cache
def _stub_model_dir() -> str:
    """A directory holding only the stub config.json (kept for the process's lifetime)."""
    return _write_stub("batchproof-vllm-stub-")


@functools.cache
def _eagle_stub_dir() -> str:
    """The stub config.json again, in a directory whose path contains "eagle-": that is how
    SpeculativeConfig tells an EAGLE draft model from others offline (notes, A5)."""
    return _write_stub("batchproof-eagle-stub-")


#: The speculative methods the harness builds offline, and the draft model each is given
#: ("" none; "stub" the target's stub; "eagle" the stub in an "eagle-" directory).
SPEC_METHODS_BUILT: dict[str, str] = {
    "ngram": "", "ngram_gpu": "", "draft_model": "stub", "medusa": "stub",
    "eagle": "eagle", "eagle3": "eagle",
}
#: The modelled methods it cannot build, and why (vLLM 0.32.0, offline, on CPU).
SPEC_METHODS_UNBUILDABLE: dict[str, str] = {
    "mtp": "SpeculativeConfig needs a draft hf_config whose model_type is an MTP type "
           "(config/speculative.py:1389 raises NotImplementedError for the stub Llama)",
    "suffix": "suffix decoding needs the arctic-inference package "
              "(config/speculative.py:1596-1601 raises ImportError)",
    "dflash": "a DFlash draft model config is needed (SpeculativeConfig rejects the stub)",
    "mlp_speculator": "an MLPSpeculator draft model config is needed (SpeculativeConfig "
                      "raises NotImplementedError for the stub Llama)",
}
#: Methods vLLM refuses with async scheduling on (config/vllm.py:1563-1575).
SPEC_METHODS_SYNC_ONLY = ("ngram", "medusa", "mlp_speculator", "suffix")


def _speculative_config(cfg: Config, model_config: Any, parallel_config: Any) -> Any:
    """vLLM's SpeculativeConfig for `cfg`'s method (InputError for one the harness cannot
    build offline, or one vLLM refuses with async scheduling)."""
    check_spec_buildable(cfg)
    v = _vllm()
    draft = SPEC_METHODS_BUILT[cfg.speculative_method]
    model = {"": None, "stub": _stub_model_dir(), "eagle": _eagle_stub_dir()}[draft]
    # disable_eagle_block_drop is not a field before 0.29.0 (VllmRules.eagle_drop_flag)
    flag = ({"disable_eagle_block_drop": cfg.disable_eagle_block_drop}
            if cfg.rules.eagle_drop_flag else {})
    try:
        return v.SpeculativeConfig(
            method=cfg.speculative_method, num_speculative_tokens=cfg.num_speculative_tokens,
            model=model, target_model_config=model_config,
            target_parallel_config=parallel_config, parallel_drafting=cfg.parallel_drafting,
            **flag)
    except ValueError as exc:
        raise InputError(f"vLLM's SpeculativeConfig rejects the config: {exc}") from None


def check_spec_buildable(cfg: Config) -> None:
    """InputError unless the harness can build `cfg`'s speculative method offline and vLLM
    accepts it with `cfg`'s scheduling (no vLLM needed)."""
    method = cfg.speculative_method
    if method in SPEC_METHODS_UNBUILDABLE:
        raise InputError(f"the conformance harness cannot build speculative_method "
                         f"{method!r} offline: {SPEC_METHODS_UNBUILDABLE[method]}; use one of "
                         f"{', '.join(SPEC_METHODS_BUILT)}")
    if method not in SPEC_METHODS_BUILT:
        raise InputError(f"speculative_method {method!r} is not one the conformance harness "
                         f"builds; use one of {', '.join(SPEC_METHODS_BUILT)}")
    if cfg.async_scheduling and method in SPEC_METHODS_SYNC_ONLY:
        raise InputError(f"vLLM refuses async scheduling with speculative_method {method!r} "
                         "(config/vllm.py:1563-1575: only EAGLE/MTP/draft model/ngram_gpu/"
                         "DSpark/DFlash)")


CONNECTOR_MODULE = "checker.conformance.vllm_connector"


@functools.cache
def _vllm_config(cfg: Config) -> Any:
    """vLLM's VllmConfig for `cfg` (cached: building it is the slow part). It is the same
    for `cfg` with async scheduling on or off: the scheduler class carries it."""
    from checker.conformance.validation import scheduler_config_kwargs

    v = _vllm()
    try:
        scheduler_config = v.SchedulerConfig(**scheduler_config_kwargs(cfg))
    except ValueError as exc:
        raise InputError(f"vLLM's SchedulerConfig rejects the config: {exc}") from None
    model_config = v.ModelConfig(model=_stub_model_dir(), skip_tokenizer_init=True,
                                 max_model_len=cfg.max_model_len)
    cache_config = v.CacheConfig(block_size=cfg.block_size,
                                 enable_prefix_caching=cfg.enable_prefix_caching)
    if cfg.kv_connector:  # the harness's own connector (checker/conformance/vllm_connector.py)
        transfer = v.KVTransferConfig(kv_connector="HarnessConnector", kv_role="kv_consumer",
                                      kv_connector_module_path=CONNECTOR_MODULE,
                                      kv_load_failure_policy=cfg.kv_load_failure_policy)
        vllm_config = v.VllmConfig(scheduler_config=scheduler_config,
                                   model_config=model_config, cache_config=cache_config,
                                   kv_transfer_config=transfer)
    elif not cfg.speculative_method:
        vllm_config = v.VllmConfig(scheduler_config=scheduler_config,
                                   model_config=model_config, cache_config=cache_config)
    else:
        parallel_config = v.ParallelConfig()
        speculative_config = _speculative_config(cfg, model_config, parallel_config)
        try:
            vllm_config = v.VllmConfig(scheduler_config=scheduler_config,
                                       model_config=model_config, cache_config=cache_config,
                                       parallel_config=parallel_config,
                                       speculative_config=speculative_config)
        except ValueError as exc:
            raise InputError(f"vLLM's VllmConfig rejects the config: {exc}") from None
    vllm_config.cache_config.num_gpu_blocks = cfg.num_gpu_blocks
    _check_config_kept(cfg, vllm_config)
    return vllm_config


def _check_config_kept(cfg: Config, vllm_config: Any) -> None:
    """VllmConfig's post-init may rewrite fields; fail loudly if it changed ours."""
    sc = vllm_config.scheduler_config
    want = _scheduler_fields(cfg)
    if cfg.speculative_method and want["max_num_scheduled_tokens"] is None:
        # With a SpeculativeConfig, VllmConfig fills the unset field with
        # max_num_batched_tokens (config/vllm.py:2263-2264), before 0.28.0 less the draft
        # slots of max_num_seqs requests (0.27.1 config/vllm.py:1742-1745): the token budget.
        want["max_num_scheduled_tokens"] = cfg.token_budget
    got = {k: getattr(sc, k) for k in want if k != "max_model_len"}
    got["max_model_len"] = vllm_config.model_config.max_model_len
    if got != want:
        changed = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        raise RuntimeError(f"vLLM rewrote scheduler settings (ours, vLLM's): {changed}")
    if vllm_config.scheduler_config.async_scheduling:
        raise RuntimeError("vLLM turned async scheduling on in the VllmConfig; the driver "
                           "chooses the scheduler class itself")
    if vllm_config.cache_config.enable_prefix_caching != cfg.enable_prefix_caching:
        raise RuntimeError(f"vLLM rewrote enable_prefix_caching to "
                           f"{vllm_config.cache_config.enable_prefix_caching}")


def _scheduler_fields(cfg: Config) -> dict[str, Any]:
    from checker.conformance.validation import scheduler_config_kwargs

    fields = scheduler_config_kwargs(cfg)
    fields.pop("is_encoder_decoder")
    fields.pop("async_scheduling")
    return fields


def new_scheduler(cfg: Config) -> Any:
    """A fresh real `Scheduler` (`AsyncScheduler` when `cfg.async_scheduling`) for `cfg`
    with a fake KV cache of `cfg.num_gpu_blocks`."""
    v = _vllm()
    if cfg.speculative_method:
        check_spec_buildable(cfg)  # the sync config below cannot tell async's refusals
    sync_cfg = replace(cfg, async_scheduling=False)
    vllm_config = _vllm_config(sync_cfg)
    _check_config_kept(sync_cfg, vllm_config)  # the cached config must not drift between runs
    if cfg.hybrid_kv:
        return _new_hybrid_scheduler(v, cfg, vllm_config)
    spec = v.FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=1, head_size=1,
                               dtype=v.torch.float32)
    kv_cache_config = v.KVCacheConfig(
        num_blocks=cfg.num_gpu_blocks, kv_cache_tensors=[],
        kv_cache_groups=[v.KVCacheGroupSpec(["layer"], spec)])
    cls = v.AsyncScheduler if cfg.async_scheduling else v.Scheduler
    sched = cls(vllm_config, kv_cache_config, v.StructuredOutputManager(vllm_config),
                block_size=cfg.block_size)
    if cfg.kv_connector and cfg.async_scheduling:
        # The engine runs the AsyncScheduler with two batches in flight, where a consumer
        # connector defers block frees (scheduler.py:186-191); the VllmConfig built here
        # keeps async scheduling off (the class is chosen above), so the switch is set as
        # that config would set it.
        sched.defer_block_free = True
    if cfg.speculative_method:
        _check_spec_kept(cfg, vllm_config, sched)
    return sched


def mamba_align(cfg: Config) -> bool:
    """Whether a Mamba group of `cfg` runs mamba_cache_mode "align": vLLM switches a Mamba
    model's mode from "none" to "align" when prefix caching is on
    (model_executor/models/config.py:685-701)."""
    return cfg.enable_prefix_caching and any(g.kind == GROUP_MAMBA for g in cfg.kv_cache_groups)


def _group_spec(v: SimpleNamespace, cfg: Config, group: KvGroup) -> Any:
    """The KVCacheSpec of one group, every page the same size (a full-attention page of
    one head of size 1 in float32; the Mamba state padded to it, as vLLM pads a Mamba page
    to the attention page, v1/core/kv_cache_utils.py:1292-1355). A Mamba group runs mode
    "none": its block size is max_model_len (model_executor/models/config.py:705-709) and
    it has k speculative blocks (model_executor/layers/mamba/abstract.py:76-82). With prefix
    caching it runs "align" (`mamba_align`): its block size is the attention block size
    (config.py:696-701), no Mamba2 prefill checkpoint block (a mixer without one)."""
    attention = {"block_size": cfg.block_size, "num_kv_heads": 1, "head_size": 1,
                 "dtype": v.torch.float32}
    if group.kind == GROUP_SLIDING:
        return v.SlidingWindowSpec(**attention, sliding_window=group.sliding_window)
    if group.kind == GROUP_MAMBA:
        page = v.FullAttentionSpec(**attention).page_size_bytes
        align = mamba_align(cfg)
        return v.MambaSpec(shapes=((1,),), dtypes=(v.torch.float32,),
                           block_size=cfg.block_size if align else cfg.max_model_len,
                           page_size_padded=page,
                           mamba_cache_mode="align" if align else "none",
                           num_speculative_blocks=cfg.num_spec_tokens)
    return v.FullAttentionSpec(**attention)


def _new_hybrid_scheduler(v: SimpleNamespace, cfg: Config, vllm_config: Any) -> Any:
    """The real scheduler over a KVCacheConfig of the workload's groups, one layer each,
    with the scheduler block size EngineCore resolves for them (v1/engine/core.py:170-180).
    Under async the sliding-window managers' admission cap is the one of two batches in flight
    (config/vllm.py:576-599): the VllmConfig here is the synchronous one (module
    docstring), which would give one."""
    if mamba_align(cfg):
        # The stub model is not a Mamba model, so MambaModelConfig's switch to align mode
        # (model_executor/models/config.py:685-701) is made here; the scheduler reads the
        # mode from the cache config (scheduler.py:377-379: block-aligned prefill chunks).
        vllm_config.cache_config.mamba_cache_mode = "align"
        vllm_config.cache_config.mamba_block_size = cfg.block_size
    groups = [v.KVCacheGroupSpec([f"layer{i}"], _group_spec(v, cfg, g))
              for i, g in enumerate(cfg.kv_cache_groups)]
    kv_cache_config = v.KVCacheConfig(num_blocks=cfg.num_gpu_blocks, kv_cache_tensors=[],
                                      kv_cache_groups=groups)
    # Several groups without prefix caching: the LCM of their block sizes, as
    # resolve_kv_cache_block_sizes gives it (kv_cache_utils.py:848-861); for one group (a
    # model of Mamba layers only) that group's block size, which the coordinator asserts
    # the scheduler block size is a multiple of (kv_cache_coordinator.py:112-115). With
    # prefix caching (align mode) the hash block size is that function's own answer.
    block_size = math.lcm(*(g.kv_cache_spec.block_size for g in groups))
    hash_block_size = block_size
    if cfg.enable_prefix_caching:  # groups are modelled at 0.32.0 only, which has it
        from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

        block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config,
                                                                   vllm_config)
    cls = v.AsyncScheduler if cfg.async_scheduling else v.Scheduler
    sched = cls(vllm_config, kv_cache_config, v.StructuredOutputManager(vllm_config),
                block_size=block_size, hash_block_size=hash_block_size)
    if mamba_align(cfg) and not sched.need_mamba_block_aligned_split:
        raise RuntimeError("vLLM did not take the Mamba groups into align mode")
    for group, manager in zip(cfg.kv_cache_groups, managers(sched), strict=True):
        if group.kind == GROUP_SLIDING:
            manager.max_admission_blocks_per_request = \
                manager.kv_cache_spec.max_admission_blocks_per_request(
                    cfg.max_in_flight_tokens, cfg.max_model_len)
    if cfg.speculative_method:
        _check_spec_kept(cfg, vllm_config, sched)
    return sched


def managers(sched: Any) -> tuple[Any, ...]:
    """The scheduler's single-type KV cache managers, one per group, in group order."""
    return tuple(sched.kv_cache_manager.coordinator.single_type_managers)


def real_blocks(manager: Any, request_id: str) -> int:
    """Blocks a request holds in one group, the null block left out."""
    return sum(not b.is_null for b in manager.req_to_blocks.get(request_id, ()))


def _check_spec_kept(cfg: Config, vllm_config: Any, sched: Any) -> None:
    """The real scheduler's speculative sizes must be the Config's derived ones (else the
    model's table is wrong for this method: a model bug to report, not to drive around)."""
    spec = vllm_config.speculative_config
    got = {"num_spec_tokens": sched.num_spec_tokens,
           "num_lookahead_tokens": sched.num_lookahead_tokens,
           "draft_slots": spec.max_num_new_slots_for_drafting,
           # before 0.29.0 the drop is use_eagle itself (0.27.1 S:256-257, 281)
           "eagle_block_drop": getattr(sched, "use_eagle_block_drop", sched.use_eagle),
           "kv_manager_eagle_block_drop": sched.kv_cache_manager.use_eagle}
    want = {"num_spec_tokens": cfg.num_spec_tokens,
            "num_lookahead_tokens": cfg.num_lookahead_tokens,
            "draft_slots": cfg.draft_slots,
            "eagle_block_drop": cfg.eagle_block_drop,
            "kv_manager_eagle_block_drop": cfg.eagle_block_drop}
    if got != want:
        changed = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        raise RuntimeError(f"speculative_method {cfg.speculative_method!r}: the model's "
                           f"derived sizes differ from vLLM's (model, vLLM): {changed}; "
                           "model/vllm/config.py is wrong for this method")
    lookahead = getattr(sched, "num_prefill_lookahead", 0)  # not before 0.28.0
    if lookahead > 1 or sched.dynamic_sd_lookup is not None:
        raise RuntimeError(f"speculative_method {cfg.speculative_method!r}: prefill "
                           f"lookahead {lookahead} or dynamic SD is outside "
                           "the modelled scope (at most 1, static k)")


@dataclass(frozen=True, slots=True)
class TokenIds:
    """Real token ids for a workload under prefix caching, from its requests alone.

    Ids are laid out in rows of `width` (a multiple of 1,000 above every prompt length):
    row 0 is below every id handed out (EOS is 2); row 1 + g holds prefix group g's
    shared tokens (groups numbered in workload list order of first use), id
    `width * (1 + g) + position`; the next rows hold each request's own prompt tokens,
    `width * (1 + groups + i) + position` for the i-th request in list order; the row
    after them each request's sampled token, `width * (1 + groups + requests) + i`. With
    prompts under 1,000 tokens a group's token at position p is 1_000 + 1_000 * g + p.
    """

    width: int
    groups: tuple[str, ...]
    requests: tuple[str, ...]  # request ids in workload list order

    @classmethod
    def of(cls, workload: Workload) -> TokenIds:
        """The layout for `workload`; InputError if its ids would pass the stub's vocab."""
        longest = max((r.prompt_len for r in workload.requests), default=0)
        width = 1_000 * (longest // 1_000 + 1)
        groups = tuple(dict.fromkeys(r.prefix_group for r in workload.requests
                                     if r.prefix_group is not None))
        layout = cls(width, groups, tuple(r.id for r in workload.requests))
        top = width * (1 + len(groups) + len(workload.requests)) + len(workload.requests)
        if top >= VOCAB_SIZE:
            raise InputError(f"the workload needs token ids up to {top}, beyond the stub "
                             f"model's vocabulary of {VOCAB_SIZE}; use fewer or shorter "
                             "requests")
        return layout

    def prompt(self, spec: RequestSpec) -> list[int]:
        """The prompt: the group's ids for the first `shared_prefix_len` tokens, then the
        request's own."""
        i = self.requests.index(spec.id)
        shared = spec.shared_prefix_len if spec.prefix_group is not None else 0
        own_row = self.width * (1 + len(self.groups) + i)
        ids = [own_row + p for p in range(spec.prompt_len)]
        if shared:
            group_row = self.width * (1 + self.groups.index(spec.prefix_group))
            ids[:shared] = [group_row + p for p in range(shared)]
        return ids

    def output(self, spec: RequestSpec) -> int:
        """The request's sampled (non-EOS) token, used by no other request."""
        return (self.width * (1 + len(self.groups) + len(self.requests))
                + self.requests.index(spec.id))


def make_request(spec: RequestSpec, arrival_time: int, block_size: int,
                 prompt_token_ids: list[int] | None = None) -> Any:
    """vLLM's Request for `spec`, EOS id 2; its prompt is `prompt_token_ids`, by default
    `prompt_len` copies of token 7."""
    v = _vllm()
    params = v.SamplingParams(max_tokens=spec.max_tokens)
    params.update_from_generation_config({}, eos_token_id=EOS_TOKEN_ID)
    if prompt_token_ids is None:
        prompt_token_ids = [PROMPT_TOKEN_ID] * spec.prompt_len
    return v.Request(
        request_id=spec.id,
        prompt_token_ids=prompt_token_ids,
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(arrival_time),
        priority=spec.priority,
        block_hasher=v.get_request_block_hasher(block_size, v.sha256),
    )


def waiting_in_pop_order(sched: Any) -> Iterator[Any]:
    """The waiting requests in pop order. 0.31.0+ drains `kv_holding_waiting` first;
    0.18.0-0.30.0 have a persistent `skipped_waiting` queue instead, which only requests
    skipped for reasons outside the scope join (remote KV, structured output, a stale
    async output, 0.30.0 scheduler.py:875-890), so it must stay empty here."""
    if getattr(sched, "skipped_waiting", None):
        raise RuntimeError("the real scheduler skipped a request into skipped_waiting, "
                           "outside the modelled scope")
    yield from getattr(sched, "kv_holding_waiting", ())
    yield from sched.waiting


def admitted_and_resumed(v: SimpleNamespace, sched: Any, out: Any,
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


class _CacheProbe:
    """Wraps one scheduler instance's block pool and KV manager to note, per step, cache
    events the records do not show, for the coverage report (nothing is changed; the names
    are `checker.conformance.generate.PROBED_FEATURES`):
    - `prefix:hit_shared` / `prefix:hit_evictable`: a hit adopted a block some request holds
      / an evictable block from the free queue (BlockPool.touch, block_pool.py:752-768);
    - `prefix:hit_same_step`: a hit adopted a block cached earlier in the same step;
    - `prefix:evicted`: a cached block lost its hash on reuse (`_maybe_evict_cached_block`);
    - `prefix:duplicate`: a hash was cached on a second block (BlockHashToBlockMap.insert),
      `prefix:duplicate_after_cap` for a request whose hit the cap cut (it recomputes
      the capped block), `prefix:duplicate_on_resume` for a request preempted before;
    - `prefix:free_still_held`: a freed block stayed held by another request;
    - for a waiting request's `allocate_slots` (after its lookup): `prefix:hit_capped` the
      num_tokens - 1 cap (kv_cache_manager.py:295) left a cached block out of the hit;
      with a hit, `prefix:hit_watermark` the watermark is counted, `prefix:hit_full_isl`
      the full sequence is checked, `prefix:hit_refused` it returned None, and
      `prefix:hit_evictable_need` / `prefix:hit_evictable_refused` the hit held evictable
      blocks, counted in the need (single_type_kv_cache_manager.py:255-260) / and refused.
    """

    def __init__(self, v: SimpleNamespace, sched: Any) -> None:
        self.events: set[str] = set()
        self._cached_now: set[int] = set()  # ids of the blocks cached in this step
        self._capped: set[str] = set()  # requests whose hit the cap cut
        self._allocating: Any = None  # the request of the allocate_slots call under way
        kv = sched.kv_cache_manager
        pool = kv.block_pool
        touch, evict, free = pool.touch, pool._maybe_evict_cached_block, pool.free_blocks
        cache_map = pool.cached_block_hash_to_block
        insert, allocate_slots = cache_map.insert, kv.allocate_slots
        waiting = (v.RequestStatus.WAITING, v.RequestStatus.PREEMPTED)
        block_size = sched.block_size

        def touching(blocks: Any) -> Any:
            for b in blocks:
                self.events.add("prefix:hit_shared" if b.ref_cnt > 0 else "prefix:hit_evictable")
                if b.block_id in self._cached_now:
                    self.events.add("prefix:hit_same_step")
            return touch(blocks)

        def evicting(block: Any) -> Any:
            evicted = evict(block)
            if evicted:
                self.events.add("prefix:evicted")
            return evicted

        def freeing(ordered: Any) -> Any:
            ordered = list(ordered)
            if any(b.ref_cnt > 1 for b in ordered):
                self.events.add("prefix:free_still_held")
            return free(ordered)

        def inserting(key: Any, block: Any) -> Any:
            request = self._allocating
            if cache_map.get_one_block(key) is not None:
                self.events.add("prefix:duplicate")
                if request is not None and request.request_id in self._capped:
                    self.events.add("prefix:duplicate_after_cap")
                if request is not None and request.num_preemptions > 0:
                    self.events.add("prefix:duplicate_on_resume")
            self._cached_now.add(block.block_id)
            return insert(key, block)

        def capped(request: Any, hit_tokens: int) -> bool:
            n = hit_tokens // block_size
            if n != (request.num_tokens - 1) // block_size or n >= len(request.block_hashes):
                return False
            key = v.make_block_hash_with_group_id(request.block_hashes[n], 0)
            return cache_map.get_one_block(key) is not None

        def allocating(request: Any, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: Any = None, *args: Any, **kwargs: Any) -> Any:
            found: set[str] = set()
            hit = num_new_computed_tokens
            if request.status in waiting and capped(request, hit):
                found.add("prefix:hit_capped")
                self._capped.add(request.request_id)
            if hit > 0:
                if (kwargs.get("has_scheduled_reqs", True) and request.status in waiting
                        and kv.watermark_blocks > 0):
                    found.add("prefix:hit_watermark")
                if kwargs.get("full_sequence_must_fit", False):
                    found.add("prefix:hit_full_isl")
                if any(b.ref_cnt == 0 for b in new_computed_blocks.blocks[0]):
                    found.add("prefix:hit_evictable_need")
            self._allocating = request
            try:
                result = allocate_slots(request, num_new_tokens, num_new_computed_tokens,
                                        new_computed_blocks, *args, **kwargs)
            finally:
                self._allocating = None
            if hit > 0 and result is None:
                found.add("prefix:hit_refused")
                if "prefix:hit_evictable_need" in found:
                    found.add("prefix:hit_evictable_refused")
            self.events |= found
            return result

        pool.touch, pool._maybe_evict_cached_block = touching, evicting
        pool.free_blocks, cache_map.insert, kv.allocate_slots = freeing, inserting, allocating

    def start_step(self) -> None:
        """Forget the previous step's events."""
        self.events.clear()
        self._cached_now.clear()


class _AsyncProbe:
    """Wraps one AsyncScheduler instance's KV manager and `_preempt_request` to note, per
    engine step, async events the records do not show, for the coverage report (nothing is
    changed; the names are `checker.conformance.generate.ASYNC_PROBED_FEATURES`):
    - `async:phantom_preemption`: a preemption in schedule(k) for a request whose
      allocation failed (the running loop, scheduler.py:777-844) and which the same engine
      step's update_from_output(k-1) then finishes by EOS: it had already sampled EOS when
      it was given one more token (notes/vllm_prefix_async.md, A7);
    - `async:uncached_block_lost` (prefix caching on): a victim held a full block whose
      tokens are all known (the request has its hash) and computed (within
      `num_computed_tokens`) but which was not cached yet, since async caches at output
      time only `num_computed_tokens - num_output_placeholders` tokens
      (async_scheduler.py:73-77); the synchronous scheduler caches such a block when it
      allocates it (kv_cache_manager.py:607-616). Freed without a hash, it goes to the
      free queue's head and the request's resume cannot hit it (A5).
    """

    def __init__(self, sched: Any) -> None:
        self.events: set[str] = set()
        self._refused: Any = None  # the request whose allocate_slots just returned None
        self._preempting: set[str] = set()  # refused requests that made a preemption
        kv = sched.kv_cache_manager
        allocate_slots, preempt = kv.allocate_slots, sched._preempt_request
        caching = sched.cache_config.enable_prefix_caching
        manager = kv.coordinator.single_type_managers[0]

        def allocating(request: Any, *args: Any, **kwargs: Any) -> Any:
            result = allocate_slots(request, *args, **kwargs)
            self._refused = request if result is None else None
            return result

        def preempting(request: Any, *args: Any, **kwargs: Any) -> Any:
            if self._refused is not None:
                self._preempting.add(self._refused.request_id)
            if caching:
                full = min(len(request.block_hashes),
                           request.num_computed_tokens // sched.block_size)
                blocks = manager.req_to_blocks.get(request.request_id, ())
                if any(b.block_hash is None for b in blocks[:full]):
                    self.events.add("async:uncached_block_lost")
            return preempt(request, *args, **kwargs)

        kv.allocate_slots, sched._preempt_request = allocating, preempting

    def start_step(self) -> None:
        """Forget the previous engine step's events."""
        self.events.clear()
        self._preempting.clear()
        self._refused = None

    def updated(self, finished: tuple[tuple[str, str], ...]) -> None:
        """Note what this engine step's update finished."""
        if any(rid in self._preempting and why == FINISH_STOP for rid, why in finished):
            self.events.add("async:phantom_preemption")


class _SpecProbe:
    """Notes, per step, speculative-decoding events the records do not show, for the
    coverage report (nothing is changed; the names are
    `checker.conformance.generate.SPEC_PROBED_FEATURES`). Before `schedule()` it reads each
    running request's drafts D, tokens T, computed C and placeholders P; after it, a
    request scheduled n tokens with s < |D| spec tokens had its drafts trimmed
    (scheduler.py:703-721, 861-876), by `max_model_len` when n is the `mml - C - 1` cap
    (also when that cap skips it: n <= 0), by the long-prefill threshold when n is the
    threshold, else by the budgets (`token_budget`, `input_budget - draft_slots`). Around
    `allocate_slots` it notes a refusal that only the lookahead slots caused (without
    them the chunk's blocks would fit): `spec:lookahead_refused_running` (the running
    loop then preempts) or `spec:lookahead_refused_waiting` (admission stops). A PRIORITY
    victim that had drafts before the step and none when preempted was scheduled earlier in
    the step and gives back its tokens, draft slots and spec tokens (scheduler.py:814-821):
    `spec:victim_gave_back_drafts`."""

    def __init__(self, sched: Any, cfg: Config) -> None:
        self.events: set[str] = set()
        self._cfg = cfg
        self._sched = sched
        self._before: dict[str, tuple[int, int, int, int]] = {}
        kv = sched.kv_cache_manager
        allocate_slots = kv.allocate_slots
        manager = kv.coordinator.single_type_managers[0]
        pool = kv.block_pool
        bs, mml = cfg.block_size, cfg.max_model_len

        def allocating(request: Any, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: Any = None, *args: Any, **kwargs: Any) -> Any:
            lookahead = kwargs.get("num_lookahead_tokens", 0)
            free = pool.get_num_free_blocks()
            result = allocate_slots(request, num_new_tokens, num_new_computed_tokens,
                                    new_computed_blocks, *args, **kwargs)
            if result is None and lookahead > 0 and num_new_computed_tokens == 0:
                held = len(manager.req_to_blocks.get(request.request_id, ()))
                end = min(request.num_computed_tokens + num_new_tokens, mml)
                if -(-end // bs) - held <= free - (kv.watermark_blocks if request.status
                                                   != v_running else 0):
                    self.events.add("spec:lookahead_refused_running"
                                    if request.status == v_running
                                    else "spec:lookahead_refused_waiting")
            return result

        v_running = _vllm().RequestStatus.RUNNING
        kv.allocate_slots = allocating
        preempt = sched._preempt_request

        def preempting(request: Any, *args: Any, **kwargs: Any) -> Any:
            if (self._before.get(request.request_id, (0,))[0] > 0
                    and not request.spec_token_ids):  # cleared once scheduled (876)
                self.events.add("spec:victim_gave_back_drafts")
            return preempt(request, *args, **kwargs)

        sched._preempt_request = preempting

    def start_step(self) -> None:
        """Forget the previous step's events."""
        self.events.clear()

    def before_schedule(self) -> None:
        """Read the running requests' drafts and counters."""
        self._before = {r.request_id: (len(r.spec_token_ids), r.num_tokens,
                                       r.num_computed_tokens, r.num_output_placeholders)
                        for r in self._sched.running}

    def after_schedule(self, out: Any, scheduled: tuple[tuple[str, int], ...],
                       spec_scheduled: dict[str, int]) -> None:
        """Classify each running request's trimmed drafts (see the class doc)."""
        cfg = self._cfg
        n_of = dict(scheduled)
        for rid, (d, t, c, p) in self._before.items():
            if d == 0:
                continue
            cap = cfg.max_model_len - c - 1
            n = n_of.get(rid, 0)
            if n == 0:
                if cap <= 0:
                    self.events.add("spec:drafts_trimmed_mml")
                continue
            if spec_scheduled.get(rid, 0) >= d:
                continue
            want = t + d + p - c
            if cap < want and n == cap:
                self.events.add("spec:drafts_trimmed_mml")
            elif 0 < cfg.long_prefill_token_threshold == n < want:
                self.events.add("spec:drafts_trimmed_threshold")
            else:
                self.events.add("spec:drafts_trimmed_budget")


def cache_facts(sched: Any, scheduled: tuple[tuple[str, int], ...],
                 entering: set[str], held: dict[str, Any]) -> list[tuple[str, object]]:
    """The extra facts read right after `schedule()` (see the module doc)."""
    kv = sched.kv_cache_manager
    pool = kv.block_pool
    hits = {rid: held[rid].num_computed_tokens - n for rid, n in scheduled if rid in entering}
    tables = kv.coordinator.single_type_managers[0].req_to_blocks
    in_use = {b.block_id for blocks in tables.values() for b in blocks}
    cached = sum(len(entry) if isinstance(entry, dict) else 1
                 for entry in pool.cached_block_hash_to_block._cache.values())
    evictable = sum(1 for b in pool.free_block_queue.get_all_free_blocks()
                    if b.block_hash is not None)
    return [("prefix_hits", hits), ("blocks_in_use", len(in_use)),
            ("cached_blocks", cached), ("evictable_blocks", evictable)]


@dataclass(frozen=True, slots=True)
class RealRun:
    """One run of the real scheduler: its records, per step the requests whose chunk in
    that step's schedule sampled a token (so an EOS entry there would take effect), and per
    step the events `_CacheProbe` and `_AsyncProbe` noted (empty with both features off)."""

    records: tuple[StepRecord, ...]
    sampled: tuple[frozenset[str], ...]
    events: tuple[frozenset[str], ...] = ()

    def effective_eos(self, workload: Workload) -> tuple[EosEvent, ...]:
        """The EOS entries of `workload` that name a step in which the request sampled.

        The others had no effect on this run, so dropping them leaves it unchanged.
        """
        return tuple(e for e in workload.eos
                     if 1 <= e.step <= len(self.sampled) and e.id in self.sampled[e.step - 1])

    def effective_accepted(self, workload: Workload) -> tuple[AcceptEvent, ...]:
        """The accepted entries of `workload` as this run applied them: each names a step
        whose schedule gave the request drafts that were not padding, and counts at most
        the drafts scheduled (the driver applies min(count, scheduled)); the others, and
        counts of 0, had no effect on this run, so the reference's checks (a count above
        the drafts scheduled, or for padding, is refused) hold on the result."""
        out = []
        for e in workload.accepted:
            if not 1 <= e.step <= len(self.records):
                continue
            applied = dict(self.records[e.step - 1].extra).get("accepted")
            if isinstance(applied, dict) and applied.get(e.id, 0) > 0:
                out.append(AcceptEvent(id=e.id, step=e.step, count=applied[e.id]))
        return tuple(out)

    def effective_drafts(self, workload: Workload) -> tuple[DraftEvent, ...]:
        """The drafts entries of `workload` that name a step in which the request was
        scheduled (the drafter proposes only for the batch it ran, core.py:689-696); the
        others had no effect on this run."""
        return tuple(e for e in workload.drafts if 1 <= e.step <= len(self.records)
                     and e.id in dict(self.records[e.step - 1].scheduled))

    def effective(self, workload: Workload) -> Workload:
        """`workload` with only the EOS, accepted and drafts entries that took effect in
        this run (the run of the result is this run)."""
        return replace(workload, eos=self.effective_eos(workload),
                       accepted=self.effective_accepted(workload),
                       drafts=self.effective_drafts(workload))


def run_real_vllm(workload: Workload) -> tuple[StepRecord, ...]:
    """The StepRecords of vLLM's real Scheduler on `workload` (see the module doc)."""
    return run_real_vllm_detailed(workload).records


def run_real_vllm_detailed(workload: Workload,
                           instrument: Callable[[Any], None] | None = None) -> RealRun:
    """`run_real_vllm`, also returning which requests sampled in each step and the probes'
    events; `instrument(scheduler)`, if given, is called once on the fresh scheduler
    before the first step (the branch tracer wraps methods with it)."""
    if (reason := vllm_unavailable_reason()) is not None:
        raise RuntimeError(reason)
    check_requests_admissible(workload)
    v = _vllm()
    cfg = workload.config
    if v.version != cfg.version:  # never compare one release's rules with another's code
        raise RuntimeError(f"the workload is for vLLM {cfg.version} but this process imports "
                           f"vLLM {v.version}; run an overlay of {cfg.version} "
                           "(python -m checker.conformance --vllm-version ... --vllm-overlay)")
    caching = cfg.enable_prefix_caching
    k = cfg.num_spec_tokens
    if (workload.accepted or workload.drafts) and not k:
        raise InputError("the workload gives 'accepted' or 'drafts' choices but its config "
                         "has no speculative decoding; set speculative_method and "
                         "num_speculative_tokens or drop them")
    if workload.drafts and cfg.async_scheduling:
        raise InputError("drafts are not a choice under async scheduling: the AsyncScheduler "
                         "gives every request k placeholder drafts itself "
                         "(async_scheduler.py:50); drop the 'drafts' entries")
    tokens = TokenIds.of(workload) if caching else None
    sched = new_scheduler(cfg)
    if (workload.kv_hits or workload.kv_loads) and sched.connector is None:
        raise InputError("the workload gives 'kv_hits' or 'kv_loads' but its config has no KV "
                         "connector; set kv_connector or drop them")
    calls: list[tuple[str, int, int, bool]] = []  # the connector's answers this step
    if sched.connector is not None:
        sched.connector.answer_with(workload.kv_hits)
        calls = sched.connector.calls
    kv_loads = workload.kv_loads_by_step()
    loading: list[str] = []  # async loads started and not reported, in start order
    log = _PreemptionLog(sched)
    probe = _CacheProbe(v, sched) if caching else None
    async_probe = _AsyncProbe(sched) if cfg.async_scheduling else None
    spec_probe = _SpecProbe(sched, cfg) if k else None
    if instrument is not None:
        instrument(sched)
    arrivals: dict[int, list[tuple[int, RequestSpec]]] = {}
    for position, spec in enumerate(workload.arrival_order()):
        arrivals.setdefault(spec.arrival_step, []).append((position, spec))
    specs = {r.id: r for r in workload.requests}
    eos = workload.eos_steps()
    accepted, drafts = workload.accepted_by_step(), workload.drafts_by_step()
    held: dict[str, Any] = {}
    finish_names = {v.RequestStatus.FINISHED_STOPPED: FINISH_STOP,
                    v.RequestStatus.FINISHED_LENGTH_CAPPED: FINISH_LENGTH}

    def update(out: Any, model_output: Any) -> tuple[tuple[str, str], ...]:
        """update_from_output; the requests it finished, in the schedule's service order."""
        ids = tuple(out.num_scheduled_tokens)
        done = {rid for rid in ids if held[rid].is_finished()}  # finished meanwhile (async)
        sched.update_from_output(out, model_output)
        return tuple((rid, finish_names.get(held[rid].status, held[rid].status.name.lower()))
                     for rid in ids if held[rid].is_finished() and rid not in done)

    def token(rid: str) -> int:
        return tokens.output(specs[rid]) if tokens is not None else OTHER_TOKEN_ID

    aborts_before = workload.aborts_by_step(after_schedule=False)
    aborts_after = workload.aborts_by_step(after_schedule=True)

    def abort(ids: tuple[str, ...]) -> tuple[str, ...]:
        """EngineCore.abort_requests (core.py:554-558), one id at a time: the engine passes
        a batch, which finish_requests walks in set order (scheduler.py:2667-2668), and
        the order frees blocks in; one call per id fixes the order the workload gives.
        Returns the ids the scheduler held."""
        return tuple(rid for rid in ids for _ in sched.finish_requests(
            rid, v.RequestStatus.FINISHED_ABORTED))

    records: list[StepRecord] = []
    sampled_ids: list[frozenset[str]] = []
    events: list[frozenset[str]] = []
    in_flight: tuple[Any, Any] | None = None  # async: schedule(k-1)'s output, its tokens
    crashed: str = ""  # the engine assertion schedule() died at ("" while it runs)
    for step in range(1, workload.steps + 1):
        if crashed:  # the engine is dead: every later step records the same
            records.append(_crash_record(step, crashed, sched))
            sampled_ids.append(frozenset())
            events.append(frozenset())
            continue
        for p in (probe, async_probe, spec_probe):
            if p is not None:
                p.start_step()
        for position, spec in arrivals.get(step, ()):
            prompt = tokens.prompt(spec) if tokens is not None else None
            held[spec.id] = make_request(spec, position, cfg.block_size, prompt)
            sched.add_request(held[spec.id])
        aborted = abort(aborts_before.get(step, ()))
        status_before = {r.request_id: r.status for r in waiting_in_pop_order(sched)}
        remote = v.RequestStatus.WAITING_FOR_REMOTE_KVS
        calls.clear()
        log.ids.clear()
        if spec_probe is not None:
            spec_probe.before_schedule()
        try:
            out = sched.schedule()
        except AssertionError as exc:
            zero = zero_tokens_request(exc)
            crashed = scheduler_assertion(exc)
            if crashed == "" or (not k and zero is None):
                raise
            records.append(_crash_record(step, crashed, sched, zero))
            sampled_ids.append(frozenset())
            events.append(frozenset({"spec:assertion"}) if k else frozenset())
            continue
        scheduled = tuple(out.num_scheduled_tokens.items())
        # A load starts when the connector answered async in this schedule and the waiting
        # loop turned the request WAITING_FOR_REMOTE_KVS (scheduler.py:1320-1341; it may
        # have been promoted from that status in the same pass, S:3175-3193); the worker's
        # reports name only loads in flight.
        answered_async = {c[0] for c in calls if c[3]}
        loading += [r.request_id for r in waiting_in_pop_order(sched)
                    if r.status == remote and r.request_id in answered_async]
        calls.clear()
        # The reports travel in the output this engine step processes: synchronously this
        # schedule's, under async the previous one's (none in step 1).
        reports = (_load_reports(kv_loads.get(step, ()), loading)
                   if not cfg.async_scheduling or in_flight is not None else ())
        admitted, resumed = admitted_and_resumed(v, sched, out, status_before)
        preempted = tuple(log.ids)
        if set(preempted) != set(out.preempted_req_ids or ()):
            raise RuntimeError(f"step {step}: recorded preemptions {preempted} != "
                               f"SchedulerOutput.preempted_req_ids {out.preempted_req_ids}")
        running = tuple(r.request_id for r in sched.running)
        waiting = tuple(r.request_id for r in waiting_in_pop_order(sched))
        computed = tuple((r.request_id, r.num_computed_tokens)
                         for r in (*sched.running, *waiting_in_pop_order(sched)))
        free_blocks = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        facts = (cache_facts(sched, scheduled, {*admitted, *resumed}, held)
                 if caching else [])
        kv_held = _kv_held(sched) if sched.connector is not None else {}
        req_ids = [rid for rid, _ in scheduled]
        samples = tuple(rid for rid in req_ids if not held[rid].is_prefill_chunk)
        if cfg.hybrid_kv:  # every group's real blocks, as the reference counts them
            group_blocks = {rid: tuple(real_blocks(m, rid) for m in managers(sched))
                            for rid in running}
            blocks_held = {rid: sum(n) for rid, n in group_blocks.items()}
        elif k:  # lookahead slots and rolled-back drafts keep their blocks
            tables = sched.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks
            blocks_held = {rid: len(tables.get(rid, ())) for rid in running}
        if k:
            spec_scheduled, applied = _spec_choices(
                step, out, req_ids, samples, {*admitted, *resumed}, accepted.get(step, {}),
                cfg.async_scheduling)
        else:
            spec_scheduled, applied = {}, {}
        model_output = v.ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=[
                _sampled(rid, applied.get(rid, 0), step in eos.get(rid, ()), token(rid))
                if rid in samples else []
                for rid in req_ids],
            kv_connector_output=(_kv_output(v, reports)
                                 if reports and not cfg.async_scheduling else None))
        sampled_ids.append(frozenset(samples))
        aborted += abort(aborts_after.get(step, ()))  # core.py:676-680: before the update
        if not cfg.async_scheduling:
            ending = {rid for rid, _ in reports if not held[rid].is_finished()}
            finished = update(out, model_output)
            # The requests a failed load ended (FINISHED_ERROR, scheduler.py:2306-2325), in
            # the order reported.
            finished += tuple((rid, FINISH_ERROR) for rid, _ in reports if rid in ending
                              and held[rid].status == v.RequestStatus.FINISHED_ERROR)
            if k and sum(n for _, n in scheduled) > 0:  # EngineCore.post_step, core.py:689-696
                alive = [rid for rid in req_ids
                         if rid in sched.requests and not held[rid].is_finished()]
                given = drafts.get(step, {})
                sched.update_draft_token_ids(v.DraftTokenIds(
                    alive, [[token(rid)] * given.get(rid, k) for rid in alive]))
        else:
            finished = ()
            if in_flight is not None:
                ending = {rid for rid, _ in reports if not held[rid].is_finished()}
                in_flight[1].kv_connector_output = _kv_output(v, reports) if reports else None
                finished = update(*in_flight)
                finished += tuple((rid, FINISH_ERROR) for rid, _ in reports if rid in ending
                                  and held[rid].status == v.RequestStatus.FINISHED_ERROR)
            in_flight = (out, model_output)
        if caching:
            released = sched.kv_cache_manager.block_pool.get_num_free_blocks() - free_blocks
            facts.append(("released_blocks", released))
        if async_probe is not None:
            async_probe.updated(finished)
            facts.append(("sampled", samples))
        if sched.connector is not None:
            facts.append(("kv_held", kv_held))
            if not caching:  # (the cache facts say it otherwise)
                facts.append(("released_blocks", sched.kv_cache_manager.block_pool
                              .get_num_free_blocks() - free_blocks))
        if k:
            facts.append(("spec_scheduled", spec_scheduled))
            facts.append(("accepted", applied))
        if k or cfg.hybrid_kv:
            facts.append(("blocks_held", blocks_held))
        if cfg.hybrid_kv:
            facts.append(("group_blocks", group_blocks))
        if k:
            spec_probe.after_schedule(out, scheduled, spec_scheduled)
        records.append(StepRecord(
            step=step,
            scheduled=scheduled,
            admitted=admitted,
            resumed=resumed,
            preempted=preempted,
            finished=tuple((rid, FINISH_ABORT) for rid in aborted) + finished,
            free_blocks=free_blocks,
            num_computed_tokens=computed,
            running=running,
            waiting=waiting,
            token_budget_left=cfg.token_budget - sum(n for _, n in scheduled),
            extra=tuple(facts),
        ))
        step_events = set(probe.events) if probe is not None else set()
        if async_probe is not None:
            step_events |= async_probe.events
        if spec_probe is not None:
            step_events |= spec_probe.events
        events.append(frozenset(step_events))
    return RealRun(records=tuple(records), sampled=tuple(sampled_ids), events=tuple(events))


def _kv_held(sched: Any) -> dict[str, int]:
    """With a KV connector, right after `schedule()`: the blocks of each request the
    scheduler holds outside `running` (waiting, or finished while its load runs and kept
    in `requests`, scheduler.py:2700-2712), from the full-attention manager's tables."""
    tables = sched.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks
    running = {r.request_id for r in sched.running}
    return {rid: len(tables[rid]) for rid in sched.requests
            if rid not in running and tables.get(rid)}


def _load_reports(events: tuple[KVLoadEvent, ...], loading: list[str]
                  ) -> tuple[tuple[str, bool], ...]:
    """The step's load reports (id, failed) that the worker can make: the first the
    workload lists for each load in flight, which it then takes out of `loading`."""
    out: list[tuple[str, bool]] = []
    for event in events:
        if event.id in loading:
            loading.remove(event.id)
            out.append((event.id, event.failed))
    return tuple(out)


def _kv_output(v: SimpleNamespace, reports: tuple[tuple[str, bool], ...]) -> Any:
    """The worker connector's output for `reports`: every one finished, the failed ones
    also failed (as the output aggregator reports a failure only with its finish,
    distributed/kv_transfer/kv_connector/utils.py:169-172)."""
    return v.KVConnectorOutput(finished_recving={rid for rid, _ in reports},
                               failed_recving={rid for rid, failed in reports if failed})


def _sampled(rid: str, num_accepted: int, eos: bool, token: int) -> list[int]:
    """The fake sampled tokens of a request whose chunk samples: 1 + the accepted drafts,
    the last one EOS when the workload says so."""
    out = [token] * (1 + num_accepted)
    if eos:
        out[-1] = EOS_TOKEN_ID
    return out


def _spec_choices(step: int, out: Any, req_ids: list[str], samples: tuple[str, ...],
                  entering: set[str], chosen: dict[str, int], is_async: bool
                  ) -> tuple[dict[str, int], dict[str, int]]:
    """({id: spec tokens scheduled}, {id: drafts accepted}) for this schedule, both in
    service order over the requests with spec tokens scheduled. A request admitted or
    resumed in this step with spec tokens is a padded one (scheduler.py:1131-1153,
    1371-1375: the waiting loop schedules drafts only as -1 placeholders), which the
    verifier never accepts; the others accept min(the workload's count, the drafts
    scheduled) (the reference refuses a count above them: RealRun.effective_accepted)."""
    spec_scheduled: dict[str, int] = {}
    applied: dict[str, int] = {}
    for rid in req_ids:
        drafts = out.scheduled_spec_decode_tokens.get(rid)
        if not drafts:
            continue
        padded = rid in entering
        placeholders = all(t == -1 for t in drafts)
        if rid not in samples or (padded and not placeholders) or (
                not is_async and placeholders != padded):
            raise RuntimeError(f"step {step}: request {rid!r} has spec tokens {list(drafts)} "
                               f"scheduled (entering: {padded}, samples: {rid in samples}), "
                               "which the driver's contract does not expect")
        spec_scheduled[rid] = len(drafts)
        applied[rid] = 0 if padded else min(chosen.get(rid, 0), len(drafts))
    return spec_scheduled, applied


#: The assertion the engine reaches in scope (notes/vllm_spec_asserts.md, B.1): line 1372
#: of 0.32.0's scheduler.py, 1267 of 0.30.0's.
PAD_ASSERTION_STATEMENT = "assert num_new_tokens == 1 + self.num_spec_tokens"
#: scheduler.py:1170's statement in 0.32.0: a request about to be admitted (or resumed)
#: has a token to compute. kv_cache_manager.py:289-300 caps a prefix hit at num_tokens - 1
#: so that it holds; a hit of every token (the cap patched away, or a KV connector's
#: external hit, vllm-project/vllm#30320) reaches it. Found by its statement in
#: `Scheduler.schedule`, not its line, so a patch that moves it leaves it found.
ZERO_TOKENS_STATEMENT = "assert num_new_tokens > 0"


def _failing_frame(exc: AssertionError) -> tuple[Any, Any] | None:
    """(the traceback entry, the FrameSummary) of the innermost frame of `exc` when it is
    in v1/core/sched/scheduler.py; None otherwise."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    frame = traceback.extract_tb(tb)[-1]
    if not frame.filename.replace(os.sep, "/").endswith("v1/core/sched/scheduler.py"):
        return None
    return tb, frame


def zero_tokens_request(exc: AssertionError) -> Any | None:
    """The request `Scheduler.schedule` asserted had tokens to compute, when `exc` is its
    `assert num_new_tokens > 0` (scheduler.py:1170 in 0.32.0) with 0 tokens left to
    it; None for any other assertion."""
    found = _failing_frame(exc)
    if found is None:
        return None
    tb, frame = found
    local = tb.tb_frame.f_locals
    if (frame.name != "schedule" or (frame.line or "").strip() != ZERO_TOKENS_STATEMENT
            or "request" not in local or local.get("num_new_tokens", 1) > 0):
        return None
    return local["request"]


def scheduler_assertion(exc: AssertionError) -> str:
    """The engine-assertion fact for an AssertionError raised in scheduler.py's
    `schedule()`, as the reference words it; "" for one raised anywhere else.

    scheduler.py:1372 (`assert num_new_tokens == 1 + self.num_spec_tokens`) is read from the
    failing frame: the padded request and the tokens the long-prefill threshold left it;
    scheduler.py:1170 (`assert num_new_tokens > 0`, `zero_tokens_request`) likewise: the
    request and its tokens, all of them a prefix hit, at the line the engine ran it."""
    found = _failing_frame(exc)
    if found is None:
        return ""
    tb, frame = found
    where = f"scheduler.py:{frame.lineno}"
    local = tb.tb_frame.f_locals
    if (zero := zero_tokens_request(exc)) is not None:
        v = _vllm()
        fact = zero_tokens_assertion(zero.request_id, zero.num_tokens,
                                     resumed=zero.status == v.RequestStatus.PREEMPTED,
                                     external=local.get("num_external_computed_tokens", 0) > 0)
        return fact.replace(ZERO_TOKENS_ASSERTION, where, 1)
    # Found by its statement (1372 in 0.32.0, 1267 in 0.30.0); the threshold is the local
    # long_prefill_token_threshold in 0.32.0, threshold in 0.30.0.
    threshold = local.get("long_prefill_token_threshold", local.get("threshold"))
    if ((frame.line or "").strip() == PAD_ASSERTION_STATEMENT and "num_new_tokens" in local
            and "request" in local and local.get("pad_spec_decode")
            and threshold == local["num_new_tokens"]):
        k = local["self"].num_spec_tokens
        return (f"{where} AssertionError: request {local['request'].request_id!r} was padded "
                f"to 1 + {k} tokens and the long-prefill threshold cut it to "
                f"{local['num_new_tokens']} (assert num_new_tokens == 1 + num_spec_tokens)")
    return f"{where} AssertionError: {frame.line}"


def _crash_record(step: int, assertion: str, sched: Any, zero: Any = None) -> StepRecord:
    """The record of a step of an engine dead at `assertion` (as the reference writes it):
    nothing scheduled, admitted, preempted or finished, no requests listed, the pool as
    it stood when schedule() raised. At scheduler.py:1170 the request `zero` that reached
    it is listed as the admission (or resumption) asserted against, with 0 tokens: the
    engine never made it (the request stays at the queue's head, nothing allocated)."""
    rid = () if zero is None else (zero.request_id,)
    resumed = zero is not None and zero.status == _vllm().RequestStatus.PREEMPTED
    return StepRecord(step=step, scheduled=tuple((r, 0) for r in rid),
                      admitted=() if resumed else rid, resumed=rid if resumed else (),
                      preempted=(), finished=(),
                      free_blocks=sched.kv_cache_manager.block_pool.get_num_free_blocks(),
                      num_computed_tokens=(), extra=(("assertion", assertion),))


#: The stub directories written by this process (`_stub_model_dir`, `_eagle_stub_dir`):
#: written once, never changed, so the Hugging Face config read from one is always the same.
_STUB_DIRS: set[str] = set()


def _write_stub(prefix: str) -> str:
    path = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(_STUB_MODEL_CONFIG, f)
    _STUB_DIRS.add(path)
    return path


#: Set beside VLLM_CACHE_ROOT when `_cache_root_per_release` chose it, so that a process
#: started from this one (an audit of another release's overlay) chooses its own.
_CACHE_ROOT_CHOSEN = "BATCHPROOF_VLLM_CACHE_ROOT"


def _cache_root_per_release() -> None:
    """Give each vLLM release its own VLLM_CACHE_ROOT (`<vLLM's default root>/batchproof-
    <release>`), unless the user set one, before vLLM is imported.

    vLLM keeps what it learns by importing a model class in VLLM_CACHE_ROOT/modelinfos,
    one file per class holding the hash of the class's source file; a hash that differs is
    a miss, paid by importing the class in a subprocess (about 6.5 s of CPU), which then
    overwrites the file (model_executor/models/registry.py:994-1088). 0.27.1's llama.py,
    llama_eagle.py and llama_eagle3.py differ from 0.30.0's and 0.32.0's, so processes of
    those releases that share a root (CI's steps 7 and 8 run them side by side) undo each
    other's entries and keep paying; with a root per release each pays once. The cache
    stays vLLM's own (entries checked against the source's hash), so what is read is the
    same as what a miss computes. The release is the vllm distribution's version on
    sys.path, as `importlib.metadata` finds it first (an overlay's own dist-info)."""
    chosen = os.environ.get(_CACHE_ROOT_CHOSEN)
    current = os.environ.get("VLLM_CACHE_ROOT")
    if current is not None and current != chosen:
        return  # the user's
    try:
        release = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return
    # vLLM's default root (envs.py:712-717, get_default_cache_root at 338-342)
    base = os.path.join(os.environ.get("XDG_CACHE_HOME")
                        or os.path.join(os.path.expanduser("~"), ".cache"), "vllm")
    root = os.path.join(base, f"batchproof-{release}")
    os.environ["VLLM_CACHE_ROOT"] = os.environ[_CACHE_ROOT_CHOSEN] = root


def _memoize_stub_hf_config(model_module: Any) -> None:
    """Make `model_module.get_config` (the function `ModelConfig.__post_init__` reads the
    model's Hugging Face config with, vllm/config/model.py:669 in 0.32.0) parse each stub's
    config.json once per process: every later call with the same arguments gets a deep
    copy of the first answer, taken before its caller could change it, so no ModelConfig
    shares or sees another's config object. Calls for any other model pass through.

    Every workload builds a VllmConfig (its scheduler settings are its own), and with it one
    ModelConfig, two with a draft model; the parse was about half of building one (1.4 of
    2.9 ms; transformers formats the whole config for an info log, configuration_utils.py
    :963, whatever the level), a third of a conformance mode's CPU with the rest of the
    VllmConfig."""
    original = model_module.get_config
    if getattr(original, "batchproof_memo", None) is not None:
        return  # already wrapped in this process
    memo: dict[Any, Any] = {}

    def get_config(model: Any, *args: Any, **kwargs: Any) -> Any:
        if str(model) not in _STUB_DIRS:
            return original(model, *args, **kwargs)
        try:
            key = _plain((str(model), args, kwargs))
        except TypeError:  # an argument other than plain data: no memo
            return original(model, *args, **kwargs)
        if key not in memo:
            config = original(model, *args, **kwargs)
            memo[key] = copy.deepcopy(config)
            return config
        return copy.deepcopy(memo[key])

    get_config.batchproof_memo = memo  # type: ignore[attr-defined]
    model_module.get_config = get_config


def _plain(value: Any) -> Any:
    """`value` as a key, when it is plain data (None, bool, int, float, str, and tuples,
    lists and dicts of them) or a module-level function, which is its own key (a draft
    model's ModelConfig passes SpeculativeConfig.hf_config_override, a staticmethod that
    reads only the config it rewrites, vllm/config/speculative.py:661); TypeError
    otherwise (a closure, a bound method, any other object)."""
    import inspect

    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if inspect.isfunction(value) and "<locals>" not in value.__qualname__:
        return ("function", value.__module__, value.__qualname__, value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_plain(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((_plain(k), _plain(v)) for k, v in value.items())))
    raise TypeError(f"not plain data: {type(value).__name__}")
