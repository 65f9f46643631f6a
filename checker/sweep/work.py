"""The task both executors run: one configuration's jobs through the existing job function
(checker/methods/jobs.run_batch; hazards through checker/config/hazards.decide, which
runs the same jobs), each turned into an Outcome the driver can write. A task never
raises for a job: an exception is that job's UNKNOWN outcome, with the reason."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from checker.config import hazards
from checker.methods import worst
from checker.methods.jobs import Job, JobResult, run, run_batch
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED, Counterexample
from checker.show import itf, sources, svg
from checker.sweep import grid as grids
from checker.sweep.grid import HAZARD, METRIC, SweepJob
from model.core.types import StepRecord
from properties.manifest import NamedConfig

_HAZARD_VERDICT = {hazards.ABSENT: PROVED, hazards.BOUNDED: HOLDS,
                   hazards.WITNESSED: VIOLATED, hazards.UNKNOWN_LABEL: UNKNOWN}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one job decided, with its counterexample as ITF text and timeline as SVG."""

    key: str
    verdict: str  # PROVED | HOLDS | VIOLATED | UNKNOWN
    label: str  # as the checker says it: HOLDS(4), or a hazard's 'PROVED absent'
    decided_by: str  # theorem | induction | bmc | explore | argument | constructed | -
    depth: int | None
    seconds: float
    detail: str
    bounds: tuple[tuple[str, int], ...]
    metric: float | None = None
    itf: str | None = None
    timeline: str | None = None


def failed(job: SweepJob, reason: str, seconds: float = 0.0) -> Outcome:
    """The UNKNOWN outcome of a job that raised, timed out or lost its worker."""
    return Outcome(job.key, UNKNOWN, UNKNOWN, "-", None, seconds, reason, job.bounds)


def execute_batch(batch: Sequence[SweepJob]) -> list[Outcome]:
    """Run one configuration's jobs (the Ray task and the pool's work item), outcomes in
    job order."""
    props = [j for j in batch if j.check.kind == grids.PROPERTY]
    done: dict[str, Outcome] = {}
    if props:
        start = time.monotonic()
        try:
            results: list[JobResult | None] = list(run_batch([as_job(j) for j in props]))
        except Exception:  # run each alone, so that one job's failure costs one row
            results = [None] * len(props)
        for job, res in zip(props, results, strict=True):
            done[job.key] = _guarded(job, res, start)
    for job in batch:
        if job.key not in done:
            done[job.key] = _guarded(job, None, time.monotonic())
    return [done[j.key] for j in batch]


def _guarded(job: SweepJob, res: JobResult | None, start: float) -> Outcome:
    try:
        if job.check.kind == HAZARD:
            return hazard_outcome(job)
        if job.check.kind == METRIC:
            return metric_outcome(job)
        return property_outcome(job, res if res is not None else run(as_job(job)))
    except Exception as exc:
        return failed(job, f"error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500],
                      time.monotonic() - start)


def as_job(job: SweepJob) -> Job:
    """The checker's Job of a property job."""
    nc = NamedConfig(name=job.config_name, description="sweep configuration",
                     config=job.config, ranges=(), validated=True, bounds=job.bounds,
                     engine=job.engine)
    return Job(engine=job.engine, property=job.check.name, params=job.check.params, config=nc,
               expected=None, timeout_s=job.timeout_s, method=job.method)


def property_outcome(job: SweepJob, res: JobResult) -> Outcome:
    """A job's verdict, and when violated (and replayed) its ITF and timeline."""
    v = res.verdict
    texts = _drawn(res.counterexample, res.replayed.records if res.replayed else None) \
        if v.verdict == VIOLATED else (None, None)
    return Outcome(job.key, v.verdict, v.label, v.method, v.depth, v.seconds, v.detail,
                   job.bounds, None, *texts)


def hazard_outcome(job: SweepJob) -> Outcome:
    """A hazard decided as `batchproof config` decides it, in the checker's words."""
    h = grids.hazard(job.check.name)
    res = hazards.decide(h, job.config, grids.envelope(job), job.pool_known)
    bounds = res.bounds or job.bounds
    w = res.witness
    if w is None:
        by = "argument" if res.verdict == hazards.ABSENT else (
            "bmc" if res.verdict == hazards.BOUNDED else "-")
        return Outcome(job.key, _HAZARD_VERDICT[res.verdict], res.verdict, by,
                       dict(bounds).get("depth"), res.seconds, res.detail, bounds)
    method = "bmc" if w.minimal else "constructed"
    cex = Counterexample(
        engine=job.engine, property=h.property, params=job.check.params,
        config_name=job.config_name, workload=w.workload, method=method, bounds=bounds,
        violated_at=w.violated_at, loop=w.loop, minimal=w.minimal)
    return Outcome(job.key, VIOLATED, res.verdict, method, w.violated_at, res.seconds,
                   res.detail, bounds, None, *_drawn(cex, w.replayed.records))


def metric_outcome(job: SweepJob) -> Outcome:
    """A `worst` metric, searched as `batchproof worst` searches it (checker/methods/
    worst.py): decided, the row HOLDS (no run exceeds the value within the bounds) with the
    value as `metric` and its witness drawn; otherwise UNKNOWN with how far it got."""
    metric = worst.METRICS[job.check.name]
    nc = NamedConfig(name=job.config_name, description="sweep configuration",
                     config=job.config, ranges=(), validated=True, bounds=job.bounds,
                     engine=job.engine)
    res = worst.search(metric, nc, job.timeout_s)
    if res.status != worst.DECIDED or res.value is None:
        return Outcome(job.key, UNKNOWN, UNKNOWN, "worst", None, res.seconds,
                       f"at least {res.at_least}: {res.reason}", job.bounds)
    w = res.witness
    texts = _drawn(w.counterexample, w.replayed.records if w.replayed else None) \
        if w is not None else (None, None)
    asked = [m for m, r in (("bmc", res.bound_bmc), ("explore", res.bound_explore)) if r]
    detail = (f"bound: {metric.rung(res.value + 1)} holds by {' and '.join(asked)}"
              + ("; the value is the depth's bound" if res.depth_reached else ""))
    return Outcome(job.key, HOLDS, f"= {res.value}", "worst", dict(job.bounds).get("depth"),
                   res.seconds, detail, job.bounds, float(res.value), *texts)


def _drawn(cex: Counterexample | None, records: tuple[StepRecord, ...] | None
           ) -> tuple[str | None, str | None]:
    """The counterexample as ITF JSON and its timeline as SVG (`explain --format svg`)."""
    if cex is None or records is None:
        return None, None
    trace = itf.dumps(itf.to_itf(cex, records))
    return trace, svg.render(sources.counterexample_source(cex, records).timeline)
