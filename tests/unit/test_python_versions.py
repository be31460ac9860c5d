"""evalkit runs on the oldest Python that ``requires-python`` admits: no language feature or standard-library
module newer than that (vermin's static check), every file compiles under that interpreter when one is installed,
and the type checker and the TOML fallback follow the same floor.

Here: those of its tests that run in-process; the others are in tests/integration/test_python_versions.py."""

from __future__ import annotations

import re

from tests.integration.test_python_versions import PYPROJECT, REPO, floor  # noqa: F401 (helpers and fixtures shared with that file)


def test_type_checker_and_toml_fallback_follow_the_floor():
    major, minor = floor()
    assert PYPROJECT["tool"]["mypy"]["python_version"] == f"{major}.{minor}"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
    if (major, minor) < (3, 11):  # tomllib is 3.11+: config/settings_files.py reads TOML with tomli below it
        deps = PYPROJECT["project"]["dependencies"]
        assert any(re.fullmatch(r"tomli\b.*;\s*python_version\s*<\s*['\"]3\.11['\"]", d) for d in deps), deps
