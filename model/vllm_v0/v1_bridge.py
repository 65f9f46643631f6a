"""One configuration for vLLM V0 (0.10.2) and vLLM V1 (0.32.0): the scheduler fields the
two releases share, and the translation of either engine's config dict into the other's,
for `batchproof diff vllm-v0 vllm-v1` (docs/vllm_versions.md, "vLLM V0 against V1").

The room does not import V1's (the rooms never import each other): it names V1's field
names as strings, each with the value at which V1 runs what V0 does. A field one engine
has and the other lacks is carried over only at that value; set to anything else it would
be silently dropped, so the translation refuses it (an InputError naming the field and the
fix). A field the bridge does not know is refused too: a field added to either config must
be placed here before the two can be compared on it.

Citations: V0 paths are relative to vllm/ of 0.10.2 (SC = config/scheduler.py, BM =
core/block_manager.py), V1 paths to vllm/ of 0.32.0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from model.core.errors import InputError, shown
from model.vllm_v0.config import DEFAULT_WATERMARK, ENGINE_VLLM_V0

ENGINE_VLLM_V1 = "vllm-v1"  # the other engine's registry name (model/vllm/config.py)

# Same name, same meaning in both releases' SchedulerConfig / CacheConfig.
SHARED: tuple[str, ...] = ("max_num_batched_tokens", "max_num_seqs", "max_model_len",
                           "block_size", "num_gpu_blocks", "enable_chunked_prefill",
                           "policy")


@dataclass(frozen=True, slots=True)
class OneSided:
    """A field only one engine's config has: the value at which the other engine's rule
    is what this one runs, and the fix to give when it is set otherwise."""

    neutral: object
    fix: str


# V1 fields V0's model lacks, at the value where V1 decides as V0 does.
V1_ONLY: Mapping[str, OneSided] = {
    "long_prefill_token_threshold": OneSided(0, "V0's model caps no prefill chunk; set it 0"),
    "long_prefill_token_threshold_adaptive": OneSided(
        False, "V0 0.10.2 has no adaptive threshold; set it false"),
    # V0's can_allocate checks the whole prompt against the free blocks (BM:110-147), as
    # V1 does with scheduler_reserve_full_isl (v1/core/sched/scheduler.py:1270).
    "scheduler_reserve_full_isl": OneSided(True, "V0 admits only a whole prompt that fits; "
                                           "set it true"),
    "max_num_active_seqs": OneSided(None, "V0 0.10.2 has no max_num_active_seqs; drop it"),
    "max_num_scheduled_tokens": OneSided(
        None, "V0 0.10.2 has one budget, max_num_batched_tokens; drop it"),
    "enable_prefix_caching": OneSided(False, "the V0 model has no prefix caching; set "
                                      "enable_prefix_caching false"),
    "async_scheduling": OneSided(False, "V0's LLMEngine schedules synchronously in the "
                                 "model; set async_scheduling false"),
    "speculative_method": OneSided("", "the V0 model has no speculative decoding; drop it"),
    "num_speculative_tokens": OneSided(0, "the V0 model has no speculative decoding"),
    "parallel_drafting": OneSided(False, "the V0 model has no speculative decoding"),
    "disable_eagle_block_drop": OneSided(False, "the V0 model has no speculative decoding"),
    # V1's watermark is kv_cache_manager.py:205-208's; V0 keeps the block manager's own
    # 0.01 at admission (BM:67, 93), the only value 0.10.2 runs: 0 blocks below 100.
    "watermark": OneSided(0.0, "V1's watermark has no V0 counterpart (V0 always keeps "
                          "0.01, core/block_manager.py:67); set it 0"),
    "rules": OneSided({}, "V1's rule switches have no V0 counterpart; drop 'rules'"),
}

# V0 fields V1's model lacks, at the value where V0 decides as V1 does.
V0_ONLY: Mapping[str, OneSided] = {
    "watermark": OneSided(DEFAULT_WATERMARK, "vLLM 0.10.2 always runs 0.01 "
                          "(core/block_manager.py:67); leave it at 0.01"),
    "max_num_partial_prefills": OneSided(1, "V1 has no concurrent partial prefills; set 1"),
    # V1's scheduler has no swap space: a victim's blocks are freed and it is recomputed.
    "preemption_mode": OneSided("recompute", "V1 preempts only by recomputation; set "
                                "preemption_mode \"recompute\""),
    "num_cpu_blocks": OneSided(0, "V1 has no CPU swap pool; set num_cpu_blocks 0"),
}

# V0's naive allocator hands out every block (core/block/naive_block.py:40); V1's pool keeps
# block 0 as the null block (v1/core/block_pool.py:185-188): free counts differ by one.
ACCOUNTING = ("free_blocks is not compared: V0's allocator has no null block, V1's pool "
              "has one (usable = num_gpu_blocks - 1), so free-block counts differ by "
              "accounting, not by decision")


def _spelled(value: object) -> str:
    """A value as the config JSON spells it (true, null, 0.5), else its repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return json.dumps(value)
    return shown(value)


def _carried(raw: Mapping[str, Any], source: str, target: str,
             one_sided: Mapping[str, OneSided]) -> dict[str, Any]:
    """The shared fields of `raw` (a `source` config dict); InputError for a one-sided
    field set away from its neutral value, or a field the bridge does not know."""
    for name in sorted(raw, key=str):
        if name in SHARED:
            continue
        if name not in one_sided:
            raise InputError(f"{source} config field {shown(name)} has no {target} "
                             f"counterpart the V0/V1 bridge knows (model/vllm_v0/"
                             f"v1_bridge.py); drop it to compare {source} with {target}")
        side = one_sided[name]
        if raw[name] != side.neutral:
            raise InputError(f"{source} config field {name} is {_spelled(raw[name])}, which "
                             f"{target} cannot take ({target} would silently drop it); "
                             f"{side.fix} to compare the two")
    return {name: raw[name] for name in SHARED if name in raw}


def v0_from_v1(raw: Mapping[str, Any]) -> dict[str, Any]:
    """V0's config dict for a V1 config dict (its config_to_dict): the shared fields."""
    return _carried(raw, ENGINE_VLLM_V1, ENGINE_VLLM_V0, V1_ONLY)


def v1_from_v0(raw: Mapping[str, Any]) -> dict[str, Any]:
    """V1's config dict for a V0 config dict (its config_to_dict): the shared fields; V1
    gives its others their defaults, which are V1_ONLY's neutral values (a diff checks it
    by translating V1's config back)."""
    return _carried(raw, ENGINE_VLLM_V0, ENGINE_VLLM_V1, V0_ONLY)


@dataclass(frozen=True, slots=True)
class ConfigBridge:
    """How one configuration reaches two engines: per target engine, the function from
    the other engine's config dict to the target's; the step observables the two count
    alike (none here) and why the others are not compared."""

    engines: tuple[str, str]
    into: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]]
    shared: tuple[str, ...]
    step_observables: tuple[str, ...]
    not_compared: str


V1_BRIDGE = ConfigBridge(engines=(ENGINE_VLLM_V0, ENGINE_VLLM_V1),
                         into={ENGINE_VLLM_V0: v0_from_v1, ENGINE_VLLM_V1: v1_from_v0},
                         shared=SHARED, step_observables=(), not_compared=ACCOUNTING)
