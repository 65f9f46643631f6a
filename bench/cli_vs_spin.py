"""Benchmark: the family-F questions of issue 29 asked through the commands a user types,
each beside SPIN on the same family, in one run.

Family F (docs/bench_scale.md): vLLM V1, FCFS, max_num_batched_tokens 8, max_num_seqs 4,
block_size 4, 6 KV blocks (5 usable), max_model_len 16, chunked prefill on, prefix caching
and async scheduling off; 3 requests with prompts 1..8 and max_tokens 1..4 arriving in
steps 1..3. Rows, each command a fresh process (wall clock, and the child's user+system
CPU seconds):

- `check --method explore` on three safety properties to depth 20, beside SPIN's
  exhaustive search of its assertions (bench/spin/run.py);
- `check --property starvation --param k=5` and `k=6` at depth 14 (the default method),
  beside SPIN's `--starve 5` and `--starve 6`;
- `diff vllm-v1 --ablate preemption_gate` under FCFS and under priority at 3 slots and
  depth 6: SPIN has no such question (one Promela model, FCFS only; a product of two
  models would have to be written by hand), so its cell says so;
- `worst --metric starvation_steps` at depth 14, beside SPIN's k=5 then k=6 (a user of
  SPIN must guess the bound and run it twice).

Every batchproof command runs twice: with an empty proof store (a first run on a fresh
machine: it proves the array explorer's reductions) and again with the store the first
left (a repeated question). SPIN's figure is pan's search only (its build by spin and cc
not counted, as in docs/bench_scale.md's other tables) and also end to end (spin -a, the C
compiler and pan, as a user runs it: a bound such as k is compiled in), for the faster of
SPIN as issue 17 set it up and SPIN with RETIRE (finished slots forgotten, the reduction
the explorer makes too); its trail is neither minimised nor replayed.

    python bench/cli_vs_spin.py [--write docs/bench_scale.md] [--timeout 300]

Not a test: timings depend on the machine and its load (printed with the table).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from timing import measured_by, table_parser, timed_run, write_between

ROOT = Path(__file__).resolve().parents[1]
BATCHPROOF = [sys.executable, "-m", "checker.cli"]
FAMILY_F = ["--no-enable-prefix-caching", "--no-async-scheduling",
            "--max-num-batched-tokens", "8", "--max-num-seqs", "4", "--block-size", "4",
            "--num-gpu-blocks-override", "6", "--max-model-len", "16"]
BOUNDS = ["--max-prompt-len", "8", "--max-tokens", "4"]
ARRIVALS = ["--requests", "3", "--arrival-window", "3"]
SAFETY = ["--property", "budget_respected", "--property", "kv_blocks_conserved",
          "--property", "running_within_max_num_seqs"]
BEGIN, END = "<!-- cli_vs_spin tables: begin -->", "<!-- cli_vs_spin tables: end -->"


@dataclass(frozen=True, slots=True)
class Question:
    """One question: the batchproof command, what it answered (read from its output), and
    SPIN's runs of the same question ((n, starve) pairs; none: SPIN cannot ask it)."""

    name: str
    argv: tuple[str, ...]
    spin: tuple[tuple[int, int], ...]


def questions(timeout: float) -> list[Question]:
    """The rows of issue 29 item 5."""
    t = ["--timeout", str(int(timeout))]
    check = ["check", *FAMILY_F, *BOUNDS, *ARRIVALS, *t, "--json"]
    diff = ["diff", "vllm-v1", "--ablate", "preemption_gate", *FAMILY_F, *BOUNDS,
            "--slots", "3", "--depth", "6", *t, "--json"]
    return [
        Question("check, 3 safety properties, depth 20 (`--method explore`)",
                 (*check, *SAFETY, "--method", "explore", "--depth", "20"), ((3, 0),)),
        Question("check starvation k=5, depth 14",
                 (*check, "--property", "starvation", "--param", "k=5", "--depth", "14"),
                 ((3, 5),)),
        Question("check starvation k=6, depth 14",
                 (*check, "--property", "starvation", "--param", "k=6", "--depth", "14"),
                 ((3, 6),)),
        Question("diff preemption_gate, FCFS, 3 slots, depth 6", tuple(diff), ()),
        Question("diff preemption_gate, priority, 3 slots, depth 6",
                 (*diff, "--scheduling-policy", "priority"), ()),
        Question("worst starvation_steps, depth 14",
                 ("worst", "--metric", "starvation_steps", *FAMILY_F, *BOUNDS, *ARRIVALS,
                  "--depth", "14", *t, "--json"), ((3, 5), (3, 6))),
    ]


def answer_of(argv: Sequence[str], stdout: str, code: int) -> str:
    """What the command answered, in a few words (exit code if its JSON is unreadable)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return f"exit {code}, no JSON"
    if argv[0] == "check":
        said = sorted({f"{v['property']} {v['label']} ({v['method']})" for v in doc["verdicts"]})
        return "; ".join(said)
    if argv[0] == "worst":
        return f"{doc['status']} {doc['value']} ({doc['strategy']}, {doc['explorer']})"
    return f"{doc['status']} at depth {doc['depth']} ({doc['method']})"


def run_batchproof(q: Question, out: Path) -> dict[str, object]:
    """One run of a question's command (its proof store: main's, in the environment)."""
    writes = ["--out", str(out)] if q.argv[0] in ("check", "worst") else []
    wall, cpu, done = timed_run([*BATCHPROOF, *q.argv, *writes], ROOT)
    return {"wall": wall, "cpu": cpu, "exit": done.returncode,
            "answer": answer_of(q.argv, done.stdout, done.returncode)}


def run_spin(q: Question, timeout: float) -> dict[str, object] | None:
    """SPIN's runs of the question, the faster of plain and RETIRE; None if it has none."""
    if not q.spin:
        return None
    sys.path.insert(0, str(ROOT / "bench" / "spin"))
    import run as spin  # bench/spin/run.py

    best = None
    for retire in (False, True):
        start = time.monotonic()
        runs = [spin.measure(n, k, timeout, retire=retire) for n, k in q.spin]
        whole = time.monotonic() - start  # spin -a, cc and pan, as a user runs them
        said = ", ".join(
            (f"k={k} " if k else "safety ")
            + ("violated" if r.errors else "holds" if r.complete else r.note)
            for (_, k), r in zip(q.spin, runs, strict=True))
        row = {"wall": sum(r.seconds for r in runs), "whole": whole, "answer": said,
               "how": "RETIRE" if retire else "plain"}
        if best is None or row["wall"] < best["wall"]:
            best = row
    return best


def render(rows: list[dict[str, object]]) -> str:
    """The markdown table."""
    out = ["| question | batchproof answer | exit | first run s (CPU s) | repeated s "
           "(CPU s) | SPIN answer | pan s | spin+cc+pan s | repeated / pan | "
           "repeated / spin+cc+pan |",
           "|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        first, again, s = r["first"], r["again"], r["spin"]
        spin_answer = "not expressible (one FCFS Promela model, no product)" if s is None \
            else f"{s['answer']} ({s['how']})"
        cells = ["-"] * 4 if s is None else [
            f"{s['wall']:.2f}", f"{s['whole']:.2f}",
            f"{again['wall'] / max(s['wall'], 0.01):.1f}x",
            f"{again['wall'] / max(s['whole'], 0.01):.1f}x"]
        out.append(f"| {r['name']} | {first['answer']} | {first['exit']} | "
                   f"{first['wall']:.1f} ({first['cpu']:.1f}) | {again['wall']:.1f} "
                   f"({again['cpu']:.1f}) | {spin_answer} | {' | '.join(cells)} |")
    return "\n".join(out)


def main() -> None:
    ap = table_parser(__doc__)
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="--timeout of each batchproof command and SPIN's limit")
    ap.add_argument("--only", help="run only the questions whose name contains this")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    store = Path(tempfile.mkdtemp(prefix="batchproof-bench-proofs-"))
    out = Path(tempfile.mkdtemp(prefix="batchproof-bench-out-"))
    os.environ["BATCHPROOF_PROOF_CACHE"] = str(store)  # the commands' store, emptied per question
    try:
        for q in questions(args.timeout):
            if args.only and args.only not in q.name:
                continue
            shutil.rmtree(store, ignore_errors=True)
            store.mkdir()
            first = run_batchproof(q, out)
            again = run_batchproof(q, out)
            rows.append({"name": q.name, "first": first, "again": again,
                         "spin": run_spin(q, args.timeout)})
            print(rows[-1], file=sys.stderr)
    finally:
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    text = "\n\n".join([measured_by("python bench/cli_vs_spin.py", load_before,
                                    os.getloadavg()[0]), render(rows)])
    print(text)
    if args.write:
        write_between(args.write, BEGIN, END, text)


if __name__ == "__main__":
    main()
