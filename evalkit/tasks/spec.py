"""A task file, read and checked once: :func:`load_spec` turns a task YAML into a :class:`TaskSpec`.

Every kind gets the same typed spec (``evalkit/tasks/registry.py`` builds it); the checks all kinds share live
here, each failing with one line that names the file or task and the fix:

- ``name``, ``kind`` and ``version`` are present (``version`` kept as a string);
- ``data`` maps names to paths, resolved against the task file's folder (:meth:`TaskSpec.data_files` says which
  a kind needs);
- ``defaults`` only names keys of :class:`TaskSettings`;
- ``endpoint_kind``, when given, is ``chat`` or ``completions``;
- ``metrics``, when given, lists names of :data:`evalkit.scoring.metrics.METRICS` (what the default summary
  reports, e.g. ``[avg, pass, maj]``).

The other keys (``category``, ``tool_choice``, ``max_steps``, ``module``, ``lm_eval``...) belong to a kind and are
read with :meth:`TaskSpec.choice` and :meth:`TaskSpec.positive_int`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from evalkit.contracts import EndpointKind
from evalkit.errors import TaskError

T = TypeVar("T")

ENDPOINT_KINDS = ("chat", "completions")
_COMMON = ("name", "kind", "version", "description", "data", "defaults", "endpoint_kind", "metrics")


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

    def wants(self, doc_id: int) -> bool:
        """Whether document ``doc_id`` is in the run's selection (every document when ``docs`` is None)."""
        return self.docs is None or doc_id in self.docs

    def select(self, items: Sequence[T]) -> list[tuple[int, T]]:
        """The ``(doc_id, item)`` pairs of a task's documents (doc_id = position) that the run takes: those in
        ``docs``, then at most ``limit`` of them."""
        chosen = [(d, item) for d, item in enumerate(items) if self.wants(d)]
        return chosen if self.limit is None else chosen[: max(self.limit, 0)]


def settings_keys() -> list[str]:
    """The keys a task's ``defaults`` may set: the fields of TaskSettings."""
    return sorted(f.name for f in fields(TaskSettings))


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
        from evalkit.scoring.metrics import METRICS  # only here: it imports numpy, which listing tasks need not

        if not isinstance(metrics, list) or not metrics or not set(metrics) <= set(METRICS):
            raise TaskError(f"{name}: metrics must be a list of {', '.join(METRICS)}, got {metrics!r}")
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
        options={k: v for k, v in raw.items() if k not in _COMMON},
        raw=dict(raw),
    )


def load_spec(path: Path, kinds: Sequence[str] | None = None) -> TaskSpec:
    """The task file at ``path``, read and checked."""
    return parse_spec(read_yaml(path), path, kinds)
