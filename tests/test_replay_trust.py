"""`replay` believes a stored trace only when its states are exactly the reference's: an
edited state, a shifted lasso loop or nonsense `#meta` never passes (issue 14, item 3)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.methods.jobs import Job, run
from checker.methods.replay import DivergenceError, replay
from checker.methods.verdict import VIOLATED, Counterexample
from checker.show import itf
from model.core.types import RequestSpec, Workload
from properties import manifest

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted((ROOT / "counterexamples").glob("*/*.itf.json"))
LASSOS = [p for p in STORED if p.name.startswith("never_finishes__")]
TINY_LASSO = ROOT / "counterexamples/vllm_v1/never_finishes__tiny_fcfs.itf.json"
STARVATION = ROOT / "counterexamples/vllm_v1/starvation__tiny_fcfs.itf.json"
PREEMPTION = ROOT / "counterexamples/vllm_v1/preemption_storm__tiny_fcfs.itf.json"


def _doc(path):
    return json.loads(path.read_text())


def _write(tmp_path, doc, name="forged.itf.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_there_are_stored_lassos_of_three_engines():
    # vLLM V0's: a swapped-out prefill longer than the budget is never swapped back in.
    # vLLM V1's with a KV connector: a load never reported (never_finishes__tiny_connector).
    assert len(LASSOS) == 5
    assert {p.parent.name for p in LASSOS} == {"vllm_v1", "vllm_v0", "baselines"}


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_every_stored_counterexample_replays_with_every_state_compared(path, capsys):
    code, out, err = _run(["replay", str(path)], capsys)
    states = len(_doc(path)["states"])
    assert (code, err) == (0, "")
    assert f"all {states} stored states match it" in out.splitlines()[0]


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_every_stored_file_is_what_the_reference_run_writes_byte_for_byte(path):
    cex = itf.read_counterexample(path)
    assert itf.dumps(itf.to_itf(cex, replay(cex).records)) == path.read_text()


@pytest.mark.parametrize("path", LASSOS, ids=lambda p: p.name)
def test_a_lasso_file_repeats_its_loop_state_in_every_variable_as_itf_reads_it(path):
    doc = _doc(path)
    loop, states = doc["loop"], doc["states"]
    assert "step" not in doc["vars"] and doc["vars"]
    assert 1 <= loop < len(states) - 1
    assert all(states[loop][v] == states[-1][v] for v in doc["vars"])
    # one state more than the violating step: the first step of the repetition
    assert len(states) == doc["#meta"]["violated_at"] + 2


def test_the_tiny_fcfs_lasso_loops_on_the_waiting_state_not_the_preempting_step():
    doc = _doc(TINY_LASSO)
    assert doc["loop"] == 4 and len(doc["states"]) == 6
    assert doc["states"][3]["preempted"] == ["r0"]
    assert doc["states"][4]["preempted"] == [] and doc["states"][4]["waiting"] == ["r0"]
    assert itf.read_counterexample(TINY_LASSO).loop == 3  # the methods' i: repeats from step 4


def test_a_non_lasso_file_keeps_the_step_counter():
    doc = _doc(STARVATION)
    assert doc["vars"][0] == "step" and "loop" not in doc
    assert [s["step"] for s in doc["states"]] == list(range(len(doc["states"])))


@pytest.mark.parametrize("path, index, field, value, shown", [
    (STARVATION, 2, "scheduled", None, None),
    (STARVATION, 1, "free_blocks", 99, "99"),
    (STARVATION, 3, "running", ["r9"], '["r9"]'),
    (PREEMPTION, 4, "waiting", [], "[]"),
    (TINY_LASSO, 2, "num_computed_tokens", {"#map": [["r0", 7]]}, '{"#map": [["r0", 7]]}'),
    (STARVATION, 0, "token_budget_left", 4.0, "4.0"),
])
def test_an_edited_state_fails_with_the_first_differing_state_and_field(
        tmp_path, capsys, path, index, field, value, shown):
    doc = _doc(path)
    original = doc["states"][index][field]
    if value is None:  # one more token for the first request scheduled in that step
        value = json.loads(json.dumps(original))
        value["#map"][0][1] += 1
        shown = json.dumps(value)
    doc["states"][index][field] = value
    code, out, err = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert (code, err) == (1, "")
    assert out == (f"DIVERGENCE: state {index}: field {field} is {shown}, the reference has "
                   f"{json.dumps(original)}\n")


def test_true_is_not_the_integer_one(tmp_path, capsys):
    doc = _doc(STARVATION)
    state = next(s for s in doc["states"] if s["free_blocks"] == 1 or s["token_budget_left"] == 1)
    field = "free_blocks" if state["free_blocks"] == 1 else "token_budget_left"
    state[field] = True
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1 and f"field {field} is true, the reference has 1" in out


def test_only_the_first_difference_is_named(tmp_path, capsys):
    doc = _doc(STARVATION)
    doc["states"][3]["free_blocks"] = 50
    doc["states"][1]["waiting"] = ["r7"]
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1 and out.startswith("DIVERGENCE: state 1: field waiting is [\"r7\"]")
    assert out.count("\n") == 1


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["states"].append(dict(d["states"][-1])),
     "state 4: the trace stores states 0..4, the reference's run gives 0..3"),
    (lambda d: d["states"][2].pop("admitted"), "state 2: field admitted is missing"),
    (lambda d: d["states"][2].update(secret=1), "state 2: field secret = 1 is not a variable"),
    (lambda d: d["states"][2]["#meta"].update(index=7), "state 2: field #meta is"),
])
def test_a_state_added_or_with_another_field_fails(tmp_path, capsys, edit, message):
    doc = _doc(STARVATION)
    edit(doc)
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1 and message in out and out.count("\n") == 1


def test_a_shifted_loop_fails_naming_the_state_that_is_not_repeated(tmp_path, capsys):
    doc = _doc(TINY_LASSO)
    doc["loop"] = 3
    code, out, err = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert (code, err) == (1, "")
    assert out == ("DIVERGENCE: loop 3: stored state 3 is not repeated by the last state 5: "
                   'field preempted is ["r0"] in state 3, [] in state 5\n')


def test_the_old_lasso_layout_is_refused_for_its_step_counter(tmp_path, capsys):
    doc = _doc(TINY_LASSO)
    doc["vars"] = ["step", *doc["vars"]]
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1 and out.startswith('DIVERGENCE: vars: stored ["step", ')


def test_a_lasso_whose_loop_and_last_state_are_forged_alike_still_fails(tmp_path, capsys):
    doc = _doc(TINY_LASSO)
    for s in (doc["states"][4], doc["states"][5]):
        s["free_blocks"] = 3
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1
    assert out == "DIVERGENCE: state 4: field free_blocks is 3, the reference has 4\n"


def test_a_lasso_whose_workload_lets_the_request_finish_does_not_replay(tmp_path, capsys):
    doc = _doc(TINY_LASSO)
    doc["#meta"]["workload"]["config"]["num_gpu_blocks"] = 9  # room for prompt + output
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1 and out.startswith("DIVERGENCE: never_finishes: ")


def test_an_edited_workload_with_the_old_states_does_not_replay(tmp_path, capsys):
    doc = _doc(STARVATION)
    doc["#meta"]["workload"]["config"]["num_gpu_blocks"] += 1
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1 and out.startswith("DIVERGENCE: ")


def _lasso_without_loop(d):
    del d["loop"]


BAD_META = [
    ("lasso without loop", TINY_LASSO, _lasso_without_loop,
     "never_finishes is a lasso property but the trace has no 'loop'"),
    ("violated_at abc", STARVATION, lambda d: d["#meta"].update(violated_at="abc"),
     '#meta.violated_at must be the step where starvation fails, an integer in 1..3 '
     '(the trace\'s states), got "abc"'),
    ("violated_at true", STARVATION, lambda d: d["#meta"].update(violated_at=True),
     "got true"),
    ("violated_at beyond the trace", STARVATION, lambda d: d["#meta"].update(violated_at=9),
     "an integer in 1..3 (the trace's states), got 9"),
    ("a state dropped", STARVATION, lambda d: d["states"].pop(),
     "an integer in 1..2 (the trace's states), got 3"),
    ("violated_at missing", STARVATION, lambda d: d["#meta"].pop("violated_at"), "got null"),
    ("params true", STARVATION, lambda d: d["#meta"].update(params=True),
     "#meta.params must be an object of integers"),
    ("params of a string", STARVATION, lambda d: d["#meta"].update(params={"k": "3"}),
     '#meta.params must be an object of integers (e.g. {"k": 3} or {}), got {"k": "3"}'),
    ("params unknown to the property", STARVATION,
     lambda d: d["#meta"].update(params={"k": 3, "z": 1}), "do not fit starvation"),
    ("params on a property without any", TINY_LASSO,
     lambda d: d["#meta"].update(params={"k": 3}),
     "do not fit never_finishes: its parameters are none"),
    ("unknown property", STARVATION, lambda d: d["#meta"].update(property="starvatoin"),
     '#meta.property "starvatoin" is not a known property; known: '),
    ("property not a string", STARVATION, lambda d: d["#meta"].update(property=["x"]),
     "is not a known property"),
    ("loop on a window property", STARVATION, lambda d: d.update(loop=1),
     "starvation is a window property, not a lasso, but the trace has 'loop' 1; remove it"),
    ("loop a string", TINY_LASSO, lambda d: d.update(loop="4"),
     "'loop' must be the index of the state the last state repeats, an integer in 1..4, "
     'got "4"'),
    ("loop the last state", TINY_LASSO, lambda d: d.update(loop=5), "in 1..4, got 5"),
    ("loop the initial state", TINY_LASSO, lambda d: d.update(loop=0), "in 1..4, got 0"),
    ("loop null", TINY_LASSO, lambda d: d.update(loop=None), "got null"),
    ("bounds of strings", STARVATION, lambda d: d["#meta"].update(bounds={"depth": "x"}),
     "#meta.bounds must be an object of integers"),
    ("engine of another workload", STARVATION, lambda d: d["#meta"].update(engine="sglang"),
     "#meta.engine \"sglang\" is not the workload's engine \"vllm-v1\""),
    ("minimal a string", STARVATION, lambda d: d["#meta"].update(minimal="no"),
     "#meta.minimal must be true or false"),
    ("states not a list", STARVATION, lambda d: d.update(states={}),
     "'states' must be a list of at least two states"),
    ("a state not an object", STARVATION, lambda d: d["states"].__setitem__(2, 5),
     "states[2] must be an object of variables, got 5"),
    ("vars not names", STARVATION, lambda d: d.update(vars=[1, 2]),
     "'vars' must be a list of variable names"),
]


@pytest.mark.parametrize("command", ["replay", "explain"])
@pytest.mark.parametrize("name, path, edit, message", BAD_META, ids=[b[0] for b in BAD_META])
def test_nonsense_meta_is_one_line_exit_2_without_traceback(
        tmp_path, capsys, command, name, path, edit, message):
    doc = _doc(path)
    edit(doc)
    code, out, err = _run([command, str(_write(tmp_path, doc))], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("batchproof: error: ") and message in err


@pytest.mark.parametrize("raw, message", [
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "nests JSON too deeply"),
])
def test_unreadable_trace_is_one_line_exit_2(tmp_path, capsys, raw, message):
    path = tmp_path / "bad.itf.json"
    path.write_bytes(raw)
    code, _, err = _run(["replay", str(path)], capsys)
    assert code == 2 and message in err and err.count("\n") == 1


def test_explain_of_a_forged_trace_says_divergence_before_the_timeline(tmp_path, capsys):
    doc = _doc(STARVATION)
    doc["states"][1]["free_blocks"] = 99
    code, out, _ = _run(["explain", str(_write(tmp_path, doc))], capsys)
    assert code == 1  # a divergence, as replay says it (issue 14 item 6)
    assert out.splitlines()[0].startswith("DIVERGENCE: state 1: field free_blocks is 99")


@pytest.mark.parametrize("method", ["bmc", "explore"])
def test_a_lasso_either_method_finds_is_written_as_a_trace_that_replays(tmp_path, capsys, method):
    nc = manifest.with_bounds(manifest.load().configs["tiny_fcfs"], slots=1, depth=6,
                              max_prompt_len=8, max_max_tokens=6)
    res = run(Job("vllm-v1", "never_finishes", (), nc, VIOLATED, 120, method=method))
    assert res.counterexample is not None and res.replayed is not None
    doc = itf.to_itf(res.counterexample, res.replayed.records)
    assert doc["loop"] == res.counterexample.loop + 1
    path = tmp_path / "lasso.itf.json"
    path.write_text(itf.dumps(doc))
    assert _run(["replay", str(path)], capsys)[0] == 0
    assert path.read_text() == TINY_LASSO.read_text().replace('"method": "bmc"',
                                                              f'"method": "{method}"')


def _ping_pong() -> Counterexample:
    """Two mistral.rs prompts that preempt each other for ever (mr_escape's config): after
    step 2 the scheduler is as after step 4, a loop of two steps."""
    config = manifest.load().configs["mr_escape"].config
    requests = tuple(RequestSpec(rid, prompt_len=5, max_tokens=1, arrival_step=1)
                     for rid in ("r0", "r1"))
    workload = Workload(config=config, requests=requests, steps=4, engine="mistralrs")
    return Counterexample(engine="mistralrs", property="never_finishes", params=(),
                          config_name="mr_escape", workload=workload, method="explore",
                          bounds=(), violated_at=4, loop=2)


def test_a_two_step_loop_is_stored_through_the_first_step_of_its_repetition(tmp_path, capsys):
    cex = _ping_pong()
    doc = itf.to_itf(cex, replay(cex).records)
    states = doc["states"]
    assert (doc["loop"], len(states)) == (3, 6)
    assert all(states[3][v] == states[5][v] for v in doc["vars"])
    assert states[4]["running"] != states[5]["running"]  # the loop really has two states
    path = _write(tmp_path, doc)
    assert _run(["replay", str(path)], capsys)[0] == 0
    doc["loop"] = 4
    code, out, _ = _run(["replay", str(_write(tmp_path, doc))], capsys)
    assert code == 1 and out.startswith("DIVERGENCE: loop 4: stored state 4 is not repeated "
                                        "by the last state 5: field scheduled is ")


def test_a_loop_that_closes_before_the_run_repeats_is_a_divergence():
    # after step 1, r1 has never run; after step 3 it was preempted: the next steps differ
    cex = replace(_ping_pong(), violated_at=3, loop=1)
    with pytest.raises(DivergenceError, match="does not repeat step 2 at step 4: admitted"):
        replay(cex)
