"""What `batchproof config` checks, apart from how it is asked: the parsed request, and the
effective configuration resolved as vLLM's EngineArgs does and validated by vLLM's
SchedulerConfig and startup rules."""

from __future__ import annotations

from dataclasses import dataclass, replace

from checker.config.hazards import Envelope, ample_pool
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
    check_field_types(cfg)
    try:
        validate(cfg)
    except ConfigError as exc:
        return Checked(eff, cfg, pool_known, exc)
    error = (None if req.spec is None
             else spec_rejection(cfg, req.spec, req.lora, req.async_flag))
    if not pool_known:
        cfg = replace(cfg, num_gpu_blocks=ample_pool(cfg))
    if error is None and pool_known:
        error = kv_rejection(cfg)
    return Checked(eff, cfg, pool_known, error)
