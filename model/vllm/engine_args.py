"""The effective scheduler configuration, resolved as vLLM's `EngineArgs` resolves it
(v0.32.0; lines relative to vllm/).

What the user set wins. Otherwise:
- `get_batch_defaults` picks max_num_batched_tokens / max_num_seqs from the device's
  memory, its name and the usage context (engine/arg_utils.py:2893-2985);
- `_set_default_max_num_seqs_and_batched_tokens_args` (arg_utils.py:3097-3186) fills the
  unset values from that tier (3112-3127), doubles them in throughput mode (3129-3134),
  raises the token budget to max_model_len when chunked prefill is off (3140-3146), caps
  it at max_num_seqs * max_model_len (3164-3170) and caps max_num_seqs at the token
  budget (3178-3180);
- chunked prefill defaults to what the model supports (arg_utils.py:2990-2994), True for
  the decoder-only generative models this checker models (config/model.py:2175-2218);
- the other scheduler and cache fields keep SchedulerConfig / CacheConfig defaults.

Every resolved value carries its origin, so a user can see why it is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from model.core.errors import InputError
from model.vllm.config import POLICY_FCFS, Config

GIB = 1024**3

ORIGIN_USER = "user"
ORIGIN_DEFAULT = "default"
ORIGIN_TIER = "default tier"
ORIGIN_DOUBLED = "doubled"
ORIGIN_CLAMPED = "clamped"

USAGE_SERVE = "serve"  # UsageContext.OPENAI_API_SERVER (`vllm serve`)
USAGE_LLM = "llm"  # UsageContext.LLM_CLASS (`vllm.LLM(...)`)
USAGE_ENGINE = "engine"  # any other context: SchedulerConfig's own defaults apply
USAGES = (USAGE_SERVE, USAGE_LLM, USAGE_ENGINE)

PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")  # config/vllm.py:139, 433

PLATFORM_CUDA, PLATFORM_CPU, PLATFORM_TPU = "cuda", "cpu", "tpu"


@dataclass(frozen=True, slots=True)
class Device:
    """What `get_batch_defaults` reads about the machine: total device memory, the device
    name (lowercased, as `get_device_name().lower()` at arg_utils.py:2913-2914), the
    platform, and the TPU chip name when the platform is a TPU."""

    key: str
    memory_gib: float
    name: str
    platform: str = PLATFORM_CUDA
    tpu_chip: str = ""


# Memory is what torch reports (GiB), not the marketing figure: an "80GB" H100 reports
# about 79.2 GiB, a "192GB" B200 about 179 GiB. Only the tiers (>= 160, >= 70) matter.
DEVICES: tuple[Device, ...] = (
    Device("b300", 268.0, "nvidia b300"),
    Device("b200", 179.0, "nvidia b200"),
    Device("mi300x", 191.5, "amd instinct mi300x"),
    Device("h200", 139.8, "nvidia h200"),
    Device("h100", 79.2, "nvidia h100 80gb hbm3"),
    Device("gh200", 94.5, "nvidia gh200 480gb"),
    Device("a100-80gb", 79.2, "nvidia a100-sxm4-80gb"),
    Device("a100-40gb", 39.4, "nvidia a100-sxm4-40gb"),
    Device("l40s", 44.4, "nvidia l40s"),
    Device("a10g", 22.0, "nvidia a10g"),
    Device("l4", 22.0, "nvidia l4"),
    Device("rtx4090", 23.6, "nvidia geforce rtx 4090"),
    Device("t4", 14.6, "tesla t4"),
    Device("tpu-v6e", 31.3, "v6e", PLATFORM_TPU, "V6E"),
    Device("tpu-v5e", 15.7, "v5e", PLATFORM_TPU, "V5E"),
    Device("tpu-v5p", 95.7, "v5p", PLATFORM_TPU, "V5P"),
    Device("cpu", 0.0, "cpu", PLATFORM_CPU),
)
DEVICE_KEYS: tuple[str, ...] = tuple(d.key for d in DEVICES)


# The values of vLLM's own --device flag up to 0.9.2 (DeviceConfig), which a pasted old
# command line may carry; 'cpu' is a batchproof device as well.
OLD_VLLM_DEVICES = ("auto", "cuda", "neuron", "tpu", "xpu", "hpu", "rocm", "openvino")


def device_named(key: str) -> Device:
    """The device with this key (case-insensitive); InputError naming the known ones."""
    for d in DEVICES:
        if d.key == key.lower():
            return d
    if key.lower() in OLD_VLLM_DEVICES:
        raise InputError(f"--device {key}: vllm serve has had no --device flag since 0.10.0 "
                         "(the platform is detected; 0.9.2 engine/arg_utils.py:397 was the "
                         f"last); batchproof's --device names the machine: "
                         f"{', '.join(DEVICE_KEYS)} (or give --gpu-memory-gib G)")
    raise InputError(f"unknown device {key!r}; known devices: {', '.join(DEVICE_KEYS)} "
                     "(or give --gpu-memory-gib G)")


def device_with_memory(memory_gib: float) -> Device:
    """A CUDA device known only by its memory (its name is taken as not an A100)."""
    return Device("custom", memory_gib, "")


@dataclass(frozen=True, slots=True)
class Resolved:
    """One effective value, where it came from, and the upstream line that decided it."""

    value: object
    origin: str
    why: str


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """What the user gave, vLLM-named; None means "not set" (EngineArgs' own None)."""

    max_model_len: int
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enable_chunked_prefill: bool | None = None
    performance_mode: str = "balanced"
    usage: str = USAGE_SERVE
    world_size: int = 1
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    long_prefill_token_threshold: int | None = None
    long_prefill_token_threshold_adaptive: bool | None = None
    policy: str | None = None
    watermark: float | None = None
    scheduler_reserve_full_isl: bool | None = None
    max_num_active_seqs: int | None = None
    max_num_scheduled_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class BatchDefaults:
    """One cell of `get_batch_defaults`: the tier's values and why it applies."""

    tokens: int | None
    seqs: int | None
    why: str


def batch_defaults(device: Device, usage: str, world_size: int) -> BatchDefaults:
    """`get_batch_defaults` for this device and usage context (arg_utils.py:2893-2985).
    A None value means the usage context has no entry and SchedulerConfig's default
    (2048 tokens / 128 seqs, config/scheduler.py:41-43) applies (arg_utils.py:3117-3127)."""
    mem = device.memory_gib
    if device.platform == PLATFORM_CPU:
        tokens = {USAGE_LLM: 4096 * world_size, USAGE_SERVE: 2048 * world_size}
        seqs = {USAGE_LLM: 256 * world_size, USAGE_SERVE: 128 * world_size}
        why = f"CPU platform, world size {world_size} (arg_utils.py:2975-2984)"
        return BatchDefaults(tokens.get(usage), seqs.get(usage), why)
    if mem >= 160:
        tokens = {USAGE_LLM: 16384, USAGE_SERVE: 16384}
        seqs = {USAGE_LLM: 1024, USAGE_SERVE: 1024}
        why = f"device memory {mem:g} GiB >= 160 GiB (arg_utils.py:2923-2932)"
    elif mem >= 70 and "a100" not in device.name:
        tokens = {USAGE_LLM: 16384, USAGE_SERVE: 8192}
        seqs = {USAGE_LLM: 1024, USAGE_SERVE: 1024}
        why = f"device memory {mem:g} GiB >= 70 GiB, not an A100 (arg_utils.py:2933-2942)"
    else:
        tokens = {USAGE_LLM: 8192, USAGE_SERVE: 2048}
        seqs = {USAGE_LLM: 256, USAGE_SERVE: 256}
        reason = "an A100" if "a100" in device.name and mem >= 70 else f"{mem:g} GiB < 70 GiB"
        why = f"device {reason} (arg_utils.py:2943-2952)"
    if device.platform == PLATFORM_TPU:
        tpu = {"V6E": (2048, 1024), "V5E": (1024, 512), "V5P": (512, 256)}
        if device.tpu_chip in tpu:
            llm, serve = tpu[device.tpu_chip]
            tokens = {USAGE_LLM: llm, USAGE_SERVE: serve}
            why += f"; TPU {device.tpu_chip} token counts (arg_utils.py:2955-2972)"
    return BatchDefaults(tokens.get(usage), seqs.get(usage), why)


# SchedulerConfig / CacheConfig defaults for the fields EngineArgs passes through.
_PLAIN_DEFAULTS: tuple[tuple[str, object, str], ...] = (
    ("long_prefill_token_threshold", 0, "config/scheduler.py:79-84 (0 = off)"),
    ("long_prefill_token_threshold_adaptive", False, "config/scheduler.py:86-90"),
    ("policy", POLICY_FCFS, "config/scheduler.py:159"),
    ("watermark", 0.0, "config/scheduler.py:196-201"),
    ("scheduler_reserve_full_isl", True, "config/scheduler.py:190-194"),
    ("max_num_active_seqs", None, "config/scheduler.py:69-77 (None = max_num_seqs)"),
    ("max_num_scheduled_tokens", None,
     "config/scheduler.py:55-60 (None = max_num_batched_tokens)"),
)


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """Every scheduler value vLLM would run with, each with its origin, in print order."""

    values: tuple[tuple[str, Resolved], ...]
    device: Device
    usage: str
    performance_mode: str

    def get(self, name: str) -> Resolved:
        """The resolved value of one field."""
        return dict(self.values)[name]

    def value(self, name: str) -> object:
        """The value of one field."""
        return self.get(name).value

    def to_config(self) -> Config:
        """The model's Config. A pool size the user did not give keeps Config's default;
        callers must treat KV results as unknown then (see vllm_startup)."""
        fields = {name: r.value for name, r in self.values if name in _CONFIG_NAMES}
        if fields.get("num_gpu_blocks") is None:
            fields.pop("num_gpu_blocks", None)
        return replace(Config(), **fields)


_CONFIG_NAMES = frozenset(Config.__dataclass_fields__)


def resolve(args: EngineArgs, device: Device) -> EffectiveConfig:
    """Resolve `args` on `device` as EngineArgs.create_engine_config does."""
    if args.usage not in USAGES:
        raise InputError(f"unknown usage {args.usage!r}; use one of {', '.join(USAGES)}")
    if args.performance_mode not in PERFORMANCE_MODES:
        raise InputError(f"unknown performance mode {args.performance_mode!r}; use one of "
                         f"{', '.join(PERFORMANCE_MODES)} (config/vllm.py:139)")
    chunked = _chunked_prefill(args)
    tokens, seqs = _batch_sizes(args, device, bool(chunked.value))
    out: list[tuple[str, Resolved]] = [
        ("max_model_len", Resolved(args.max_model_len, ORIGIN_USER, "--max-model-len")),
        ("max_num_batched_tokens", tokens),
        ("max_num_seqs", seqs),
        ("enable_chunked_prefill", chunked),
        ("block_size", _block_size(args, device)),
        ("num_gpu_blocks", _user_or(args.num_gpu_blocks, None,
                                    "not given: the KV pool comes from memory profiling, "
                                    "which is not modelled")),
    ]
    for name, default, where in _PLAIN_DEFAULTS:
        out.append((name, _user_or(getattr(args, name), default, where)))
    return EffectiveConfig(values=tuple(out), device=device, usage=args.usage,
                           performance_mode=args.performance_mode)


def _user_or(given: object, default: object, where: str) -> Resolved:
    if given is not None:
        return Resolved(given, ORIGIN_USER, "set by the user")
    return Resolved(default, ORIGIN_DEFAULT, where)


def _chunked_prefill(args: EngineArgs) -> Resolved:
    if args.enable_chunked_prefill is not None:
        return Resolved(args.enable_chunked_prefill, ORIGIN_USER, "set by the user")
    # Departure: the model's own support decides (config/model.py:2175-2218); encoder-
    # decoder and some pooling models turn it off, RISC-V CPUs force it off (3041-3055).
    # We model decoder-only generative models, for which it is True.
    return Resolved(True, ORIGIN_DEFAULT, "the model supports it: decoder-only generative "
                    "models (arg_utils.py:2990-2994, config/model.py:2175-2218)")


def _block_size(args: EngineArgs, device: Device) -> Resolved:
    if args.block_size is not None:
        return Resolved(args.block_size, ORIGIN_USER, "set by the user")
    if device.platform == PLATFORM_CPU:
        return Resolved(128, ORIGIN_DEFAULT, "CPU platform picks 128 (platforms/cpu.py:292-293)")
    # On CUDA the attention backend may raise it (FA4/FP8 cases, flash_attn.py:370-377).
    return Resolved(16, ORIGIN_DEFAULT, "CacheConfig default 16 (config/cache.py:72, "
                    "338-348); some attention backends pick another size")


def _batch_sizes(args: EngineArgs, device: Device, chunked: bool) -> tuple[Resolved, Resolved]:
    """max_num_batched_tokens and max_num_seqs (arg_utils.py:3097-3186), step by step."""
    cell = batch_defaults(device, args.usage, args.world_size)
    tokens = _tier_value(args.max_num_batched_tokens, cell.tokens, 2048, cell.why,
                         "config/scheduler.py:41")
    seqs = _tier_value(args.max_num_seqs, cell.seqs, 128, cell.why, "config/scheduler.py:43")
    if args.performance_mode == "throughput":
        tokens, seqs = _doubled(tokens), _doubled(seqs)
    if args.max_num_batched_tokens is None:
        tokens = _clamp_tokens(tokens, int(seqs.value), args.max_model_len, chunked)
    if args.max_num_seqs is None and int(seqs.value) > int(tokens.value):
        seqs = Resolved(tokens.value, ORIGIN_CLAMPED,
                        f"{seqs.value} capped at max_num_batched_tokens {tokens.value} "
                        "(arg_utils.py:3178-3180)")
    return tokens, seqs


def _tier_value(given: int | None, tier: int | None, fallback: int, why: str,
                fallback_line: str) -> Resolved:
    if given is not None:
        return Resolved(given, ORIGIN_USER, "set by the user")
    if tier is None:
        return Resolved(fallback, ORIGIN_DEFAULT, f"no entry for this usage context: "
                        f"SchedulerConfig default ({fallback_line}; arg_utils.py:3117-3127)")
    return Resolved(tier, ORIGIN_TIER, why)


def _doubled(r: Resolved) -> Resolved:
    """Throughput mode doubles what the user did not set (arg_utils.py:3129-3134)."""
    if r.origin == ORIGIN_USER:
        return r
    return Resolved(2 * int(r.value), ORIGIN_DOUBLED,  # type: ignore[call-overload]
                    f"{r.value} doubled by --performance-mode throughput "
                    f"(arg_utils.py:3129-3134); {r.origin}: {r.why}")


def _clamp_tokens(tokens: Resolved, seqs: int, max_model_len: int, chunked: bool) -> Resolved:
    value = int(tokens.value)  # type: ignore[call-overload]
    notes = []
    if not chunked and max_model_len > value:
        value = max_model_len
        notes.append(f"raised to max_model_len {max_model_len} because chunked prefill is "
                     "off (arg_utils.py:3140-3146)")
    if seqs * max_model_len < value:
        value = seqs * max_model_len
        notes.append(f"capped at max_num_seqs * max_model_len = {value} "
                     "(arg_utils.py:3164-3170)")
    if not notes:
        return tokens
    return Resolved(value, ORIGIN_CLAMPED, f"{tokens.value} " + "; then ".join(notes))
