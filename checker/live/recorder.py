"""A recorder inside vLLM's engine core: every call the engine makes on its scheduler,
written to a live trace (JSON lines, docs/schema/live_trace.schema.json).

Enabled by one environment variable: `BATCHPROOF_TRACE=/path/trace.jsonl vllm serve ...`.
batchproof registers `register` as a vLLM general plugin (pyproject.toml, entry point
group `vllm.general_plugins`); vLLM loads general plugins in the engine core before it
picks the scheduler class (v1/engine/core.py:129, 161). With the variable set, `register`
wraps `SchedulerConfig.get_scheduler_cls` (config/scheduler.py:228-253) so that whatever
class vLLM would build (Scheduler, AsyncScheduler, a --scheduler-cls of the user's, a
patched copy on PYTHONPATH) is built as a subclass that records and otherwise changes
nothing. Without the variable nothing is patched.

What is written, one JSON object per line:
- `header`: the format, its schema, vLLM's version, the scheduler class, the engine's
  configuration in batchproof's Config field names;
- `add`: a request reaches the scheduler (Scheduler.add_request): its id, prompt length,
  max_tokens, priority, the chained hashes of its prompt's full blocks when prefix caching
  is on (16 hex digits each; no token is written), and what of it the model does not cover;
- `abort`: EngineCore.abort_requests -> finish_requests(FINISHED_ABORTED), the ids the
  scheduler held in the order it freed them, the ids it did not hold (`unheld`: not added
  yet, or finished already), and whether a schedule() awaits its update;
- `schedule`: one step's SchedulerOutput and the scheduler right after it, as
  checker/conformance/vllm_real.py reads it in the conformance harness;
- `update`: update_from_output, which step's schedule it processes, the requests it
  finished, the tokens each request got, the blocks freed;
- `drafts`: update_draft_token_ids (synchronous speculative decoding), drafts per request;
- `crash`: an AssertionError out of schedule() (the engine dies);
- `error`: the recorder itself failed; it writes this and stops recording, never raising
  into the engine.

The handlers only snapshot what they read; a thread of the recorder's serialises and
writes the lines (and flushes when it has caught up), while the engine core waits on the
model runner. A server stopped with SIGTERM or SIGINT leaves every line; one killed
outright may lose the lines still queued, and the reader keeps the complete steps.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import threading
import time
import traceback
from types import SimpleNamespace
from typing import IO, Any

ENV_TRACE = "BATCHPROOF_TRACE"
FORMAT = "batchproof-live-trace"
SCHEMA = 1
HASH_DIGITS = 16  # of each block hash written: enough to tell prefixes apart, no tokens


def register() -> None:
    """The vLLM general plugin: with BATCHPROOF_TRACE set, record the engine's scheduler
    (see the module doc); without it, do nothing. Safe to call more than once."""
    if not os.environ.get(ENV_TRACE):
        return
    from vllm.config.scheduler import SchedulerConfig

    original = SchedulerConfig.get_scheduler_cls
    if getattr(original, "batchproof_recording", False):
        return

    def get_scheduler_cls(self: Any) -> type:
        return recording_class(original(self))

    get_scheduler_cls.batchproof_recording = True  # type: ignore[attr-defined]
    SchedulerConfig.get_scheduler_cls = get_scheduler_cls  # type: ignore[method-assign]


_CLASSES: dict[type, type] = {}


def recording_class(base: type) -> type:
    """`base` (a vLLM scheduler class) with every scheduler call recorded."""
    if base not in _CLASSES:
        _CLASSES[base] = type(f"Recording{base.__name__}", (_Recording, base),
                              {"__module__": __name__})
    return _CLASSES[base]


class _Recording:
    """The recording overrides; the base scheduler does all the work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._batchproof = Recorder(self, os.environ.get(ENV_TRACE, "batchproof-trace.jsonl"))

    def add_request(self, request: Any) -> None:
        super().add_request(request)  # type: ignore[misc]
        self._batchproof.call("added", request)

    def finish_requests(self, request_ids: Any, finished_status: Any) -> list[Any]:
        done = super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        self._batchproof.call("finished_from_outside", done, finished_status, request_ids)
        return done

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self._batchproof.call("preempting", request)
        return super()._preempt_request(request, *args, **kwargs)  # type: ignore[misc]

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._batchproof.call("before_schedule")
        try:
            out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        except AssertionError as exc:
            self._batchproof.call("crashed", exc)
            raise
        self._batchproof.call("scheduled", out)
        return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        self._batchproof.call("before_update", scheduler_output, model_runner_output)
        outputs = super().update_from_output(  # type: ignore[misc]
            scheduler_output, model_runner_output)
        self._batchproof.call("updated", scheduler_output, model_runner_output)
        return outputs

    def update_draft_token_ids(self, draft_token_ids: Any) -> None:
        super().update_draft_token_ids(draft_token_ids)  # type: ignore[misc]
        self._batchproof.call("drafted", draft_token_ids)


class Recorder:
    """Writes the live trace of one scheduler (see the module doc)."""

    def __init__(self, sched: Any, path: str) -> None:
        from vllm.v1.request import RequestStatus

        from checker.conformance import vllm_real

        self.harness = vllm_real  # reads the scheduler as the conformance harness does
        self.sched = sched
        self.v2_runner = bool(getattr(sched, "use_v2_model_runner", False))
        self.is_async = _is_async(sched)
        # Anything but one full-attention group records each group's blocks (a set-up the
        # model does not cover is named in the header and the trace refused anyway).
        self.hybrid = engine_kv_groups(sched)[0] != [{"kind": "full"}]
        self.status = RequestStatus
        self.step = 0  # schedule() calls so far
        self.awaiting_update = False  # a schedule() whose update has not come
        self.of_output: dict[int, int] = {}  # id(SchedulerOutput) -> its step
        self.preempted: list[str] = []
        self.waiting_status: dict[str, Any] = {}
        self.finished_before: set[str] = set()
        self.updating: dict[str, Any] = {}
        self.sampled_counts: dict[str, int] = {}
        self.free_after_schedule = 0
        self.entering: dict[int, set[str]] = {}  # step -> admitted or resumed in it
        self.lock = threading.Lock()
        self.broken = False
        self.spent = 0.0  # seconds in the handlers so far (bench/live_overhead.py)
        self.schedule_began = 0.0
        self.writer = _Writer(path)
        self.call("header")

    def call(self, what: str, *args: Any) -> None:
        """Run the handler `what`; on any failure write an `error` line and stop."""
        if self.broken:
            return
        with self.lock:
            start = time.perf_counter()
            try:
                getattr(self, what)(*args)
                self.spent += time.perf_counter() - start
            except Exception as exc:  # noqa: BLE001 - the engine must never see it
                self.broken = True
                self.write({"ev": "error", "step": self.step, "in": what,
                            "error": f"{type(exc).__name__}: {exc}",
                            "where": traceback.format_exc(limit=3)[-600:]})

    def write(self, line: dict[str, Any]) -> None:
        """Hand one event to the writer thread (the handlers only snapshot)."""
        self.writer.put(line)

    # ---- handlers ----------------------------------------------------------------------

    def header(self) -> None:
        import vllm

        self.write({"ev": "header", "format": FORMAT, "schema": SCHEMA,
                    "vllm_version": vllm.__version__.split("+")[0],
                    "scheduler": type(self.sched).__mro__[2].__name__,
                    "vllm_path": os.path.dirname(vllm.__file__),
                    "config": engine_config(self.sched), "pid": os.getpid()})

    def added(self, request: Any) -> None:
        caching = self.sched.cache_config.enable_prefix_caching
        self.write({"ev": "add", "step": self.step + 1, "id": request.request_id,
                    "prompt_len": request.num_prompt_tokens,
                    "max_tokens": request.max_tokens, "priority": request.priority,
                    **({"blocks": [bytes(h)[:HASH_DIGITS // 2].hex()
                                   for h in request.block_hashes]} if caching else {}),
                    **({"outside": outside} if (outside := outside_model(request)) else {})})

    def finished_from_outside(self, done: list[Any], status: Any, asked: Any) -> None:
        ids = [r.request_id for r in done]
        asked = [asked] if isinstance(asked, str) else list(asked or ())
        unheld = [rid for rid in asked if rid not in ids]  # unknown or finished already
        if not ids and not unheld:
            return
        line = {"ev": "abort" if status == self.status.FINISHED_ABORTED else "finish",
                "step": self.step if self.awaiting_update else self.step + 1,
                "after_schedule": self.awaiting_update, "ids": ids,
                "free_blocks": self.sched.kv_cache_manager.block_pool.get_num_free_blocks(),
                **({"unheld": unheld} if unheld else {})}
        if line["ev"] == "finish":
            line["status"] = status.name
        self.write(line)

    def preempting(self, request: Any) -> None:
        self.preempted.append(request.request_id)

    def before_schedule(self) -> None:
        self.schedule_began = time.monotonic()
        self.preempted = []
        if self.v2_runner:  # it reports resumed requests as new: tell them by status
            self.waiting_status = {r.request_id: r.status for r in self._waiting()}

    def crashed(self, exc: AssertionError) -> None:
        from checker.conformance.vllm_real import scheduler_assertion

        self.step += 1
        self.write({"ev": "crash", "step": self.step,
                    "assertion": scheduler_assertion(exc) or f"AssertionError: {exc}"})

    def scheduled(self, out: Any) -> None:
        admitted_and_resumed = self.harness.admitted_and_resumed
        cache_facts = self.harness.cache_facts
        sched = self.sched
        self.step += 1
        self.of_output[id(out)] = self.step
        # An update is due before the next schedule: this one's (synchronous) or an
        # earlier one's (async). After an async engine's first schedule none is: an abort
        # then comes before the next step's schedule, as the input queue delivers it.
        self.awaiting_update = not self.is_async or len(self.of_output) > 1
        scheduled = tuple(out.num_scheduled_tokens.items())
        admitted, resumed = admitted_and_resumed(
            SimpleNamespace(RequestStatus=self.status), sched, out, self.waiting_status)
        entering = {*admitted, *resumed}
        self.entering[self.step] = entering
        waiting = list(self._waiting())
        pool = sched.kv_cache_manager.block_pool
        self.free_after_schedule = pool.get_num_free_blocks()
        line: dict[str, Any] = {
            "ev": "schedule", "step": self.step, "scheduled": dict(scheduled),
            "admitted": list(admitted), "resumed": list(resumed),
            "preempted": list(self.preempted),
            "preempted_ids": sorted(out.preempted_req_ids or ()),
            "free_blocks": self.free_after_schedule,
            "num_computed_tokens": {r.request_id: r.num_computed_tokens
                                    for r in (*sched.running, *waiting)},
            "running": [r.request_id for r in sched.running],
            "waiting": [r.request_id for r in waiting],
            "samples": [rid for rid, _ in scheduled
                        if rid in sched.requests and not sched.requests[rid].is_prefill_chunk],
            "t": round(self.schedule_began, 6), "recorder_s": round(self.spent, 6),
        }
        if sched.cache_config.enable_prefix_caching:
            line["cache"] = dict(cache_facts(sched, scheduled, entering, sched.requests))
        if out.scheduled_spec_decode_tokens:
            line["spec_scheduled"] = {rid: len(t) for rid, t
                                      in out.scheduled_spec_decode_tokens.items() if t}
        if self.hybrid:
            # Several groups: each group's real blocks (the null block left out), as the
            # harness and the reference count them.
            managers = self.harness.managers(sched)
            line["group_blocks"] = {
                r.request_id: [self.harness.real_blocks(m, r.request_id) for m in managers]
                for r in sched.running}
        elif getattr(sched, "num_spec_tokens", 0):
            tables = self.harness.managers(sched)[0].req_to_blocks
            line["blocks_held"] = {r.request_id: len(tables.get(r.request_id, ()))
                                   for r in sched.running}
        self.write(line)

    def before_update(self, out: Any, model_output: Any) -> None:
        # The scheduler forgets a request it finishes (_free_request): keep the objects.
        self.updating = {rid: self.sched.requests.get(rid) for rid in out.num_scheduled_tokens}
        self.finished_before = {rid for rid, r in self.updating.items()
                                if r is None or r.is_finished()}
        # Counted now: update_from_output cuts a stopped request's list in place.
        index = model_output.req_id_to_index if model_output is not None else {}
        sampled = model_output.sampled_token_ids if model_output is not None else []
        self.sampled_counts = {rid: len(sampled[index[rid]]) for rid in out.num_scheduled_tokens
                               if rid in index and index[rid] < len(sampled)
                               and rid not in self.finished_before}

    def updated(self, out: Any, model_output: Any) -> None:
        self.awaiting_update = False
        finished = []
        for rid, r in self.updating.items():
            if rid not in self.finished_before and r.is_finished():
                finished.append([rid, _finish_reason(r.status, self.status)])
        tokens = self.sampled_counts
        pool = self.sched.kv_cache_manager.block_pool
        self.write({"ev": "update", "step": self.step,
                    "output_of": self.of_output.pop(id(out), None),
                    "finished": finished, "tokens": {k: n for k, n in tokens.items() if n},
                    "released_blocks": pool.get_num_free_blocks() - self.free_after_schedule})

    def drafted(self, drafts: Any) -> None:
        requests = self.sched.requests
        counts = {rid: len(r.spec_token_ids) for rid in drafts.req_ids
                  if (r := requests.get(rid)) is not None and not r.is_finished()
                  and not r.is_prefill_chunk}
        self.write({"ev": "drafts", "step": self.step, "counts": counts})

    def _waiting(self) -> list[Any]:
        return list(self.harness.waiting_in_pop_order(self.sched))


class _Writer:
    """Serialises and writes the events on a thread of its own, so the engine core pays
    only for the snapshot: its loop waits on the model runner's process every step
    (v1/engine/core.py:668-672), and the writer runs then. Each line is flushed as it is
    written; at exit the queue is drained."""

    def __init__(self, path: str) -> None:
        self.queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.out: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the engine
        self.thread = threading.Thread(target=self.run, name="batchproof-trace", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    def put(self, line: dict[str, Any]) -> None:
        self.queue.put(line)

    def run(self) -> None:
        while (line := self.queue.get()) is not None:
            self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
            if self.queue.empty():
                self.out.flush()
        self.out.flush()

    def close(self) -> None:
        """Write what is queued and stop (at interpreter exit)."""
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join(timeout=10)


def _finish_reason(status: Any, statuses: Any) -> str:
    """stop / length as the contract names them, else the status's name."""
    if status == statuses.FINISHED_STOPPED:
        return "stop"
    if status == statuses.FINISHED_LENGTH_CAPPED:
        return "length"
    return status.name.lower() if status is not None else "gone"


def engine_config(sched: Any) -> dict[str, Any]:
    """The engine's configuration in batchproof's vLLM Config field names
    (model/vllm/config.py), read off the live scheduler."""
    vc = sched.vllm_config
    sc, cc = vc.scheduler_config, vc.cache_config
    spec = vc.speculative_config
    budget = getattr(sc, "max_num_scheduled_tokens", None)
    out: dict[str, Any] = {
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_seqs": sc.max_num_seqs,
        "max_model_len": vc.model_config.max_model_len,
        "block_size": cc.block_size,
        "num_gpu_blocks": sched.kv_cache_config.num_blocks,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "policy": sc.policy,
        "enable_prefix_caching": bool(cc.enable_prefix_caching),
        # The class decides (a harness may build an AsyncScheduler on a sync config).
        "async_scheduling": bool(sc.async_scheduling) or _is_async(sched),
    }
    for name in ("long_prefill_token_threshold_adaptive", "watermark",
                 "scheduler_reserve_full_isl", "max_num_active_seqs"):
        if hasattr(sc, name):
            out[name] = getattr(sc, name)
    if budget is not None and budget != sc.max_num_batched_tokens:
        out["max_num_scheduled_tokens"] = budget
    if spec is not None:
        out["speculative_method"] = spec.method
        out["num_speculative_tokens"] = spec.num_speculative_tokens
        out["parallel_drafting"] = bool(getattr(spec, "parallel_drafting", False))
        out["disable_eagle_block_drop"] = bool(getattr(spec, "disable_eagle_block_drop", False))
    groups, why = engine_kv_groups(sched)
    if groups is not None and groups != [{"kind": "full"}]:
        out["kv_cache_groups"] = groups
    out["outside"] = ([why] if why else []) + engine_outside_model(sched)
    return out


def engine_kv_groups(sched: Any) -> tuple[list[dict[str, Any]] | None, str]:
    """The live KV cache groups in the workload's "kv_cache_groups" form, or None and the
    reason the model does not cover them. The model has full attention, sliding windows and
    Mamba in mode "none" (block size max_model_len, k speculative blocks) without prefix
    caching, and with prefix caching full attention beside Mamba in mode "align" (block
    size --block-size, k speculative blocks, no prefill checkpoint block; model/vllm/
    align_cache.py); an MLA or other subclass may keep its own manager, so the kinds are
    matched exactly."""
    vc = sched.vllm_config
    specs = [g.kv_cache_spec for g in sched.kv_cache_config.kv_cache_groups]
    names = [type(s).__name__ for s in specs]
    outside = f"KV cache groups {names}"
    k = vc.speculative_config.num_speculative_tokens if vc.speculative_config else 0
    caching = bool(vc.cache_config.enable_prefix_caching)
    groups: list[dict[str, Any]] = []
    for spec, name in zip(specs, names, strict=True):
        if name == "FullAttentionSpec" and getattr(spec, "sliding_window", None) is None \
                and getattr(spec, "attention_chunk_size", None) is None:
            groups.append({"kind": "full"})
        elif name == "SlidingWindowSpec":
            groups.append({"kind": "sliding_window", "sliding_window": spec.sliding_window})
        elif name == "MambaSpec" and spec.num_speculative_blocks == k and (
                (not caching and spec.mamba_cache_mode == "none"
                 and spec.block_size == vc.model_config.max_model_len)
                or (caching and spec.mamba_cache_mode == "align"
                    and spec.block_size == vc.cache_config.block_size
                    and not getattr(spec, "num_prefill_checkpoint_blocks", 0))):
            groups.append({"kind": "mamba"})
        else:
            return None, (f"{outside} (the model has full, sliding_window, Mamba mode none "
                          "without prefix caching and Mamba align mode without prefill "
                          "checkpoint blocks with it)")
    attention = {s.block_size for s in specs if type(s).__name__ != "MambaSpec"}
    if len(attention) > 1 or (attention and attention != {vc.cache_config.block_size}):
        return None, f"{outside} with block sizes {sorted(attention)} other than --block-size"
    kinds = {g["kind"] for g in groups}
    if groups != [{"kind": "full"}] and caching and (
            "mamba" not in kinds or "sliding_window" in kinds):
        return None, (f"{outside} with prefix caching (the model has it beside groups only "
                      "for full attention and Mamba in align mode)")
    return groups, ""


def _is_async(sched: Any) -> bool:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    return isinstance(sched, AsyncScheduler)


def engine_outside_model(sched: Any) -> list[str]:
    """What of the engine's set-up besides its KV cache groups the model does not cover
    (docs/live.md, limits)."""
    vc = sched.vllm_config
    out = []
    if vc.kv_transfer_config is not None:
        out.append("a KV connector (--kv-transfer-config)")
    if vc.parallel_config.data_parallel_size > 1:
        out.append(f"data parallel size {vc.parallel_config.data_parallel_size}")
    if vc.parallel_config.pipeline_parallel_size > 1:
        out.append(f"pipeline parallel size {vc.parallel_config.pipeline_parallel_size}")
    if getattr(vc, "lora_config", None) is not None:
        out.append("LoRA adapters")
    return out


def outside_model(request: Any) -> list[str]:
    """What of one request the model does not cover."""
    out = []
    if getattr(request, "use_structured_output", False):
        out.append("structured output")
    if getattr(request, "lora_request", None) is not None:
        out.append("a LoRA adapter")
    if getattr(request, "mm_features", None):
        out.append("multimodal inputs")
    if getattr(request, "pooling_params", None) is not None:
        out.append("pooling")
    if getattr(request, "kv_transfer_params", None):
        out.append("KV transfer parameters")
    if getattr(request, "prompt_embeds", None) is not None:
        out.append("prompt embeddings")
    return out
