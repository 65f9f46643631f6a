"""docs/scope.md (issue 31 item 7): every deployment feature with its status and evidence.
The evidence it names exists (each test function, each conformance mode), every feature the
issue lists has a row, and the claims no other test pins are checked here by running the
commands."""

import argparse
import re
from pathlib import Path

import pytest
from test_bad_input import run

from checker.config.flags import add_config_flags
from checker.config.serve_args import serve_config
from checker.conformance.modes import MODES
from model.core.errors import InputError
from model.mistralrs.config import parse_config as mistralrs_config
from model.sglang.config import parse_config as sglang_config

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "scope.md").read_text()
STATUSES = ("modelled", "stated limit", "refused")


def _rows(text: str) -> list[list[str]]:
    """The table rows of the page (header and rule lines left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) >= 4 and cells[0] != "feature":
                rows.append(cells)
    return rows


def _named_tests() -> list[tuple[str, str | None]]:
    """(file, test) for every `tests/test_x.py::name`, `tests/test_x.py` and `::name` (the
    file named last before it) in backticks, in the page's order."""
    out, current = [], None
    for token in re.findall(r"`([^`]+)`", DOC):
        found = re.fullmatch(r"(tests/test_\w+\.py)(?:::(\w+))?", token)
        if found:
            current = found.group(1)
            out.append((current, found.group(2)))
        elif re.fullmatch(r"::\w+", token):
            assert current is not None, token
            out.append((current, token[2:]))
    return out


def test_every_named_test_exists():
    named = _named_tests()
    assert len({n for _, n in named if n}) >= 20
    for path, name in named:
        source = (ROOT / path).read_text()
        if name:
            assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} is not a test"


def test_every_named_conformance_mode_exists():
    modes = set(re.findall(r"modes? ((?:`[a-z+-]+`(?:, )?)+)", DOC))
    names = {m for group in modes for m in re.findall(r"`([a-z+-]+)`", group)}
    assert names and names <= set(MODES), names - set(MODES)
    assert {"off", "prefix", "async", "async+prefix", "spec"} <= names


@pytest.mark.parametrize("feature", [
    "sliding-window layers", "Mamba", "KV connectors", "data parallel", "pipeline parallel",
    "tensor parallel", "LoRA", "multimodal encoder budget", "structured output",
    "speculative decoding, modelled kinds", "speculative decoding, other kinds",
    "prefix caching", "async scheduling", "chunked prefill", "priority scheduling",
    "page size", "PD disaggregation", "paged-attention scheduler"])
def test_every_feature_has_a_row_with_a_status_and_evidence(feature):
    rows = [r for r in _rows(DOC) if feature in r[0]]
    assert rows, f"no row for {feature}"
    for row in rows:
        assert any(s in " ".join(row) for s in STATUSES), row
        assert "tests/" in row[-1] or "checker/conformance" in row[-1], row


CONFIG = ("config", "--max-model-len", "64", "--max-num-batched-tokens", "64",
          "--max-num-seqs", "2", "--device", "h100", "--hazard", "priority_inversion")
NOTE = "each data-parallel rank runs its own scheduler; the checker models one"


def test_data_parallel_is_a_stated_limit(capsys):
    code, out, err = run(capsys, *CONFIG, "--data-parallel-size", "2")
    assert code == 0 and NOTE in out, err
    # check, worst and diff resolve vLLM flags through serve_config, which adds the note
    # check prints under its table
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    args = parser.parse_args(["--max-num-seqs", "2", "--max-model-len", "16", "-dp", "2"])
    _, notes = serve_config(args, "check")
    assert "note: " + NOTE in notes


def test_multimodal_and_structured_output_flags_are_listed_as_ignored(capsys):
    code, out, err = run(capsys, *CONFIG, "--limit-mm-per-prompt", '{"image": 2}',
                         "--structured-outputs-config", '{"backend": "xgrammar"}')
    assert code == 0, err
    ignored = next(line for line in out.splitlines() if line.startswith("ignored vLLM flags"))
    assert "--limit-mm-per-prompt" in ignored and "--structured-outputs-config" in ignored


def test_queue_limits_are_refused_by_the_model_commands(capsys):
    code, out, err = run(capsys, "simulate", "examples/seed_group_a.json",
                         "--max-num-queued-reqs", "4")
    assert code == 2 and "queue limits" in err and "batchproof config" in err
    code, out, err = run(capsys, *CONFIG, "--max-num-queued-reqs", "4")
    assert code == 0, err  # priority_inversion's argument holds whatever is on
    assert "this deployment turns on what the model leaves out: queue limits" in out


@pytest.mark.parametrize(("parse", "raw", "field"), [
    (sglang_config, {"disaggregation_mode": "prefill"}, "disaggregation_mode"),
    (mistralrs_config, {"prefix_cache": True}, "prefix_cache"),
    (mistralrs_config, {"speculative": {"k": 2}}, "speculative"),
])
def test_sglang_and_mistralrs_refuse_the_modes_they_do_not_model(parse, raw, field):
    with pytest.raises(InputError, match=f"unknown .* config field '{field}'"):
        parse(raw)
