"""`batchproof explain FILE`: draw a counterexample (ITF), a workload, or a simulation
document (`batchproof simulate --json`) as a timeline: text, markdown or SVG.

An ITF file's `#meta`, `vars`, `states` and `loop` are checked as `replay` checks them
(bad input: exit 2), and the trace is replayed on the reference in every format: a trace
whose states differ from the reference's exits 1, as `replay` does, with a DIVERGENCE
line (first in the text format; on stderr for markdown and SVG, whose output stays a
document). A workload is checked as `simulate` checks it (model/workload.check_workload:
exit 2 for a configuration the engine rejects); `--no-validate` draws it anyway, marked
"configuration not validated" in every format. Exit codes: 0 drawn, 1 a divergence,
2 bad input."""

from __future__ import annotations

import argparse
import sys

from checker.methods.replay import DivergenceError, ReplayResult, replay
from checker.methods.verdict import VIOLATED, Verdict
from checker.show import itf, markdown, sources, svg

FORMATS = ("text", "markdown", "svg")
EXIT_DIVERGENCE = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof explain`."""
    parser.add_argument("file", help="an ITF counterexample, a workload JSON, or the output "
                                     "of 'batchproof simulate --json'")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text (default; for a counterexample, its stored .txt), "
                             "markdown, or svg")
    parser.add_argument("--no-validate", action="store_true",
                        help="draw a workload whose configuration the engine would reject "
                        "(as simulate --no-validate); the drawing says it is not validated")


def run(args: argparse.Namespace) -> int:
    """Print the timeline in the chosen format; exit 1 when a counterexample diverges."""
    source = sources.load(args.file, validate=not args.no_validate)
    divergence = None
    replayed = None
    if source.counterexample is not None:
        try:
            replayed = _replay(source)
        except DivergenceError as exc:
            divergence = f"DIVERGENCE: {exc}"
    if args.format == "text":
        if divergence is not None:
            print(divergence + "\n" + sources.text_timeline(source), end="")
        else:
            print(text(source, replayed=replayed), end="")
    else:
        if divergence is not None:
            sys.stderr.write(divergence + "\n")
        print(explain(source, args.format), end="")
    return EXIT_DIVERGENCE if divergence is not None else 0


def _replay(source: sources.Source) -> ReplayResult:
    cex = source.counterexample
    assert cex is not None
    return itf.replay_trace(source.trace) if source.trace is not None else replay(cex)


def explain(source: sources.Source, fmt: str, trace: itf.Trace | None = None) -> str:
    """The source's timeline as `fmt` (text, markdown or svg); `trace`, the stored ITF
    trace of a counterexample, is checked against the reference in the text format."""
    if fmt == "svg":
        return svg.render(source.timeline)
    if fmt == "markdown":
        return markdown.render(source.timeline)
    return text(source, trace)


def text(source: sources.Source, trace: itf.Trace | None = None,
         replayed: ReplayResult | None = None) -> str:
    """The text timeline; for a counterexample that replays (and whose stored states, when
    `trace` is given, are the reference's), its golden text (the .txt stored beside the
    ITF file). `replayed`, when given, is that replay, already done."""
    from checker.cli.check import golden_text  # check's own format, imported when used
    from checker.methods.jobs import JobResult

    cex = source.counterexample
    if cex is not None:
        if replayed is None:
            try:
                replayed = itf.replay_trace(trace) if trace is not None else replay(cex)
            except DivergenceError as exc:
                return f"DIVERGENCE: {exc}\n" + sources.text_timeline(source)
        verdict = Verdict(cex.engine, cex.property, cex.config_name, cex.method, VIOLATED,
                          cex.violated_at, 0.0)
        return golden_text(JobResult(verdict, cex, replayed))
    return sources.text_timeline(source)
