"""Which branches of vLLM's real scheduler a batch of workloads reaches.

Measured on the real code: while `run_real_vllm` runs, a `sys.settrace` line tracer
records the lines executed in vLLM's `scheduler.py`, `kv_cache_manager.py` and
`sched/utils.py` (no coverage.py needed). Each branch of the modelled scope is named by
the source line that only that branch executes, found by text (an anchor line, then the
first line at or after it containing `target`), so the table survives line moves within
the pinned version and fails loudly if the text is gone. Branches marked unreachable
cannot be taken in the modelled scope (the reason is given) and are reported, not required.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from model.core.types import Workload


@dataclass(frozen=True, slots=True)
class Branch:
    """One upstream branch: the first line containing `target` at or after the
    `occurrence`-th line of `file` (relative to the vllm package) containing `anchor`."""

    name: str
    file: str
    anchor: str
    target: str
    what: str
    occurrence: int = 1
    unreachable: str = ""  # why the modelled scope cannot take it ("" = reachable)


_S = "v1/core/sched/scheduler.py"
_K = "v1/core/kv_cache_manager.py"
_U = "v1/core/sched/utils.py"

BRANCHES: tuple[Branch, ...] = (
    Branch("long_prefill:adaptive_floor", _S,
           "if long_prefill_token_threshold > 0 and self.adaptive_long_prefill_threshold:",
           "long_prefill_token_threshold = max(", "adaptive threshold raised to budget // n"),
    Branch("running:input_budget_break", _S, "if input_budget <= draft_slots:", "break",
           "running loop stops: max_num_batched_tokens used up (max_num_scheduled_tokens > it)",
           unreachable="sync, no spec decode: a request gets behind another in `running` only "
                       "if the batch had room after that one's chunk, and the chunks ahead of "
                       "it do not grow from step to step, so the batch is never full before "
                       "the last running request (argued; 0 hits in 1,500 workloads drawn "
                       "with max_num_scheduled_tokens > max_num_batched_tokens)"),
    Branch("running:long_prefill_cap", _S,
           "if 0 < long_prefill_token_threshold < num_new_tokens:",
           "num_new_tokens = long_prefill_token_threshold", "running chunk capped"),
    Branch("running:zero_tokens_skip", _S,
           "# The request cannot be scheduled because one of the following", "continue",
           "running request gets 0 tokens and is skipped",
           unreachable="sync, no spec decode/encoder/Mamba/PP: a running request always has "
                       ">= 1 token to compute below max_model_len - 1 while budget > 0"),
    Branch("running:preempt_fcfs", _S, "preempted_req = self.running.pop()",
           "preempted_req = self.running.pop()", "FCFS victim = running[-1]"),
    Branch("running:preempt_priority", _S, "victim_index = self.running.index(preempted_req)",
           "victim_index = self.running.index(preempted_req)",
           "PRIORITY victim = max (priority, arrival)"),
    Branch("running:priority_victim_before_index", _S, "if victim_index < req_index:",
           "req_index -= 1", "PRIORITY victim already passed in this loop"),
    Branch("running:priority_victim_was_scheduled", _S,
           "restored = num_scheduled_tokens.pop(preempted_req_id)",
           "restored = num_scheduled_tokens.pop(preempted_req_id)",
           "PRIORITY victim's tokens of this step given back"),
    Branch("running:self_preemption", _S, "if preempted_req == request:", "break",
           "the request preempted itself"),
    Branch("running:alloc_fail_break", _S, "if new_blocks is None:", "break",
           "running loop ends on an allocation failure"),
    Branch("waiting:loop_entered", _S, "step_skipped_waiting: deque[Request] = deque()",
           "step_skipped_waiting: deque[Request] = deque()", "no preemption: waiting loop runs"),
    Branch("waiting:empty_or_input_budget_break", _S,
           "if not request_queue or input_budget <= draft_slots:", "break",
           "waiting loop ends: queue empty or batch full"),
    Branch("waiting:seq_cap_break", _S, "if num_running >= self.max_num_active_reqs:", "break",
           "waiting loop ends: max_num_seqs / max_num_active_seqs reached"),
    Branch("waiting:long_prefill_cap", _S,
           "if 0 < long_prefill_token_threshold < num_new_tokens:",
           "num_new_tokens = long_prefill_token_threshold", "waiting chunk capped",
           occurrence=2),
    Branch("waiting:no_chunking_break", _S, "# we can stop the scheduling here.", "break",
           "chunked prefill off and the prompt exceeds the budget left"),
    Branch("waiting:alloc_fail_break", _S, "if new_blocks is None:", "break",
           "head-of-line: admission fails on blocks, the waiting loop ends", occurrence=2),
    Branch("waiting:admit_new", _S, "scheduled_new_reqs.append(request)",
           "scheduled_new_reqs.append(request)", "a new request admitted"),
    Branch("waiting:admit_resumed", _S, "scheduled_resumed_reqs.append(request)",
           "scheduled_resumed_reqs.append(request)", "a preempted request resumed"),
    Branch("kv:watermark_applied", _K, "watermark_blocks = self.watermark_blocks",
           "watermark_blocks = self.watermark_blocks", "watermark counted for an admission"),
    Branch("kv:full_sequence_reject", _K, "if full_sequence_must_fit:", "return None",
           "scheduler_reserve_full_isl: whole sequence does not fit"),
    Branch("kv:slots_reject", _K, "if required_blocks > available_blocks:", "return None",
           "the chunk's blocks do not fit"),
    Branch("stop:eos", _U, "if last_token_id == sampling_params.eos_token_id:",
           "request.status = RequestStatus.FINISHED_STOPPED", "finished by EOS"),
    Branch("stop:length", _U, "request.num_tokens >= max_model_len",
           "request.status = RequestStatus.FINISHED_LENGTH_CAPPED",
           "finished by max_tokens or max_model_len"),
)


@functools.cache
def _vllm_root() -> str:
    import vllm

    return os.path.dirname(os.path.abspath(vllm.__file__))


@functools.cache
def branch_lines() -> dict[str, tuple[str, int]]:
    """Branch name -> (absolute file path, line number) in the installed vLLM."""
    out: dict[str, tuple[str, int]] = {}
    for b in BRANCHES:
        path = os.path.join(_vllm_root(), b.file)
        with open(path) as f:
            lines = f.read().splitlines()
        seen = 0
        start = None
        for i, line in enumerate(lines):
            if b.anchor in line:
                seen += 1
                if seen == b.occurrence:
                    start = i
                    break
        if start is None:
            raise RuntimeError(f"branch {b.name}: anchor {b.anchor!r} (occurrence "
                               f"{b.occurrence}) not found in {path}; update BRANCHES")
        hit = next((i for i in range(start, min(start + 25, len(lines)))
                    if b.target in lines[i]), None)
        if hit is None:
            raise RuntimeError(f"branch {b.name}: {b.target!r} not within 25 lines after "
                               f"{b.anchor!r} in {path}; update BRANCHES")
        out[b.name] = (path, hit + 1)
    return out


class _LineTracer:
    """Records (file, line) pairs executed in the traced files while active."""

    def __init__(self, files: Iterable[str]) -> None:
        self.files = frozenset(files)
        self.lines: set[tuple[str, int]] = set()

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines.add((frame.f_code.co_filename, frame.f_lineno))
        return self._local

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_filename in self.files:
            return self._local
        return None

    def __enter__(self) -> _LineTracer:
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._previous)


def branches_hit(workload: Workload) -> frozenset[str]:
    """The BRANCHES that one real run of `workload` takes."""
    from checker.conformance.vllm_real import run_real_vllm

    targets = branch_lines()
    with _LineTracer({path for path, _ in targets.values()}) as tracer:
        run_real_vllm(workload)
    return frozenset(name for name, where in targets.items() if where in tracer.lines)


def branch_counts(workloads: Iterable[Workload]) -> Counter[str]:
    """For each branch, the number of workloads whose real run takes it."""
    counts: Counter[str] = Counter({b.name: 0 for b in BRANCHES})
    for w in workloads:
        counts.update(branches_hit(w))
    return counts


def missing_reachable(counts: Counter[str]) -> tuple[str, ...]:
    """The reachable branches that no workload took."""
    return tuple(b.name for b in BRANCHES if not b.unreachable and counts[b.name] == 0)
