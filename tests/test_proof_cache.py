"""Invariant proofs kept on disk (checker/methods/proof_cache.py): a decided proof is read
back by a later process instead of being proved again; a different question, other
sources, a time limit, the cache turned off or a patching test never read or write a
stored one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from checker.methods import induction, proof_cache
from checker.methods.jobs import family_of, symbolic_bounds
from properties.manifest import load


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty proof cache of this test's own, and no proof held in this process."""
    monkeypatch.setenv("BATCHPROOF_PROOF_CACHE", str(tmp_path))
    induction.clear_caches()
    yield tmp_path
    induction.clear_caches()


def _question(config: str, slots: int | None = 2):
    """A config's family and bounds, by default at 2 request slots (proofs in a fraction
    of a second); `slots=None` keeps the manifest's."""
    nc = load().configs[config]
    bounds = symbolic_bounds(nc)
    return family_of(nc), bounds if slots is None else replace(bounds, slots=slots)


def _fresh_process() -> None:
    """What another worker or a later run starts from: nothing cached in memory."""
    induction.clear_caches()


def test_a_proof_is_read_back_instead_of_proved_again(cache: Path) -> None:
    family, bounds = _question("tiny_fcfs")
    first = induction.prove_well_formed(family, bounds, 60.0)
    assert first.proved and first.seconds > 0
    assert len(list(cache.glob("invariant-*.json"))) == 1
    _fresh_process()
    again = induction.prove_well_formed(family, bounds, 60.0)
    assert again.proved and again.k == first.k and again.seconds == 0.0


def test_another_question_or_other_sources_are_proved_anew(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    family, bounds = _question("tiny_fcfs")
    induction.prove_well_formed(family, bounds, 60.0)
    other_family, other_bounds = _question("tiny_priority")
    _fresh_process()
    assert induction.prove_well_formed(other_family, other_bounds, 60.0).seconds > 0
    monkeypatch.setattr(proof_cache, "sources_key", lambda: "edited")
    _fresh_process()
    assert induction.prove_well_formed(family, bounds, 60.0).seconds > 0
    assert len(list(cache.glob("invariant-*.json"))) == 3


def test_a_time_limit_is_not_kept(cache: Path) -> None:
    family, bounds = _question("tiny_cached", slots=None)  # its proof takes minutes
    result = induction.prove_well_formed(family, bounds, 1.0)
    assert not result.proved and "sat" not in result.reason, result.reason
    assert list(cache.glob("*.json")) == []


def test_a_refutation_is_kept_with_its_reason(cache: Path) -> None:
    name = proof_cache.key("invariant", "a question")
    proof_cache.store(name, {"proved": False, "k": 1, "reason": "inductive step: sat"})
    assert proof_cache.load(name) == {"proved": False, "k": 1, "reason": "inductive step: sat"}


def test_off_and_disabled_neither_read_nor_write(cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    family, bounds = _question("tiny_fcfs")
    with proof_cache.disabled():
        assert induction.prove_well_formed(family, bounds, 60.0).proved
    assert list(cache.glob("*.json")) == []
    _fresh_process()
    induction.prove_well_formed(family, bounds, 60.0)  # stored now
    _fresh_process()
    with proof_cache.disabled():  # a stored proof is not read either
        assert induction.prove_well_formed(family, bounds, 60.0).seconds > 0
    monkeypatch.setenv("BATCHPROOF_PROOF_CACHE", proof_cache.OFF)
    assert proof_cache.cache_dir() is None
    _fresh_process()
    assert induction.prove_well_formed(family, bounds, 60.0).seconds > 0


def test_an_unwritable_cache_leaves_the_proof_standing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("BATCHPROOF_PROOF_CACHE", str(blocker / "proofs"))
    induction.clear_caches()
    family, bounds = _question("tiny_fcfs")
    assert induction.prove_well_formed(family, bounds, 60.0).proved
    induction.clear_caches()


def test_the_default_place_is_the_users_cache(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.delenv("BATCHPROOF_PROOF_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert proof_cache.cache_dir() == tmp_path / "batchproof" / "proofs"
