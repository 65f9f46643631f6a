"""`batchproof explain FILE`: draw a counterexample (ITF), a workload, or a simulation
document (`batchproof simulate --json`) as a timeline: text, markdown or SVG. An ITF
file's `#meta`, `vars`, `states` and `loop` are checked as `replay` checks them (bad
input: exit 2); the text of a trace whose states differ from the reference's starts with
a DIVERGENCE line."""

from __future__ import annotations

import argparse

from checker.methods.replay import DivergenceError, replay
from checker.methods.verdict import VIOLATED, Verdict
from checker.show import itf, markdown, sources, svg

FORMATS = ("text", "markdown", "svg")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof explain`."""
    parser.add_argument("file", help="an ITF counterexample, a workload JSON, or the output "
                                     "of 'batchproof simulate --json'")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text (default; for a counterexample, its stored .txt), "
                             "markdown, or svg")


def run(args: argparse.Namespace) -> int:
    """Print the timeline in the chosen format."""
    source = sources.load(args.file)
    trace = itf.read_trace(args.file) if source.kind == sources.KIND_COUNTEREXAMPLE else None
    print(explain(source, args.format, trace), end="")
    return 0


def explain(source: sources.Source, fmt: str, trace: itf.Trace | None = None) -> str:
    """The source's timeline as `fmt` (text, markdown or svg); `trace`, the stored ITF
    trace of a counterexample, is checked against the reference in the text format."""
    if fmt == "svg":
        return svg.render(source.timeline)
    if fmt == "markdown":
        return markdown.render(source.timeline)
    return text(source, trace)


def text(source: sources.Source, trace: itf.Trace | None = None) -> str:
    """The text timeline; for a counterexample that replays (and whose stored states, when
    `trace` is given, are the reference's), its golden text (the .txt stored beside the
    ITF file)."""
    from checker.cli.check import golden_text  # check's own format, imported when used
    from checker.methods.jobs import JobResult

    cex = source.counterexample
    if cex is not None:
        try:
            replayed = itf.replay_trace(trace) if trace is not None else replay(cex)
        except DivergenceError as exc:
            return f"DIVERGENCE: {exc}\n" + sources.text_timeline(source)
        verdict = Verdict(cex.engine, cex.property, cex.config_name, cex.method, VIOLATED,
                          cex.violated_at, 0.0)
        return golden_text(JobResult(verdict, cex, replayed))
    return sources.text_timeline(source)
