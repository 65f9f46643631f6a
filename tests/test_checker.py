"""The symbolic model and the checker: twin semantics, symbolic-safety of rules and
properties, proofs that can fail, stored counterexamples, and the check CLI."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import z3

from checker.cli.check import golden_text
from checker.cli.main import main
from checker.methods.jobs import Job, JobResult, run
from checker.methods.replay import replay
from checker.methods.symbolic import Bounds, Family, extend, new_unrolling
from checker.methods.theorems import vllm_v1 as theorems
from checker.show import itf
from model import registry as engines
from model.core.ops import CONCRETE, SymbolicOps, as_python
from model.core.types import EosEvent, RequestSpec, Workload
from model.slots import run_rules, to_slots
from model.vllm import rules
from model.vllm.config import Config
from model.vllm.state import SchedState
from properties import catalogue
from properties.manifest import load, with_bounds

ROOT = Path(__file__).resolve().parents[1]
STORED = sorted((ROOT / "counterexamples" / "vllm_v1").glob("*.itf.json"))


def _workload():
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=3, max_model_len=16, block_size=2,
                 num_gpu_blocks=5, policy="priority")
    reqs = (RequestSpec("a", 3, 4, 1, 1), RequestSpec("b", 5, 2, 1, 0),
            RequestSpec("c", 2, 3, 2, 0))
    return Workload(cfg, reqs, (EosEvent("a", 4),), steps=8)


def test_rules_give_the_same_steps_under_concrete_and_symbolic_ops_on_constants():
    sw = to_slots(_workload())
    concrete = run_rules(sw)
    state = SchedState.initial(len(sw.specs), sw.cfg)
    for eos, expected in zip(sw.eos, concrete, strict=True):
        ops = SymbolicOps()
        state, got = rules.step(ops, sw.cfg, sw.specs, state, eos)
        defs = ops.take_definitions()
        solver = z3.Solver()
        solver.add(*defs)
        assert solver.check() == z3.sat
        model = solver.model()

        def value(x, model=model):
            return as_python(model.eval(x, model_completion=True)) if isinstance(
                x, z3.ExprRef) else x
        state = SchedState(tuple(replace(s, **{f: value(getattr(s, f)) for f in s.__slots__})
                                 for s in state.slots), value(state.free_blocks),
                           value(state.next_run_key), value(state.wait_head),
                           value(state.wait_tail), state.step)
        for o_sym, o_con in zip(got.slots, expected.slots, strict=True):
            for f in o_con.__slots__:
                assert value(getattr(o_sym, f)) == getattr(o_con, f), (expected.step, f)
        assert value(got.free_blocks) == expected.free_blocks


def test_every_rule_and_property_runs_on_fresh_symbolic_variables():
    for policy in ("fcfs", "priority"):
        nc = load().configs["tiny_fcfs"]
        u = new_unrolling(Family(replace(nc.config, policy=policy)), Bounds(slots=2, depth=3))
        for _ in range(3):
            extend(u)
        ops = SymbolicOps()
        for name in catalogue.names():
            prop = catalogue.example(name)
            for t in range(3):
                assert isinstance(prop.holds(ops, u.steps, t), (bool, z3.BoolRef))


def test_the_seed_theorem_is_proved_for_all_sizes():
    assert theorems.decodes_exhaust_budget_unbounded(30).proved
    assert theorems.exhausting_decodes_fill_max_num_seqs_unbounded(30).proved


def test_the_seed_theorem_fails_when_decodes_ignore_the_budget(monkeypatch):
    def greedy(ops, cfg, remaining, ncomp, thr, budget, input_budget):
        return remaining  # a scheduler that overspends: the proof must not go through
    monkeypatch.setattr(theorems, "running_tokens", greedy)
    assert not theorems.decodes_exhaust_budget_unbounded(30).proved


def _job(prop, config, **params):
    m = load()
    entry = next(e for e in m.entries if e.property == prop and e.config == config)
    nc = with_bounds(m.configs[config], **dict(entry.bounds))
    return Job("vllm-v1", prop, entry.params, nc, entry.expected, 120)


def test_head_of_line_blocking_is_found_minimal_and_byte_identical_to_the_stored_file():
    result: JobResult = run(_job("head_of_line", "tiny_fcfs"))
    assert result.verdict.verdict == "VIOLATED" and result.verdict.depth == 2
    doc = itf.dumps(itf.to_itf(result.counterexample, result.replayed.records))
    stored = ROOT / "counterexamples/vllm_v1/head_of_line__tiny_fcfs.itf.json"
    assert doc == stored.read_text()
    assert golden_text(result) == stored.with_suffix("").with_suffix(".txt").read_text()


def test_a_safety_property_that_fails_in_the_model_is_not_proved(monkeypatch):
    broken = replace(catalogue.get("budget_respected"), name="budget_respected",
                     holds=lambda ops, steps, t: ops.sum([o.scheduled for o in steps[t].slots])
                     <= steps[t].cfg.token_budget - 1)
    monkeypatch.setattr(catalogue, "get", lambda name, **p: broken)
    result = run(_job("budget_respected", "tiny_fcfs"))
    assert result.verdict.verdict == "VIOLATED"


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_every_stored_counterexample_replays_on_the_reference(path):
    cex = itf.read_counterexample(path)
    result = replay(cex)
    assert result.violated_at == cex.violated_at
    assert path.with_suffix("").with_suffix(".txt").exists()


def test_every_violated_manifest_entry_has_a_stored_counterexample():
    m = load()
    for e in m.entries:
        if e.expected == "VIOLATED":
            folder = ROOT / "counterexamples" / engines.get(e.engine).folder
            assert (folder / f"{e.slug}.itf.json").exists(), (e.engine, e.slug)


def test_no_two_manifest_entries_of_an_engine_share_a_counterexample_file():
    # mistral.rs has prefill_due_within on mr_tiny at k=3 (HOLDS) and k=2 (VIOLATED): were
    # k=3 ever violated too, the two would have written one file.
    m = load()
    stems = [(e.engine, e.slug) for e in m.entries]
    assert len(stems) == len(set(stems))
    shared = [e for e in m.entries if e.property == "prefill_due_within"
              and e.config == "mr_tiny"]
    assert sorted(e.slug for e in shared) == ["prefill_due_within__k=2__mr_tiny",
                                              "prefill_due_within__k=3__mr_tiny"]


def test_check_prints_json_verdicts_that_meet_the_manifest(capsys):
    code = main(["check", "--property", "head_of_line", "--json", "--jobs", "1"])
    rows = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 0
    assert [r["verdict"] for r in rows] == ["VIOLATED"]
    assert set(rows[0]) >= {"property", "verdict", "depth", "seconds", "counterexample"}


@pytest.mark.parametrize("argv", [
    ["check", "--property", "nonsense"],
    ["check", "--engine", "tgi"],
    ["check", "--depth", "-3"],
    ["check", "--config", "missing"],
    ["check", "--max-num-batched-tokens", "4", "--max-num-seqs", "8"],
    ["replay", "/nonexistent.itf.json"],
])
def test_bad_check_input_is_one_line_and_exit_code_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_time_limit_is_unknown_with_exit_code_3(capsys):
    code = main(["check", "--property", "preemption_storm", "--timeout", "0.01", "--jobs", "1"])
    assert code == 3
    assert "UNKNOWN" in capsys.readouterr().out


def test_explain_renders_a_stored_counterexample(capsys):
    path = ROOT / "counterexamples/vllm_v1/starvation__tiny_fcfs.itf.json"
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "r1" in out and "v" in out


def test_concrete_ops_fold_like_python():
    assert CONCRETE.min(3, 2) == 2 and CONCRETE.cdiv(5, 2) == 3 and CONCRETE.ite(False, 1, 2) == 2


def test_symbolic_ops_build_the_terms_z3s_own_functions_build():
    """The direct term builders (model/core/ops.py) make the very term z3.If/And/Or/Not
    make (same id: z3's search depends on it), and hand anything else to those."""
    x, y = z3.Ints("x y")
    p, q = z3.Bools("p q")
    r = z3.Real("r")
    other = z3.Context()
    x2 = z3.Int("x", other)
    ops = SymbolicOps()
    cases = [
        (ops.ite(x <= y, x, y), z3.If(x <= y, x, y)),
        (ops.ite(p, q, x > 1), z3.If(p, q, x > 1)),
        (ops.ite(p, x, r), z3.If(p, x, r)),  # an Int branch made Real
        (ops.ite(p, 1, x), z3.If(p, 1, x)),  # a Python int: z3.If coerces it
        (ops.ite(p, z3.IntVal(1), z3.IntVal(2)), z3.If(p, z3.IntVal(1), z3.IntVal(2))),
        (ops.min(x, y + 1), z3.If(x <= y + 1, x, y + 1)),
        (ops.max(x, 3), z3.If(x >= 3, x, 3)),
        (ops.and_(p, True, x <= y, q), z3.And(p, x <= y, q)),
        (ops.or_(p, False, q), z3.Or(p, q)),
        (ops.not_(x <= y), z3.Not(x <= y)),
        (ops.ite(x2 > 0, x2, x2 + 1), z3.If(x2 > 0, x2, x2 + 1)),  # another context
        (ops.to_int(x <= y), z3.If(x <= y, 1, 0)),
    ]
    for value in (x + y, x <= y, r + 1):
        fresh = ops.name(value)
        (definition,) = ops.take_definitions()
        remade = (z3.Bool if z3.is_bool(value) else z3.Int)(str(fresh))
        cases.append((fresh, remade))
        cases.append((definition, remade == value))
    for built, expected in cases:
        assert built.eq(expected) and built.get_id() == expected.get_id(), (built, expected)
        assert type(built) is type(expected), (built, expected)
    assert ops.and_(p, False) is False and ops.or_(True, q) is True and ops.and_() is True
    with pytest.raises(z3.Z3Exception):  # mixed contexts are z3's to refuse
        ops.and_(p, x2 > 0)


def test_another_engines_config_file_is_checked_under_that_engine(capsys):
    example = str(ROOT / "examples" / "sglang_chunked_stall.json")
    code = main(["check", "--engine", "sglang", "--config-file", example, "--property",
                 "at_most_one_chunked", "--depth", "2", "--slots", "1", "--json"])
    rows = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 0
    assert [(r["engine"], r["config"], r["verdict"]) for r in rows] == [
        ("sglang", "custom", "HOLDS")]


@pytest.mark.parametrize("argv,message", [
    (["--engine", "mistralrs", "--config-file", "examples/sglang_chunked_stall.json"],
     "is a sglang workload but --engine is mistralrs"),
    (["--engine", "sglang", "--max-num-seqs", "4"], "the vLLM flags configure vllm-v1"),
    (["--engine", "all", "--max-num-seqs", "4"], "a custom configuration needs one engine"),
])
def test_a_custom_config_for_the_wrong_engine_is_one_line_and_exit_2(argv, message, capsys,
                                                                     monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["check", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
