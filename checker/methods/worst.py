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

The ladder runs on BMC (`checker/methods/jobs.run`, method "bmc"), either as an upward
scan (v = 1, 2, ... until a rung holds) or a binary search over 1..D+1; both ends are then
asked again of the explorer on the same bounds and must agree (checker/methods/agreement).
A rung that neither holds nor is violated, or holds only to a smaller depth, leaves the
answer a range: at least the last violated value."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from checker.methods import agreement
from checker.methods.jobs import Job, JobResult, run
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED
from properties.manifest import NamedConfig

DECIDED, DISAGREE, UNDECIDED = "decided", "disagree", "undecided"
STRATEGIES = ("scan", "binary")


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
    """One check of the ladder: the value it asks about, the method, its result."""

    value: int
    method: str
    result: JobResult
    seconds: float

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
    witness: JobResult | None  # rung at_least's bmc result (a replayed counterexample)
    bound_bmc: JobResult | None  # rung value+1 by bmc
    bound_explore: JobResult | None  # rung value+1 by the explorer
    witness_explore: JobResult | None  # rung value by the explorer
    reason: str  # why undecided or disagreeing ('' when decided)
    depth_reached: bool  # the value is the depth: the bound is the bounds', not the engine's
    strategy: str
    rungs: tuple[Rung, ...] = field(default=())
    seconds: float = 0.0


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


def search(metric: Metric, nc: NamedConfig, timeout_s: float, strategy: str = "scan",
           confirm: bool = True,
           checker: Callable[[Job], JobResult] = run) -> WorstResult:
    """The worst value of `metric` on `nc` within its bounds; see the module docstring.
    `timeout_s` is per check. `checker` runs one job (the job function by default)."""
    start = time.monotonic()
    depth = _depth(nc)
    top = depth + 1  # the highest rung asked: past it the ladder would not end
    rungs: list[Rung] = []
    cache: dict[tuple[int, str], JobResult] = {}

    def ask(value: int, method: str) -> JobResult:
        if (value, method) not in cache:
            t = time.monotonic()
            job = Job(nc.engine, metric.property, metric.params(value), nc, None, timeout_s,
                      method=method)
            res = checker(job)
            cache[value, method] = res
            rungs.append(Rung(value, method, res, time.monotonic() - t))
        return cache[value, method]

    def result(status: str, at_least: int, value: int | None, reason: str = "",
               bound: JobResult | None = None, bound_x: JobResult | None = None,
               witness_x: JobResult | None = None) -> WorstResult:
        witness = cache.get((at_least, "bmc")) if at_least else None
        return WorstResult(metric, nc, status, at_least, value, witness, bound, bound_x,
                           witness_x, reason,
                           metric.depth_bounded and value is not None and value >= depth,
                           strategy, tuple(rungs), time.monotonic() - start)

    # The ladder on BMC: `low` is the largest value known violated (0: none asked),
    # `high` the least known to hold fully; a rung that is neither stops the search.
    low, high = 0, None
    if strategy == "scan":
        for v in range(1, top + 1):
            res = ask(v, "bmc")
            if res.verdict.verdict == VIOLATED:
                low = v
                continue
            if holds_fully(res, depth):
                high = v
            break
    elif strategy == "binary":
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
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    if high is None:
        stuck = next((r for r in reversed(rungs) if r.verdict != VIOLATED), None)
        if stuck is None:
            why = f"{metric.rung(top)} is VIOLATED too, past the depth's ladder"
        else:
            why = f"{metric.rung(stuck.value)}: {_said(stuck.result)}"
            if stuck.verdict == HOLDS:
                why += f", only up to depth {stuck.result.verdict.depth} of {depth}"
        return result(UNDECIDED, low, None, why)
    bound = cache[high, "bmc"]
    if not confirm:
        return result(DECIDED, low, low, bound=bound)
    # Both ends again, by the explorer on the same bounds.
    bound_x = ask(high, "explore")
    witness_x = ask(low, "explore") if low else None
    pairs = [(bound, bound_x)] + ([(cache[low, "bmc"], witness_x)] if witness_x else [])
    checks = [agreement.compare(a, b) for a, b in pairs]
    off = [c for c in checks if c.status == agreement.DISAGREE]
    if off:
        return result(DISAGREE, low, None, "methods disagree: " + "; ".join(
            c.line for c in off), bound, bound_x, witness_x)
    unsure = [c for c in checks if c.status == agreement.INCONCLUSIVE]
    if unsure:
        return result(UNDECIDED, low, None, "; ".join(
            f"the explorer did not confirm {metric.rung(v)}: {_said(r)}"
            for v, r in ((high, bound_x), (low, witness_x))
            if r is not None and r.verdict.verdict == UNKNOWN)
            or "; ".join(c.line for c in unsure), bound, bound_x, witness_x)
    if not holds_fully(bound_x, depth):
        return result(UNDECIDED, low, None, f"{metric.rung(high)}: {_said(bound_x)}, only up "
                      f"to depth {bound_x.verdict.depth} of {depth}", bound, bound_x,
                      witness_x)
    return result(DECIDED, low, low, "", bound, bound_x, witness_x)
