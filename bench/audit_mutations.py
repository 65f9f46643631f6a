"""Benchmark and mutation test of `batchproof audit` itself: small scheduler mutations a
pull request could make, each a patch (tests/audit_mutations/*.patch) applied to a COPY of
the installed vLLM's scheduler.py / kv_cache_manager.py, that audit must catch.

    .venv-vllm/bin/python bench/audit_mutations.py --seeds 5 --write mutations.md

(docs/bench_audit.md, "Mutations caught", has a run's table; `--write` replaces the whole
file it names, so do not point it at that page.)

The copy lives in a temporary directory: a tree of symlinks to the installed `vllm`
package in which only the directories down to each patched file are real, the patched
files real copies (and no `__pycache__` is linked, so bytecode of the copies is written
there, never into site-packages). That directory is put first on sys.path (PYTHONPATH) of
a subprocess running `python -m checker.cli audit`, so the installed vLLM is never
modified; the audit's JSON names the location it imported vLLM from, which is checked.

For each mutation and seed: the random workloads (`--sources random`, modes off and
prefix) audit needs to the first finding (`--fail-fast`), the finding's kind and its
shrunk workload; once per mutation the same with the stored counterexamples and BMC's
witnesses first (the default source order: they do not depend on the seed). Not a test:
the counts depend on the seeds and the time on the machine; tests/test_audit.py runs
one seed of each under `-m "slow and conformance"`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "tests" / "audit_mutations"
MODES = "off,prefix"
#: tests/test_audit.py's one audit of each mutation, and docs/audit.md's table's (see
#: bench/audit_table.py): every source and every mode, 25 random workloads per mode, the
#: random ones first so that a finding they reach is shrunk from a random workload.
ONE_AUDIT = ("--seed", "1000", "--count", "25", "--sources",
             "random,counterexamples,witnesses")


def mutations() -> dict[str, Path]:
    """Mutation name -> its patch file."""
    return {p.stem: p for p in sorted(PATCHES.glob("*.patch"))}


def description(patch: Path) -> str:
    """The patch's first paragraph after its title line (what the mutation does)."""
    lines = patch.read_text().split("\n")
    return lines[1].rstrip(".") if len(lines) > 1 else patch.stem


def patched_files(patch: Path) -> tuple[str, ...]:
    """The paths (`vllm/...`) a unified diff writes, from its `+++ b/...` lines."""
    return tuple(line[len("+++ b/"):].split("\t")[0]
                 for line in patch.read_text().split("\n") if line.startswith("+++ b/"))


def installed_package(name: str = "vllm") -> Path:
    """The directory of the installed package (without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name} is not installed in this environment ({sys.executable})")
    return Path(next(iter(spec.submodule_search_locations)))


def _real_dir(root: Path, installed_parent: Path, rel: Path) -> None:
    """Make root/rel a real directory mirroring installed_parent/rel with symlinks (no
    __pycache__), each of its ancestors likewise."""
    for i in range(1, len(rel.parts) + 1):
        part = Path(*rel.parts[:i])
        here, there = root / part, installed_parent / part
        if here.is_symlink():
            here.unlink()
        if not here.exists():
            here.mkdir()
            for entry in there.iterdir():
                if entry.name != "__pycache__":
                    (here / entry.name).symlink_to(entry)


def build_overlay(patches: Sequence[Path], root: Path, package: str = "vllm") -> Path:
    """A copy of the installed `package` under `root` with `patches` applied (see the
    module doc); returns `root`, the directory to put first on sys.path. Raises
    RuntimeError when a patch does not apply exactly (another vLLM version)."""
    home = installed_package(package)
    parent = home.parent
    _real_dir(root, parent, Path(package))
    for patch in patches:
        for rel in patched_files(patch):
            _real_dir(root, parent, Path(rel).parent)
            target = root / rel
            if target.is_symlink():
                target.unlink()
                shutil.copyfile(parent / rel, target)
        done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-F0",
                               "--no-backup-if-mismatch", "-d", str(root), "-i", str(patch)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{patch.name} does not apply to {home}: "
                               f"{(done.stdout + done.stderr).strip()}")
    return root


def run_audit(overlay: Path | None, args: Sequence[str], timeout_s: float = 1800.0,
              extra_env: dict[str, str] | None = None, preloaded: bool = False
              ) -> tuple[int, dict[str, object], float]:
    """(exit code, the --json document, seconds) of `batchproof audit ARGS` in a fresh
    interpreter, `overlay` first on its sys.path, `extra_env` added to its environment.
    `preloaded`: in a fork of a server that has imported vLLM's dependencies but not vLLM
    (`PRELOAD`), which saves their import per audit (the tests' many audits); the timings
    in the document then leave that import out, so the benchmarks do not use it."""
    env = dict(os.environ, **(extra_env or {}))
    if overlay is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(overlay), env.get("PYTHONPATH"))
                                            if p)
    argv = ["audit", "--json", "-q", *args]
    start = time.monotonic()
    if preloaded:
        code, out, err = _forked_audit(argv, overlay, env, timeout_s)
    else:
        done = subprocess.run([sys.executable, "-m", "checker.cli", *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        code, out, err = done.returncode, done.stdout, done.stderr
    seconds = time.monotonic() - start
    try:
        doc = json.loads(out)
    except ValueError:
        raise RuntimeError(f"audit exited {code} without a JSON report: "
                           f"{err.strip()[-2000:]}") from None
    if overlay is not None:
        where = str(doc["version"]["location"])  # type: ignore[index]
        if not where.startswith(str(overlay)):
            raise RuntimeError(f"the audit imported vLLM from {where}, not the copy {overlay}")
    return code, doc, seconds


#: What an audit's interpreter imports on its way to vLLM's scheduler, about 8 of its 9
#: seconds of imports on a busy core (torch and its compiler, transformers, the
#: tokenizers); never vLLM itself, which each audit imports from its overlay.
PRELOAD = ("torch", "torch._dynamo", "torch._inductor.lowering",
           "torch._inductor.standalone_compile", "transformers", "tokenizers", "safetensors",
           "sentencepiece", "tiktoken", "openai", "openai_harmony", "sympy", "networkx",
           "fastapi", "aiohttp", "uvloop", "zmq", "msgspec", "cbor2", "cloudpickle",
           "triton", "xgrammar", "llguidance", "cv2", "psutil", "prometheus_client",
           "numpy", "z3", "checker.cli.main", "checker.conformance.audit",
           "checker.conformance.vllm_real")


def _audit_child(argv: list[str], overlay: str | None, env: dict[str, str],
                 out_path: str) -> None:
    """In the fork: what a fresh `python -m checker.cli` with `env` would have (its
    environment, working directory and sys.path), stdout and stderr to `out_path`(.err)."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    if overlay is not None:
        sys.path.insert(0, overlay)
    with open(out_path, "w") as out, open(out_path + ".err", "w") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    from checker.cli.main import main

    try:
        code = main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def _forked_audit(argv: list[str], overlay: Path | None, env: dict[str, str],
                  timeout_s: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `checker.cli.main(argv)` in a fork of the preloaded
    server (multiprocessing's forkserver, one per process that asks)."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    here = str(Path(__file__).resolve().parent)  # the fork imports this module by name
    if here not in sys.path:
        sys.path.append(here)
    with tempfile.TemporaryDirectory() as tmp:
        out_path = str(Path(tmp) / "out")
        child = ctx.Process(target=_audit_child,
                            args=(argv, None if overlay is None else str(overlay), env,
                                  out_path))
        child.start()
        child.join(timeout_s)
        if child.is_alive():
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["audit", *argv], timeout_s)
        out = Path(out_path).read_text() if Path(out_path).exists() else ""
        err = Path(out_path + ".err").read_text() if Path(out_path + ".err").exists() else ""
    return int(child.exitcode or 0), out, err


@dataclass(frozen=True, slots=True)
class Caught:
    """One audit of one mutant: how many workloads it took and what it found."""

    mutation: str
    seed: int | None  # None: the default sources (counterexamples, witnesses, random)
    code: int
    workloads: int | None  # position of the first workload with a finding
    kind: str
    title: str
    minimal: str  # the shrunk workload's size, "2 x 3" (requests x steps)
    seconds: float


def catch(mutation: str, overlay: Path, seed: int, count: int, sources: str = "random",
          shrink_calls: int = 200) -> Caught:
    """Audit the mutant until its first finding (`--fail-fast`)."""
    code, doc, seconds = run_audit(overlay, [
        "--seed", str(seed), "--count", str(count), "--modes", MODES, "--sources", sources,
        "--fail-fast", "--shrink-calls", str(shrink_calls)])
    findings = doc["findings"]
    assert isinstance(findings, list)
    if not findings:
        return Caught(mutation, seed if sources == "random" else None, code, None, "-",
                      "not caught", "-", seconds)
    first = min(findings, key=lambda f: f["first"]["index"])
    w = first["workload"]
    return Caught(mutation, seed if sources == "random" else None, code,
                  int(first["first"]["index"]), first["kind"], first["title"],
                  f"{len(w['requests'])} x {w['steps']}", seconds)


def median_workloads(rows: Sequence[Caught]) -> str:
    """The median of the workloads to the first finding ('-' when none was caught)."""
    found = [r.workloads for r in rows if r.workloads is not None]
    if len(found) < len(rows):
        return f"{statistics.median(found):g} ({len(rows) - len(found)} not caught)" \
            if found else "not caught"
    return f"{statistics.median(found):g}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run every mutation over the seeds; print (and optionally write) the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="seeds per mutation (default 5)")
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--count", type=int, default=500,
                        help="random workloads per mode at most (default 500)")
    parser.add_argument("--only", action="append", help="run only this mutation")
    parser.add_argument("--write", metavar="FILE", help="write the markdown table")
    args = parser.parse_args(argv)
    chosen = {k: v for k, v in mutations().items() if not args.only or k in args.only}
    rows: dict[str, list[Caught]] = {}
    fixed: dict[str, Caught] = {}
    for name, patch in chosen.items():
        with tempfile.TemporaryDirectory(prefix=f"audit-mutant-{name}-") as tmp:
            overlay = build_overlay([patch], Path(tmp))
            rows[name] = []
            for k in range(args.seeds):
                caught = catch(name, overlay, args.first_seed + 1000 * k, args.count)
                rows[name].append(caught)
                print(f"{name} seed {caught.seed}: {caught.workloads} workloads, "
                      f"{caught.kind}: {caught.title} (minimal {caught.minimal}, "
                      f"{caught.seconds:.0f} s)", flush=True)
            fixed[name] = catch(name, overlay, args.first_seed, args.count,
                                sources="counterexamples,witnesses,random")
            print(f"{name} default sources: {fixed[name].workloads} workloads, "
                  f"{fixed[name].kind}", flush=True)
    table = render(chosen, rows, fixed, args)
    print(table)
    if args.write:
        Path(args.write).write_text(table)
    return 0 if all(r.workloads is not None for rs in rows.values() for r in rs) else 1


def render(chosen: dict[str, Path], rows: dict[str, list[Caught]],
           fixed: dict[str, Caught], args: argparse.Namespace) -> str:
    """The markdown table of the mutation runs."""
    seeds = ", ".join(str(args.first_seed + 1000 * k) for k in range(args.seeds))
    out = [f"Mutations (tests/audit_mutations/), {args.seeds} seeds ({seeds}), random "
           f"workloads of modes {MODES} interleaved, 30 steps each; "
           f"{platform.python_version()}, {os.cpu_count()} cores, load average "
           f"{os.getloadavg()[0]:.1f} at the end.", "",
           "| mutation | what it changes | random workloads to the first finding (per seed) "
           "| median | with counterexamples and witnesses first | kind of the first finding "
           "| minimal workload (requests x steps) | seconds per audit (median) |",
           "|---|---|---|---|---|---|---|---|"]
    for name, patch in chosen.items():
        rs = rows[name]
        per_seed = ", ".join(str(r.workloads) if r.workloads is not None else "-" for r in rs)
        kinds = ", ".join(dict.fromkeys(r.kind for r in rs))
        minimal = ", ".join(dict.fromkeys(r.minimal for r in rs))
        f = fixed[name]
        out.append(f"| `{name}` | {description(patch)} | {per_seed} | {median_workloads(rs)} "
                   f"| {f.workloads if f.workloads is not None else '-'} ({f.kind}) | {kinds} "
                   f"| {minimal} | {statistics.median(r.seconds for r in rs):.0f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
