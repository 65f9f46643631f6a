"""The array explorer's reduction proofs kept on disk (checker/methods/array/stored.py):
a stored Shape is the proved one exactly, a later process reads it instead of proving
again, a different question is not served from the store, and an undecided proof is
stored as undecided at its time limit: read back, it is still undecided (and counted so),
and a longer limit asks anew."""

from types import SimpleNamespace

import pytest
import z3

from checker.methods import proof_cache
from checker.methods.array import analysis, stored
from model import registry
from model.vllm.config import POLICY_PRIORITY, Config

SPIN_CFG = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=16, block_size=4,
                  num_gpu_blocks=6)
PRIORITY_CFG = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16,
                      block_size=2, num_gpu_blocks=5, policy=POLICY_PRIORITY)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A proof store of this test alone, and analysis's in-process caches emptied."""
    monkeypatch.setenv("BATCHPROOF_PROOF_CACHE", str(tmp_path))
    analysis._shape.cache_clear()
    analysis._permuted.cache_clear()
    yield tmp_path
    analysis._shape.cache_clear()
    analysis._permuted.cache_clear()


class _Proved(dict):
    """{name: (rule config, Shape)}, each shape proved with the store off on first use (the
    priority one only by the slow test that reads it: 8 s of z3)."""

    def __missing__(self, name):
        engine = registry.get("vllm-v1")
        rule_cfg = engine.rule_config({"fcfs": SPIN_CFG, "priority": PRIORITY_CFG}[name])
        with proof_cache.disabled():
            self[name] = (rule_cfg, analysis._proved_shape(engine, rule_cfg, 3))
        return self[name]


@pytest.fixture(scope="module")
def proved():
    """The shapes proved once per module, with the store off."""
    return _Proved()


def _guards(sh: analysis.Shape) -> list[z3.ExprRef]:
    return [g for of in sh.order for _, _, g in of.guards]


@pytest.mark.parametrize("name", ["fcfs", pytest.param("priority", marks=pytest.mark.slow)])
def test_a_stored_shape_is_the_proved_one(store, monkeypatch, proved, name):
    engine = registry.get("vllm-v1")
    rule_cfg, sh = proved[name]
    assert sh.order and sh.behaviour_proved  # the guards are what is at stake
    monkeypatch.setattr(analysis, "_proved_shape", lambda *args: sh)
    assert analysis.shape(engine, rule_cfg, 3) is sh  # proved (here: given) and stored
    assert len(list(store.glob("array-shape-*.json"))) == 1
    analysis._shape.cache_clear()
    loaded = analysis.shape(engine, rule_cfg, 3)
    assert loaded is not sh
    assert stored.shape_to_json(loaded) == stored.shape_to_json(sh)
    assert all(a.eq(b) for a, b in zip(_guards(loaded), _guards(sh), strict=True))
    assert loaded.symmetry == sh.symmetry and loaded.retired == sh.retired


def test_a_later_run_reads_the_store_instead_of_proving(store, monkeypatch, proved):
    engine = registry.get("vllm-v1")
    rule_cfg, sh = proved["fcfs"]
    monkeypatch.setattr(analysis, "_proved_shape", lambda *args: sh)
    analysis.shape(engine, rule_cfg, 3)
    analysis.permuted(engine, rule_cfg, 3, frozenset({"num_preemptions"}))
    analysis._shape.cache_clear()
    analysis._permuted.cache_clear()

    def no_proofs(*args):
        raise AssertionError("proved again")

    monkeypatch.setattr(analysis, "_proved_shape", no_proofs)
    monkeypatch.setattr(analysis._Analyser, "permuted", no_proofs)
    analysis.shape(engine, rule_cfg, 3)
    analysis.permuted(engine, rule_cfg, 3, frozenset({"num_preemptions"}))
    # another question is proved, not served: one more block in the pool
    other = engine.rule_config(Config(max_num_batched_tokens=8, max_num_seqs=4,
                                      max_model_len=16, block_size=4, num_gpu_blocks=7))
    with pytest.raises(AssertionError, match="proved again"):
        analysis.shape(engine, other, 3)


def test_an_undecided_proof_is_stored_as_undecided_at_its_time_limit(store, monkeypatch,
                                                                     proved):
    engine = registry.get("vllm-v1")
    rule_cfg, sh = proved["fcfs"]
    tries = []

    def with_a_time_limit(*args):
        tries.append(args)
        analysis._undecided += 2  # as _solve_unsat counts a solver's unknown
        return sh

    monkeypatch.setattr(analysis, "_proved_shape", with_a_time_limit)
    before = analysis._undecided
    analysis.shape(engine, rule_cfg, 3)
    [kept] = store.glob("array-shape-*.json")
    assert proof_cache.undecided(proof_cache.load(kept.stem)) == 2
    # a later run asks the same at the same limit: read back, not tried again, and its
    # two answers are still undecided (a test that asserts none is undecided still sees them)
    analysis._shape.cache_clear()
    assert stored.shape_to_json(analysis.shape(engine, rule_cfg, 3)) == stored.shape_to_json(sh)
    assert len(tries) == 1 and analysis._undecided == before + 4
    # a longer limit is another question: tried again
    analysis._shape.cache_clear()
    monkeypatch.setattr(analysis, "PROOF_TIMEOUT_MS", analysis.PROOF_TIMEOUT_MS * 2)
    analysis.shape(engine, rule_cfg, 3)
    assert len(tries) == 2 and len(list(store.glob("array-shape-*.json"))) == 2


def test_an_answer_starved_of_cpu_is_not_stored(store, monkeypatch, proved):
    # z3's limit is wall time: on a loaded machine it runs out while z3 waits for a core,
    # and a quieter run may decide the query, so such a result is proved again next time
    engine = registry.get("vllm-v1")
    rule_cfg, sh = proved["fcfs"]

    def starved(*args):
        analysis._undecided += 1
        analysis._starved += 1  # as _solve_unsat counts an unknown given too little CPU
        return sh

    monkeypatch.setattr(analysis, "_proved_shape", starved)
    analysis.shape(engine, rule_cfg, 3)
    assert not list(store.glob("array-shape-*.json"))


@pytest.mark.parametrize("cpu_spent,starved", [(0.0001, True), (0.001, False)])
def test_an_unknown_is_starved_when_z3_spent_less_than_its_limit_on_the_cpu(
        monkeypatch, cpu_spent, starved):
    clock = iter([0.0, cpu_spent])
    monkeypatch.setattr(analysis, "time", SimpleNamespace(process_time=lambda: next(clock)))
    before, starved_before = analysis._undecided, analysis._starved
    x = z3.Int("x")
    # no time to decide it (1 ms): unknown, with 0.1 ms or 1 ms of CPU by the clock given
    assert analysis._solve_unsat([x * x * x + x * x == 2**61 + 7], 1) is False
    assert analysis._undecided == before + 1
    assert analysis._starved == starved_before + starved


def test_a_decided_result_carries_no_undecided_mark():
    assert proof_cache.mark_undecided({"permuted": True}, 0, 60_000) == {"permuted": True}
    marked = proof_cache.mark_undecided({"permuted": False}, 1, 60_000)
    assert proof_cache.undecided(marked) == 1 and marked["permuted"] is False
    assert proof_cache.undecided({"permuted": True}) == 0


def test_a_solver_unknown_is_counted_as_undecided():
    before = analysis._undecided
    x = z3.Int("x")
    # nonlinear integer arithmetic with no time to decide it: unknown, not unsat
    hard = [x * x * x + x * x == 2**61 + 7]
    assert analysis._solve_unsat(hard, 1) is False
    assert analysis._undecided == before + 1


def test_a_term_that_would_not_read_back_is_refused():
    r = z3.Real("r")
    assert stored.term_to_json(r > 1) is None  # only Int and Bool constants are stored
    x, b = z3.Int("s.slots.0.run_key"), z3.Bool("s.slots.1.done")
    term = z3.And(b, z3.If(x < 2, x + 1, x % 3) >= 0)
    kept = stored.term_to_json(term)
    assert kept is not None and stored.term_from_json(kept).eq(term)
    # a negative numeral prints as (- 2) and reads back as a negation: not the same term
    assert stored.term_to_json(x < -2) is None


def test_the_store_is_off_when_asked(monkeypatch):
    monkeypatch.setenv("BATCHPROOF_PROOF_CACHE", proof_cache.OFF)
    assert proof_cache.cache_dir() is None


def test_the_modules_tests_are_one_xdist_group(request):
    # `proved` above is set up once in `pytest -n auto` only if the module's tests all go
    # to one worker: tests/conftest.py groups them, and names the group in the node id
    # itself where xdist's own suffix no longer takes (pytest-dev/pytest-xdist#1386)
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("checked in an xdist worker of `pytest -n auto` (--dist loadgroup)")
    assert request.node.nodeid.endswith("@array_stored"), request.node.nodeid
