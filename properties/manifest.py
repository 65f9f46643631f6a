"""Load the manifest: named configurations and expected verdicts with evidence.

Each engine room has one file, `properties/manifests/<folder>.toml` (vLLM V1's is
vllm_v1.toml, the two batching baselines share baselines.toml); its top-level
`engine = "..."` is the default engine of its configs and entries (a config's fields are
parsed by that engine's `parse_config`). A file without it is vLLM V1's.

An entry's verdict is a fact about its own configs; `premises` says on which other
configurations it still stands (the facts of the entry's config that the verdict rests on:
its switches, and the engine's dividing lines such as vLLM's long-prefill threshold against
1 + k). checker/methods/trace_check.py carries a verdict to a trace's config only where
every premise holds."""

from __future__ import annotations

import functools
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from model import registry as engines
from model.core.errors import InputError
from model.core.types import DEFAULT_ENGINE

MANIFESTS = Path(__file__).with_name("manifests")
MANIFEST = MANIFESTS / "vllm_v1.toml"


@dataclass(frozen=True, slots=True)
class NamedConfig:
    """A configuration family from the manifest, with the bounds of its queries."""

    name: str
    description: str
    config: Any  # the engine's Config
    ranges: tuple[tuple[str, int, int], ...]
    validated: bool
    bounds: tuple[tuple[str, int], ...]
    engine: str = DEFAULT_ENGINE
    # The bounded search `check --method auto` runs on this config's entries once no
    # proof decided them: "bmc", or "explore" where bench/suite_methods.py measured the
    # explorer faster over the config's entries.
    bounded_method: str = "bmc"


BOUNDED_METHODS = ("bmc", "explore")


@dataclass(frozen=True, slots=True)
class Case:
    """What a verdict is about: an engine's property, with its parameters, on a config of
    the manifest (by name)."""

    engine: str
    property: str
    params: tuple[tuple[str, int], ...]
    config: str


@dataclass(frozen=True, slots=True)
class Entry(Case):
    """One expected verdict: (engine, property, config) -> verdict, with its evidence."""

    expected: str
    evidence: str
    suite: str
    bounds: tuple[tuple[str, int], ...] = ()
    methods: tuple[str, ...] = ("bmc", "explore")  # which methods the entry is checked by
    # set by `load` where another entry of the engine has the same property and config
    # (other params): the file stem then names the params, so neither overwrites the other
    slug_params: bool = False

    @property
    def slug(self) -> str:
        """File stem of this entry's counterexample."""
        if self.slug_params and self.params:
            label = "_".join(f"{k}={v}" for k, v in self.params)
            return f"{self.property}__{label}__{self.config}"
        return f"{self.property}__{self.config}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """All configs and entries."""

    configs: dict[str, NamedConfig]
    entries: tuple[Entry, ...]


def _named(name: str, raw: dict[str, Any], engine: str) -> NamedConfig:
    engine = raw.get("engine", engine)
    ranges = tuple((k, int(v[0]), int(v[1])) for k, v in raw.get("ranges", {}).items())
    bounded = raw.get("bounded_method", "bmc")
    if bounded not in BOUNDED_METHODS:
        raise InputError(f"manifest config {name!r}: bounded_method {bounded!r} is not one "
                         f"of {', '.join(BOUNDED_METHODS)}")
    return NamedConfig(name=name, description=raw.get("description", ""),
                       config=engines.get(engine).parse_config(raw.get("config", {})),
                       ranges=ranges, validated=bool(raw.get("validated", True)),
                       bounds=tuple(raw.get("bounds", {}).items()), engine=engine,
                       bounded_method=bounded)


def manifest_files() -> tuple[Path, ...]:
    """vLLM V1's manifest, then every other engine's, by file name."""
    return (MANIFEST, *sorted(p for p in MANIFESTS.glob("*.toml") if p != MANIFEST))


def load(path: Path | None = None) -> Manifest:
    """Parse the manifest (one file, or all of `manifest_files()`); every entry is
    expanded to one row per config."""
    configs: dict[str, NamedConfig] = {}
    entries: list[Entry] = []
    for file in (path,) if path is not None else manifest_files():
        part = _load_file(file)
        clash = sorted(set(configs) & set(part.configs))
        if clash:
            raise InputError(f"manifest {file}: config {clash[0]!r} is defined twice; "
                             "give it another name")
        configs.update(part.configs)
        entries += part.entries
    return Manifest(configs=configs, entries=_distinct_slugs(entries))


def _distinct_slugs(entries: Sequence[Entry]) -> tuple[Entry, ...]:
    """The entries, those that share an engine, a property and a config (and differ in
    params) marked to name their params in their counterexample's file stem."""
    shared = Counter((e.engine, e.property, e.config) for e in entries)
    return tuple(replace(e, slug_params=True) if shared[e.engine, e.property, e.config] > 1
                 else e for e in entries)


def _load_file(path: Path) -> Manifest:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read manifest {path}: {exc}") from None
    return _parsed(path, text)


@functools.lru_cache(maxsize=32)
def _parsed(path: Path, text: str) -> Manifest:
    # Kept per file and text: a run loads the manifest once per job and per check, and the
    # TOML parse was 3 % of the test suite's CPU. The text is the key, so an edited file is
    # parsed again; `load` copies the configs into a new dict, so no caller shares it.
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"cannot read manifest {path}: {exc}") from None
    default_engine = doc.get("engine", DEFAULT_ENGINE)
    configs = {name: _named(name, raw, default_engine)
               for name, raw in doc.get("configs", {}).items()}
    entries = []
    for raw in doc.get("entry", []):
        for cfg_name in raw["configs"]:
            if cfg_name not in configs:
                raise InputError(f"manifest entry {raw['property']} names unknown config "
                                 f"{cfg_name!r}")
            entries.append(Entry(
                engine=raw.get("engine", default_engine), property=raw["property"],
                params=tuple(sorted(raw.get("params", {}).items())), config=cfg_name,
                expected=raw["expected"], evidence=raw["evidence"],
                suite=raw.get("suite", "default"),
                bounds=tuple(raw.get("bounds", {}).items()),
                methods=tuple(raw.get("methods", ("bmc", "explore")))))
    return Manifest(configs=configs, entries=tuple(entries))


def custom_config(name: str, cfg: Any, base: NamedConfig | None = None,
                  validated: bool = True, engine: str = DEFAULT_ENGINE) -> NamedConfig:
    """A user's configuration (flags or file) with the bounds of `base` if given."""
    bounds = base.bounds if base is not None else ()
    return NamedConfig(name=name, description="user configuration", config=cfg, ranges=(),
                       validated=validated, bounds=bounds, engine=engine)


def with_bounds(nc: NamedConfig, **overrides: int | None) -> NamedConfig:
    """`nc` with some bounds overridden (None keeps the manifest's)."""
    bounds = dict(nc.bounds)
    bounds.update({k: v for k, v in overrides.items() if v is not None})
    return replace(nc, bounds=tuple(bounds.items()))


# --------------------------------------------------------------------------- premises

ConfigDoc = Mapping[str, object]  # a config as the engine's `config_to_dict` writes it


@dataclass(frozen=True, slots=True)
class Premise:
    """A fact about a configuration that a manifest entry's verdict rests on: the verdict
    is carried to a configuration outside the entry's own only where every premise of the
    entry holds.

    `where` completes "configs where ...", `citation` is the upstream source that makes the
    fact matter, `holds(doc)` decides it on a config as the engine's `config_to_dict` writes
    it, and `has(doc)` says what a config has of it, for a message."""

    name: str
    where: str
    citation: str
    holds: Callable[[ConfigDoc], bool]
    has: Callable[[ConfigDoc], str]

    @property
    def text(self) -> str:
        """`where (citation)`, as a finding prints it."""
        return f"{self.where} ({self.citation})" if self.citation else self.where


@dataclass(frozen=True, slots=True)
class _Line:
    """A fact that divides configurations in two; an entry's premise is its config's side."""

    name: str
    yes: str  # `where` of the side on which `test` is true
    no: str
    citation: str
    test: Callable[[ConfigDoc], bool]
    has: Callable[[ConfigDoc], str]

    def side(self, doc: ConfigDoc) -> Premise:
        value = self.test(doc)
        return Premise(self.name if value else f"not {self.name}", self.yes if value else self.no,
                       self.citation, lambda d: self.test(d) == value, self.has)


def _spec_k(doc: ConfigDoc) -> int:
    """k, the drafts a request may carry (0 without speculative decoding)."""
    k = doc.get("num_speculative_tokens") if doc.get("speculative_method") else 0
    return k if isinstance(k, int) else 0


def _rules(doc: ConfigDoc) -> Mapping[str, object]:
    rules = doc.get("rules")
    return rules if isinstance(rules, Mapping) else {}


def _threshold_cuts_padding(doc: ConfigDoc) -> bool:
    """0 < long_prefill_token_threshold < 1 + k, without vllm-project/vllm#54028's fix."""
    k, threshold = _spec_k(doc), doc.get("long_prefill_token_threshold")
    return (k > 0 and isinstance(threshold, int) and 0 < threshold < 1 + k
            and not _rules(doc).get("threshold_skips_padding", False))


def _threshold_has(doc: ConfigDoc) -> str:
    k, threshold = _spec_k(doc), doc.get("long_prefill_token_threshold")
    if not k:
        return "no speculative decoding"
    side = ("0: off" if threshold == 0 else "below 1 + k" if _threshold_cuts_padding(doc)
            else "at least 1 + k" if isinstance(threshold, int) and threshold >= 1 + k
            else "below 1 + k, with #54028's fix")
    return f"long_prefill_token_threshold={threshold} with k={k} ({side})"


#: vLLM V1 0.32.0, scheduler.py:1131-1153 pads a one-token admission beside scheduled
#: decodes to 1 + k tokens, 1155-1156 cuts it to a long-prefill threshold below that (the
#: effective threshold of 645-655 is 0 or at least the configured one), and 1371-1372
#: asserts `num_new_tokens == 1 + self.num_spec_tokens`: the engine dies
#: (vllm-project/vllm#54028). A verdict on a config on one side says nothing of the other.
VLLM_THRESHOLD_CUT = _Line(
    "threshold_cuts_padding",
    yes="the long-prefill threshold is between 1 and k with speculative decoding",
    no="the long-prefill threshold is 0 or at least 1 + k, or speculative decoding is off",
    citation="vllm 0.32.0 scheduler.py:1131-1156, 1371-1372: a threshold below 1 + k cuts a "
             "padded admission; vllm-project/vllm#54028",
    test=_threshold_cuts_padding, has=_threshold_has)

#: SpeculativeConfig (vllm 0.32.0 config/speculative.py:393, 399): on, the running loop
#: schedules drafts and the waiting loop pads (scheduler.py:703-721, 1131-1153).
VLLM_SPECULATIVE = _Line(
    "speculative_decoding", yes="speculative decoding is on", no="speculative decoding is off",
    citation="vllm 0.32.0 config/speculative.py:393, 399; scheduler.py:703-721, 1131-1153",
    test=lambda doc: bool(doc.get("speculative_method")),
    has=lambda doc: (f"speculative_method={doc.get('speculative_method')}"
                     if doc.get("speculative_method") else "no speculative decoding"))


#: vLLM's hybrid KV cache manager: a model with sliding-window or Mamba layers beside full
#: attention gets several KV cache groups drawing from one pool (vllm 0.32.0
#: v1/core/kv_cache_utils.py:1443-1551, 2159-2253; v1/core/kv_cache_coordinator.py), so a
#: request's blocks are not one table's. An entry on one full-attention group says nothing
#: of a config with groups (the properties' block arithmetic is the one group's).
VLLM_KV_GROUPS = _Line(
    "kv_cache_groups", yes="the KV cache has groups beyond one full-attention group",
    no="one full-attention KV cache group",
    citation="vllm 0.32.0 v1/core/kv_cache_utils.py:1443-1551, 2159-2253; "
             "v1/core/kv_cache_coordinator.py",
    test=lambda doc: bool(doc.get("kv_cache_groups")),
    has=lambda doc: (f"kv_cache_groups={doc.get('kv_cache_groups')}"
                     if doc.get("kv_cache_groups") else "one full-attention group"))

#: A KV connector (--kv-transfer-config) adds external hits, loads that hold a request's
#: blocks outside the running queue and load failures (vllm 0.32.0 scheduler.py:164-194,
#: 970-1042, 3123-3193): an entry without one says nothing of a config with one.
VLLM_CONNECTOR = _Line(
    "kv_connector", yes="a KV connector is on", no="no KV connector",
    citation="vllm 0.32.0 v1/core/sched/scheduler.py:164-194, 970-1042, 3123-3193",
    test=lambda doc: bool(doc.get("kv_connector")),
    has=lambda doc: (f"kv_connector={doc.get('kv_connector')}" if doc.get("kv_connector")
                     else "no KV connector"))


def _hit_uncapped(doc: ConfigDoc) -> bool:
    """A prefix hit may cover every token: prefix caching on with the cap of
    kv_cache_manager.py:289-300 switched off (without the cache no hit is looked up,
    scheduler.py:960-967, whatever the switch says)."""
    return (bool(doc.get("enable_prefix_caching"))
            and _rules(doc).get("cap_prefix_hit", True) is not True)


def _assertion_free(doc: ConfigDoc) -> bool:
    return not _threshold_cuts_padding(doc) and not _hit_uncapped(doc)


def _assertion_free_has(doc: ConfigDoc) -> str:
    uncapped = (["rules.cap_prefix_hit=False with prefix caching on"] if _hit_uncapped(doc)
                else [])
    return ", ".join([_threshold_has(doc), *uncapped])


#: For HOLDS of no_engine_assertion: the config turns on none of the assertions the model
#: knows the engine can reach. scheduler.py:1372 (`assert num_new_tokens == 1 +
#: self.num_spec_tokens`) needs a threshold that cuts a padded admission (VLLM_THRESHOLD_CUT);
#: scheduler.py:1170 (`assert num_new_tokens > 0`) needs a prefix hit of the whole prompt,
#: which kv_cache_manager.py:289-300 caps at num_tokens - 1 (the rule switch
#: cap_prefix_hit; vllm-project/vllm#30320; manifest tiny_cached_uncapped VIOLATED).
VLLM_ASSERTION_FREE = Premise(
    "assertion_free",
    where="the config turns on no engine assertion the model knows",
    citation="vllm 0.32.0 scheduler.py:1372, reached when a threshold below 1 + k cuts a "
             "padded admission, vllm-project/vllm#54028; scheduler.py:1170, reached by a "
             "prefix hit that kv_cache_manager.py:289-300 does not cap, vllm-project/vllm#30320",
    holds=_assertion_free, has=_assertion_free_has)

#: Where each of vLLM V1's switches is defined upstream (vllm 0.32.0): it picks a code path.
VLLM_SWITCH_CITATIONS: Mapping[str, str] = {
    "enable_chunked_prefill": "vllm 0.32.0 config/scheduler.py:134",
    "long_prefill_token_threshold_adaptive": "vllm 0.32.0 config/scheduler.py:86-90",
    "scheduler_reserve_full_isl": "vllm 0.32.0 config/scheduler.py:190",
    "enable_prefix_caching": "vllm 0.32.0 config/cache.py:141",
    "async_scheduling": "vllm 0.32.0 config/scheduler.py:208-211 (v1/core/sched/"
                        "async_scheduler.py)",
    "parallel_drafting": "vllm 0.32.0 config/speculative.py:478",
    "disable_eagle_block_drop": "vllm 0.32.0 config/speculative.py:452",
}

#: Engine (base name) -> (its dividing lines, premises for (property, expected), switch
#: citations). An engine not listed has only its switches as premises.
ENGINE_PREMISES: Mapping[str, tuple[tuple[_Line, ...],
                                    Mapping[tuple[str, str], tuple[Premise, ...]],
                                    Mapping[str, str]]] = {
    "vllm-v1": ((VLLM_THRESHOLD_CUT, VLLM_SPECULATIVE, VLLM_KV_GROUPS, VLLM_CONNECTOR),
                {("no_engine_assertion", "HOLDS"): (VLLM_ASSERTION_FREE,),
                 ("no_engine_assertion", "PROVED"): (VLLM_ASSERTION_FREE,)},
                VLLM_SWITCH_CITATIONS),
}


def switch_premises(doc: ConfigDoc, citations: Mapping[str, str] | None = None
                    ) -> tuple[Premise, ...]:
    """A config's switches as premises: each on/off field it sets at its value (a field
    a config leaves out reads as off), every other switch off, and the same rule switches
    ("rules", the ones that differ from the config's release)."""
    citations = citations or {}
    mine = {k: v for k, v in doc.items() if isinstance(v, bool)}
    out = [Premise(f"switch {key}", f"{key}={value}", citations.get(key, ""),
                   lambda d, key=key, value=value: d.get(key, False) == value,
                   lambda d, key=key: f"{key}={d.get(key, False)}")
           for key, value in mine.items()]

    def others_on(d: ConfigDoc) -> list[str]:
        return [k for k, v in d.items() if v is True and k not in mine]

    out.append(Premise("switch others", "no other switch is on", "",
                       lambda d: not others_on(d),
                       lambda d: ", ".join(f"{k}=True" for k in others_on(d)) or "none on"))
    rules = dict(_rules(doc))
    out.append(Premise("switch rules", _rules_text(rules), "",
                       lambda d: dict(_rules(d)) == rules,
                       lambda d: _rules_text(dict(_rules(d)))))
    return tuple(out)


def _rules_text(rules: Mapping[str, object]) -> str:
    """`rules=a=True,b=False`, or the release's own rules."""
    if not rules:
        return "the release's own rules"
    return "rules=" + ",".join(f"{k}={v}" for k, v in sorted(rules.items()))


def premises(manifest: Manifest, entry: Entry) -> tuple[Premise, ...]:
    """The premises of `entry`: the facts of its config its verdict rests on (the engine's
    dividing lines at its config's side, the engine's premises for its property and
    verdict, then its config's switches), each true of that config."""
    nc = manifest.configs[entry.config]
    try:
        return _premises(entry, nc)
    except TypeError:  # a config that cannot be hashed: not cached
        return _premises.__wrapped__(entry, nc)


@functools.lru_cache(maxsize=4096)
def _premises(entry: Entry, nc: NamedConfig) -> tuple[Premise, ...]:
    doc = engines.get(entry.engine).config_to_dict(nc.config)
    lines, by_claim, citations = ENGINE_PREMISES.get(engines.base_name(entry.engine),
                                                     ((), {}, {}))
    return (*(line.side(doc) for line in lines),
            *by_claim.get((entry.property, entry.expected), ()),
            *switch_premises(doc, citations))
