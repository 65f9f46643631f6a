"""vLLM V0 as a registered engine: `observe` reads the reference's records as the very Step
observables the rules compute (so a property judged on the rules is judged the same on the
reference a counterexample replays on), the input checks, the ranged rule config, the
explorer's state key, and the CLI on the engine's manifest."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
import z3
from test_vllm_v0_refinement import rules_steps

from checker.cli.main import main
from checker.conformance.vllm_v0_real import random_workload
from model import registry
from model.core.errors import InputError
from model.core.ops import CONCRETE, SymbolicOps
from model.core.types import RequestSpec, SlotObs, Step, Workload
from model.vllm_v0.config import ENGINE_VLLM_V0, Config
from model.vllm_v0.engine import ENGINE, check_admissible, observe
from model.vllm_v0.reference import VllmV0Scheduler, simulate
from model.vllm_v0.state import RuleConfig, family_constraints, ranged_rule_config

# Raw key values are the rules' own; only their order among the requests they order is
# observable (the reference reports positions).
_ORDER_ONLY = {"queue_key", "run_key", "finish_rank", "serve_rank"}
_SLOT_FIELDS = [f.name for f in fields(SlotObs) if f.name not in _ORDER_ONLY]
_STEP_FIELDS = [f.name for f in fields(Step) if f.name != "slots"]


def assert_observed_as_the_rules(w: Workload) -> None:
    by_rules = [observed for observed, _ in rules_steps(w)[1]]
    by_reference = observe(w, simulate(w))
    assert len(by_rules) == len(by_reference)
    for got, want in zip(by_reference, by_rules, strict=True):
        for name in _STEP_FIELDS:
            assert getattr(got, name) == getattr(want, name), (got.step, name)
        n = len(w.requests)
        for i, (o, r) in enumerate(zip(got.slots[:n], want.slots[:n], strict=True)):
            for name in _SLOT_FIELDS:
                assert getattr(o, name) == getattr(r, name), (got.step, i, name)
        for key, member in (("queue_key", "waiting_after"), ("run_key", "running_after"),
                            ("finish_rank", "finished"), ("serve_rank", "scheduled")):
            for i in range(n):
                for j in range(n):
                    if getattr(got.slots[i], member) and getattr(got.slots[j], member):
                        assert (getattr(got.slots[i], key) < getattr(got.slots[j], key)) == (
                            getattr(want.slots[i], key) < getattr(want.slots[j], key)), (
                                got.step, key, i, j)


@pytest.mark.parametrize("chunked", [False, True], ids=["default", "chunked"])
@pytest.mark.parametrize("seed", range(40))
def test_observe_reads_the_reference_as_the_rules_compute(seed, chunked):
    assert_observed_as_the_rules(random_workload(seed, steps=20, chunked=chunked))


def test_observe_counts_blocks_as_the_tables_hold_them():
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
                 num_gpu_blocks=4)
    w = Workload(config=cfg, steps=2, engine=ENGINE_VLLM_V0, requests=(
        RequestSpec(id="a", prompt_len=2, max_tokens=2, arrival_step=1),
        RequestSpec(id="b", prompt_len=3, max_tokens=2, arrival_step=1)))
    first, second = observe(w, simulate(w))
    assert [o.blocks for o in first.slots] == [1, 2]
    assert first.free_blocks == 1
    # Step 2: a's decode takes the last block; b's token would fit in its second block,
    # but the worst-case append check asks for one and b preempts itself (BM:207-234).
    assert [o.blocks for o in second.slots] == [2, 0]
    assert second.slots[1].preempted and second.slots[1].waiting_after
    assert second.free_blocks == 2 and second.free_blocks_end == 4  # a finished by length


def test_a_prompt_of_max_model_len_is_admissible_and_a_longer_one_is_not():
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
                 num_gpu_blocks=8)

    def workload(prompt_len: int) -> Workload:
        return Workload(config=cfg, steps=1, engine=ENGINE_VLLM_V0, requests=(
            RequestSpec(id="a", prompt_len=prompt_len, max_tokens=4, arrival_step=1),))
    check_admissible(workload(8))
    (step,) = observe(workload(8), simulate(workload(8)))
    assert step.slots[0].scheduled == 8 and step.slots[0].finished  # length at token 1
    with pytest.raises(InputError, match="prompt_len 9 is above max_model_len 8"):
        check_admissible(workload(9))
    assert RuleConfig.from_config(cfg).longest_prompt == 8


def test_the_ranged_rule_config_follows_the_pool_with_the_watermark():
    base = Config(num_gpu_blocks=300)
    values = {"max_num_batched_tokens": base.max_num_batched_tokens,
              "max_num_seqs": base.max_num_seqs, "max_model_len": base.max_model_len,
              "num_gpu_blocks": 300}
    assert ranged_rule_config(CONCRETE, base, values) == RuleConfig.from_config(base)
    blocks = z3.Int("blocks")
    ranged = ranged_rule_config(SymbolicOps(), base, {**values, "num_gpu_blocks": blocks})
    solver = z3.Solver()
    for n in (0, 99, 100, 250, 4096):
        solver.push()
        solver.add(blocks == n, ranged.watermark_blocks != Config(num_gpu_blocks=max(n, 1))
                   .watermark_blocks if n else ranged.watermark_blocks != 0)
        assert solver.check() == z3.unsat, n
        solver.pop()
    batched, model_len = z3.Ints("batched model_len")
    cons = family_constraints(base, {**values, "max_num_batched_tokens": batched,
                                     "max_model_len": model_len})
    solver.add(*cons, batched < model_len)
    assert solver.check() == z3.unsat  # chunked prefill off: batched >= max_model_len
    chunked = replace(base, enable_chunked_prefill=True)
    solver = z3.Solver()
    solver.add(*family_constraints(chunked, {**values, "max_num_batched_tokens": batched,
                                             "max_model_len": model_len}),
               batched < model_len)
    assert solver.check() == z3.sat


def test_the_state_key_names_requests_by_position_not_by_id():
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
                 num_gpu_blocks=4)

    def run(ids: tuple[str, str]) -> VllmV0Scheduler:
        s = VllmV0Scheduler(cfg)
        for rid, p in zip(ids, (2, 3), strict=True):
            s.add_request(RequestSpec(id=rid, prompt_len=p, max_tokens=2, arrival_step=1))
        s.step()
        return s
    assert run(("a", "b")).state_key() == run(("x", "y")).state_key()
    other = VllmV0Scheduler(cfg)
    other.add_request(RequestSpec(id="a", prompt_len=3, max_tokens=2, arrival_step=1))
    other.add_request(RequestSpec(id="b", prompt_len=2, max_tokens=2, arrival_step=1))
    other.step()
    assert other.state_key() != run(("a", "b")).state_key()


def test_the_engine_is_registered_with_its_manifest():
    assert registry.get("vllm-v0") is ENGINE
    assert "vllm-v0" in registry.names()
    with pytest.raises(InputError, match="models one version"):
        registry.get("vllm-v0@0.9.0")


@pytest.mark.slow  # about 11 s; the stored counterexample is replayed in the default suite
def test_check_finds_the_worst_case_append_preemption(capsys, tmp_path):
    code = main(["check", "--engine", "vllm-v0", "--property", "no_spurious_preemption",
                 "--manifest-config", "v0_tiny", "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    (row,) = out["verdicts"]
    assert row["verdict"] == "VIOLATED" and row["depth"] == 2 and row["as_expected"]
    assert code == 0  # the manifest expects it


def test_a_config_vllm_rejects_is_refused_unless_asked(capsys, tmp_path):
    path = tmp_path / "v0.json"
    path.write_text(json.dumps({"engine": "vllm-v0", "steps": 1, "requests": [], "config": {
        "max_num_batched_tokens": 4, "max_num_seqs": 4, "max_model_len": 16, "block_size": 2,
        "num_gpu_blocks": 8}}))
    args = ["check", "--engine", "vllm-v0", "--property", "budget_respected", "--config-file",
            str(path), "--requests", "1", "--depth", "2", "--out", str(tmp_path)]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and "smaller than max_model_len" in err and len(err.splitlines()) == 1
    assert main([*args, "--no-validate"]) == 0
    assert "vLLM V0 would reject it" in capsys.readouterr().out
