"""vLLM as `vllm serve` runs it (issue 15 item 4): `check` and `config` read vLLM flags
with prefix caching and the AsyncScheduler on; a witness of the cheaper cache-free rules
carries over only when the reference with the cache on confirms it; a bounded query too
large for the symbolic cache is UNKNOWN with the reason; a question without a manifest
expectation exits with its answer; the rule switch `cap_prefix_hit` and the bug class of
vllm-project/vllm#30320 it reproduces."""

import json
from dataclasses import replace

import pytest

from checker.cli.main import main
from checker.methods.jobs import Job, run
from checker.show.itf import read_counterexample
from model.core.ops import CONCRETE
from model.vllm.config import Config, VllmRules, parse_config
from model.vllm.engine import records_to_steps
from model.vllm.reference import simulate
from properties import catalogue
from properties.manifest import custom_config, with_bounds

SMALL = ["--max-num-seqs", "2", "--max-num-batched-tokens", "8", "--max-model-len", "16",
         "--block-size", "4", "--num-gpu-blocks", "8"]
CARRIED = "found on the rules of a cheaper config (prefix caching off"
UNCAPPED = "counterexamples/vllm_v1/admitted_with_tokens__tiny_cached_uncapped.itf.json"


def _check_json(capsys, *argv, out):
    code = main(["check", *argv, "--json", "--jobs", "1", "--timeout", "120", "--out", str(out)])
    return code, json.loads(capsys.readouterr().out)


def test_check_reads_vllm_flags_with_prefix_caching_on(capsys, tmp_path):
    code, doc = _check_json(capsys, *SMALL, "--property", "head_of_line", out=tmp_path)
    (v,) = doc["verdicts"]
    assert v["verdict"] == "VIOLATED" and CARRIED in v["detail"]
    assert code == 1  # no manifest expectation: the verdict is the answer
    (written,) = tmp_path.glob("vllm-v1__head_of_line*.itf.json")
    assert v["counterexample"] == str(written)


def test_no_enable_prefix_caching_is_honoured(capsys, tmp_path):
    code, doc = _check_json(capsys, *SMALL, "--no-enable-prefix-caching", "--property",
                            "head_of_line", out=tmp_path)
    (v,) = doc["verdicts"]
    assert v["verdict"] == "VIOLATED" and CARRIED not in v["detail"]
    assert code == 1


def test_a_question_that_holds_exits_0(capsys, tmp_path):
    code, doc = _check_json(capsys, *SMALL, "--no-enable-prefix-caching", "--property",
                            "running_within_max_num_seqs", "--depth", "2", "--slots", "2",
                            out=tmp_path)
    assert doc["verdicts"][0]["verdict"] in ("HOLDS", "PROVED") and code == 0


@pytest.mark.slow  # a bounded search; the note itself is tested before the run below
def test_a_cache_too_large_for_the_exact_symbolic_pool_is_searched_counted(capsys, tmp_path,
                                                                          monkeypatch):
    flags = ("--max-num-seqs", "4", "--max-num-batched-tokens", "64", "--max-model-len", "64",
             "--block-size", "2", "--num-gpu-blocks", "64", "--property",
             "kv_blocks_conserved", "--depth", "4")
    # The loop theorem carries the cache at every size (docs/parameterised_proofs.md) ...
    code, doc = _check_json(capsys, *flags, out=tmp_path)
    (v,) = doc["verdicts"]
    assert v["verdict"] == "PROVED" and v["method"] == "theorem" and code == 0
    # ... without it, k-induction over the counted pool proves it ...
    from checker.methods import jobs
    monkeypatch.setattr(jobs.theorems, "for_engine", lambda engine: {})
    code, doc = _check_json(capsys, *flags, out=tmp_path)
    (v,) = doc["verdicts"]
    assert v["verdict"] == "PROVED" and v["method"] == "induction" and code == 0
    # ... and without that too, BMC searches the pool counted (an over-approximation)
    # and says so.
    monkeypatch.setattr(jobs, "_counted_induction", lambda *args: None)
    code, doc = _check_json(capsys, *flags, out=tmp_path)
    (v,) = doc["verdicts"]
    assert v["verdict"] == "HOLDS" and v["depth"] == 4 and code == 0
    assert "the prefix cache is counted, not carried block by block" in v["detail"]


def test_a_cheaper_witness_is_kept_only_when_the_reference_confirms_it():
    # The witness search runs on the cache-free rules; the job's own config decides.
    cfg = replace(Config(max_num_batched_tokens=8, max_num_seqs=2, max_model_len=16,
                         block_size=4, num_gpu_blocks=8), enable_prefix_caching=True)
    nc = with_bounds(custom_config("custom", cfg, validated=True), slots=3, depth=4,
                     max_prompt_len=8, max_max_tokens=4)
    res = run(Job("vllm-v1", "starvation", (("k", 3),), nc, None, 120))
    assert res.verdict.verdict == "VIOLATED" and CARRIED in res.verdict.detail
    assert res.counterexample is not None and not res.counterexample.minimal
    workload = res.counterexample.workload
    assert workload.config.enable_prefix_caching
    prop = catalogue.get("starvation", k=3)
    steps = records_to_steps(workload, simulate(workload))
    assert not prop.holds(CONCRETE, steps, res.counterexample.violated_at - 1)


def test_config_prints_the_two_serve_features(capsys):
    code = main(["config", *SMALL, "--hazard", "priority_inversion"])
    out = capsys.readouterr().out
    assert code == 0
    assert any(line.split()[:2] == ["enable_prefix_caching", "on"] for line in out.splitlines())
    assert any(line.split()[:2] == ["async_scheduling", "on"] for line in out.splitlines())
    code = main(["config", *SMALL, "--no-enable-prefix-caching", "--no-async-scheduling",
                 "--hazard", "priority_inversion"])
    out = capsys.readouterr().out
    assert any(line.split()[:2] == ["enable_prefix_caching", "off"] for line in out.splitlines())
    assert any(line.split()[:2] == ["async_scheduling", "off"] for line in out.splitlines())


def test_the_uncapped_hit_counterexample_holds_with_the_cap():
    """vllm-project/vllm#30320's class: without the num_tokens - 1 cap a whole-prompt hit
    leaves 0 new tokens (the stored counterexample); the same workload with the pinned
    release's cap gets at least one token for every admitted request."""
    workload = read_counterexample(UNCAPPED).workload
    assert not workload.config.rules.cap_prefix_hit
    prop = catalogue.get("admitted_with_tokens")
    broken = records_to_steps(workload, simulate(workload))
    assert not all(prop.holds(CONCRETE, broken, t) for t in range(len(broken)))
    fixed = replace(workload, config=replace(workload.config, rules=VllmRules()))
    steps = records_to_steps(fixed, simulate(fixed))
    assert all(prop.holds(CONCRETE, steps, t) for t in range(len(steps)))


def test_rule_switches_round_trip_and_only_changed_ones_are_written():
    cfg = parse_config({"rules": {"cap_prefix_hit": False}})
    assert cfg.rules == VllmRules(cap_prefix_hit=False)
    assert cfg.to_dict()["rules"] == {"cap_prefix_hit": False}
    assert "rules" not in Config().to_dict()
    assert parse_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize(("rules", "needle"), [
    ('{"cap": false}', "unknown rule switch 'cap'"),
    ('{"cap_prefix_hit": 0}', "rule switch cap_prefix_hit must be true or false"),
    ('[1]', "config 'rules' must be an object of switch names"),
])
def test_a_bad_rule_switch_is_one_line(tmp_path, capsys, rules, needle):
    path = tmp_path / "w.json"
    doc = {"config": {"rules": json.loads(rules)},
           "requests": [{"id": "a", "prompt_len": 2, "max_tokens": 1}]}
    path.write_text(json.dumps(doc))
    code = main(["simulate", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


_BEYOND = ("--max-num-seqs", "4", "--max-num-batched-tokens", "64", "--max-model-len", "64",
           "--block-size", "2", "--num-gpu-blocks", "64", "--property", "kv_blocks_conserved",
           "--depth", "4")


def _stderr_before_the_run(capsys, monkeypatch, tmp_path, *extra):
    """What `check` wrote on stderr before any job ran (the run is stopped at its start)."""
    import signal

    from checker.runner import pool
    from checker.runner.stops import Stopped
    seen = {}

    def execute(jobs, workers, progress=None):
        seen["err"] = capsys.readouterr().err
        raise Stopped(signal.SIGINT)
    monkeypatch.setattr(pool, "execute", execute)
    code = main(["check", *_BEYOND, *extra, "--out", str(tmp_path)])
    assert code == 130
    return seen["err"]


def test_a_query_beyond_the_exact_symbolic_cache_says_it_is_counted_before_it_runs(
        capsys, monkeypatch, tmp_path):
    err = _stderr_before_the_run(capsys, monkeypatch, tmp_path)
    assert "note: custom: the prefix cache is counted, not carried block by block (the " \
           "exact pool would need 7-entry block tables and a 63-block pool" in err
    assert "a witness counts only once the exact reference confirms it" in err


@pytest.mark.parametrize("extra", [("--method", "explore"), ("--no-enable-prefix-caching",)])
def test_no_such_note_where_the_query_is_searched_exactly(capsys, monkeypatch, tmp_path,
                                                          extra):
    err = _stderr_before_the_run(capsys, monkeypatch, tmp_path, *extra)
    assert "beyond the symbolic prefix cache" not in err and "counted" not in err


#: Issue 26 item 5's k=10 question at the serve defaults (docs/queries.md, "Starvation for
#: 10 steps, with the serve defaults"): a 64-block pool of 16-token blocks, beyond the
#: symbolic prefix cache, with prefix caching and async scheduling left on.
K10 = ["--property", "starvation:k=10", "--max-num-batched-tokens", "16", "--max-num-seqs",
       "8", "--block-size", "16", "--num-gpu-blocks-override", "64", "--max-model-len", "256",
       "--requests", "2", "--max-prompt-len", "176", "--max-tokens", "4",
       "--arrival-window", "2", "--depth", "12"]


@pytest.mark.slow  # 35-50 s: BMC to depth 10 over the counted pool; the default suite's
# test_abstract_cache.py confirms a counted witness on the reference at deployment size
def test_the_k10_starvation_question_at_the_serve_defaults_is_violated_on_the_reference(
        capsys, tmp_path):
    code, doc = _check_json(capsys, *K10, out=tmp_path)
    (v,) = doc["verdicts"]
    assert code == 1 and v["verdict"] == "VIOLATED" and v["depth"] == 10
    # found with the pool counted, confirmed on the reference with the exact pool
    assert "found with the prefix cache counted, replayed on the reference" in v["detail"]
    cex = read_counterexample(v["counterexample"])
    cfg = cex.workload.config
    assert cfg.enable_prefix_caching and cfg.async_scheduling and cfg.num_gpu_blocks == 64
    steps = records_to_steps(cex.workload, simulate(cex.workload))
    prop = catalogue.get("starvation", k=10)
    assert not prop.holds(CONCRETE, steps, 9)  # the reference with the cache on starves it
