"""Drive SGLang v0.5.22's REAL scheduler on a CPU over a workload; record each step in the
simulation contract, with the same `extra` keys as model/sglang/reference.py.

`python -m checker.conformance.sglang_real --count N --seed S [--page-size P]` compares the
reference with it on N generated workloads (`checker.conformance.sglang_generate`, drawn in
pages of P tokens) and prints the
workloads and steps compared and the agreement; on a divergence the shrunk workload and
its first diverging step side by side (exit 1). Exit 2: SGLang is not installed.

SGLang is imported lazily (this module imports without it) after the stand-ins of
`checker.conformance.sglang_stubs` (torchvision always, triton when it is missing).
Install: `pip install -e '.[sglang]'` then `pip install --no-deps sglang==0.5.22`.

One step is one iteration of upstream's non-overlap `event_loop_normal`
(managers/scheduler.py:1940-1973): add the requests with `arrival_step == s` (workload
list order), `Scheduler.get_next_batch_to_run`, a fake forward, the result processor;
with no batch, the idle hook. Paths are relative to `sglang/srt/`.

What runs for real (upstream's code, unchanged):
- the scheduler's step: `get_next_batch_to_run` -> the merge of the last batch,
  `stash_chunked_request`, `get_new_batch_prefill` / `_get_new_batch_prefill_raw`
  (`get_num_allocatable_reqs`, `SchedulePolicy.calc_priority`, `PrefillAdder` with
  `PrefillBudget`, `ScheduleBatch.init_new`, `prepare_for_extend`, `mix_with_running`),
  `update_running_batch` (`check_decode_mem`, `retract_decode`, `release_req` with its
  tree eviction, `prepare_for_decode`), `filter_batch`, `merge_batch`,
  `Req.init_next_round_input` (the radix match);
- the memory: `ReqToTokenPool`, `TokenToKVPoolAllocator` at page size 1 or
  `PagedTokenToKVPoolAllocator` above (CPU tensors; the choice of
  mem_cache/kv_cache_configurator.py:2594-2616, its torch-native kernels as on a platform
  without triton) and `UnifiedRadixCache` of that page size (with `disable=True` when the
  radix cache is off, as `mem_cache/registry.py:83-147` builds it in both cases);
- set-up: `Scheduler.init_chunked_prefill`, `Scheduler.init_schedule_policy` (the policy
  and `NewTokenRatioTracker.from_config`), `KVCacheConfigurator.resolve_max_num_reqs`
  (mem_cache/kv_cache_configurator.py:2800) for max_running_requests; the server
  arguments through upstream's own test hook `override_server_args`
  (runtime_context.py:1169-1240), the ratio knobs through their environment variables;
- requests: `Req(...)` as `_handle_generate_request` builds it (scheduler.py:2836-2900),
  `init_req_max_new_tokens`, `validate_input_length`, `_add_request_to_queue`;
- results: `SchedulerBatchResultProcessor.process_batch_result_prefill` / `_decode`
  (batch_result_processor.py:258-515, 942-1100: the output token, `update_finish_state`
  with EOS id 2 then max_new_tokens, `release_kv_cache` with the tree insert,
  `checkpoint_kv_cache`), then `tree_cache.flush_pending_backups()`;
- idle: `Scheduler.is_fully_idle()`, then the ratio reset (scheduler.py:5149).

What is stubbed, and why it carries no scheduling decision:
- `Scheduler.__init__` is bypassed (`object.__new__`): it would start the model worker,
  NCCL/gloo groups, ZMQ IPC, the tokenizer and CUDA graphs. The attributes it would set
  are set to the values of a one-rank, non-overlap server of the workload's page size with every
  optional feature off but EAGLE when asked (LoRA, hierarchical cache, disaggregation,
  priority scheduling, prefill delayers, hybrid SWA/SSM);
- `model_config`: vocabulary 2^20, the context length, not multimodal nor
  encoder-decoder, EOS id 2, the native model implementation (so no HF config is read);
  `tp_worker.model_runner`: an attention backend without `extend_attention_block_m`
  (upstream's fallback, 64) and `prefill_aware_swa=False`;
- the forward: `next_token_ids` is EOS (2) for the requests the workload names in that
  step, else 100; `forward_ct`, `processed_tokens_counter` and `_sched_idled` are kept
  as `run_batch` keeps them (scheduler.py:4490-4510);
- `process_batch_result`'s wrapper: the two processor methods are called directly (the
  wrapper adds trace flushing, load publishing, metrics and the health check);
- `on_idle`: only its scheduling part, `is_fully_idle()` then the reset; the rest is DP
  sync, health checks, metrics, KV events and sleeping;
- no-op stand-ins for the grammar and dLLM managers, the DP-attention adapter, the n-gram
  embedding manager, the beam coordinator, the load inquirer (feeds PrefillStats, a log),
  the metrics reporter, the IPC channels and the output streamer: every feature they
  serve is off.

EAGLE speculative decoding (`--spec`, a workload whose config sets
`speculative_algorithm`): the server arguments carry the algorithm and its three knobs
(and the EAGLE default of 48 running requests when none is given, which the server-args
hook would set), `Scheduler.spec_algorithm` is EAGLE/EAGLE3, so upstream's own spec-v2
scheduler paths run: `check_decode_mem` with `_new_tokens_required_next_decode_spec_v2`,
`retract_decode` on it, `prepare_for_decode` -> `eagle_prepare_for_decode` ->
`alloc_for_spec_decode` (the over-allocation, `kv_allocated_len`), the mixed step's spec
branch (`mix_with_running`, the pending token committed in the prefill processor),
`_resolve_spec_v2_tokens` (the accepted run committed to `kv_committed_len`) and
`update_finish_state` over the run. Stubbed for it: the draft and verify forwards (what the
synchronous worker returns is built instead: per row the accepted run of 1 + the
workload's accepted count tokens, token 100 with the EOS last when the workload says so,
padded to the verify width, with `accept_lens`, and the batch's `seq_lens` advanced by the
runs as the worker's `new_seq_lens`, scheduler.py:4697-4720); `on_verify_complete_cpu`
(the adaptive-steps feed, a no-op for fixed knobs); the overlap relay's
`stash_bonus_tokens` (inputs of the forward); the triton kernel that writes the new slots
into the request's KV row, replaced by the same copy in torch. After each forward the batch
gets the `EagleDraftInput` the draft worker leaves (one row per request: top-k proposals,
hidden state, bonus token; no scheduling decision reads their values), so upstream's
`filter_batch` / `merge_batch` carry it as on a server; each row's `topk_index` holds its
request's number, and every step checks that the rows still match the batch's requests.
Records under EAGLE: `num_computed_tokens`
is `kv_committed_len` plus what the step commits after this point (a decode row's run, a
mixed decode row's one token), a decode row's `scheduled` is its run, and the extra
`kv_allocated` lists each running (then chunked) request's `kv_allocated_len`.

Observation only (records, changes nothing): a `PrefillAdder` subclass returned by
`Scheduler.get_prefill_adder_class` (upstream's override point, scheduler.py:2362)
snapshots `rem_input/rem_chunk/rem_total` after each admission call, since they are live
properties (`available + evictable - offsets`, prefill_budget.py:98-106) that would count
the extend twice once `prepare_for_extend` has allocated; the scheduler's
`_add_request_to_queue(req, is_retracted=True)` calls (scheduler.py:4415-4416) give the
retraction victims in order, the beam coordinator's `retire_group` calls (4399) the
aborted requests.

The model's abstract cache hit (`cached_prefix_len`, model/sglang/reference.py) is
reproduced with real tree nodes: request i's first `cached_prefix_len` prompt tokens are
token 500000 + i, the rest 1000 + i (no two requests share a prefix); the allocator gets
that many extra slots (the prefix's whole pages: the tree holds only those), each prefix is
inserted into the real tree and locked
(`inc_lock_ref`), so it is matched at every admission, never evicted, and counts as
neither available nor evictable: outside the modelled pool, as the model says. Every run
ends with the pool identity available + evictable + protected == pool size once no
request holds KV.

How each record field is read: `scheduled` the batch rows in order (`extend_len` for an
extend row, 1 for a decode row); `admitted` / `resumed` the extend rows that waited before
the step, split by `is_retracted`; `preempted` and `retracted` / `aborted` from the
observation hooks; `finished` the batch rows with a finish reason after the results
(FINISH_MATCHED_TOKEN stop, FINISH_LENGTH length), then the aborted; `free_blocks`
`available + evictable` right after scheduling; `num_computed_tokens` `kv_allocated_len`
of each request holding KV (else 0), running then chunked then waiting; `running` the
running batch less finished requests, then the extend rows but the chunked request;
`waiting` the queue after scheduling; the extras as the reference defines them.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import sys
import time
import warnings
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, ClassVar

from checker.conformance.divergence import (
    StepDivergence,
    first_divergence_of,
    items_text,
    record_value,
)
from checker.conformance.importing import unavailable_reason
from checker.conformance.in_turn import each_once, in_turn
from checker.conformance.sglang_generate import MAX_REQUESTS, check_drivable
from model.core.errors import InputError
from model.core.types import (
    FINISH_LENGTH,
    FINISH_STOP,
    AcceptEvent,
    EosEvent,
    RequestSpec,
    StepRecord,
    Workload,
)
from model.sglang.config import EAGLE_DEFAULT_MAX_RUNNING_REQUESTS, SGLANG_VERSION, Config
from model.sglang.reference import (
    BATCH_DECODE,
    BATCH_IDLE,
    BATCH_MIXED,
    BATCH_PREFILL,
    FINISH_ABORT,
)

EOS_TOKEN_ID = 2
OTHER_TOKEN_ID = 100  # every sampled token that is not EOS
VOCAB_SIZE = 1 << 20
_OWN_TOKEN = 1_000  # request i's uncached prompt tokens: 1000 + i
_CACHED_TOKEN = 1_000 + MAX_REQUESTS  # request i's cached prefix: 500000 + i
INSTALL_HINT = (
    "SGLang's real scheduler is needed: in a separate venv run "
    "`pip install -e '.[sglang]'` then `pip install --no-deps sglang==0.5.22` "
    "(docs/sglang_model.md, Conformance), then `pytest -m conformance`")
REAL = f"SGLang {SGLANG_VERSION} (real)"
REFERENCE = "model.sglang.reference"

# The ratio knobs are environment variables upstream (environ.py:595-598), read when used.
_RATIO_ENV = (
    ("init_new_token_ratio", "SGLANG_INIT_NEW_TOKEN_RATIO"),
    ("min_new_token_ratio_factor", "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR"),
    ("new_token_ratio_decay_steps", "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS"),
    ("retract_decode_steps", "SGLANG_RETRACT_DECODE_STEPS"),
)


# ---------------------------------------------------------------------------- importing

@functools.cache
def sglang_unavailable_reason() -> str | None:
    """None when SGLang's scheduler imports here, else why not (with the fix)."""
    return unavailable_reason("sglang", _sglang, INSTALL_HINT)


def sglang_available() -> bool:
    """True when SGLang's real Scheduler can be imported here."""
    return sglang_unavailable_reason() is None


@functools.cache
def _sglang() -> SimpleNamespace:
    """SGLang's classes, imported once, quietly and offline, after the stand-ins."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("SGLANG_LOG_LEVEL", "error")
    from checker.conformance import sglang_stubs

    sglang_stubs.install()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        from sglang.srt.configs.model_config import ModelImpl
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.managers.schedule_batch import (
            FINISH_ABORT as UpstreamAbort,
        )
        from sglang.srt.managers.schedule_batch import (
            FINISH_LENGTH as UpstreamLength,
        )
        from sglang.srt.managers.schedule_batch import (
            FINISH_MATCHED_TOKEN as UpstreamMatched,
        )
        from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
        from sglang.srt.managers.schedule_policy import PrefillAdder
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.managers.scheduler_components.batch_result_processor import (
            SchedulerBatchResultProcessor,
        )
        from sglang.srt.managers.scheduler_components.logprob_result_processor import (
            SchedulerLogprobResultProcessor,
        )
        from sglang.srt.managers.utils import GenerationBatchResult, validate_input_length
        from sglang.srt.mem_cache import allocation
        from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.radix_cache import RadixKey
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.srt.runtime_context import get_context, get_parallel, get_schedule
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.speculative.eagle_info import EagleDraftInput
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    # An EAGLE decode writes its new KV slots into the request's row with a triton kernel,
    # or sgl_kernel's CPU op on a CPU server (mem_cache/allocation.py:730-756); neither is
    # here, so the same copy in torch. The row must be right: a release frees what it names.
    allocation.assign_req_to_token_pool_func = _assign_req_to_token_pool
    # Upstream warns at every retraction ("KV cache pool is full"); the record has it.
    logging.getLogger("sglang").setLevel(logging.ERROR)
    return SimpleNamespace(
        torch=torch, ModelImpl=ModelImpl, DisaggregationMode=DisaggregationMode,
        UpstreamAbort=UpstreamAbort, UpstreamLength=UpstreamLength,
        UpstreamMatched=UpstreamMatched, Req=Req, ScheduleBatch=ScheduleBatch,
        PrefillAdder=PrefillAdder, Scheduler=Scheduler,
        SchedulerBatchResultProcessor=SchedulerBatchResultProcessor,
        SchedulerLogprobResultProcessor=SchedulerLogprobResultProcessor,
        GenerationBatchResult=GenerationBatchResult,
        validate_input_length=validate_input_length,
        TokenToKVPoolAllocator=TokenToKVPoolAllocator,
        PagedTokenToKVPoolAllocator=PagedTokenToKVPoolAllocator, InsertParams=InsertParams,
        MatchPrefixParams=MatchPrefixParams, CacheInitParams=CacheInitParams,
        KVCacheConfigurator=KVCacheConfigurator, ReqToTokenPool=ReqToTokenPool,
        RadixKey=RadixKey, ComponentType=ComponentType, UnifiedRadixCache=UnifiedRadixCache,
        ForwardMode=ForwardMode, get_context=get_context, get_parallel=get_parallel,
        get_schedule=get_schedule, SamplingParams=SamplingParams,
        SpeculativeAlgorithm=SpeculativeAlgorithm, EagleDraftInput=EagleDraftInput,
        get_req_to_token_extra_context_len=get_req_to_token_extra_context_len,
        RecordingPrefillAdder=_recording_adder_class(PrefillAdder),
    )


def _assign_req_to_token_pool(req_pool_indices: Any, req_to_token: Any, start_offset: Any,
                              end_offset: Any, out_cache_loc: Any, batch_size: int) -> None:
    """`assign_req_to_token_pool` (mem_cache/allocation.py:730-756) in torch: row
    `req_pool_indices[i]`, columns `[start_offset[i], end_offset[i])`, take the next slots
    of `out_cache_loc` in order."""
    taken = 0
    for i in range(batch_size):
        row, start, end = (int(req_pool_indices[i]), int(start_offset[i]),
                           int(end_offset[i]))
        req_to_token[row, start:end] = out_cache_loc[taken:taken + end - start]
        taken += end - start


def _recording_adder_class(base: type) -> type:
    """`PrefillAdder` unchanged but for a snapshot of its three budgets after each
    admission call (see the module doc)."""

    class RecordingPrefillAdder(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._snapshot()

        def _snapshot(self) -> None:
            self.snapshot = (self.rem_input_tokens, self.rem_chunk_tokens,
                             self.rem_total_tokens)

        def add_one_req(self, *args: Any, **kwargs: Any) -> Any:
            result = super().add_one_req(*args, **kwargs)
            self._snapshot()
            return result

        def add_chunked_req(self, *args: Any, **kwargs: Any) -> Any:
            result = super().add_chunked_req(*args, **kwargs)
            self._snapshot()
            return result

    return RecordingPrefillAdder


# ------------------------------------------------------------------------ server args

@dataclass(slots=True)
class _Published:
    """The ServerArgs override in force (publishing one costs about 20 ms)."""

    override: Any = None
    fields: dict[str, object] | None = None


_PUBLISHED = _Published()


def _server_fields(cfg: Config) -> dict[str, object]:
    """The ServerArgs fields of `cfg`: the model's knobs with its page size, the
    non-overlap loop, the torch-native attention backend on a CPU, no prefill-decode
    interval; under EAGLE the algorithm and its three knobs (the CPU server's synchronous
    spec-v2 path, arg_groups/speculative_hook.py:65-80, 1005-1011)."""
    spec = dict(speculative_algorithm=cfg.speculative_algorithm,
                speculative_num_steps=cfg.speculative_num_steps,
                speculative_eagle_topk=cfg.speculative_eagle_topk,
                speculative_num_draft_tokens=cfg.speculative_num_draft_tokens,
                ) if cfg.speculative else {}
    return dict(
        **spec,
        page_size=cfg.page_size,
        chunked_prefill_size=(cfg.chunked_prefill_size
                              if cfg.chunked_prefill_size is not None else -1),
        max_prefill_tokens=cfg.max_prefill_tokens,
        # The EAGLE family's default of 48 is resolved by the server-args hook
        # (speculative_hook.py:996-1006), which the override does not run: give it here.
        max_running_requests=(cfg.max_running_requests if not cfg.speculative
                              or cfg.max_running_requests is not None
                              else EAGLE_DEFAULT_MAX_RUNNING_REQUESTS),
        schedule_policy=cfg.schedule_policy,
        schedule_conservativeness=float(cfg.schedule_conservativeness),
        enable_mixed_chunk=cfg.enable_mixed_chunk,
        disable_radix_cache=cfg.disable_radix_cache,
        disable_overlap_schedule=True,
        attention_backend="torch_native",
        max_total_tokens=cfg.max_total_num_tokens,
        context_length=cfg.context_length,
        prefill_decode_interval=0,
        device="cpu",
    )


def _publish(sg: SimpleNamespace, cfg: Config) -> None:
    """Make every `get_schedule()` / `get_memory()` / ... read inside upstream code see
    `cfg` (runtime_context.py:1169-1240), and set the ratio environment variables."""
    for name, env in _RATIO_ENV:
        os.environ[env] = str(getattr(cfg, name))
    wanted = _server_fields(cfg)
    if _PUBLISHED.override is not None and wanted == _PUBLISHED.fields:
        return
    if _PUBLISHED.override is not None:
        _PUBLISHED.override.restore()
    override = sg.get_context().override_server_args(**wanted)
    override.install()
    _PUBLISHED.override, _PUBLISHED.fields = override, wanted


# ---------------------------------------------------------- stand-ins and observation

class _Null:
    """Accepts any call and returns None: only where upstream discards the result."""

    def __getattr__(self, item: str) -> Callable[..., None]:
        if item.startswith("__"):
            raise AttributeError(item)
        return lambda *args, **kwargs: None


class _MetricsReporter(_Null):
    enable_metrics = False
    num_retracted_reqs = 0
    num_generated_tokens = 0
    forward_ct_decode = 0
    scheduler_stage_metrics = None


class _DPAttnAdapter:
    """DP attention off: both hooks return the batch unchanged."""

    def maybe_prepare_mlp_sync_batch(self, batch: Any, need_sync: bool = False) -> Any:
        return batch

    def maybe_convert_decode_to_extend(self, batch: Any) -> Any:
        return batch


class _NgramEmbedding:
    def prepare_for_forward(self, batch: Any, chunked_req: Any = None) -> Any:
        return batch


class _GrammarManager:
    grammar_queue: tuple[()] = ()

    def has_waiting_grammars(self) -> bool:
        return False

    def process_req_with_grammar(self, req: Any) -> bool:
        return False


class _DllmManager:
    def any_staging_reqs(self) -> bool:
        return False


class _FutureMap:
    """The overlap relay's buffers: the non-overlap spec path only stashes the mixed
    decode rows' pending tokens in it for the forward's input (scheduler.py:4273-4282)."""

    def stash_bonus_tokens(self, *args: Any, **kwargs: Any) -> None:
        return None


class _LoadInquirer:
    def _get_num_pending_tokens(self, chunk_deduct: int = 0) -> int:
        return 0


@dataclass(slots=True)
class _Observer:
    """What the hooks saw in the current step (scratch, reset at every step)."""

    adder: Any = None
    retracted: list[Any] = field(default_factory=list)
    aborted: list[Any] = field(default_factory=list)

    def start_step(self) -> None:
        self.adder = None
        self.retracted.clear()
        self.aborted.clear()


class _BeamCoordinator:
    """No beam search; `retire_group` is called for each aborted request (S:4399)."""

    def __init__(self, observer: _Observer) -> None:
        self._observer = observer

    def pending_member_rows(self, batch: Any) -> int:
        return 0

    def commit_decode(self, batch: Any) -> set[Any]:
        return set()

    def retire_group(self, req: Any) -> None:
        self._observer.aborted.append(req)


# ------------------------------------------------------------------- the scheduler

def _max_num_reqs(sg: SimpleNamespace, cfg: Config) -> int:
    """`resolve_max_num_reqs` (kv_cache_configurator.py:2800) on a stand-in `self`: one
    DP rank, no mamba."""
    stand_in = SimpleNamespace(model_config=SimpleNamespace(context_len=cfg.context_length),
                               attn_dp_size=1, mambaish_config=None)
    return sg.KVCacheConfigurator.resolve_max_num_reqs(stand_in, cfg.max_total_num_tokens)


def new_scheduler(cfg: Config, extra_pool_tokens: int = 0,
                  observer: _Observer | None = None) -> Any:
    """A real `Scheduler` for `cfg` built without `__init__` (see the module doc), its KV
    allocator larger by `extra_pool_tokens` (the pre-loaded cached prefixes)."""
    sg = _sglang()
    _publish(sg, cfg)
    max_num_reqs = _max_num_reqs(sg, cfg)
    if max_num_reqs != cfg.effective_max_running_requests:
        raise RuntimeError(
            f"SGLang resolves max_running_requests to {max_num_reqs}, the model to "
            f"{cfg.effective_max_running_requests} (model/sglang/config.py)")
    # Scheduler.init_model_worker: pp_max_micro_batch_size = max(max_running_requests // pp,
    # 1) (scheduler.py:1202-1207).
    sg.get_parallel().override_permanently(pp_max_micro_batch_size=max(max_num_reqs, 1))
    observer = observer if observer is not None else _Observer()
    s = object.__new__(sg.Scheduler)
    schedule = sg.get_schedule()
    # What Scheduler.__init__ reads from the server arguments (scheduler.py:460-525).
    s.forward_ct = 0
    s.processed_tokens_counter = 0
    s.server_args = sg.get_context().server_args
    s.schedule_policy = schedule.schedule_policy
    s.enable_priority_scheduling = False
    s.schedule_low_priority_values_first = False
    s.priority_scheduling_preemption_threshold = (
        schedule.priority_scheduling_preemption_threshold)
    s.enable_lora = False
    s.enable_overlap = False
    s.enable_overlap_mlx = False
    s.spec_algorithm = sg.SpeculativeAlgorithm.from_string(cfg.speculative_algorithm)
    s.page_size = cfg.page_size
    for name in ("enable_hierarchical_cache", "enable_lmcache", "enable_hicache_storage",
                 "enable_unified_cache_external_linker", "enable_hisparse",
                 "enable_session_radix_cache", "enable_fpm", "require_mlp_sync",
                 "is_hybrid_swa", "is_hybrid_ssm"):
        setattr(s, name, False)
    for name in ("max_new_tokens_limit", "dllm_config", "sliding_window_size",
                 "truncation_align_size", "dynamic_chunk_sizer", "min_free_slots_delayer",
                 "decode_offload_manager", "hisparse_coordinator", "lora_drainer",
                 "scheduler_stage_metrics", "draft_worker", "future_map",
                 "metrics_collector", "max_queued_requests"):
        setattr(s, name, None)
    if cfg.speculative:
        s.future_map = _FutureMap()
    s.disaggregation_mode = sg.DisaggregationMode.NULL
    s.is_generation = True
    s.kv_shard_widening = 1
    # The model and worker facts (tp_worker.get_worker_info, tp_worker.py:543-566).
    s.model_config = SimpleNamespace(
        vocab_size=VOCAB_SIZE, context_len=cfg.context_length, is_multimodal=False,
        is_encoder_decoder=False, hf_eos_token_id={EOS_TOKEN_ID}, num_key_value_heads=1,
        is_hybrid_swa=False)
    # The resolved implementation (model_loader/utils.py:247-261): native, no HF config.
    s.model_config._resolved_model_impl = sg.ModelImpl.SGLANG
    s.max_total_num_tokens = cfg.max_total_num_tokens
    s.max_prefill_tokens = schedule.max_prefill_tokens
    s.max_running_requests = max_num_reqs
    s.max_req_len = cfg.max_req_len
    s.max_req_input_len = cfg.max_req_input_len
    s.device = "cpu"
    # on_verify_complete_cpu feeds the adaptive-steps controller, a no-op for a fixed
    # EAGLE config (BaseSpecWorker's default).
    s.tp_worker = SimpleNamespace(model_runner=SimpleNamespace(
        attn_backend=SimpleNamespace(), prefill_aware_swa=False),
        on_verify_complete_cpu=lambda *args, **kwargs: None)
    s.model_worker = s.tp_worker
    # The memory: real pools and tree on CPU tensors.
    # The row is the context plus upstream's headroom (kv_cache_configurator.py:1409:
    # 4 + draft tokens, more for a spec decode's page-rounded reserve).
    extra_row = sg.get_req_to_token_extra_context_len() if cfg.speculative else 4
    s.req_to_token_pool = sg.ReqToTokenPool(
        size=max_num_reqs, max_context_len=cfg.context_length + extra_row, device="cpu",
        enable_memory_saver=False)
    pool = cfg.max_total_num_tokens + extra_pool_tokens
    if cfg.page_size == 1:  # the allocator kv_cache_configurator.py:2594-2616 picks
        s.token_to_kv_pool_allocator = sg.TokenToKVPoolAllocator(
            pool, dtype=sg.torch.float32, device="cpu", kvcache=None, need_sort=False)
    else:
        s.token_to_kv_pool_allocator = sg.PagedTokenToKVPoolAllocator(
            pool, page_size=cfg.page_size, dtype=sg.torch.float32, device="cpu",
            kvcache=None, need_sort=False)
    s.tree_cache = sg.UnifiedRadixCache(sg.CacheInitParams(
        disable=cfg.disable_radix_cache, req_to_token_pool=s.req_to_token_pool,
        token_to_kv_pool_allocator=s.token_to_kv_pool_allocator, page_size=cfg.page_size,
        chunked_prefill_size=cfg.chunked_prefill_size,
        tree_components=(sg.ComponentType.FULL,)))
    s.disable_radix_cache = cfg.disable_radix_cache
    # Scheduler.init_running_status, its scheduling part (scheduler.py:1280-1314).
    s.waiting_queue = []
    s.running_batch = sg.ScheduleBatch(reqs=[], batch_is_full=False)
    s.last_batch = None
    s.result_queue = __import__("collections").deque()
    s.enable_skip_finishing_decode = False
    s._engine_paused = False
    sg.Scheduler.init_chunked_prefill(s)  # scheduler.py:1316-1340
    s.metrics_reporter = _MetricsReporter()
    sg.Scheduler.init_schedule_policy(s)  # scheduler.py:1392-1430
    s.prefill_decode_interval = 0
    s._prefill_decode_interval_remaining = 0
    s.grammar_manager = _GrammarManager()
    s.dllm_manager = _DllmManager()
    s.dp_attn_adapter = _DPAttnAdapter()
    s.ngram_embedding_manager = _NgramEmbedding()
    s.beam_coordinator = _BeamCoordinator(observer)
    s.load_inquirer = _LoadInquirer()
    s.ipc_channels = SimpleNamespace(send_to_tokenizer=_Null(), send_to_detokenizer=_Null())
    s.output_streamer = _Null()
    s.batch_result_processor = sg.SchedulerBatchResultProcessor(
        is_generation=True, disaggregation_mode=sg.DisaggregationMode.NULL,
        enable_overlap=False, enable_overlap_mlx=False, model_config=s.model_config,
        token_to_kv_pool_allocator=s.token_to_kv_pool_allocator, tree_cache=s.tree_cache,
        hisparse_coordinator=None, req_to_token_pool=s.req_to_token_pool,
        decode_offload_manager=None, metrics_collector=None,
        metrics_reporter=s.metrics_reporter, draft_worker=None, model_worker=s.model_worker,
        logprob_result_processor=sg.SchedulerLogprobResultProcessor(
            model_config=s.model_config),
        output_streamer=s.output_streamer, beam_coordinator=s.beam_coordinator,
        abort_request=lambda *args, **kwargs: None)
    # Observation hooks (instance attributes: upstream's classes stay untouched).
    recording = sg.RecordingPrefillAdder

    def make_adder(*args: Any, **kwargs: Any) -> Any:
        observer.adder = recording(*args, **kwargs)
        return observer.adder

    s.get_prefill_adder_class = lambda: make_adder
    enqueue = s._add_request_to_queue

    def add_request_to_queue(req: Any, is_retracted: bool = False) -> Any:
        if is_retracted:
            observer.retracted.append(req)
        return enqueue(req, is_retracted=is_retracted)

    s._add_request_to_queue = add_request_to_queue
    return s


# ------------------------------------------------------------------------- requests

def prompt_ids(spec: RequestSpec, index: int) -> array:
    """Request `index`'s prompt: its cached prefix (token 500000 + index), then its own
    tokens (1000 + index)."""
    c = spec.cached_prefix_len
    return array("q", [_CACHED_TOKEN + index] * c
                 + [_OWN_TOKEN + index] * (spec.prompt_len - c))


def preloaded_len(cfg: Config, spec: RequestSpec) -> int:
    """The tokens of `spec`'s cached prefix the tree can hold: its whole pages."""
    return spec.cached_prefix_len // cfg.page_size * cfg.page_size


def _preload_cached_prefixes(sg: SimpleNamespace, s: Any, cfg: Config,
                             requests: Sequence[RequestSpec]) -> None:
    """Insert each request's cached prefix (its whole pages) into the real tree with real
    slots and lock it (see the module doc)."""
    for i, spec in enumerate(requests):
        c = preloaded_len(cfg, spec)
        if not c:
            continue
        ids = prompt_ids(spec, i)[:c]
        value = s.token_to_kv_pool_allocator.alloc(c)
        s.tree_cache.insert(sg.InsertParams(key=sg.RadixKey(token_ids=ids), value=value))
        match = s.tree_cache.match_prefix(sg.MatchPrefixParams(key=sg.RadixKey(token_ids=ids)))
        if match.device_prefix_len != c:
            raise RuntimeError(f"request {spec.id!r}: the tree matched "
                               f"{match.device_prefix_len} of its {c} pre-loaded tokens")
        s.tree_cache.inc_lock_ref(match.last_device_node)


def _add_request(sg: SimpleNamespace, s: Any, spec: RequestSpec, index: int) -> Any:
    """A request as `_handle_generate_request` builds and queues it."""
    params = sg.SamplingParams(max_new_tokens=spec.max_tokens)
    params.normalize(None)
    req = sg.Req(spec.id, "", prompt_ids(spec, index), params,
                 eos_token_ids={EOS_TOKEN_ID}, vocab_size=VOCAB_SIZE)
    s.init_req_max_new_tokens(req)  # scheduler.py:2585-2632
    req.logprob_start_len = -1  # no logprobs asked for (scheduler.py:3128-3141)
    error = sg.validate_input_length(req, s.max_req_input_len, False)
    if error:
        raise InputError(f"request {spec.id!r}: SGLang refuses it: {error}")
    s._add_request_to_queue(req)  # scheduler.py:3353-3384
    return req


# ------------------------------------------------------------------------ one step

def _number(x: float | int | None) -> float | int | None:
    """A budget or ratio as the reference shows it: an int when whole, else 6 decimals."""
    if x is None or isinstance(x, bool):
        return x
    if isinstance(x, float):
        return int(x) if x.is_integer() else round(x, 6)
    return int(x)


def _finish_name(sg: SimpleNamespace, req: Any) -> str:
    reason = req.finished_reason
    if isinstance(reason, sg.UpstreamMatched):
        return FINISH_STOP
    if isinstance(reason, sg.UpstreamLength):
        return FINISH_LENGTH
    if isinstance(reason, sg.UpstreamAbort):
        return FINISH_ABORT
    return type(reason).__name__


def _free_tokens(s: Any) -> int:
    """Free KV tokens as the scheduler counts them: available + evictable
    (prefill_budget.py:90-96)."""
    return s.token_to_kv_pool_allocator.available_size() + s.tree_cache.evictable_size()


def _fake_forward(sg: SimpleNamespace, s: Any, batch: Any, eos_ids: frozenset[str]) -> Any:
    """`run_batch`'s scheduler-side bookkeeping (scheduler.py:4490-4510) and one sampled
    token per row: EOS for `eos_ids`, else token 100."""
    s.forward_ct += 1
    batch.forward_iter = s.forward_ct
    s._sched_idled = False
    if batch.extend_num_tokens:
        s.processed_tokens_counter += batch.extend_num_tokens
    ids = [EOS_TOKEN_ID if r.rid in eos_ids else OTHER_TOKEN_ID for r in batch.reqs]
    return sg.GenerationBatchResult(
        logits_output=None, next_token_ids=sg.torch.tensor(ids, dtype=sg.torch.int64),
        can_run_cuda_graph=False)


def _fake_verify(sg: SimpleNamespace, s: Any, cfg: Config, batch: Any,
                 eos_ids: frozenset[str], runs: Sequence[int]) -> Any:
    """An EAGLE decode's result as the synchronous spec-v2 worker leaves it
    (eagle_worker_v2.py:1350-1430, scheduler.py:4697-4720): per row the accepted run of
    `runs[i]` tokens (token 100, the last one EOS for `eos_ids`), padded to the verify
    width, with `accept_lens`; the batch's `seq_lens` advanced by the runs (the worker's
    `new_seq_lens`). The draft and verify kernels are not run: they decide only which
    tokens are accepted, and the workload says how many."""
    s.forward_ct += 1
    batch.forward_iter = s.forward_ct
    s._sched_idled = False
    torch = sg.torch
    width = cfg.speculative_num_draft_tokens
    ids: list[int] = []
    for r, run in zip(batch.reqs, runs, strict=True):
        row = [OTHER_TOKEN_ID] * run
        if r.rid in eos_ids:
            row[-1] = EOS_TOKEN_ID
        ids += row + [0] * (width - run)
    lens = torch.tensor(list(runs), dtype=torch.int64)
    batch.seq_lens = batch.seq_lens + lens
    if batch.seq_lens_cpu is not None:
        batch.seq_lens_cpu = batch.seq_lens_cpu + lens
        batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
    return sg.GenerationBatchResult(
        logits_output=None, next_token_ids=torch.tensor(ids, dtype=torch.int64),
        accept_lens=lens, speculative_num_draft_tokens=width, can_run_cuda_graph=False)


def _draft_input(sg: SimpleNamespace, cfg: Config, batch: Any, index: dict[str, int]) -> Any:
    """The `EagleDraftInput` the draft worker leaves on a batch after its forward
    (scheduler.py:4708-4712: `batch.spec_info = batch_result.next_draft_input`): one row per
    request, its top-k proposals, hidden state and bonus token. The values are the
    harness's: each row's `topk_index` holds its request's index, so that `_check_rows` can
    see whether `filter_batch` / `merge_batch` keep the rows beside their requests."""
    torch = sg.torch
    rows = torch.tensor([index[r.rid] for r in batch.reqs], dtype=torch.int64)
    topk = cfg.speculative_eagle_topk or 1
    return sg.EagleDraftInput(
        topk_p=torch.ones((len(rows), topk), dtype=torch.float32),
        topk_index=rows.unsqueeze(1).repeat(1, topk),
        hidden_states=torch.zeros((len(rows), 1), dtype=torch.float32),
        bonus_tokens=torch.full((len(rows),), OTHER_TOKEN_ID, dtype=torch.int32))


def _check_rows(batch: Any, index: dict[str, int]) -> None:
    """A non-empty batch's draft input has one row per request, in the batch's order. (An
    emptied batch keeps stale rows: `filter_batch` returns before the spec input when no
    request is kept, B:3676-3682, and the next merge replaces such a batch.)"""
    info = batch.spec_info
    if info is None or not batch.reqs:
        return
    rows = info.topk_index[:, 0].tolist()
    want = [index[r.rid] for r in batch.reqs]
    if rows != want:
        raise RuntimeError(f"spec_info rows {rows} are not the batch's requests {want}")


def _batch_kind(sg: SimpleNamespace, batch: Any) -> str:
    if batch is None:
        return BATCH_IDLE
    mode = batch.forward_mode
    if mode == sg.ForwardMode.MIXED:
        return BATCH_MIXED
    if mode.is_extend():
        return BATCH_PREFILL
    if mode.is_decode():
        return BATCH_DECODE
    raise RuntimeError(f"unexpected forward mode {mode}")


def _step(sg: SimpleNamespace, s: Any, observer: _Observer, cfg: Config, step: int,
          eos_ids: frozenset[str], accepted: dict[str, int], index: dict[str, int]
          ) -> tuple[StepRecord, frozenset[str], frozenset[str]]:
    """One loop iteration: its record, the requests that sampled a token in it, and those
    an EAGLE decode verified (an accepted count takes effect only there). `index` numbers
    the requests (the draft inputs' rows under EAGLE)."""
    waited = {id(r): r.is_retracted for r in s.waiting_queue}
    ratio_before = s.new_token_ratio_tracker.current
    observer.start_step()
    plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
    s.running_batch = plan.running_batch
    batch = plan.batch_to_run
    free_blocks = _free_tokens(s)
    kind = _batch_kind(sg, batch)
    scheduled: list[tuple[str, int]] = []
    admitted: list[str] = []
    resumed: list[str] = []
    # Under EAGLE a decode row commits its accepted run (the verify, not yet run here) and
    # a mixed decode row its pending token, both after this point (batch_result_processor.py
    # :818-826, 370-378): the record counts them as this step's, as the reference does.
    spec_decode = cfg.speculative and batch is not None and batch.forward_mode.is_decode()
    runs = [1 + accepted.get(r.rid, 0) for r in batch.reqs] if spec_decode else []
    pending: dict[int, int] = {}
    if batch is not None:
        extend = batch.forward_mode.is_extend()
        decoding = {id(r) for r in (batch.decoding_reqs or ())} if extend else set()
        for i, r in enumerate(batch.reqs):
            if extend and id(r) not in decoding:
                scheduled.append((r.rid, r.extend_len))
                if id(r) in waited:
                    (resumed if waited[id(r)] else admitted).append(r.rid)
            else:
                scheduled.append((r.rid, runs[i] if spec_decode else 1))
                if cfg.speculative:
                    pending[id(r)] = runs[i] if spec_decode else 1
    chunked = s.chunked_req
    running = [r for r in s.running_batch.reqs if not r.finished()]
    if batch is not None and batch.forward_mode.is_extend():
        listed = {id(r) for r in running}
        running += [r for r in batch.reqs if r is not chunked and id(r) not in listed]
    held = running + ([chunked] if chunked is not None else []) + list(s.waiting_queue)
    if cfg.speculative:
        computed = tuple((r.rid, r.kv.kv_committed_len + pending.get(id(r), 0)
                          if r.kv.holds_kv else 0) for r in held)
        allocated: tuple[tuple[str, object], ...] = (("kv_allocated", [
            [r.rid, r.kv.kv_allocated_len] for r in running + (
                [chunked] if chunked is not None else [])]),)
    else:
        computed = tuple((r.rid, r.kv.kv_allocated_len if r.kv.holds_kv else 0)
                         for r in held)
        allocated = ()
    waiting = tuple(r.rid for r in s.waiting_queue)
    budgets = observer.adder.snapshot if observer.adder is not None else (None, None, None)
    retracted = [r.rid for r in observer.retracted]
    aborted = [r.rid for r in observer.aborted]
    # A request samples unless its prefill is unfinished (batch_result_processor.py:427-445).
    sampled = frozenset() if batch is None else frozenset(
        r.rid for r in batch.reqs if r is not chunked)
    finished: list[tuple[str, str]] = []
    if batch is not None:
        if cfg.speculative:
            _check_rows(batch, index)
            _check_rows(s.running_batch, index)
        result = (_fake_verify(sg, s, cfg, batch, eos_ids & sampled, runs) if spec_decode
                  else _fake_forward(sg, s, batch, eos_ids & sampled))
        if cfg.speculative:
            batch.spec_info = _draft_input(sg, cfg, batch, index)
        if batch.forward_mode.is_decode():
            s.batch_result_processor.process_batch_result_decode(batch, result)
        else:
            s.batch_result_processor.process_batch_result_prefill(batch, result)
        s.tree_cache.flush_pending_backups()
        finished = [(r.rid, _finish_name(sg, r)) for r in batch.reqs if r.finished()]
    else:
        s._sched_idled = True
        if s.is_fully_idle():  # on_idle's scheduling part (scheduler.py:5085-5149)
            s.new_token_ratio_tracker.reset()
    finished += [(rid, FINISH_ABORT) for rid in aborted if rid not in dict(finished)]
    s.last_batch = batch
    record = StepRecord(
        step=step, scheduled=tuple(scheduled), admitted=tuple(admitted),
        resumed=tuple(resumed), preempted=tuple(retracted), finished=tuple(finished),
        free_blocks=free_blocks, num_computed_tokens=computed,
        running=tuple(r.rid for r in running), waiting=waiting,
        token_budget_left=cfg.max_prefill_tokens - sum(n for _, n in scheduled),
        extra=(
            ("batch", kind),
            ("rem_input_tokens", _number(budgets[0])),
            ("rem_chunk_tokens", _number(budgets[1])),
            ("rem_total_tokens", _number(budgets[2])),
            ("new_token_ratio", _number(ratio_before)),
            ("new_token_ratio_after", _number(s.new_token_ratio_tracker.current)),
            ("batch_is_full", bool(s.running_batch.batch_is_full)),
            ("chunked_req", None if s.chunked_req is None else s.chunked_req.rid),
            ("retracted", retracted),
            ("aborted", aborted),
        ) + allocated)
    verified = frozenset(r.rid for r in batch.reqs) if spec_decode else frozenset()
    return record, sampled, verified


def _check_no_leak(s: Any) -> None:
    """Once no request holds KV, every slot is available, evictable or a locked pre-loaded
    prefix (the identity upstream's idle check asserts)."""
    last = s.last_batch.reqs if s.last_batch is not None else []
    if s.chunked_req is not None or any(
            r.kv.holds_kv for r in (*s.running_batch.reqs, *last, *s.waiting_queue)):
        return
    allocator = s.token_to_kv_pool_allocator
    total = (allocator.available_size() + s.tree_cache.evictable_size()
             + s.tree_cache.protected_size())
    if total != allocator.size:
        raise RuntimeError(f"KV leak: available + evictable + protected = {total}, "
                           f"pool {allocator.size}")


# ------------------------------------------------------------------------ a workload

@dataclass(frozen=True, slots=True)
class RealRun:
    """One run of the real scheduler: its records and, per step, the requests that
    sampled a token in it (an EOS entry takes effect only there)."""

    records: tuple[StepRecord, ...]
    sampled: tuple[frozenset[str], ...]
    verified: tuple[frozenset[str], ...] = ()

    def effective_accepted(self, workload: Workload) -> tuple[AcceptEvent, ...]:
        """The accepted counts of `workload` naming a request an EAGLE decode verified in
        that step; the others had no effect on this run."""
        return tuple(e for e in workload.accepted
                     if 1 <= e.step <= len(self.verified) and e.id in self.verified[e.step - 1])

    def effective_eos(self, workload: Workload) -> tuple[EosEvent, ...]:
        """The EOS entries of `workload` naming a step in which the request sampled; the
        others had no effect on this run, so dropping them leaves it unchanged."""
        return tuple(e for e in workload.eos
                     if 1 <= e.step <= len(self.sampled) and e.id in self.sampled[e.step - 1])

    def effective(self, workload: Workload) -> Workload:
        """`workload` with only the EOS entries (and accepted counts) that took effect in
        this run."""
        return replace(workload, eos=self.effective_eos(workload),
                       accepted=self.effective_accepted(workload))


def run_real_sglang(workload: Workload) -> tuple[StepRecord, ...]:
    """The StepRecords of SGLang's real scheduler on `workload` (see the module doc)."""
    return run_real_sglang_detailed(workload).records


def run_real_sglang_detailed(workload: Workload) -> RealRun:
    """`run_real_sglang`, also returning which requests sampled in each step."""
    if (reason := sglang_unavailable_reason()) is not None:
        raise RuntimeError(reason)
    check_drivable(workload)
    sg = _sglang()
    cfg: Config = workload.config
    requests = workload.requests
    extra = 0 if cfg.disable_radix_cache else sum(preloaded_len(cfg, r) for r in requests)
    observer = _Observer()
    s = new_scheduler(cfg, extra_pool_tokens=extra, observer=observer)
    if extra:
        _preload_cached_prefixes(sg, s, cfg, requests)
    index = {r.id: i for i, r in enumerate(requests)}
    arrivals = workload.arrivals_by_step()
    eos = workload.eos_ids_by_step()
    accepted = workload.accepted_by_step()
    records: list[StepRecord] = []
    sampled: list[frozenset[str]] = []
    verified: list[frozenset[str]] = []
    for step in range(1, workload.steps + 1):
        for spec in arrivals.get(step, ()):
            _add_request(sg, s, spec, index[spec.id])
        record, took, checked = _step(sg, s, observer, cfg, step, eos.get(step, frozenset()),
                                      accepted.get(step, {}), index)
        records.append(record)
        sampled.append(took)
        verified.append(checked)
    _check_no_leak(s)
    return RealRun(records=tuple(records), sampled=tuple(sampled), verified=tuple(verified))


# ----------------------------------------------------------------------- comparison

def _same(a: object, b: object) -> bool:
    """Equal, numbers to 1e-6 relative (upstream's ratio and budgets are binary floats,
    the reference's exact fractions shown to 6 decimals)."""
    if (isinstance(a, int | float) and isinstance(b, int | float)
            and not isinstance(a, bool) and not isinstance(b, bool)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    return a == b


@dataclass(frozen=True, slots=True)
class Divergence(StepDivergence):
    """The first step at which the reference departs from SGLang's real scheduler
    (divergence.py `StepDivergence`)."""

    real_engine: ClassVar[str] = REAL
    reference_name: ClassVar[str] = REFERENCE

    def show(self, name: str, record: StepRecord | None) -> str:
        """A field of a record as text, a sequence as `items_text` writes it."""
        if record is None:
            return "(no record)"
        value = record_value(name, record)
        if isinstance(value, tuple | list):
            return items_text(value)
        return str(value)


def first_divergence(workload: Workload, real: Sequence[StepRecord],
                     reference: Sequence[StepRecord]) -> Divergence | None:
    """The first step whose records differ in any field or extra (or that only one side
    has), else None."""
    return first_divergence_of(Divergence, workload, real, reference, _same)


def compare(workload: Workload) -> Divergence | None:
    """Run both schedulers on `workload` (EOS entries that take no effect dropped, as
    the reference refuses them) and return the first divergence, or None."""
    return compare_detailed(workload)[0]


def compare_detailed(workload: Workload) -> tuple[Divergence | None, RealRun]:
    """`compare`, also returning the real run."""
    run = run_real_sglang_detailed(workload)
    return _against_reference(workload, run), run


def _against_reference(workload: Workload, run: RealRun) -> Divergence | None:
    from model.run import iter_records

    compared = run.effective(workload)
    reference: list[StepRecord] = []
    try:
        for _, record in iter_records(compared):
            reference.append(record)
    except Exception as exc:  # noqa: BLE001 - any failure of the reference is a finding
        early = first_divergence(compared, run.records[: len(reference)], reference)
        if early is not None:
            return early
        step = len(reference) + 1
        return Divergence(workload=compared, step=step, fields=("error",),
                          real=run.records[step - 1] if step <= len(run.records) else None,
                          reference=None, error=f"{type(exc).__name__}: {exc}")
    return first_divergence(compared, run.records, reference)


# --------------------------------------------------------------------------- runner

EXIT_OK, EXIT_DIVERGED, EXIT_UNAVAILABLE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The runner's flags."""
    from checker.conformance.sglang_generate import SIZES

    parser = argparse.ArgumentParser(
        prog="python -m checker.conformance.sglang_real",
        description="Compare the SGLang reference with SGLang's real scheduler "
                    f"({SGLANG_VERSION}, CPU) on generated workloads.")
    parser.add_argument("--count", type=int, default=100, help="workloads (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--size", choices=SIZES, default="any",
                        help="small or large configs, or either by seed (default any)")
    parser.add_argument("--page-size", type=int, action="append", dest="page_sizes",
                        metavar="P",
                        help="SGLang's --page-size of every workload (default 1; P > 1 "
                             "draws the workloads in pages of P tokens); repeat it to run "
                             "each page size in turn in this process (SGLang imported once)")
    parser.add_argument("--spec", action="store_true",
                        help="EAGLE speculative decoding in every workload (knobs and "
                             "accepted counts drawn, sglang_generate.py)")
    parser.add_argument("--no-shrink", action="store_true",
                        help="print the first divergence as found, without shrinking it")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; see the module doc for output and exit codes."""
    args = build_parser().parse_args(argv)
    if args.count < 1:
        sys.stderr.write("--count must be positive\n")
        return EXIT_UNAVAILABLE
    pages = each_once(args.page_sizes, 1)
    if bad := [p for p in pages if p < 1]:
        sys.stderr.write(f"--page-size must be a positive integer, got {bad[0]}\n")
        return EXIT_UNAVAILABLE
    if (reason := sglang_unavailable_reason()) is not None:
        sys.stderr.write(f"conformance: {reason}\n")
        return EXIT_UNAVAILABLE
    return in_turn(pages, lambda page_size: _run_page_size(args, page_size))


def _run_page_size(args: argparse.Namespace, page_size: int) -> int:
    """Compare `args.count` workloads at one page size and print the report: EXIT_OK, or
    EXIT_DIVERGED with the first divergence (shrunk unless --no-shrink)."""
    from checker.conformance.sglang_generate import (
        FEATURES,
        SPEC_FEATURES,
        random_sglang_workload,
        run_features,
        shrink,
    )

    start = time.monotonic()
    steps_compared = steps_agreed = workloads_agreed = 0
    first: tuple[int, Workload] | None = None
    reached = dict.fromkeys(FEATURES + (SPEC_FEATURES if args.spec else ()), 0)
    for seed in range(args.seed, args.seed + args.count):
        w = random_sglang_workload(seed, args.size, page_size, args.spec)
        divergence, run = compare_detailed(w)
        for name in run_features(w, run.records):
            reached[name] += 1
        if divergence is None:
            workloads_agreed += 1
            steps_compared += w.steps
            steps_agreed += w.steps
            continue
        steps_compared += divergence.step
        steps_agreed += divergence.step - 1
        print(f"seed {seed}: {divergence.summary()}")
        if first is None:
            first = (seed, divergence.workload)
    elapsed = time.monotonic() - start
    print(f"compared {args.count} workloads ({steps_compared} steps) against {REAL}'s "
          f"scheduler in {elapsed:.1f} s (seeds {args.seed}-{args.seed + args.count - 1}, "
          f"size {args.size}, page size {page_size}"
          + (", EAGLE" if args.spec else "") + ")")
    print(f"workloads agreeing: {workloads_agreed}/{args.count} "
          f"({100.0 * workloads_agreed / args.count:.1f}%); steps agreeing: "
          f"{steps_agreed}/{steps_compared} "
          f"({100.0 * steps_agreed / max(1, steps_compared):.1f}%)")
    print("workloads reaching each feature: "
          + ", ".join(f"{name} {n}" for name, n in reached.items()))
    if first is None:
        return EXIT_OK
    seed, workload = first
    if not args.no_shrink:
        workload = shrink(workload, lambda w: compare(w) is not None)
    divergence = compare(workload)
    if divergence is None:  # shrink keeps the predicate true; the unshrunk one diverged
        raise RuntimeError("the diverging workload no longer diverges")
    from model.workload import workload_to_json

    print(f"\n{'minimal' if not args.no_shrink else 'first'} diverging workload "
          f"(from seed {seed}):")
    print(json.dumps(workload_to_json(divergence.workload)))
    print()
    print(divergence.render(), end="")
    return EXIT_DIVERGED


if __name__ == "__main__":
    raise SystemExit(main())
