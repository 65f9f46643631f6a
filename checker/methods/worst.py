"""The worst case of a metric within the bounds (`batchproof worst`, issue 18 item 4).

A metric is a ladder of one catalogue property that is monotone in its parameter: rung v
asks "does some run reach metric value v?", which is that property VIOLATED with the
rung's parameter. The worst value is the largest v whose rung is VIOLATED while rung v+1
HOLDS (or is PROVED) to the full depth; the witness is rung v's minimal counterexample
(found by BMC, replayed on the reference), the bound is rung v+1's verdict.

- `starvation_steps`: rung v is `starvation` with k=v (a waiting request gets 0 tokens v
  steps in a row). Within depth D no window longer than D fits, so rung D+1 holds
  whatever the scheduler does: when the ladder reaches D, the bound is the depth's.
- `preemptions`: rung v is `repeated_preemption` with m=v-1 (a request is preempted more
  than v-1 times, i.e. v times); the bound is m=v HOLDS.

Strategies (`STRATEGIES`):

- `explore`: every rung 1..D+1 in one breadth-first search of the array explorer
  (checker/methods/array, `check_many`: the rungs share one state space, each reports its
  first violating depth; the violated ones are searched once more for their least run), so
  the whole ladder costs one exhaustive exploration within the bounds. The worst value is
  the largest violated rung; the rungs must be monotone (all below violated, all above
  holding), else the answer is undecided. Both ends are then asked of BMC: the bound's
  rung must hold to the full depth (PROVED or HOLDS(D), the job function of `check`), and
  the witness must be BMC's least counterexample (`confirm_least`: no violation at a
  smaller depth, the witness violates on the rules, no smaller run in minimize.py's order
  violates; three Z3 queries in place of BMC's Optimize-based minimisation, which the
  reference figure's witness takes 8x longer to run; if one fails, BMC's own search runs
  and the comparison says where the two differ).
- `scan` / `binary`: the ladder on BMC (`checker/methods/jobs.run`, method "bmc"), as an
  upward scan (v = 1, 2, ... until a rung holds) or a binary search over 1..D+1; both ends
  are then asked again of the explorer on the same bounds.
- `auto` (the default): `explore` where the array explorer models the engine, config and
  bounds (`checker.methods.array.unsupported`: vLLM V1 without prefix caching, the
  AsyncScheduler or speculative decoding), else `scan`.

The explorer is the array explorer where it applies and the reference explorer
(checker/methods/explore.py) otherwise; either's violations are replayed on the reference
(`jobs.explored`). The two methods must agree (checker/methods/agreement). A rung that
neither holds nor is violated, or holds only to a smaller depth, leaves the answer a range:
at least the last violated value. The witness is BMC's least counterexample of the top
violated rung (the explorer's when BMC did not decide it), replayed on the reference; it
is minimal in checker/methods/minimize.py's order unless its verdict says "not minimised".

Beyond the depth (`explore_unbounded`): when the answer is decided with the array explorer
and the bounds have an arrival window, the bound's rung is searched once more by the array
explorer alone with no depth limit. Its states forget the step once no request can arrive,
so the search ends when no new state appears, having visited every state of every run of
any length: `closed_at` (the last layer) then says the bound holds for runs of every
length, or `beyond` carries the longer run that violates it (replayed on the reference).
BMC does not confirm this part: it unrolls to the depth only."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from checker.methods import agreement
from checker.methods.jobs import (
    Job,
    JobResult,
    array_unsupported,
    explored,
    run,
    symbolic_bounds,
)
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED, Verdict
from model.core.types import Workload
from properties.manifest import NamedConfig

DECIDED, DISAGREE, UNDECIDED = "decided", "disagree", "undecided"
STRATEGIES = ("auto", "explore", "scan", "binary")
ARRAY, REFERENCE = "array", "reference"  # which explorer asks the explorer's rungs
UNBOUNDED = "array-unbounded"  # a rung's method: the array explorer with no depth limit


@dataclass(frozen=True, slots=True)
class Metric:
    """A metric as a ladder: rung v (v >= 1) is `property` with `param` = v - offset."""

    name: str
    property: str
    param: str
    offset: int
    unit: str  # what the value counts, for people
    depth_bounded: bool  # rung D+1 holds at depth D whatever the scheduler does

    def params(self, value: int) -> tuple[tuple[str, int], ...]:
        """The property's parameters of rung `value`."""
        return ((self.param, value - self.offset),)

    def rung(self, value: int) -> str:
        """'starvation k=3': the question rung `value` asks."""
        return f"{self.property} {self.param}={value - self.offset}"


METRICS: dict[str, Metric] = {
    "starvation_steps": Metric("starvation_steps", "starvation", "k", 0,
                               "consecutive steps a waiting request gets 0 tokens", True),
    "preemptions": Metric("preemptions", "repeated_preemption", "m", 1,
                          "times one request is preempted", False),
}


@dataclass(frozen=True, slots=True)
class Rung:
    """One check of the ladder: the value it asks about, the method, its result. `method`
    is "bmc", "explore" (the reference explorer), "array" (the array explorer) or
    "array-unbounded" (the array explorer with no depth limit); rungs
    with the same `search` > 0 were answered by one shared search of `seconds`."""

    value: int
    method: str
    result: JobResult
    seconds: float
    search: int = 0

    @property
    def verdict(self) -> str:
        return self.result.verdict.verdict


@dataclass(frozen=True, slots=True)
class WorstResult:
    """The answer: `value` when decided, else `at_least` and why not more."""

    metric: Metric
    config: NamedConfig
    status: str  # DECIDED | DISAGREE | UNDECIDED
    at_least: int  # the largest value witnessed (0: none)
    value: int | None  # the worst value (DECIDED only)
    witness: JobResult | None  # rung at_least's witness (bmc's, else the explorer's)
    bound_bmc: JobResult | None  # rung value+1 by bmc
    bound_explore: JobResult | None  # rung value+1 by the explorer
    witness_explore: JobResult | None  # rung value by the explorer
    reason: str  # why undecided or disagreeing ('' when decided)
    depth_reached: bool  # the value is the depth: the bound is the bounds', not the engine's
    strategy: str  # the strategy run (auto resolved)
    rungs: tuple[Rung, ...] = field(default=())
    seconds: float = 0.0
    explorer: str = REFERENCE  # ARRAY | REFERENCE: which explorer confirmed
    explorer_note: str = ""  # why the reference explorer, when the array one does not apply
    closed_at: int | None = None  # the bound holds at every length: no new state after it
    beyond: JobResult | None = None  # the bound's rung violated past the depth (explorer)


def confirms(strategy: str) -> bool:
    """Whether a ladder run by `strategy` is asked again of the other method by default:
    BMC's ladders (`scan`, `binary`) are, by the explorer; the array explorer's (`explore`)
    is not, since it searched every run within the bounds exhaustively (cross-checked
    state for state against SPIN and verdict for verdict against the reference explorer;
    `--confirm` has BMC ask both ends too, which on docs/bench_scale.md's family F at
    depth 14 took 130 s of the run's 145 s)."""
    return strategy != "explore"


def _depth(nc: NamedConfig) -> int:
    return int(dict(nc.bounds).get("depth", 6))


def holds_fully(res: JobResult, depth: int) -> bool:
    """PROVED, or HOLDS up to the full depth."""
    v = res.verdict
    return v.verdict == PROVED or (v.verdict == HOLDS and v.depth >= depth)


def _said(res: JobResult) -> str:
    v = res.verdict
    text = f"{v.label} by {v.method}"
    return f"{text} ({v.detail})" if v.verdict == UNKNOWN and v.detail else text


def array_reason(nc: NamedConfig) -> str | None:
    """None when the array explorer searches `nc`'s config and bounds exactly, else why
    not (then the reference explorer confirms)."""
    return array_unsupported(nc)


def explore_many(jobs: Sequence[Job]) -> tuple[list[JobResult], int | None]:
    """The array explorer's results of several window/step rungs of one config and bounds,
    in one search (each violation replayed on the reference), and the layer after which its
    frontier emptied (None: it ran to the depth or stopped at a limit)."""
    from checker.methods import array as ax

    first = jobs[0]
    props = [j.prop for j in jobs]
    bounds = symbolic_bounds(first.config)
    results = ax.check_many(props, first.family, bounds, first.timeout_s)
    out = []
    for job, r in zip(jobs, results, strict=True):
        res = explored(job, r)
        v = res.verdict
        out.append(replace(res, verdict=replace(v, params=job.params,
                                                detail=f"array explorer; {v.detail}")))
    # A rung that holds means the search did not stop early for having found every
    # rung; with an arrival window the key forgets the step once no request can arrive,
    # so an empty frontier before the depth is a closed state graph.
    stats = results[0].stats
    closed = None
    if bounds.arrival_window > 0 and any(r.status == "holds" for r in results) \
            and all(r.status != "unknown" for r in results) \
            and stats.depth_reached < bounds.depth:
        closed = stats.depth_reached
    return out, closed


def _witness_vector(u: Any, w: Workload, depth: int) -> list[int]:
    """The values minimize.py's `objectives` take on the least model of workload `w`:
    its request count, per slot in arrival order its numbers (an unused slot at its least:
    arrival 0, prompt and max_tokens 1, the rest 0), the ranged config fields, then the EOS
    choices step by step (true only where `w` samples EOS)."""
    import z3

    by_id = {r.id: r for r in w.requests}
    out = [len(w.requests)]
    for i, spec in enumerate(u.specs):
        r = by_id.get(f"r{i}")
        values = (0, 1, 1, 0, 0, 0, 0) if r is None else (
            r.arrival_step, r.prompt_len, r.max_tokens, r.priority, r.cached_prefix_len, 0, 0)
        symbols = (spec.arrival_step, spec.prompt_len, spec.max_tokens, spec.priority,
                   spec.cached_prefix_len, spec.prefix_group, spec.shared_prefix_len)
        out += [v for x, v in zip(symbols, values, strict=True) if isinstance(x, z3.ArithRef)]
    out += [int(getattr(w.config, name)) for name in u.engine.ranged_fields
            if name in u.cfg_vars]
    eos = {(e.id, e.step) for e in w.eos}
    out += [int((f"r{i}", t + 1) in eos) for t in range(depth) for i in range(len(u.specs))]
    return out


def confirm_least(job: Job, found: JobResult,
                  fallback: Callable[[Job], JobResult] = run) -> JobResult:
    """BMC's check of the explorer's least witness of `job` (VIOLATED at depth d), in
    three Z3 queries on BMC's unrolling instead of BMC's own search and Optimize-based
    minimisation: no violation at depths 1..d-1; the witness itself violates at d on the
    rules (its numbers and EOS choices pinned); and no violating run at d is smaller in
    minimize.py's order (a lexicographic "less than" over `objectives`). All three passing
    is BMC's least counterexample being the witness: the result carries the witness, as
    BMC's. If any fails, BMC's own search (`fallback`, the job function) is run, so that
    the comparison shows where they differ; UNKNOWN on a solver limit."""
    import z3

    from checker.methods.bmc import gave_up, violation_at
    from checker.methods.minimize import objectives
    from checker.methods.solver import preprocessed
    from checker.methods.symbolic import (
        abstracted,
        beyond_symbolic,
        extend,
        new_unrolling,
    )

    start = time.monotonic()
    bmc_job = replace(job, method="bmc")
    d = found.verdict.depth
    cex = found.counterexample
    family, bounds = job.family, symbolic_bounds(job.config)

    def verdict(v: str, depth: int, detail: str) -> Verdict:
        return Verdict(job.engine, job.property, job.config.name, "bmc", v, depth,
                       time.monotonic() - start, job.expected, None, detail,
                       params=job.params)

    if cex is None or found.verdict.verdict != VIOLATED or family.ranges:
        return fallback(bmc_job)
    # Over an abstracted state the maximum would be an upper bound, not the exact one.
    too_big = beyond_symbolic(family, bounds) or abstracted(family, bounds)
    if too_big is not None:
        return JobResult(verdict(UNKNOWN, 0, too_big))
    prop = job.prop
    u = new_unrolling(family, bounds)
    solver = preprocessed()
    solver.add(*u.constraints)

    def ask(*goal: Any) -> Any:
        remaining = job.timeout_s - (time.monotonic() - start)
        if remaining <= 0:
            return z3.unknown
        solver.set(timeout=max(1, int(remaining * 1000)))
        return solver.check(*goal)

    for k in range(1, d + 1):
        solver.add(*extend(u))
        if k == d:
            break
        answer = ask(violation_at(prop, u, k))
        if answer == z3.unknown:
            return JobResult(verdict(UNKNOWN, k, gave_up(solver.reason_unknown(),
                                                          job.timeout_s, k)))
        if answer == z3.sat:
            return fallback(bmc_job)  # a shorter violation: BMC's own witness says which
    violation = violation_at(prop, u, d)
    objs = objectives(u)
    want = _witness_vector(u, cex.workload, d)
    if len(want) != len(objs):
        return fallback(bmc_job)
    pinned = ask(violation, *[o == v for o, v in zip(objs, want, strict=True)])
    smaller = z3.Or([z3.And(*[objs[j] == want[j] for j in range(i)], objs[i] < want[i])
                     for i in range(len(objs))])
    less = ask(violation, smaller) if pinned == z3.sat else pinned
    if z3.unknown in (pinned, less):
        return JobResult(verdict(UNKNOWN, d, gave_up(solver.reason_unknown(),
                                                     job.timeout_s, d)))
    if pinned != z3.sat or less != z3.unsat:
        return fallback(bmc_job)
    return JobResult(verdict(VIOLATED, d, f"confirmed the explorer's witness as BMC's least "
                             f"counterexample: no violation at depths 1..{d - 1}, the "
                             f"witness violates at {d} on the rules, no smaller run in "
                             "minimize.py's order violates there; replayed on the "
                             "reference"), cex, found.replayed)


def explore_unbounded(job: Job) -> tuple[JobResult, int | None]:
    """`job`'s rung by the array explorer with no depth limit (bounds with an arrival
    window only: the search ends when no new state appears); the result (VIOLATED at any
    step, replayed on the reference; HOLDS; UNKNOWN on a limit) and, when it holds, the
    number of layers the search took."""
    from checker.methods import array as ax
    from checker.methods.array import Options

    nc = job.config
    bounds = symbolic_bounds(nc)
    if bounds.arrival_window <= 0:
        raise ValueError("a search without a depth limit needs an arrival window")
    r = ax.check(job.prop, job.family, bounds, job.timeout_s,
                 options=Options(arrival_steps=bounds.arrival_window, exhaustive=True))
    res = explored(job, r)
    v = res.verdict
    res = replace(res, verdict=replace(v, params=job.params,
                                       detail=f"array explorer, no depth limit; {v.detail}"))
    closed = r.stats.depth_reached if r.status == "holds" else None
    return res, closed


def search(metric: Metric, nc: NamedConfig, timeout_s: float, strategy: str = "auto",
           confirm: bool | None = None, checker: Callable[[Job], JobResult] = run,
           many: Callable[[Sequence[Job]], tuple[list[JobResult], int | None]] | None = None,
           least: Callable[[Job, JobResult, Callable[[Job], JobResult]], JobResult]
           = confirm_least,
           unbounded: Callable[[Job], tuple[JobResult, int | None]] | None = None
           ) -> WorstResult:
    """The worst value of `metric` on `nc` within its bounds; see the module docstring.
    `timeout_s` is per check (per shared search for the `explore` ladder). `checker` runs
    one job (the job function by default: BMC, or the reference explorer); `many` runs the
    array explorer's jobs (`explore_many` by default, used only where it applies); `least`
    has BMC check the explore ladder's witness (`confirm_least`); `unbounded` searches the
    bound's rung with no depth limit (`explore_unbounded` with the real array explorer;
    with a given `many`, only if given too). `confirm` (None: `confirms(strategy)` of the
    strategy run) has the other method ask both ends again."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    start = time.monotonic()
    depth = _depth(nc)
    top = depth + 1  # the highest rung asked: past it the ladder would not end
    rungs: list[Rung] = []
    cache: dict[tuple[int, str], JobResult] = {}
    searches = 0
    note = "" if many is not None else (array_reason(nc) or "")
    use_array = many is not None or not note
    if many is None:
        many = explore_many
        unbounded = unbounded or explore_unbounded
    if strategy == "auto":
        strategy = "explore" if use_array else "scan"
    if strategy == "explore" and not use_array:
        raise ValueError(f"strategy explore needs the array explorer: {note}")
    explorer = ARRAY if use_array else REFERENCE
    if confirm is None:
        confirm = confirms(strategy)
    closed: int | None = None
    beyond: JobResult | None = None

    def job(value: int, method: str) -> Job:
        # The explorer's rungs go through `many` when the array explorer applies.
        return Job(nc.engine, metric.property, metric.params(value), nc, None, timeout_s,
                   method=method, explorer="reference")

    def ask(value: int, method: str) -> JobResult:
        if (value, method) not in cache:
            t = time.monotonic()
            if method == "explore" and use_array:
                res = many([job(value, method)])[0][0]
                label = ARRAY
            else:
                res = checker(job(value, method))
                label = method
            cache[value, method] = res
            rungs.append(Rung(value, label, res, time.monotonic() - t))
        return cache[value, method]

    def ask_all(values: Sequence[int]) -> None:
        nonlocal searches
        t = time.monotonic()
        results = many([job(v, "explore") for v in values])[0]
        searches += 1
        seconds = time.monotonic() - t
        for v, res in zip(values, results, strict=True):
            cache[v, "explore"] = res
            rungs.append(Rung(v, ARRAY, res, seconds, searches))

    def result(status: str, at_least: int, value: int | None, reason: str = "",
               bound: JobResult | None = None, bound_x: JobResult | None = None,
               witness_x: JobResult | None = None) -> WorstResult:
        witness = cache.get((at_least, "bmc")) if at_least else None
        if at_least and (witness is None or witness.verdict.verdict != VIOLATED):
            witness = cache.get((at_least, "explore"), witness)
        return WorstResult(metric, nc, status, at_least, value, witness, bound, bound_x,
                           witness_x, reason,
                           metric.depth_bounded and value is not None and value >= depth,
                           strategy, tuple(rungs), time.monotonic() - start, explorer, note,
                           closed if status == DECIDED else None, beyond)

    def _beyond(high: int) -> tuple[int | None, JobResult | None]:
        """The bound's rung with no depth limit, where the array explorer applies and
        the bounds have an arrival window: (its closing step, a longer violation)."""
        if not (use_array and unbounded is not None
                and symbolic_bounds(nc).arrival_window > 0):
            return None, None
        t = time.monotonic()
        res, closed_at = unbounded(job(high, "explore"))
        rungs.append(Rung(high, UNBOUNDED, res, time.monotonic() - t))
        return closed_at, res if res.verdict.verdict == VIOLATED else None

    # The ladder: `low` is the largest value known violated (0: none asked), `high` the
    # least known to hold fully; a rung that is neither stops the search.
    first = "explore" if strategy == "explore" else "bmc"
    second = "bmc" if first == "explore" else "explore"
    low, high = 0, None
    if strategy == "explore":
        ask_all(range(1, top + 1))
        said = {v: cache[v, "explore"] for v in range(1, top + 1)}
        violated = [v for v, r in said.items() if r.verdict.verdict == VIOLATED]
        low = max(violated, default=0)
        if violated != list(range(1, low + 1)):
            listed = ", ".join(f"{metric.rung(v)} {r.verdict.label}" for v, r in said.items())
            return result(UNDECIDED, 0, None, f"the explorer's rungs are not monotone: {listed}")
        if low < top and holds_fully(said[low + 1], depth):
            high = low + 1
    elif strategy == "scan":
        for v in range(1, top + 1):
            res = ask(v, "bmc")
            if res.verdict.verdict == VIOLATED:
                low = v
                continue
            if holds_fully(res, depth):
                high = v
            break
    else:  # binary
        lo, hi = 0, top + 1  # rung lo is violated (or 0), rung hi not asked / holds
        while hi - lo > 1:
            mid = (lo + hi) // 2
            res = ask(mid, "bmc")
            if res.verdict.verdict == VIOLATED:
                lo = mid
            elif holds_fully(res, depth):
                hi = mid
            else:
                break
        low = lo
        high = hi if hi <= top and (hi, "bmc") in cache \
            and holds_fully(cache[hi, "bmc"], depth) else None
        if high is not None and high != low + 1:
            high = None
    if high is None:
        stuck = next((r for r in reversed(rungs) if r.verdict != VIOLATED), None)
        if strategy == "explore":  # one search answered every rung: the one above low
            stuck = next((r for r in rungs if r.value == low + 1), None)
        if stuck is None:
            why = f"{metric.rung(top)} is VIOLATED too, past the depth's ladder"
        else:
            why = f"{metric.rung(stuck.value)}: {_said(stuck.result)}"
            if stuck.verdict == HOLDS:
                why += f", only up to depth {stuck.result.verdict.depth} of {depth}"
        return result(UNDECIDED, low, None, why)
    if not confirm:
        closed, beyond = _beyond(high)
        return result(DECIDED, low, low, bound=cache.get((high, "bmc")),
                      bound_x=cache.get((high, "explore")),
                      witness_x=cache.get((low, "explore")) if low else None)
    # Both ends again, by the other method on the same bounds. The explore ladder's
    # witness is checked by BMC as its least counterexample (`confirm_least`), the
    # other ladders' by the explorer's own search.
    ask(high, second)
    if low and strategy == "explore":
        t = time.monotonic()
        res = least(job(low, "bmc"), cache[low, "explore"], checker)
        cache[low, "bmc"] = res
        rungs.append(Rung(low, "bmc", res, time.monotonic() - t))
    elif low:
        ask(low, second)
    bound, bound_x = cache[high, "bmc"], cache[high, "explore"]
    witness_x = cache[low, "explore"] if low else None
    pairs = [(bound, bound_x)] + ([(cache[low, "bmc"], witness_x)] if witness_x else [])
    checks = [agreement.compare(a, b) for a, b in pairs]
    off = [c for c in checks if c.status == agreement.DISAGREE]
    if off:
        return result(DISAGREE, low, None, "methods disagree: " + "; ".join(
            c.line for c in off), bound, bound_x, witness_x)
    unsure = [c for c in checks if c.status == agreement.INCONCLUSIVE]
    if unsure:
        return result(UNDECIDED, low, None, "; ".join(
            f"{second} did not confirm {metric.rung(v)}: {_said(r)}"
            for v, r in ((high, cache[high, second]),
                         (low, cache.get((low, second))))
            if r is not None and r.verdict.verdict == UNKNOWN)
            or "; ".join(c.line for c in unsure), bound, bound_x, witness_x)
    for res in (bound, bound_x):
        if not holds_fully(res, depth):
            return result(UNDECIDED, low, None, f"{metric.rung(high)}: {_said(res)}, only "
                          f"up to depth {res.verdict.depth} of {depth}", bound, bound_x,
                          witness_x)
    closed, beyond = _beyond(high)
    return result(DECIDED, low, low, "", bound, bound_x, witness_x)
