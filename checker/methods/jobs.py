"""One check = one job (engine x property x config x method), a pure function of its
arguments, so jobs can run in a process pool here or on a cluster engine elsewhere."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from checker.methods import bmc, explore, induction, theorems
from checker.methods.replay import DivergenceError, ReplayResult, replay
from checker.methods.symbolic import (
    Bounds,
    Family,
    abstracted,
    beyond_symbolic,
    carried,
    restore,
    without_carried,
)
from checker.methods.theorems import counted_refinement
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED, Counterexample, Verdict
from model import registry as engines
from model.core.engine import EngineModel
from model.core.types import Workload
from properties import catalogue
from properties.manifest import NamedConfig


@dataclass(frozen=True, slots=True)
class Job:
    """What to check.

    A job carries what its names resolve to, each looked up once on first use: `prop`
    (the catalogue's property of `property` and `params`), `family` (its config's family,
    whose `model` is the engine's EngineModel) and `model`. They are no part of the job's
    equality, not shown and not pickled: a worker that unpickles a job looks them up again
    once. `replace` carries them over (and a changed name or config is looked up anew).
    """

    engine: str
    property: str
    params: tuple[tuple[str, int], ...]
    config: NamedConfig
    expected: str | None
    timeout_s: float
    max_k: int = 2
    method: str = "bmc"  # "bmc" (theorem, induction, then BMC) | "explore" | "auto"
    explorer: str = "auto"  # with "explore" (or "auto" searching by it): one of EXPLORERS
    search: str = "bmc"  # with "auto": the bounded search after the proofs, one of SEARCHES
    slow_proofs: bool = False  # try k-induction where its invariant's proof takes minutes
    _prop: tuple[object, catalogue.Property] | None = field(default=None, compare=False, repr=False)
    _family: tuple[NamedConfig, Family] | None = field(default=None, compare=False,
                                                       repr=False)

    @property
    def prop(self) -> catalogue.Property:
        """The job's property, looked up in the catalogue on first use only."""
        return carried(self, "_prop", (self.property, self.params),
                       lambda: catalogue.get(self.property, **dict(self.params)))

    @property
    def family(self) -> Family:
        """The config family of the job's symbolic queries (`family_of`), made once."""
        return carried(self, "_family", self.config, lambda: family_of(self.config))

    @property
    def model(self) -> EngineModel:
        """The job's engine: its family's model (the registry looked up once per job)."""
        family = self.family
        return family.model if family.engine == self.engine else engines.get(self.engine)

    def __getstate__(self) -> list[object]:
        return without_carried(self, ("_prop", "_family"))

    def __setstate__(self, state: Sequence[object]) -> None:
        restore(self, state)


#: Which explorer an explore job runs: `auto` the array explorer where it searches the
#: job's config and bounds exactly (`checker.methods.array.unsupported`), numpy is
#: installed and the environment is large enough to repay its set-up (`_small`), else the
#: reference explorer; `array` only the array explorer (UNKNOWN, with why, where it does
#: not apply); `reference` only the reference explorer.
EXPLORERS = ("auto", "array", "reference")
ARRAY, REFERENCE = "array", "reference"
# The array explorer spends 1.5-2 s per config proving its reductions with z3 before it
# searches; measured on the vLLM manifest's 15 explore groups (closing note of stop 25),
# the reference explorer was faster on every group below 3 requests or 1000 orders of
# arrival kinds (kinds ** requests), the array explorer on every group above (1.3x-5x).
ARRAY_MIN_SLOTS, ARRAY_MIN_ARRIVALS = 3, 1000
# Fewer slots repay it too when each step offers many more arrival orders: tiny_cached (2
# slots of 105 kinds, 11025 orders) took the reference explorer 63 s and the array
# explorer 1.0 s with its proofs stored, 27.7 s proving them first (load 3-6;
# bench/explore_modes.py, docs/bench_scale.md).
ARRAY_MANY_ARRIVALS = 10_000

#: The bounded searches a job of method "auto" may run once no unbounded proof decided
#: it: BMC, or the explorer where the manifest config records it as the faster one
#: (`bounded_method`, measured by bench/suite_methods.py). Both are sound and reach the
#: same verdicts, depths and least counterexamples (`check --method both` enforces it).
SEARCHES = ("bmc", "explore")
SEARCH_NOTE = ("searched by the explorer: the faster bounded search on this config "
               "(the manifest's bounded_method, bench/suite_methods.py)")


@dataclass(frozen=True, slots=True)
class JobResult:
    """A verdict and, when violated, the counterexample and its replay on the reference."""

    verdict: Verdict
    counterexample: Counterexample | None = None
    replayed: ReplayResult | None = None


def family_of(nc: NamedConfig) -> Family:
    """The config family a named config's symbolic queries range over."""
    return Family(base=nc.config, ranges=nc.ranges, validated=nc.validated, engine=nc.engine)


def symbolic_bounds(nc: NamedConfig) -> Bounds:
    """The bounds of a named config's symbolic queries."""
    return Bounds(**dict(nc.bounds))


def run_batch(jobs: list[Job]) -> list[JobResult]:
    """Run jobs in this process, results in job order. Jobs of one config share the
    invariant proof; explore jobs of step properties on one config share one exploration,
    and so do the "auto" jobs that no proof decided and that search by the explorer."""
    out: list[JobResult | None] = [None] * len(jobs)
    explore_jobs: dict[int, Job] = {}
    proof_notes: dict[int, tuple[list[str], float]] = {}
    for i, job in enumerate(jobs):
        outside = outside_property(job)
        only = reference_only(job)
        if outside is not None:
            out[i] = _with_params(JobResult(_verdict(job, time.monotonic(), UNKNOWN, 0,
                                                     outside, job.method)), job)
        elif only is not None and job.method != "explore":
            if job.method == "auto":  # the reference explorer is the one search that applies
                explore_jobs[i] = replace(job, method="explore", explorer=REFERENCE)
                proof_notes[i] = ([f"searched by the reference explorer: {only}"], 0.0)
            else:
                out[i] = _with_params(JobResult(_verdict(job, time.monotonic(), UNKNOWN, 0,
                                                         only, job.method)), job)
        elif only is not None and job.explorer != REFERENCE:
            explore_jobs[i] = replace(job, explorer=REFERENCE)
        elif job.method == "explore":
            explore_jobs[i] = job
        elif job.method == "auto":
            start = time.monotonic()
            proved, notes = _proofs(job, start)
            if proved is not None:
                out[i] = _with_params(proved, job)
            elif job.search == "explore":
                explore_jobs[i] = replace(job, method="explore")
                proof_notes[i] = ([SEARCH_NOTE, *notes], time.monotonic() - start)
            else:
                out[i] = _with_params(_bmc_search(job, notes, start), job)
    shared: dict[tuple[object, ...], list[int]] = {}
    for i, job in explore_jobs.items():
        step = job.prop.kind == "step"
        # One exploration serves every step property of a config; any other kind its own.
        shared.setdefault((job.engine, job.config, job.timeout_s) if step else (i,),
                          []).append(i)
    for indices in shared.values():
        for i, res in zip(indices, run_explore_shared([explore_jobs[i] for i in indices]),
                          strict=True):
            out[i] = _after_proofs(res, *proof_notes[i]) if i in proof_notes else res
    return [res if res is not None else run(job) for job, res in zip(jobs, out, strict=True)]


#: Properties whose statement counts a request's blocks as one full-attention table's
#: (cdiv(tokens, block_size)): on a config with KV cache groups (Mamba state blocks,
#: sliding windows) that count is not the engine's need, so a verdict would be about
#: another engine. The rules and the reference run the groups; these statements do not.
#: "Fits" in the head-of-line and unchunked statements (properties/hazards.py
#: `_would_be_admitted`, `_unchunked_head_refused`; catalogue.py `_fits_alone`) is that count.
ONE_GROUP_STATEMENTS = frozenset({"no_spurious_preemption", "head_of_line",
                                  "head_of_line_blocking", "unchunked_prefill_blocked"})


def reference_only(job: Job) -> str | None:
    """Why only the reference scheduler covers `job`'s config (EngineModel.reference_only),
    or None."""
    why = job.model.reference_only
    return None if why is None else why(job.config.config)


def outside_property(job: Job) -> str | None:
    """Why `job`'s property, as stated, does not speak of its config (UNKNOWN), or None."""
    if job.property in ONE_GROUP_STATEMENTS and getattr(job.config.config, "hybrid_kv",
                                                        False):
        return (f"outside the property: {job.property} counts a request's blocks as one "
                "full-attention table's; this config has KV cache groups (Mamba state "
                "blocks, sliding windows), whose need it does not state")
    return None


def run(job: Job) -> JobResult:
    """Decide one property with the job's method: "bmc" `run_bmc`, "explore"
    `run_explore`, "auto" the proofs of `run_bmc`, then the job's `search`; UNKNOWN for
    a property whose statement does not speak of the config (`outside_property`), which
    `run_batch` answers."""
    if job.method == "auto" or outside_property(job) is not None \
            or reference_only(job) is not None:
        return run_batch([job])[0]
    result = run_explore(job) if job.method == "explore" else run_bmc(job)
    return _with_params(result, job)


def _with_params(result: JobResult, job: Job) -> JobResult:
    return replace(result, verdict=replace(result.verdict, params=job.params))


def _after_proofs(result: JobResult, notes: list[str], seconds: float) -> JobResult:
    """An exploration's result after the proofs that did not decide its job: their time
    added, their notes said."""
    v = result.verdict
    detail = "; ".join([v.detail, *notes]) if v.detail else "; ".join(notes)
    return replace(result, verdict=replace(v, seconds=v.seconds + seconds, detail=detail))


def array_unsupported(nc: NamedConfig, family: Family | None = None) -> str | None:
    """None when the array explorer searches `nc`'s config and bounds exactly (the same
    environment, verdicts and least counterexamples as the reference explorer), else why
    not: numpy missing, or what `checker.methods.array.unsupported` names. `family` is
    `nc`'s family when the caller has it (`family_of(nc)` otherwise)."""
    try:
        from checker.methods import array as ax
    except ImportError as exc:
        return str(exc)
    return ax.unsupported(family or family_of(nc), symbolic_bounds(nc))


def array_searches(nc: NamedConfig) -> bool:
    """Whether the array explorer searches `nc`'s environment exactly and is the faster
    explorer there (what `explorer_of` picks under `auto`)."""
    family = family_of(nc)
    if _cold_proofs_cost_minutes(family):
        return False
    return array_unsupported(nc, family) is None and not _small(family, symbolic_bounds(nc))


def _cold_proofs_cost_minutes(family: Family) -> bool:
    """With the prefix cache or the AsyncScheduler on, the array explorer's reduction
    proofs take 0.5-3 minutes per rule config before they are stored (issue 29's cross-
    check, docs/bench_scale.md), where BMC (with the cache exact or counted) answers a
    question in seconds: `auto` leaves the array explorer to `--method explore`."""
    base = family.base
    return bool(getattr(base, "enable_prefix_caching", False)
                or getattr(base, "async_scheduling", False))


def explorer_of(job: Job) -> tuple[str, str]:
    """(the explorer `job` runs, why the reference one when `auto` cannot use the array
    one); raises ValueError for an explorer not in EXPLORERS."""
    if job.explorer not in EXPLORERS:
        raise ValueError(f"explorer {job.explorer!r}: choose one of {', '.join(EXPLORERS)}")
    if job.explorer == REFERENCE:
        return REFERENCE, ""
    why = array_unsupported(job.config, job.family)
    if job.explorer == ARRAY:
        return ARRAY, why or ""
    if why is None:
        why = _small(job.family, symbolic_bounds(job.config))
    return (REFERENCE, why) if why else (ARRAY, "")


def _small(family: Family, bounds: Bounds) -> str:
    """Why the reference explorer is the faster one on the family's environment ("" if
    not)."""
    kinds = len(explore.menu(bounds, family.model.rule_config(family.base)))
    arrivals = kinds ** bounds.slots
    if arrivals >= ARRAY_MIN_ARRIVALS and (bounds.slots >= ARRAY_MIN_SLOTS
                                           or arrivals >= ARRAY_MANY_ARRIVALS):
        return ""
    return (f"a small environment, {bounds.slots} request(s) of {kinds} kinds: the array "
            "explorer's set-up proofs would cost more than the search")


def run_explore(job: Job) -> JobResult:
    """Explicit-state exploration to the bounds (`explorer_of`: the array explorer over
    the rules, or the reference explorer): VIOLATED (shortest, the least workload,
    replayed on the reference) or HOLDS up to the depth; UNKNOWN on a limit."""
    return run_explore_shared([job])[0]


def run_explore_shared(jobs: list[Job]) -> list[JobResult]:
    """Explore jobs of one config and bounds in one exploration (step properties; a
    single job of any kind)."""
    props = [j.prop for j in jobs]
    first = jobs[0]
    family, bounds = first.family, symbolic_bounds(first.config)
    which, why = explorer_of(first)
    # Both explorers' environments choose arrivals and EOS only: a KV connector's hits and
    # load reports would be none, so a search there decides nothing about them.
    refused = ("the explorers have no KV connector environment (hits, load reports); BMC "
               "searches it (--method bmc)" if getattr(family.base, "kv_connector", False)
               else f"the array explorer does not apply: {why}" if which == ARRAY and why
               else "")
    if refused:
        none = explore.ExploreStats(0, 0, 0, 0.0, 0)
        results = tuple(explore.ExploreResult("unknown", 0, none, reason=refused)
                        for _ in props)
    elif which == ARRAY:
        from checker.methods import array as ax

        results = ax.check_many(props, family, bounds, first.timeout_s)
    elif len(props) == 1:
        results = (explore.check(props[0], family, bounds, first.timeout_s),)
    else:
        results = explore.check_many(props, family, bounds, first.timeout_s)
    label = ("array explorer" if which == ARRAY else
             f"reference explorer ({why})" if why else "reference explorer")
    out = []
    for job, result in zip(jobs, results, strict=True):
        res = explored(job, result)
        v = res.verdict
        detail = f"{label}; {v.detail}" if v.detail else label
        out.append(replace(res, verdict=replace(v, params=job.params, detail=detail)))
    return out


def explored(job: Job, result: explore.ExploreResult) -> JobResult:
    """The JobResult of an exploration: its verdict, and a violation's replay."""
    stats = result.stats
    detail = (f"{stats.states} states, {stats.transitions} transitions, "
              f"{stats.states_per_second:.0f} states/s, {stats.kinds} request kinds"
              + (f" ({stats.note})" if stats.note else ""))

    def verdict(v: str, why: str) -> Verdict:
        return Verdict(job.engine, job.property, job.config.name, "explore", v, result.depth,
                       stats.seconds, job.expected, None, why)

    if result.status == "holds":
        return JobResult(verdict(HOLDS, detail))
    if result.status == "unknown":
        return JobResult(verdict(UNKNOWN, f"{result.reason}; {detail}"))
    assert result.workload is not None
    cex = _counterexample(job, result.workload, "explore", result.depth, result.loop)
    try:
        replayed = replay(cex, job.prop, job.model)
    except DivergenceError as exc:
        return JobResult(verdict(UNKNOWN, f"divergence: {exc}"), cex)
    return JobResult(verdict(VIOLATED, f"replayed on the reference; {detail}"), cex, replayed)


def run_bmc(job: Job) -> JobResult:
    """Decide one property: a closed-form theorem or k-induction gives PROVED; otherwise
    BMC gives VIOLATED (minimal, replayed) or HOLDS up to its depth; UNKNOWN otherwise."""
    start = time.monotonic()
    proved, notes = _proofs(job, start)
    return proved if proved is not None else _bmc_search(job, notes, start)


def _verdict(job: Job, start: float, v: str, depth: int, detail: str, method: str
             ) -> Verdict:
    return Verdict(job.engine, job.property, job.config.name, method, v, depth,
                   time.monotonic() - start, job.expected, None, detail)


def _proofs(job: Job, start: float) -> tuple[JobResult | None, list[str]]:
    """PROVED by the engine's closed-form theorem or by k-induction, or None with why
    each did not decide (the notes the bounded search's verdict carries)."""
    prop, family, bounds = job.prop, job.family, symbolic_bounds(job.config)
    notes = []
    engine = job.model
    theorem = theorems.for_engine(engine).get(job.property)
    if theorem is not None and not theorem.speaks_of(prop):
        notes.append("theorem does not apply: the property's definition is not the one it "
                     "proves")
        theorem = None
    broken = theorem.broken(family) if theorem is not None else ()
    if theorem is not None and broken:
        notes.append("theorem does not apply: " + "; ".join(p.text for p in broken))
    elif theorem is not None:
        th = theorem.prove(job.timeout_s)
        if th.proved:
            return JobResult(_verdict(job, start, PROVED, 0, th.detail, "theorem")), notes
        notes.append(f"theorem not proved ({th.detail})")
    counted = _counted_induction(job, family, bounds, start, notes)
    if counted is not None:
        return counted, notes
    slow = engine.invariant_quick is not None and not engine.invariant_quick(
        engine.rule_config(family.base))
    if slow and not job.slow_proofs and prop.kind == "step":
        notes.append("induction not tried: the invariant's proof over this prefix-cache "
                     "pool takes minutes (--method induction tries it)")
    elif beyond_symbolic(family, bounds) is None and prop.kind == "step" \
            and engine.well_formed is not None:
        # The full timeout, not what is left, so the cached proof is shared across jobs.
        wf = induction.prove_well_formed(family, bounds, job.timeout_s)
        if wf.proved:
            remaining = job.timeout_s - (time.monotonic() - start)
            ind = induction.prove(prop, family, bounds, job.max_k, remaining)
            if ind.proved:
                return JobResult(_verdict(
                    job, start, PROVED, ind.k, f"{ind.k}-induction on {bounds.slots} slots, "
                    "all request lengths", "induction")), notes
            notes.append(f"induction: {ind.reason}")
        else:
            notes.append(f"invariant: {wf.reason}")
    return None, notes


def _counted_induction(job: Job, family: Family, bounds: Bounds, start: float,
                       notes: list[str]) -> JobResult | None:
    """PROVED by k-induction over the engine's abstracted rules (Family.counted: e.g.
    vLLM's prefix cache counted, at any pool size), which over-approximate the exact
    ones; None (with a note) where there is no abstraction or it does not prove."""
    engine, prop = job.model, job.prop
    if prop.kind != "step" or engine.abstract_config is None or engine.well_formed is None:
        return None
    base = engine.rule_config(family.base)
    abstract = engine.abstract_config(base)
    if abstract == base:  # nothing to abstract: the exact proof
        return None
    fam = replace(family, counted=True)
    wf = induction.prove_well_formed(fam, bounds, job.timeout_s)
    if not wf.proved:
        notes.append(f"invariant over the counted cache: {wf.reason}")
        return None
    ind = induction.prove(prop, fam, bounds, job.max_k,
                          job.timeout_s - (time.monotonic() - start))
    if not ind.proved:
        notes.append(f"induction over the counted cache: {ind.reason}")
        return None
    why = engine.abstraction(abstract) if engine.abstraction is not None else None
    refined = counted_refinement.evidence(engine.abstract_config,
                                          job.timeout_s - (time.monotonic() - start))
    return JobResult(_verdict(
        job, start, PROVED, ind.k, f"{ind.k}-induction on {bounds.slots} slots, all request "
        f"lengths, over the engine's abstracted rules ({why or 'an over-approximation'}; "
        f"{refined})", "induction"))


def _bmc_search(job: Job, notes: list[str], start: float) -> JobResult:
    """BMC after the proofs: VIOLATED (minimal, replayed; or carried over from the
    engine's cheaper witness config), HOLDS up to its depth, or UNKNOWN."""
    prop, family, bounds = job.prop, job.family, symbolic_bounds(job.config)

    def verdict(v: str, depth: int, detail: str) -> Verdict:
        return _verdict(job, start, v, depth, detail, "bmc")

    too_big = beyond_symbolic(family, bounds)
    if too_big is not None:
        carried = _carried_over(job, prop, family, bounds, start, share=1.0)
        return carried or JobResult(verdict(UNKNOWN, 0, "; ".join([too_big, *notes])))
    counted = abstracted(family, bounds)
    if counted is None:
        carried = _carried_over(job, prop, family, bounds, start)
        if carried is not None:
            return carried
    # Over a counted pool (an over-approximation, `abstracted`) HOLDS carries over to the
    # exact rules and a witness only once the exact reference confirms it.
    said = [] if counted is None else [counted]
    remaining = job.timeout_s - (time.monotonic() - start)
    result = bmc.check(prop, family, bounds, remaining, stated_limit_s=job.timeout_s)
    if result.status == "holds":
        if counted is not None:  # what the carry-over rests on: the z3 refinement, or runs
            said.append(counted_refinement.evidence(job.model.abstract_config,
                                                    job.timeout_s - (time.monotonic() - start)))
        return JobResult(verdict(HOLDS, result.depth, "; ".join([*said, *notes])))
    if result.status == "unknown":
        # what the proofs before it could not decide, too: an invariant whose proof took
        # the time names the conjuncts it left undecided
        return JobResult(verdict(UNKNOWN, result.depth,
                                 "; ".join([result.reason, *said, *notes])))
    assert result.workload is not None
    cex = _counterexample(job, result.workload, "bmc", result.depth, result.loop,
                          result.minimal)
    try:
        replayed = replay(cex, prop, job.model)
    except DivergenceError as exc:
        if counted is None:
            return JobResult(verdict(UNKNOWN, result.depth, f"divergence: {exc}"), cex)
        carried = _carried_over(job, prop, family, bounds, start, share=1.0)
        return carried or JobResult(verdict(UNKNOWN, result.depth, "; ".join([
            f"the counted cache's witness (depth {result.depth}) is not one of the exact "
            f"pool's: {exc}", counted, *notes])))
    what = ("found with the prefix cache counted, replayed on the reference with the exact "
            "pool: minimal among all workloads" if counted else "replayed on the reference")
    note = "" if result.minimal else "; not minimised (minimisation hit the time limit)"
    note += "".join("; " + n for n in notes)
    return JobResult(verdict(VIOLATED, result.depth, what + note), cex, replayed)


def _carried_over(job: Job, prop: catalogue.Property, family: Family, bounds: Bounds,
                  start: float, share: float = 0.5) -> JobResult | None:
    """A witness found on the engine's cheaper witness config (e.g. prefix caching off),
    kept when the reference with the job's own config fails at the same step: a VIOLATED
    of the full config, minimal among the cheaper config's workloads only. None when there
    is no cheaper config, it finds nothing, or its witness does not carry over."""
    engine = job.model
    cheaper = engine.witness_config(family.base) if engine.witness_config else None
    if cheaper is None:
        return None
    remaining = job.timeout_s - (time.monotonic() - start)
    # Half the time when the full search follows, so that it keeps the other half.
    result = bmc.check(prop, replace(family, base=cheaper), bounds, remaining * share)
    if result.status != "violated" or result.workload is None:
        return None
    cex = _counterexample(job, replace(result.workload, config=family.base), "bmc",
                          result.depth, result.loop, minimal=False)
    try:
        replayed = replay(cex, prop, engine)
    except DivergenceError:
        return None
    return JobResult(Verdict(
        job.engine, job.property, job.config.name, "bmc", VIOLATED, result.depth,
        time.monotonic() - start, job.expected, None,
        "found on the rules of a cheaper config (prefix caching off: its requests share no "
        "prefix), replayed on the reference with the job's config: the same violation; "
        "minimal among those workloads only"), cex, replayed)


def _counterexample(job: Job, workload: Workload, method: str, violated_at: int,
                    loop: int | None, minimal: bool = True) -> Counterexample:
    """The job's counterexample of `workload`, found by `method`."""
    return Counterexample(
        engine=job.engine, property=job.property, params=job.params,
        config_name=job.config.name, workload=workload, method=method,
        bounds=tuple(sorted(dict(job.config.bounds).items())), violated_at=violated_at,
        loop=loop, minimal=minimal)
