"""The served model's KV cache layout: what vLLM's hybrid KV cache manager needs from the
model, given as `--model-kind` (or read from an hf_config-style JSON / `--hf-overrides`),
and vLLM v0.32.0's startup check for it (lines relative to vllm/).

vLLM groups a model's layers into KV cache groups (v1/core/kv_cache_utils.py:2159-2253):
one group when every layer has the same spec (full attention only, 2184-2193); with
sliding-window or Mamba layers next to full-attention ones, the layers of each type form
buckets, the group size is the smallest bucket (the largest when it is under 1.5 times
the smallest), and each bucket becomes cdiv(layers, group size) groups (1443-1502). The
groups draw their blocks from one shared pool, num_gpu_blocks blocks, each block one page
of every layer of one group (1520-1551, 1588-1627). A request at max_model_len needs, per
group, cdiv(max_memory_usage_bytes, page_size_bytes) blocks (2337-2366):

- full attention: cdiv(max_model_len, block_size) (v1/kv_cache_interface.py:602-607);
- sliding window W: cdiv(min(W - 1 + extra_retained + max_in_flight_tokens,
  max_model_len), block_size) + 1 (kv_cache_interface.py:859-896), where
  max_in_flight_tokens = max_concurrent_batches * max_num_batched_tokens
  (config/vllm.py:576-599) and extra_retained = num_prefill_lookahead_tokens - 1 for
  multi-module MTP (kv_cache_utils.py:2585-2590, config/vllm.py:644-663);
- Mamba state: 1 + num_speculative_tokens blocks, or with mamba_cache_mode "align"
  (the default with prefix caching, model_executor/models/config.py:685-709)
  2 + num_speculative_tokens + the prefill checkpoint blocks (kv_cache_interface.py:
  1076-1082, model_executor/layers/mamba/abstract.py:64-83; a Mamba2 mixer adds one
  checkpoint block, mamba_mixer2.py:1098-1108).

The check: that sum <= num_gpu_blocks - 1, the null block held back (kv_cache_utils.py:
2605-2637, 2639-2649, 1003-1040). `--disable-hybrid-kv-cache-manager` allocates sliding-
window layers as full attention, one group (kv_cache_utils.py:1690-1760, 1799-1822); a
model with Mamba layers then fails to start (1757-1760).

Premise of this arithmetic: every layer's page has the same size (equal KV heads, head
size and dtype; vLLM pads a Mamba page to the attention page, 1292-1355), so one block
is one page of each layer of a group.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from checker.config.argtypes import read_number
from model.core.errors import ConfigError, InputError
from model.vllm.config import GROUP_MAMBA, GROUP_SLIDING, Config, KvGroup
from model.vllm.config import ONE_FULL_GROUP as ONE_FULL
from model.vllm.deployment import Feature

KIND_FULL, KIND_SLIDING, KIND_MAMBA = "full", "sliding-window", "hybrid-mamba"
MODEL_KINDS: tuple[str, ...] = (KIND_FULL, KIND_SLIDING, KIND_MAMBA)
MAMBA_MODES = ("none", "align")

ONE_FULL_GROUP = "one full-attention KV cache group"
KV_STARTUP_UPSTREAM = ("vllm/v1/core/kv_cache_utils.py:1003-1040, 2337-2366, 2605-2649; "
                       "v1/kv_cache_interface.py:602-607, 859-896, 1076-1082")

# The flags' argparse dests, and the YAML keys (the same names) that may carry them.
KIND_DESTS: tuple[str, ...] = ("model_kind", "sliding_window", "full_attention_layers",
                               "sliding_window_layers", "mamba_layers", "hf_config")


@dataclass(frozen=True, slots=True)
class ModelKind:
    """The served model's KV cache layout. `kind` None: not stated (the model's
    assumption, one full-attention group, is then said wherever a verdict rests on it).
    Layer counts are of the whole model; `source` says where they came from."""

    kind: str | None = None
    sliding_window: int | None = None
    full_layers: int | None = None
    sliding_layers: int | None = None
    mamba_layers: int | None = None
    hybrid_manager: bool = True  # False: --disable-hybrid-kv-cache-manager
    source: str = ""

    @property
    def stated(self) -> bool:
        """Whether the kind was given at all."""
        return self.kind is not None

    @property
    def one_full_group(self) -> bool:
        """Whether vLLM runs this model with one full-attention KV cache group, what the
        model has: kind full, or sliding-window layers with the hybrid manager off
        (allocated as full attention, kv_cache_utils.py:1799-1822)."""
        if self.kind == KIND_FULL:
            return True
        return (self.kind == KIND_SLIDING and not self.hybrid_manager
                and bool(self.full_layers))

    @property
    def align_modelled(self) -> bool:
        """Whether the model runs this kind's groups with prefix caching on: Mamba groups
        (align mode) beside full-attention ones and no sliding window, in the reference
        (model/vllm/align_cache.py; no Mamba2 prefill checkpoint block)."""
        if self.kind != KIND_MAMBA:
            return False
        try:
            groups = kv_groups(self)
        except ConfigError:
            return False
        return bool(groups.mamba) and not groups.sliding

    def describe(self) -> str:
        """One line for the scope line: the kind and what the model makes of it."""
        if self.kind is None:
            return (f"model kind not stated: the model has {ONE_FULL_GROUP} (give "
                    "--model-kind full|sliding-window|hybrid-mamba, or --hf-config FILE)")
        what = f"model kind {self.kind}{self._layers_text()}"
        if self.one_full_group:
            extra = (" (hybrid manager off: sliding-window layers allocated as full "
                     "attention)" if self.kind == KIND_SLIDING else "")
            return f"{what}: {ONE_FULL_GROUP}{extra}, as the model has"
        try:
            groups = kv_groups(self)
        except ConfigError:
            return f"{what}: vLLM cannot group its layers without the hybrid KV cache manager"
        counts = ", ".join(f"{n} {name}" for n, name in (
            (groups.full, "full-attention"), (groups.sliding, "sliding-window"),
            (groups.mamba, "Mamba")) if n)
        runs = ("the model runs them with prefix caching off, and Mamba groups with it on in "
                "align mode, without a Mamba2 prefill checkpoint block, in the reference only"
                if groups.mamba and not groups.sliding else
                "the model runs them with prefix caching off")
        return f"{what}: KV cache groups {counts}, each with its own block accounting ({runs})"

    def _layers_text(self) -> str:
        parts = []
        if self.sliding_window is not None and self.kind == KIND_SLIDING:
            parts.append(f"window {self.sliding_window}")
        for count, name in ((self.full_layers, "full-attention"),
                            (self.sliding_layers, "sliding-window"),
                            (self.mamba_layers, "Mamba")):
            if count:
                parts.append(f"{count} {name} layers")
        if self.source:
            parts.append(f"from {self.source}")
        return f" ({', '.join(parts)})" if parts else ""

    def feature(self) -> Feature | None:
        """The deployment feature of the kind's groups, or None when vLLM runs one
        full-attention group (or the kind was not stated: the model's assumption). The model
        runs the groups with prefix caching off (model/vllm/kv_cache.py), and full-attention
        beside Mamba groups with it on too (align mode, `align_modelled`); beside prefix
        caching the others are outside it (checker/cli/config.py adds the feature then)."""
        if self.kind is None or self.one_full_group:
            return None
        if self.kind == KIND_SLIDING:
            return Feature(
                "sliding-window KV cache groups beside prefix caching (the model runs the "
                "groups with prefix caching off)",
                "v1/core/kv_cache_utils.py:1362-1502, v1/kv_cache_interface.py:850-896, "
                "v1/core/single_type_kv_cache_manager.py (SlidingWindowManager)",
                "sliding-window layers hold only the window's blocks, freed as it moves, "
                "beside the full-attention groups; admission and preemption count every "
                "group's blocks")
        return Feature(
            "hybrid-mamba KV cache groups beside prefix caching (the model runs the groups "
            "with prefix caching off; Mamba's align mode is not modelled)",
            "v1/core/kv_cache_utils.py:1362-1502, v1/kv_cache_interface.py:1035-1110, "
            "v1/core/single_type_kv_cache_manager.py (MambaManager)",
            "Mamba layers hold state blocks (1 + k with speculative decoding, more in "
            "align mode) beside the full-attention groups; admission and preemption count "
            "every group's blocks; in align mode the state of two steps back is freed only "
            "once the processed tokens pass it (v1/core/single_type_kv_cache_manager.py:"
            "1613-1641, kv_cache_manager.py:546-558), so under async scheduling with a "
            "speculative method vLLM's real Scheduler livelocks a lone request at a pool its "
            "startup check accepts (tests/test_mamba_align.py), which the model does not "
            "replay")

    def to_json(self) -> dict[str, object]:
        """The `--json` object."""
        return {"kind": self.kind, "sliding_window": self.sliding_window,
                "full_attention_layers": self.full_layers,
                "sliding_window_layers": self.sliding_layers,
                "mamba_layers": self.mamba_layers, "hybrid_kv_cache_manager": self.hybrid_manager,
                "source": self.source or None, "one_full_attention_group": self.one_full_group}


NOT_STATED = ModelKind()


def kv_cache_groups(kind: ModelKind) -> tuple[KvGroup, ...]:
    """The Config groups vLLM runs for `kind` (model/vllm/config.py `kv_cache_groups`): one
    full-attention group when the kind is not stated or vLLM makes one, else each group of
    `kv_groups` (full attention, then sliding window, then Mamba). ConfigError as
    `kv_groups` raises it."""
    if kind.kind is None or kind.one_full_group:
        return ONE_FULL
    groups = kv_groups(kind)
    window = kind.sliding_window or 0
    return ((KvGroup(),) * groups.full + (KvGroup(GROUP_SLIDING, window),) * groups.sliding
            + (KvGroup(GROUP_MAMBA),) * groups.mamba)


def with_kind(kind: ModelKind, cfg: Config) -> Config:
    """`cfg` with the groups of a stated `kind` (unchanged when it is not stated: a
    workload's own groups stay). InputError when vLLM cannot group the layers."""
    if not kind.stated:
        return cfg
    try:
        return replace(cfg, kv_cache_groups=kv_cache_groups(kind))
    except ConfigError as exc:
        raise InputError(str(exc)) from None


def kv_premise(kind: ModelKind) -> str:
    """The premise a verdict that counts the model's KV blocks rests on ('' when the
    model's layout is not what vLLM runs: such verdicts are UNKNOWN, the layout being
    outside the model)."""
    if kind.kind is None:
        return (f"{ONE_FULL_GROUP} (the model kind was not stated; with sliding-window or "
                "Mamba layers vLLM runs several groups: give --model-kind)")
    if kind.one_full_group:
        return f"{ONE_FULL_GROUP} (--model-kind {kind.kind}{kind._layers_text()})"
    return ""


# --- the KV cache groups and the startup check ------------------------------------------------


@dataclass(frozen=True, slots=True)
class KvGroups:
    """How many KV cache groups of each type vLLM makes for a model."""

    full: int
    sliding: int
    mamba: int


def kv_groups(kind: ModelKind) -> KvGroups:
    """vLLM's KV cache groups for `kind` (get_kv_cache_groups, kv_cache_utils.py:2159-2253).
    ConfigError when vLLM fails to group them (Mamba layers without the hybrid manager)."""
    full, sliding, mamba = kind.full_layers or 0, kind.sliding_layers or 0, kind.mamba_layers or 0
    if kind.kind == KIND_FULL or kind.kind is None:
        return KvGroups(1, 0, 0)
    if not kind.hybrid_manager and full and (sliding or mamba):
        if mamba:
            # Mamba specs are not promoted to full attention, so the specs stay mixed and
            # vLLM raises (kv_cache_utils.py:1690-1760, 1799-1822).
            raise ConfigError(
                "hybrid_kv_cache_manager_needed",
                "--disable-hybrid-kv-cache-manager with Mamba layers: vLLM fails to start "
                "('Failed to promote local KV cache specs to one unified type', "
                "v1/core/kv_cache_utils.py:1757-1760); hybrid SSM models need the hybrid KV "
                "cache manager (config/vllm.py:2176-2186): drop the flag")
        return KvGroups(1, 0, 0)  # sliding layers allocated as full attention: one group
    counts = [n for n in (full, sliding, mamba) if n]
    if len(counts) == 1:
        # Every layer of one type: one group (kv_cache_utils.py:2184-2193).
        return KvGroups(int(bool(full)), int(bool(sliding)), int(bool(mamba)))
    size = min(counts)
    if max(counts) < size * 1.5:  # fewer padding layers (kv_cache_utils.py:1470-1480)
        size = max(counts)
    return KvGroups(*(-(-n // size) for n in (full, sliding, mamba)))


@dataclass(frozen=True, slots=True)
class KvSizing:
    """What the startup check reads besides the kind: the scheduler's numbers, the
    speculative setting and the deployment's switches."""

    max_model_len: int
    block_size: int
    num_gpu_blocks: int
    max_num_batched_tokens: int
    async_scheduling: bool = False
    pipeline_parallel: int = 1
    num_speculative_tokens: int = 0  # k of any method (Mamba's speculative blocks)
    multi_module_mtp: bool = False
    mamba_mode: str = "none"
    mamba_checkpoint_blocks: int = 0

    @property
    def max_in_flight_tokens(self) -> int:
        """max_concurrent_batches * max_num_batched_tokens (config/vllm.py:576-599): two
        batches with async scheduling, one per pipeline stage otherwise (with both, the
        V2 model runner's pp + 1, its default)."""
        pp = self.pipeline_parallel
        batches = (pp + 1 if pp > 1 else 2) if self.async_scheduling else pp
        return batches * self.max_num_batched_tokens


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def group_blocks(kind: ModelKind, sizing: KvSizing, max_model_len: int | None = None
                 ) -> tuple[int, int, int]:
    """Blocks one request of `max_model_len` (default the sizing's) needs in one group of
    each type: (full attention, sliding window, Mamba)."""
    length = sizing.max_model_len if max_model_len is None else max_model_len
    bs = sizing.block_size
    full = _cdiv(length, bs)
    sliding = 0
    if kind.sliding_window is not None:
        extra = max(0, sizing.num_speculative_tokens - 1) if sizing.multi_module_mtp else 0
        tokens = min(kind.sliding_window - 1 + extra + sizing.max_in_flight_tokens, length)
        sliding = _cdiv(tokens, bs) + 1
    k = sizing.num_speculative_tokens
    mamba = (2 + k + sizing.mamba_checkpoint_blocks if sizing.mamba_mode == "align"
             else 1 + k)
    return full, sliding, mamba


def blocks_per_request(kind: ModelKind, sizing: KvSizing,
                       max_model_len: int | None = None) -> int:
    """The blocks of the shared pool one request of max_model_len needs, summed over the
    groups (_max_memory_usage_bytes_from_groups, kv_cache_utils.py:2337-2366)."""
    groups = kv_groups(kind)
    full, sliding, mamba = group_blocks(kind, sizing, max_model_len)
    return groups.full * full + groups.sliding * sliding + groups.mamba * mamba


def estimated_max_model_len(kind: ModelKind, sizing: KvSizing) -> int:
    """vLLM's estimate of the longest max_model_len the usable pool holds (the same binary
    search, in blocks: _estimate_max_model_len_from_groups, kv_cache_utils.py:2369-2411);
    0 when one token does not fit."""
    usable = sizing.num_gpu_blocks - 1
    lo, hi, best = 1, sizing.max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if blocks_per_request(kind, sizing, mid) <= usable:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def kv_startup_rejection(kind: ModelKind, sizing: KvSizing) -> ConfigError | None:
    """vLLM's KV startup check for a model of this kind (get_kv_cache_configs,
    kv_cache_utils.py:2605-2649 with _check_enough_kv_cache_memory, 1003-1040), in blocks
    of the shared pool; None when it passes."""
    groups = kv_groups(kind)
    need = blocks_per_request(kind, sizing)
    usable = sizing.num_gpu_blocks - 1
    if need <= usable:
        return None
    full, sliding, mamba = group_blocks(kind, sizing)
    parts = [f"{n} {name} group{'s' if n > 1 else ''} x {each}"
             for n, name, each in ((groups.full, "full-attention", full),
                                   (groups.sliding, "sliding-window", sliding),
                                   (groups.mamba, "Mamba", mamba)) if n]
    estimate = estimated_max_model_len(kind, sizing)
    hint = (f"vLLM's estimate of the maximum model length for this pool is {estimate}; "
            if estimate > 0 else "")
    return ConfigError(
        "kv_holds_one_max_model_len_request",
        f"the KV cache cannot hold one request of max_model_len ({sizing.max_model_len}) "
        f"for a {kind.kind} model: it needs {need} blocks of {sizing.block_size} tokens "
        f"({' + '.join(parts)}), the pool has {usable} usable ({sizing.num_gpu_blocks} less "
        f"the null block); {hint}lower max_model_len or give the pool at least {need + 1} "
        f"blocks ({KV_STARTUP_UPSTREAM})")


def checkpoint_warning(kind: ModelKind, sizing: KvSizing) -> str | None:
    """In align mode a Mamba2 mixer adds a prefill checkpoint block per Mamba group
    (mamba_mixer2.py:1098-1108); batchproof does not know the mixer. A warning when the
    pool passes without it and not with it."""
    if kind.kind != KIND_MAMBA or sizing.mamba_mode != "align" or sizing.mamba_checkpoint_blocks:
        return None
    with_ckpt = replace(sizing, mamba_checkpoint_blocks=1)
    if kv_startup_rejection(kind, sizing) is None and kv_startup_rejection(
            kind, with_ckpt) is not None:
        need = blocks_per_request(kind, with_ckpt)
        return (f"with a Mamba2 mixer (Bamba, NemotronH, Zamba2, ...) vLLM keeps one prefill "
                f"checkpoint block per Mamba group in align mode (model_executor/layers/mamba/"
                f"mamba_mixer2.py:1098-1108) and needs {need} blocks: this pool of "
                f"{sizing.num_gpu_blocks} would not start")
    return None


# --- input ---------------------------------------------------------------------------------


def add_model_kind_flags(parser: argparse.ArgumentParser) -> None:
    """--model-kind and the layout flags (batchproof's own: vLLM reads them from the
    model's config.json)."""
    group = parser.add_argument_group(
        "the served model's KV cache layout (vLLM reads it from config.json; batchproof "
        "does not)")
    group.add_argument("--model-kind", dest="model_kind", choices=MODEL_KINDS, default=None,
                       help="full (every layer full attention), sliding-window (sliding-"
                       "window layers, maybe beside full-attention ones: Gemma 2/3, gpt-oss, "
                       "Mistral v0.1), hybrid-mamba (Mamba/linear-attention layers beside "
                       "attention: Jamba, Bamba, Qwen3-Next); default: not stated")
    for flag, dest, text in (
            ("--sliding-window", "sliding_window", "the window in tokens (hf_config "
             "sliding_window)"),
            ("--full-attention-layers", "full_attention_layers", "full-attention layers"),
            ("--sliding-window-layers", "sliding_window_layers", "sliding-window layers"),
            ("--mamba-layers", "mamba_layers", "Mamba / linear-attention layers")):
        group.add_argument(flag, dest=dest, type=_count(flag), default=None, metavar="N",
                           help=text)
    group.add_argument("--hf-config", dest="hf_config", metavar="FILE.json", default=None,
                       help="the model's config.json: sliding_window, layer_types, "
                       "sliding_window_pattern, layers_block_type, full_attention_interval, "
                       "attn_layer_period/offset, num_hidden_layers")


def _count(flag: str) -> Callable[[str], int]:
    """An argparse type: a layer count or window, an integer in 0..1000000."""
    def parse(text: str) -> int:
        return read_number(text, int, lambda v: 0 <= v <= 1_000_000,
                           f"{text!r} is not an integer",
                           f"{flag} {text!r} must be an integer in 0..1000000")
    parse.__name__ = "integer"
    return parse


# transformers' defaults where config.json has no layer_types: Gemma 2 alternates
# (sliding first), Gemma 3 has every 6th layer full attention.
_PATTERN_DEFAULTS = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}
# Models whose sliding_window applies to every layer (Mistral 7B v0.1, Mixtral).
_ALL_SLIDING = ("mistral", "mixtral")
_FULL_NAMES = ("full_attention", "attention", "global", "global_attention", "full")
_SLIDING_NAMES = ("sliding_attention", "sliding_window", "local", "local_attention",
                  "sliding")
_MAMBA_NAMES = ("mamba", "mamba2", "linear_attention", "ssm", "gated_deltanet", "deltanet",
                "short_conv", "conv", "recurrent")


def _read_json(path: str) -> dict[str, object]:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(f"--hf-config {path}: no such file; give the model's config.json"
                         ) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"--hf-config {path}: not a JSON file ({exc}); give the model's "
                         "config.json") from None
    if not isinstance(doc, dict):
        raise InputError(f"--hf-config {path}: not a JSON object; give the model's config.json")
    return doc


def _hf_overrides(args: argparse.Namespace) -> dict[str, object]:
    """vLLM's --hf-overrides (a JSON object applied over the model's hf_config), when it
    is given; {} otherwise."""
    raw = getattr(args, "ignored_hf_overrides", None)
    if not raw:
        return {}
    text = " ".join(raw) if isinstance(raw, list) else str(raw)
    try:
        doc = json.loads(text)
    except ValueError:
        raise InputError(f"--hf-overrides {text!r} is not a JSON object; write e.g. "
                         "--hf-overrides '{\"sliding_window\": 4096}'") from None
    if not isinstance(doc, dict):
        raise InputError(f"--hf-overrides {text!r} is not a JSON object; write e.g. "
                         "--hf-overrides '{\"sliding_window\": 4096}'")
    return doc


_LAYOUT_KEYS = ("sliding_window", "layer_types", "sliding_window_pattern", "layers_block_type",
                "full_attention_interval", "attn_layer_period", "use_sliding_window")


def _from_hf(doc: Mapping[str, object], where: str) -> ModelKind | None:
    """The layout an hf_config-style object describes, None when it says nothing of it."""
    text = doc.get("text_config")
    if isinstance(text, dict) and not any(k in doc for k in _LAYOUT_KEYS):
        doc = text
    if not any(k in doc for k in _LAYOUT_KEYS):
        return None
    layers = doc.get("num_hidden_layers")
    window = doc.get("sliding_window")
    if doc.get("use_sliding_window") is False:
        window = None
    if window is not None and not (isinstance(window, int) and window >= 1):
        raise InputError(f"{where}: sliding_window {window!r} must be a positive integer "
                         "(tokens) or null")
    types = _layer_types(doc, layers, window, where)
    full = sum(t == "full" for t in types)
    sliding = sum(t == "sliding" for t in types)
    mamba = sum(t == "mamba" for t in types)
    if mamba:
        kind = KIND_MAMBA
    elif sliding:
        kind = KIND_SLIDING
    else:
        kind = KIND_FULL
    if kind == KIND_SLIDING and window is None:
        raise InputError(f"{where}: sliding-window layers but no sliding_window; add "
                         "\"sliding_window\": N")
    return ModelKind(kind, window if kind == KIND_SLIDING else None, full, sliding, mamba,
                     source=where)


def _layer_types(doc: Mapping[str, object], layers: object, window: object,
                 where: str) -> list[str]:
    """Each layer's type, 'full', 'sliding' or 'mamba'."""
    listed = doc.get("layer_types", doc.get("layers_block_type"))
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
            raise InputError(f"{where}: layer_types must be a list of strings")
        out = []
        for t in listed:
            name = t.lower()
            if name in _FULL_NAMES:
                out.append("full")
            elif name in _SLIDING_NAMES:
                out.append("sliding" if window is not None else "full")
            elif name in _MAMBA_NAMES:
                out.append("mamba")
            else:
                raise InputError(f"{where}: layer type {t!r} is not one batchproof knows "
                                 f"(full: {', '.join(_FULL_NAMES)}; sliding: "
                                 f"{', '.join(_SLIDING_NAMES)}; mamba: {', '.join(_MAMBA_NAMES)})"
                                 "; give --model-kind and the layer counts instead")
        return out
    if not (isinstance(layers, int) and layers >= 1):
        raise InputError(f"{where}: num_hidden_layers is needed to place the layer pattern; "
                         "add it, or give layer_types")
    model_type = str(doc.get("model_type", ""))
    pattern = doc.get("sliding_window_pattern")
    if pattern is None and model_type in _PATTERN_DEFAULTS:
        pattern = _PATTERN_DEFAULTS[model_type]
    if isinstance(pattern, int) and pattern >= 1 and window is not None:
        # Gemma 2/3 (transformers fills layer_types so, and vLLM reads them): layer i is
        # full attention when (i + 1) % pattern == 0.
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    interval = doc.get("full_attention_interval")
    if isinstance(interval, int) and interval >= 1:
        # Qwen3-Next: every interval-th layer full attention, the others linear attention.
        return ["full" if (i + 1) % interval == 0 else "mamba" for i in range(layers)]
    period = doc.get("attn_layer_period")
    if isinstance(period, int) and period >= 1:
        # Jamba: attention where i % period == offset, Mamba elsewhere.
        offset = doc.get("attn_layer_offset", 0)
        return ["full" if i % period == offset else "mamba" for i in range(layers)]
    if window is not None and model_type not in _ALL_SLIDING:
        raise InputError(f"{where}: sliding_window {window} but no layer pattern batchproof "
                         "knows (layer_types, sliding_window_pattern; model_type "
                         f"{model_type or 'not given'}); add layer_types, or give "
                         "--sliding-window-layers S and --full-attention-layers F")
    return ["sliding" if window is not None else "full"] * layers


def model_kind(args: argparse.Namespace) -> ModelKind:
    """The served model's layout from the flags: --hf-config's JSON with vLLM's
    --hf-overrides over it, then the explicit flags over both. InputError (exit 2) on a
    value that does not fit, naming it and the fix."""
    doc: dict[str, object] = {}
    where: list[str] = []
    hf_path = getattr(args, "hf_config", None)
    if hf_path:
        doc.update(_read_json(hf_path))
        where.append(f"--hf-config {hf_path}")
    overrides = _hf_overrides(args)
    if overrides:
        text = doc.get("text_config")
        if isinstance(text, dict) and not any(k in doc for k in _LAYOUT_KEYS):
            doc = {**text, **overrides}
        else:
            doc.update(overrides)
        where.append("--hf-overrides")
    read = _from_hf(doc, " and ".join(where)) if doc else None
    kind = read or ModelKind()
    given = {name: getattr(args, dest, None) for name, dest in (
        ("kind", "model_kind"), ("sliding_window", "sliding_window"),
        ("full_layers", "full_attention_layers"), ("sliding_layers", "sliding_window_layers"),
        ("mamba_layers", "mamba_layers"))}
    kind = replace(kind, **{k: v for k, v in given.items() if v is not None})
    manager = getattr(args, "ignored_disable_hybrid_kv_cache_manager", None)
    if manager is not None:
        kind = replace(kind, hybrid_manager=not manager)
    return _checked(kind)


def _checked(kind: ModelKind) -> ModelKind:
    """`kind` when its values fit together; an InputError naming the value and the fix."""
    if kind.kind is None:
        stray = [flag for flag, v in (("--sliding-window", kind.sliding_window),
                                      ("--full-attention-layers", kind.full_layers),
                                      ("--sliding-window-layers", kind.sliding_layers),
                                      ("--mamba-layers", kind.mamba_layers)) if v is not None]
        if stray:
            raise InputError(f"{stray[0]} describes the model's layers but no --model-kind is "
                             "given; add --model-kind sliding-window or hybrid-mamba")
        return kind
    if kind.kind == KIND_FULL:
        if kind.sliding_layers or kind.mamba_layers:
            raise InputError("--model-kind full has only full-attention layers; drop "
                             "--sliding-window-layers/--mamba-layers or pick the kind that "
                             "has them")
        return kind
    if kind.kind == KIND_SLIDING:
        if kind.sliding_window is None or kind.sliding_window < 1:
            raise InputError("--model-kind sliding-window needs the window: add "
                             "--sliding-window N (tokens, the model's sliding_window)")
        if kind.mamba_layers:
            raise InputError(f"--mamba-layers {kind.mamba_layers} with --model-kind "
                             "sliding-window: Mamba layers are --model-kind hybrid-mamba")
        if kind.sliding_layers is None:
            raise InputError("--model-kind sliding-window needs the layer mix: add "
                             "--sliding-window-layers N and --full-attention-layers M (0 when "
                             "every layer slides), or --hf-config config.json")
        if kind.sliding_layers == 0:
            raise InputError("--sliding-window-layers 0 with --model-kind sliding-window: "
                             "give the number of sliding-window layers (>= 1), or use "
                             "--model-kind full")
        return replace(kind, full_layers=kind.full_layers or 0)
    if kind.sliding_layers:
        raise InputError("--sliding-window-layers with --model-kind hybrid-mamba: sliding "
                         "window beside Mamba layers is not modelled; give "
                         "--full-attention-layers and --mamba-layers")
    if not kind.mamba_layers:
        raise InputError("--model-kind hybrid-mamba needs the layer mix: add --mamba-layers "
                         "N (>= 1) and --full-attention-layers M, or --hf-config config.json")
    if kind.full_layers is None:
        raise InputError("--model-kind hybrid-mamba needs --full-attention-layers M (the "
                         "attention layers beside the Mamba ones; 0 for a pure Mamba model)")
    return replace(kind, sliding_window=None)
