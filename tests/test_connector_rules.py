"""The KV connector in vLLM V1's symbolic rules (model/vllm/connector_rules.py): the rules'
step and the reference's step agree record by record on random connector workloads (the
conformance generator's synchronous connector mode, aborts dropped: the rules have none),
the rules are branch-free on them (the symbolic twin), and without a connector nothing
changes."""

from __future__ import annotations

import copy
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
import z3

from checker.conformance.generate import random_connector_workload
from checker.show.itf import read_counterexample
from model.core.errors import InputError
from model.core.ops import CONCRETE, SymbolicOps, as_python
from model.core.types import EosEvent, ExternalHit, KVLoadEvent, RequestSpec, Workload
from model.slots import to_slots
from model.vllm import rules
from model.vllm.config import Config
from model.vllm.connector_rules import KVChoices, choices_of
from model.vllm.engine import ENGINE
from model.vllm.records import to_record
from model.vllm.reference import VllmV1Scheduler, simulate
from model.vllm.state import REMOTE, RuleConfig, SchedState
from properties.connector import never_admitted_after_load


def in_rules_scope(w: Workload) -> Workload:
    """`w` without its aborts (the rules have none), its load reports of each step in
    arrival order (the rules' choices are per slot, so simultaneous failures end in slot
    order), and the EOS choices the reference would refuse without the aborts dropped,
    step by step on the reference itself."""
    order = {r.id: k for k, r in enumerate(w.arrival_order())}
    w = replace(w, aborts=(), kv_loads=tuple(sorted(
        w.kv_loads, key=lambda e: (e.step, order.get(e.id, len(order))))))
    from model.vllm.connector import Connector
    sched = VllmV1Scheduler(w.config, Connector.of(w.kv_hits))
    arrivals, eos, loads = w.arrivals_by_step(), w.eos_ids_by_step(), w.kv_loads_by_step()
    kept: list[EosEvent] = []
    for step in range(1, w.steps + 1):
        for spec in arrivals.get(step, ()):
            sched.add_request(spec)
        chosen = frozenset(eos.get(step, frozenset()))
        try:
            copy.deepcopy(sched).step(chosen, kv_loads=loads.get(step, ()))
        except InputError:
            chosen = frozenset()
        sched.step(chosen, kv_loads=loads.get(step, ()))
        kept += [EosEvent(rid, step) for rid in sorted(chosen)]
    return replace(w, eos=tuple(kept))


def facts(record):
    return dict(record.extra)


def rules_records(w: Workload):
    """The rules' records of `w` under ConcreteOps, with each step's state."""
    sw = to_slots(w)
    choices = choices_of(w, sw.ids, len(sw.specs))
    state = ENGINE.initial_state(len(sw.specs), sw.cfg)
    for t in range(w.steps):
        state, observed = ENGINE.step(CONCRETE, sw.cfg, sw.specs, state, sw.eos[t],
                                      kv=choices[t])
        yield to_record(observed, sw.ids), state


def assert_rules_agree(w: Workload) -> int:
    """The rules give the reference's records, up to an engine assertion (1170, a
    synchronous hit of every token). Returns how many steps had a request waiting for its
    load (to show the workloads reach the connector's paths)."""
    w = in_rules_scope(w)
    loading = 0
    for ref, (got, state) in zip(simulate(w), rules_records(w), strict=True):
        if "assertion" in facts(ref):
            assert "assertion" in facts(got), f"step {ref.step}"
            return loading
        assert got == ref, f"step {ref.step}:\n reference {ref}\n rules     {got}"
        loading += any(s.status == REMOTE for s in state.slots)
    return loading


def test_rules_agree_with_the_reference_on_connector_workloads():
    reached = sum(assert_rules_agree(random_connector_workload(seed, 20))
                  for seed in range(20))
    assert reached > 0  # the loads' paths are exercised, not only synchronous hits


@pytest.mark.slow
def test_rules_agree_with_the_reference_on_connector_workloads_deep():
    for seed in range(20, 1020):
        assert_rules_agree(random_connector_workload(seed, 20))


def cfg(**kw) -> Config:
    base = dict(max_model_len=64, block_size=4, num_gpu_blocks=9, max_num_batched_tokens=16,
                max_num_seqs=4, kv_connector=True)
    return Config(**{**base, **kw})


def test_a_load_of_every_token_is_admitted_one_short_after_its_report():
    # 8 tokens loaded asynchronously (2 blocks), reported in step 2, promoted in step 3
    # with 7 computed (scheduler.py:3171-3172), then 1 token scheduled.
    w = Workload(cfg(), (RequestSpec("a", 8, 2),), steps=3,
                 kv_hits=(ExternalHit("a", 8, True),), kv_loads=(KVLoadEvent("a", 2),))
    records = [r for r, _ in rules_records(w)]
    assert records == list(simulate(w))
    r1, r2, r3 = records
    assert r1.scheduled == () and facts(r1)["kv_held"] == {"a": 2}
    assert r2.scheduled == () and r3.scheduled == (("a", 1),) and r3.admitted == ("a",)


@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_a_failed_load_ends_or_starts_again_by_the_policy(policy):
    w = Workload(cfg(kv_load_failure_policy=policy), (RequestSpec("a", 8, 2),), steps=3,
                 kv_hits=(ExternalHit("a", 4, True),),
                 kv_loads=(KVLoadEvent("a", 1, failed=True),))
    records = [r for r, _ in rules_records(w)]
    assert records == list(simulate(w))
    if policy == "fail":
        assert records[0].finished == (("a", "error"),)
    else:  # freed at promotion, asks again, and the same async hit loads again
        assert records[0].finished == () and facts(records[1])["kv_held"] == {"a": 1}


def test_a_load_never_reported_holds_its_blocks_and_admission_waits():
    # the load holds 2 of the 8 usable blocks; the later request needs 7 of the 6 left: it
    # waits as long as the load does (the hazard kv_load_blocks_admission)
    w = Workload(cfg(num_gpu_blocks=9), (RequestSpec("a", 16, 2), RequestSpec("b", 28, 2, 2)),
                 steps=4, kv_hits=(ExternalHit("a", 8, True),))
    records = [r for r, _ in rules_records(w)]
    assert records == list(simulate(w))
    assert all(rec.scheduled == () for rec in records)


def _value(model, x):
    return as_python(model.eval(x, model_completion=True)) if isinstance(x, z3.ExprRef) else x


@pytest.mark.parametrize("seed", [3, 7, 11])
def test_the_connector_rules_are_branch_free_and_the_same_symbolically(seed):
    w = in_rules_scope(random_connector_workload(seed, 8))
    sw = to_slots(w)
    choices = choices_of(w, sw.ids, len(sw.specs))
    concrete = ENGINE.initial_state(len(sw.specs), sw.cfg)
    symbolic = concrete
    solver = z3.Solver()
    for t in range(w.steps):
        concrete, want = ENGINE.step(CONCRETE, sw.cfg, sw.specs, concrete, sw.eos[t],
                                     kv=choices[t])
        ops = SymbolicOps()
        symbolic, got = rules.step(ops, sw.cfg, sw.specs, symbolic, sw.eos[t], kv=choices[t])
        solver.add(*ops.take_definitions())
        assert solver.check() == z3.sat
        model = solver.model()
        for a, b in zip(want.slots, got.slots, strict=True):
            for name in ("scheduled", "finished", "num_computed_tokens", "queue_key",
                         "waiting_after", "blocks", "admitted", "resumed"):
                assert getattr(a, name) == _value(model, getattr(b, name)), (t, name)
        assert want.free_blocks_end == _value(model, got.free_blocks_end)
        symbolic = concrete  # compare step by step from the same state


def test_without_a_connector_the_state_and_step_are_as_before():
    rc = RuleConfig.from_config(Config())
    assert not rc.kv_connector and not rc.can_crash
    state = SchedState.initial(2, rc)
    assert state.kv == () and all(s.kv == () for s in state.slots)


def test_a_connector_the_rules_do_not_cover_is_refused_in_one_line():
    rc = RuleConfig.from_config(cfg(async_scheduling=True))
    with pytest.raises(InputError, match="synchronous Scheduler.*AsyncScheduler"):
        rules.step(CONCRETE, rc, (), SchedState.initial(0, rc), (), kv=KVChoices((), ()))


WITNESSES = Path(__file__).resolve().parents[1] / "counterexamples" / "vllm_v1"


@pytest.mark.parametrize("name", ["never_finishes__tiny_connector",
                                  "never_admitted_after_load__tiny_connector"])
def test_the_stored_connector_witnesses_are_the_reference_s_runs(name):
    # the rules found them; the reference replays them (a load never reported: r0 waits)
    cex = read_counterexample(WITNESSES / f"{name}.itf.json")
    w = replace(cex.workload, steps=8)
    assert w.kv_hits and all(h.load_async for h in w.kv_hits) and not w.kv_loads
    assert never_admitted_after_load(simulate(w)) == "r0"
    assert [r for r, _ in rules_records(w)] == list(simulate(w))


@pytest.mark.conformance
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM's real scheduler is needed (the .venv-vllm venv)")
def test_the_real_scheduler_reproduces_the_never_finishes_witness():
    from checker.conformance.vllm_real import run_real_vllm

    cex = read_counterexample(WITNESSES / "never_finishes__tiny_connector.itf.json")
    w = replace(cex.workload, steps=8)
    real = run_real_vllm(w)
    assert real == simulate(w) and never_admitted_after_load(real) == "r0"


def test_check_searches_a_workload_config_with_a_connector(tmp_path, capsys):
    from checker.cli.main import main

    doc = {"config": {"max_num_batched_tokens": 4, "max_num_seqs": 4, "max_model_len": 8,
                      "block_size": 2, "num_gpu_blocks": 5, "kv_connector": True,
                      "kv_load_failure_policy": "recompute"}, "requests": [], "steps": 1}
    path = tmp_path / "connector.json"
    path.write_text(json.dumps(doc))
    code = main(["check", "--config-file", str(path), "--property", "zero_tokens_after_load",
                 "--property", "never_finishes", "--requests", "1", "--depth", "3",
                 "--max-prompt-len", "3", "--max-tokens", "2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[2] for line in out.splitlines()
            if line.startswith(("zero_tokens_after_load", "never_finishes"))}
    # exit 1: a question without a manifest expectation answered VIOLATED
    assert code == 1 and rows == {"zero_tokens_after_load": "HOLDS(3)",
                                  "never_finishes": "VIOLATED"}, out


def test_check_reads_a_consumer_s_kv_transfer_config_and_refuses_what_it_does_not_run(capsys):
    from checker.cli.main import main

    flags = ["check", "--max-num-batched-tokens", "4", "--max-num-seqs", "4",
             "--max-model-len", "8", "--block-size", "2", "--num-gpu-blocks-override", "5",
             "--property", "zero_tokens_after_load", "--requests", "1", "--depth", "3",
             "--max-prompt-len", "3", "--max-tokens", "2"]
    consumer = ["--kv-transfer-config",
                '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}']
    sync = ["--no-async-scheduling", "--no-enable-prefix-caching"]
    assert main(flags + consumer + sync) == 0
    out = capsys.readouterr().out
    assert "HOLDS(3)" in out and "ignored vLLM flags" not in out
    # vllm serve's defaults (the AsyncScheduler, prefix caching) are beyond the rules'
    # connector; a producer's deferred frees are beyond the model: one line, exit 2
    assert main(flags + consumer) == 2
    assert "add --no-async-scheduling --no-enable-prefix-caching" in capsys.readouterr().err
    producer = ["--kv-transfer-config",
                '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}']
    assert main(flags + producer + sync) == 2
    assert "kv_role kv_producer" in capsys.readouterr().err


def test_the_load_premise_is_a_flag_and_the_bounds_line_names_the_environment(capsys):
    from checker.cli.main import main

    flags = ["check", "--max-num-batched-tokens", "8", "--max-num-seqs", "2",
             "--max-model-len", "16", "--block-size", "4", "--num-gpu-blocks", "6",
             "--no-async-scheduling", "--no-enable-prefix-caching",
             "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}',
             "--property", "never_admitted_after_load", "--param", "k=3", "--requests", "2",
             "--depth", "4", "--max-prompt-len", "4", "--max-tokens", "2"]
    assert main(flags) == 1
    out = capsys.readouterr().out
    assert "load reports (finished, failed, or never) at any step" in out, out
    # Under the premise the least witness is the 1-token prompt cut to 0 after each load
    # (scheduler.py:3171-3172) and loaded again: still VIOLATED, with the premise named.
    assert main([*flags, "--kv-load-steps", "1"]) == 1
    out = capsys.readouterr().out
    assert "every KV load reported within 1 step(s) of its start" in out, out
    # No connector: the premise bounds nothing, one line, exit 2.
    assert main(["check", "--max-num-batched-tokens", "8", "--kv-load-steps", "1",
                 "--property", "kv_blocks_conserved"]) == 2
    assert "--kv-load-steps 1 bounds a KV connector's loads" in capsys.readouterr().err


def test_an_explore_job_on_a_connector_config_is_unknown_with_the_reason():
    # Neither explorer's environment has hits or load reports: no verdict from a search
    # that never meets them.
    from checker.methods.jobs import Job, run
    from properties import manifest

    nc = manifest.load().configs["tiny_connector"]
    v = run(Job("vllm-v1", "kv_blocks_conserved", (), nc, None, 60, method="explore")).verdict
    assert v.verdict == "UNKNOWN" and "no KV connector environment" in v.detail, v
