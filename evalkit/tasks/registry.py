"""Task registry: tasks are YAML files (plus an optional Python module) in task folders.

Folders searched, in order: the built-in tasks shipped with evalkit, then each ``--tasks-dir``. A YAML file
declares ``name``, ``version``, ``kind`` (``lm-eval``, ``python`` or ``tool-calls``) and ``data`` (paths relative to
the file); ``kind: python`` also names ``module`` (a ``.py`` file beside it with ``make_task(spec, root)``);
``kind: tool-calls`` names BFCL-format data and a checker ``category`` (``evalkit/tasks/tool_task.py``;
``category: multi_turn``: ``evalkit/tasks/multi_turn_task.py``).
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalkit.errors import TaskError
from evalkit.tasks.base import Task

KINDS = ("lm-eval", "python", "tool-calls")


def builtin_tasks_dir() -> Path:
    """Where the built-in task files live: inside the installed package, or ``tasks/`` of a source checkout."""
    pkg = Path(__file__).resolve().parent.parent
    installed = pkg / "_builtin_tasks"
    if installed.is_dir():
        return installed
    return pkg.parent / "tasks"


@dataclass(frozen=True)
class TaskEntry:
    name: str
    kind: str
    path: Path
    spec: dict[str, Any]

    @property
    def version(self) -> str:
        return str(self.spec.get("version", ""))

    @property
    def description(self) -> str:
        return str(self.spec.get("description", ""))


def _read_spec(path: Path) -> dict[str, Any]:
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise TaskError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); fix the task file") from None
    if not isinstance(spec, dict) or "name" not in spec:
        raise TaskError(f"{path}: a task file needs at least 'name', 'kind' and 'version'")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise TaskError(f"{path}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if "version" not in spec:
        raise TaskError(f"{path}: task '{spec['name']}' has no 'version'; every task must be versioned")
    return spec


class Registry:
    """Named tasks from the built-in folder and any extra folders.

    Example::

        reg = Registry()            # built-in tasks
        task = reg.get("gsm8k")
    """

    def __init__(self, extra_dirs: list[Path] | None = None) -> None:
        self.entries: dict[str, TaskEntry] = {}
        for folder in [builtin_tasks_dir(), *(extra_dirs or [])]:
            self._scan(Path(folder))

    def _scan(self, folder: Path) -> None:
        if not folder.is_dir():
            raise TaskError(f"tasks dir not found: {folder}; pass an existing folder to --tasks-dir")
        for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
            spec = _read_spec(path)
            name = str(spec["name"])
            if name in self.entries and self.entries[name].path.parent == path.parent:
                raise TaskError(f"task '{name}' is declared twice: {self.entries[name].path} and {path}")
            self.entries[name] = TaskEntry(name=name, kind=spec["kind"], path=path, spec=spec)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def entry(self, name: str) -> TaskEntry:
        if name not in self.entries:
            close = difflib.get_close_matches(name, self.names(), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known tasks: {', '.join(self.names())}"
            raise TaskError(f"unknown task '{name}'; {hint} (evalkit tasks list shows all)")
        return self.entries[name]

    def get(self, name: str) -> Task:
        entry = self.entry(name)
        root = entry.path.parent
        if entry.kind == "lm-eval":
            from evalkit.tasks.lmeval_task import LmEvalTask

            return LmEvalTask(entry.spec, root)
        if entry.kind == "tool-calls" and entry.spec.get("category") == "multi_turn":
            from evalkit.tasks.multi_turn_task import MultiTurnToolTask

            return MultiTurnToolTask(entry.spec, root)
        if entry.kind == "tool-calls":
            from evalkit.tasks.tool_task import ToolCallTask

            return ToolCallTask(entry.spec, root)
        return _load_python_task(entry, root)


def _load_python_task(entry: TaskEntry, root: Path) -> Task:
    module_file = root / str(entry.spec.get("module", f"{entry.name}.py"))
    if not module_file.is_file():
        raise TaskError(f"task '{entry.name}': module {module_file} not found; set 'module' in {entry.path.name}")
    mod_name = f"evalkit_task_{entry.name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(mod_name, module_file)
    if spec is None or spec.loader is None:
        raise TaskError(f"task '{entry.name}': cannot import {module_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    factory = getattr(module, "make_task", None)
    if factory is None:
        raise TaskError(f"task '{entry.name}': {module_file.name} has no make_task(spec, root) function")
    task: Task = factory(entry.spec, root)
    return task
