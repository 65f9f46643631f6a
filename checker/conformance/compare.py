"""Run a workload through vLLM's real Scheduler and through our reference; report the
first step where their StepRecords differ, side by side.

EOS entries: the reference rejects an EOS entry for a step in which the request samples
nothing (the contract: EOS can only be a sampled token). The generator does not know in
advance when a request samples, so `compare` first runs the real scheduler, keeps only
the EOS entries that named a step in which the request really sampled (the others had no
effect on that run, so the real run is unchanged) and compares on that workload. The
Divergence carries the workload as compared.

Engine-specific facts (`StepRecord.extra`, e.g. the prefix-cache facts) are compared one by
one, as fields named by their key; their order in `extra` does not matter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from checker.conformance.divergence import StepDivergence, first_divergence_of, value_text
from checker.conformance.vllm_real import RealRun
from model.core.types import StepRecord, Workload
from model.vllm.config import VLLM_VERSION

REAL = f"vLLM {VLLM_VERSION} (real)"
REFERENCE = "model.reference.vllm_v1"


@dataclass(frozen=True, slots=True)
class Divergence(StepDivergence):
    """The first step at which the reference departs from vLLM's real scheduler
    (divergence.py `StepDivergence`); its table wraps long cells."""

    real_engine: ClassVar[str] = "vLLM"
    reference_name: ClassVar[str] = REFERENCE
    wrap_cells: ClassVar[bool] = True

    def real_name(self) -> str:
        """vLLM at the workload's version (`REAL` at 0.32.0)."""
        return f"vLLM {self.workload.config.version} (real)"

    def show(self, name: str, record: StepRecord | None) -> str:
        """A field of a record as compact text: `a:1 b:2` for pairs and mappings, `a b` for
        id lists."""
        return value_text(name, record, absent="(absent)")


def first_divergence(workload: Workload, real: tuple[StepRecord, ...],
                     reference: tuple[StepRecord, ...]) -> Divergence | None:
    """The first step whose records differ (or that only one side has), else None."""
    return first_divergence_of(Divergence, workload, real, reference)


def reference_records(workload: Workload) -> Iterator[StepRecord]:
    """The reference's records, step by step (so an exception names its step)."""
    from model.vllm import reference as vllm_v1

    iter_steps = getattr(vllm_v1, "iter_steps", None)
    if iter_steps is None:
        yield from vllm_v1.simulate(workload)
        return
    for _, record in iter_steps(workload):
        yield record


def compare(workload: Workload) -> Divergence | None:
    """Run both schedulers on `workload` (EOS entries that take no effect are dropped, see
    the module doc) and return the first divergence, or None when every step agrees."""
    from checker.conformance.vllm_real import run_real_vllm_detailed

    return compare_run(workload, run_real_vllm_detailed(workload))


def compare_run(workload: Workload, run: RealRun) -> Divergence | None:
    """`compare` on a real run already made of `workload` (its engine is not run again),
    against the workload as the run applied it (`RealRun.effective`: EOS where the request
    sampled, accepted counts at most the drafts scheduled, drafts where it was scheduled)."""
    compared = run.effective(workload)
    reference: list[StepRecord] = []
    try:
        for record in reference_records(compared):
            reference.append(record)
    except Exception as exc:  # noqa: BLE001 - any failure of the reference is a finding
        early = first_divergence(compared, run.records[: len(reference)], tuple(reference))
        if early is not None:
            return early
        step = len(reference) + 1
        real = run.records[step - 1] if step <= len(run.records) else None
        return Divergence(workload=compared, step=step, fields=("error",), real=real,
                          reference=None, error=f"{type(exc).__name__}: {exc}")
    return first_divergence(compared, run.records, tuple(reference))


def steps_agreeing(workload: Workload, divergence: Divergence | None) -> tuple[int, int]:
    """(steps compared, steps agreeing): a run is compared up to its first divergence."""
    if divergence is None:
        return workload.steps, workload.steps
    return divergence.step, divergence.step - 1
