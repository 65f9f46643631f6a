"""The conformance modes: which of vLLM's scheduler features a run turns on, the workloads
its generator draws, and the features and upstream branches its coverage report counts.

A mode is a row of `MODES`. The driver (`vllm_real`) reads everything it needs from each
workload's Config (`enable_prefix_caching`, and `async_scheduling`, which picks the
AsyncScheduler and feeds each schedule's output one engine step late), so a mode is only
a generator and its report lists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from checker.conformance.generate import (
    ASYNC_PREFIX_RUN_FEATURES,
    ASYNC_RUN_FEATURES,
    CONNECTOR_RUN_FEATURES,
    HYBRID_RUN_FEATURES,
    HYBRID_STATIC_FEATURES,
    PREFIX_RUN_FEATURES,
    PREFIX_STATIC_FEATURES,
    RUN_FEATURES,
    SPEC_ASYNC_RUN_FEATURES,
    SPEC_ASYNC_STATIC_FEATURES,
    SPEC_PREFIX_RUN_FEATURES,
    SPEC_RUN_FEATURES,
    SPEC_STATIC_FEATURES,
    STATIC_FEATURES,
    random_async_prefix_workload,
    random_async_workload,
    random_connector_async_workload,
    random_connector_prefix_workload,
    random_connector_workload,
    random_hybrid_mamba_align_async_workload,
    random_hybrid_mamba_align_spec_workload,
    random_hybrid_mamba_align_workload,
    random_hybrid_mamba_spec_workload,
    random_hybrid_mamba_workload,
    random_hybrid_swa_async_workload,
    random_hybrid_swa_spec_workload,
    random_hybrid_swa_workload,
    random_prefix_workload,
    random_spec_async_prefix_workload,
    random_spec_async_workload,
    random_spec_prefix_workload,
    random_spec_workload,
    random_workload,
)
from model.core.types import Workload


@dataclass(frozen=True, slots=True)
class Mode:
    """One conformance mode.

    `generate(seed, steps)` draws its workloads; `scheduler` names the vLLM class the
    workloads run on (for the report); `features` are the workload and run features its
    coverage report counts, `branch_sets` the names of `branches.BRANCH_SETS` it lists.
    `report_features`: every run also prints how many workloads had each feature (read
    from the runs it compared, no second run); the speculative modes do.
    """

    name: str
    what: str
    generate: Callable[[int, int], Workload]
    scheduler: str
    features: tuple[str, ...]
    branch_sets: tuple[str, ...]
    report_features: bool = False


MODES: dict[str, Mode] = {
    m.name: m for m in (
        Mode("off", "the synchronous Scheduler, prefix caching off (the default)",
             random_workload, "Scheduler", (*STATIC_FEATURES, *RUN_FEATURES), ("base",)),
        Mode("prefix", "the synchronous Scheduler, prefix caching on, shared prefixes built "
             "from real token ids", random_prefix_workload, "Scheduler",
             (*STATIC_FEATURES, *PREFIX_STATIC_FEATURES, *RUN_FEATURES,
              *PREFIX_RUN_FEATURES), ("base", "prefix")),
        Mode("async", "the AsyncScheduler (outputs one engine step late), prefix caching off",
             random_async_workload, "AsyncScheduler",
             (*STATIC_FEATURES, *RUN_FEATURES, *ASYNC_RUN_FEATURES), ("base", "async")),
        Mode("async+prefix", "the AsyncScheduler, prefix caching on, shared prefixes built "
             "from real token ids", random_async_prefix_workload, "AsyncScheduler",
             (*STATIC_FEATURES, *PREFIX_STATIC_FEATURES, *RUN_FEATURES, *PREFIX_RUN_FEATURES,
              *ASYNC_RUN_FEATURES, *ASYNC_PREFIX_RUN_FEATURES),
             ("base", "prefix", "async", "async+prefix")),
        Mode("spec", "speculative decoding (ngram, draft_model, eagle, eagle3; k 1..4), the "
             "synchronous Scheduler, prefix caching off", random_spec_workload, "Scheduler",
             (*SPEC_STATIC_FEATURES, *SPEC_RUN_FEATURES), ("base",), report_features=True),
        Mode("spec-prefix", "speculative decoding, the synchronous Scheduler, prefix caching "
             "on", random_spec_prefix_workload, "Scheduler",
             (*SPEC_STATIC_FEATURES, *SPEC_RUN_FEATURES, *SPEC_PREFIX_RUN_FEATURES),
             ("base", "prefix"), report_features=True),
        Mode("spec-async", "speculative decoding (draft_model, eagle, eagle3), the "
             "AsyncScheduler, prefix caching off", random_spec_async_workload,
             "AsyncScheduler",
             (*SPEC_ASYNC_STATIC_FEATURES, *SPEC_RUN_FEATURES, *SPEC_ASYNC_RUN_FEATURES),
             ("base", "async"), report_features=True),
        Mode("spec-async-prefix", "speculative decoding, the AsyncScheduler, prefix caching "
             "on", random_spec_async_prefix_workload, "AsyncScheduler",
             (*SPEC_ASYNC_STATIC_FEATURES, *SPEC_RUN_FEATURES, *SPEC_ASYNC_RUN_FEATURES,
              *SPEC_PREFIX_RUN_FEATURES),
             ("base", "prefix", "async", "async+prefix"), report_features=True),
        Mode("connector", "a KV connector (the harness's own, answering from the workload: "
             "sync and async external hits, load reports and failures), the synchronous "
             "Scheduler, prefix caching off", random_connector_workload, "Scheduler",
             (*STATIC_FEATURES, *RUN_FEATURES, *CONNECTOR_RUN_FEATURES), ("base",),
             report_features=True),
        Mode("connector+prefix", "a KV connector as in mode connector, prefix caching on "
             "(shared prefixes built from real token ids, as in mode prefix)",
             random_connector_prefix_workload, "Scheduler",
             (*STATIC_FEATURES, *PREFIX_STATIC_FEATURES, *RUN_FEATURES, *PREFIX_RUN_FEATURES,
              *CONNECTOR_RUN_FEATURES), ("base", "prefix"), report_features=True),
        Mode("connector+async", "a KV connector as in mode connector, the AsyncScheduler "
             "(outputs one engine step late; a consumer connector's frees wait for the "
             "steps in flight), prefix caching on for half the seeds",
             random_connector_async_workload, "AsyncScheduler",
             (*STATIC_FEATURES, *RUN_FEATURES, *ASYNC_RUN_FEATURES, *CONNECTOR_RUN_FEATURES),
             ("base", "async"), report_features=True),
        Mode("hybrid-swa", "sliding-window KV cache groups beside full-attention ones, the "
             "synchronous Scheduler, prefix caching off", random_hybrid_swa_workload,
             "Scheduler", (*STATIC_FEATURES, *RUN_FEATURES, *HYBRID_STATIC_FEATURES,
                           *HYBRID_RUN_FEATURES), ("base",), report_features=True),
        Mode("hybrid-async", "sliding-window (or, a third of the seeds, Mamba) KV cache "
             "groups, the AsyncScheduler, prefix caching off",
             random_hybrid_swa_async_workload, "AsyncScheduler",
             (*STATIC_FEATURES, *RUN_FEATURES, *ASYNC_RUN_FEATURES, *HYBRID_STATIC_FEATURES,
              *HYBRID_RUN_FEATURES), ("base", "async"), report_features=True),
        Mode("hybrid-swa-spec", "sliding-window KV cache groups with speculative decoding "
             "(lookahead slots past the window), the synchronous Scheduler, prefix caching off",
             random_hybrid_swa_spec_workload, "Scheduler",
             (*SPEC_STATIC_FEATURES, *SPEC_RUN_FEATURES, *HYBRID_STATIC_FEATURES,
              *HYBRID_RUN_FEATURES), ("base",), report_features=True),
        Mode("hybrid-mamba", "Mamba KV cache groups (mamba_cache_mode none) beside full-"
             "attention ones, the synchronous Scheduler, prefix caching off",
             random_hybrid_mamba_workload, "Scheduler",
             (*STATIC_FEATURES, *RUN_FEATURES, *HYBRID_STATIC_FEATURES,
              *HYBRID_RUN_FEATURES), ("base",), report_features=True),
        Mode("hybrid-mamba-spec", "Mamba KV cache groups with speculative decoding (1 + k "
             "state blocks per request), the synchronous Scheduler, prefix caching off",
             random_hybrid_mamba_spec_workload, "Scheduler",
             (*SPEC_STATIC_FEATURES, *SPEC_RUN_FEATURES, *HYBRID_STATIC_FEATURES,
              *HYBRID_RUN_FEATURES), ("base",), report_features=True),
        Mode("hybrid-mamba-align", "Mamba KV cache groups in align mode (prefix caching on: "
             "the hybrid coordinator's hit search, position-indexed state tables, "
             "block-aligned chunks), the synchronous Scheduler",
             random_hybrid_mamba_align_workload, "Scheduler",
             (*STATIC_FEATURES, *PREFIX_STATIC_FEATURES, *RUN_FEATURES, *PREFIX_RUN_FEATURES,
              *HYBRID_STATIC_FEATURES, *HYBRID_RUN_FEATURES), ("base", "prefix"),
             report_features=True),
        Mode("hybrid-mamba-align-spec", "Mamba KV cache groups in align mode with "
             "speculative decoding (drafts in the state table, EAGLE's block drop), the "
             "synchronous Scheduler", random_hybrid_mamba_align_spec_workload, "Scheduler",
             (*SPEC_STATIC_FEATURES, *SPEC_RUN_FEATURES, *SPEC_PREFIX_RUN_FEATURES,
              *HYBRID_STATIC_FEATURES, *HYBRID_RUN_FEATURES), ("base", "prefix"),
             report_features=True),
        Mode("hybrid-mamba-align-async-spec", "Mamba KV cache groups in align mode, the "
             "AsyncScheduler (processed tokens lag one batch), speculative decoding in two "
             "seeds of three", random_hybrid_mamba_align_async_workload, "AsyncScheduler",
             (*STATIC_FEATURES, *RUN_FEATURES, *ASYNC_RUN_FEATURES, *SPEC_RUN_FEATURES,
              *HYBRID_STATIC_FEATURES, *HYBRID_RUN_FEATURES), ("base", "async"),
             report_features=True),
    )
}
DEFAULT_MODE = "off"
