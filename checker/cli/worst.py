"""`batchproof worst`: the largest value of a metric within the bounds, a minimal witness
for it, and the proof that no run within the bounds exceeds it (checker/methods/worst.py).

Exit codes: 0 decided (the value, its witness and its bound, by BMC and the explorer);
1 the methods disagree; 2 bad input; 3 undecided (a rung UNKNOWN, or holding only to a
smaller depth: the answer is a range)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from checker.cli.check import (
    DEFAULT_OUT,
    MAX_DEPTH,
    MAX_MAX_TOKENS,
    MAX_PROMPT_LEN,
    MAX_SLOTS,
    MAX_TIMEOUT_S,
    _bound_overrides,
    _check_applies,
    _check_out_dir,
    _check_sizes,
    _custom_rows,
    _default_config,
    _flags_given,
    _write,
    _writing,
    add_environment_flags,
    bounds_line,
    bounds_of,
    golden_text,
    prepare,
    query_slug,
)
from checker.config.flags import add_config_flags, bounded_int, bounded_seconds
from checker.config.serve_args import (
    add_config_option,
    add_machine_flags,
    ignored_line,
    print_notes,
)
from checker.methods import worst
from checker.methods.jobs import JobResult
from checker.methods.verdict import HOLDS, VIOLATED
from model import registry as engines
from model.core.errors import InputError
from model.vllm.config import ENGINE_VLLM_V1
from properties.manifest import NamedConfig, load, with_bounds

JSON_SCHEMA = 1  # the --json object documented in docs/queries.md ("The worst case")
EXIT = {worst.DECIDED: 0, worst.DISAGREE: 1, worst.UNDECIDED: 3}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof worst`."""
    parser.add_argument("--metric", required=True, choices=sorted(worst.METRICS),
                        help="starvation_steps: steps in a row a waiting request gets 0 "
                        "tokens (the starvation ladder); preemptions: times one request is "
                        "preempted (the repeated_preemption ladder)")
    parser.add_argument("--engine", default=ENGINE_VLLM_V1,
                        help=f"engine: {', '.join(engines.names())} (default vllm-v1)")
    src = parser.add_mutually_exclusive_group()
    add_config_option(src, manifest=True)  # default: the engine's first, e.g. tiny_fcfs
    src.add_argument("--config-file", metavar="F",
                     help="a workload JSON whose 'config' is checked")
    parser.add_argument("--no-validate", action="store_true",
                        help="ask about a configuration the engine would reject")
    bounds = parser.add_argument_group("bounds", "the runs the answer covers (default: the "
                                       "config's bounds); as `batchproof check`")
    bounds.add_argument("--depth", type=bounded_int(1, MAX_DEPTH), help="steps of the run")
    bounds.add_argument("--requests", "--slots", dest="slots", metavar="N",
                        type=bounded_int(1, MAX_SLOTS), help="at most N requests")
    bounds.add_argument("--max-prompt-len", type=bounded_int(1, MAX_PROMPT_LEN), metavar="L",
                        help="prompts of 1..L tokens")
    bounds.add_argument("--max-tokens", dest="max_max_tokens", metavar="T",
                        type=bounded_int(1, MAX_MAX_TOKENS), help="max_tokens of 1..T")
    add_environment_flags(bounds)
    parser.add_argument("--strategy", choices=worst.STRATEGIES, default="auto",
                        help="how the ladder is climbed: explore (every rung in one "
                        "exhaustive search of the array explorer), scan (BMC asks 1, "
                        "2, ... until a rung holds) or binary (BMC bisects 1..depth+1), "
                        "then the explorer at both ends; auto (the default): explore "
                        "where the array explorer models the config (vLLM V1 without "
                        "prefix caching, async scheduling or speculative decoding), else "
                        "scan (docs/queries.md)")
    parser.add_argument("--confirm", action="store_true",
                        help="have BMC ask both ends of the explore ladder again (the "
                        "witness as its least counterexample, the bound to the depth); "
                        "the scan and binary ladders are always confirmed by the explorer")
    parser.add_argument("--timeout", type=bounded_seconds(MAX_TIMEOUT_S), default=300.0,
                        metavar="S", help="seconds per check (the explore ladder's one "
                        "search is one check) before UNKNOWN (default 300)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument("--out", metavar="DIR",
                        help=f"where the witness is written (default ./{DEFAULT_OUT}/, "
                        "created), named as `check` names the counterexample of the same "
                        "question: <engine>__<property>__<params>__<hash>.itf.json and .txt")
    add_machine_flags(parser.add_argument_group(
        "the machine", "what vLLM's default batch sizes depend on (as `check`)"))
    add_config_flags(parser)


def select(args: argparse.Namespace) -> NamedConfig:
    """The configuration and bounds asked about, as `check` selects a question's."""
    engines.get(args.engine)  # InputError naming the engines if unknown
    metric = worst.METRICS[args.metric]
    manifest = load()
    wanted = [(metric.property, dict(metric.params(1)))]
    if args.config_file or _flags_given(args):
        nc = _custom_rows(args, wanted, [], manifest.entries)[0][1]
    elif args.manifest_config:
        if args.manifest_config not in manifest.configs:
            raise InputError(f"unknown config {args.manifest_config!r}; manifest configs: "
                             f"{', '.join(manifest.configs)}")
        nc = manifest.configs[args.manifest_config]
        if nc.engine != args.engine:
            raise InputError(f"config {args.manifest_config} is a {nc.engine} config but "
                             f"--engine is {args.engine}; pass --engine {nc.engine}")
    else:
        nc = _default_config(args.engine, manifest.configs)
    overrides = _bound_overrides(args)
    nc = with_bounds(nc, **overrides)
    rows = [(None, nc, metric.property, metric.params(1))]
    _check_applies(rows)
    # Both methods run, so the explorer's size limit applies.
    _check_sizes(argparse.Namespace(method="both"), rows, overrides)
    return nc


def _verdict_of(res: JobResult | None) -> str | None:
    return None if res is None else res.verdict.label


def _witness_bmc(res: worst.WorstResult) -> JobResult | None:
    """The witness as BMC found or confirmed it (None when only the explorer asked)."""
    w = res.witness
    return w if w is not None and w.verdict.method == "bmc" else None


def _by(metric: worst.Metric, value: int, a: JobResult | None, b: JobResult | None) -> str:
    """'starvation k=4 HOLDS(5) by bmc and explore'."""
    said = [r.verdict for r in (a, b) if r is not None]
    if len({v.label for v in said}) == 1:
        return f"{metric.rung(value)} {said[0].label} by " + " and ".join(v.method for v in said)
    return f"{metric.rung(value)} " + ", ".join(f"{v.label} by {v.method}" for v in said)


def write_witness(res: worst.WorstResult, out_dir: Path) -> str | None:
    """Write the witness (ITF JSON and its text timeline) under `out_dir`, named as
    `check` names the counterexample of the witness's rung on the same config and bounds;
    its .itf.json path, or None when there is no witness."""
    w = res.witness
    if w is None or w.counterexample is None or w.replayed is None \
            or w.verdict.verdict != VIOLATED:
        return None
    cex = w.counterexample
    slug = query_slug(res.config.engine, cex.property, cex.params, res.config)
    itf_path, txt_path = out_dir / f"{slug}.itf.json", out_dir / f"{slug}.txt"
    _writing("--out", str(out_dir), lambda: _write(w, itf_path, txt_path))
    return str(itf_path)


def text(res: worst.WorstResult, path: str | None = None) -> str:
    """What `batchproof worst` prints; `path` is the witness file written, if any."""
    m, nc = res.metric, res.config
    where = f"within bounds: {bounds_line(nc)} ({nc.engine} {nc.name})"
    lines = []
    if res.status == worst.DECIDED:
        lines.append(f"worst {m.name} = {res.value} {where}")
    elif res.status == worst.DISAGREE:
        lines.append(f"worst {m.name}: methods disagree {where}")
    else:
        lines.append(f"worst {m.name}: at least {res.at_least}; not decided above "
                     f"{res.at_least} {where}")
        lines.append(f"undecided: {res.reason}")
    rung = f"{m.property} {m.param}=v" + (f"-{m.offset}" if m.offset else "")
    lines.append(f"metric: {m.unit} (value v: {rung} VIOLATED)")
    if res.status == worst.DISAGREE:
        lines.append(res.reason)
    if res.witness is not None and res.witness.verdict.verdict == VIOLATED:
        w = res.witness
        lines.append("witness: " + _by(m, res.at_least, _witness_bmc(res), res.witness_explore)
                     + f" at step {w.verdict.depth} (minimal, replayed on the reference)")
        lines.append(golden_text(w).rstrip("\n"))
        if path is not None:
            lines.append(f"witness file: {path} (text timeline beside it: "
                         f"{path.removesuffix('.itf.json')}.txt)")
    elif res.status == worst.DECIDED:
        lines.append(f"witness: none (no run reaches {m.name} 1)")
    if (res.bound_bmc or res.bound_explore) is not None and res.status != worst.DISAGREE:
        top = (res.value if res.value is not None else res.at_least) + 1
        lines.append("bound: " + _by(m, top, res.bound_bmc, res.bound_explore)
                     + ("" if res.bound_bmc is not None else
                        " (exhaustive within the bounds; --confirm has BMC ask it too)"))
    window = dict(nc.bounds).get("arrival_window")
    if res.closed_at is not None and res.value is not None:
        lines.append(f"beyond the depth: {m.rung(res.value + 1)} holds for runs of every "
                     f"length (the array explorer alone, no depth limit: with arrivals in "
                     f"steps 1..{window} its state graph is closed, step {res.closed_at} "
                     f"reaching no new state"
                     + (f"; BMC confirms to depth {dict(nc.bounds).get('depth')})"
                        if res.bound_bmc is not None else ")"))
    if res.beyond is not None and res.value is not None:
        b = res.beyond.verdict
        lines.append(f"beyond the depth: {m.rung(res.value + 1)} is VIOLATED at step "
                     f"{b.depth} (the array explorer alone, no depth limit, replayed on the "
                     "reference): a longer run goes further; raise --depth to ask it")
    if res.explorer_note:
        lines.append(f"explorer: the reference explorer ({res.explorer_note})")
    if res.depth_reached:
        lines.append(f"note: the ladder reached the depth: within depth "
                     f"{dict(nc.bounds).get('depth')} no {m.property} window longer than "
                     "the depth fits, so the bound is the depth's, not the scheduler's; "
                     "raise --depth to ask more")
    lines.append(f"ladder ({res.strategy}, {res.seconds:.1f}s): {ladder_text(res)}")
    return "\n".join(lines)


def ladder_text(res: worst.WorstResult) -> str:
    """Every check asked, in order; the rungs of one shared search in one item."""
    m, items, done = res.metric, [], set()
    for r in res.rungs:
        if r.search and r.search in done:
            continue
        if r.search:
            done.add(r.search)
            same = [x for x in res.rungs if x.search == r.search]
            said = ", ".join(f"{m.param}={x.value - m.offset} {x.result.verdict.label}"
                             for x in same)
            items.append(f"{m.property} {said} (one {r.method} search, {r.seconds:.2f}s)")
        elif r.method == worst.UNBOUNDED:
            label = "HOLDS" if r.verdict == HOLDS else r.result.verdict.label
            items.append(f"{m.rung(r.value)} {label} (array, no depth limit, "
                         f"{r.seconds:.2f}s)")
        else:
            items.append(f"{m.rung(r.value)} {r.result.verdict.label} ({r.method}, "
                         f"{r.seconds:.2f}s)")
    return ", ".join(items)


def json_document(res: worst.WorstResult, code: int, path: str | None = None
                  ) -> dict[str, object]:
    """The --json object (docs/queries.md, "The worst case"); `path` is the witness file."""
    m = res.metric
    w = res.witness
    top = (res.value if res.value is not None else res.at_least) + 1
    return {
        "schema": JSON_SCHEMA,
        "metric": m.name,
        "engine": res.config.engine,
        "config": res.config.name,
        "bounds": bounds_of(res.config),
        "status": res.status,
        "value": res.value,
        "at_least": res.at_least,
        "reason": res.reason,
        "depth_reached": res.depth_reached,
        "property": m.property,
        "witness": None if w is None or w.counterexample is None else {
            "params": dict(m.params(res.at_least)),
            "violated_at": w.verdict.depth,
            "bmc": _verdict_of(_witness_bmc(res)),
            "explore": _verdict_of(res.witness_explore),
            "timeline": golden_text(w),
            "counterexample": path,
        },
        "bound": None if (res.bound_bmc or res.bound_explore) is None else {
            "params": dict(m.params(top)),
            "bmc": _verdict_of(res.bound_bmc), "explore": _verdict_of(res.bound_explore),
        },
        "strategy": res.strategy,
        "explorer": res.explorer,
        "closed_at": res.closed_at,
        "beyond": None if res.beyond is None else {
            "params": dict(m.params(top)), "violated_at": res.beyond.verdict.depth},
        "rungs": [{"params": dict(m.params(r.value)), "method": r.method,
                   "verdict": r.result.verdict.verdict, "depth": r.result.verdict.depth,
                   "seconds": round(r.seconds, 3), "search": r.search} for r in res.rungs],
        "seconds": round(res.seconds, 3),
        "exit": code,
    }


def run(args: argparse.Namespace) -> int:
    """Climb the ladder, print the answer, return the exit code."""
    args = prepare(args, "worst")
    nc = select(args)
    notes = [ignored_line(args), *args.serve_notes]
    out_dir = Path(args.out) if getattr(args, "out", None) else DEFAULT_OUT
    _check_out_dir(out_dir)
    res = worst.search(worst.METRICS[args.metric], nc, args.timeout, args.strategy,
                       confirm=True if args.confirm else None)
    code = EXIT[res.status]
    path = write_witness(res, out_dir)
    if args.json:
        json.dump(json_document(res, code, path), sys.stdout, indent=1)
        sys.stdout.write("\n")
        print_notes(notes, sys.stderr)
    else:
        print(text(res, path))
        print_notes(notes, sys.stdout)
    return code


__all__ = ["add_arguments", "json_document", "run", "select", "text"]
