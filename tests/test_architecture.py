"""The house rules of docs/architecture.md, read off the imports (ast): no import circle,
arrows one way (checker -> properties -> model; engine rooms -> model/core), and no engine
name tested inside a generic checking method."""

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

from model import registry

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("model", "properties", "checker")
ROOMS = ("vllm", "vllm_v0", "sglang", "mistralrs", "baselines")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every module of ours that `path` imports, at top level or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            assert node.module is not None
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def import_graph() -> nx.DiGraph:
    """module -> module it imports, among our own modules (a `from pkg import sub` counts
    as importing pkg.sub when that is a module)."""
    sources = _sources()
    graph = nx.DiGraph()
    graph.add_nodes_from(sources)
    for name, path in sources.items():
        for target in _imports(path):
            if target in sources and target != name:
                graph.add_edge(name, target)
    return graph


def _all_imports() -> dict[str, set[str]]:
    return {name: _imports(path) for name, path in _sources().items()}


def _layer(module: str) -> str:
    """model.core | model.<room> | model (above the rooms) | properties | checker.<part>."""
    parts = module.split(".")
    if parts[0] == "model":
        if len(parts) > 1 and parts[1] == "core":
            return "model.core"
        if len(parts) > 1 and parts[1] in ROOMS:
            return f"model.{parts[1]}"
        return "model"
    if parts[0] == "checker" and len(parts) > 1 and parts[1] in {
            "methods", "show", "config", "sweep", "runner", "docs", "cli", "conformance",
            "live"}:
        return f"checker.{parts[1]}"
    return parts[0]


# Which layers each layer may import (besides itself). The checker's parts are ordered
# methods < show < config < sweep < runner < docs < cli; conformance drives real engines
# and reads model.
ALLOWED = {
    "model.core": set(),
    **{f"model.{room}": {"model.core"} for room in ROOMS},
    "model": {"model.core", *(f"model.{room}" for room in ROOMS)},
    "properties": {"model", "model.core", *(f"model.{room}" for room in ROOMS)},
}
_MODEL_ALL = {"model", "model.core", *(f"model.{room}" for room in ROOMS)}
_CHECKER_ORDER = ("checker.methods", "checker.show", "checker.config", "checker.sweep",
                  "checker.runner", "checker.docs", "checker.cli")
for i, part in enumerate(_CHECKER_ORDER):
    ALLOWED[part] = {"properties", "checker", *_MODEL_ALL, *_CHECKER_ORDER[:i]}
ALLOWED["checker.conformance"] = {"properties", "checker", "checker.methods", *_MODEL_ALL}
ALLOWED["checker.cli"].add("checker.conformance")  # `audit` drives the real engines
# The live engine reads a recorded server against the reference and the real Scheduler.
ALLOWED["checker.live"] = {"properties", "checker", "checker.methods", "checker.conformance",
                           *_MODEL_ALL}
ALLOWED["checker.cli"].add("checker.live")
ALLOWED["checker"] = set()


def test_there_is_no_import_circle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == [], f"import circles: {cycles}"


def test_every_arrow_runs_the_allowed_way():
    wrong = []
    for src, dst in import_graph().edges:
        a, b = _layer(src), _layer(dst)
        if a != b and b not in ALLOWED[a]:
            wrong.append(f"{src} -> {dst} ({a} may not import {b})")
    assert wrong == []


def test_engine_rooms_never_import_each_other_and_core_names_no_room():
    for src, dst in import_graph().edges:
        a, b = _layer(src), _layer(dst)
        if a.startswith("model.") and b.startswith("model.") and a != b:
            assert b == "model.core", f"{src} -> {dst}"


def test_z3_is_imported_only_by_the_symbolic_ops_and_the_checker():
    users = sorted(name for name, targets in _all_imports().items()
                   if "z3" in targets and name.split(".")[0] != "checker")
    assert users == ["model.core.ops"]


def test_the_layer_check_can_fail():
    # A core module importing an engine room, or an engine room importing another, is
    # what the rules above must reject.
    assert "model.vllm" not in ALLOWED["model.core"]
    assert "model.vllm" not in ALLOWED["model.sglang"]
    assert "checker.cli" not in ALLOWED["checker.methods"]


@pytest.mark.parametrize("path", sorted((ROOT / "checker" / "methods").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_generic_method_tests_an_engine_name(path):
    text = path.read_text()
    assert "ENGINE_VLLM_V1" not in text
    for name in registry.names():
        assert not re.search(rf"[=!]=\s*[\"']{re.escape(name)}", text), name
        assert not re.search(rf"[\"']{re.escape(name)}[\"']\s*[=!]=", text), name
        assert not re.search(rf"\bin\s*\([^)]*[\"']{re.escape(name)}[\"']", text), name


@pytest.mark.parametrize("path", sorted((ROOT / "checker" / "cli").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_cli_is_only_the_front_door(path):
    # Process pools, worker start-up and signal handling live in checker/runner/ and are
    # shared by check, worst, diff and sweep; a command only says what to run.
    used = {name for name in _imports(path)
            if name.split(".")[0] in {"signal", "ctypes", "multiprocessing", "threading"}
            or name.startswith("concurrent.futures")}
    assert used == set(), f"{path.name} imports {sorted(used)}: move it to checker/runner/"


def test_the_front_door_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import signal\nfrom concurrent.futures import ProcessPoolExecutor\n")
    assert {n for n in _imports(bad) if n.split(".")[0] in {"signal", "concurrent"}} == {
        "signal", "concurrent.futures", "concurrent.futures.ProcessPoolExecutor"}
