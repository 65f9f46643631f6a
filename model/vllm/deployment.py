"""What a vLLM engine runs besides its SchedulerConfig: the features that change how the
scheduler decides (v0.32.0; lines relative to vllm/), and which of them the model covers.

A verdict is only as good as its scope: a configuration that turns on a feature the model
does not cover gets no PROVED or HOLDS that depends on it (checker/config/scope.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from model.vllm.startup import SpecDecode


@dataclass(frozen=True, slots=True)
class Feature:
    """A scheduling feature of the engine: its name and where vLLM turns it on."""

    name: str
    upstream: str
    effect: str


PREFIX_CACHING = Feature(
    "prefix caching", "config/cache.py:141, engine/arg_utils.py:2987-3055",
    "a waiting request starts from its longest cached prefix of full blocks and shares "
    "blocks with other requests (v1/core/kv_cache_manager.py:268-300)")
ASYNC_SCHEDULING = Feature(
    "async scheduling", "config/vllm.py:1541-1644, config/scheduler.py:228-236",
    "the AsyncScheduler schedules step k before step k-1's output is known: EOS is seen "
    "one step late (v1/core/sched/async_scheduler.py)")
SPECULATIVE_DECODING = Feature(
    "speculative decoding", "config/speculative.py, v1/core/sched/scheduler.py:612-614, "
    "703-721, 857-876, 1131-1153, 2108-2128",
    "draft tokens take budget and draft slots; allocate_slots reserves lookahead blocks")


def speculative_outside(reason: str) -> Feature:
    """A speculative-decoding setting the model leaves out, named by why."""
    return Feature("speculative decoding (" + reason.split(":")[0] + ")",
                   "config/speculative.py, config/vllm.py:615-663", reason)
LORA = Feature("LoRA", "v1/core/sched/scheduler.py (max_loras per step)",
               "a step admits requests of at most max_loras adapters")
KV_CONNECTOR = Feature("KV connector", "v1/core/sched/scheduler.py (kv_holding_waiting)",
                       "requests load or send KV asynchronously and wait for it")
PIPELINE_PARALLEL = Feature("pipeline parallelism", "config/vllm.py:577-587",
                            "several batches are in flight at once (a batch queue)")
QUEUE_LIMITS = Feature("queue limits", "v1/engine (max_num_queued_reqs/tokens)",
                       "requests are rejected at arrival when the queue is full")
PREFILL_INTERVAL = Feature("prefill_schedule_interval", "config/scheduler.py",
                           "prefills are scheduled only every N steps")
CUSTOM_SCHEDULER = Feature("a custom scheduler_cls", "config/scheduler.py:228-236",
                           "another scheduler class replaces the modelled one")

# Features the vLLM model covers today; a feature moves here when its rules are modelled
# and conformance-tested against the real engine (checker/conformance, modes prefix,
# async and async+prefix). The symbolic prefix cache is exact but heavy: a caller whose
# bounded state is too large for it keeps prefix caching outside (state.cache_model_fits).
# Speculative decoding with a method of model/vllm/config.SPEC_METHODS_MODELLED (static k,
# single-module MTP) is in the reference, synchronous and async (model/vllm/reference.py);
# the other settings stay outside (SpecDecode.outside, model/vllm/startup.py).
MODELLED: frozenset[str] = frozenset({"prefix caching", "async scheduling",
                                      "speculative decoding"})


@dataclass(frozen=True, slots=True)
class Deployment:
    """The features a configuration turns on, as vLLM resolves them.

    The default is the model's own scope (the synchronous Scheduler, prefix caching off);
    `resolve_deployment` in checker/config/ gives what `vllm serve` runs for given flags.
    """

    prefix_caching: bool = False
    async_scheduling: bool = False
    speculative: SpecDecode | None = None
    lora: bool = False
    others: tuple[Feature, ...] = ()

    def features(self) -> tuple[Feature, ...]:
        """Every scheduling feature this deployment turns on."""
        on = [f for f, flag in ((PREFIX_CACHING, self.prefix_caching),
                                (ASYNC_SCHEDULING, self.async_scheduling)) if flag]
        if self.speculative is not None:
            outside = self.speculative.outside()
            on.append(SPECULATIVE_DECODING if outside is None
                      else speculative_outside(outside))
        if self.lora:
            on.append(LORA)
        return (*on, *self.others)

    def outside_model(self) -> tuple[Feature, ...]:
        """The features turned on that the model does not cover."""
        return tuple(f for f in self.features() if f.name not in MODELLED)


def outside_reason(features: tuple[Feature, ...]) -> str:
    """The UNKNOWN reason for verdicts that depend on unmodelled features."""
    return "outside the model: " + ", ".join(f.name for f in features)


def serve_deployment(prefix_caching: bool | None, async_scheduling: bool | None,
                     speculative: SpecDecode | None, lora: bool, cpu_platform: bool,
                     pipeline_parallel: int, others: tuple[Feature, ...] = ()) -> Deployment:
    """What `vllm serve` runs for these flags (None: the flag was not given).

    Prefix caching is on unless turned off, for the decoder-only generate models the model
    covers (config/cache.py:141, engine/arg_utils.py:2987-3055). Async scheduling, when
    unset, is on unless a speculative setting without async support (SpecDecode.keeps_async,
    config/vllm.py:1597-1617) or pipeline parallelism turns it off (config/vllm.py:1541-1644);
    the CPU platform forces it off (platforms/cpu.py:329-331).
    """
    if async_scheduling is None:
        async_scheduling = (pipeline_parallel == 1 and (
            speculative is None or speculative.keeps_async))
    if cpu_platform:
        async_scheduling = False
    extra = (PIPELINE_PARALLEL,) if pipeline_parallel > 1 else ()
    return Deployment(prefix_caching=True if prefix_caching is None else prefix_caching,
                      async_scheduling=async_scheduling, speculative=speculative, lora=lora,
                      others=(*extra, *others))


# The deployment the model itself is: the synchronous Scheduler, prefix caching off,
# nothing else on (the manifest's configurations and `check`'s defaults).
MODEL_SCOPE = Deployment()
