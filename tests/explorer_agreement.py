"""The array explorer against the reference explorer on a group of manifest entries that
share a config and bounds (one search, as jobs.run_batch shares it among step properties):
the same status, depth, least counterexample and lasso for each entry, and every violation
replayed on the reference. Used by tests/test_array_explore.py and tests/test_array_modes.py."""

from checker.methods import array as ax
from checker.methods import explore
from checker.methods.jobs import Job, explored, family_of, symbolic_bounds
from checker.methods.verdict import VIOLATED
from properties import catalogue, manifest


def agree(entries, timeout, *, supported=False, same_states=False,
          reference_symmetric=True):
    """Search `entries` with both explorers (`timeout` seconds each) and assert they agree;
    with `supported`, first assert the array explorer applies; with `same_states`, that the
    two searches found as many states (their keys are the same quotient); with
    `reference_symmetric` False, the reference explorer names requests by id, not by
    queue position. Returns the array results."""
    m = manifest.load()
    first = entries[0]
    nc = manifest.with_bounds(m.configs[first.config], **dict(first.bounds))
    props = [catalogue.get(e.property, **dict(e.params)) for e in entries]
    family, bounds = family_of(nc), symbolic_bounds(nc)
    if supported:
        assert ax.unsupported(family, bounds) is None
    reference = explore.check_many(props, family, bounds, timeout,
                                   symmetric=reference_symmetric)
    arrays = ax.check_many(props, family, bounds, timeout)
    if same_states:
        # The whole menu (the twins of checker/methods/array/kinds.py are fewer states).
        counted = arrays if not arrays[0].stats.note else ax.check_many(
            props, family, bounds, timeout, options=ax.Options(merge_max_tokens=False))
        assert counted[0].stats.states == reference[0].stats.states, \
            (counted[0].stats.states, reference[0].stats.states)
    for e, ref, arr in zip(entries, reference, arrays, strict=True):
        assert (arr.status, arr.depth, arr.workload, arr.loop) == \
            (ref.status, ref.depth, ref.workload, ref.loop), e.property
        if arr.status == "violated":
            job = Job(e.engine, e.property, e.params, nc, e.expected, 600, method="explore")
            assert explored(job, arr).verdict.verdict == VIOLATED, e.property  # replayed
    return arrays
