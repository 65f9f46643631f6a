"""`batchproof sweep GRID.yaml ...`: check a grid of configurations (docs/sweeps.md).

Each grid is expanded (the configurations the engine refuses are listed with the rule and
skipped), its jobs run through the checker's job function on a local process pool or on
Ray, and one row per job goes to OUT/<grid>/rows.parquet and rows.csv, with heatmaps and
index.html beside them. A re-run of the same grid into the same folder runs only the jobs
it has no row for. Exit codes: 0 every job decided; 3 some job is UNKNOWN (solver
unknown, time limit, a failed job or worker, or a `worst` metric not yet available);
2 bad input; 130 / 143 stopped by SIGINT / SIGTERM (the finished rows are kept)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checker.cli.check import MAX_JOBS
from checker.config.flags import bounded_int
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED
from checker.runner.stops import Stopped
from checker.runner.sweeps import run_batches
from checker.sweep import executors, pictures, store
from checker.sweep import grid as grids
from checker.sweep.extras import require
from checker.sweep.progress import SweepProgress
from checker.sweep.work import Outcome
from model import registry as engines
from model.core.errors import InputError

EXIT_OK, EXIT_INCONCLUSIVE = 0, 3
DEFAULT_OUT = Path("batchproof-out") / "sweep"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `batchproof sweep`."""
    parser.add_argument("grids", nargs="+", metavar="GRID.yaml",
                        help="grid files (docs/sweeps.md; examples in examples/sweeps/)")
    parser.add_argument("--executor", choices=executors.EXECUTORS, default="local",
                        help="local: a process pool (default); ray: Ray tasks, on a local "
                        "Ray or the cluster at --address (pip install -e '.[ray]')")
    parser.add_argument("--jobs", type=bounded_int(1, MAX_JOBS), default=2,
                        help="local executor: worker processes (default 2)")
    parser.add_argument("--address", metavar="ADDR",
                        help="ray: an existing cluster (ray://host:10001, or 'auto' on a "
                        "node of it); without it Ray starts locally")
    parser.add_argument("--num-cpus", type=bounded_int(1, 4096), metavar="N",
                        help="ray, started locally: CPUs it may use (default: all)")
    parser.add_argument("--out", metavar="DIR", default=str(DEFAULT_OUT),
                        help=f"output folder; each grid writes DIR/<grid name>/ (default "
                        f"{DEFAULT_OUT})")
    parser.add_argument("--retry-unknown", action="store_true",
                        help="run again the jobs whose row is UNKNOWN (say, with a larger "
                        "timeout); other finished jobs are still skipped")
    parser.add_argument("--no-pictures", action="store_true",
                        help="no heatmaps and no index.html (no matplotlib needed)")
    parser.add_argument("--dry-run", action="store_true",
                        help="expand the grids and list the refused configurations; run "
                        "nothing")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bar (shown only when stderr is a terminal)")


def run(args: argparse.Namespace) -> int:
    """Run every grid; return the exit code."""
    loaded = [grids.load(path) for path in args.grids]
    outs = _out_dirs(args, loaded)
    if args.dry_run:
        for grid in loaded:
            points, skipped = grids.expand(grid)
            _print_expansion(grid, points, skipped, len(grids.jobs(grid, points)), 0)
        return EXIT_OK
    require("pyarrow")
    if not args.no_pictures and any(g.plot for g in loaded):
        require("matplotlib")
    if args.address and args.executor != "ray":
        raise InputError("--address names a Ray cluster; add --executor ray")
    code = EXIT_OK
    with _ray_session(args):
        for grid, out in zip(loaded, outs, strict=True):
            code = max(code, _sweep(args, grid, out))
    return code


def _out_dirs(args: argparse.Namespace, loaded: list[grids.Grid]) -> list[Path]:
    outs = [Path(args.out) / Path(g.path).stem for g in loaded]
    clash = [o for o, n in Counter(outs).items() if n > 1]
    if clash:
        raise InputError(f"two grids would write {clash[0]}: give grid files different "
                         "names, or run them one at a time with their own --out")
    return outs


@contextmanager
def _ray_session(args: argparse.Namespace) -> Iterator[None]:
    """One Ray for every grid of the command: started here (unless this process is
    connected to one already), ended here."""
    if args.executor != "ray":
        yield
        return
    ray = require("ray")
    started = executors.start_ray(args.address, args.num_cpus)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _print_expansion(grid: grids.Grid, points: list[grids.Point],
                     skipped: list[grids.Skipped], jobs: int, already: int) -> None:
    print(f"grid {grid.path}: {grid.engine}, {len(points) + len(skipped)} configs "
          f"({len(skipped)} refused), {_n(grid.jobs_per_point(), 'job')} per config: "
          f"{_n(jobs, 'job')}"
          + (f", {already} already in the output" if already else ""))
    for s in skipped:
        where = " ".join(f"{grid.axis(f).name}={grids._text(v)}" for f, v in s.values
                         if len(grid.axis(f).values) > 1) or "the config"
        print(f"  refused {where}: rule {s.rule}")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _sweep(args: argparse.Namespace, grid: grids.Grid, out: Path) -> int:
    points, skipped = grids.expand(grid)
    jobs = grids.jobs(grid, points)
    store.prepare(out)
    finished = store.done(out, retry_unknown=args.retry_unknown)
    todo = [j for j in jobs if j.key not in finished]
    _print_expansion(grid, points, skipped, len(jobs), len(jobs) - len(todo))
    store.write_skipped(out, grid, skipped)
    model = engines.get(grid.engine)
    records: dict[str, dict[str, Any]] = {j.key: finished[j.key] for j in jobs
                                          if j.key in finished}
    journal = store.Journal(out)
    start = time.monotonic()
    stopped: Stopped | None = None

    with SweepProgress(len(todo), sys.stderr, show=not args.quiet) as progress:
        def on_done(batch: executors.Batch, outcomes: list[Outcome]) -> None:
            for job, outcome in zip(batch, outcomes, strict=True):
                cex, timeline = store.write_files(out, job, outcome)
                rec = store.row(job, outcome, model.config_to_dict(job.config), cex,
                                timeline).record()
                journal.add(rec)
                records[job.key] = rec
            # Failed: left undecided (error, time limit, worker, solver).
            progress.done(len(batch), sum(o.verdict == UNKNOWN for o in outcomes))

        try:
            stopped = run_batches(grids.batches(todo), args.executor, args.jobs, on_done,
                                  progress.tick)
        finally:
            journal.close()
    elapsed = time.monotonic() - start
    rows = [records[j.key] for j in jobs if j.key in records]
    parquet, csv_path = store.write_tables(out, rows)
    new = len(records) - (len(jobs) - len(todo))
    if stopped is not None:
        sys.stderr.write(f"batchproof: stopped by {stopped.name}: "
                         f"{new} of {len(todo)} jobs done, kept in {out / store.JOURNAL}; run "
                         "the same command again to resume\n")
        return stopped.exit_code
    counts = Counter(r["verdict"] for r in rows)
    rate = f"{new / elapsed:.2f} jobs/s" if new and elapsed > 0 else "nothing to run"
    summary = (f"{len(rows)} rows: " + ", ".join(
        f"{counts[v]} {v}" for v in (PROVED, HOLDS, VIOLATED, UNKNOWN) if counts[v]))
    where = (f"executor ray{' at ' + args.address if args.address else ''}"
             if args.executor == "ray" else f"executor local, {args.jobs} workers")
    print(f"ran {_n(new, 'job')} in {elapsed:.1f} s ({rate}, {where}); {summary}")
    print(f"rows: {parquet}, {csv_path}; refused configs: {out / store.SKIPPED}")
    if not args.no_pictures:
        maps = pictures.heatmaps(grid, rows, skipped, out)
        page = out / "index.html"
        pictures.write_html(page, pictures.render_html(grid, rows, skipped, maps, out,
                                                       summary))
        print(f"heatmaps: {len(maps)} in {out / pictures.HEATMAP_DIR}; page: {page}")
    return EXIT_INCONCLUSIVE if counts[UNKNOWN] else EXIT_OK
