"""k-induction with the complement lemmas and the preprocessing tactic
(checker/methods/induction.py) proves what the plain query proves, and still refuses a
broken invariant, a broken step, a false property and a property false only at the start.
Speed is measured in bench/induction_scale.py, not here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import z3

from checker.methods import induction
from checker.methods.jobs import family_of, symbolic_bounds
from checker.methods.symbolic import Bounds, Family, family_config, fresh_state, slot_specs
from model import registry as engines
from model.core.ops import SymbolicOps
from model.core.types import DEFAULT_ENGINE, Step
from properties import catalogue
from properties.catalogue import Property
from properties.manifest import load

SAFETY = ("budget_respected", "running_within_max_num_seqs", "kv_blocks_conserved",
          "no_admission_after_preemption", "computed_within_tokens", "preempted_requeued",
          "running_before_waiting", "whole_prompt_without_chunking")


def _family(config: str) -> tuple[Family, Bounds]:
    nc = load().configs[config]
    return family_of(nc), symbolic_bounds(nc)


# Every test sees the rules and invariant it patches, not a cached proof.
pytestmark = pytest.mark.usefixtures("fresh_induction_caches")


def _plain_step(family: Family, slots: int, tag: str) -> tuple[Any, ...]:
    """One symbolic step of the family's rules from a state (constants named `tag`.*):
    (engine, rule config, slot specs, ops, next state, observation, and the assumptions:
    the config's and specs' constraints and the invariant on the state before)."""
    engine = engines.get(family.engine)
    cfg, _, cfg_cons = family_config(family)
    specs, spec_cons = slot_specs(slots, cfg)
    s0 = fresh_state(tag, engine.initial_state(slots, cfg), z3.Int(f"{tag}.step"))
    ops = SymbolicOps()
    s1, observed = engine.step(ops, cfg, specs, s0, tuple(z3.Bool(f"{tag}.eos{i}")
                                                          for i in range(slots)))
    assumptions = [*cfg_cons, *spec_cons, engine.well_formed(ops, cfg, specs, s0)]
    return engine, cfg, specs, ops, s1, observed, assumptions


def _plain_inductive(family: Family, slots: int) -> bool:
    """The invariant's inductive step as one query, no lemmas, z3's default solver."""
    engine, cfg, specs, ops, s1, _, assumptions = _plain_step(family, slots, "p0")
    solver = z3.Solver()
    solver.add(*assumptions, z3.Not(engine.well_formed(ops, cfg, specs, s1)),
               *ops.take_definitions())
    return solver.check() == z3.unsat


def _plain_one_inductive(prop: Property, family: Family, slots: int) -> bool:
    """The property's 1-inductive step as one plain query."""
    _, _, _, ops, _, observed, assumptions = _plain_step(family, slots, "q0")
    goal = prop.holds(ops, [observed], 0)
    solver = z3.Solver()
    solver.add(*assumptions, z3.Not(z3.BoolVal(goal) if isinstance(goal, bool) else goal),
               *ops.take_definitions())
    return solver.check() == z3.unsat


# 3 slots (about 5 s) in the slow suite; 2 slots of both configs in the default suite.
@pytest.mark.parametrize("config,slots", [("tiny_fcfs", 2),
                                          pytest.param("tiny_fcfs", 3, marks=pytest.mark.slow),
                                          ("tiny_priority", 2)])
def test_the_invariant_is_proved_where_the_plain_query_proves_it(config: str,
                                                                 slots: int) -> None:
    family, bounds = _family(config)
    bounds = dataclasses.replace(bounds, slots=slots)
    assert _plain_inductive(family, slots)
    assert induction.prove_well_formed(family, bounds, 120.0).proved


@pytest.mark.parametrize("name", SAFETY)
def test_each_safety_property_is_proved_at_the_k_the_plain_query_needs(name: str) -> None:
    family, bounds = _family("tiny_fcfs")
    bounds = dataclasses.replace(bounds, slots=2)
    prop = catalogue.get(name)
    assert induction.prove_well_formed(family, bounds, 120.0).proved
    result = induction.prove(prop, family, bounds, 2, 120.0)
    assert result.proved, result.reason
    assert (result.k == 1) == _plain_one_inductive(prop, family, 2)


@pytest.mark.parametrize("config,slots", [("tiny_fcfs", 3), ("tiny_fcfs", 5),
                                          ("tiny_priority", 3)])
def test_every_complement_lemma_is_valid(config: str, slots: int) -> None:
    """Each lemma is an identity: its negation alone is unsatisfiable (this caught z3 AST
    ids reused after their terms were freed, which paired unrelated terms)."""
    family, _ = _family(config)
    engine = engines.get(family.engine)
    cfg, _, _ = family_config(family)
    specs, _ = slot_specs(slots, cfg)
    s0 = fresh_state("v0", engine.initial_state(slots, cfg), z3.Int("v0.step"))
    ops = induction._RecordingOps()
    engine.step(ops, cfg, specs, s0, tuple(z3.Bool(f"v0.eos{i}") for i in range(slots)))
    lemmas = induction._complement_lemmas(ops.ites)
    assert lemmas  # the block moves of preemption and of finishing pair up
    for lemma in lemmas:
        solver = z3.Solver()
        solver.add(z3.Not(lemma))
        assert solver.check() == z3.unsat, lemma


def _patched(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> None:
    """engines.get returns vLLM V1's model with some fields replaced."""
    real = engines.get
    changed = dataclasses.replace(real(DEFAULT_ENGINE), **fields)
    monkeypatch.setattr(engines, "get",
                        lambda name: changed if name == DEFAULT_ENGINE else real(name))


def test_an_invariant_conjunct_a_step_breaks_is_not_proved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No output token yet: true initially, false once a request samples."""
    real = engines.get(DEFAULT_ENGINE).well_formed
    assert real is not None

    def broken(ops: Any, cfg: Any, specs: Any, s: Any) -> Any:
        return ops.and_(real(ops, cfg, specs, s),
                        *[x.num_output_tokens == 0 for x in s.slots])

    facts = engines.get(DEFAULT_ENGINE).invariant_facts
    assert facts is not None

    def broken_facts(ops: Any, cfg: Any, specs: Any, s: Any) -> Any:
        return [*facts(ops, cfg, specs, s),
                ("no output yet", ops.and_(*[x.num_output_tokens == 0 for x in s.slots]))]

    _patched(monkeypatch, well_formed=broken, invariant_facts=broken_facts)
    family, bounds = _family("tiny_fcfs")
    result = induction.prove_well_formed(family, dataclasses.replace(bounds, slots=2), 60.0)
    assert not result.proved
    assert result.reason == "inductive step: sat (breaks: no output yet)"


def test_a_step_that_leaks_a_block_is_not_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step loses a free block whenever one is free: the pool is no longer conserved,
    which only the conservation conjunct (the one the lemmas help with) catches."""
    real = engines.get(DEFAULT_ENGINE).step

    def leaky(ops: Any, cfg: Any, specs: Any, state: Any, eos: Any,
              **kw: Any) -> tuple[Any, Step]:
        nxt, observed = real(ops, cfg, specs, state, eos, **kw)
        free = ops.ite(nxt.free_blocks > 0, nxt.free_blocks - 1, nxt.free_blocks)
        return dataclasses.replace(nxt, free_blocks=free), observed

    _patched(monkeypatch, step=leaky)
    family, bounds = _family("tiny_fcfs")
    for slots in (2, 3):
        induction.clear_caches()
        result = induction.prove_well_formed(family, dataclasses.replace(bounds, slots=slots),
                                             60.0)
        assert not result.proved
        assert result.reason.startswith("inductive step: sat")


def test_a_false_property_is_not_proved() -> None:
    """Nothing is ever scheduled: false on the step that admits the first request."""
    def idle(ops: Any, steps: Any, t: int) -> Any:
        return ops.and_(*[o.scheduled == 0 for o in steps[t].slots])

    family, bounds = _family("tiny_fcfs")
    bounds = dataclasses.replace(bounds, slots=2)
    assert induction.prove_well_formed(family, bounds, 60.0).proved
    result = induction.prove(Property("idle", "step", "", idle), family, bounds, 2, 60.0)
    assert not result.proved


def test_a_property_false_only_on_the_first_step_fails_its_base_case() -> None:
    """`step != 1` is 2-inductive (after any step the next is numbered 2 or more) but
    false on the first step from the initial state: only the base case catches it."""
    def not_first(ops: Any, steps: Any, t: int) -> Any:
        return steps[t].step != 1

    family, bounds = _family("tiny_fcfs")
    bounds = dataclasses.replace(bounds, slots=2)
    result = induction.prove(Property("not_first", "step", "", not_first), family, bounds,
                             2, 60.0)
    assert not result.proved
    assert result.k == 2 and result.reason.startswith("base case: sat")
