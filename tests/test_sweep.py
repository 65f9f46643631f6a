"""batchproof sweep: the grid format, expansion with refused configs, keys and resume, the
local executor's handling of failing, dying and overdue tasks, the rows on disk and the
page. Ray is exercised in test_sweep_ray.py, the page in a browser in
test_sweep_browser.py."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.methods import worst
from checker.methods.verdict import HOLDS, UNKNOWN, VIOLATED
from checker.runner import stops
from checker.sweep import executors, store, work
from checker.sweep import grid as grids
from model.core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "sweeps"

# Two swept fields, one refused config (budget 2 < 4 seats), a property that is violated
# in two configs and holds in one, and a worst metric (decided by the worst search).
SMALL_GRID = textwrap.dedent("""\
    description: test grid
    engine: vllm-v1
    config:
      max-model-len: 16
      block-size: 4
      num-gpu-blocks: 9
      max-num-batched-tokens: [2, 8]
      max-num-seqs: [1, 4]
    properties:
      - starvation: {k: 2}
    worst: [starvation_steps]
    bounds: {slots: 2, depth: 4, max-prompt-len: 8, max-max-tokens: 4}
    timeout: 60
    """)


def run_cli(*argv):
    """batchproof in this process; main sets SIGPIPE's default, which is restored after."""
    old = signal.getsignal(signal.SIGPIPE)
    try:
        return main(list(argv))
    finally:
        signal.signal(signal.SIGPIPE, old)


def run_sweep(tmp_path, text=SMALL_GRID, *extra, name="small"):
    """Write the grid, sweep it into tmp_path/out, return (exit code, output folder)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    code = run_cli("sweep", str(path), "--out", str(tmp_path / "out"), "-q", *extra)
    return code, tmp_path / "out" / name


def read_rows(out):
    with open(out / store.CSV, newline="") as f:
        return list(csv.DictReader(f))


def without_timings(rows):
    return {tuple(sorted((k, v) for k, v in r.items() if k != "seconds")) for r in rows}


def parse(text):
    import yaml
    return grids.parse(yaml.safe_load(text), "t.yaml")


# --- the grid -----------------------------------------------------------------------------

def test_lists_ranges_and_vllm_spellings_expand_to_every_config():
    g = parse("""
        config:
          --max-num-batched-tokens: {from: 2k, to: 8K, times: 2}
          max_num_seqs: {from: 2, to: 8, step: 2}
          block-size: 16
          enable-chunked-prefill: [true, false]
          max-model-len: 2048
        properties: [budget_respected]
    """.replace("2k", "2000").replace("8K", "8192"))
    axes = {a.field: a.values for a in g.axes}
    assert axes["max_num_batched_tokens"] == (2000, 4000, 8000)
    assert axes["max_num_seqs"] == (2, 4, 6, 8)
    assert axes["block_size"] == (16,)
    assert axes["enable_chunked_prefill"] == (True, False)
    assert [a.field for a in g.swept] == ["max_num_batched_tokens", "max_num_seqs",
                                         "enable_chunked_prefill"]
    assert g.plot == ("max_num_batched_tokens", "max_num_seqs")
    assert g.points() == 3 * 4 * 2
    points, skipped = grids.expand(g)
    assert len(points) + len(skipped) == 24
    # vLLM's human forms are read as its flags read them
    g2 = parse("config: {max-num-batched-tokens: [8k, 8K]}\nproperties: [budget_respected]")
    assert g2.axes[0].values == (8000, 8192)


def test_refused_configs_are_listed_with_the_rule_and_never_run():
    g = parse("""
        config:
          max-model-len: 64
          block-size: 16
          num-gpu-blocks: [3, 5]
          max-num-batched-tokens: [4, 64]
          max-num-seqs: [8]
        properties: [budget_respected]
    """)
    points, skipped = grids.expand(g)
    rules = sorted((dict(s.values)["num_gpu_blocks"], dict(s.values)["max_num_batched_tokens"],
                    s.rule) for s in skipped)
    # 3 blocks (2 usable) cannot hold one 64-token request of 16-token blocks: the startup
    # KV check; 4 tokens for 8 seats breaks SchedulerConfig's batched >= seqs (checked first)
    assert rules == [(3, 4, "batched_tokens_ge_num_seqs"),
                     (3, 64, "kv_holds_one_max_model_len_request"),
                     (5, 4, "batched_tokens_ge_num_seqs")]
    assert [(p.config.num_gpu_blocks, p.config.max_num_batched_tokens) for p in points] == \
        [(5, 64)]
    assert len(grids.jobs(g, points)) == 1


def test_job_keys_hash_what_decides_the_verdict_and_not_the_timeout():
    base = """
        config: {max-num-seqs: [2, 4], max-num-batched-tokens: 8}
        properties: [budget_respected, {starvation: {k: 3}}]
        hazards: [starvation]
        worst: [starvation_steps]
        method: [bmc, explore]
        bounds: {slots: 2, depth: 4}
        timeout: TIMEOUT
    """
    g = parse(base.replace("TIMEOUT", "10"))
    points, _ = grids.expand(g)
    jobs = grids.jobs(g, points)
    # 2 configs x (2 properties x 2 methods + 1 hazard + 1 metric)
    assert len(jobs) == 2 * 6 == len({j.key for j in jobs})
    slower = grids.jobs(*(lambda g2: (g2, grids.expand(g2)[0]))(
        parse(base.replace("TIMEOUT", "99"))))
    assert [j.key for j in slower] == [j.key for j in jobs]
    deeper = parse(base.replace("TIMEOUT", "10").replace("depth: 4", "depth: 5"))
    assert not {j.key for j in grids.jobs(deeper, grids.expand(deeper)[0])} & \
        {j.key for j in jobs}
    batches = grids.batches(jobs)
    assert [len(b) for b in batches] == [6, 6]
    assert all(len({j.config for j in b}) == 1 for b in batches)


def test_hazard_params_set_the_envelope_the_hazard_reads():
    g = parse("""
        config: {max-num-seqs: 2}
        hazards: [{starvation: {k: 4}}, self_preemption, {repeated_preemption: {m: 2}}]
        bounds: {slots: 2, depth: 3}
    """)
    assert [c.params for c in g.checks] == [(("k", 4),), (), (("m", 2),)]
    job = grids.jobs(g, grids.expand(g)[0])[0]
    env = grids.envelope(job)
    assert (env.starvation_steps, env.slots, env.depth) == (4, 2, 3)
    assert g.pool_known is False


@pytest.mark.parametrize("text, says", [
    ("engine: vllm-v1@0.99.0\nproperties: [budget_respected]", "0.99.0"),  # registry's words
    ("config: {max-num-cats: 3}\nproperties: [budget_respected]", "not a vLLM flag"),
    ("config: {max-num-seqs: [0]}\nproperties: [budget_respected]", "must be an integer >= 1"),
    ("config: {max-num-seqs: {from: 8, to: 2}}\nproperties: [budget_respected]",
     "above to"),
    ("config: {max-num-seqs: {from: 1, to: 99999999999}}\nproperties: [budget_respected]",
     "more than the 1000000"),
    ("properties: [no_such_property]", "unknown property"),
    ("properties: [{starvation: {q: 2}}]", "bad params"),
    ("hazards: [bogus]", "unknown hazard"),
    ("engine: sglang\nhazards: [starvation]", "hazards are vLLM V1's"),
    ("properties: [budget_respected]\nmethod: z3", "method 'z3'"),
    ("properties: [budget_respected]\nbounds: {slots: 99}", "slots must be an integer in 1..16"),
    ("properties: [budget_respected]\nplot: [max-num-seqs]", "not a swept field"),
    ("properties: [budget_respected]\nfrobnicate: 1", "unknown key 'frobnicate'"),
    ("config: {}", "nothing to check"),
    # `config: []` (and `bounds: []`) were read as no config at all: one default config.
    ("config: []\nproperties: [budget_respected]", "config is [], not a mapping"),
    ("engine: sglang\nconfig: []\nproperties: [budget_respected]",
     "config is [], not a mapping"),
    ("config: 0\nproperties: [budget_respected]", "config is 0, not a mapping"),
    ("properties: [budget_respected]\nbounds: []", "bounds is [], not a mapping"),
])
def test_a_bad_grid_is_one_line_naming_the_problem(text, says):
    with pytest.raises(InputError) as err:
        parse(text)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_the_cli_says_a_bad_grid_in_one_line_and_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("engine: vllm-nope\nproperties: [budget_respected]\n")
    assert run_cli("sweep", str(path), "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown engine 'vllm-nope'" in err
    path.write_text("config: [1, 2\n")
    assert run_cli("sweep", str(path)) == 2
    assert "is not valid YAML at line" in capsys.readouterr().err


def test_the_cli_says_an_empty_config_list_in_one_line_and_exits_2(tmp_path, capsys):
    path = tmp_path / "g.yaml"
    path.write_text("engine: vllm-v1\nconfig: []\nproperties: [budget_respected]\n")
    assert run_cli("sweep", str(path), "--dry-run", "--out", str(tmp_path / "o")) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"batchproof: error: {path}: config is [], not a mapping; give "
                          "flag: value, list or range"), err


def test_every_example_grid_parses_and_the_ci_grid_is_small():
    for path in sorted(EXAMPLES.glob("*.yaml")):
        g = grids.load(path)
        points, skipped = grids.expand(g)
        assert points, path
        assert len(grids.jobs(g, points)) == len(points) * g.jobs_per_point()
    ci = grids.load(EXAMPLES / "ci.yaml")
    assert len(grids.jobs(ci, grids.expand(ci)[0])) <= 8


# --- the task -----------------------------------------------------------------------------

def _job(grid_text, **change):
    g = parse(grid_text)
    job = grids.jobs(g, grids.expand(g)[0])[0]
    from dataclasses import replace
    return replace(job, **change)


def test_a_job_that_raises_is_an_unknown_row_with_the_reason():
    bad = _job("properties: [budget_respected]",
               check=grids.Check(grids.PROPERTY, "no_such_property"))
    [out] = work.execute_batch((bad,))
    assert out.verdict == UNKNOWN and out.key == bad.key
    assert out.detail == "error: KeyError: 'no_such_property'"


@pytest.mark.slow  # about 9 s; CI step 11 runs it (-m 'slow or not slow')
def test_a_worst_metric_row_is_the_worst_commands_answer():
    job = _job("worst: [starvation_steps]\nbounds: {slots: 2, depth: 4}")
    [out] = work.execute_batch((job,))
    nc = work.as_job(job).config
    answer = worst.search(worst.METRICS["starvation_steps"], nc, job.timeout_s)
    assert answer.status == worst.DECIDED
    assert (out.verdict, out.metric) == (HOLDS, float(answer.value))
    assert out.detail.startswith(f"bound: starvation k={answer.value + 1} holds")


def test_an_unknown_metric_is_one_line():
    with pytest.raises(InputError, match="unknown metric 'nope'; metrics: starvation_steps"):
        parse("worst: [nope]")


# --- the local executor -------------------------------------------------------------------

def _fake_task(batch):
    """A task standing in for execute_batch: by max_num_seqs, raise (1), kill its worker
    (2), hang (3), or decide (4)."""
    seqs = dict(batch[0].values)["max_num_seqs"]
    if seqs == 1:
        raise RuntimeError("boom")
    if seqs == 2:
        os._exit(1)
    if seqs == 3:
        time.sleep(60)
    return [work.Outcome(j.key, HOLDS, "HOLDS(1)", "bmc", 1, 0.0, "fake", j.bounds)
            for j in batch]


def test_the_local_pool_accounts_for_every_job_when_tasks_raise_die_or_hang():
    g = parse("config: {max-num-seqs: [1, 2, 3, 4], max-num-batched-tokens: 8}\n"
              "properties: [budget_respected, running_within_max_num_seqs]")
    jobs = grids.jobs(g, grids.expand(g)[0])
    got = {}
    hooks = executors.PoolHooks(stop=stops.stop_pool, initializer=stops.init_worker,
                                initargs=(os.getpid(),))
    start = time.monotonic()
    executors.run_local(grids.batches(jobs), 2, lambda b, outs: got.update(
        {o.key: o for o in outs}), hooks, task=_fake_task, limit=lambda b: 3.0)
    assert time.monotonic() - start < 40
    assert set(got) == {j.key for j in jobs}
    by_seqs = {}
    for j in jobs:
        by_seqs.setdefault(dict(j.values)["max_num_seqs"], set()).add(
            (got[j.key].verdict, got[j.key].detail))
    assert by_seqs == {
        1: {(UNKNOWN, "error: RuntimeError: boom")},
        2: {(UNKNOWN, f"worker process died {executors.MAX_ATTEMPTS} times running it")},
        3: {(UNKNOWN, "timed out: ended after 3 s")},
        4: {(HOLDS, "fake")},
    }


# --- rows, resume and the page ------------------------------------------------------------

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    pytest.importorskip("pyarrow")
    pytest.importorskip("matplotlib")
    tmp = tmp_path_factory.mktemp("sweep")
    code, out = run_sweep(tmp)
    return code, out, tmp


def test_every_job_is_a_row_in_csv_and_parquet_with_its_counterexample(swept):
    import pyarrow.parquet as pq
    code, out, _ = swept
    assert code == 0  # every row decided
    rows = read_rows(out)
    table = pq.read_table(out / store.PARQUET).to_pylist()
    assert [r["key"] for r in rows] == [r["key"] for r in table]
    cells = {(r["max_num_batched_tokens"], r["max_num_seqs"], r["check"]):
             (r["verdict"], r["depth"], r["detail"]) for r in rows
             if r["check"] == "starvation k=2"}
    assert cells == {
        ("2", "1", "starvation k=2"): (VIOLATED, "2", "replayed on the reference"),
        ("8", "1", "starvation k=2"): (VIOLATED, "2", "replayed on the reference"),
        ("8", "4", "starvation k=2"): (HOLDS, "4", ""),
    }
    # The worst rows agree with the property rows: starvation k=2 is violated exactly where
    # the worst starvation is at least 2, and each decided row states its bound.
    worst_rows = {(r["max_num_batched_tokens"], r["max_num_seqs"]): r for r in rows
                  if r["check"] == "worst starvation_steps"}
    assert set(worst_rows) == {("2", "1"), ("8", "1"), ("8", "4")}
    for (b, s), r in worst_rows.items():
        value = int(float(r["metric"]))
        # by the methods that asked it: the array explorer's ladder alone, or a BMC
        # ladder confirmed by the explorer (worst.confirms)
        assert r["verdict"] == HOLDS and re.match(
            rf"bound: starvation k={value + 1} holds by (explore|bmc and explore)\b",
            r["detail"]), r["detail"]
        assert (value >= 2) == (cells[(b, s, "starvation k=2")][0] == VIOLATED)
    for r in rows:
        if r["check"] == "worst starvation_steps":
            assert bool(r["timeline"]) == (int(float(r["metric"])) > 0)
        elif r["verdict"] == VIOLATED:
            trace = json.loads((out / r["counterexample"]).read_text())
            assert trace["#meta"]["property"] == "starvation"
            assert trace["#meta"]["violated_at"] == 2
            assert "rect" in (out / r["timeline"]).read_text()
        else:
            assert r["counterexample"] == r["timeline"] == ""
    with open(out / store.SKIPPED, newline="") as f:
        skipped = list(csv.DictReader(f))
    assert [(s["max-num-batched-tokens"], s["max-num-seqs"], s["rule"]) for s in skipped] == \
        [("2", "4", "batched_tokens_ge_num_seqs")]


def test_a_rerun_skips_finished_jobs_and_runs_only_what_is_missing(swept, capsys):
    _, out, tmp = swept
    before = without_timings(read_rows(out))
    journal = out / store.JOURNAL
    assert len(journal.read_text().splitlines()) == 6
    assert run_sweep(tmp)[0] == 0
    assert "ran 0 jobs" in capsys.readouterr().out
    assert without_timings(read_rows(out)) == before
    # Lose one finished row (and the Parquet copy): only that job runs again, and a row
    # cut short by a kill is ignored.
    lines = journal.read_text().splitlines()
    lost = next(json.loads(line) for line in lines if json.loads(line)["verdict"] == HOLDS)
    kept = [line for line in lines if json.loads(line)["key"] != lost["key"]]
    journal.write_text("\n".join(kept) + "\n" + '{"key": "cut sho')
    (out / store.PARQUET).unlink()
    assert run_sweep(tmp)[0] == 0
    assert "ran 1 job in" in capsys.readouterr().out
    assert without_timings(read_rows(out)) == before
    # A row left UNKNOWN (a time limit, say) is kept on a rerun, and run again only with
    # --retry-unknown.
    rows = {}
    for line in journal.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # the cut line (a later row may follow it on it)
            rec = json.loads(line[line.index("{", 1):])
        rows[rec["key"]] = rec
    held = next(k for k, r in rows.items() if r["verdict"] == HOLDS)
    rows[held] = {**rows[held], "verdict": UNKNOWN}
    journal.write_text("".join(json.dumps(r) + "\n" for r in rows.values()))
    (out / store.PARQUET).unlink()
    assert run_sweep(tmp)[0] == 3
    said = capsys.readouterr().out
    assert "ran 0 jobs" in said, said
    assert run_sweep(tmp, SMALL_GRID, "--retry-unknown")[0] == 0
    assert "ran 1 job in" in capsys.readouterr().out
    assert without_timings(read_rows(out)) == before


def test_the_page_links_every_violated_cell_to_its_timeline(swept):
    _, out, _ = swept
    page = (out / "index.html").read_text()
    rows = read_rows(out)
    timelines = {r["timeline"] for r in rows if r["timeline"]}
    # the two violated cells and each worst row's witness
    assert len(timelines) == 2 + sum(1 for r in rows if r["check"] == "worst starvation_steps"
                                     and int(float(r["metric"])) > 0)
    for t in timelines:
        assert f'<a class="timeline" href="{t}">' in page
        assert f'xlink:href="{t}"' in page  # the inline heatmap's cell links too
    heat = sorted((out / "heatmaps").iterdir())
    assert [p.suffix for p in heat] == [".png", ".svg"] * 2
    assert heat[0].read_bytes()[:4] == b"\x89PNG"
    assert 'xlink:href="../timelines/' in heat[1].read_text()
    assert "batched_tokens_ge_num_seqs" in page
    assert "<script" not in page


def test_the_core_runs_without_the_extras_and_names_the_one_to_install(tmp_path):
    (tmp_path / "g.yaml").write_text(SMALL_GRID)
    block = ("import sys\nfor m in ('pyarrow', 'matplotlib', 'ray', 'tqdm'):\n"
             "    sys.modules[m] = None\n"
             "from checker.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")
    def cli(*argv):
        return subprocess.run([sys.executable, "-c", block, *argv], capture_output=True,
                              text=True, cwd=ROOT, timeout=120)
    res = cli("sweep", str(tmp_path / "g.yaml"), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "pip install -e '.[sweep]'" in res.stderr and "pyarrow" in res.stderr
    dry = cli("sweep", str(tmp_path / "g.yaml"), "--dry-run")
    assert dry.returncode == 0 and "refused max-num-batched-tokens=2 max-num-seqs=4" in dry.stdout
    assert cli("check", "--list").returncode == 0


def test_the_ray_executor_without_ray_names_the_ray_extra(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("matplotlib")
    (tmp_path / "g.yaml").write_text(SMALL_GRID)
    block = ("import sys\nsys.modules['ray'] = None\n"
             "from checker.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")
    res = subprocess.run([sys.executable, "-c", block, "sweep", str(tmp_path / "g.yaml"),
                          "--out", str(tmp_path / "o"), "--executor", "ray"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "pip install -e '.[ray]'" in res.stderr and res.stderr.count("\n") == 1


def test_a_ray_address_nobody_listens_at_is_one_line_at_once():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    start = time.monotonic()
    for address, says in ((f"127.0.0.1:{port}", "cannot reach the Ray cluster"),
                          (f"ray://127.0.0.1:{port}", "cannot reach the Ray cluster"),
                          ("head-node", "is not host:port")):
        with pytest.raises(InputError, match=says):
            executors._check_reachable(address)
    assert time.monotonic() - start < 10
    executors._check_reachable("auto")  # ray.init finds the local cluster itself


SLOW_GRID = textwrap.dedent("""\
    description: jobs long enough to be stopped in the middle
    engine: vllm-v1
    config:
      max-model-len: 16
      block-size: 4
      num-gpu-blocks: 9
      max-num-batched-tokens: [8, 9, 10, 11, 12, 13]
      max-num-seqs: [2, 3, 4]
    properties:
      - starvation: {k: 4}
    bounds: {slots: 3, depth: 8, max-prompt-len: 8, max-max-tokens: 4}
    method: bmc
    timeout: 120
    """)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_sweep_exits_128_plus_the_signal_and_keeps_its_rows(tmp_path, signum):
    """The runner (checker/runner/sweeps.py) ends the local pool on SIGINT / SIGTERM; the
    command says so, keeps the journal and exits 130 / 143."""
    pytest.importorskip("pyarrow")  # the sweep's tables (the `sweep` extra; CI step 11)
    grid = tmp_path / "slow.yaml"
    grid.write_text(SLOW_GRID)
    proc = subprocess.Popen(
        [sys.executable, "-m", "checker.cli", "sweep", str(grid), "--out",
         str(tmp_path / "out"), "--jobs", "2", "--quiet", "--no-pictures"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "out").exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # start-up: imports, the grid's expansion
    time.sleep(2)  # into the jobs (each takes longer than this)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, (out, err)
    assert f"stopped by {signal.Signals(signum).name}" in err
    assert "run the same command again to resume" in err
