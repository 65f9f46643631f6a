"""vLLM V0's well-formedness invariant (model/vllm_v0/invariant.py): k-induction proves it
inductive on both scheduling paths, with recompute and with swap preemption, for the
manifest configs and for ranged families; it
holds on every state of concrete runs that agree with the reference; it proves the
manifest's HOLDS entries; and a wrong fact or a wrong rule makes its proof fail."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checker.conformance.vllm_v0_real import random_workload
from checker.methods import induction
from checker.methods.symbolic import Bounds, Family
from model import registry as engines
from model.core.ops import CONCRETE
from model.core.slots import lay_out
from model.vllm_v0 import invariant, rules
from model.vllm_v0.config import ENGINE_VLLM_V0, Config
from model.vllm_v0.reference import simulate
from model.vllm_v0.state import SWAPPED, WAITING, RuleConfig
from properties import catalogue
from properties.manifest import load

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = ("v0_tiny", "v0_chunked")
SWAP_CONFIGS = ("v0_swap_small_cpu", "v0_swap_roomy_cpu", "v0_swap_chunked")


def _family(config: str) -> tuple[Family, Bounds]:
    nc = load().configs[config]
    family = Family(base=nc.config, ranges=nc.ranges, validated=nc.validated,
                    engine=nc.engine)
    return family, Bounds(**dict(nc.bounds))


def _ranged(chunked: bool, swap: bool = False) -> Family:
    """Every budget, max_num_seqs and max_model_len up to 64 and every pool up to 300
    blocks (so the 1% watermark reaches 3 blocks) that SchedulerConfig accepts; with
    `swap`, swap preemption to a 4-block CPU pool."""
    cpu: dict[str, Any] = dict(preemption_mode="swap", num_cpu_blocks=4) if swap else {}
    base = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
                  num_gpu_blocks=4, enable_chunked_prefill=chunked, **cpu)
    return Family(base=base, ranges=(("max_num_batched_tokens", 1, 64), ("max_num_seqs", 1, 8),
                                     ("max_model_len", 1, 64), ("num_gpu_blocks", 1, 300)),
                  engine=ENGINE_VLLM_V0)


def test_the_engine_states_the_invariant() -> None:
    engine = engines.get(ENGINE_VLLM_V0)
    assert engine.well_formed is invariant.well_formed
    assert engine.invariant_covers is None  # both paths, both preemption modes


# v0_tiny's proof (about 18 s alone) runs in the slow suite, and so do its HOLDS entries
# (test_every_holds_entry_is_proved); the other configs' proofs are in the default suite.
@pytest.mark.parametrize("config", [pytest.param("v0_tiny", marks=pytest.mark.slow),
                                    *CONFIGS[1:], *SWAP_CONFIGS])
def test_the_invariant_is_inductive_on_the_manifest_configs(config: str) -> None:
    family, bounds = _family(config)
    result = induction.prove_well_formed(family, bounds, 120.0)
    assert result.proved, result.reason


def _prove_ranged_alone(chunked: bool, swap: bool) -> str:
    """The ranged invariant proof in a process of its own: z3's search on these families
    depends on the terms earlier queries of the process created (alone the default-path
    swap family takes about 35 s; after other proofs it has run past 300 s), so each runs
    from the same fresh start."""
    code = ("import sys; from tests.test_vllm_v0_invariant import _ranged; "
            "from checker.methods import induction; from checker.methods.symbolic import "
            f"Bounds; r = induction.prove_well_formed(_ranged({chunked}, {swap}), "
            "Bounds(slots=2), 300.0); print('proved' if r.proved else r.reason)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, check=False)
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("swap", [False, True], ids=["recompute", "swap"])
@pytest.mark.parametrize("chunked", [False, True], ids=["default", "chunked"])
def test_the_invariant_is_inductive_on_ranged_families(chunked: bool, swap: bool) -> None:
    assert _prove_ranged_alone(chunked, swap) == "proved"


# HOLDS entries k-induction does not prove, and why: the invariant does not bound the CPU
# blocks an ignored swapped group loses for good (S:1696-1715 frees only running groups),
# so it cannot rule out a later swap-out short of CPU room; BMC answers HOLDS(4).
NOT_PROVED = {("no_engine_assertion", "v0_swap_roomy_cpu")}


def _holds_entries() -> list[tuple[str, str]]:
    """The step-property HOLDS entries the symbolic methods check (a lasso, never_finishes,
    is BMC's and the explorer's to search, never induction's)."""
    return [(e.property, e.config) for e in load().entries
            if e.engine == ENGINE_VLLM_V0 and e.expected == "HOLDS" and "bmc" in e.methods
            and catalogue.get(e.property).kind == "step"]


def _assert_refused(config: str) -> None:
    """The invariant proof on `config` fails in its inductive step (a patched fact or
    rule is wrong)."""
    family, bounds = _family(config)
    result = induction.prove_well_formed(family, bounds, 120.0)
    assert not result.proved
    assert result.reason.startswith("inductive step: sat")


# v0_tiny's entries pay its invariant proof (11-18 s): deep, so in the slow suite; the
# other configs' entries stay in the default suite.
@pytest.mark.parametrize("prop,config", [
    pytest.param(prop, config, marks=pytest.mark.slow) if config == "v0_tiny" else (prop, config)
    for prop, config in _holds_entries()])
def test_every_holds_entry_is_proved(prop: str, config: str) -> None:
    family, bounds = _family(config)
    assert induction.prove_well_formed(family, bounds, 120.0).proved
    result = induction.prove(catalogue.get(prop), family, bounds, 2, 120.0)
    if (prop, config) in NOT_PROVED:
        assert not result.proved and "inductive" in result.reason
    else:
        assert result.proved, result.reason


def test_a_violated_entry_is_not_proved() -> None:
    """no_admission_after_preemption is VIOLATED on the chunked path (S:1389-1394)."""
    family, bounds = _family("v0_chunked")
    assert induction.prove_well_formed(family, bounds, 120.0).proved
    result = induction.prove(catalogue.get("no_admission_after_preemption"), family,
                             bounds, 2, 120.0)
    assert not result.proved


# Two of the four modes in the default suite (one per path, one per preemption mode), all
# four in the slow suite.
@pytest.mark.parametrize(("chunked", "swap"), [
    (False, False), (True, True),
    pytest.param(False, True, marks=pytest.mark.slow),
    pytest.param(True, False, marks=pytest.mark.slow)],
    ids=["default-recompute", "chunked-swap", "default-swap", "chunked-recompute"])
def test_the_invariant_holds_on_every_state_of_concrete_runs(chunked: bool, swap: bool) -> None:
    """The rules under ConcreteOps on generator workloads; each run agrees with the
    reference record for record, so these are the reference's states."""
    checked = 0
    for seed in range(40):
        w = random_workload(seed, steps=25, chunked=chunked, swap=swap)
        sw = lay_out(w, RuleConfig.from_config(w.config))
        state = rules.initial_state(len(sw.specs), sw.cfg)
        assert invariant.well_formed(CONCRETE, sw.cfg, sw.specs, state)
        records = []
        for eos in sw.eos:
            state, observed = rules.step(CONCRETE, sw.cfg, sw.specs, state, eos)
            records.append(rules.to_record(observed, sw.ids, state))
            assert invariant.well_formed(CONCRETE, sw.cfg, sw.specs, state), \
                f"seed {seed} step {state.step}: {state}"
            checked += 1
        assert records == list(simulate(w)), f"seed {seed}: the rules left the reference"
    assert checked == 40 * 25


def _patched(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> None:
    """engines.get returns vLLM V0's model with some fields replaced."""
    real = engines.get
    changed = dataclasses.replace(real(ENGINE_VLLM_V0), **fields)
    monkeypatch.setattr(engines, "get",
                        lambda name: changed if name == ENGINE_VLLM_V0 else real(name))


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.usefixtures("fresh_induction_caches")
def test_a_wrong_fact_is_not_proved(monkeypatch: pytest.MonkeyPatch, config: str) -> None:
    """A waiting request has no outputs: true until a recompute preemption sends a request
    with outputs back to waiting (it keeps them, S:1795-1805)."""
    def wrong(ops: Any, cfg: Any, specs: Any, s: Any) -> Any:
        return ops.and_(invariant.well_formed(ops, cfg, specs, s),
                        *[ops.implies(x.status == WAITING, x.num_output_tokens == 0)
                          for x in s.slots])

    _patched(monkeypatch, well_formed=wrong)
    _assert_refused(config)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.usefixtures("fresh_induction_caches")
def test_a_wrong_rule_is_not_proved(monkeypatch: pytest.MonkeyPatch, config: str) -> None:
    """A step that forgets to move the waiting front's key down after a preemption: the
    next victim would share the key, so the invariant's key range breaks."""
    def wrong_step(ops: Any, cfg: Any, specs: Any, state: Any, eos: Any) -> Any:
        nxt, observed = rules.step(ops, cfg, specs, state, eos)
        return dataclasses.replace(nxt, wait_head=state.wait_head), observed

    _patched(monkeypatch, step=wrong_step)
    _assert_refused(config)


@pytest.mark.parametrize("config", SWAP_CONFIGS)
@pytest.mark.usefixtures("fresh_induction_caches")
def test_a_wrong_swap_fact_is_not_proved(monkeypatch: pytest.MonkeyPatch, config: str) -> None:
    """The CPU pool conserved exactly: true until a swapped group the whole GPU can never
    hold is ignored, whose CPU blocks are never given back (S:1696-1715)."""
    def wrong(ops: Any, cfg: Any, specs: Any, s: Any) -> Any:
        swapped = [ops.ite(x.status == SWAPPED, ops.cdiv(x.table_tokens, cfg.block_size), 0)
                   for x in s.slots]
        return ops.and_(invariant.well_formed(ops, cfg, specs, s),
                        s.cpu[0].free_blocks + ops.sum(swapped) == cfg.num_cpu_blocks)

    _patched(monkeypatch, well_formed=wrong)
    _assert_refused(config)


@pytest.mark.parametrize("config", SWAP_CONFIGS)
@pytest.mark.usefixtures("fresh_induction_caches")
def test_a_wrong_swap_rule_is_not_proved(monkeypatch: pytest.MonkeyPatch, config: str) -> None:
    """A swap that asks the pools for no blocks (`_can_swap` always OK): a swap-out can
    take more CPU blocks than are free, so the CPU pool goes negative."""
    monkeypatch.setattr(rules, "swap_blocks", lambda ops, cfg, tokens, table: 0)
    _assert_refused(config)
