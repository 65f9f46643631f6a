"""`python -m checker.conformance`: compare the vLLM reference with vLLM's real scheduler
on N generated workloads of one mode, or of each mode given (`--mode` repeated: one
process imports vLLM once for them all, about 8 s of CPU per mode saved; each mode's
workloads and report are what a run of that mode alone gives).

Modes (--mode):
{modes}

Prints the workloads and steps compared and the agreement; on a divergence, the shrunk
(minimal) workload as JSON and its first diverging step side by side, and exits 1.
Exit codes: 0 all agree, 1 a divergence, 2 vLLM not available or bad usage.

An older release (--vllm-version 0.30.0): the reference runs that release's rule switches
(model/vllm/config.py VERSIONS; a field the release lacks is left at its default) against
that release's real scheduler, imported from an overlay directory
(`python -m checker.conformance.vllm_overlay 0.30.0 DIR`, then --vllm-overlay DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from checker.conformance.in_turn import each_once, in_turn
from checker.conformance.modes import DEFAULT_MODE, MODES, Mode
from model.core.types import Workload
from model.vllm.config import VERSIONS, VLLM_VERSION
from model.workload import workload_to_json

if TYPE_CHECKING:
    from checker.conformance.compare import Divergence

EXIT_OK, EXIT_DIVERGED, EXIT_UNAVAILABLE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    modes = "\n".join(f"  {m.name:17} {m.what}" for m in MODES.values())
    parser = argparse.ArgumentParser(prog="python -m checker.conformance",
                                     description=(__doc__ or "").format(modes=modes),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=tuple(MODES), action="append", dest="modes",
                        help=f"which scheduler features the workloads turn on: "
                             f"{', '.join(MODES)} (default {DEFAULT_MODE}); repeat it to "
                             "run several modes one after the other in this process")
    parser.add_argument("--count", type=int, default=100, help="workloads (default 100)")
    parser.add_argument("--steps", type=int, default=30, help="steps each (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--no-shrink", action="store_true",
                        help="print the first divergence as found, without shrinking it")
    parser.add_argument("--coverage", action="store_true",
                        help="also report which upstream branches the workloads reach")
    parser.add_argument("--vllm-version", choices=tuple(VERSIONS), default=VLLM_VERSION,
                        help=f"the vLLM release to compare (default {VLLM_VERSION}); an older "
                             "one needs its real code on the path (--vllm-overlay)")
    parser.add_argument("--vllm-overlay", metavar="DIR",
                        help="an overlay of --vllm-version's vllm package (built by python -m "
                             "checker.conformance.vllm_overlay VERSION DIR), put first on "
                             "PYTHONPATH of a fresh process running this command")
    return parser


def modes_of(args: argparse.Namespace) -> list[str]:
    """The modes to run, in the order given, each once (the default mode if none)."""
    return each_once(args.modes, DEFAULT_MODE)


_OVERLAY_ENV = "BATCHPROOF_VLLM_OVERLAY"


def _reexec_with_overlay(overlay: str, argv: Sequence[str]) -> None:
    """Run this command again in a fresh interpreter whose sys.path starts at `overlay`
    (vllm may already be imported here, and an import cannot be swapped)."""
    overlay = os.path.abspath(overlay)
    if os.environ.get(_OVERLAY_ENV) == overlay:
        return
    if not os.path.isdir(os.path.join(overlay, "vllm")):
        raise SystemExit(f"--vllm-overlay {overlay} holds no vllm package; build it with "
                         "python -m checker.conformance.vllm_overlay VERSION DIR")
    env = dict(os.environ, **{_OVERLAY_ENV: overlay})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (overlay, os.environ.get("PYTHONPATH"))
                                        if p)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "checker.conformance", *argv], env)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; see the module doc for output and exit codes."""
    args = build_parser().parse_args(argv)
    if args.count < 1 or args.steps < 1:
        sys.stderr.write("--count and --steps must be positive\n")
        return EXIT_UNAVAILABLE
    if args.vllm_overlay:
        _reexec_with_overlay(args.vllm_overlay, sys.argv[1:] if argv is None else argv)
    from checker.conformance.vllm_real import real_vllm_version, vllm_unavailable_reason

    if (reason := vllm_unavailable_reason()) is not None:
        sys.stderr.write(f"conformance: {reason}\n")
        return EXIT_UNAVAILABLE
    version = args.vllm_version
    if real_vllm_version() != version:
        sys.stderr.write(f"conformance: this process imports vLLM {real_vllm_version()}, not "
                         f"{version}; give --vllm-overlay DIR, built by python -m "
                         f"checker.conformance.vllm_overlay {version} DIR\n")
        return EXIT_UNAVAILABLE
    return in_turn(modes_of(args), lambda name: _run_mode(MODES[name], args, version))


def _run_mode(mode: Mode, args: argparse.Namespace, version: str) -> int:
    """Compare one mode's workloads (`args.count` from `args.seed`) and print its report:
    EXIT_OK, or EXIT_DIVERGED with the first divergence shrunk."""
    from checker.conformance.compare import compare_run, steps_agreeing
    from checker.conformance.generate import at_release, run_features, workload_features
    from checker.conformance.vllm_real import run_real_vllm_detailed

    start = time.monotonic()
    steps_compared = steps_agreed = workloads_agreed = 0
    first: tuple[int, Workload] | None = None
    workloads = [mode.generate(args.seed + i, args.steps) for i in range(args.count)]
    seeds = list(range(args.seed, args.seed + args.count))
    if version != VLLM_VERSION:
        workloads = [at_release(w, version) for w in workloads]
        workloads, seeds = _modelled(workloads, seeds, version)
    features: dict[str, int] = {f: 0 for f in mode.features}
    for i, w in enumerate(workloads):
        run = run_real_vllm_detailed(w)
        divergence = compare_run(run.effective(w), run)
        if mode.report_features:
            for f in workload_features(w) | run_features(w, run.records, run.events):
                if f in features:
                    features[f] += 1
        compared, agreed = steps_agreeing(w, divergence)
        steps_compared += compared
        steps_agreed += agreed
        if divergence is None:
            workloads_agreed += 1
            continue
        print(f"seed {seeds[i]}: {divergence.summary()}")
        if first is None:
            first = (seeds[i], divergence.workload)
    elapsed = time.monotonic() - start
    print(f"compared {len(workloads)} workloads ({steps_compared} steps) against vLLM "
          f"{version}'s real {mode.scheduler} in {elapsed:.1f} s (mode {mode.name}: "
          f"{mode.what})")
    print(f"workloads agreeing: {workloads_agreed}/{len(workloads)} "
          f"({100.0 * workloads_agreed / max(1, len(workloads)):.1f}%); steps agreeing: "
          f"{steps_agreed}/{steps_compared} ({100.0 * steps_agreed / max(1, steps_compared):.1f}%)")
    if mode.report_features and not args.coverage:
        print("workload and run features (workloads having each):")
        for name, n in features.items():
            print(f"  {n:5d}  {name}")
    if args.coverage:
        _print_coverage(mode, workloads)
    if first is None:
        return EXIT_OK
    seed, workload = first
    _print_minimal(seed, workload, shrink_it=not args.no_shrink)
    return EXIT_DIVERGED


def _modelled(workloads: list[Workload], seeds: list[int], version: str
              ) -> tuple[list[Workload], list[int]]:
    """The workloads (and their seeds) the model takes at `version`; the others, which its
    validation refuses as not modelled there (an InputError, e.g. 0.27.1's AsyncScheduler
    with speculative decoding and prefix caching), are counted and named on one line."""
    from model.core.errors import InputError
    from model.vllm.validation import check_field_types

    kept: list[tuple[Workload, int]] = []
    reason = ""
    for w, seed in zip(workloads, seeds, strict=True):
        try:
            check_field_types(w.config)
        except InputError as exc:
            reason = reason or str(exc)
            continue
        kept.append((w, seed))
    if len(kept) < len(workloads):
        print(f"skipped {len(workloads) - len(kept)} of {len(workloads)} workloads that vLLM "
              f"{version}'s model refuses: {reason}")
    return [w for w, _ in kept], [seed for _, seed in kept]


def compare_effective(workload: Workload) -> Divergence | None:
    """`compare`, with the workload's speculative choices as the real run applied them
    (`RealRun.effective`: accepted counts at most the drafts scheduled, drafts only for
    requests just run): the generator draws them without running a scheduler, as it draws
    EOS entries. Without speculative decoding it is `compare`."""
    from checker.conformance.compare import compare_run
    from checker.conformance.vllm_real import run_real_vllm_detailed

    run = run_real_vllm_detailed(workload)
    return compare_run(run.effective(workload), run)


def _fewer_choices(w: Workload) -> Iterator[Workload]:
    """One accepted or drafts entry fewer, or an accepted count one lower; one KV load
    report or external hit fewer, or a hit one token shorter (the shrinker's moves do not
    touch them)."""
    for i, e in enumerate(w.accepted):
        yield replace(w, accepted=w.accepted[:i] + w.accepted[i + 1:])
        if e.count > 1:
            yield replace(w, accepted=(*w.accepted[:i], replace(e, count=e.count - 1),
                                       *w.accepted[i + 1:]))
    for i in range(len(w.drafts)):
        yield replace(w, drafts=w.drafts[:i] + w.drafts[i + 1:])
    for i in range(len(w.kv_loads)):  # a KV connector's load reports and hits
        yield replace(w, kv_loads=w.kv_loads[:i] + w.kv_loads[i + 1:])
    for i, h in enumerate(w.kv_hits):
        yield replace(w, kv_hits=w.kv_hits[:i] + w.kv_hits[i + 1:])
        if h.tokens > 0:
            yield replace(w, kv_hits=(*w.kv_hits[:i], replace(h, tokens=h.tokens - 1),
                                      *w.kv_hits[i + 1:]))


def _without_strays(w: Workload) -> Workload:
    """`w` without accepted/drafts/KV connector entries naming a request the shrinker
    removed."""
    ids = {r.id for r in w.requests}
    return replace(w, accepted=tuple(e for e in w.accepted if e.id in ids),
                   drafts=tuple(e for e in w.drafts if e.id in ids),
                   kv_hits=tuple(h for h in w.kv_hits if h.id in ids),
                   kv_loads=tuple(e for e in w.kv_loads if e.id in ids))


def shrink_divergence(workload: Workload, max_calls: int = 3000) -> Workload:
    """The shrinker's minimal workload on which the divergence persists, then with the
    speculative choices shrunk too (greedily, one entry or one count at a time)."""
    from checker.conformance.shrink import shrink

    def fails(w: Workload) -> bool:
        return compare_effective(_without_strays(w)) is not None

    current = _without_strays(shrink(workload, fails, max_calls))
    changed = True
    while changed:
        changed = False
        for candidate in _fewer_choices(current):
            if fails(candidate):
                current, changed = candidate, True
                break
    return current


def _print_minimal(seed: int, workload: Workload, shrink_it: bool) -> None:
    if shrink_it:
        workload = shrink_divergence(workload)
    divergence = compare_effective(workload)
    assert divergence is not None  # shrink keeps the predicate true
    what = "minimal" if shrink_it else "first"
    print(f"\n{what} diverging workload (from seed {seed}):")
    print(json.dumps(workload_to_json(divergence.workload), indent=None))
    print()
    print(divergence.render(), end="")


def _print_coverage(mode: Mode, workloads: Sequence[Workload]) -> None:
    from checker.conformance.branches import branches_for, missing_reachable, trace, where
    from checker.conformance.generate import run_features, workload_features

    branches = branches_for(mode.branch_sets)
    counts: Counter[str] = Counter({b.name: 0 for b in branches})
    features: dict[str, int] = {f: 0 for f in mode.features}
    for w in workloads:
        taken, run = trace(w, branches)
        counts.update(taken)
        for f in (workload_features(w) | run_features(w, run.records, run.events)):
            if f in features:
                features[f] += 1
    print("\nupstream branches reached (workloads taking each, line-traced in vLLM; "
          "'event': a condition the driver's probe or the records show, at that line):")
    for b in branches:
        how = (" [event]" if b.event else " [in a call with a hit]" if b.context == "hit"
               else " [in update_from_output]" if b.context else "")
        note = f"  [unreachable: {b.unreachable}]" if b.unreachable else ""
        print(f"  {counts[b.name]:5d}  {b.name:40} {where(b.name, branches):48} "
              f"{b.what}{how}{note}")
    print("workload and run features (workloads having each):")
    for name, n in features.items():
        print(f"  {n:5d}  {name}")
    missing = missing_reachable(counts, branches) + tuple(
        f for f, n in features.items() if n == 0)
    print(f"not reached: {', '.join(missing) if missing else 'none'}")


if __name__ == "__main__":
    raise SystemExit(main())
