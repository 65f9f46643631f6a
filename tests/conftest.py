"""Shared test setup: a derandomized Hypothesis profile for CI (same command, same result),
a fixture that clears k-induction's per-process caches around a test that patches the
rules or an invariant, and the headless browser of the browser tests."""

import os
from collections.abc import Iterator

import pytest
from browser_driver import HOW_TO, Browser, find_browser
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium session per test module (skipped, saying how to install it,
    when Chromium or chromedriver is missing)."""
    found = find_browser()
    if found is None:
        pytest.skip(HOW_TO)
    b = Browser(*found)
    yield b
    b.close()
