"""Reading a run directory: :func:`open_run` -> :class:`Run` (manifest, summary, samples).

The one reader of run dirs (the report, the gate, users' scripts). Reports must render old, partial or hand-edited
runs, so reading is tolerant: the files are kept as JSON objects whose values are checked for their type where
they are used (the ``as_*`` helpers), and problems are collected as human-readable ``notes`` (and, per file, in
``problems``) instead of raised. :meth:`Run.typed_manifest`, :meth:`Run.typed_summary` and :meth:`Run.records`
give the validated models of :mod:`evalkit.contracts` (strict: a ValidationError on anything odd); :meth:`Run.task`
and :meth:`Run.tasks` give each task of the summary as a :class:`TaskRead`, and :meth:`Run.manifest_read` the
manifest as a :class:`ManifestRead`, every field typed and read on its own (:func:`lenient_value`, in
:mod:`evalkit.store.lenient`: a field that does not read is None or empty, the others still read; what did not read
is listed as :class:`Dropped`, as written). A reader with bounds of its own declares them as a model read by
:meth:`Run.task_as` (the gate's fail-closed loader, which names each refused summary value as written). Report,
gate and watch read the run only that way (tests/unit/test_typed_reads.py keeps ``run.summary`` / ``run.manifest``
dict reads out of them).

Example::

    run = open_run("reports/run1")
    run.typed_summary().tasks["gsm8k"].metrics["exact_match,strict-match"].value
    statuses = [record.status for record in run.records()]
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from evalkit.contracts import (
    SCHEMA_VERSION,
    Endpoint,
    EndpointSummary,
    GroupSummary,
    LoadSummary,
    Manifest,
    ManifestTask,
    MergedShard,
    MetricValue,
    ResentSummary,
    RunSummary,
    SampleRecord,
    ShardRecord,
    Speed,
    TaskSummary,
    WarmupSettings,
)
from evalkit.store.files import LOCK, MANIFEST, SAMPLES, SUMMARY
from evalkit.store.lenient import (
    Dropped,
    M,
    as_dict,
    as_int,
    as_list,
    as_num,
    as_str,
    lenient,
    lenient_value,
    read_fields,
)

# the lenient reads are part of the reader's face (report, gate and users' scripts import them from here)
__all__ = [
    "Dropped",
    "ManifestRead",
    "ManifestTaskRead",
    "Run",
    "TaskRead",
    "as_dict",
    "as_int",
    "as_list",
    "as_num",
    "as_str",
    "lenient",
    "lenient_value",
    "open_run",
    "writer_pid",
]


@dataclass(frozen=True)
class TaskRead:
    """One task's entry in ``summary.json`` as report, gate and watch read it: each field of
    :class:`~evalkit.contracts.TaskSummary` read on its own (:func:`lenient_value`), so that an old, cut or
    hand-edited summary still shows what does read; a field that does not is None (or empty). ``listed``: the
    summary's ``tasks`` names the task; ``present``: with a mapping that is not empty. tests/unit/test_typed_reads.py
    checks that the other fields are TaskSummary's."""

    name: str
    listed: bool = False
    present: bool = False
    version: str | None = None
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    speed: Speed | None = None
    concurrency_trace: list[tuple[float, int]] = field(default_factory=list)
    concurrency_levels: list[dict[str, Any]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] | None = None
    gpu: dict[str, Any] | None = None
    endpoints: list[EndpointSummary] = field(default_factory=list)
    resent: ResentSummary | None = None
    load: LoadSummary | None = None
    started_at_unix: float | None = None

    @classmethod
    def of(cls, name: str, raw: Any, listed: bool = True, dropped: list[Dropped] | None = None) -> TaskRead:
        """``raw`` (the summary's entry for ``name``) read; each value that does not read is added to ``dropped``
        (its path from ``tasks.<name>``) when it is given."""
        if not isinstance(raw, dict):
            if dropped is not None and raw is not None:
                dropped.append(Dropped(f"tasks.{name}", raw, "TaskSummary"))
            return cls(name, listed)
        values = read_fields(TaskSummary.model_fields, raw, f"tasks.{name}", [] if dropped is None else dropped)
        return cls(name, listed, bool(raw), **values)


@dataclass(frozen=True)
class ManifestTaskRead:
    """One task's entry in ``manifest.json`` as report, gate and watch read it: each field of
    :class:`~evalkit.contracts.ManifestTask` read on its own (:func:`lenient_value`); a field that does not read
    is None (or empty). ``listed``: the manifest's ``tasks`` names the task; ``present``: with a mapping that is
    not empty; a ``version`` written as a number reads as its text. tests/unit/test_typed_reads.py checks that the
    other fields are ManifestTask's."""

    name: str
    listed: bool = False
    present: bool = False
    version: str | None = None
    description: str | None = None
    data_sha256: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    requests: int | None = None
    prompts_streamed: bool | None = None
    max_tokens_clamp: dict[str, Any] | None = None
    metrics: list[str] | None = None

    @classmethod
    def of(cls, name: str, raw: Any, listed: bool = True, dropped: list[Dropped] | None = None) -> ManifestTaskRead:
        if not isinstance(raw, dict):
            if dropped is not None and raw is not None:
                dropped.append(Dropped(f"tasks.{name}", raw, "ManifestTask"))
            return cls(name, listed)
        values = read_fields(ManifestTask.model_fields, raw, f"tasks.{name}", [] if dropped is None else dropped)
        version = raw.get("version")
        if as_num(version) is not None:  # a version written as a number (lm-eval's task YAML): its text
            values["version"] = str(version)
            if dropped:
                dropped[:] = [d for d in dropped if d.where != f"tasks.{name}.version"]
        return cls(name, listed, bool(raw), **values)


@dataclass(frozen=True)
class ManifestRead:
    """``manifest.json`` as report, gate and watch read it: each field of :class:`~evalkit.contracts.Manifest`
    read on its own (:func:`lenient_value`), ``tasks`` as :class:`ManifestTaskRead`; a field that does not read
    is None (or empty). ``keys``: the keys the file has (read or not); ``dropped``: each value that did not read
    (its path, the value, the type it is not), for a reader that must say so. tests/unit/test_typed_reads.py checks
    that the fields are Manifest's."""

    schema_version: int | None = None
    evalkit_version: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    command: list[str] = field(default_factory=list)
    endpoint: Endpoint | None = None
    endpoints: list[str] | None = None
    model: str | None = None
    concurrency: int | Literal["auto"] | None = None
    concurrency_cap: dict[str, int] | None = None
    request_rate: float | None = None
    arrivals: dict[str, Any] | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    tasks: dict[str, ManifestTaskRead] = field(default_factory=dict)
    server: dict[str, Any] | None = None
    resumed_at: list[str] | None = None
    warmup: WarmupSettings | None = None
    goodput_slos: dict[str, float] | None = None
    pricing: dict[str, Any] | None = None
    shard: ShardRecord | None = None
    shards: list[MergedShard] | None = None
    keys: frozenset[str] = frozenset()
    dropped: tuple[Dropped, ...] = ()

    @classmethod
    def of(cls, raw: Any) -> ManifestRead:
        if not isinstance(raw, dict):
            return cls()
        dropped: list[Dropped] = []
        fields = {k: v for k, v in Manifest.model_fields.items() if k != "tasks"}
        values = read_fields(fields, raw, "", dropped)
        tasks_raw = raw.get("tasks")
        if tasks_raw is not None and not isinstance(tasks_raw, dict):
            dropped.append(Dropped("tasks", tasks_raw, "dict[str, ManifestTask]"))
        tasks = {str(k): ManifestTaskRead.of(str(k), v, dropped=dropped) for k, v in as_dict(tasks_raw).items()}
        return cls(**values, tasks=tasks, keys=frozenset(raw), dropped=tuple(dropped))

    def task(self, name: str) -> ManifestTaskRead:
        """The manifest's entry for task ``name`` (not ``listed`` when it has none)."""
        return self.tasks.get(name) or ManifestTaskRead(name, listed=False)


@dataclass
class Run:
    """A run directory as read: ``manifest`` and ``summary`` as JSON objects ({} when unreadable), ``samples``
    the latest record per request (sorted by task, doc_id, sample_index)."""

    path: Path
    label: str  # the directory's name
    manifest: dict[str, Any]
    summary: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # problems found while reading
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)  # file -> ("missing"|"json"|"object", why)

    def typed_manifest(self) -> Manifest:
        """The manifest validated (pydantic ValidationError when it is not shaped as evalkit writes it)."""
        return Manifest.model_validate(self.manifest)

    def manifest_read(self) -> ManifestRead:
        """``manifest.json`` read leniently into typed fields (:class:`ManifestRead`)."""
        return ManifestRead.of(self.manifest)

    def typed_summary(self) -> RunSummary:
        """The summary validated (pydantic ValidationError when it is not shaped as evalkit writes it)."""
        return RunSummary.model_validate(self.summary)

    def task(self, name: str, dropped: list[Dropped] | None = None) -> TaskRead:
        """``summary.json``'s entry for task ``name``, read leniently into typed fields (:class:`TaskRead`); what
        did not read is added to ``dropped`` when it is given."""
        tasks = as_dict(self.summary.get("tasks"))
        return TaskRead.of(name, tasks.get(name), name in tasks, dropped)

    def tasks(self) -> list[TaskRead]:
        """Every task entry of ``summary.json``, in its order (:meth:`task`)."""
        return [TaskRead.of(str(k), v) for k, v in as_dict(self.summary.get("tasks")).items()]

    def groups(self, dropped: list[Dropped] | None = None) -> dict[str, GroupSummary]:
        """``summary.json``'s lm-eval groups (``groups``: each group's aggregate metrics, members and sizes, or why
        it has none), each read leniently (:func:`lenient`); {} without any. An entry that does not read is left
        out and added to ``dropped`` when it is given."""
        out: dict[str, GroupSummary] = {}
        for name, raw in as_dict(self.summary.get("groups")).items():
            group = lenient(GroupSummary, raw, f"groups.{name}", dropped)
            if group is not None:
                out[str(name)] = group
            elif dropped is not None:
                dropped.append(Dropped(f"groups.{name}", raw, "GroupSummary"))
        return out

    def summary_task_names(self, dropped: list[Dropped] | None = None) -> list[str]:
        """The names ``summary.json``'s ``tasks`` lists, in its order, whatever each entry holds; a ``tasks`` that
        is not a mapping lists none and is added to ``dropped`` when it is given."""
        tasks = self.summary.get("tasks")
        if tasks is not None and not isinstance(tasks, dict) and dropped is not None:
            dropped.append(Dropped("tasks", tasks, "dict[str, TaskSummary]"))
        return [str(k) for k in as_dict(tasks)]

    def task_as(self, name: str, model: type[M], dropped: list[Dropped] | None = None) -> M | None:
        """``summary.json``'s entry for task ``name`` read as ``model`` (:func:`lenient`): the fields a reader
        declares, with bounds of its own (a partial speed reads too), each read on its own; None when the entry is
        absent or not a mapping. Each value that does not read is added to ``dropped`` as written (paths from
        ``tasks.<name>``)."""
        return lenient(model, as_dict(self.summary.get("tasks")).get(name), f"tasks.{name}", dropped)

    def records(self) -> Iterator[SampleRecord]:
        """The samples as validated records (pydantic ValidationError on one that is not)."""
        return (SampleRecord.model_validate(s) for s in self.samples)

    @property
    def summary_tasks(self) -> dict[str, dict[str, Any]]:
        return {str(k): as_dict(v) for k, v in as_dict(self.summary.get("tasks")).items()}

    @property
    def manifest_tasks(self) -> dict[str, dict[str, Any]]:
        return {str(k): as_dict(v) for k, v in as_dict(self.manifest.get("tasks")).items()}

    def task_names(self) -> list[str]:
        """Tasks in summary order, then any only in the manifest, then any only in the samples."""
        names: list[str] = []
        for name in [*self.summary_tasks, *self.manifest_tasks, *(str(s.get("task")) for s in self.samples)]:
            if name not in names:
                names.append(name)
        return names


def _read_json(path: Path, run: Run) -> dict[str, Any]:
    if not path.is_file():
        run.notes.append(f"{path.name} is missing")
        run.problems[path.name] = ("missing", "")
        return {}
    try:
        data = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError) as e:
        run.notes.append(f"{path.name} could not be read: {e}")
        run.problems[path.name] = ("json", str(e))
        return {}
    if not isinstance(data, dict):
        run.notes.append(f"{path.name} is not a JSON object")
        run.problems[path.name] = ("object", "")
        return {}
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        run.notes.append(
            f"{path.name} has schema_version {version}, newer than this evalkit reads ({SCHEMA_VERSION}): what "
            "changed since may read wrongly or not at all; upgrade evalkit"
        )
    return data


def _read_samples(path: Path, run: Run, drop: tuple[str, ...]) -> list[dict[str, Any]]:
    """Samples keyed by (task, doc_id, sample_index); a later line for a key replaces an earlier one."""
    notes = run.notes
    if not path.is_file():
        notes.append(f"{path.name} is missing")
        run.problems[path.name] = ("missing", "")
        return []
    by_key: dict[tuple[str, str, str], dict[str, Any]] = {}
    bad = 0
    replaced = 0
    with path.open("rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                bad += 1
                continue
            if not isinstance(rec, dict):
                bad += 1
                continue
            for k in drop:
                rec.pop(k, None)
            rec["task"] = as_str(rec.get("task")) or "?"
            key = (rec["task"], str(rec.get("doc_id")), str(rec.get("sample_index", 0)))
            if key in by_key:
                replaced += 1
            by_key[key] = rec
    if bad:
        notes.append(f"{path.name}: {bad} line(s) could not be parsed and were skipped")
    if replaced:
        notes.append(f"{path.name}: {replaced} repeated request(s); the last record of each is shown")
    return sorted(by_key.values(), key=_sample_sort_key)


def _sample_sort_key(s: dict[str, Any]) -> tuple[str, int, str, int]:
    doc = as_int(s.get("doc_id"))
    idx = as_int(s.get("sample_index"))
    return (str(s.get("task")), doc if doc is not None else 1 << 62, str(s.get("doc_id")), idx or 0)


def open_run(
    run_dir: str | Path, *, with_samples: bool = True, label: str | None = None, drop: tuple[str, ...] = ("itl_ms",)
) -> Run:
    """Read the run in ``run_dir`` (FileNotFoundError when it is not a directory). ``drop``: per-sample fields
    left out (inter-token latencies are summarised in summary.json and are most of a big store)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"not a run directory: {run_dir}")
    run = Run(path=run_dir, label=label or run_dir.resolve().name, manifest={}, summary={})
    run.manifest = _read_json(run_dir / MANIFEST, run)
    run.summary = _read_json(run_dir / SUMMARY, run)
    run.samples = _read_samples(run_dir / SAMPLES, run, drop) if with_samples else []
    return run


def writer_pid(run_dir: str | Path) -> str | None:
    """The pid of the evalkit run that holds ``run_dir``'s lock (it is still being written; "unknown" when the
    lock file names none), else None. Takes and drops a shared lock for an instant; changes nothing."""
    try:
        fd = os.open(Path(run_dir) / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                return None
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return text if text.isdigit() else "unknown"
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
