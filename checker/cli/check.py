"""`batchproof check`: decide properties and compare with the manifest.

Exit codes: 0 every verdict as the manifest expects; 1 a verdict departs, or with
`--method both` the two methods disagree; 2 bad input; 3 inconclusive (UNKNOWN: solver
unknown or time limit; with `--method both` also a verdict only one method decided);
130 / 143 stopped by SIGINT / SIGTERM (the workers are ended first)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from pathlib import Path

from checker.config.flags import (
    add_config_flags,
    apply_config_flags,
    bounded_int,
    bounded_seconds,
)
from checker.config.model_kind import model_kind, with_kind
from checker.config.serve_args import (
    CONNECTOR_FLAGS,
    add_config_option,
    add_machine_flags,
    add_serve_words,
    ignored_line,
    kind_line,
    memory_note,
    merge_yaml,
    print_notes,
    refuse_unmodelled,
    serve_config,
    split_config_option,
    vllm_input_given,
)
from checker.methods import agreement
from checker.methods.agreement import Agreement
from checker.methods.jobs import (
    EXPLORERS,
    REFERENCE,
    Job,
    JobResult,
    array_searches,
    family_of,
    reference_only,
    symbolic_bounds,
)
from checker.methods.symbolic import (
    Bounds,
    Family,
    abstracted,
    beyond_symbolic,
    extend,
    new_unrolling,
)
from checker.methods.verdict import (
    ANSWERED,
    AS_EXPECTED,
    DEPARTS,
    HOLDS,
    INCONCLUSIVE,
    PROVED,
    UNKNOWN,
    VIOLATED,
    Verdict,
)
from checker.runner import pool
from checker.runner.stops import Stopped
from checker.show import itf
from checker.show import text as render
from checker.show.progress import Progress
from model import registry as engines
from model.core.errors import ConfigError, InputError
from model.core.ops import SymbolicOps
from model.core.types import Step
from model.sglang.config import ENGINE_SGLANG
from model.vllm.config import ENGINE_VLLM_V1
from model.workload import config_rejection, parse_workload, read_json
from properties import catalogue
from properties.manifest import (
    Entry,
    Manifest,
    NamedConfig,
    custom_config,
    load,
    with_bounds,
)

COUNTEREXAMPLES = Path("counterexamples")
# Where the counterexamples of a question without a manifest entry go (`--out`).
DEFAULT_OUT = Path("batchproof-out")
METHODS = ("auto", "bmc", "explore", "both")
# `check` also takes "induction": auto, with k-induction tried where its invariant's proof
# takes minutes (a prefix-cache pool past invariant.MAX_QUICK_POOL blocks).
CHECK_METHODS = (*METHODS, "induction")
ALL = "all"
JSON_SCHEMA = 1  # docs/schema/check.schema.json; bump it when the --json shape changes
# Sizes a check may ask for (docs/simulation_contract.md, limits). The rules' formula
# grows with slots squared per step, so past 16 slots building one BMC step alone
# outlasts a short --timeout; depth is iterative deepening, bounded by the timeout, so
# its cap only keeps a typo from asking for 10^18 steps.
MAX_SLOTS = 16
MAX_DEPTH = 1000
MAX_TIMEOUT_S = 86_400.0  # a day; z3 takes milliseconds as a 32-bit count (49 days)
MAX_JOBS = 256
# Request lengths only bound integers in BMC; the explorer enumerates every request kind
# (prompt x max_tokens x priority x prefix) at every arrival, so it has its own cap.
MAX_PROMPT_LEN = 100_000
MAX_MAX_TOKENS = 100_000
MAX_PREFIX_GROUPS = 16
MAX_CACHED_PREFIX_LEN = 100_000
# The manifest's configs ask for about 100 kinds at most; at 5,000 (sg_tiny, 2 requests)
# the explorer reached 372 states in 300 s.
MAX_EXPLORE_KINDS = 1000
MAX_PARAM = MAX_DEPTH
# The bounds of a custom configuration (flags or --config-file) when no flag sets them.
CUSTOM_BOUNDS = (("slots", 3), ("depth", 6), ("max_prompt_len", 8), ("max_max_tokens", 6))
# Bounds flags: Bounds field (the argparse dest) -> the flag's name.
BOUND_FLAGS = (("slots", "--requests"), ("depth", "--depth"),
               ("max_prompt_len", "--max-prompt-len"), ("max_max_tokens", "--max-tokens"),
               ("prefix_groups", "--prefix-groups"),
               ("max_cached_prefix_len", "--max-cached-prefix-len"),
               ("arrival_window", "--arrival-window"), ("no_eos", "--no-eos"),
               ("kv_load_steps", "--kv-load-steps"))
# A property's parameter `k` counts consecutive steps (a window: at least 1); `m` and any
# other counts events (preemptions: at least 0).
PARAM_MINIMUM = {"k": 1}
# Step fields whose default does not state a fact: step_kind 0 is "mixed or unspecified"
# (model/core/types.py). An engine whose rules never set it does not classify its steps,
# so a property over step kinds says nothing about it.
UNSPECIFIED_BY_DEFAULT = ("step_kind", "assertion")

Row = tuple[Entry | None, NamedConfig, str, tuple[tuple[str, int], ...]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof check`."""
    parser.add_argument("--engine", default=ENGINE_VLLM_V1,
                        help=f"engine to check: {', '.join(engines.names())}, or {ALL!r} "
                        "for every engine's manifest (default vllm-v1)")
    parser.add_argument("--method", choices=CHECK_METHODS, default="auto",
                        help="auto: theorem, k-induction, then the bounded search the "
                        "manifest config records as the faster one (bmc, or the explorer; "
                        "bmc for a question); bmc: theorem, k-induction, then bounded model "
                        "checking (z3); explore: explicit-state exploration (--explorer); "
                        "both: run bmc and explore and require the same verdicts; "
                        "induction: auto, with k-induction also where its invariant's "
                        "proof takes minutes (a prefix cache of more than 3 blocks) "
                        "(default auto)")
    parser.add_argument("--explorer", choices=EXPLORERS,
                        help="which explorer: auto runs, with --method explore, the array "
                        "explorer (numpy, over the rules) where it searches the config and "
                        "bounds exactly and repays its set-up (3+ requests, 1000+ orders of "
                        "arrival kinds), else the reference explorer, and with --method both "
                        "the reference explorer, so that the second opinion runs the other "
                        "semantics; array or reference forces one (default auto)")
    parser.add_argument("--dot", metavar="FILE",
                        help="with one check and --method explore: write the explored graph "
                        "as Graphviz DOT")
    parser.add_argument("--graphml", metavar="FILE",
                        help="with one check and --method explore: write the explored graph "
                        "as GraphML")
    parser.add_argument("--property", action="append", metavar="NAME[:k=V,...]",
                        help="check only this property (repeatable), optionally with its "
                        "parameters (starvation:k=10); any property that applies to the "
                        "engine, with or without a manifest entry (docs/queries.md); see "
                        "--list")
    parser.add_argument("--param", action="append", metavar="NAME=V",
                        help="a parameter of the --property checked (repeatable): k steps "
                        "(starvation, head_of_line, ...; at least 1) or m preemptions "
                        f"(preemption_storm, repeated_preemption; at least 0), at most "
                        f"{MAX_PARAM}; default: the manifest's value for the property")
    src = parser.add_mutually_exclusive_group()
    add_config_option(src, manifest=True)
    src.add_argument("--config-file", metavar="F",
                     help="a workload JSON whose 'config' is checked (vLLM field names)")
    add_serve_words(parser)
    parser.add_argument("--no-validate", action="store_true",
                        help="check a configuration the engine would reject (vLLM: "
                        "SchedulerConfig's rules and the startup KV check); the output says "
                        "it is not validated")
    parser.add_argument("--suite", choices=["default", "slow", "all"], default="default",
                        help="which manifest entries to run (default: default)")
    bounds = parser.add_argument_group(
        "bounds", "the workloads a verdict covers (default: the manifest config's bounds; "
        "for a custom configuration 3 requests, depth 6, prompts <= 8, max_tokens <= 6); "
        "requests arrive in steps 1..depth (or --arrival-window) and may sample EOS "
        "whenever they sample (unless --no-eos)")
    bounds.add_argument("--depth", type=bounded_int(1, MAX_DEPTH),
                        help=f"steps of the run (BMC depth), at most {MAX_DEPTH}")
    bounds.add_argument("--requests", "--slots", dest="slots", metavar="N",
                        type=bounded_int(1, MAX_SLOTS),
                        help=f"request slots: at most N requests, at most {MAX_SLOTS}")
    bounds.add_argument("--max-prompt-len", type=bounded_int(1, MAX_PROMPT_LEN), metavar="L",
                        help=f"prompts of 1..L tokens (and below max_model_len), at most "
                        f"{MAX_PROMPT_LEN}")
    bounds.add_argument("--max-tokens", dest="max_max_tokens", metavar="T",
                        type=bounded_int(1, MAX_MAX_TOKENS),
                        help=f"max_tokens of 1..T per request, at most {MAX_MAX_TOKENS}")
    bounds.add_argument("--prefix-groups", type=bounded_int(0, MAX_PREFIX_GROUPS), metavar="G",
                        help="vLLM with prefix caching on: requests fall in up to G groups "
                        "whose members share a prompt prefix (0: none shared; at most "
                        f"{MAX_PREFIX_GROUPS})")
    bounds.add_argument("--max-cached-prefix-len", type=bounded_int(0, MAX_CACHED_PREFIX_LEN),
                        metavar="C", help="SGLang with the radix cache on: up to C tokens of "
                        "a prompt are found in the cache (0: none)")
    add_environment_flags(bounds)
    parser.add_argument("--timeout", type=bounded_seconds(MAX_TIMEOUT_S), default=300.0,
                        metavar="S", help="seconds per check before UNKNOWN (default 300, at "
                        f"most {MAX_TIMEOUT_S:g})")
    parser.add_argument("--jobs", type=bounded_int(1, MAX_JOBS), default=2,
                        help="worker processes (default 2)")
    parser.add_argument("--json", action="store_true", help="print verdicts as JSON")
    parser.add_argument("--write", action="store_true",
                        help="write the counterexamples of manifest entries (ITF JSON + text "
                        "timeline) to counterexamples/")
    parser.add_argument("--out", metavar="DIR",
                        help="where the counterexamples of a question without a manifest "
                        f"entry are written (default ./{DEFAULT_OUT}/, created when one is "
                        "found); never counterexamples/")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML report (checker/show/report.py)")
    parser.add_argument("--junit", metavar="FILE",
                        help="also write the verdicts as JUnit XML, one testcase per check")
    parser.add_argument("--json-file", metavar="FILE",
                        help="also write the verdicts as JSON (the document --json prints), "
                        "beside the table")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress line on stderr (shown only when stderr is a "
                        "terminal)")
    parser.add_argument("--list", action="store_true", help="list properties and configs")
    machine = parser.add_argument_group(
        "the machine", "what vLLM's default batch sizes depend on, for a custom vLLM "
        "configuration that does not set both")
    add_machine_flags(machine)
    add_config_flags(parser)


def add_environment_flags(group: argparse._ArgumentGroup) -> None:
    """--arrival-window and --no-eos: when requests may arrive, whether they may sample EOS
    (Bounds.arrival_window, Bounds.no_eos; BMC and the explorer alike)."""
    group.add_argument("--arrival-window", type=bounded_int(1, MAX_DEPTH), metavar="A",
                       help="requests arrive in steps 1..A only (default: any step up to "
                       "the depth)")
    group.add_argument("--no-eos", action="store_const", const=True, default=None,
                       help="no request samples EOS: each runs to its max_tokens (default: "
                       "EOS may be sampled at any sampled token)")
    group.add_argument("--kv-load-steps", type=bounded_int(1, MAX_DEPTH), metavar="D",
                       help="with a KV connector: assume the worker reports every "
                       "asynchronous load within D steps of the step that started it "
                       "(default: a load may never be reported)")


def _flags_given(args: argparse.Namespace) -> bool:
    """A custom vLLM configuration: Config flags (from the command line or --config FILE),
    a pasted `vllm serve MODEL`, or another flag vllm serve reads; or a model kind with
    KV cache groups (a manifest config has one full-attention group)."""
    return vllm_input_given(args) or model_kind(args).feature() is not None


def prepare(args: argparse.Namespace, command: str = "check") -> argparse.Namespace:
    """Sort out `--config` (vLLM's YAML file, or the deprecated manifest name), merge the
    YAML's flags under the command line's, and refuse the vllm serve flags that turn on
    what the model does not run; also for worst and diff."""
    split_config_option(args, list(load().configs))
    args = merge_yaml(args, args.serve_yaml)
    refuse_unmodelled(args, command)
    args.serve_notes = []
    if not vllm_input_given(args):
        # A manifest or workload configuration keeps its own pool.
        args.serve_notes.append(memory_note(args, "its num_gpu_blocks",
                                            "the configuration's own pool"))
    return args


def _bound_overrides(args: argparse.Namespace) -> dict[str, int]:
    """The bounds given on the command line, by Bounds field."""
    return {dest: getattr(args, dest) for dest, _ in BOUND_FLAGS
            if getattr(args, dest, None) is not None}


def _parse_params(items: Sequence[str], where: str) -> dict[str, int]:
    """NAME=INTEGER items as a dict; InputError naming `where` otherwise."""
    out: dict[str, int] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier():
            raise InputError(f"{where}: {item!r} is not NAME=INTEGER; write e.g. k=10")
        lo = PARAM_MINIMUM.get(name, 0)
        try:
            value = bounded_int(lo, MAX_PARAM)(text.strip())
        except argparse.ArgumentTypeError as exc:
            raise InputError(f"{where}: parameter {name}: {exc}") from None
        if name in out and out[name] != value:
            raise InputError(f"{where}: parameter {name} is given twice ({out[name]} and "
                             f"{value}); give it once")
        out[name] = value
    return out


def _takes(name: str) -> tuple[str, ...]:
    """The parameters property `name` takes."""
    return tuple(k for k, _ in catalogue.example(name).params)


def _shown_params(params: Sequence[tuple[str, int]] | dict[str, int]) -> str:
    items = params.items() if isinstance(params, dict) else params
    return " ".join(f"{k}={v}" for k, v in items)


def _wanted(args: argparse.Namespace) -> list[tuple[str, dict[str, int]]]:
    """The --property names asked for, each with the parameters given for it (its own
    `:k=V` first, then --param where the property takes that name)."""
    common = _parse_params(getattr(args, "param", None) or [], "--param")
    if common and not args.property:
        raise InputError("--param sets a parameter of the property checked; add --property "
                         "NAME (e.g. --property starvation --param k=10)")
    known = set(catalogue.names())
    out: list[tuple[str, dict[str, int]]] = []
    taken: set[str] = set()
    for spec in args.property or []:
        name, colon, rest = spec.partition(":")
        name = name.strip()
        if name not in known:
            raise InputError(f"unknown property {name!r}; known: {', '.join(sorted(known))}")
        takes = _takes(name)
        own = _parse_params([p for p in rest.split(",") if p.strip()] if colon else [],
                            f"--property {spec}")
        for k in own:
            if k not in takes:
                raise InputError(f"--property {spec}: {name} has no parameter {k!r}; "
                                 + (f"it takes {', '.join(takes)}" if takes
                                    else "it takes none"))
        taken.update(takes)
        params = {**{k: v for k, v in common.items() if k in takes}, **own}
        if (name, params) not in out:
            out.append((name, params))
    unused = sorted(set(common) - taken)
    if unused:
        takes_text = "; ".join(f"{n} takes {', '.join(_takes(n)) or 'none'}"
                               for n in dict.fromkeys(n for n, _ in out))
        raise InputError(f"--param {unused[0]}: no property checked takes it ({takes_text})")
    return out


def _param_sets(name: str, given: dict[str, int], engine: str,
                entries: Sequence[Entry]) -> list[tuple[tuple[str, int], ...]]:
    """The parameter sets a question about `name` on `engine` is asked with: the given
    values, the others from the manifest's entries for the property on this engine, else
    on any engine (the first), else `batchproof config`'s default for the hazard."""
    takes = _takes(name)
    if not takes:
        return [()]
    if all(k in given for k in takes):
        return [tuple(sorted(given.items()))]
    own = list(dict.fromkeys(e.params for e in entries
                             if e.engine == engine and e.property == name))
    if not own:
        own = [e.params for e in entries if e.property == name][:1]
    if not own:
        from checker.config.hazards import HAZARDS, Envelope  # only for this default
        own = [h.params(Envelope()) for h in HAZARDS if h.property == name][:1]
    if not own:
        raise InputError(f"{name} needs its parameter {', '.join(takes)}; pass --param "
                         f"{takes[0]}=N")
    return list(dict.fromkeys(tuple(sorted({**dict(p), **given}.items())) for p in own))


def _default_config(engine: str, configs: dict[str, NamedConfig]) -> NamedConfig:
    """The engine's default configuration for a question with neither a custom config nor
    a manifest entry: the first config of its manifest (tiny_fcfs, sg_tiny, mr_tiny,
    st_tiny, dy_tiny), with that config's bounds. A version without configs of its own
    takes its engine's, read by the version's parser."""
    for nc in configs.values():
        if nc.engine == engine:
            return nc
    base = engines.base_name(engine)
    for nc in configs.values():
        if nc.engine == base:
            cfg = engines.get(engine).parse_config(engines.get(base).config_to_dict(nc.config))
            return replace(nc, engine=engine, config=cfg)
    raise InputError(f"the manifest has no configuration for {engine}; give one with "
                     "--config-file WORKLOAD.json")


def _query_configs(args: argparse.Namespace, name: str, entries: Sequence[Entry],
                   configs: dict[str, NamedConfig]) -> list[NamedConfig]:
    """Where a question without a manifest entry is asked: --config; else the configs
    the manifest checks the property on for this engine (with other parameters); else
    the engine's default config."""
    if args.manifest_config:
        nc = configs[args.manifest_config]
        if nc.engine != args.engine:
            raise InputError(f"config {args.manifest_config} is a {nc.engine} config but "
                             f"--engine is {args.engine}; pass --engine {nc.engine}")
        return [nc]
    found: dict[str, NamedConfig] = {}
    for e in entries:
        if e.engine == args.engine and e.property == name and e.config not in found:
            found[e.config] = with_bounds(configs[e.config], **dict(e.bounds))
    return list(found.values()) or [_default_config(args.engine, configs)]


def _select(args: argparse.Namespace) -> list[Row]:
    """(manifest entry or None, config, property, params) rows to check: a manifest
    entry where one matches (its verdict is compared with the manifest), otherwise a
    question (entry None: the verdict is the answer)."""
    if args.engine != ALL:
        engines.get(args.engine)  # InputError naming the engines if unknown
    manifest = load()
    wanted = _wanted(args)
    entries = [e for e in manifest.entries if args.engine in (ALL, e.engine)]
    if args.config_file or _flags_given(args):
        if args.engine == ALL:
            raise InputError("a custom configuration needs one engine; add --engine NAME")
        rows = _custom_rows(args, wanted, entries, manifest.entries)
    else:
        if args.manifest_config and args.manifest_config not in manifest.configs:
            raise InputError(f"unknown config {args.manifest_config!r}; manifest configs: "
                             f"{', '.join(manifest.configs)}")
        if args.manifest_config:
            entries = [e for e in entries if e.config == args.manifest_config]
        elif args.suite != "all" and not wanted:
            entries = [e for e in entries if e.suite == args.suite]
        rows = _manifest_rows(args, wanted, entries, manifest)
    overrides = _bound_overrides(args)
    rows = [(e, with_bounds(nc, **overrides), prop, params) for e, nc, prop, params in rows]
    _check_applies(rows)
    _check_sizes(args, rows, overrides)
    return rows


def _manifest_rows(args: argparse.Namespace, wanted: list[tuple[str, dict[str, int]]],
                   entries: list[Entry], manifest: Manifest) -> list[Row]:
    def entry_row(e: Entry) -> Row:
        return (e, with_bounds(manifest.configs[e.config], **dict(e.bounds)), e.property,
                e.params)

    if not wanted:
        return [entry_row(e) for e in entries]
    rows: list[Row] = []
    unanswered = []
    for name, given in wanted:
        matching = [e for e in entries if e.property == name
                    and all(dict(e.params).get(k) == v for k, v in given.items())]
        if matching:
            rows += [entry_row(e) for e in matching]
        elif args.engine == ALL:
            unanswered.append(name)
        else:
            for params in _param_sets(name, given, args.engine, manifest.entries):
                for nc in _query_configs(args, name, manifest.entries, manifest.configs):
                    rows.append((None, nc, name, params))
    if unanswered and not rows:
        raise InputError(f"no manifest entry checks {unanswered[0]} on any engine; to ask "
                         "it, name one engine with --engine NAME")
    return rows


def _custom_rows(args: argparse.Namespace, wanted: list[tuple[str, dict[str, int]]],
                 entries: list[Entry], all_entries: Sequence[Entry]) -> list[Row]:
    if args.config_file:
        doc = read_json(args.config_file, "pass a workload JSON file with a 'config'",
                        "config file")
        if not isinstance(doc, dict) or "config" not in doc:
            raise InputError(f"{args.config_file} has no 'config' to check; give a workload "
                             "JSON whose 'config' holds the engine's fields "
                             "(docs/simulation_contract.md)")
        workload = parse_workload(doc, need_requests=False)
        if workload.engine != args.engine:
            raise InputError(f"{args.config_file} is a {workload.engine} workload but "
                             f"--engine is {args.engine}; pass --engine {workload.engine}")
        base = workload.config
        cfg = (with_kind(model_kind(args), apply_config_flags(args, base))
               if args.engine == ENGINE_VLLM_V1 else base)
    elif args.engine == ENGINE_VLLM_V1:
        # Flags (command line over --config FILE) are read as `vllm serve` reads them and
        # resolved as `batchproof config` resolves them: EngineArgs' defaults and clamps,
        # prefix caching on for the decoder-only models the model covers (config/cache.py:
        # 141, engine/arg_utils.py:2987-3055), the AsyncScheduler on a GPU (config/vllm.py:
        # 1541-1644); what it had to assume is said under the table.
        cfg, notes = serve_config(args, "check")
        args.serve_notes = [*getattr(args, "serve_notes", []), *notes]
    else:
        raise InputError(f"the vLLM flags configure vllm-v1, not {args.engine}; give "
                         f"{args.engine}'s config with --config-file WORKLOAD.json")
    # The validation every command applies (SchedulerConfig's rules, vLLM's startup KV
    # check); field types are checked even under --no-validate.
    rejected = config_rejection(args.engine, cfg)
    if rejected is not None and not args.no_validate:
        raise InputError(f"{rejected} [rule {rejected.rule}; pass --no-validate to "
                         "check it anyway]")
    nc = custom_config("custom", cfg, validated=not args.no_validate, engine=args.engine)
    nc = with_bounds(nc, **dict(CUSTOM_BOUNDS))
    if wanted:
        return [(None, nc, name, params) for name, given in wanted
                for params in _param_sets(name, given, args.engine, all_entries)]
    return [(None, nc, prop, params)
            for prop, params in dict.fromkeys((e.property, e.params) for e in entries)]


# --- which properties apply to an engine ---------------------------------------------------


class _ReadSteps:
    """A Step that records which of its fields a property reads."""

    def __init__(self, step: Step, read: set[str]) -> None:
        self._step, self._read = step, read

    def __getattr__(self, name: str) -> object:
        self._read.add(name)
        return getattr(self._step, name)


_APPLIES: dict[tuple[str, object], dict[str, str | None]] = {}


def applicability(engine: str, nc: NamedConfig) -> dict[str, str | None]:
    """Property name -> None when it applies to `engine`, else why not. A property applies
    when it can be read on the engine's Step observables: evaluated over two steps of the
    engine's rules (one request slot, this config), it reads no field the engine's steps
    or rule config lack, and no Step field whose default states nothing
    (UNSPECIFIED_BY_DEFAULT) that the engine leaves at that default."""
    key = (engine, type(engines.get(engine).rule_config(nc.config)))
    if key in _APPLIES:
        return _APPLIES[key]
    u = new_unrolling(Family(base=nc.config, engine=engine), Bounds(slots=1, depth=2))
    for _ in range(2):
        extend(u)
    defaults = {f: Step.__dataclass_fields__[f].default for f in UNSPECIFIED_BY_DEFAULT}
    unset = {f for f, d in defaults.items()
             if all(isinstance(getattr(s, f), int) and getattr(s, f) == d for s in u.steps)}
    unset -= set(engines.get(engine).sets_fields)
    out: dict[str, str | None] = {}
    for name in catalogue.names():
        prop = catalogue.example(name)
        read: set[str] = set()
        steps = [_ReadSteps(s, read) for s in u.steps]
        try:
            for t in range(len(steps)):
                prop.holds(SymbolicOps(), steps, t)  # type: ignore[arg-type]
        except AttributeError as exc:
            out[name] = f"it reads {getattr(exc, 'name', None) or exc}, which {engine}'s " \
                        "steps do not have"
            continue
        if name != "no_engine_assertion":  # catalogue.get's crash guard reads it, not the property
            read.discard("assertion")
        blank = sorted(read & unset)
        out[name] = (f"it reads {blank[0]}, which {engine}'s rules never set"
                     if blank else None)
    _APPLIES[key] = out
    return out


def _check_applies(rows: list[Row]) -> None:
    """A question (no manifest entry) about a property that does not apply to its engine
    is an InputError naming the ones that do."""
    for e, nc, prop, _ in rows:
        if e is not None:
            continue
        table = applicability(nc.engine, nc)
        why = table.get(prop)
        if why is not None:
            fits = [n for n, w in table.items() if w is None]
            raise InputError(f"{prop} does not apply to {nc.engine} ({why}); properties "
                             f"that apply to {nc.engine}: {', '.join(fits)}")


def _prefix_bound(engine: str, cfg: object) -> str | None:
    """The prefix-sharing bound the engine's rules read under `cfg`: vLLM V1's prefix
    cache reads prefix groups, SGLang's radix cache cached prefix lengths."""
    base = engines.base_name(engine)
    if base == ENGINE_VLLM_V1 and getattr(cfg, "enable_prefix_caching", False):
        return "prefix_groups"
    if base == ENGINE_SGLANG and not getattr(cfg, "disable_radix_cache", True):
        return "max_cached_prefix_len"
    return None


def explore_kinds(bounds: Bounds, rule_cfg: object) -> int:
    """How many request kinds the explorer enumerates per arrival (explore.menu)."""
    prios = bounds.max_priority + 1 if getattr(rule_cfg, "policy_priority", False) else 1
    top = min(bounds.max_prompt_len, int(getattr(rule_cfg, "max_model_len", 2)) - 1)
    return sum(bounds.max_max_tokens * prios * (min(bounds.max_cached_prefix_len, p) + 1)
               * (1 + bounds.prefix_groups * p) for p in range(1, max(top, 0) + 1))


def _check_sizes(args: argparse.Namespace, rows: list[Row], overrides: dict[str, int]
                 ) -> None:
    """Bounds a row's engine or method cannot take: one InputError before any job runs."""
    flag = dict(BOUND_FLAGS)
    for _, nc, _, _ in rows:
        if overrides.get("kv_load_steps") and not getattr(nc.config, "kv_connector", False):
            raise InputError(f"--kv-load-steps {overrides['kv_load_steps']} bounds a KV "
                             f"connector's loads, which {nc.engine} config {nc.name} does "
                             "not have; drop it or give --kv-transfer-config")
        for field in ("prefix_groups", "max_cached_prefix_len"):
            if overrides.get(field, 0) > 0 and _prefix_bound(nc.engine, nc.config) != field:
                owner = ("vLLM V1's prefix cache (--enable-prefix-caching)"
                         if field == "prefix_groups" else "SGLang's radix cache "
                         "(disable_radix_cache false)")
                raise InputError(f"{flag[field]} bounds {owner}, which {nc.engine} config "
                                 f"{nc.name} does not have on; drop {flag[field]} or check a "
                                 "config with it on")
        if args.method in ("explore", "both"):
            bounds = Bounds(**dict(nc.bounds))
            kinds = explore_kinds(bounds, engines.get(nc.engine).rule_config(nc.config))
            if kinds > MAX_EXPLORE_KINDS:
                raise InputError(
                    f"--method {args.method}: the explorer would enumerate {kinds} request "
                    f"kinds per arrival on {nc.name} (prompts <= {bounds.max_prompt_len}, "
                    f"max_tokens <= {bounds.max_max_tokens}), more than {MAX_EXPLORE_KINDS}; "
                    "lower --max-prompt-len / --max-tokens or use --method bmc")


def bounds_of(nc: NamedConfig) -> dict[str, int]:
    """Every bound of a row's queries, defaults filled in (the `bounds` of --json)."""
    b = Bounds(**dict(nc.bounds))
    out = {f.name: getattr(b, f.name) for f in fields(b)}
    out["arrival_window"] = b.last_arrival()  # the window in effect, not 0 for "depth"
    return out


def bounds_line(nc: NamedConfig) -> str:
    """The bounds a verdict holds within, for people."""
    b = Bounds(**dict(nc.bounds))
    rule_cfg = engines.get(nc.engine).rule_config(nc.config)
    model_len = getattr(rule_cfg, "max_model_len", None)
    prompts = f"prompts <= {b.max_prompt_len}"
    if isinstance(model_len, int) and model_len - 1 < b.max_prompt_len:
        prompts = f"prompts <= {model_len - 1} (below max_model_len {model_len})"
    parts = [f"{b.slots} request{'s' if b.slots != 1 else ''}", f"depth {b.depth}",
             prompts, f"max_tokens <= {b.max_max_tokens}",
             f"arrivals in steps 1..{b.last_arrival()}"]
    if getattr(rule_cfg, "policy_priority", False):
        parts.append(f"priorities 0..{b.max_priority}")
    shared = _prefix_bound(nc.engine, nc.config)
    if b.prefix_groups:
        parts.append(f"prefix groups <= {b.prefix_groups}")
    elif shared == "prefix_groups":
        parts.append("no shared prefixes (--prefix-groups 0)")
    if b.max_cached_prefix_len:
        parts.append(f"cached prefixes <= {b.max_cached_prefix_len}")
    elif shared == "max_cached_prefix_len":
        parts.append("no cached prefixes (--max-cached-prefix-len 0)")
    parts.append("no EOS (each request runs to its max_tokens)" if b.no_eos
                 else "EOS at any sampled token")
    if b.kv_load_steps:
        parts.append(f"every KV load reported within {b.kv_load_steps} step(s) of its start")
    elif getattr(nc.config, "kv_connector", False):
        parts.append("KV hits and load reports (finished, failed, or never) at any step "
                     "(--kv-load-steps D to assume every load reported within D steps)")
    return ", ".join(parts)


def query_slug(engine: str, prop: str, params: Sequence[tuple[str, int]],
               nc: NamedConfig) -> str:
    """`<engine>__<property>[__params]__<hash>`: the file stem of a question's
    counterexample; the hash is of the configuration and the bounds."""
    bounds = bounds_of(nc)
    # The environment bounds at their defaults (arrivals through the depth, EOS allowed)
    # are left out, so a question asked before they existed keeps its file name.
    if bounds["arrival_window"] == bounds["depth"]:
        del bounds["arrival_window"]
    if not bounds["no_eos"]:
        del bounds["no_eos"]
    if not bounds.get("kv_load_steps"):  # no load premise (a KV connector's fairness)
        bounds.pop("kv_load_steps", None)
    doc = {"engine": engine, "config": engines.get(nc.engine).config_to_dict(nc.config),
           "ranges": [list(r) for r in nc.ranges], "validated": nc.validated,
           "bounds": bounds}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode())
    label = "_".join(f"{k}={v}" for k, v in params)
    return "__".join([engine, prop, *([label] if label else []), digest.hexdigest()[:8]])


def _not_validated(rows: list) -> str:
    """The not-validated line of a custom configuration checked under --no-validate
    (manifest configurations carry the manifest's own `validated` flag), or ''."""
    custom = next((nc for e, nc, _, _ in rows
                   if e is None and nc.name == "custom" and not nc.validated), None)
    if custom is None:
        return ""
    return not_validated_line(custom.engine, config_rejection(custom.engine, custom.config))


def not_validated_line(engine: str, rejected: ConfigError | None) -> str:
    """The mark of a check run under --no-validate: what the engine would say of it."""
    title = engines.get(engine).title
    verdict = (f"{title} would reject it by rule {rejected.rule}" if rejected is not None
               else f"{title} would accept it")
    return f"configuration not validated (--no-validate); {verdict}"


def _paths(engine: str, slug: str) -> tuple[Path, Path]:
    folder = COUNTEREXAMPLES / engines.get(engine).folder
    return folder / f"{slug}.itf.json", folder / f"{slug}.txt"


def golden_text(result: JobResult) -> str:
    """The text rendering stored beside a counterexample."""
    cex, rep = result.counterexample, result.replayed
    assert cex is not None and rep is not None
    prop = catalogue.get(cex.property, **dict(cex.params))
    head = [f"{cex.engine} {cex.property} {dict(cex.params) or ''} on {cex.config_name}: "
            f"VIOLATED at step {cex.violated_at} (found by {cex.method}, replayed on the "
            "reference)".replace(" {} ", " "),
            f"property: {prop.description}", "config: " + " ".join(
                f"{k}={v}" for k, v in cex.workload.config.to_dict().items()),
            "requests:"]
    shown = rep.records[: cex.violated_at]
    return ("\n".join(head) + "\n" + render.requests_table(cex.workload) + "\n"
            + render.timeline(cex.workload, shown, highlight=cex.violated_at, loop=cex.loop))


def _write(result: JobResult, itf_path: Path, txt_path: Path) -> None:
    cex = result.counterexample
    assert cex is not None and result.replayed is not None
    itf_path.parent.mkdir(parents=True, exist_ok=True)
    itf_path.write_text(itf.dumps(itf.to_itf(cex, result.replayed.records)))
    txt_path.write_text(golden_text(result))


def run(args: argparse.Namespace) -> int:
    """Run the selected checks; print the table or JSON; return the exit code."""
    if args.list:
        manifest = load()
        print("properties: " + ", ".join(catalogue.names()))
        if args.engine != ALL:
            table = applicability(args.engine, _default_config(args.engine, manifest.configs))
            print(f"apply to {args.engine}: " + ", ".join(n for n, w in table.items()
                                                          if w is None))
            print(f"do not apply to {args.engine}: " + "; ".join(
                f"{n} ({w})" for n, w in table.items() if w is not None))
        for nc in manifest.configs.values():
            print(f"config {nc.name}: {nc.description}")
        return 0
    args = prepare(args)
    rows = _select(args)
    notes = [ignored_line(args, known=CONNECTOR_FLAGS), *args.serve_notes]
    if any(nc.engine == ENGINE_VLLM_V1 for _, nc, _, _ in rows):
        notes.append(kind_line(args))  # the KV cache layout the verdicts assume
    if not rows:
        raise InputError("no manifest entry matches; see 'batchproof check --list'")
    for flag in ("html", "junit", "json_file", "dot", "graphml"):
        if getattr(args, flag, None):
            _check_writable(f"--{flag.replace('_', '-')}", getattr(args, flag))
    out_dir = Path(args.out) if getattr(args, "out", None) else DEFAULT_OUT
    if any(e is None for e, _, _, _ in rows):
        _check_out_dir(out_dir)
    if args.dot or args.graphml:
        # Imported here: it brings in networkx (0.06 s), which no other check needs.
        from checker.show.graph import export_graph

        return export_graph(args, rows)
    note = _not_validated(rows)
    methods = ("bmc", "explore") if args.method == "both" else (args.method,)
    if getattr(args, "explorer", None) is not None and args.method == "bmc":
        raise InputError(f"--explorer {args.explorer} picks the explorer of --method explore, "
                         "auto or both; add --method explore, or drop --explorer")
    # BMC runs the rules; beside it, `both` asks the reference for the independent view.
    explorer = getattr(args, "explorer", None) or (REFERENCE if args.method == "both" else "auto")
    deep = args.method == "induction"
    if deep:
        methods = ("auto",)
    planned = [(Job(e.engine if e else nc.engine, prop, params, nc,
                    e.expected if e else None, args.timeout, method=_job_method(e, method),
                    explorer=explorer, search=_search(e, nc, explorer), slow_proofs=deep), e)
               for method in methods for e, nc, prop, params in rows
               if e is None or _checked_by(e, method)]
    if not planned:
        e = next(e for e, _, _, _ in rows if e is not None)
        raise InputError(f"--method {args.method} checks none of the selected entries: "
                         f"{e.property} on {e.config} is checked by {', '.join(e.methods)} "
                         f"(the manifest's methods); use --method {e.methods[0]} or auto")
    jobs = [job for job, _ in planned]
    print_notes(_beyond_symbolic_notes(jobs), sys.stderr)  # before the search, not after
    try:
        with Progress(len(jobs), sys.stderr, show=not args.quiet) as progress:
            results = pool.execute(jobs, args.jobs, progress)
    except Stopped as stop:
        sys.stderr.write(f"batchproof: stopped by {stop.name}: "
                         f"{stop.done} of {len(jobs)} checks done, no verdicts printed\n")
        return stop.exit_code
    verdicts = []
    written: set[str] = set()
    for res, (job, entry) in zip(results, planned, strict=True):
        path = None
        if res.counterexample is not None and res.replayed is not None:
            if entry is None:
                # A question's answer goes to --out, one file per question and bounds:
                # the first method's counterexample of it, named on that row.
                slug = query_slug(job.engine, job.property, job.params, job.config)
                itf_path, txt_path = out_dir / f"{slug}.itf.json", out_dir / f"{slug}.txt"
                if slug not in written:
                    written.add(slug)
                    _writing("--out", str(out_dir),
                             lambda r=res, i=itf_path, t=txt_path: _write(r, i, t))
                    path = str(itf_path)
            else:
                itf_path, txt_path = _paths(res.verdict.engine, entry.slug)
                if args.write and job.method == _job_method(entry, methods[0]):
                    _write(res, itf_path, txt_path)
                # Only a file that exists is named (--write writes it; the manifest's
                # corpus holds the stored ones).
                path = str(itf_path) if itf_path.exists() else None
        verdict = replace(res.verdict, counterexample=path)
        if note:  # every row of the run says so, in the table, --json and --junit alike
            verdict = replace(verdict, detail=f"{note}; {verdict.detail}".rstrip("; "))
        verdicts.append(verdict)
    pairs = agreement.pairs(results) if args.method == "both" else []
    agreements = agreement.compare_all(pairs)
    code = exit_code(verdicts, agreements)
    configs = [job.config for job, _ in planned]
    document = json_document(verdicts, agreements, code, args.method == "both",
                             [bounds_of(nc) for nc in configs])
    if args.json:
        json.dump(document, sys.stdout, indent=1)
        sys.stdout.write("\n")
        print_notes(notes, sys.stderr)
    else:
        if note:
            print(note)
        _print(verdicts, agreements, [*_bounds_notes(verdicts, planned),
                                      *(n for n in notes if n)])
    if args.html:
        from checker.show import report  # the report's imports are needed only here
        _writing("--html", args.html, lambda: report.write_html(args.html, results, verdicts))
    if args.json_file:
        _writing("--json-file", args.json_file, lambda: Path(args.json_file).write_text(
            json.dumps(document, indent=1) + "\n"))
    if args.junit:
        from checker.show import junit
        _writing("--junit", args.junit,
                 lambda: junit.write_junit(args.junit, verdicts, agreements))
    return code


def _beyond_symbolic_notes(jobs: Sequence[Job]) -> list[str]:
    """One line per config whose bounded query the symbolic rules cannot take (the
    prefix cache's size), for the jobs that would search it by BMC: said before the run,
    since the search can then only end VIOLATED (a witness found on the engine's cheaper
    rules and confirmed on the exact reference) or UNKNOWN, never HOLDS."""
    out: dict[str, str] = {}
    for job in jobs:
        if job.method == "explore" or (job.method == "auto" and job.search == "explore"):
            continue
        nc = job.config
        only = reference_only(job)
        if only is not None:  # run_batch searches it by the reference explorer, or refuses
            if nc.name not in out:
                out[nc.name] = (f"note: {nc.name}: {only}" if job.method == "auto" else
                                f"note: {nc.name}: {only}; --method {job.method} answers "
                                "UNKNOWN")
            continue
        why = beyond_symbolic(family_of(nc), symbolic_bounds(nc))
        if why is not None and nc.name not in out:
            out[nc.name] = (f"note: {nc.name}: {why}; BMC can only look for a witness on "
                            "the engine's cheaper rules and confirm it on the exact "
                            "reference: the answer is VIOLATED or UNKNOWN, never HOLDS")
        counted = abstracted(family_of(nc), symbolic_bounds(nc))
        if counted is not None and nc.name not in out:
            out[nc.name] = f"note: {nc.name}: {counted}"
    return list(out.values())


def _bounds_notes(verdicts: list[Verdict], planned: list[tuple[Job, Entry | None]]
                  ) -> list[str]:
    """The lines under the table: the bounds each verdict holds within (one line when
    every check shares them, else one per config), what PROVED covers, and a window
    longer than the depth."""
    groups: dict[tuple[str, str, tuple[tuple[str, int], ...]], NamedConfig] = {}
    props: dict[tuple[str, str, tuple[tuple[str, int], ...]], list[str]] = {}
    for job, _ in planned:
        key = (job.engine, job.config.name, tuple(sorted(bounds_of(job.config).items())))
        groups.setdefault(key, job.config)
        props.setdefault(key, []).append(_prop_label(job.property, job.params))
    several_engines = len({k[0] for k in groups}) > 1
    named = [(k[0], k[1]) for k in groups]
    if len(groups) == 1:
        lines = ["bounds: " + bounds_line(next(iter(groups.values())))]
    else:
        # A config checked under several bounds (entries may set their own): the bounds
        # most of its checks share are its own, the others name the properties they bound.
        main_key: dict[tuple[str, str], tuple[str, str, tuple[tuple[str, int], ...]]] = {}
        for key in groups:
            best = main_key.get(key[:2])
            if best is None or len(props[key]) > len(props[best]):
                main_key[key[:2]] = key
        lines = [f"bounds of {engine + ' ' if several_engines else ''}{name}"
                 + (" for " + ", ".join(dict.fromkeys(props[key]))
                    if named.count((engine, name)) > 1 and main_key[key[:2]] != key else "")
                 + ": " + bounds_line(nc)
                 for key, nc in groups.items() for engine, name, _ in [key]]
    if any(v.verdict == PROVED for v in verdicts):
        lines.append("PROVED covers more: k-induction every depth and request length on "
                     "that many request slots, a theorem every size")
    for v, (job, entry) in zip(verdicts, planned, strict=True):
        window = catalogue.get(job.property, **dict(job.params)).window
        depth = dict(job.config.bounds).get("depth", Bounds().depth)
        if entry is None and v.verdict == HOLDS and window > depth:
            lines.append(f"note: {_prop_label(job.property, job.params)} reads windows of "
                         f"{window} steps, longer than depth {depth}: it cannot fail "
                         "within these bounds; raise --depth to ask")
    return list(dict.fromkeys(lines))


def _check_out_dir(out: Path) -> None:
    """--out must be a folder we may create or write, and not the manifest's corpus."""
    try:
        inside = out.resolve().is_relative_to(COUNTEREXAMPLES.resolve())
    except OSError:
        inside = False
    if inside:
        raise InputError(f"--out {out}: counterexamples/ holds the manifest's corpus (written "
                         "by --write for manifest entries); give another folder")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: it is a file, not a folder; give a folder")
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: cannot write in {probe}; give a folder you can "
                         "write")


def _check_writable(flag: str, path: str) -> None:
    """Fail before any job runs, not after minutes of checking, when `path` cannot be
    written: an InputError naming the flag, the path and the fix."""
    target = Path(path)
    existed = target.exists()
    try:
        # Opening is the honest test (read-only mounts, root, ACLs); "a" leaves an
        # existing file as it is, and a file created here is removed again.
        with open(target, "a" if existed else "x"):
            pass
        if not existed:
            target.unlink()
    except FileNotFoundError:
        if target.parent.is_dir():  # /proc, say: the folder is there but takes no file
            raise InputError(f"cannot write {flag} {path}: the folder {target.parent} "
                             "accepts no new file; give another path") from None
        raise InputError(f"cannot write {flag} {path}: the folder {target.parent} does not "
                         "exist; create it or give another path") from None
    except IsADirectoryError:
        raise InputError(f"cannot write {flag} {path}: it is a folder; give a file "
                         "path") from None
    except NotADirectoryError:
        raise InputError(f"cannot write {flag} {path}: a part of {target.parent} is a file, "
                         "not a folder; give another path") from None
    except OSError as exc:
        raise InputError(f"cannot write {flag} {path}: {exc.strerror or exc}; give a path "
                         "you can write") from None


def _writing(flag: str, path: str, write: Callable[[], None]) -> None:
    """Run `write()`; an OSError (the path became unwritable during the run) is an
    InputError naming the path, not a traceback."""
    try:
        write()
    except OSError as exc:
        raise InputError(f"cannot write {flag} {path}: {exc.strerror or exc}; the verdicts "
                         "above are complete, give a path you can write") from None


def json_document(verdicts: list[Verdict], agreements: list[Agreement], code: int,
                  both: bool, bounds: Sequence[dict[str, int]] | None = None
                  ) -> dict[str, object]:
    """The `--json` document, schema 1 (docs/schema/check.schema.json); `bounds`, when
    given, are each verdict's (its optional `bounds` object)."""
    pairs = agreement.by_check(agreements)
    rows = []
    for i, v in enumerate(verdicts):
        pair = pairs.get(agreement.row_key(v))
        row = v.to_json(pair.status if pair is not None else None)
        if bounds is not None:
            row["bounds"] = dict(bounds[i])
        rows.append(row)
    counts = {s: sum(v.status == s for v in verdicts)
              for s in (AS_EXPECTED, DEPARTS, INCONCLUSIVE, ANSWERED)}
    agreed = None
    if both:
        agreed = {"pairs": len(agreements),
                  **{s: sum(a.status == s for a in agreements)
                     for s in (agreement.AGREE, agreement.DISAGREE, agreement.INCONCLUSIVE)},
                  "notes": [a.line for a in agreements if a.status != agreement.AGREE]}
    summary = {"checks": len(verdicts), **counts,
               "seconds": round(sum(v.seconds for v in verdicts), 3),
               "agreement": agreed, "exit_code": code}
    return {"schema": JSON_SCHEMA, "verdicts": rows, "summary": summary}


def _checked_by(entry: Entry, method: str) -> bool:
    """Whether the entry is checked by `method` ("auto" runs the bmc pipeline's proofs, or
    the explorer for an entry only the explorer checks)."""
    return method in entry.methods or (method == "auto" and bool(entry.methods))


def _job_method(entry: Entry | None, method: str) -> str:
    """The method a job of `entry` runs when `method` is asked: "auto" runs an entry that
    only the explorer checks (e.g. a config beyond the symbolic rules) by the explorer,
    never through proofs over rules that do not model it."""
    if method == "auto" and entry is not None and "bmc" not in entry.methods:
        return "explore"
    return method


def _search(entry: Entry | None, nc: NamedConfig, explorer: str) -> str:
    """The bounded search of an "auto" job: the config's measured faster one for a
    manifest entry checked by both methods; for a question, the array explorer where it
    searches the question's environment exactly and repays its set-up, else BMC."""
    if entry is not None:
        return "explore" if "explore" in entry.methods and nc.bounded_method == "explore" \
            else "bmc"
    return "explore" if explorer != REFERENCE and array_searches(nc) else "bmc"


def _prop_label(prop: str, params: Sequence[tuple[str, int]]) -> str:
    """A property with its parameters, as the table shows it: `starvation k=3`."""
    return " ".join([prop, *(f"{k}={v}" for k, v in params)])


def _print(verdicts: list[Verdict], agreements: list[Agreement],
           notes: Sequence[str] = ()) -> None:
    several = len({v.engine for v in verdicts}) > 1
    header = (("engine",) if several else ()) + (
        "property", "config", "verdict", "expected", "method", "depth", "seconds",
        "counterexample")
    rows = [((v.engine,) if several else ()) + (
        _prop_label(v.property, v.params), v.config, v.label, v.expected or "-", v.method,
        str(v.depth), f"{v.seconds:.1f}", v.counterexample or "-") for v in verdicts]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for line in notes:
        print(line)
    expected = [v for v in verdicts if v.expected is not None]
    bad = [v for v in expected if not v.as_expected]
    total = sum(v.seconds for v in verdicts)
    unknown = sum(v.verdict == UNKNOWN for v in verdicts)
    asked = [v for v in verdicts if v.expected is None and v.verdict != UNKNOWN]
    counts = ", ".join(f"{sum(v.verdict == x for v in asked)} {x}"
                       for x in (PROVED, HOLDS, VIOLATED) if any(v.verdict == x for v in asked))
    parts = [f"{len(expected) - len(bad)} as expected"] if expected else []
    if asked:  # no manifest expectation: the verdict is the answer
        parts.append(f"{len(asked)} answered ({counts or 'none decided'})")
    parts.append(f"{unknown} unknown")
    print(f"\n{len(verdicts)} checks, {', '.join(parts)}; {total:.1f} s of checking")
    for v in verdicts:
        if v.expected is None and v.verdict == UNKNOWN:
            print(f"unknown: {v.property} on {v.config} ({v.method}): {v.detail}")
    for v in bad:
        print(f"departs: {v.property} on {v.config} ({v.method}): {v.label}, expected "
              f"{v.expected}" + (f" ({v.detail})" if v.detail else ""))
    for a in agreements:
        if a.status == agreement.DISAGREE:
            print(f"methods disagree: {a.line}")
        elif a.status == agreement.INCONCLUSIVE:
            print(f"methods inconclusive: {a.line}")
    if agreements:
        agree = sum(a.status == agreement.AGREE for a in agreements)
        undecided = sum(a.status == agreement.INCONCLUSIVE for a in agreements)
        print(f"bmc and explore: {agree} of {len(agreements)} checks agree"
              + (f", {undecided} inconclusive" if undecided else ""))


def exit_code(verdicts: Sequence[Verdict], agreements: Sequence[Agreement] = ()) -> int:
    """1 if a verdict departs or the methods disagree; else 3 if anything is
    inconclusive; else 0."""
    if any(v.status == DEPARTS for v in verdicts) \
            or any(a.status == agreement.DISAGREE for a in agreements):
        return 1
    # A question without a manifest expectation: the verdict is the answer.
    if any(v.expected is None and v.verdict == VIOLATED for v in verdicts):
        return 1
    if any(v.status == INCONCLUSIVE for v in verdicts) \
            or any(a.status == agreement.INCONCLUSIVE for a in agreements):
        return 3
    return 0
