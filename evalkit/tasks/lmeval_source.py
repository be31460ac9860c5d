"""Where an lm-eval task's definition and data come from: lm-eval's own ``TaskManager`` (its task index, with
``include_path`` folders) for ``lm-eval:NAME`` tasks, local files for data (``--data-dir``), or lm-eval's usual
``datasets`` loading.

- :func:`task_config` is lm-eval's config of a task by name, as its ``TaskFactory`` loads it (includes and
  ``!function`` resolved); :func:`leaf_tasks` expands a group or tag into its tasks, with the overrides the
  group gives them; :func:`lm_eval_groups` is the groups a run names, with what lm-eval aggregates them
  over; :func:`groups_listing` is what ``evalkit tasks list --lm-eval`` prints.
- :func:`config_hash` is a short hash of a config (functions by their source), recorded in the task's version.
- :func:`expand_lm_eval_tasks` turns the run's ``lm-eval:NAME`` tasks (groups expanded) and its ``--include-path``,
  ``--tokenizer``, ``--data-dir`` into task files in a folder of the evalkit cache, added to the run's task
  folders, so every process that loads the tasks (scoring, prompt building) builds the same ones.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from evalkit.contracts import GroupSummary
from evalkit.errors import TaskError

PREFIX = "lm-eval:"
SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")


def lm_eval_tasks_dir() -> Path:
    """lm-eval's bundled task folder, found without importing ``lm_eval.tasks`` (which indexes every task)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise TaskError("lm-eval is not installed; pip install 'lm-eval[api]'")
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


def quiet_lm_eval() -> None:
    for name in ("lm_eval", "lm-eval"):
        logging.getLogger(name).setLevel(logging.ERROR)


@functools.lru_cache(maxsize=4)
def task_manager(include_path: tuple[str, ...] = ()) -> Any:
    """lm-eval's TaskManager over its own tasks and ``include_path`` (built once per process), its index of lm-eval's
    own tasks read from :func:`bundled_task_index` (the same entries lm-eval's constructor builds; the
    ``include_path`` folders indexed by lm-eval as usual, their tasks taking precedence)."""
    quiet_lm_eval()
    for folder in include_path:
        if not Path(folder).is_dir():
            raise TaskError(f"--include-path {folder}: not a folder; pass a folder of lm-eval task YAML files")
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._index import Kind

    tm = TaskManager(include_path=list(include_path) or None, include_defaults=False)
    tm._index = {**bundled_task_index(), **tm._index}
    names = sorted(tm._index)
    kinds = {name: tm._index[name].kind for name in names}
    tm._all_tasks = names
    tm._all_subtasks = [n for n in names if kinds[n] in (Kind.TASK, Kind.PY_TASK)]
    tm._all_groups = [n for n in names if kinds[n] == Kind.GROUP]
    tm._all_tags = [n for n in names if kinds[n] == Kind.TAG]
    return tm


def _tasks_fingerprint(root: Path) -> str:
    """A hash over the path, size and modification time of every task YAML under ``root`` (with lm-eval's version):
    what :func:`bundled_task_index`'s file is keyed by, so an edited, added or removed task file rebuilds it."""
    digest = hashlib.sha256(f"{lm_eval_version()}\n{root}\n".encode())
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        for name in sorted(files):
            if name.endswith(".yaml"):
                st = os.stat(os.path.join(folder, name))
                digest.update(f"{folder}/{name}:{st.st_mtime_ns}:{st.st_size}\n".encode())
    return digest.hexdigest()[:16]


def bundled_index_path() -> Path:
    """Where :func:`bundled_task_index` keeps lm-eval's index of its own tasks: ``lm-eval-index/<fingerprint>.pickle``
    in the evalkit cache (beside the prompt cache)."""
    return generated_dir().parent / "lm-eval-index" / f"{_tasks_fingerprint(lm_eval_tasks_dir())}.pickle"


def bundled_task_index() -> dict[str, Any]:
    """lm-eval's index of its own tasks (name -> ``Entry``), as its ``TaskIndex.build`` makes it, kept at
    :func:`bundled_index_path`: indexing parses every task YAML (some 14,000 files: seconds), reading the kept
    index a small part of that. A file that does not load is rebuilt; an unwritable cache only costs the time."""
    import pickle

    from lm_eval.tasks._index import TaskIndex

    path = bundled_index_path()
    with contextlib.suppress(OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        index = pickle.loads(path.read_bytes())
        if isinstance(index, dict):
            return index
    index = TaskIndex.build([lm_eval_tasks_dir()])
    with contextlib.suppress(OSError):
        from evalkit.store.files import write_bytes_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob("*.pickle"):  # another lm-eval version's or an edited tree's
            old.unlink(missing_ok=True)
        write_bytes_atomic(path, pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL))
    return index


def _entry(name: str, include_path: tuple[str, ...]) -> Any:
    import difflib

    tm = task_manager(include_path)
    entry = tm.task_index.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, tm.all_tasks, n=1)
        hint = f"did you mean '{PREFIX}{close[0]}'?" if close else "evalkit tasks list --lm-eval shows them"
        where = f" (with --include-path {', '.join(include_path)})" if include_path else ""
        raise TaskError(f"lm-eval has no task or group '{name}'{where}; {hint}")
    return entry


def _load_full_config(factory: Any, entry: Any) -> dict[str, Any]:
    """lm-eval's full config of ``entry`` (its YAML, includes and ``!function`` imports); TaskError (one line naming
    the file) when lm-eval cannot load it: a ``!function`` whose module or function is missing or fails to import,
    an ``include`` that is not there, YAML that does not parse."""
    try:
        cfg: dict[str, Any] = factory._load_full_config(entry, None)
    except TaskError:
        raise
    except Exception as e:
        where = f" ({entry.yaml_path})" if getattr(entry, "yaml_path", None) else ""
        why = " ".join(str(e).split())[:300] or type(e).__name__
        raise TaskError(
            f"lm-eval task '{entry.name}'{where} does not load: {type(e).__name__}: {why}; fix the YAML "
            "(a !function needs its module beside the YAML file) or leave the task out"
        ) from None
    return cfg


def task_config(name: str, include_path: tuple[str, ...] = (), yaml_path: str | None = None) -> dict[str, Any]:
    """lm-eval's config of task ``name`` as its TaskFactory builds it (a copy); from ``yaml_path`` (the task's file,
    as the index found it) without indexing every task when given."""
    from lm_eval.tasks._factory import TaskFactory
    from lm_eval.tasks._index import Entry, Kind

    if yaml_path is not None:
        quiet_lm_eval()
        entry = Entry(name=name, kind=Kind.TASK, yaml_path=Path(yaml_path))
    else:
        entry = _entry(name, include_path)
    if entry.kind in (Kind.GROUP, Kind.TAG):
        raise TaskError(f"lm-eval's '{name}' is a group; run it as {PREFIX}{name} (evalkit runs each of its tasks)")
    cfg: dict[str, Any] = _load_full_config(TaskFactory(), entry)
    if "class" in cfg:
        raise TaskError(f"lm-eval's '{name}' is a Python task class; evalkit runs lm-eval's YAML tasks only")
    for key in ("tag", "group", "task_list"):
        cfg.pop(key, None)
    return cfg


def leaf_tasks(name: str, include_path: tuple[str, ...] = ()) -> list[tuple[str, dict[str, Any]]]:
    """The tasks lm-eval runs for ``name`` (a task, group or tag), each with the overrides its groups give it,
    in lm-eval's order."""
    from lm_eval.config.group import GroupConfig
    from lm_eval.tasks._index import Kind

    group_fields = set(GroupConfig.__dataclass_fields__)
    tm = task_manager(include_path)
    entry = _entry(name, include_path)
    if entry.kind == Kind.TAG:
        return [(t, {}) for t in sorted(entry.tags) if t in tm.task_index]
    if entry.kind != Kind.GROUP:
        return [(name, {})]
    raw = _load_full_config(tm._factory, entry)
    shared = {k: v for k, v in raw.items() if k not in group_fields}
    out: list[tuple[str, dict[str, Any]]] = []
    for item in raw.get("task") or []:
        if isinstance(item, dict) and "group" in item and item["group"] not in tm.task_index:
            raise TaskError(f"lm-eval group '{name}' defines group '{item['group']}' inline; evalkit cannot run it")
        base = item if isinstance(item, str) else item.get("task", item.get("group"))
        extra = {} if isinstance(item, str) else {k: v for k, v in item.items() if k not in ("task", "group")}
        if base not in tm.task_index:
            raise TaskError(f"lm-eval group '{name}' defines task '{base}' inline; evalkit cannot run it")
        overrides = {**shared, **extra}
        for leaf, more in leaf_tasks(str(base), include_path):
            out.append((leaf, {**overrides, **more}))
    return out


def lm_eval_groups(tasks: Sequence[str], include_path: Sequence[Path] = ()) -> dict[str, GroupSummary]:
    """The lm-eval groups the run's ``lm-eval:NAME`` tasks name, nested ones first (children before parents, as
    lm-eval aggregates them): each with its members, its tasks and its ``aggregate_metric_list`` normalised as
    lm-eval's GroupConfig does; no metrics yet (:func:`evalkit.scoring.groups.group_results` adds them)."""
    if not any(t.startswith(PREFIX) for t in tasks):
        return {}
    from dataclasses import asdict

    from lm_eval.config.group import GroupConfig
    from lm_eval.tasks._index import Kind

    inc = tuple(str(Path(p).resolve()) for p in include_path)
    fields = set(GroupConfig.__dataclass_fields__)
    out: dict[str, GroupSummary] = {}

    def visit(name: str) -> None:
        entry = _entry(name, inc)
        if entry.kind != Kind.GROUP or PREFIX + name in out:
            return
        raw = task_manager(inc)._factory._load_full_config(entry, None)
        members = [str(m if isinstance(m, str) else m.get("task", m.get("group"))) for m in raw.get("task") or []]
        for member in members:
            visit(member)
        cfg = GroupConfig(**{**{k: v for k, v in raw.items() if k in fields}, "group": name})
        out[PREFIX + name] = GroupSummary(
            members=[PREFIX + m for m in members],
            tasks=list(dict.fromkeys(PREFIX + leaf for leaf, _ in leaf_tasks(name, inc))),
            aggregate_metric_list=[
                {k: v if isinstance(v, str | bool | list) or v is None else repr(v) for k, v in asdict(a).items()}
                for a in cfg.aggregate_metric_list or []
            ],
        )

    for task in tasks:
        if task.startswith(PREFIX):
            visit(task[len(PREFIX) :])
    return out


def groups_listing(include_path: tuple[str, ...] = ()) -> list[str]:
    """One line per lm-eval group (its name and the tasks or groups it holds), then the tasks in no group."""
    tm = task_manager(include_path)
    lines: list[str] = []
    grouped: set[str] = set()
    for group in tm.all_groups:
        cfg = tm.task_index[group].cfg or {}
        members = [m if isinstance(m, str) else str(m.get("task", m.get("group"))) for m in cfg.get("task") or []]
        grouped.update(members)
        lines.append(f"{PREFIX}{group}  [group] {', '.join(members)}")
    for tag in tm.all_tags:
        members = sorted(tm.task_index[tag].tags)
        grouped.update(members)
        lines.append(f"{PREFIX}{tag}  [tag] {', '.join(members)}")
    alone = [t for t in tm.all_subtasks if t not in grouped]
    lines.append(f"(in no group) {', '.join(PREFIX + t for t in alone)}")
    return lines


def _stable(value: Any) -> Any:
    """A config value with functions as their source (else module and name), for hashing."""
    if callable(value):
        try:
            return inspect.getsource(value)
        except (OSError, TypeError):
            return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(type(value)))}"
    if isinstance(value, dict):
        return {str(k): _stable(v) for k, v in value.items() if k != "config_source"}
    if isinstance(value, list | tuple):
        return [_stable(v) for v in value]
    return value


def config_hash(cfg: dict[str, Any]) -> str:
    """12 hex digits over the config (functions by their source; lm-eval's ``config_source`` path left out)."""
    blob = orjson.dumps(_stable(cfg), option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(blob).hexdigest()[:12]


def local_splits(cfg: dict[str, Any], task: str, data_dir: Path) -> dict[str, Path]:
    """The task's splits found under ``data_dir``: ``DIR/<task>/<split>.jsonl``, else ``DIR/<split>.jsonl``;
    one line naming what is missing when the split lm-eval evaluates is not there."""
    if not data_dir.is_dir():
        raise TaskError(f"--data-dir {data_dir}: not a folder; pass a folder holding <task>/<split>.jsonl files")
    found: dict[str, Path] = {}
    for key in SPLIT_KEYS:
        split = cfg.get(key)
        if not split or split in found:
            continue
        for path in (data_dir / task / f"{split}.jsonl", data_dir / f"{split}.jsonl"):
            if path.is_file():
                found[str(split)] = path.resolve()
                break
    evaluated = cfg.get("test_split") or cfg.get("validation_split")
    if evaluated and evaluated not in found:
        raise TaskError(
            f"lm-eval task {task}: no {evaluated}.jsonl under --data-dir {data_dir} "
            f"(looked for {data_dir / task / f'{evaluated}.jsonl'} and {data_dir / f'{evaluated}.jsonl'})"
        )
    return found


def download_error(task: str, cfg: dict[str, Any], err: BaseException) -> TaskError:
    """One line for a dataset lm-eval could not load: which dataset, why, and the flag that gives it locally."""
    dataset = "/".join(str(x) for x in (cfg.get("dataset_path"), cfg.get("dataset_name")) if x)
    why = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    return TaskError(
        f"lm-eval task {task}: dataset {dataset} could not be loaded ({why}); give its splits as local files "
        f"with --data-dir DIR (DIR/{task}/<split>.jsonl) or allow the download"
    )


def generated_dir() -> Path:
    """The folder of the task files :func:`expand_lm_eval_tasks` writes (beside the prompt cache)."""
    from evalkit.tasks.prompt_cache import prompt_cache_dir

    return prompt_cache_dir().parent / "lm-eval-tasks"


def expand_lm_eval_tasks(
    tasks: Sequence[str],
    include_path: Sequence[Path] = (),
    tokenizer: str | None = None,
    data_dir: Path | None = None,
    chat: dict[str, Any] | None = None,
) -> tuple[list[str], Path | None]:
    """The run's task names with each ``lm-eval:NAME`` group expanded into its tasks, and the folder of the task
    files that carry the lm-eval options (None when no task is an lm-eval one); ``chat`` is the prompts' chat
    formatting (evalkit/tasks/lmeval_chat.py's ``chat_options``)."""
    from evalkit.store.files import write_text_atomic

    names = [t for t in tasks if t.startswith(PREFIX)]
    if not names:
        if chat is not None:
            raise TaskError("--apply-chat-template and --system-instruction apply to lm-eval:NAME tasks only; name one")
        return list(tasks), None
    inc = tuple(str(Path(p).resolve()) for p in include_path)
    out: list[str] = []
    files: dict[str, dict[str, Any]] = {}
    for task in tasks:
        if not task.startswith(PREFIX):
            out.append(task)
            continue
        for leaf, overrides in leaf_tasks(task[len(PREFIX) :], inc):
            name = PREFIX + leaf
            out.append(name)
            path = task_manager(inc).task_index[leaf].yaml_path  # read directly by each process that loads it
            options: dict[str, Any] = {"task": leaf, "include_path": list(inc), "overrides": overrides}
            if path is not None:
                options["yaml"] = str(path)
            if tokenizer:
                options["tokenizer"] = tokenizer
            if data_dir is not None:
                options["data_dir"] = str(Path(data_dir).resolve())
            if chat is not None:
                options["chat"] = chat
            files[name] = {"name": name, "kind": "lm-eval", "version": None, "lm_eval": options}
    digest = hashlib.sha256(orjson.dumps(files, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()[:16]
    folder = generated_dir() / digest
    folder.mkdir(parents=True, exist_ok=True)
    for i, (_, spec) in enumerate(sorted(files.items())):
        path = folder / f"task-{i:04d}.yaml"
        text = yaml.safe_dump(orjson.loads(orjson.dumps(spec, default=str)), sort_keys=False)
        if not path.is_file() or path.read_text() != text:
            write_text_atomic(path, text)
    return list(dict.fromkeys(out)), folder
