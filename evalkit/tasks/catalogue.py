"""Where the built-in task catalogue lives: ``evalkit/_builtin_tasks`` inside an installed wheel (the build copies
the repository's ``tasks/`` there), else ``tasks/`` beside the package in a source checkout. The one place that
knows; the registry and the test server's answer key both ask it. Imports nothing heavy (the test server starts
from it)."""

from __future__ import annotations

from pathlib import Path


def builtin_tasks_dir() -> Path:
    """The folder of the built-in task files (YAML, python tasks, ``data/``)."""
    pkg = Path(__file__).resolve().parent.parent
    installed = pkg / "_builtin_tasks"
    if installed.is_dir():
        return installed
    return pkg.parent / "tasks"
