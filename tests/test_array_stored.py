"""The array explorer's reduction proofs kept on disk (checker/methods/array/stored.py):
a stored Shape is the proved one exactly, a later process reads it instead of proving
again, a different question is not served from the store, and an undecided proof is
stored as undecided at its limit, z3's resource count (analysis.PROOF_RLIMIT), which
decides the same at any machine load: read back, it is still undecided (and counted so),
and a larger limit asks anew."""

import subprocess
import sys

import pytest
import z3

from checker.methods import proof_cache, solver
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


def test_an_undecided_proof_is_stored_as_undecided_at_its_limit(store, monkeypatch, proved):
    engine = registry.get("vllm-v1")
    rule_cfg, sh = proved["fcfs"]
    tries = []

    def at_the_limit(*args):
        tries.append(args)
        analysis._undecided += 2  # as _solve_unsat counts a solver's unknown
        return sh

    monkeypatch.setattr(analysis, "_proved_shape", at_the_limit)
    before = analysis._undecided
    analysis.shape(engine, rule_cfg, 3)
    [kept] = store.glob("array-shape-*.json")
    assert proof_cache.undecided(proof_cache.load(kept.stem)) == 2
    # a later run asks the same at the same limit: read back, not tried again, and its
    # two answers are still undecided (a test that asserts none is undecided still sees them)
    analysis._shape.cache_clear()
    assert stored.shape_to_json(analysis.shape(engine, rule_cfg, 3)) == stored.shape_to_json(sh)
    assert len(tries) == 1 and analysis._undecided == before + 4
    # a larger limit is another question: tried again
    analysis._shape.cache_clear()
    monkeypatch.setattr(analysis, "PROOF_RLIMIT", analysis.PROOF_RLIMIT * 2)
    analysis.shape(engine, rule_cfg, 3)
    assert len(tries) == 2 and len(list(store.glob("array-shape-*.json"))) == 2


def test_an_unknown_given_before_the_limit_is_not_stored(store, monkeypatch, proved):
    # an unknown that z3 returned with units to spend (an interrupt) is not known to come
    # back the same, so such a result is proved again next time
    engine = registry.get("vllm-v1")
    rule_cfg, sh = proved["fcfs"]

    def cut_short(*args):
        analysis._undecided += 1
        analysis._unlimited += 1  # as _solve_unsat counts an unknown below the limit
        return sh

    monkeypatch.setattr(analysis, "_proved_shape", cut_short)
    analysis.shape(engine, rule_cfg, 3)
    assert not list(store.glob("array-shape-*.json"))


def _pigeons(n: int = 7) -> list:
    """n pigeons in n - 1 holes, one to a hole: unsatisfiable, decided by z3 in about
    27,000 units (the solver's legacy arithmetic gives up on a nonlinear query before any
    limit, so the hard query is a propositional one)."""
    sits = [[z3.Bool(f"p{i}_{j}") for j in range(n - 1)] for i in range(n)]
    return [z3.Or(*row) for row in sits] + [
        z3.Not(z3.And(sits[i][j], sits[k][j]))
        for j in range(n - 1) for i in range(n) for k in range(i + 1, n)]


def test_an_unknown_is_reached_by_the_resource_limit():
    hard = _pigeons()
    answer, spent = analysis.ask(hard, 1000)
    assert answer == z3.unknown and spent >= 1000
    assert analysis.ask(hard, 1000) == (answer, spent)  # the same units again
    assert analysis.ask(hard, 1_000_000)[0] == z3.unsat
    before, unlimited = analysis._undecided, analysis._unlimited
    assert analysis._solve_unsat(hard, 1000) is False
    # counted as undecided, and as reached by the limit (so a result holding it is stored)
    assert analysis._undecided == before + 1 and analysis._unlimited == unlimited
    assert analysis._solve_unsat(hard, 1_000_000) is True


def test_a_query_the_preprocessing_solver_gives_up_on_is_decided_by_the_default():
    """`ask` tries the preprocessing solver first and z3's default solver where it is left
    undecided: the legacy arithmetic gives up on a nonlinear query by itself (below the
    limit), the default decides it in about 2,100 units, and that answer is `ask`'s, on
    this thread and on another."""
    x = z3.Int("x")
    hard = [x * x * x + x * x == 2**61 + 7]
    first = analysis._posed(hard, 1_000_000)
    assert analysis._checked(first)[0] == z3.unknown
    answer, spent = analysis.ask(hard, 1_000_000)
    assert answer == z3.unsat and spent < 100_000
    assert analysis.ask_later(hard, 1_000_000)() == (answer, spent)
    before, unlimited = analysis._undecided, analysis._unlimited
    assert analysis._solve_unsat(hard, 1_000_000) is True
    assert (analysis._undecided, analysis._unlimited) == (before, unlimited)


def test_a_query_asked_on_another_thread_answers_as_asked_here():
    """`ask_later` runs the search on a thread while this one builds more terms in the
    shared context; the answer and the units are `ask`'s."""
    hard = _pigeons()
    for limit in (1000, 1_000_000):
        later = analysis.ask_later(hard, limit)
        built = [z3.Int(f"busy{i}") + i for i in range(2000)]  # the shared context in use
        assert later() == analysis.ask(hard, limit) and len(built) == 2000
    easy = analysis.ask_later([z3.Int("y") > 0], 1000)
    assert easy()[0] == z3.sat


def _symmetry_one_proof_after_another(a: analysis._Analyser) -> str:
    """`symmetry()` as it was before its proof ran on another thread: each condition's
    proofs asked here, one after the other."""
    for condition in ("none", "priority"):
        if any(a._swap_breaks(i, condition) for i in range(a.n - 1)):
            continue
        if all(a._commutes(i, condition, None) for i in range(a.n - 1)):
            return "full" if condition == "none" else "priority"
    return "none"


@pytest.mark.parametrize("name", ["fcfs", pytest.param("priority", marks=pytest.mark.slow)])
def test_the_symmetry_begun_on_another_thread_is_the_sequential_one(name):
    """`symmetry_later` gives the answer of the proofs asked one after the other on this
    thread and counts the same unknowns: "full" under FCFS, "priority" (slots of
    different priority) under the priority policy."""
    engine = registry.get("vllm-v1")
    rule_cfg = engine.rule_config({"fcfs": SPIN_CFG, "priority": PRIORITY_CFG}[name])
    a = analysis._Analyser(engine, rule_cfg, 2)
    before = analysis._undecided
    sequential = _symmetry_one_proof_after_another(a)
    counted = analysis._undecided - before
    assert a.symmetry_later()() == sequential == {"fcfs": "full", "priority": "priority"}[name]
    assert analysis._undecided - before == 2 * counted


class _Busy:
    """Two processes that keep both cores busy while inside (a loaded machine)."""

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(2)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def test_a_reduction_left_undecided_by_the_limit_is_stored_and_the_same_under_load(
        store, monkeypatch, proved):
    # vLLM FCFS's symmetry carries num_preemptions along: z3 decides it in about 3.1 million
    # units, so at 500,000 it is undecided, whatever the machine's load
    engine = registry.get("vllm-v1")
    rule_cfg, sh = proved["fcfs"]
    assert sh.symmetry == "full"
    read = frozenset({"num_preemptions"})
    monkeypatch.setattr(analysis, "_proved_shape", lambda *args: sh)
    asked = []

    def logged(facts, rlimit):
        asked.append(ask(facts, rlimit))
        return asked[-1]

    ask = analysis.ask
    monkeypatch.setattr(analysis, "ask", logged)
    monkeypatch.setattr(analysis, "PROOF_RLIMIT", 500_000)
    before, unlimited = analysis._undecided, analysis._unlimited
    assert analysis.permuted(engine, rule_cfg, 3, read) is False
    [(answer, spent)] = asked
    assert answer == z3.unknown and spent >= 500_000
    assert analysis._undecided == before + 1 and analysis._unlimited == unlimited
    # stored as undecided, under the key of the question with the limit in it
    name = proof_cache.key("array-permuted", engine.name, rule_cfg, 3, sorted(read),
                           ("rlimit", 500_000, solver.SETUP))
    assert proof_cache.load(name) == {"permuted": False,
                                      proof_cache.UNDECIDED: {"count": 1, "rlimit": 500_000}}
    # read back under load, not asked again; asked again under load, the same answer in the
    # same units
    analysis._shape.cache_clear()
    analysis._permuted.cache_clear()
    with _Busy():
        assert analysis.permuted(engine, rule_cfg, 3, read) is False
        assert len(asked) == 1
        analysis._permuted.cache_clear()
        with proof_cache.disabled():
            assert analysis.permuted(engine, rule_cfg, 3, read) is False
    assert asked == [(answer, spent)] * 2
    # at the full limit it is proved
    analysis._permuted.cache_clear()
    monkeypatch.setattr(analysis, "PROOF_RLIMIT", 10**9)
    with proof_cache.disabled():
        assert analysis.permuted(engine, rule_cfg, 3, read) is True
    assert asked[-1][0] == z3.unsat and asked[-1][1] < 500_000 * 8


def test_a_decided_result_carries_no_undecided_mark():
    assert proof_cache.mark_undecided({"permuted": True}, 0, 10**9) == {"permuted": True}
    marked = proof_cache.mark_undecided({"permuted": False}, 1, 10**9)
    assert proof_cache.undecided(marked) == 1 and marked["permuted"] is False
    assert proof_cache.undecided({"permuted": True}) == 0


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
