"""The `batchproof` command line. Exit codes: 0 as expected, 1 a verdict departs from the
manifest (or a stored trace diverges from the reference), 2 bad input or usage (one line,
never a traceback), 3 inconclusive, 4 an internal error: a bug in batchproof (one line;
`batchproof --debug ...` shows the traceback)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterator, Sequence

from checker.runner.stops import INTERRUPTED, quiet_broken_pipe
from model.core.errors import InputError
from model.core.modules import optional_module

EXIT_OK = 0
EXIT_DEPARTS = 1
EXIT_BAD_INPUT = 2
EXIT_INCONCLUSIVE = 3
EXIT_INTERNAL = 4

# subcommand -> module with `add_arguments(parser)` and `run(args) -> int`
_COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("checker.cli.simulate", "run a workload through the reference scheduler"),
    "compare": ("checker.cli.compare", "run one workload through several engines and compare"),
    "seeds": ("checker.cli.seeds", "reproduce the seed write-ups' tables and timelines"),
    "check": ("checker.cli.check",
              "check properties against the manifest (theorems, k-induction, BMC, explorer)"),
    "replay": ("checker.cli.replay", "replay a counterexample on the reference scheduler"),
    "explain": ("checker.cli.explain", "render a counterexample or simulation as a timeline"),
    "config": ("checker.cli.config", "check a vLLM serving configuration: rules and hazards"),
    "check-trace": ("checker.cli.check_trace", "check catalogue properties on a given trace"),
    "audit": ("checker.cli.audit", "audit the real scheduler installed here against the model"),
    "sweep": ("checker.cli.sweep", "check a grid of configurations, locally or on Ray"),
    "diff": ("checker.cli.diff",
             "the shortest workload on which two engine versions (or bridged engines) differ"),
    "worst": ("checker.cli.worst",
              "the worst value of a metric within the bounds, its witness and its bound"),
}


# argparse's message for `--flag=value` on a BooleanOptionalAction flag.
_BOOL_WITH_VALUE = re.compile(r"argument (--[\w-]+)/(--no-[\w-]+): ignored explicit argument "
                              r"'(.*)'")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        found = _BOOL_WITH_VALUE.fullmatch(message)
        if found is not None:
            flag, no_flag, value = found.groups()
            # vLLM's boolean flags are BooleanOptionalAction too (engine/arg_utils.py:378-
            # 380): `vllm serve` 0.32.0 stops at `--flag=False` with this same message.
            message = (f"{flag}={value}: a boolean vllm serve flag takes no value, and vllm "
                       f"serve 0.32.0 refuses it too (engine/arg_utils.py:378-380); write "
                       f"{flag} or {no_flag}")
        sys.stderr.write(f"batchproof: error: {message}; see 'batchproof --help'\n")
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with one subparser per available command. With `only` (a
    command's name) only that command's module is imported and its arguments added; the
    others are listed by name and help, as `batchproof --help` shows them (importing every
    command's module, the audit's, the sweep's, the renderers', took about 60 ms of each
    run's start-up)."""
    parser = _Parser(prog="batchproof", description=__doc__)
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, show the traceback instead of one line")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for name, (module_name, help_text) in _COMMANDS.items():
        if only is not None and name != only:
            if importlib.util.find_spec(module_name) is not None:
                sub.add_parser(name, help=help_text, description=help_text)
            continue
        module = optional_module(module_name)
        if module is None:
            continue
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


@functools.cache
def _shared_parser(command: str | None = None) -> argparse.ArgumentParser:
    """`build_parser(command)`'s parser, built once per process (and command) and reused
    by every `main` call in it. Building the whole parser is about 40 ms of CPU (some 1,900
    `add_argument` calls: the vllm serve vocabulary's hundreds of flags once per command,
    each call formatting its flag), 87 % of an in-process call such as the fuzz survey's
    (46 ms each, 6 ms reused); parsing leaves the parser as it was (every namespace is new,
    and the one mutable default, the pasted `vllm serve` words, is copied before use:
    serve_args.py)."""
    return build_parser(command)


def _command_of(argv: Sequence[str]) -> str | None:
    """The command `argv` names: its first word that is not an option, if a command."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in _COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script: run one command and return its exit code. Bad
    input is one line and exit 2; any other exception is an internal error, one line and
    exit 4 (with `--debug` before the command, the exception propagates)."""
    # `batchproof ... | head` ends quietly (the console script passes no argv, and its
    # output is flushed at exit, still under SIG_DFL). Called in-process with an argv
    # (tests, a library user), the caller's handler comes back afterwards, so that a later
    # write to a dead worker's pipe raises in that process instead of ending it silently.
    with quiet_broken_pipe(restore=argv is not None), fewer_collections():
        return _main(argv)


#: The youngest generation's threshold of the cyclic garbage collector while a command
#: runs (Python's default: 700 allocations).
GC_YOUNG_THRESHOLD = 20_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the block with the cyclic collector's youngest threshold at
    `GC_YOUNG_THRESHOLD`, the caller's thresholds back afterwards.

    A command's data is mostly acyclic (records, tuples, strings: freed by reference
    counts), but a long run allocates millions of them, and every 700 allocations the
    collector scanned the young objects, and every 100 scans the whole heap: a workload of
    10 requests for 100,000 steps spent 10-25 % of its 2-3 s of CPU there, and the fuzz
    survey's shard (whose process heap is larger) 28.6 s of its 75 s (gc.callbacks).
    At 20,000 the survey's shard took 51 s of CPU where it took 74 (side by side, the
    same seed); a cycle now waits a little longer to be freed."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], GC_YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _main(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # Read before parsing, so that an error inside argparse is shown too.
    debug = "--debug" in argv[: next((i for i, a in enumerate(argv) if a in _COMMANDS),
                                     len(argv))]
    try:
        return _run(argv)
    except InputError as exc:
        sys.stderr.write(f"batchproof: error: {_one_line(str(exc))}\n")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("batchproof: interrupted\n")
        return INTERRUPTED
    except Exception as exc:
        if debug:
            raise
        sys.stderr.write(
            "batchproof: internal error (a bug in batchproof, not in your input): "
            f"{type(exc).__name__}: {_one_line(str(exc))[:200]}; run the same command as "
            "'batchproof --debug COMMAND ...' for the traceback, and please report it\n")
        return EXIT_INTERNAL


def vllm_spellings(argv: Sequence[str]) -> list[str]:
    """`argv` with each option name's underscores made dashes, as vLLM's
    FlexibleArgumentParser does for every `--name[=value]` token (the name up to the first
    '=' or '.'; utils/argparse_utils.py:289-311): `--max_num_seqs 4` is `--max-num-seqs 4`.
    batchproof's own options are all spelled with dashes, so they read the same."""
    out = []
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg.partition("=")
            head, dot, rest = name.partition(".")
            arg = head.replace("_", "-") + dot + rest + eq + value
        out.append(arg)
    return out


def _run(argv: list[str]) -> int:
    parser = _shared_parser(_command_of(argv))
    args = parser.parse_args(vllm_spellings(argv))
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    module = importlib.import_module(_COMMANDS[args.command][0])
    return int(module.run(args))


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    raise SystemExit(main())
