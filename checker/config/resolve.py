"""What `batchproof config` checks, apart from how it is asked: the parsed request, and the
effective configuration resolved as vLLM's EngineArgs does and validated by vLLM's
SchedulerConfig and startup rules."""

from __future__ import annotations

from dataclasses import dataclass, replace

from checker.config.hazards import Envelope, ample_pool
from checker.config.model_kind import (
    KIND_MAMBA,
    NOT_STATED,
    ONE_FULL_GROUP,
    KvSizing,
    ModelKind,
    kv_groups,
    kv_startup_rejection,
    with_kind,
)
from model.core.errors import ConfigError, InputError
from model.vllm.config import Config
from model.vllm.deployment import MODEL_SCOPE, Deployment
from model.vllm.engine_args import Device, EffectiveConfig, EngineArgs, device_with_memory, resolve
from model.vllm.startup import SpecDecode, kv_rejection, spec_rejection
from model.vllm.validation import check_field_types, validate


@dataclass(frozen=True, slots=True)
class Request:
    """Everything the command needs, parsed and checked for shape (not for vLLM's rules)."""

    engine_args: EngineArgs
    device: Device | None
    spec: SpecDecode | None
    lora: bool
    model: str
    ignored: tuple[str, ...]
    envelope: Envelope
    deployment: Deployment = MODEL_SCOPE  # the scheduling features it turns on
    async_flag: bool | None = None  # --async-scheduling as given (None: unset)
    kind: ModelKind = NOT_STATED  # the served model's KV cache layout
    pipeline_parallel: int = 1


@dataclass(frozen=True, slots=True)
class Checked:
    """The effective configuration and the first rule it breaks, if any."""

    effective: EffectiveConfig | None
    config: Config | None
    pool_known: bool
    error: ConfigError | None


def check_config(req: Request) -> Checked:
    """Resolve and validate: SchedulerConfig's rules (with the speculative ones), then the
    speculative-decoding rules of EngineArgs and VllmConfig, then the KV startup check."""
    device = req.device
    ea = req.engine_args
    if device is None:
        if ea.max_num_batched_tokens is None or ea.max_num_seqs is None:
            raise InputError("give --device NAME or --gpu-memory-gib G: vLLM's defaults for "
                             "max_num_batched_tokens and max_num_seqs depend on the device "
                             "(engine/arg_utils.py:2893-2985), or set both flags")
        device = device_with_memory(0.0)
    eff = resolve(ea, device)
    # Speculative decoding the model covers is part of the Config it validates and runs
    # (its rules are SchedulerConfig-time, model/vllm/validation.py); a setting outside
    # the model leaves the Config without it and gets only the step-free rules.
    cfg = eff.to_config() if req.spec is None else req.spec.on(eff.to_config())
    pool_known = ea.num_gpu_blocks is not None
    if req.kind.feature() is not None and (not req.deployment.prefix_caching
                                           or req.kind.align_modelled):
        # The kind's KV cache groups, which the model runs with prefix caching off, and
        # Mamba's with it on too (align mode, in the reference).
        try:
            cfg = replace(with_kind(req.kind, cfg),
                          enable_prefix_caching=bool(req.deployment.prefix_caching))
        except InputError:  # vLLM cannot group the layers: _grouping_error says it below
            pass
    check_field_types(cfg)
    try:
        validate(cfg)
    except ConfigError as exc:
        return Checked(eff, cfg, pool_known, exc)
    error = (None if req.spec is None
             else spec_rejection(cfg, req.spec, req.lora, req.async_flag))
    if not pool_known:
        cfg = replace(cfg, num_gpu_blocks=ample_pool(cfg))
    if error is None:
        error = _grouping_error(req.kind)
    if error is None and pool_known:
        error = kv_check(req, cfg)
    return Checked(eff, cfg, pool_known, error)


def _grouping_error(kind: ModelKind) -> ConfigError | None:
    """The error vLLM stops with when it cannot group the layers at all (Mamba layers
    without the hybrid KV cache manager), whatever the pool."""
    try:
        kv_groups(kind)
    except ConfigError as exc:
        return exc
    return None


def kv_sizing(req: Request, cfg: Config) -> KvSizing:
    """What vLLM's KV startup check reads for this request besides the model kind. Mamba
    layers run mamba_cache_mode "align" exactly when prefix caching is on (an explicit
    mode is overridden either way, model_executor/models/config.py:684-704)."""
    spec = req.spec
    k = 0 if spec is None else spec.num_speculative_tokens
    multi_mtp = (spec is not None and spec.method == "mtp" and spec.mtp_layers is not None
                 and min(spec.mtp_layers, k) > 1)
    return KvSizing(max_model_len=cfg.max_model_len, block_size=cfg.block_size,
                    num_gpu_blocks=cfg.num_gpu_blocks,
                    max_num_batched_tokens=cfg.max_num_batched_tokens,
                    async_scheduling=req.deployment.async_scheduling,
                    pipeline_parallel=req.pipeline_parallel, num_speculative_tokens=k,
                    multi_module_mtp=multi_mtp,
                    mamba_mode="align" if req.deployment.prefix_caching else "none")


def kv_check(req: Request, cfg: Config) -> ConfigError | None:
    """vLLM's KV startup check for the served model's kind: one full-attention group's
    (model/vllm/startup.kv_rejection) when that is what vLLM runs, else the hybrid KV
    cache manager's arithmetic (checker/config/model_kind.py). Without a stated kind the
    error says it assumed one full-attention group."""
    kind = req.kind
    if kind.kind == KIND_MAMBA or (kind.stated and not kind.one_full_group):
        try:
            return kv_startup_rejection(kind, kv_sizing(req, cfg))
        except ConfigError as exc:  # vLLM cannot group the layers at all
            return exc
    error = kv_rejection(cfg)
    if error is None or kind.stated:
        return error
    return ConfigError(error.rule, f"{error}; this assumes {ONE_FULL_GROUP} (the model kind "
                       "was not stated): for sliding-window or Mamba layers give --model-kind")
