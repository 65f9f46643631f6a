"""minimize.minimal_model returns the least model by minimize.py's order: checked against
an independent oracle (no vector below it is satisfiable), seeded or not, and on a
violation whose least vector is known."""

import time

import z3

from checker.methods import bmc, minimize
from checker.methods.jobs import family_of, symbolic_bounds
from checker.methods.symbolic import Bounds, Family, extend, new_unrolling
from properties import catalogue, manifest


def _config(name: str, **bounds: int):
    """A manifest config, its bounds overridden as a manifest entry does."""
    nc = manifest.load().configs[name]
    return manifest.with_bounds(nc, **bounds) if bounds else nc


def _unrolling(nc, prop_name: str, depth: int, **params: int):
    """The unrolling of a manifest config up to `depth` and the property's violation there."""
    u = new_unrolling(family_of(nc), symbolic_bounds(nc))
    for _ in range(depth):
        extend(u)
    return u, bmc.violation_at(catalogue.get(prop_name, **params), u, depth)


def _vector(u, model):
    return [model.eval(o, model_completion=True).as_long() for o in minimize.objectives(u)]


def _is_least(u, violation, vector) -> bool:
    """The oracle: `vector` is reached, and for no i does a model agree with it before i and
    go below it at i (that is what a lexicographically smaller vector is)."""
    objs = minimize.objectives(u)
    s = z3.Solver()
    s.add(*u.constraints, violation)
    if s.check(*[o == v for o, v in zip(objs, vector, strict=True)]) != z3.sat:
        return False
    return all(s.check(*[o == v for o, v in zip(objs[:i], vector, strict=False)],
                       objs[i] < vector[i]) == z3.unsat for i in range(len(objs)))


def test_the_minimiser_returns_the_least_vector_seeded_or_not():
    u, violation = _unrolling(_config("tiny_fcfs"), "head_of_line", 2, k=2)
    s = minimize.new_solver()
    s.add(*u.constraints, violation)
    first = minimize.check_with(s, time.monotonic() + 120).model
    assert first is not None
    seeded = _vector(u, minimize.minimal_model(u, violation, 120_000, first))
    assert _vector(u, minimize.minimal_model(u, violation, 120_000)) == seeded
    assert _is_least(u, violation, seeded)


def test_the_oracle_rejects_a_vector_that_is_not_least():
    u, violation = _unrolling(_config("tiny_fcfs"), "head_of_line", 2, k=2)
    least = _vector(u, minimize.minimal_model(u, violation, 120_000))
    # Any other model of the formula is above the least one, and the oracle says so.
    s = z3.Solver()
    s.add(*u.constraints, violation,
          z3.Or(*[o != v for o, v in zip(minimize.objectives(u), least, strict=True)]))
    assert s.check() == z3.sat
    assert not _is_least(u, violation, _vector(u, s.model()))


def test_the_starvation_witness_of_a_known_least_vector():
    """starvation k=3 on tiny_fcfs with 2 slots (the manifest entry): the least witness is
    r0 (arrives in step 1, prompt 4, max_tokens 3) and r1 (step 1, prompt 3, max_tokens 1),
    no EOS, as counterexamples/vllm_v1/starvation__tiny_fcfs.itf.json stores it."""
    nc = _config("tiny_fcfs", slots=2)
    result = bmc.check(catalogue.get("starvation", k=3), family_of(nc), symbolic_bounds(nc), 120)
    assert (result.status, result.depth, result.minimal) == ("violated", 3, True)
    requests = [(r.arrival_step, r.prompt_len, r.max_tokens) for r in result.workload.requests]
    assert requests == [(1, 4, 3), (1, 3, 1)] and result.workload.eos == ()
    u, violation = _unrolling(nc, "starvation", 3, k=3)
    least = _vector(u, minimize.minimal_model(u, violation, 120_000))
    assert least[:7] == [2, 1, 4, 3, 1, 3, 1] and not any(least[7:])
    assert _is_least(u, violation, least)


def test_a_time_limit_before_any_witness_gives_none():
    u, violation = _unrolling(_config("tiny_fcfs"), "head_of_line", 2, k=2)
    assert minimize.minimal_model(u, violation, 0) is None


def test_bmc_holds_where_no_violation_exists():
    family = Family(manifest.load().configs["tiny_fcfs"].config)
    result = bmc.check(catalogue.get("starvation", k=3), family,
                       Bounds(slots=1, depth=3, max_prompt_len=2, max_max_tokens=2), 60)
    assert (result.status, result.depth) == ("holds", 3)
