"""SGLang configuration: parsing with SGLang's names, one-line errors, derived values, the
simulate command and the decode-stall theorem (which can fail)."""

import json
from fractions import Fraction
from pathlib import Path

import pytest

from checker.cli.main import main
from checker.methods.theorems import sglang as th
from model import registry as engines
from model.core.errors import InputError
from model.sglang.config import Config, parse_config, rejection

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sglang_chunked_stall.json"


@pytest.mark.parametrize("raw, match", [
    ({"max_num_seqs": 4}, "unknown SGLang config field 'max_num_seqs'"),
    ({"chunked_prefill_size": "big"}, "chunked_prefill_size must be an integer"),
    ({"max_total_num_tokens": 0}, "max_total_num_tokens must be a positive integer"),
    ({"schedule_policy": "priority"}, "unknown schedule_policy 'priority'"),
    ({"schedule_policy": "dfs-weight"}, "is not modelled"),
    ({"schedule_conservativeness": -1}, "non-negative"),
    ({"enable_mixed_chunk": 1}, "true or false"),
    ({"page_size": 0}, "page_size must be a positive integer"),
])
def test_bad_config_values_are_one_line_input_errors(raw, match):
    with pytest.raises(InputError, match=match) as info:
        parse_config(raw)
    assert "\n" not in str(info.value)


def test_derived_values_follow_upstream():
    # int(100000 / 8192 * 512) = 6250, clamped to 4096, below half the pool
    assert Config(max_total_num_tokens=100000, context_length=8192
                  ).effective_max_running_requests == 4096
    assert Config(max_total_num_tokens=8192, context_length=8192
                  ).effective_max_running_requests == 2048  # 512 clamped up to 2048
    assert Config(max_total_num_tokens=100000, context_length=8192,
                  max_running_requests=10).effective_max_running_requests == 10
    assert Config(max_total_num_tokens=10, max_running_requests=10
                  ).effective_max_running_requests == 5  # capped at half the pool
    assert not Config(chunked_prefill_size=-1).chunking
    assert not Config(chunked_prefill_size=None, enable_mixed_chunk=True).mixed_chunk
    assert Config().ratio_decay() == Fraction(301, 300000)


def test_rejection_names_the_rule():
    assert rejection(Config()) is None
    assert rejection(Config(max_total_num_tokens=6)).rule == "pool_too_small"
    bad = Config(chunked_prefill_size=4, enable_mixed_chunk=True, max_running_requests=8,
                 max_total_num_tokens=100)
    assert rejection(bad).rule == "mixed_chunk_budget"


def test_page_size_rounds_pool_chunk_and_clip_to_pages():
    # The pool is whole pages (pool_configurator.py:623-629), the chunk a multiple of the
    # page (validation_hook.py:242-245).
    odd_pool = rejection(Config(max_total_num_tokens=100, page_size=16))
    assert odd_pool.rule == "pool_not_page_aligned" and "96" in str(odd_pool)
    assert rejection(Config(max_total_num_tokens=96, chunked_prefill_size=24,
                            page_size=16)).rule == "chunk_not_page_aligned"
    assert rejection(Config(max_total_num_tokens=96, chunked_prefill_size=-1,
                            page_size=16)) is None  # chunking off: no chunk to align
    # max_new_tokens: pool - ceil_page(prompt) - page - 1 (allocator/base.py:86-105)
    paged = Config(max_total_num_tokens=64, context_length=1024, page_size=16)
    assert paged.clip_max_new_tokens(17, 1000) == 64 - 32 - 16 - 1
    assert Config(max_total_num_tokens=64, context_length=1024
                  ).clip_max_new_tokens(17, 1000) == 64 - 17 - 2
    assert paged.pages(1) == 16 and paged.pages(16) == 16 and paged.pages(17) == 32


def test_simulate_prints_batch_kinds_and_json_carries_the_sglang_facts(capsys):
    assert main(["simulate", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SGLang 0.5.22 reference scheduler, 9 steps")
    assert "prefill rem_input=" in out and "chunked=long" in out and "decode ratio=" in out
    assert main(["simulate", str(EXAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "sglang" and doc["config"]["chunked_prefill_size"] == 64
    step3 = doc["steps"][2]
    assert step3["batch"] == "prefill" and step3["scheduled"] == {"long": 64}
    assert set(step3) >= {"rem_input_tokens", "rem_chunk_tokens", "rem_total_tokens",
                          "new_token_ratio", "batch_is_full", "chunked_req", "retracted"}


def test_simulate_bad_sglang_input_exits_2_with_one_line(tmp_path, capsys):
    doc = json.loads(EXAMPLE.read_text())
    doc["requests"][0]["prompt_len"] = 5000
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "max_req_input_len" in err and len(err.splitlines()) == 1


def test_engine_is_registered():
    engine = engines.get("sglang")
    assert engine.folder == "sglang" and engine.rules_table


def test_decode_stall_theorem_is_proved():
    assert th.THEOREMS["decode_stall_ceil_l_over_c"].prove(30).proved


def test_decode_stall_theorem_fails_when_continuing_chunks_could_exceed_c(monkeypatch):
    def too_big(ops, remaining, rem_chunk, mem_floor):
        return ops.min(remaining, rem_chunk + 1)
    monkeypatch.setattr(th, "continuation_len", too_big)
    result = th.decode_stall_unbounded(30)
    assert not result.proved and "progress" in result.detail


@pytest.mark.parametrize("page", (2, 4, 16))
def test_decode_stall_chunk_arithmetic_is_the_same_at_any_page_size(page):
    """The theorem reads `new_chunk_len` at page size 1; with C a multiple of the page (the
    startup rule) a prompt served first gets the same chunk at page size P, and any budget
    gives a chunk of at most the budget, so its obligations hold for every page size."""
    import z3

    from model.core.ops import SymbolicOps
    from model.sglang.rules import new_chunk_len

    ops = SymbolicOps()
    big_l, k, budget = z3.Ints("L k budget")
    c = page * k
    chunked_p, e_p = new_chunk_len(ops, big_l, c, page)
    chunked_1, e_1 = new_chunk_len(ops, big_l, c)
    some_chunked, some_e = new_chunk_len(ops, big_l, budget, page)
    solver = z3.Solver()
    solver.add(*ops.take_definitions(), big_l >= 1, k >= 1, budget >= 1, budget <= c)
    solver.add(z3.Or(chunked_p != chunked_1, e_p != e_1, some_e > budget,
                     z3.And(some_chunked, some_e != 0, some_e < page)))
    assert solver.check() == z3.unsat


def test_page_size_is_written_only_when_it_is_not_one():
    # documents and question names from before page size existed read as before
    # (tests/test_environment_bounds.py's file name); a paged config round-trips
    assert "page_size" not in Config().to_dict()
    paged = Config(page_size=16, max_total_num_tokens=256, max_prefill_tokens=64,
                   chunked_prefill_size=64)
    assert paged.to_dict()["page_size"] == 16
    assert parse_config(paged.to_dict()) == paged
