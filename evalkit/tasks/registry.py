"""Task registry: tasks are YAML files (plus an optional Python module) in task folders.

Folders searched, in order: the built-in tasks shipped with evalkit, then each ``--tasks-dir``. Each YAML file is
checked once into a :class:`evalkit.tasks.spec.TaskSpec` (``name``, ``version``, ``kind``, ``data`` relative to
the file, ``defaults``...) and built by its kind, a class in :data:`KINDS`:

- ``lm-eval``: lm-eval's own task definition (``evalkit/tasks/lmeval_task.py``); a name ``lm-eval:NAME`` that no
  file declares is lm-eval's task NAME from its own index (``evalkit/tasks/lmeval_source.py``);
- ``python``: ``module`` (a ``.py`` file beside the YAML) with ``make_task(spec)`` (e.g. ``tasks/aime25.py``; a
  module written for the older ``make_task(spec_dict, root)`` still gets the file's mapping and folder), or
  ``class``: an importable ``module:Class`` (a :class:`evalkit.tasks.base.Task` subclass, built by its
  ``from_spec(spec)``) or ``module:function`` of the spec, e.g. ``evalkit.tasks.boxed_task:BoxedAnswerTask``;
- ``tool-calls``: BFCL-format data and a checker ``category`` (``evalkit/tasks/tool_task.py``;
  ``category: multi_turn``: ``evalkit/tasks/multi_turn_task.py``);
- ``logprobs``: a fixed text set scored teacher-forced with ``prompt_logprobs`` (``evalkit/tasks/logprobs_task.py``);
- ``workload``: production-shaped load, speed only: ``workload: random | sharegpt | trace``
  (``evalkit/tasks/workload_task.py``, docs/load.md).

A package adds a kind with an entry point in the ``evalkit.task_kinds`` group: the name is the kind, the value a
:class:`evalkit.tasks.base.Task` subclass (its ``from_spec(spec)`` builds the task) or a function of the spec::

    [project.entry-points."evalkit.task_kinds"]
    my-kind = "my_package.tasks:MyTask"
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from evalkit.errors import TaskError
from evalkit.tasks.base import Task
from evalkit.tasks.catalogue import builtin_tasks_dir
from evalkit.tasks.lmeval_source import PREFIX as LM_EVAL_PREFIX
from evalkit.tasks.spec import TaskSpec, import_named, import_target, parse_spec, read_yaml

ENTRY_POINT_GROUP = "evalkit.task_kinds"
# kind -> "module:attribute" of its Task class (imported when a task of the kind is built)
KINDS: dict[str, str] = {
    "lm-eval": "evalkit.tasks.lmeval_task:LmEvalTask",
    "logprobs": "evalkit.tasks.logprobs_task:LogprobsTask",
    "python": "evalkit.tasks.registry:load_python_task",
    "tool-calls": "evalkit.tasks.multi_turn_task:tool_calls_task",
    "workload": "evalkit.tasks.workload_task:WorkloadTask",
}
KindFactory = Callable[[TaskSpec], Task]


def plugin_kinds() -> dict[str, str]:
    """The kinds installed packages add (entry point group ``evalkit.task_kinds``), name -> "module:attr"."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in KINDS}


def kind_factory(kind: str) -> KindFactory:
    """What builds a task of ``kind``: its class's ``from_spec``, or the factory function the table names."""
    target = KINDS.get(kind) or plugin_kinds().get(kind)
    if target is None:
        raise TaskError(f"unknown task kind {kind!r}; known: {', '.join(known_kinds())}")
    try:
        obj = import_target(target)
    except (ImportError, AttributeError, ValueError) as e:
        raise TaskError(f"task kind {kind!r}: cannot load {target} ({e}); reinstall the package that adds it") from None
    factory = as_factory(obj)
    if factory is None:
        raise TaskError(f"task kind {kind!r}: {target} is neither a Task class nor a function of the spec")
    return factory


def as_factory(obj: Any) -> KindFactory | None:
    """What builds a task from ``obj``: a Task class's ``from_spec``, a function of the spec; None otherwise."""
    if isinstance(obj, type):
        return obj.from_spec if issubclass(obj, Task) else None
    return obj if callable(obj) else None


def known_kinds() -> list[str]:
    return [*KINDS, *plugin_kinds()]


@dataclass(frozen=True)
class TaskEntry:
    name: str
    kind: str
    path: Path
    spec: TaskSpec

    @property
    def version(self) -> str:
        return self.spec.version

    @property
    def description(self) -> str:
        return self.spec.description


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
        kinds: list[str] | None = None  # the entry points are read only for a kind outside the table
        for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
            raw = read_yaml(path)
            if raw.get("kind") not in KINDS and kinds is None:
                kinds = known_kinds()
            spec = parse_spec(raw, path, kinds or list(KINDS))
            name = spec.name
            if name in self.entries and self.entries[name].path.parent == path.parent:
                raise TaskError(f"task '{name}' is declared twice: {self.entries[name].path} and {path}")
            self.entries[name] = TaskEntry(name=name, kind=spec.kind, path=path, spec=spec)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def entry(self, name: str) -> TaskEntry:
        if name not in self.entries and name.startswith(LM_EVAL_PREFIX):  # any task of lm-eval's own index
            raw = {"name": name, "kind": "lm-eval", "version": None, "lm_eval": {"task": name[len(LM_EVAL_PREFIX) :]}}
            spec = parse_spec(raw, Path.cwd() / "lm-eval.yaml")
            self.entries[name] = TaskEntry(name=name, kind="lm-eval", path=spec.path, spec=spec)
        if name not in self.entries:
            close = difflib.get_close_matches(name, self.names(), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known tasks: {', '.join(self.names())}"
            raise TaskError(f"unknown task '{name}'; {hint} (evalkit tasks list shows all)")
        return self.entries[name]

    def get(self, name: str) -> Task:
        entry = self.entry(name)
        task = kind_factory(entry.kind)(entry.spec)
        if entry.spec.scorer is not None and not getattr(task, "takes_scorer", False):
            raise TaskError(
                f"{entry.path}: {type(task).__name__} scores with its own code and takes no 'scorer'; remove it, "
                "or name a task class that takes one (class: evalkit.tasks.boxed_task:BoxedAnswerTask)"
            )
        return task


def load_python_task(spec: TaskSpec) -> Task:
    """The ``python`` kind: the ``class`` the task file names by module, else ``make_task(spec)`` of the module
    file it names (default ``<name>.py``)."""
    if "class" in spec.options:
        return _load_task_class(spec)
    module_file = spec.root / str(spec.options.get("module", f"{spec.name}.py"))
    if not module_file.is_file():
        raise TaskError(f"task '{spec.name}': module {module_file} not found; set 'module' in {spec.path.name}")
    mod_name = f"evalkit_task_{spec.name.replace('-', '_')}"
    module_spec = importlib.util.spec_from_file_location(mod_name, module_file)
    if module_spec is None or module_spec.loader is None:
        raise TaskError(f"task '{spec.name}': cannot import {module_file}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    module_spec.loader.exec_module(module)
    factory = getattr(module, "make_task", None)
    if factory is None:
        raise TaskError(f"task '{spec.name}': {module_file.name} has no make_task(spec) function")
    try:
        legacy = len(inspect.signature(factory).parameters) == 2  # the old make_task(spec_dict, root)
    except (TypeError, ValueError):
        legacy = False
    task: Task = factory(dict(spec.raw), spec.root) if legacy else factory(spec)
    return task


def _load_task_class(spec: TaskSpec) -> Task:
    """The task built by the importable ``class: module:Class`` (or ``module:function``) of a ``python`` task."""
    target = spec.options["class"]
    fix = "name a Task subclass as class: module:Class (e.g. evalkit.tasks.boxed_task:BoxedAnswerTask)"
    if "module" in spec.options:
        raise TaskError(f"{spec.path}: set either 'class' (an importable module:Class) or 'module' (a file), not both")
    obj = import_named(target, "class", spec.path, fix)
    factory = as_factory(obj)
    if factory is None:
        raise TaskError(f"{spec.path}: class {target!r} is neither a Task subclass nor a function of the spec; {fix}")
    return factory(spec)
