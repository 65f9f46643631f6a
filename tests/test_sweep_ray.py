"""batchproof sweep on Ray: a local Ray started here with 2 CPUs gives exactly the local
executor's rows and counterexample files, and a run whose worker is killed mid-task still
accounts for every job (Ray runs the task again, or the job is UNKNOWN with the reason).

Slow (Ray alone takes 10-20 s to start and stop on a busy 2-core machine): run with
`python -m pytest -m slow tests/test_sweep_ray.py`; without Ray it skips and says how to
install it."""

import os
import signal
import threading
import time

import pytest
from test_sweep import SMALL_GRID, read_rows, run_sweep, without_timings

from checker.methods.verdict import UNKNOWN
from checker.sweep import executors
from checker.sweep import grid as grids

ray = pytest.importorskip("ray", reason="needs Ray: pip install -e '.[ray]'")
pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")
pytestmark = pytest.mark.slow

# The small grid and a hazard: properties through jobs.run_batch, hazards through
# hazards.decide, a worst metric, and a refused config, all on Ray.
RAY_GRID = SMALL_GRID + "hazards: [{starvation: {k: 2}}]\n"


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The local executor's output; before Ray starts, since the pool forks this process."""
    tmp = tmp_path_factory.mktemp("local")
    code, out = run_sweep(tmp, RAY_GRID, name="grid")
    return code, out


@pytest.fixture(scope="module")
def ray_two_cpus(local):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="warning")
    yield
    ray.shutdown()


def test_ray_gives_exactly_the_local_rows_and_files(local, ray_two_cpus, tmp_path):
    local_code, local_out = local
    code, out = run_sweep(tmp_path, RAY_GRID, "--executor", "ray", name="grid")
    assert code == local_code  # the same rows, so the same exit code
    rows, expected = read_rows(out), read_rows(local_out)
    assert len(rows) == 9
    assert without_timings(rows) == without_timings(expected)
    for r in rows:
        for column in ("counterexample", "timeline"):
            if r[column]:
                assert (out / r[column]).read_bytes() == (local_out / r[column]).read_bytes()


def _task_workers():
    """Ray worker processes running the sweep's task now (Ray titles them by the task)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if cmd.startswith(b"ray::execute_batch"):
            out.append(int(pid))
    return out


def test_a_worker_killed_mid_run_loses_no_job(local, ray_two_cpus, tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(RAY_GRID)
    g = grids.load(path)
    jobs = grids.jobs(g, grids.expand(g)[0])
    expected = {r["key"]: (r["verdict"], r["depth"]) for r in read_rows(local[1])}
    got, killed = {}, []

    def kill_one():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pids = _task_workers()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    executors.run_ray(grids.batches(jobs), lambda b, outs: got.update(
        {o.key: o for o in outs}))
    killer.join(5)
    assert killed, "no task worker was seen to kill"
    assert set(got) == {j.key for j in jobs}  # every job accounted for
    for key, outcome in got.items():
        depth = "" if outcome.depth is None else str(outcome.depth)
        retried = (outcome.verdict, depth) == expected[key]
        lost = outcome.verdict == UNKNOWN and "worker died" in outcome.detail
        assert retried or lost, (key, outcome)
    # Ray's retry ran the killed task again: every job has the local executor's verdict.
    assert sum(o.verdict == UNKNOWN and "worker died" in o.detail for o in got.values()) == 0


def test_a_stop_cancels_the_running_tasks_and_returns(ray_two_cpus, tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(RAY_GRID)
    g = grids.load(path)
    jobs = grids.jobs(g, grids.expand(g)[0])
    got = {}
    start = time.monotonic()
    executors.run_ray(grids.batches(jobs), lambda b, outs: got.update(
        {o.key: o for o in outs}), stop=lambda: bool(got))
    assert 0 < len(got) < len(jobs)  # the first batch's rows, then nothing more
    assert time.monotonic() - start < 60
    assert ray.get(ray.put(7)) == 7  # Ray itself is left running for the caller
