"""`batchproof seeds`: the reference reproduces seed 000's numbers, and
docs/seed_reproductions.md is what the command generates today."""

from pathlib import Path

import pytest

from checker.cli.main import main
from checker.docs.seeds import COMMAND, prefill_outcome, render_page, seed_config, timeline_steps

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "seed_reproductions.md"


def test_the_seed_page_is_not_stale():
    assert PAGE.read_text() == render_page(), (
        f"docs/seed_reproductions.md is stale; regenerate it with `{COMMAND}`")


def test_the_page_starts_with_the_command_that_regenerates_it():
    assert COMMAND in "\n".join(PAGE.read_text().splitlines()[:3])


def test_seeds_write_produces_the_page(tmp_path, capsys):
    out = tmp_path / "page.md"
    assert main(["seeds", "--write", str(out)]) == 0
    assert out.read_text() == render_page()
    assert main(["seeds"]) == 0
    assert capsys.readouterr().out.endswith(render_page())


@pytest.mark.parametrize("budget, max_num_seqs, expected", [
    # seed 000, Table 3: decode tokens, prefill tokens, prefill left, steps to finish
    (8, 32, (8, 0, 24, None)),
    (8, 8, (8, 0, 24, None)),
    (16, 32, (10, 6, 18, 4)),
    (16, 16, (10, 6, 18, 4)),
    (32, 32, (10, 22, 2, 2)),
])
def test_table_3_rows_match_the_seed(budget, max_num_seqs, expected):
    o = prefill_outcome(10, 24, seed_config(budget, max_num_seqs))
    assert (o.decode_tokens, o.prefill_tokens, o.prefill_left, o.steps_to_finish) == expected


def test_table_3_needs_no_validate_exactly_where_vllm_rejects_b_below_m():
    rejected = {b: prefill_outcome(10, 24, seed_config(b, 32)).rejected_by for b in (8, 16, 32)}
    assert rejected == {8: "batched_tokens_ge_num_seqs", 16: "batched_tokens_ge_num_seqs",
                        32: None}


def test_group_a_gives_the_prompt_six_tokens_per_step_for_four_steps():
    o = prefill_outcome(10, 24, seed_config(16, 16))
    assert (o.prefill_tokens, o.prefill_left, o.chunks) == (6, 18, (6, 6, 6, 6))


def test_group_b_gives_the_prompt_nothing_in_every_step():
    for cfg in (seed_config(16, 32), seed_config(16, 16)):
        o = prefill_outcome(16, 24, cfg)
        assert o.steps_to_finish is None and set(o.chunks) == {0}


def test_the_timeline_has_the_columns_the_seed_describes():
    steps = timeline_steps()
    assert len(steps) == 6
    t1_record, t1_phases = steps[1]
    assert t1_phases == {"A": "decode", "B": "prefill"}
    t2_record, t2_phases = steps[2]
    assert t2_phases == {"A": "decode", "B": "prefill", "C": "prefill"}
    assert dict(t2_record.num_computed_tokens)["B"] == 10  # B completes its prefill in t2
    assert dict(t2_record.scheduled)["C"] < 8  # C only starts
    assert all(sum(n for _, n in r.scheduled) <= 8 for r, _ in steps)
