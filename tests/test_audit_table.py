"""docs/audit.md's mutation table (bench/audit_table.py) cannot drift from the repository:
it lists exactly the patches of tests/audit_mutations/ and not_caught/, at the lines they
change now, it is the rendering of docs/audit_mutations.json, and it was run with the
arguments of tests/test_audit.py's one audit per mutation. No vLLM needed: nothing is audited."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from checker.conformance.modes import MODES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("audit_table",
                                                  ROOT / "bench" / "audit_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results(table):
    assert table.RESULTS.exists(), f"no {table.RESULTS.name}: run `{table.COMMAND}`"
    return json.loads(table.RESULTS.read_text())


def test_the_table_lists_exactly_the_patches_present(table, results):
    present = {name: kind for name, (kind, _) in table.all_patches().items()}
    listed = {row["mutation"]: row["set"] for row in results["mutations"]}
    assert listed == present, (
        f"docs/audit.md's mutation table is stale (added: {sorted(present.keys() - listed)}, "
        f"removed: {sorted(listed.keys() - present)}, moved: "
        f"{sorted(k for k in present.keys() & listed if present[k] != listed[k])}): "
        f"run `{table.COMMAND}`")


def test_the_table_has_each_patch_at_the_lines_it_changes_now(table, results):
    stale = [row["mutation"] for row in results["mutations"]
             if row["mutation"] in table.all_patches()
             and row["changed"] != table.changed_lines(table.all_patches()[row["mutation"]][1])]
    assert not stale, f"patches changed since the table was generated: {stale}: " \
                      f"run `{table.COMMAND}`"


def test_the_page_is_the_rendering_of_the_results(table, results):
    page = table.PAGE.read_text()
    assert table.section(page), f"docs/audit.md lost its markers {table.BEGIN!r} / {table.END!r}"
    assert table.section(page) == table.render(results), (
        "docs/audit.md's mutation table differs from docs/audit_mutations.json: run "
        "`python bench/audit_table.py --render` (or, if the patches changed, "
        f"`{table.COMMAND}`)")


def _mutation_test_audit_args() -> str:
    """The source of the arguments tests/test_audit.py's mutation test audits with."""
    tree = ast.parse((ROOT / "tests" / "test_audit.py").read_text())
    [test] = [node for node in tree.body if isinstance(node, ast.FunctionDef)
              and node.name == "test_each_mutation_is_caught_small_as_one_finding_at_its_lines"]
    [call] = [node for node in ast.walk(test) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "run_audit"]
    return ast.unparse(call.args[1])


def test_the_run_used_the_mutation_tests_audit(table, results):
    assert _mutation_test_audit_args() == "list(mut.ONE_AUDIT)"
    assert results["audit"] == table.audit_args() == list(table.mut.ONE_AUDIT)
    assert (results["seed"], results["count"], results["sources"]) == (
        int(table.audit_arg("--seed")), int(table.audit_arg("--count")),
        table.audit_arg("--sources"))
    # every mode of the audit's vLLM harness (all but the connector modes, audit.py)
    audited = [m for m in MODES if not m.startswith("connector")]
    assert "--modes" not in results["audit"] and results["modes"] == audited


def test_each_row_has_a_verdict_its_figures_support(table, results):
    """Not the verdicts themselves (they are the run's): that each follows from its row."""
    for row in results["mutations"]:
        v = table.verdict(row)
        if v == "one group at its lines":
            assert row["groups"] == 1 and row["first_at_patched_lines"], row
        elif v == "caught otherwise":
            assert row["groups"] > 1 or not row["first_at_patched_lines"], row
        elif v == "not caught":
            assert row["groups"] == 0 and row["code"] != 1, row
