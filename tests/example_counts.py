"""How many Hypothesis examples a test that sets its own count runs: that count under the
CI profile, the README run's share of it under the `dev` profile (tests/conftest.py).

A per-test `@settings(max_examples=N)` wins over every profile, so without this a test's
count is the same in the README run as in CI; `examples(N)` keeps N in CI and scales it
by the profile's count in the README run, as the profile scales every other test."""

from hypothesis import settings

#: The CI profile's count (tests/conftest.py): a test's own count is its count there.
CI_EXAMPLES = 200


def examples(ci: int) -> int:
    """`ci` under a profile of CI's count or more; under one of fewer (the README run's
    `dev`), the same share of `ci` as the profile's of CI's, at least 1."""
    current = settings.default.max_examples
    return ci if current >= CI_EXAMPLES else max(1, ci * current // CI_EXAMPLES)
