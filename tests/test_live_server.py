"""A real `vllm serve` under HTTP load, recorded and checked (docs/live.md): the tiny model
of tests/data/tiny_llama on vLLM 0.32.0's CPU build, prefix caching on (the CPU platform
runs the synchronous Scheduler, platforms/cpu.py:329-331), once plain and once with ngram
speculative decoding; 500 requests at concurrency 32 each, Poisson arrivals, shared
prefixes, stop tokens, aborting clients. Then the same server with a scheduler mutation of
the audit (tests/audit_mutations/victim_head.patch, applied as audit applies it) must be
caught from its trace, with a minimal workload.

Marked `live`: CI runs it in a step of its own in the vLLM venv (.ci/run); elsewhere it
is skipped with the reason."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_conformance import needs_vllm

from checker.live import load, server
from checker.live.trace import load_live
from checker.live.verdict import check_live

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.live, needs_vllm]


def _serve_and_load(tmp_path: Path, options: server.ServeOptions, plan: load.LoadPlan,
                    pythonpath: tuple[Path, ...] = ()) -> tuple[Path, tuple]:
    trace = tmp_path / "trace.jsonl"
    s = server.start(trace, options, tmp_path / "serve.log", pythonpath=pythonpath)
    try:
        outcomes = load.send(s.url, plan)
    finally:
        s.stop()
    return trace, outcomes


@pytest.mark.parametrize("speculative", ["", "ngram"])
def test_a_served_run_holds_agrees_and_loses_nothing(tmp_path, speculative):
    plan = load.LoadPlan(requests=500, concurrency=32, seed=11)
    trace, outcomes = _serve_and_load(tmp_path, server.ServeOptions(speculative=speculative),
                                      plan)
    kinds = Counter(o.kind for o in outcomes)
    assert kinds["finished"] >= 400 and kinds["aborted"] >= 10 and not kinds["error"], kinds
    live = load_live(trace)
    report = check_live(live)
    assert report.divergence is None and not report.reference_error, \
        report.divergence.render() if report.divergence else report.reference_error
    assert report.steps_agreeing == len(live.records) >= 200
    assert not report.departs, [(v.name, v.violated_at) for v in report.departs]
    assert load.unaccounted(outcomes, dict(live.ends)) == []
    # The load was over when the server stopped: a request still held is one whose client
    # went away just before, its abort not yet at the engine.
    aborted = {load.engine_ids(outcomes, list(live.ends)).get(o.id) for o in outcomes
               if o.kind == "aborted"}
    assert {rid for rid, end in live.ends.items() if end == "held"} <= aborted
    assert live.workload.aborts and live.workload.eos
    assert any(r.prefix_group for r in live.workload.requests)
    if speculative:
        assert live.workload.config.num_spec_tokens == 3
        assert any(dict(r.extra)["spec_scheduled"] for r in live.records)


def _mutations():
    spec = importlib.util.spec_from_file_location("audit_mutations",
                                                  ROOT / "bench" / "audit_mutations.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["audit_mutations"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_a_mutated_server_is_caught_with_a_minimal_workload(tmp_path):
    mut = _mutations()
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    mut.build_overlay([mut.mutations()["victim_head"]], overlay)
    # KV pressure whatever the machine's speed: long own prompts and outputs, no sharing or
    # early stops, all arriving at once; 32 open requests need far more than 47 blocks.
    pressure = load.LoadPlan(requests=200, rate=2000.0, shared=0.0, own_len=320,
                             max_tokens=128, stop_share=0.0, abort_share=0.0, seed=5)
    trace, _ = _serve_and_load(tmp_path, server.ServeOptions(), pressure,
                               pythonpath=(overlay,))
    report = check_live(load_live(trace))
    assert report.divergence is not None and "preempted" in report.divergence.fields
    env = {**os.environ, "PYTHONPATH": str(overlay)}
    done = subprocess.run([sys.executable, "-m", "checker.cli", "audit", "--trace",
                           str(trace), "--json"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=900)
    assert done.returncode == 1, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["agreement"]["diverges_at"] == report.divergence.step
    assert doc["minimal"] is not None, doc["minimal_of"]
    assert len(doc["minimal"]["requests"]) <= 3, doc["minimal"]
