"""`batchproof diff A B`: the shortest workload on which two versions of an engine decide
differently (checker/methods/diff.py), drawn as two timelines side by side.

    batchproof diff mistralrs@v0.8.22 mistralrs@v0.8.23 --manifest-config mr_tiny
    batchproof diff mistralrs@v0.9.0 --ablate bucket_by_length --manifest-config mr_tiny
    batchproof diff mistralrs --ablate-all --manifest-config mr_escape

    batchproof diff vllm-v0 vllm-v1 --manifest-config v0_tiny

A and B are engine names with a version (`NAME@VERSION`; the bare name is the pinned
version), or one engine and `--ablate SWITCH` (the same version with that rule switch
toggled). `--ablate-all` toggles each switch in turn. The configuration is a manifest
config (`--manifest-config`, whose bounds are the defaults), a workload JSON's config
(`--config-file`), or the engine's defaults (vLLM: with vLLM's flags and `--config FILE`'s
YAML, as `check` takes them); each side parses it with its own version's rules.

A and B may also be two engines that a config bridge joins (checker/methods/diff.py
`bridge_of`; vLLM V0 and V1, model/vllm_v0/v1_bridge.py). The config is then either
engine's (a manifest config of either, a workload JSON of either, vLLM V1's flags, or A's
defaults); the other side gets its fields through the bridge, which refuses a field the
other side would silently drop while it is set (exit 2). Across engines only the decisions
are compared, and the step observables the bridge names (for V0/V1 none: free_blocks
counts the pool differently); the one-step equivalence proof is not tried (the two states
have different shapes), so agreement is "no difference within these bounds".

`--method` chooses the search (checker/methods/diff_explore.py `decide`): BMC over both
rule systems (`bmc`), the explicit-state search over both reference schedulers
(`explore`), the array explorer over the product of both rule systems (`array`,
checker/methods/array/product.py: vLLM V1 without prefix caching, async scheduling or
speculative decoding), BMC and the reference search (`both`, which must agree), or `auto`
(default): the array product where it applies and the environment is large enough to
repay its set-up proofs, else the reference search where its first step is small, else
BMC; then the one-step proof after a "no difference". The JSON's `method` says which
answered (`method_asked` what was asked).

Exit codes: 0 no difference within the bounds (or proved equivalent); 1 a difference found
(with --ablate-all: for some switch); 2 bad input; 3 inconclusive (solver unknown, time
limit, the references do not confirm a difference, or with --method both the two methods
disagree: a divergence, never a finding).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, fields
from itertools import zip_longest
from typing import Any

from checker.cli.check import MAX_DEPTH, MAX_JOBS, MAX_SLOTS, MAX_TIMEOUT_S, prepare
from checker.config.flags import (
    add_config_flags,
    bounded_int,
    bounded_seconds,
)
from checker.config.serve_args import (
    add_config_option,
    add_machine_flags,
    ignored_line,
    print_notes,
    serve_config,
    vllm_input_given,
)
from checker.methods.diff import (
    DIFFER,
    DIVERGENCE,
    OBSERVABLES,
    PROVED,
    SAME,
    STEP_OBSERVABLES,
    UNKNOWN,
    DiffResult,
    Side,
    bridge_of,
    compared_step_observables,
    engines_joinable,
    one_rule_system,
    sides_compatible,
)
from checker.methods.diff_explore import METHODS, array_unsupported, arrival_choices, decide
from checker.methods.symbolic import Bounds
from checker.runner.pool import parallel_map
from checker.show import svg, timeline
from checker.show import text as render
from model import registry as engines
from model.core.errors import InputError
from model.vllm.config import ENGINE_VLLM_V1
from model.workload import config_rejection, read_json, workload_to_json
from properties.manifest import load

JSON_SCHEMA = 1
DEFAULT_BOUNDS = {"slots": 3, "depth": 6, "max_prompt_len": 8, "max_max_tokens": 6}
MAX_LENGTH = 10_000  # prompt_len / max_tokens bounds; the formula grows with the numbers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof diff`."""
    parser.add_argument("engines", nargs="+", metavar="ENGINE",
                        help="A and B: engine versions, e.g. mistralrs@v0.8.22 "
                        "mistralrs@v0.8.23 (the bare name is the pinned version); one engine "
                        "with --ablate or --ablate-all")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--ablate", metavar="SWITCH",
                     help="compare the engine with the same version with this rule switch "
                     "toggled (see --list)")
    how.add_argument("--ablate-all", action="store_true",
                     help="toggle every rule switch in turn: which ones change a decision")
    parser.add_argument("--list", action="store_true",
                        help="list the engine's versions and rule switches, then exit")
    src = parser.add_mutually_exclusive_group()
    add_config_option(src, manifest=True)  # a manifest config's bounds are the defaults
    src.add_argument("--config-file", metavar="F",
                     help="a workload JSON whose 'config' both sides run")
    parser.add_argument("--no-validate", action="store_true",
                        help="compare on a configuration the engine would reject")
    parser.add_argument("--slots", type=bounded_int(1, MAX_SLOTS),
                        help=f"request slots, at most {MAX_SLOTS} (default 3, or the config's)")
    parser.add_argument("--depth", type=bounded_int(1, MAX_DEPTH),
                        help=f"steps, at most {MAX_DEPTH} (default 6, or the config's)")
    parser.add_argument("--max-prompt-len", type=bounded_int(1, MAX_LENGTH),
                        help="longest prompt of the workloads searched (default 8)")
    parser.add_argument("--max-tokens", type=bounded_int(1, MAX_LENGTH),
                        help="largest max_tokens of the workloads searched (default 6)")
    parser.add_argument("--timeout", type=bounded_seconds(MAX_TIMEOUT_S), default=300.0,
                        metavar="S", help="seconds per comparison before UNKNOWN (default 300)")
    parser.add_argument("--jobs", type=bounded_int(1, MAX_JOBS), default=2,
                        help="worker processes for --ablate-all (default 2)")
    parser.add_argument("--no-prove", action="store_true",
                        help="skip the one-step equivalence proof, search the bounds only")
    parser.add_argument("--method", choices=METHODS, default="auto",
                        help="auto (default): the array explorer over the product of both "
                        "rule systems where it applies (vLLM V1 without prefix caching, "
                        "async scheduling or speculative decoding; 3+ slots), else the "
                        "explicit-state search over both references where its first step is "
                        "small, else BMC; then the one-step proof after a 'no difference'. "
                        "bmc: BMC over both rule systems; explore: the search over both "
                        "references alone; array: the array product search alone; both: BMC "
                        "and the reference search, which must agree on the answer and the "
                        "least workload")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--format", choices=("text", "svg"), default="text",
                        help="text (default), or svg: the two timelines side by side")
    add_machine_flags(parser.add_argument_group(
        "the machine", "what vLLM's default batch sizes depend on (as `check`)"))
    add_config_flags(parser)


# ---- what to compare --------------------------------------------------------------------

def _versions(name: str) -> engines.Versioned:
    modelled = engines.versioned(engines.get(name))
    if modelled is None:
        raise InputError(f"{engines.base_name(name)} models one version and no rule "
                         "switches; diff needs an engine with versions (mistralrs)")
    return modelled


@dataclass(frozen=True, slots=True)
class Source:
    """The config both sides run: its fields (JSON names) as `engine` spells them (a base
    engine name: the engine whose config it is), its name, its bounds, validated."""

    raw: dict[str, Any]
    engine: str
    name: str
    bounds: dict[str, int]
    validated: bool


def _raw_config(args: argparse.Namespace, names: list[str]) -> Source:
    """The config both sides parse: a manifest config, a workload JSON's or the defaults
    of one of the engines compared (the first one's, or vLLM V1's with its flags)."""
    bases = list(dict.fromkeys(engines.base_name(n) for n in names))
    allowed = " or ".join(f"{b}'s" for b in bases)
    if args.manifest_config:
        manifest = load()
        if args.manifest_config not in manifest.configs:
            raise InputError(f"unknown config {args.manifest_config!r}; manifest configs: "
                             f"{', '.join(manifest.configs)}")
        nc = manifest.configs[args.manifest_config]
        if engines.base_name(nc.engine) not in bases:
            raise InputError(f"config {args.manifest_config} is a {nc.engine} config, not "
                             f"{allowed}; pick one of its engine's configs")
        raw = engines.get(nc.engine).config_to_dict(nc.config)
        return Source(dict(raw), engines.base_name(nc.engine), nc.name, dict(nc.bounds),
                      nc.validated)
    if args.config_file:
        doc = read_json(args.config_file, "pass a workload JSON file with a 'config'",
                        "config file")
        if not isinstance(doc, dict) or "config" not in doc:
            raise InputError(f"{args.config_file} has no 'config'; give a workload JSON whose "
                             "'config' holds the engine's fields (docs/simulation_contract.md)")
        engine = doc.get("engine", ENGINE_VLLM_V1)
        if not isinstance(engine, str) or engines.base_name(engine) not in bases:
            raise InputError(f"{args.config_file} is a {engine} workload, not {allowed}; "
                             f"give a {' or '.join(bases)} workload")
        if not isinstance(doc["config"], dict):
            raise InputError(f"{args.config_file}: 'config' must be a JSON object")
        return Source(dict(doc["config"]), engines.base_name(engine), "custom", {},
                      not args.no_validate)
    if bases[0] == ENGINE_VLLM_V1 or (_flags_given(args) and ENGINE_VLLM_V1 in bases):
        # vllm serve flags (command line over --config FILE), resolved as `check` resolves
        # them (checker/config/serve_args.py); what it assumed is printed.
        cfg, notes = serve_config(args, "diff")
        args.serve_notes = [*getattr(args, "serve_notes", []), *notes]
        return Source(cfg.to_dict(), ENGINE_VLLM_V1, "custom", {}, not args.no_validate)
    return Source({}, bases[0], "defaults", {}, not args.no_validate)


def _raw_for(name: str, source: Source, names: list[str]) -> dict[str, Any]:
    """The config dict side `name` parses: the source's own for its engine; for the other
    engine of a bridge, the bridge's translation of the source's whole config (every
    field at its value), checked back: the target's config, translated into the source's
    engine, must hold no field the source would drop (its defaults are neutral)."""
    if engines.base_name(name) == source.engine:
        return source.raw
    bridge = bridge_of(name, source.engine)
    if bridge is None:  # run() refuses an unjoined pair first
        raise InputError(engines_joinable(name, source.engine))
    own = next(n for n in names if engines.base_name(n) == source.engine)
    source_engine = engines.get(own)
    whole = source_engine.config_to_dict(source_engine.parse_config(source.raw))
    raw = bridge.into[engines.base_name(name)](whole)
    target = engines.get(name)
    bridge.into[source.engine](target.config_to_dict(target.parse_config(raw)))
    return raw


def _flags_given(args: argparse.Namespace) -> bool:
    return vllm_input_given(args)


def _side(name: str, raw: dict[str, Any], validated: bool, manifest: bool = False) -> Side:
    engine = engines.get(name)
    cfg = engine.parse_config(raw)
    # A manifest configuration is governed by the manifest's own `validated` flag and the
    # engine's configuration rules, not by the start-up checks (as `check` treats it).
    rejected = engine.rejection(cfg) if manifest else config_rejection(engine.name, cfg)
    if rejected is not None and validated:
        raise InputError(f"{rejected} [rule {rejected.rule}; pass --no-validate to compare "
                         "it anyway]")
    return Side(engine=engine.name, config=cfg, label=name)


def _toggled(a: Side, switch: str) -> Side:
    modelled = _versions(a.engine)
    current = modelled.switches(a.config)
    if switch not in current:
        raise InputError(f"unknown rule switch {switch!r} of {engines.base_name(a.engine)}; "
                         f"switches: {', '.join(current)}")
    value = not current[switch]
    config = modelled.with_switches(a.config, {switch: value})
    return Side(engine=a.engine, config=config,
                label=f"{a.label} {switch}={'on' if value else 'off'}")


def _bounds(args: argparse.Namespace, defaults: dict[str, int]) -> Bounds:
    given = {"slots": args.slots, "depth": args.depth, "max_prompt_len": args.max_prompt_len,
             "max_max_tokens": args.max_tokens}
    # Every bound the config names is kept (its prefix groups, priorities, cached
    # prefixes): only the four flags override.
    known = {f.name for f in fields(Bounds)}
    values = {**DEFAULT_BOUNDS, **{k: v for k, v in defaults.items() if k in known},
              **{k: v for k, v in given.items() if v is not None}}
    return Bounds(**values)


def _bounds_line(b: Bounds) -> str:
    return (f"{b.slots} request slots, depth {b.depth}, prompt_len <= {b.max_prompt_len}, "
            f"max_tokens <= {b.max_max_tokens}"
            + (f", {b.prefix_groups} prefix group(s)" if b.prefix_groups else ""))


# ---- rendering ----------------------------------------------------------------------------

_VERDICT = {
    DIFFER: "DIFFER", SAME: "NO DIFFERENCE", PROVED: "PROVED EQUIVALENT", UNKNOWN: "UNKNOWN",
    DIVERGENCE: "DIVERGENCE",
}


def _headline(r: DiffResult) -> str:
    if r.status == DIFFER:
        minimal = "minimal" if r.minimal else "not minimised (time limit)"
        return (f"DIFFER at step {r.depth}: the shortest workload on which they decide "
                f"differently ({minimal}; replayed on both references)")
    if r.status == SAME:
        return f"no difference within these bounds (every workload agrees for {r.depth} steps)"
    if r.status == PROVED:
        return f"PROVED equivalent: {r.reason}"
    if r.status == DIVERGENCE:
        return f"DIVERGENCE at step {r.depth}, not a finding: {r.reason}"
    return f"UNKNOWN after depth {r.depth}: {r.reason}"


def _method_line(r: DiffResult) -> str:
    states = f", {r.states} pair states" if r.states else ""
    return f"method: {r.method}{states}, {r.seconds:.1f} s"


def _side_by_side(left: str, right: str, titles: tuple[str, str]) -> str:
    a, b = left.rstrip("\n").split("\n"), right.rstrip("\n").split("\n")
    a, b = [titles[0], *a], [titles[1], *b]
    width = max(len(x) for x in a) + 4
    return "\n".join((x.ljust(width) + y).rstrip()
                     for x, y in zip_longest(a, b, fillvalue="")) + "\n"


def compared_line(a: Side, b: Side) -> str:
    """Across engines: one line naming what is compared and why the rest is not ('' for
    two versions of one engine, which compare every observable)."""
    if one_rule_system(a.engine, b.engine):
        return ""
    bridge = bridge_of(a.engine, b.engine)
    why = bridge.not_compared if bridge is not None else ""
    compared = ", ".join([*OBSERVABLES, *compared_step_observables(a, b)])
    return f"compared: {compared} ({why})" if why else f"compared: {compared}"


def text_report(a: Side, b: Side, config: str, bounds: Bounds, r: DiffResult) -> str:
    """What `diff` prints: the headline, the workload, what differs, the two timelines."""
    lines = [f"diff A = {a.label}, B = {b.label} on {config}", f"bounds: {_bounds_line(bounds)}",
             *[line for line in [compared_line(a, b)] if line], _headline(r), _method_line(r)]
    if r.workload is None or not r.runs:
        return "\n".join(lines) + "\n"
    (wa, ra), (wb, rb) = r.runs
    lines += ["requests:", render.requests_table(r.workload).rstrip("\n")]
    if r.differences:
        lines.append(f"what differs at step {r.depth}:")
        lines += [f"  {d.line()}" for d in r.differences]
    budget = engines.get(a.engine).rule_config(a.config).token_budget
    left = _table(render.timeline(wa, ra, highlight=r.depth, budget=budget))
    right = _table(render.timeline(wb, rb, highlight=r.depth, budget=budget))
    lines += ["", _side_by_side(left, right, (f"A: {a.label}", f"B: {b.label}")).rstrip("\n"),
              "", "marks: +admitted ^resumed !preempted $EOS #length .waiting  v the first "
              "difference"]
    return "\n".join(lines) + "\n"


def _table(timeline_text: str) -> str:
    """A text timeline without its legend and budget note (printed once for both sides:
    a version may have no token budget at all)."""
    rows = timeline_text.rstrip("\n").split("\n")
    kept = [row for row in rows[:-2]]  # the blank line and the marks line
    return "\n".join(re.sub(r"\s+\(budget \d+\)$", "", row) for row in kept) + "\n"


_SIZE = re.compile(r'<svg [^>]*width="([0-9.]+)" height="([0-9.]+)"')


def _size(document: str) -> tuple[float, float]:
    match = _SIZE.search(document)
    assert match is not None, "svg.render writes width and height on its <svg> element"
    return float(match.group(1)), float(match.group(2))


def svg_report(a: Side, b: Side, r: DiffResult) -> str:
    """The two timelines as one SVG, side by side; each step that differs is framed."""
    if not r.runs:
        raise InputError(f"nothing to draw: {_headline(r)}; --format svg draws a difference")
    budget = engines.get(a.engine).rule_config(a.config).token_budget
    # A version without a token budget may schedule more in a step; both columns share
    # one scale that holds the largest step.
    budget = max([budget] + [sum(n for _, n in rec.scheduled)
                             for _, records in r.runs for rec in records])
    parts = []
    for (w, records), side, tag in zip(r.runs, (a, b), ("a-", "b-"), strict=True):
        tl = timeline.from_run(w, records, budget, f"{'A' if tag == 'a-' else 'B'}: "
                               f"{side.label}", subtitle=f"first difference at step {r.depth}",
                               violated_at=r.depth)
        # svg.render frames the step as "violated"; here it is where the two differ
        parts.append(svg.render(tl, ids=tag).replace(">violated</text>", ">differs</text>"))
    sizes = [_size(p) for p in parts]
    gap = 24.0
    width = sizes[0][0] + gap + sizes[1][0]
    height = max(h for _, h in sizes)
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{svg.num(width)}" '
            f'height="{svg.num(height)}" viewBox="0 0 {svg.num(width)} {svg.num(height)}">',
            f"<title>diff {a.label} vs {b.label}</title>",
            '<rect width="100%" height="100%" fill="#ffffff"/>']
    x = 0.0
    for part, (w, _) in zip(parts, sizes, strict=True):
        body.append(part.replace("<svg ", f'<svg x="{svg.num(x)}" y="0" ', 1).rstrip("\n"))
        x += w + gap
    body.append("</svg>")
    return "\n".join(body) + "\n"


def result_json(a: Side, b: Side, r: DiffResult) -> dict[str, Any]:
    """One comparison as JSON."""
    out: dict[str, Any] = {
        "status": r.status, "depth": r.depth, "seconds": round(r.seconds, 3),
        "minimal": r.minimal, "reason": r.reason, "method": r.method,
        "workload": workload_to_json(r.workload) if r.workload is not None else None,
        "differences": [{"step": d.step, "request": d.request or None,
                         "observable": d.observable, "a": d.a, "b": d.b}
                        for d in r.differences],
    }
    if r.runs:
        out["steps"] = {"a": [rec.to_json() for rec in r.runs[0][1]],
                        "b": [rec.to_json() for rec in r.runs[1][1]]}
    return out


def _side_json(s: Side) -> dict[str, Any]:
    return {"label": s.label, "engine": s.engine,
            "config": engines.get(s.engine).config_to_dict(s.config)}


def exit_code(results: list[DiffResult]) -> int:
    """1 if a difference was found; else 3 if anything is inconclusive; else 0."""
    if any(r.status == DIFFER for r in results):
        return 1
    if any(r.status in (UNKNOWN, DIVERGENCE) for r in results):
        return 3
    return 0


# ---- the command ----------------------------------------------------------------------------

def _list(name: str) -> int:
    modelled = _versions(name)
    base = engines.base_name(name)
    print(f"{base} versions (NAME@VERSION; the bare name is {modelled.pinned}):")
    for version, switches in modelled.versions.items():
        on = [k for k, v in asdict(switches).items() if v]
        print(f"  {base}@{version}: {', '.join(on) or 'no switch on'}")
    print("rule switches:")
    for switch in modelled.switches(engines.get(name).parse_config({})):
        print(f"  {switch}: {modelled.evidence(switch)}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Compare two versions (or one version and an ablation); print; return the exit code."""
    names = list(args.engines)
    if args.list:
        return _list(names[0])
    one = bool(args.ablate or args.ablate_all)
    if one and len(names) != 1:
        raise InputError("--ablate and --ablate-all compare one engine version with itself; "
                         f"give one engine, not {len(names)}")
    if not one and len(names) != 2:
        raise InputError(f"diff compares two engines A B (or one with --ablate SWITCH), got "
                         f"{len(names)}")
    if args.json and args.format == "svg":
        raise InputError("--json and --format svg both choose the output; give one")
    if not one:
        why = engines_joinable(names[0], names[1])
        if why:
            raise InputError(why)
    args = prepare(args, "diff")
    if _flags_given(args) and ENGINE_VLLM_V1 not in {engines.base_name(n) for n in names}:
        raise InputError(f"the vLLM flags configure vllm-v1, not {names[0]}; give the config "
                         "with --manifest-config NAME or --config-file WORKLOAD.json")
    source = _raw_config(args, names)
    config = source.name
    # The ignored vllm serve flags and the assumptions, on stderr (stdout is the answer).
    print_notes([ignored_line(args), *args.serve_notes], sys.stderr)
    bounds = _bounds(args, source.bounds)
    manifest = bool(args.manifest_config)
    a = _side(names[0], _raw_for(names[0], source, names), source.validated, manifest)
    if args.ablate_all:
        if args.format == "svg":
            raise InputError("--format svg draws one difference; use --ablate SWITCH")
        return _ablate_all(args, a, config, bounds)
    b = (_toggled(a, args.ablate) if args.ablate
         else _side(names[1], _raw_for(names[1], source, names), source.validated, manifest))
    why = sides_compatible(a, b)
    if why:
        raise InputError(why)
    _check_method(args, a, bounds, b)
    result = decide(a, b, bounds, args.timeout, prove=not args.no_prove, method=args.method)
    code = exit_code([result])
    if args.json:
        doc = {"schema": JSON_SCHEMA, "a": _side_json(a), "b": _side_json(b), "config": config,
               "config_engine": source.engine, "bounds": _bounds_json(bounds),
               "observables": _observables(a, b), **_not_compared(a, b),
               **result_json(a, b, result), "method_asked": args.method, "exit_code": code}
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.format == "svg":
        sys.stdout.write(svg_report(a, b, result))
    else:
        sys.stdout.write(text_report(a, b, config, bounds, result))
    return code


def _bounds_json(b: Bounds) -> dict[str, int]:
    return {"slots": b.slots, "depth": b.depth, "max_prompt_len": b.max_prompt_len,
            "max_tokens": b.max_max_tokens, "prefix_groups": b.prefix_groups}


def _observables(a: Side | None = None, b: Side | None = None) -> list[str]:
    """The observables compared: every one within an engine, across engines the
    decisions and the step observables the bridge names."""
    if a is None or b is None:
        return [*OBSERVABLES, *STEP_OBSERVABLES]
    return [*OBSERVABLES, *compared_step_observables(a, b)]


def _not_compared(a: Side, b: Side) -> dict[str, str]:
    """Across engines, {"not_compared": why}: what the bridge says is counted apart."""
    bridge = None if one_rule_system(a.engine, b.engine) else bridge_of(a.engine, b.engine)
    return {"not_compared": bridge.not_compared} if bridge is not None else {}


def _one_ablation(a: Side, switch: str, bounds: Bounds, timeout_s: float, prove: bool,
                  method: str = "auto") -> tuple[Side, DiffResult]:
    b = _toggled(a, switch)
    return b, decide(a, b, bounds, timeout_s, prove=prove, method=method)


MAX_EXPLORE_ARRIVALS = 2_000_000


def _check_method(args: argparse.Namespace, a: Side, bounds: Bounds,
                  b: Side | None = None) -> None:
    """--method array on sides the array product search does not cover, or explore/both
    on bounds whose first step alone is too many arrival choices to enumerate: one
    InputError."""
    if args.method == "array":
        why = array_unsupported(a, b if b is not None else a, bounds)
        if why is not None:
            raise InputError(f"--method array: the array product search does not apply "
                             f"({why}); use --method explore or bmc")
        return
    if args.method not in ("explore", "both"):
        return
    n = arrival_choices(a, bounds, b)
    if n > MAX_EXPLORE_ARRIVALS:
        raise InputError(f"--method {args.method}: the explicit search would try {n} arrival "
                         f"choices in its first step alone (prompts <= {bounds.max_prompt_len}, "
                         f"max_tokens <= {bounds.max_max_tokens}, {bounds.slots} slots), more "
                         f"than {MAX_EXPLORE_ARRIVALS}; lower the bounds or use --method bmc")


def _ablate_all(args: argparse.Namespace, a: Side, config: str, bounds: Bounds) -> int:
    modelled = _versions(a.engine)
    switches = list(modelled.switches(a.config))
    _check_method(args, a, bounds)
    work = [(a, s, bounds, args.timeout, not args.no_prove, args.method) for s in switches]
    done = parallel_map(_one_ablation, work, args.jobs)
    results = [r for _, r in done]
    code = exit_code(results)
    current = modelled.switches(a.config)
    if args.json:
        rows = [{"switch": s, "value": current[s], **result_json(a, b, r),
                 "evidence": modelled.evidence(s)}
                for s, (b, r) in zip(switches, done, strict=True)]
        doc = {"schema": JSON_SCHEMA, "a": _side_json(a), "config": config,
               "bounds": _bounds_json(bounds), "observables": _observables(),
               "switches": rows, "method": args.method, "exit_code": code,
               "seconds": round(sum(r.seconds for r in results), 3)}
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return code
    sys.stdout.write(ablation_report(a, config, bounds, switches, current, done))
    return code


def _verdict_cell(r: DiffResult) -> str:
    if r.status == DIFFER:
        return f"DIFFER at step {r.depth}"
    if r.status == SAME:
        return f"no difference ({r.depth} steps)"
    return {PROVED: "PROVED equivalent", UNKNOWN: "UNKNOWN", DIVERGENCE: "DIVERGENCE"}[r.status]


def ablation_report(a: Side, config: str, bounds: Bounds, switches: list[str],
                    current: dict[str, bool], done: list[tuple[Side, DiffResult]]) -> str:
    """The --ablate-all table, then each switch's minimal workload and first difference."""
    lines = [f"ablate-all: {a.label} on {config}", f"bounds: {_bounds_line(bounds)}", ""]
    rows = [("switch", "value", "toggled", "method", "seconds")]
    for s, (_, r) in zip(switches, done, strict=True):
        rows.append((s, "on" if current[s] else "off", _verdict_cell(r), r.method,
                     f"{r.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    for s, (_, r) in zip(switches, done, strict=True):
        if r.status != DIFFER or r.workload is None:
            if r.status in (UNKNOWN, DIVERGENCE):
                lines += ["", f"{s}: {_headline(r)}"]
            continue
        lines += ["", f"{s} ({'on' if current[s] else 'off'} -> {'off' if current[s] else 'on'}): "
                  f"{_headline(r)}", render.requests_table(r.workload).rstrip("\n")]
        lines += [f"  {d.line('A', 'B')}" for d in r.differences]
    total = sum(r.seconds for _, r in done)
    lines += ["", f"{len(switches)} switches, {sum(r.status == DIFFER for _, r in done)} change "
              f"a decision within the bounds; {total:.1f} s of checking",
              "A is the version as named, B the same with the switch toggled"]
    return "\n".join(lines) + "\n"


__all__ = ["ablation_report", "add_arguments", "exit_code", "result_json", "run", "svg_report",
           "text_report"]
