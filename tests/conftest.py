"""Shared test setup: a derandomized Hypothesis profile for CI (same command, same result),
a fixture that clears k-induction's per-process caches around a test that patches the
rules or an invariant, and the headless browser of the browser tests."""

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_driver import HOW_TO, Browser, find_browser
from example_counts import CI_EXAMPLES
from hypothesis import HealthCheck, settings

from checker.methods import induction, proof_cache

# The modules whose tests prove invariants (10-40 s each) go first, so that neither
# worker of `pytest -n auto` ends the run alone on one of them.
FIRST = ("test_vllm_invariant_cached.py", "test_vllm_invariant_async.py",
         "test_vllm_v0_invariant.py", "test_array_explore.py", "test_fuzz.py")


# The default suite's tests of these modules each run on one worker (xdist's loadgroup,
# pyproject's addopts): they share the proofs and runs of the unpatched rules that the
# per-process caches keep (v0_tiny's invariant takes 10-18 s, the cached runs 10 s). The
# slow tests stay free, for balance: there one of them takes minutes.
# So do the modules whose tests share a module-scoped fixture or a cached result: xdist
# would otherwise send their tests to both workers, each paying for it (the array
# explorer's two proved shapes, 4.7 s; the 8B example config's hazards; worst's answers).
GROUPED = {"test_vllm_invariant_cached.py": "cached_invariant",
           "test_vllm_invariant_async.py": "async_invariant",
           "test_vllm_v0_invariant.py": "v0_invariant",
           "test_array_stored.py": "array_stored",
           "test_hazards_deployed.py": "hazards_deployed",
           "test_worst.py": "worst",
           # the array explorer's reduction proofs of one rule config, paid by the first
           # test that searches it (SMALL_CACHED's 40-90 s cold, TINY's and tiny_async's
           # 10-30 s); split over both workers, each paid them at the same time
           "test_array_modes.py": "array_modes",
           "test_array_explore.py": "array_explore",
           "test_diff_array.py": "diff_array"}
# Not test_theorems_deployed.py, though its refinement proofs are kept per process: on one
# worker after the array modules, at load 5, its serve-defaults proofs ran out of their 60 s
# (z3's search depends on the terms the process made before; docs/ci.md).


#: Seconds each long test took in a run of the README command or of CI step 5, by node id
#: (tests with no entry count as 0). The longest are sent first, so that no xdist worker
#: starts one of them when the other has nothing left (step 5's induction test, 150-470 s,
#: ended the run alone when it started late). Refresh it from a full run:
#: BATCHPROOF_RECORD_DURATIONS=tests/durations.json pytest -n auto [-m slow] (the run's
#: tests of 1 s or more are merged in).
DURATIONS = Path(__file__).with_name("durations.json")
RECORD_AT_LEAST_S = 1.0


def _durations() -> dict[str, float]:
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules whose longest test `DURATIONS` knows as long first, by that test; then
    the long modules (`FIRST`), the rest in the order collected; in each module its long
    tests first, longest first. A module's tests stay together: a module-scoped fixture
    (tests/test_array_stored.py's proofs, 6 s) is set up again whenever the run leaves
    its module. The default tests of each `GROUPED` module form one xdist group
    (xdist's loadgroup sends the groups, largest first, before the single tests)."""
    rank = {name: i for i, name in enumerate(FIRST)}
    seconds = _durations()
    longest: dict[Path, float] = {}
    for item in items:
        longest[item.path] = max(longest.get(item.path, 0.0), seconds.get(item.nodeid, 0.0))
    items.sort(key=lambda item: (-longest[item.path], rank.get(item.path.name, len(FIRST)),
                                 str(item.path), -seconds.get(item.nodeid, 0.0)))
    for item in items:
        group = GROUPED.get(item.path.name)
        if group is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """In an xdist worker of a `--dist loadgroup` run, end the node id of each test of an
    xdist group with `@group` before the worker sends its node ids (xdist's own
    pytest_collection_finish), as xdist's pytest_collection_modifyitems means to: the
    controller groups by that suffix. pytest-xdist 3.8 writes it to the old `_nodeid`,
    which pytest 9.2's structured node ids no longer read (pytest-dev/pytest-xdist#1386),
    so without this every group was split over both workers and each paid for the proofs
    and runs it was to share. A node id xdist did suffix is left as it is."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    for item in session.items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and not _grouped(item.nodeid):
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")


def _grouped(nodeid: str) -> bool:
    """The node id carries an xdist group (xdist's own test: an `@` after any `]`)."""
    return nodeid.rfind("@") > nodeid.rfind("]")


#: The test run's proof store: a folder of its own, kept between runs (a contributor's
#: second run reads the invariant, theorem and reduction proofs the first one paid for),
#: never the user's store. Every key digests the sources the proof reads
#: (proof_cache.sources_key), so an edit under model/, properties/ or checker/methods/
#: asks anew; a test that patches anything gets an empty store of its own
#: (`_patching_tests_store_nothing`). BATCHPROOF_PROOF_CACHE, when set, wins;
#: BATCHPROOF_TEST_PROOFS=fresh gives the run an empty folder, removed at its end (a cold
#: run, as on a new machine).
TEST_STORE = "test-proofs"
#: Stored proofs unread for this long are removed when a run starts: sources edited since
#: have new keys, and nothing else would remove the old ones.
STALE_DAYS = 14

_MADE = pytest.StashKey[str]()


def _prune(folder: Path, days: float) -> None:
    cutoff = time.time() - days * 86400
    for path in folder.glob("*.json"):
        with contextlib.suppress(OSError):
            if path.stat().st_atime < cutoff and path.stat().st_mtime < cutoff:
                path.unlink()


def _kept_folder() -> Path | None:
    """The store kept between runs, its stale entries pruned; None when it cannot be
    written."""
    folder = proof_cache.cache_home() / TEST_STORE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _prune(folder, STALE_DAYS)
    except OSError:
        return None
    return folder


def pytest_configure(config: pytest.Config) -> None:
    """Point the proof store (checker/methods/proof_cache.py) at the test run's own folder,
    shared by its xdist workers (they inherit the environment): `TEST_STORE` under
    batchproof's cache folder, or an empty one with BATCHPROOF_TEST_PROOFS=fresh."""
    if "BATCHPROOF_PROOF_CACHE" in os.environ or hasattr(config, "workerinput"):
        return
    folder = _kept_folder() if os.environ.get("BATCHPROOF_TEST_PROOFS") != "fresh" else None
    if folder is None:  # asked for a cold run, or no writable cache folder
        folder = Path(tempfile.mkdtemp(prefix="batchproof-proofs-"))
        config.stash[_MADE] = str(folder)
    os.environ["BATCHPROOF_PROOF_CACHE"] = str(folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove a fresh proof folder of this run (made by the controller, not by a worker)."""
    made = config.stash.get(_MADE, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        del os.environ["BATCHPROOF_PROOF_CACHE"]


@pytest.fixture(autouse=True)
def _patching_tests_store_nothing(request: pytest.FixtureRequest,
                                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A test that patches (`monkeypatch`) reads and writes an empty store of its own: a
    proof of patched rules must never reach the store that later runs read, and a
    patched test must not read a proof of the real rules instead of proving its own. (A
    test that points BATCHPROOF_PROOF_CACHE somewhere itself still wins: it sets it
    after this.)"""
    if "monkeypatch" not in request.fixturenames:
        yield
        return
    before = os.environ.get("BATCHPROOF_PROOF_CACHE")
    os.environ["BATCHPROOF_PROOF_CACHE"] = str(tmp_path_factory.mktemp("proofs"))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("BATCHPROOF_PROOF_CACHE", None)
        else:
            os.environ["BATCHPROOF_PROOF_CACHE"] = before


settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=CI_EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow],
)
# The README run (`dev`) takes a quarter of CI's examples: it is the check before a
# commit, and its seeds differ run by run; CI (step 2, derandomized) keeps 200. A test
# with a count of its own takes the same share of it (tests/example_counts.py).
settings.register_profile("dev", deadline=None, max_examples=50)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def fresh_induction_caches(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that patches the rules or the invariant (by `monkeypatch`) sees what it
    patches, not a cached proof, and leaves no proof of the patched rules behind
    (k-induction caches the step relation and the invariant's proof per process). A test
    that patches nothing shares the proofs of the unpatched rules with its neighbours."""
    if "monkeypatch" not in request.fixturenames:
        yield
        return
    induction.clear_caches()
    with proof_cache.disabled():  # nor a stored proof, nor one of the patched rules kept
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


_RECORDED: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each test's set-up, call and tear-down time (on xdist's controller too) when
    BATCHPROOF_RECORD_DURATIONS names a file to merge them into."""
    if "BATCHPROOF_RECORD_DURATIONS" in os.environ and not report.skipped:
        nodeid = report.nodeid.rpartition("@")[0] if _grouped(report.nodeid) else report.nodeid
        _RECORDED[nodeid] = _RECORDED.get(nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Merge this run's tests of `RECORD_AT_LEAST_S` or more into the durations file (by
    the controller, or a run without xdist; never by a worker)."""
    target = os.environ.get("BATCHPROOF_RECORD_DURATIONS")
    if not target or hasattr(session.config, "workerinput") or not _RECORDED:
        return
    path = Path(target)
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    for nodeid, took in _RECORDED.items():
        if took >= RECORD_AT_LEAST_S:
            known[nodeid] = round(took, 1)
        else:
            known.pop(nodeid, None)
    path.write_text(json.dumps(dict(sorted(known.items(), key=lambda kv: (-kv[1], kv[0]))),
                               indent=0) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures a test recorded as its "summary" property (the fuzz survey's),
    which reach the controller from xdist's workers where printed output would not."""
    lines = [value for key in ("passed", "failed")
             for report in terminalreporter.stats.get(key, [])
             if report.when == "call"
             for name, value in getattr(report, "user_properties", ()) if name == "summary"]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)

