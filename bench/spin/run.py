"""Build and run SPIN's pan on bench/spin/vllm_v1.pml (the SPIN manual's recipe:
`spin -a`, then the C compiler, then `./pan`), and read back what pan reports.

    python bench/spin/run.py --n 3                  # exhaustive, the safety assertions
    python bench/spin/run.py --n 3 --starve 5       # a request waits 5 steps with 0 tokens

pan is compiled with -DSAFETY (no acceptance cycles are asked for), -DNOREDUCE (one
process: partial-order reduction has nothing to reduce) and -DCOLLAPSE (lossless state
compression; -DHC4 would hash-compact, losing states with a small probability). The
binary and SPIN's generated C stay in a temporary directory. Peak memory is the pan
process's maximum resident set (wait4), not SPIN's own estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

MODEL = Path(__file__).with_name("vllm_v1.pml")
# The setting of issue 17: FCFS, budget 8, 4 seqs, block 4, 6 KV blocks (5 usable),
# max_model_len 16, chunked prefill on, prompts 1..8, max_tokens 1..4, arrivals in 1..3.
SETTING = {"BUDGET": 8, "SEQS": 4, "BS": 4, "USABLE": 5, "MML": 16, "PMAX": 8, "MTMAX": 4,
           "ARR": 3, "CHUNKED": 1}
COMPRESSION = ("-DCOLLAPSE",)


@dataclass(frozen=True, slots=True)
class SpinRun:
    """What one pan run found and cost."""

    n: int
    starve: int
    retire: bool
    states: int
    transitions: int
    errors: int
    seconds: float  # wall time of pan (the search), as measured here
    pan_seconds: float  # pan's own "elapsed time"
    peak_mb: float
    complete: bool
    note: str
    flags: str
    twins: bool = False  # only the largest max_tokens (MTMIN = MTMAX)


def build(n: int, starve: int = 0, asserts: bool = True,
          flags: tuple[str, ...] = COMPRESSION, memlim_mb: int = 8192,
          workdir: Path | None = None, retire: bool = False, twins: bool = False) -> Path:
    """pan for N requests (and the starvation bound `starve`, 0 for none); `retire`: a
    finished request's slot forgets it (RETIRE in the model); `twins`: requests of the
    largest max_tokens only (MTMIN = MTMAX: the array explorer's proved reduction,
    checker/methods/array/kinds.py, made here by hand)."""
    for tool in ("spin", "cc"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: apt-get install -y spin gcc")
    work = workdir or Path(tempfile.mkdtemp(prefix="batchproof-spin-"))
    shutil.copy(MODEL, work / MODEL.name)
    defines = {**SETTING, "N": n, "STARVE": starve, "SAFETY_ASSERTS": int(asserts),
               "RETIRE": int(retire), "MTMIN": SETTING["MTMAX"] if twins else 1}
    subprocess.run(["spin", "-a", *(f"-D{k}={v}" for k, v in defines.items()), MODEL.name],
                   cwd=work, check=True, capture_output=True)
    subprocess.run(["cc", "-O2", "-DSAFETY", "-DNOREDUCE", f"-DMEMLIM={memlim_mb}", *flags,
                    "-o", "pan", "pan.c"], cwd=work, check=True, capture_output=True)
    return work / "pan"


def run(pan: Path, n: int, starve: int = 0, timeout_s: float = 3600,
        hash_bits: int | None = None, flags: tuple[str, ...] = COMPRESSION,
        retire: bool = False) -> SpinRun:
    """Run pan to the end (or the first assertion failure) and parse its report. The hash
    table has 2**hash_bits slots (default: about one per state expected at this N)."""
    if hash_bits is None:
        hash_bits = {1: 14, 2: 17, 3: 22, 4: 27}.get(n, 29)
    start = time.monotonic()
    proc = subprocess.Popen([str(pan), "-m1000000", f"-w{hash_bits}"], cwd=pan.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # SIGINT: pan's handler (`stopped` in pan.c) prints "Interrupted" and its full
        # report (states stored so far, memory), which SIGKILL would lose.
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        timed_out = True
    seconds = time.monotonic() - start
    # The child is reaped by communicate(); its peak RSS is in RUSAGE_CHILDREN, which
    # holds the maximum over the children reaped so far, so each run is its own process.
    peak_kb = _peak_kb()
    return parse(out, n, starve, seconds, peak_kb, timed_out, " ".join(flags), retire)


def _peak_kb() -> float:
    import resource
    return float(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def parse(out: str, n: int, starve: int, seconds: float, peak_kb: float, timed_out: bool,
          flags: str, retire: bool = False) -> SpinRun:
    """pan's report as a SpinRun."""
    def number(pattern: str) -> float:
        m = re.search(pattern, out)
        return float(m.group(1)) if m else -1.0

    states = int(number(r"([\d.e+]+) states, stored"))
    transitions = int(number(r"([\d.e+]+) transitions \(= stored\+matched\)"))
    errors = int(number(r"errors: (\d+)"))
    pan_s = number(r"elapsed time ([\d.e+]+) seconds")
    notes = []
    if timed_out:
        notes.append("time limit")
    # pan says "pan: reached -DMEMLIM bound" (Malloc, pan.c) when -DMEMLIM stops it, and
    # "pan: out of memory" when malloc itself fails; both end in "Search not completed".
    if "out of memory" in out or "reached -DMEMLIM bound" in out:
        notes.append("out of memory")
    if "max search depth too small" in out:
        notes.append("depth limit")
    if "Search not completed" in out and not notes and errors <= 0:
        notes.append("search not completed")
    if errors > 0:
        notes.append("assertion violated")
    complete = not notes or notes == ["assertion violated"]
    return SpinRun(n, starve, retire, states, transitions, errors, seconds, pan_s,
                   peak_kb / 1024, complete, ", ".join(notes), flags)


def measure(n: int, starve: int = 0, timeout_s: float = 3600, memlim_mb: int = 8192,
            flags: tuple[str, ...] = COMPRESSION, retire: bool = False,
            twins: bool = False) -> SpinRun:
    """Build and run in a fresh process, so that peak memory is this run's alone."""
    cmd = ["python3", str(Path(__file__).resolve()), "--n", str(n), "--starve", str(starve),
           "--timeout", str(timeout_s), "--memlim", str(memlim_mb), "--json",
           f"--flags={' '.join(flags)}", *(["--retire"] if retire else []),
           *(["--twins"] if twins else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True,
                          env={**os.environ})
    return SpinRun(**json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Command line: one pan run, printed as a line (or JSON)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--starve", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--memlim", type=int, default=8192, help="pan's memory limit, MB")
    p.add_argument("--flags", default=" ".join(COMPRESSION))
    p.add_argument("--retire", action="store_true", help="finished slots forget requests")
    p.add_argument("--twins", action="store_true",
                   help="requests of the largest max_tokens only (MTMIN = MTMAX)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    flags = tuple(args.flags.split())
    work = Path(tempfile.mkdtemp(prefix="batchproof-spin-"))
    try:
        pan = build(args.n, args.starve, asserts=args.starve == 0, flags=flags,
                    memlim_mb=args.memlim, workdir=work, retire=args.retire,
                    twins=args.twins)
        result = replace(run(pan, args.n, args.starve, args.timeout, flags=flags,
                             retire=args.retire), twins=args.twins)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(f"N={result.n} starve={result.starve} retire={result.retire}: "
              f"{result.states} states, "
              f"{result.transitions} transitions, {result.errors} errors, "
              f"{result.seconds:.2f} s, {result.peak_mb:.0f} MB {result.note}")


if __name__ == "__main__":
    main()
