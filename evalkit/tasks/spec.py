"""A task file, read and checked once: :func:`load_spec` turns a task YAML into a :class:`TaskSpec`.

Every kind gets the same typed spec (``evalkit/tasks/registry.py`` builds it); the checks all kinds share live
here, each failing with one line that names the file or task and the fix:

- ``name``, ``kind`` and ``version`` are present (``version`` kept as a string);
- ``data`` maps names to paths, resolved against the task file's folder (:meth:`TaskSpec.data_files` says which
  a kind needs);
- ``defaults`` only names keys of :class:`TaskSettings`;
- ``endpoint_kind``, when given, is ``chat`` or ``completions``;
- ``metrics``, when given, lists names of :data:`evalkit.scoring.metric_registry.METRICS` (what the default summary
  reports, e.g. ``[avg, pass, maj]``);
- ``scorer``, when given, names an importable function ``module:function`` of ``(request, response) -> Score``
  (as lm-eval's ``!function`` does), imported here so that a wrong name fails as the file is read; a task
  class that takes one (``takes_scorer``, e.g. :class:`evalkit.tasks.boxed_task.BoxedAnswerTask`) scores with
  it, any other refuses the file.

The other keys (``category``, ``tool_choice``, ``max_steps``, ``module``, ``lm_eval``...) belong to a kind and are
read with :meth:`TaskSpec.choice` and :meth:`TaskSpec.positive_int`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from evalkit.contracts import EndpointKind, Request, Response, Score
from evalkit.errors import TaskError

T = TypeVar("T")

ENDPOINT_KINDS = ("chat", "completions")
_COMMON = ("name", "kind", "version", "description", "data", "defaults", "endpoint_kind", "metrics", "scorer")
Scorer = Callable[[Request, Response], Score]


@dataclass(frozen=True)
class TaskSettings:
    """User-facing knobs, already merged with the task's defaults by the runner."""

    limit: int | None = None
    num_fewshot: int | None = None
    num_samples: int = 1
    max_tokens: int | None = None
    max_length: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    endpoint_kind: EndpointKind | None = None
    docs: tuple[int, ...] | None = None  # only these document ids (``limit`` then caps how many of them)
    # multi-turn tool-calling tasks: leave earlier turns' reasoning out of the history sent back (None: other tasks)
    drop_reasoning: bool | None = None
    workload: dict[str, Any] | None = None  # workload tasks: evalkit.config.workload.WorkloadSettings' options
    # --shard I/N as (I, N): only every N-th document of the selection (after ``limit``), from the I-th
    shard: tuple[int, int] | None = None

    def wants(self, doc_id: int) -> bool:
        """Whether document ``doc_id`` is in the run's selection (every document when ``docs`` is None)."""
        return self.docs is None or doc_id in self.docs

    def select(self, items: Sequence[T]) -> list[tuple[int, T]]:
        """The ``(doc_id, item)`` pairs of a task's documents (doc_id = position) that the run takes: those in
        ``docs``, then at most ``limit`` of them, then this shard's part of those (:meth:`shard_of`)."""
        chosen = [(d, item) for d, item in enumerate(items) if self.wants(d)]
        return self.shard_of(chosen if self.limit is None else chosen[: max(self.limit, 0)])

    def shard_of(self, chosen: Sequence[T]) -> list[T]:
        """The shard's part of the documents the unsharded run takes, in their order: with ``--shard I/N``, every
        N-th from the I-th (all of them without a shard). A task that selects its documents otherwise calls it
        after ``limit`` too, so that the N shards together take exactly the unsharded run's documents."""
        if self.shard is None:
            return list(chosen)
        index, count = self.shard
        return list(chosen[index::count])


def settings_keys() -> list[str]:
    """The keys a task's ``defaults`` may set: the fields of TaskSettings (but the run's ``shard``)."""
    return sorted(f.name for f in fields(TaskSettings) if f.name != "shard")


@dataclass(frozen=True)
class TaskSpec:
    """One task file, checked (see the module docstring)."""

    name: str
    kind: str
    version: str
    path: Path  # the YAML file
    description: str = ""
    data: Mapping[str, Path] = field(default_factory=dict)  # name -> path, resolved against the file's folder
    defaults: Mapping[str, Any] = field(default_factory=dict)  # keys of TaskSettings, as the file sets them
    endpoint_kind: EndpointKind | None = None
    metrics: tuple[str, ...] | None = None  # the file's ``metrics`` (None: the kind's)
    scorer: str | None = None  # the file's ``scorer``, "module:function" (None: the task's own)
    options: Mapping[str, Any] = field(default_factory=dict)  # the kind's own keys
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)  # the file's mapping as read

    @property
    def root(self) -> Path:
        """The folder holding the task file (data and modules are relative to it)."""
        return self.path.parent

    def data_files(self, *needed: str) -> dict[str, Path]:
        """The ``data`` paths named ``needed``, in that order; one line naming the missing ones otherwise."""
        missing = [k for k in needed if k not in self.data]
        if missing:
            wanted = ", ".join(f"{k}: PATH" for k in missing)
            raise TaskError(f"{self.name}: the task file needs data: {{{wanted}}} ({self.path.name})")
        return {k: self.data[k] for k in needed}

    def merged_defaults(self, builtin: Mapping[str, Any]) -> dict[str, Any]:
        """The kind's built-in defaults overridden by the file's."""
        return {**builtin, **self.defaults}

    def scorer_function(self) -> Scorer | None:
        """The function ``scorer`` names (checked importable when the file was read), or None."""
        return None if self.scorer is None else cast("Scorer", import_target(self.scorer))

    def choice(self, key: str, allowed: Sequence[str], default: str) -> str:
        """Option ``key`` (``default`` when absent), one of ``allowed``."""
        value = str(self.options.get(key, default))
        if value not in allowed:
            raise TaskError(f"{self.name}: {key} must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def positive_int(self, key: str, default: int) -> int:
        value = self.options.get(key, default)
        if type(value) is not int or value < 1:
            raise TaskError(f"{self.name}: {key} must be a positive integer, got {value!r}")
        return value


def import_target(target: str) -> Any:
    """The object ``"module:attribute"`` names (a dotted attribute reaches a nested one); ImportError,
    AttributeError or ValueError when there is none."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{target!r} is not module:attribute")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def import_named(target: Any, key: str, path: Path, fix: str) -> Any:
    """The object a task file's ``key`` names as ``module:attribute``; one line naming the file and ``fix`` when
    it is not a string or cannot be imported."""
    if not isinstance(target, str):
        raise TaskError(f"{path}: {key} must be a string, got {target!r}; {fix}")
    try:
        return import_target(target)
    except Exception as e:  # a module that fails to import for any reason: one line naming the file
        why = (str(e).splitlines() or [type(e).__name__])[0]
        raise TaskError(f"{path}: {key} {target!r} cannot be imported ({why}); {fix}") from None


def _check_scorer(raw: Mapping[str, Any], path: Path) -> str | None:
    """The file's ``scorer``, imported once to check that it names a function."""
    target = raw.get("scorer")
    if target is None:
        return None
    fix = "name a function as scorer: module:function (e.g. evalkit.scoring.boxed_answer:score_boxed_answer)"
    if not callable(import_named(target, "scorer", path, fix)):
        raise TaskError(f"{path}: scorer {target!r} is not a function; {fix}")
    return str(target)


def read_yaml(path: Path) -> dict[str, Any]:
    """A task file's mapping, with the checks every file needs to be listed (name, kind, version)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise TaskError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); fix the task file") from None
    if not isinstance(raw, dict) or "name" not in raw:
        raise TaskError(f"{path}: a task file needs at least 'name', 'kind' and 'version'")
    return raw


def parse_spec(raw: Mapping[str, Any], path: Path, kinds: Sequence[str] | None = None) -> TaskSpec:
    """``raw`` (a task file's mapping) checked into a TaskSpec; ``kinds``: the known kinds (any when None)."""
    name = str(raw.get("name", ""))
    if not name:
        raise TaskError(f"{path}: a task file needs at least 'name', 'kind' and 'version'")
    kind = raw.get("kind")
    if kinds is not None and kind not in kinds:
        raise TaskError(f"{path}: kind must be one of {', '.join(kinds)}, got {kind!r}")
    if "version" not in raw:
        raise TaskError(f"{path}: task '{name}' has no 'version'; every task must be versioned")
    data = raw.get("data") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise TaskError(f"{path}: 'data' must map names to paths relative to the file, e.g. data: {{test: x.jsonl}}")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise TaskError(f"{path}: 'defaults' must be a mapping of settings, e.g. defaults: {{temperature: 0.0}}")
    allowed = settings_keys()
    unknown = sorted(set(defaults) - set(allowed))
    if unknown:
        raise TaskError(f"{name}: unknown defaults {unknown}; allowed: {allowed}")
    endpoint_kind = raw.get("endpoint_kind")
    if endpoint_kind is not None and endpoint_kind not in ENDPOINT_KINDS:
        raise TaskError(f"{name}: endpoint_kind must be chat or completions, got {endpoint_kind!r}")
    metrics = raw.get("metrics")
    if metrics is not None:
        from evalkit.scoring.metric_registry import METRICS  # only here: it imports numpy, which listing tasks need not

        if not isinstance(metrics, list) or not metrics or not set(metrics) <= set(METRICS):
            raise TaskError(f"{name}: metrics must be a list of {', '.join(METRICS)}, got {metrics!r}")
    scorer = _check_scorer(raw, path)
    root = path.parent
    return TaskSpec(
        name=name,
        kind=str(kind),
        version="" if raw["version"] is None else str(raw["version"]),
        path=path,
        description=str(raw.get("description", "")),
        data={str(k): (root / v).resolve() for k, v in data.items()},
        defaults=dict(defaults),
        endpoint_kind=cast("EndpointKind | None", endpoint_kind),
        metrics=None if metrics is None else tuple(metrics),
        scorer=scorer,
        options={k: v for k, v in raw.items() if k not in _COMMON},
        raw=dict(raw),
    )


def load_spec(path: Path, kinds: Sequence[str] | None = None) -> TaskSpec:
    """The task file at ``path``, read and checked."""
    return parse_spec(read_yaml(path), path, kinds)
