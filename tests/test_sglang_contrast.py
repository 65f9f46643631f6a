"""The vLLM-vs-SGLang page is generated and current, and says what the two engines do."""

from pathlib import Path

from checker.docs import contrast
from model.run import simulate

ROOT = Path(__file__).resolve().parents[1]


def test_docs_page_is_the_generated_one():
    page = ROOT / "docs" / "vllm_vs_sglang.md"
    assert contrast.main(["--check", str(page)]) == 0, f"regenerate: {contrast.COMMAND}"


def test_vllm_mixes_decodes_with_the_chunk_and_sglang_pauses_them_for_ceil_l_over_c_steps():
    runs = {name: simulate(w) for name, w in contrast.workloads().items()}
    decoders = {f"d{i}" for i in range(10)}
    for step in range(2, 6):  # steps 3..6: the long prompt is chunked
        vllm = dict(runs["vllm-v1"][step].scheduled)
        sglang = dict(runs["sglang"][step].scheduled)
        assert decoders <= set(vllm) and "long" in vllm
        assert set(sglang) == {"long"}
    assert [dict(r.scheduled).get("long") for r in runs["sglang"][2:6]] == [64, 64, 64, 8]


def test_check_reports_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "page.md"
    stale.write_text("old\n")
    assert contrast.main(["--check", str(stale)]) == 1
    assert "regenerate" in capsys.readouterr().out
