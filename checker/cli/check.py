"""`batchproof check`: decide properties and compare with the manifest.

Exit codes: 0 every verdict as the manifest expects; 1 a verdict departs, or with
`--method both` the two methods disagree; 2 bad input; 3 inconclusive (UNKNOWN: solver
unknown or time limit; with `--method both` also a verdict only one method decided);
130 / 143 stopped by SIGINT / SIGTERM (the workers are ended first)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType

from checker.config.flags import (
    add_config_flags,
    apply_config_flags,
    bounded_int,
    bounded_seconds,
)
from checker.methods import agreement
from checker.methods.agreement import Agreement
from checker.methods.jobs import Job, JobResult, run_batch
from checker.methods.verdict import (
    AS_EXPECTED,
    DEPARTS,
    HOLDS,
    INCONCLUSIVE,
    PROVED,
    UNKNOWN,
    VIOLATED,
    Verdict,
)
from checker.show import itf
from checker.show import text as render
from checker.show.graph import export_graph
from checker.show.progress import Progress
from model import registry as engines
from model.core.errors import ConfigError, InputError
from model.vllm.config import ENGINE_VLLM_V1, Config
from model.workload import config_rejection, parse_workload, read_json
from properties import catalogue
from properties.manifest import Entry, NamedConfig, custom_config, load, with_bounds

COUNTEREXAMPLES = Path("counterexamples")
METHODS = ("bmc", "explore", "both")
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof check`."""
    parser.add_argument("--engine", default=ENGINE_VLLM_V1,
                        help=f"engine to check: {', '.join(engines.names())}, or {ALL!r} "
                        "for every engine's manifest (default vllm-v1)")
    parser.add_argument("--method", choices=METHODS, default="bmc",
                        help="bmc: theorem, k-induction, then bounded model checking (z3); "
                        "explore: explicit-state exploration of the reference (networkx); "
                        "both: run the two and require the same verdicts (default bmc)")
    parser.add_argument("--dot", metavar="FILE",
                        help="with one check and --method explore: write the explored graph "
                        "as Graphviz DOT")
    parser.add_argument("--graphml", metavar="FILE",
                        help="with one check and --method explore: write the explored graph "
                        "as GraphML")
    parser.add_argument("--property", action="append", metavar="NAME",
                        help="check only this property (repeatable); see --list")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", metavar="NAME", help="a manifest configuration")
    src.add_argument("--config-file", metavar="F",
                     help="a workload JSON whose 'config' is checked (vLLM field names)")
    parser.add_argument("--no-validate", action="store_true",
                        help="check a configuration the engine would reject (vLLM: "
                        "SchedulerConfig's rules and the startup KV check); the output says "
                        "it is not validated")
    parser.add_argument("--suite", choices=["default", "slow", "all"], default="default",
                        help="which manifest entries to run (default: default)")
    parser.add_argument("--depth", type=bounded_int(1, MAX_DEPTH),
                        help=f"BMC depth, at most {MAX_DEPTH} (overrides the manifest)")
    parser.add_argument("--slots", type=bounded_int(1, MAX_SLOTS),
                        help=f"request slots, at most {MAX_SLOTS} (overrides the manifest)")
    parser.add_argument("--timeout", type=bounded_seconds(MAX_TIMEOUT_S), default=300.0,
                        metavar="S", help="seconds per check before UNKNOWN (default 300, at "
                        f"most {MAX_TIMEOUT_S:g})")
    parser.add_argument("--jobs", type=bounded_int(1, MAX_JOBS), default=2,
                        help="worker processes (default 2)")
    parser.add_argument("--json", action="store_true", help="print verdicts as JSON")
    parser.add_argument("--write", action="store_true",
                        help="write counterexamples (ITF JSON + text timeline) to counterexamples/")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML report (checker/show/report.py)")
    parser.add_argument("--junit", metavar="FILE",
                        help="also write the verdicts as JUnit XML, one testcase per check")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress line on stderr (shown only when stderr is a "
                        "terminal)")
    parser.add_argument("--list", action="store_true", help="list properties and configs")
    add_config_flags(parser)


def _flags_given(args: argparse.Namespace) -> bool:
    return apply_config_flags(args, Config()) != Config()


def _select(args: argparse.Namespace) -> list[tuple[Entry | None, NamedConfig, str,
                                                    tuple[tuple[str, int], ...]]]:
    """(manifest entry or None, config, property, params) rows to check."""
    if args.engine != ALL:
        engines.get(args.engine)  # InputError naming the engines if unknown
    manifest = load()
    known = set(catalogue.names())
    for name in args.property or []:
        if name not in known:
            raise InputError(f"unknown property {name!r}; known: {', '.join(sorted(known))}")
    entries = [e for e in manifest.entries if args.engine in (ALL, e.engine)]
    if args.property:
        entries = [e for e in entries if e.property in args.property]
    if args.config_file or _flags_given(args):
        if args.engine == ALL:
            raise InputError("a custom configuration needs one engine; add --engine NAME")
        return _custom_rows(args, entries, manifest.configs)
    if args.config:
        if args.config not in manifest.configs:
            raise InputError(f"unknown config {args.config!r}; manifest configs: "
                             f"{', '.join(manifest.configs)}")
        entries = [e for e in entries if e.config == args.config]
    elif args.suite != "all" and not args.property:
        entries = [e for e in entries if e.suite == args.suite]
    rows = []
    for e in entries:
        nc = with_bounds(manifest.configs[e.config], **dict(e.bounds))
        rows.append((e, with_bounds(nc, depth=args.depth, slots=args.slots), e.property,
                     e.params))
    return rows


def _custom_rows(args: argparse.Namespace, entries: list[Entry],
                 configs: dict[str, NamedConfig]) -> list:
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
    elif args.engine == ENGINE_VLLM_V1:
        # Flags are read as `vllm serve` reads them: prefix caching on for the decoder-only
        # models the model covers (config/cache.py:141, engine/arg_utils.py:2987-3055) and
        # the AsyncScheduler on a GPU (config/vllm.py:1541-1644), unless turned off.
        base = replace(Config(), enable_prefix_caching=True, async_scheduling=True)
    else:
        raise InputError(f"the vLLM flags configure vllm-v1, not {args.engine}; give "
                         f"{args.engine}'s config with --config-file WORKLOAD.json")
    cfg = apply_config_flags(args, base) if args.engine == ENGINE_VLLM_V1 else base
    # The validation every command applies (SchedulerConfig's rules, vLLM's startup KV
    # check); field types are checked even under --no-validate.
    rejected = config_rejection(args.engine, cfg)
    if rejected is not None and not args.no_validate:
        raise InputError(f"{rejected} [rule {rejected.rule}; pass --no-validate to "
                         "check it anyway]")
    nc = custom_config("custom", cfg, validated=not args.no_validate, engine=args.engine)
    nc = with_bounds(nc, slots=args.slots or 3, depth=args.depth or 6, max_prompt_len=8,
                     max_max_tokens=6)
    seen, rows = set(), []
    for e in entries:
        if (e.property, e.params) not in seen:
            seen.add((e.property, e.params))
            rows.append((None, nc, e.property, e.params))
    return rows


def _not_validated(rows: list) -> str:
    """The not-validated line of a custom configuration checked under --no-validate
    (manifest configurations carry the manifest's own `validated` flag), or ''."""
    custom = next((nc for e, nc, _, _ in rows if e is None and not nc.validated), None)
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
        for nc in manifest.configs.values():
            print(f"config {nc.name}: {nc.description}")
        return 0
    rows = _select(args)
    if not rows:
        raise InputError("no manifest entry matches; see 'batchproof check --list'")
    for flag in ("html", "junit", "dot", "graphml"):
        if getattr(args, flag, None):
            _check_writable(f"--{flag}", getattr(args, flag))
    if args.dot or args.graphml:
        return export_graph(args, rows)
    note = _not_validated(rows)
    methods = ("bmc", "explore") if args.method == "both" else (args.method,)
    jobs = [Job(e.engine if e else args.engine, prop, params, nc,
                e.expected if e else None, args.timeout,
                method=method)
            for method in methods for e, nc, prop, params in rows
            if e is None or method in e.methods]
    try:
        with Progress(len(jobs), sys.stderr, show=not args.quiet) as progress:
            results = _execute(jobs, args.jobs, progress)
    except Stopped as stop:
        sys.stderr.write(f"batchproof: stopped by {signal.Signals(stop.signum).name}: "
                         f"{stop.done} of {len(jobs)} checks done, no verdicts printed\n")
        return 128 + stop.signum
    verdicts = []
    for res in results:
        path = None
        if res.counterexample is not None and res.replayed is not None:
            slug = f"{res.counterexample.property}__{res.counterexample.config_name}"
            itf_path, txt_path = _paths(res.verdict.engine, slug)
            if args.write and res.verdict.method == methods[0]:
                _write(res, itf_path, txt_path)
            # Only a file that exists is named (--write writes it; the manifest's corpus
            # holds the stored ones).
            path = str(itf_path) if itf_path.exists() and (
                args.write or res.counterexample.config_name != "custom") else None
        verdict = replace(res.verdict, counterexample=path)
        if note:  # every row of the run says so, in the table, --json and --junit alike
            verdict = replace(verdict, detail=f"{note}; {verdict.detail}".rstrip("; "))
        verdicts.append(verdict)
    pairs = agreement.pairs(results) if args.method == "both" else []
    agreements = agreement.compare_all(pairs)
    code = exit_code(verdicts, agreements)
    if args.json:
        json.dump(json_document(verdicts, agreements, code, args.method == "both"),
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        if note:
            print(note)
        _print(verdicts, agreements)
    if args.html:
        from checker.show import report  # the report's imports are needed only here
        _writing("--html", args.html, lambda: report.write_html(args.html, results, verdicts))
    if args.junit:
        from checker.show import junit
        _writing("--junit", args.junit,
                 lambda: junit.write_junit(args.junit, verdicts, agreements))
    return code


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
                  both: bool) -> dict[str, object]:
    """The `--json` document, schema 1 (docs/schema/check.schema.json)."""
    pairs = agreement.by_check(agreements)
    rows = []
    for v in verdicts:
        pair = pairs.get(agreement.row_key(v))
        rows.append(v.to_json(pair.status if pair is not None else None))
    counts = {s: sum(v.status == s for v in verdicts)
              for s in (AS_EXPECTED, DEPARTS, INCONCLUSIVE)}
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


class Stopped(Exception):
    """SIGINT or SIGTERM arrived while the jobs ran."""

    def __init__(self, signum: int, done: int = 0) -> None:
        super().__init__(signum, done)
        self.signum = signum
        self.done = done


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextmanager
def _stoppable() -> Iterator[None]:
    """While jobs run in a pool: SIGINT and SIGTERM raise Stopped in the main thread, so
    the pool is ended instead of waited for."""
    if not _in_main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    old = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _ignore_stops() -> None:
    """A second Ctrl-C must not interrupt the ending of the pool (`_stoppable` restores
    the handlers after)."""
    if _in_main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _init_worker(parent: int) -> None:
    """In each worker process: die with the parent, and leave Ctrl-C to it."""
    # A Ctrl-C reaches the whole process group; the parent alone decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Forked from a parent whose SIGTERM raises Stopped: a worker must die at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        # A SIGKILL of the parent runs no Python code, so only the kernel can end us then.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (SIGTERM, then SIGKILL)."""
    # ProcessPoolExecutor has no public way to end running workers before Python 3.14
    # (terminate_workers); shutdown alone waits for, or abandons, the running jobs.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    # The pool's feeder thread may still write to a dead worker's pipe; under main's
    # SIGPIPE=SIG_DFL (for `| head`) that write would kill this process silently.
    old_pipe = signal.signal(signal.SIGPIPE, signal.SIG_IGN) if _in_main_thread() else None
    try:
        for p in processes:
            p.terminate()
        deadline = time.monotonic() + 5.0
        for p in processes:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)
        # Every worker is gone, so this no longer waits for a job: it joins the pool's
        # threads, which see the broken pool and end.
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        if old_pipe is not None:
            signal.signal(signal.SIGPIPE, old_pipe)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _label(jobs: list[Job]) -> str:
    return f"{jobs[0].engine} {jobs[0].config.name} ({len(jobs)} checks)"


def _execute(jobs: list[Job], workers: int, progress: Progress | None = None) -> list[JobResult]:
    """Run jobs grouped by config (one invariant proof per config and process), reporting
    each finished batch to `progress`; Stopped on SIGINT / SIGTERM."""
    progress = progress or Progress(0, sys.stderr, show=False)
    groups: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(job.config.name + repr(job.config.bounds), []).append(i)
    batches = sorted(groups.values(), key=len, reverse=True)
    out: list[JobResult | None] = [None] * len(jobs)
    done = 0
    if workers == 1 or len(batches) == 1:
        try:
            with progress.ticking():
                for batch in batches:
                    label = _label([jobs[i] for i in batch])
                    progress.running(label)
                    for i, res in zip(batch, run_batch([jobs[i] for i in batch]),
                                      strict=True):
                        out[i] = res
                    done += len(batch)
                    progress.finished(len(batch), label)
        except KeyboardInterrupt:
            raise Stopped(signal.SIGINT, done) from None
        return [r for r in out if r is not None]
    with _stoppable():
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                                   initargs=(os.getpid(),))
        try:
            futures: dict[Future[list[JobResult]], list[int]] = {
                pool.submit(run_batch, [jobs[i] for i in b]): b for b in batches}
            order = list(futures)
            pending = set(order)
            while pending:
                # Pool workers take batches in submission order: the oldest unfinished
                # one is running.
                progress.running(_label([jobs[i] for i in futures[next(
                    f for f in order if f in pending)]]))
                finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in finished:
                    batch = futures[fut]
                    for i, res in zip(batch, fut.result(), strict=True):
                        out[i] = res
                    done += len(batch)
                    progress.finished(len(batch), _label([jobs[i] for i in batch]))
                progress.tick()
        except Stopped as stop:
            _ignore_stops()
            _stop_pool(pool)
            raise Stopped(stop.signum, done) from None
        except BaseException:
            _ignore_stops()
            _stop_pool(pool)
            raise
        pool.shutdown()
    return [r for r in out if r is not None]


def _print(verdicts: list[Verdict], agreements: list[Agreement]) -> None:
    several = len({v.engine for v in verdicts}) > 1
    header = (("engine",) if several else ()) + (
        "property", "config", "verdict", "expected", "method", "depth", "seconds",
        "counterexample")
    rows = [((v.engine,) if several else ()) + (
        v.property, v.config, v.label, v.expected or "-", v.method, str(v.depth),
        f"{v.seconds:.1f}", v.counterexample or "-") for v in verdicts]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
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
