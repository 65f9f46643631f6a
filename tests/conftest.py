"""Shared test setup: a derandomized Hypothesis profile for CI (same command, same result),
and a fixture that clears k-induction's per-process caches around a test that patches
the rules or an invariant."""

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from checker.methods import induction

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=200,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def fresh_induction_caches() -> Iterator[None]:
    """The test sees the rules and invariant it patches, not a cached proof (k-induction
    caches the step relation and the invariant's proof per process)."""
    induction.clear_caches()
    yield
    induction.clear_caches()
