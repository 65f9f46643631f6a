"""The docs: generated pages are fresh, every page is reachable from the index, links
resolve, the CI page matches the code it describes."""

import functools
import re
import sys
from pathlib import Path

import pytest

from checker.docs import gen as docs_gen
from checker.methods.verdict import Verdict
from model import registry as engines

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
HANDWRITTEN = ("index.md", "modelling.md", "ci.md")
# Pages other engineers own; the index links them while they are being written.
OWNED_ELSEWHERE = {"sglang_model.md", "mistralrs_model.md", "baselines.md",
                   "config_checker.md", "vllm_vs_sglang.md", "compare.md"}


def test_no_generated_page_is_stale():
    stale = [str(p.relative_to(ROOT)) for p in docs_gen.stale()]
    assert stale == [], f"stale: {stale}; regenerate them with `{docs_gen.COMMAND}`"


def test_generated_pages_start_with_the_command_that_regenerates_them():
    for path, text in docs_gen.pages().items():
        if path.suffix == ".md" and path.parent == DOCS:
            head = "\n".join(text.splitlines()[:3])
            assert "batchproof seeds --write" in head or docs_gen.COMMAND in head, path


def test_the_check_reports_a_stale_page_and_the_fix(tmp_path):
    fresh, old, missing = tmp_path / "a.md", tmp_path / "b.md", tmp_path / "c.md"
    fresh.write_text("same\n")
    old.write_text("before\n")
    assert docs_gen.stale({fresh: "same\n", old: "after\n", missing: "x\n"}) == [old, missing]


def test_docs_gen_check_exits_0_when_fresh(capsys):
    assert docs_gen.main(["--check"], out=print) == 0
    assert capsys.readouterr().out == ""


def test_every_engine_has_a_rules_page_and_vllm_rows_name_real_functions():
    pages = docs_gen.pages()
    for name in engines.names():
        assert DOCS / docs_gen.rules_page_name(name) in pages
    model = engines.get("vllm-v1")
    assert len(model.rules_table) >= 10
    ref, rules = sys.modules[model.scheduler.__module__], sys.modules[model.step.__module__]
    for upstream, ref_fn, rules_fn in model.rules_table:
        assert re.fullmatch(r"vllm/[\w/]+\.py:\d+(-\d+)?", upstream), upstream
        assert callable(functools.reduce(getattr, ref_fn.split("."), ref)), ref_fn
        assert callable(getattr(rules, rules_fn)), rules_fn


def test_the_catalogue_lists_every_property_and_every_manifest_entry():
    page = (DOCS / "properties.md").read_text()
    from properties import catalogue
    from properties.manifest import load
    for name in catalogue.names():
        assert f"| `{name}` |" in page
    for e in load().entries:
        assert f"| {e.config} | {e.expected} | {e.suite} |" in page


def _links(path):
    return re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", path.read_text())


def test_every_docs_page_is_reachable_from_the_index():
    linked = {Path(link).name for link in _links(DOCS / "index.md")}
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    rules_pages = {p for p in pages if p.startswith("rules_")}
    assert pages - rules_pages - linked == set()
    engines_page = {Path(link).name for link in _links(DOCS / "engines.md")}
    assert rules_pages <= engines_page


@pytest.mark.parametrize("page", HANDWRITTEN)
def test_links_of_the_handwritten_pages_resolve(page):
    for link in _links(DOCS / page):
        if link.startswith("http") or Path(link).name in OWNED_ELSEWHERE:
            continue
        assert (DOCS / link).resolve().exists(), f"{page} links to missing {link}"


def test_the_ci_page_names_every_exit_code_and_json_field():
    page = (DOCS / "ci.md").read_text()
    for code in range(4):
        assert f"| {code} |" in page
    fields = Verdict("e", "p", "c", "bmc", "HOLDS", 1, 0.0).to_json()
    for field in fields:
        assert f"| `{field}` |" in page, field


def test_the_example_workflow_runs_check_with_json_html_and_junit():
    text = (DOCS / "examples" / "batchproof.yml").read_text()
    for needle in ("batchproof check --json --html report.html", "--junitxml",
                   "pytest -q -m browser", "ruff check ."):
        assert needle in text
    yaml = pytest.importorskip("yaml")
    steps = yaml.safe_load(text)["jobs"]["check"]["steps"]
    assert all("run" in s or "uses" in s for s in steps)
