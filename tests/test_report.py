"""The HTML report of `batchproof check --html`: self-contained, every counterexample drawn,
verdicts with the manifest's expectations and evidence, configurations, rules tables."""

import html
import re
from dataclasses import replace
from pathlib import Path

from checker.cli.main import main
from checker.methods.jobs import JobResult
from checker.methods.replay import replay
from checker.methods.verdict import VIOLATED, Verdict
from checker.show import report, sources
from checker.show.itf import read_counterexample
from properties.manifest import load

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted((ROOT / "counterexamples").glob("*/*.itf.json"))


def stored_results():
    """JobResults of the stored counterexamples, each replayed on the reference (no solver):
    what the report of a check that found them receives."""
    results, verdicts = [], []
    for path in STORED:
        cex = read_counterexample(path)
        verdict = Verdict(cex.engine, cex.property, cex.config_name, cex.method, VIOLATED,
                          cex.violated_at, 0.5, expected=VIOLATED,
                          detail="replayed on the reference")
        results.append(JobResult(verdict, cex, replay(cex)))
        verdicts.append(replace(verdict, counterexample=str(path.relative_to(ROOT))))
    return results, verdicts


def expected_blocks():
    """Blocks each stored counterexample's timeline draws, in report order."""
    return [sum(len(c.blocks) for c in sources.load(p).timeline.columns) for p in STORED]


def test_the_report_draws_one_timeline_per_counterexample_with_every_block():
    page = report.render_html(*stored_results())
    figures = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    assert len(figures) == len(STORED)
    assert [f.count('class="block"') for f in figures] == expected_blocks()
    assert page.count('<tr class="verdict">') == len(STORED)
    assert page.count("replayed on the reference: ") == len(STORED)


def test_the_report_is_self_contained():
    page = report.render_html(*stored_results())
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", page)
    assert len(set(re.findall(r'id="([^"]+)"', page))) == len(re.findall(r'id="', page))


def test_the_report_names_expectations_evidence_configs_and_rules():
    results, verdicts = stored_results()
    page = report.render_html(results, verdicts)
    manifest = load()
    for v in verdicts:
        entry = next(e for e in manifest.entries
                     if (e.property, e.config) == (v.property, v.config))
        assert html.escape(entry.evidence) in page
        assert f"<h3>{v.config} " in page  # its configuration section
    assert "vllm/v1/core/sched/scheduler.py:796-802" in page  # preemption's victim rule
    assert "<code>VllmV1Scheduler._pop_victim</code>" in page


def test_the_report_is_byte_identical_for_the_same_results():
    results, verdicts = stored_results()
    assert report.render_html(results, verdicts) == report.render_html(results, verdicts)


def test_rules_involved_are_the_narrowest_rows_the_evidence_cites():
    assert report.citations("scheduler.py:710-712 and 1118, 1169; D = 2") == (
        ("scheduler.py", 710, 712), ("scheduler.py", 1118, 1118), ("scheduler.py", 1169, 1169))
    rows = report.rules_involved("vllm-v1", "scheduler.py:777-844 preempts running[-1] and "
                                 "1571-1614 recomputes; request_queue.py:92-94")
    assert [r[1] for r in rows] == ["VllmV1Scheduler._pop_victim",
                                    "VllmV1Scheduler._preempt_request", "FcfsQueue"]
    assert report.rules_involved("vllm-v1", "no citation here") == ()


def test_check_html_writes_the_report(tmp_path, capsys):
    out = tmp_path / "report.html"
    code = main(["check", "--property", "whole_prompt_without_chunking", "--manifest-config",
                 "no_chunking_threshold", "--jobs", "1", "--html", str(out)])
    assert code == 0
    page = out.read_text()
    assert page.count("<svg ") == 1 and "VIOLATED" in page and "no_chunking_threshold" in page
    assert "replayed on the reference: fails at step 1" in page
    capsys.readouterr()
