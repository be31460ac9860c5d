"""The shape of the package a newcomer reads (ARCHITECTURE.md): layers as folders, few modules at the top, no
module over one long screen, no callable-package tricks."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

import evalkit

PKG = Path(evalkit.__file__).parent
MAX_LINES = 500
# vendored upstream code (BFCL's backends) and the test server's app, whose one file holds every endpoint it fakes
EXEMPT = ("scoring/bfcl_backends/", "testing/app.py")
# directly in evalkit/: the entry points and the modules every layer may import (ARCHITECTURE.md); a module of a
# layer lives in that layer's folder
TOP_MODULES = {"__init__.py", "api.py", "errors.py", "limits.py", "redact.py", "version.py"}
TESTS = Path(__file__).resolve().parents[1]
TIER_FOLDERS = ("unit", "integration", "system")
# test modules of the tier folders already over the cap, each held at its length (by name, so that a module moved
# between tiers keeps its ceiling): split them, never let them grow
LONG_TESTS = {
    "test_report.py": 600,
    "test_bad_input.py": 721,
    "test_hostile_server.py": 681,
    "test_report_browser.py": 511,
    "test_vllm_e2e.py": 528,
}


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if not str(p.relative_to(PKG)).startswith(EXEMPT))


def test_no_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(PKG)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


def test_no_test_module_of_a_tier_is_over_500_lines() -> None:
    modules = sorted(p for tier in TIER_FOLDERS for p in (TESTS / tier).glob("*.py"))
    assert len(modules) > 100, modules  # the tier folders hold the tests
    long = {
        str(p.relative_to(TESTS)): n
        for p in modules
        if (n := len(p.read_text().splitlines())) > LONG_TESTS.get(p.name, MAX_LINES)
    }
    assert not long, f"split these test modules (over {MAX_LINES} lines, or longer than their ceiling): {long}"


def test_only_entry_points_and_cross_cutting_modules_sit_directly_in_the_package() -> None:
    top = {p.name for p in PKG.glob("*.py")}
    assert top <= TOP_MODULES, f"move into the folder of their layer (ARCHITECTURE.md): {sorted(top - TOP_MODULES)}"


def test_the_version_module_is_a_leaf() -> None:
    """The manifest, the CLI and the package root read ``__version__`` from a module that imports nothing of evalkit
    (the store imported the package root for it)."""
    graph = grimp.build_graph("evalkit")
    assert not {m for m in graph.find_modules_directly_imported_by("evalkit.version") if m.startswith("evalkit")}
    assert "evalkit" not in graph.find_modules_directly_imported_by("evalkit.store.manifest")


def test_the_api_names_are_plain_functions_not_packages() -> None:
    """evalkit.report and evalkit.gate are the API's functions; no package of evalkit has an API function's name
    (a package would bind its name on evalkit at its first import and shadow the function)."""
    api = ast.parse((PKG / "api.py").read_text())
    functions = {n.name for n in api.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    assert not functions & packages, functions & packages
    for name in ("run", "open_run", "report", "gate"):
        assert callable(getattr(evalkit, name)) and getattr(evalkit, name).__module__ == "evalkit.api"


def test_no_import_cycles() -> None:
    """No module of evalkit imports itself through others (function-level and TYPE_CHECKING imports count; the
    package's lazy ``evalkit.run``/``report``/``gate`` for type checkers aside; vendored BFCL code aside)."""
    graph = grimp.build_graph("evalkit")
    edges = {
        m: {i for i in graph.find_modules_directly_imported_by(m) if i.startswith("evalkit")} - {"evalkit.api"}
        if m == "evalkit"
        else {i for i in graph.find_modules_directly_imported_by(m) if i.startswith("evalkit")}
        for m in graph.modules
        if m.startswith("evalkit") and "bfcl_backends" not in m
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                cycles.append([*path[path.index(n) :], n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles[:5]
