"""`batchproof explain`: text, markdown and SVG timelines of counterexamples, workloads and
simulation documents; golden files beside the stored counterexamples."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from checker.cli.explain import explain
from checker.cli.main import main
from checker.cli.simulate import simulate_workload_dict
from checker.methods.replay import replay
from checker.show import markdown, sources, svg
from checker.show.timeline import DECODE, PREFILL, UNKNOWN, phases
from model import run as model_run
from model.vllm.reference import chunk_phase, iter_steps
from model.workload import load_workload

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted((ROOT / "counterexamples").glob("*/*.itf.json"))
EXAMPLE = ROOT / "examples" / "seed_group_a.json"
SVG = "{http://www.w3.org/2000/svg}"


def _stem(path):
    return path.with_suffix("").with_suffix("")


def test_there_are_stored_counterexamples_to_explain():
    assert len(STORED) >= 8


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_text_of_a_counterexample_is_its_golden_txt(path, capsys):
    assert main(["explain", str(path)]) == 0
    assert capsys.readouterr().out == _stem(path).with_suffix(".txt").read_text()


@pytest.mark.parametrize("fmt, suffix", [("markdown", ".md"), ("svg", ".svg")])
@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_markdown_and_svg_match_their_golden_files(path, fmt, suffix, capsys):
    assert main(["explain", str(path), "--format", fmt]) == 0
    assert capsys.readouterr().out == _stem(path).with_suffix(suffix).read_text(), (
        "regenerate the golden files with `python -m checker.docs.gen --write`")


def _blocks(doc):
    return [r for r in doc.iter(f"{SVG}rect") if r.get("class") == "block"]


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_svg_has_one_block_per_scheduled_request_with_heights_summing_to_tokens(path):
    source = sources.load(path)
    doc = ET.fromstring(svg.render(source.timeline))  # valid XML
    blocks = _blocks(doc)
    cex = source.counterexample
    records = replay(cex).records[: cex.violated_at]
    expected = [(str(r.step), rid, str(n)) for r in records for rid, n in r.scheduled if n > 0]
    assert [(b.get("data-step"), b.get("data-request"), b.get("data-tokens"))
            for b in blocks] == expected
    unit = svg.unit(source.timeline.budget)
    for rec in records:
        heights = [float(b.get("height")) for b in blocks if b.get("data-step") == str(rec.step)]
        assert sum(heights) == pytest.approx(sum(n for _, n in rec.scheduled) * unit, abs=0.05)
        # a column is as tall as the budget unless the step exceeds it (SGLang's first
        # request is exempt from its prefill budgets; that is the budget_respected finding)
        total = sum(n for _, n in rec.scheduled)
        assert sum(heights) <= max(source.timeline.budget, total) * unit + 0.05


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.name)
def test_the_violated_step_is_framed_and_named(path):
    source = sources.load(path)
    doc = ET.fromstring(svg.render(source.timeline))
    framed = [g.get("data-step") for g in doc.iter(f"{SVG}g")
              if any(r.get("class") == "violated" for r in g.iter(f"{SVG}rect"))]
    assert framed == [str(source.counterexample.violated_at)]
    head = markdown.render(source.timeline).split("| step |")[1].splitlines()[0]
    assert head.count("**violated**") == 1


def test_rendering_is_byte_identical_run_to_run():
    first = [explain(sources.load(p), fmt) for p in STORED for fmt in ("markdown", "svg")]
    again = [explain(sources.load(p), fmt) for p in STORED for fmt in ("markdown", "svg")]
    assert first == again


def test_decodes_are_hatched_and_prefill_chunks_are_not():
    source = sources.load(ROOT / "counterexamples/vllm_v1/preemption_storm__tiny_fcfs.itf.json")
    text = svg.render(source.timeline)
    doc = ET.fromstring(text)
    by_phase = {}
    for b in _blocks(doc):
        by_phase.setdefault(b.get("data-phase"), []).append(b)
    hatches = [r for r in doc.iter(f"{SVG}rect") if r.get("class") == "hatch"]
    assert len(hatches) == len(by_phase[DECODE]) > 0 and len(by_phase[PREFILL]) > 0
    assert "!r2" in text and "^r2" in text  # preempted, then resumed


def test_derived_phases_agree_with_the_references_chunk_phase():
    workloads = (load_workload(EXAMPLE), *(sources.load(p).workload for p in STORED))
    # chunk_phase is vLLM's; other engines' phases are checked by their own tests
    for workload in (w for w in workloads if w.engine == "vllm-v1"):
        expected, records = [], []
        for before, record in iter_steps(workload):
            views = {v.request_id: v for v in before}
            # a chunk's phase is of its tokens less the drafts scheduled with it, as
            # simulate labels it (simulate_checked)
            drafts = dict(record.extra).get("spec_scheduled", {})
            expected.append({rid: chunk_phase(views[rid], n - drafts.get(rid, 0))
                             for rid, n in record.scheduled})
            records.append(record)
        assert list(phases(workload, records)) == expected


def test_an_eagle_run_is_a_decode_and_a_resumption_a_prefill():
    # SGLang's EAGLE records the committed run of a decode (4 tokens: 1 + 3 accepted) and
    # no drafts; the run is a decode, and the outputs it commits count for the next step.
    workload = load_workload(ROOT / "examples" / "sglang_eagle.json")
    records = model_run.simulate(workload)
    labels = [p.get("r0") for p in phases(workload, records)]
    assert [dict(r.scheduled).get("r0") for r in records][:3] == [5, 4, 3]
    assert labels[:3] == [PREFILL, DECODE, DECODE]
    # mistral.rs keeps a preempted request's computed tokens: its resumption is a
    # recomputation however many tokens it schedules
    escape = sources.load(ROOT / "counterexamples" / "mistralrs"
                          / "feasible_not_rejected__mr_v092_escape.itf.json")
    last = phases(escape.workload, escape.records)[-1]
    assert escape.records[-1].resumed == ("r1",) and last["r1"] == PREFILL


def _simulation(tmp_path, with_requests):
    doc = simulate_workload_dict(json.loads(EXAMPLE.read_text()))
    if with_requests:
        doc["requests"] = json.loads(EXAMPLE.read_text())["requests"]
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_simulation_document_is_drawn_as_recorded(tmp_path, capsys):
    with_requests = sources.load(_simulation(tmp_path, True)).timeline
    steps_only = sources.load(_simulation(tmp_path, False)).timeline
    workload = sources.load(EXAMPLE).timeline
    assert with_requests.columns == workload.columns
    assert [(b.request, b.tokens) for c in steps_only.columns for b in c.blocks] == [
        (b.request, b.tokens) for c in workload.columns for b in c.blocks]
    assert {b.phase for c in steps_only.columns for b in c.blocks} == {UNKNOWN}
    assert main(["explain", str(_simulation(tmp_path, False)), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "Phases are unknown" in out and "| P24 |  | +6 | 6 |" in out


def test_a_workload_text_timeline_is_the_text_renderer(capsys):
    assert main(["explain", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["step", *map(str, range(1, 9))]
    assert "P24" in out and "(budget 16)" in out


@pytest.mark.parametrize("content, fragment", [
    ("not json", "is not valid JSON"),
    ("[1, 2]", "is neither an ITF counterexample"),
    ('{"steps": [{"step": "one"}]}', "steps[0] must be an object with an integer 'step'"),
    ('{"steps": [{"step": 1, "scheduled": []}]}', "steps[0].scheduled must be an object"),
    ('{"#meta": {}}', "is not a batchproof ITF counterexample"),
])
def test_bad_input_is_one_line_naming_the_file_and_exit_code_2(tmp_path, capsys, content,
                                                              fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["explain", str(path), "--format", "svg"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_an_unreadable_file_and_an_unknown_format_exit_2(tmp_path, capsys):
    assert main(["explain", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["explain", str(EXAMPLE), "--format", "pdf"])
    assert exc.value.code == 2
    assert "invalid choice: 'pdf'" in capsys.readouterr().err


def test_a_run_that_barely_uses_a_large_budget_says_its_blocks_are_to_scale(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"config": {"max_num_batched_tokens": 2048},
                                "requests": [{"id": "a", "prompt_len": 3, "max_tokens": 2}],
                                "steps": 3}))
    text = svg.render(sources.load(path).timeline)
    assert "no step uses more than 3 of the 2048 tokens" in text
    assert "to scale" not in svg.render(sources.load(EXAMPLE).timeline)
