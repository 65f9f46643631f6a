"""A job resolves its names once (issue 30 item 3): one job of each path looks its engine up
in the registry (model/registry.py's `get`) at most once and its property up in the
catalogue (`properties.catalogue.get`) at most once; the objects it carries stay out of
its equality and hash and are not pickled, so jobs still go to the process pool.

The counters wrap the two module attributes. Every checker call site goes through them
(`engines.get`, `catalogue.get`): no module of checker/ or properties/ imports either
function by name (checked below). model/run.py does (`simulate` runs a workload's
reference by the workload's engine name, once per replayed counterexample): that is the
model's own lookup, not the checker's, and is not counted."""

from __future__ import annotations

import ast
import pickle
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from checker.methods.jobs import Job, family_of, run
from checker.sweep import grid as grids
from checker.sweep import work
from model import registry
from properties import catalogue
from properties.manifest import load, with_bounds

ROOT = Path(__file__).resolve().parents[1]

# (property, config, method, Job fields): each path of checker/methods/jobs.run, on
# vLLM V1's tiny_fcfs (the cheapest config that reaches every one), each under 3 s.
CHECKS = [
    ("head_of_line", "bmc", {}),  # theorem and induction do not apply; BMC, minimised, replayed
    ("no_spurious_preemption", "bmc", {}),  # the invariant's proof, then 1-induction
    ("budget_respected", "bmc", {}),  # the closed-form theorem
    ("head_of_line", "explore", {}),  # the reference explorer, replayed
    ("head_of_line", "explore", {"explorer": "array"}),  # the array explorer, replayed
    ("head_of_line", "auto", {}),  # the proofs, then BMC
    ("head_of_line", "auto", {"search": "explore"}),  # the proofs, then the explorer
]

SWEEP = textwrap.dedent("""\
    description: one sweep job
    engine: vllm-v1
    config: {max-model-len: 16, block-size: 4, num-gpu-blocks: 9,
             max-num-batched-tokens: 8, max-num-seqs: 4}
    properties:
      - starvation: {k: 2}
    bounds: {slots: 2, depth: 4, max-prompt-len: 8, max-max-tokens: 4}
    timeout: 60
    """)


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts of registry and catalogue lookups by name, from now on."""
    counts: Counter[str] = Counter()
    real_engine, real_property = registry.get, catalogue.get

    def engine(name: str) -> registry.EngineModel:
        counts[f"engine {name}"] += 1
        return real_engine(name)

    def prop(name: str, **params: int) -> catalogue.Property:
        counts[f"property {name}"] += 1
        return real_property(name, **params)

    monkeypatch.setattr(registry, "get", engine)
    monkeypatch.setattr(catalogue, "get", prop)
    yield counts


def _job(prop: str, method: str, **fields: str) -> Job:
    m = load()
    entry = next(e for e in m.entries if e.property == prop and e.config == "tiny_fcfs")
    nc = with_bounds(m.configs["tiny_fcfs"], **dict(entry.bounds))
    return Job(nc.engine, prop, entry.params, nc, entry.expected, 120, method=method,
               **fields)


def _at_most_once(counts: Counter[str]) -> None:
    assert counts, "no lookup counted: the counters are not where the lookups are"
    assert all(n == 1 for n in counts.values()), dict(counts)


@pytest.mark.usefixtures("fresh_induction_caches")
@pytest.mark.parametrize("prop,method,fields", CHECKS,
                         ids=[f"{m}-{p}-{'-'.join(f.values()) or 'default'}"
                              for p, m, f in CHECKS])
def test_a_check_job_looks_its_names_up_once(lookups: Counter[str], prop: str, method: str,
                                             fields: dict[str, str]) -> None:
    job = _job(prop, method, **fields)
    lookups.clear()  # loading the manifest looks every engine up; the job starts here
    result = run(job)
    assert result.verdict.verdict in ("VIOLATED", "PROVED", "HOLDS"), result.verdict
    _at_most_once(lookups)


def test_a_sweep_job_looks_its_names_up_once(lookups: Counter[str]) -> None:
    grid = grids.parse(yaml.safe_load(SWEEP), "t.yaml")
    [job] = grids.jobs(grid, grids.expand(grid)[0])
    lookups.clear()  # making the grid looks the engine up; the job starts here
    [out] = work.execute_batch((job,))
    assert out.verdict == "HOLDS", out
    _at_most_once(lookups)


def test_what_a_job_carries_is_not_compared_hashed_or_pickled() -> None:
    """A resolved job equals an unresolved one; it pickles even where its EngineModel does
    not (the baselines' rules are closures) and the copy looks its engine up again."""
    m = load()
    for name, engine in (("tiny_fcfs", "vllm-v1"), (next(iter(
            c for c, nc in m.configs.items() if nc.engine == "static")), "static")):
        nc = m.configs[name]
        job = Job(engine, "budget_respected", (), nc, None, 60)
        fresh = Job(engine, "budget_respected", (), nc, None, 60)
        assert job.model is registry.get(engine) and job.prop.name == "budget_respected"
        assert job.family.model is job.model
        assert job == fresh and job.family == family_of(nc)
        assert hash(job.family) == hash(family_of(nc))
        copy = pickle.loads(pickle.dumps(job))
        assert copy == job and copy._prop is None and copy._family is None
        assert copy.model is registry.get(engine)
        assert replace(job, method="explore").model is job.model  # carried by replace


def test_a_job_with_a_changed_name_looks_it_up_anew() -> None:
    job = _job("head_of_line", "bmc")
    assert job.prop.name == "head_of_line"
    other = replace(job, property="starvation", params=(("k", 3),))
    assert other.prop.name == "starvation" and dict(other.prop.params) == {"k": 3}


def test_no_checker_module_imports_the_lookups_by_name() -> None:
    """So the counters above, on the module attributes, see every checker lookup."""
    by_name = []
    for pkg in ("checker", "properties"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (
                        (node.module == "model.registry" and any(
                            a.name == "get" for a in node.names))
                        or (node.module == "properties.catalogue" and any(
                            a.name == "get" for a in node.names))):
                    by_name.append(str(path.relative_to(ROOT)))
    assert by_name == []
