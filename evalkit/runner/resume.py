"""Resuming a run dir: the fingerprint its manifest must have for the run to go on there, the manifest's dates
when it does, and what the store already holds (each task's answered request keys; the rest is sent again)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from evalkit.config import RunConfig
from evalkit.contracts import Manifest, WarmupSummary, manifest_json
from evalkit.errors import ConfigError
from evalkit.runner.plan import TaskRun, settings_record, task_settings
from evalkit.store.manifest import fingerprint
from evalkit.store.writer import RunStore
from evalkit.tasks.base import Task


def planned_fingerprint(cfg: RunConfig, tasks: list[Task], model: str | None) -> dict[str, Any]:
    """The :func:`~evalkit.store.manifest.fingerprint` a run of ``cfg`` (its ``tasks`` loaded from the registry)
    against ``model`` records, known before it starts: a run dir whose manifest has another holds a run with other
    settings, which the Runner refuses to resume (and a sweep does not reuse)."""
    settings = {task.name: task_settings(task, cfg) for task in tasks}
    first = settings[tasks[0].name]
    return fingerprint(
        {
            "model": model,
            "endpoint": {"kind": first.endpoint_kind or tasks[0].endpoint_kind},
            "tasks": {
                t.name: {
                    "version": t.version,
                    "data_sha256": t.data_sha256,
                    "settings": settings_record(settings[t.name]),
                }
                for t in tasks
            },
        }
    )


@dataclass(frozen=True)
class EarlierWarmup:
    """What the warm-ups of the runs that wrote a resumed run dir recorded (its samples' speed came after them):
    ``summary.json``'s ``warmup``, its ``timings_s["<task>.warmup"]`` and the manifest's ``warmup.configs``."""

    summary: WarmupSummary | None = None
    timings: dict[str, float] = field(default_factory=dict)  # "<task>.warmup" -> seconds
    configs: list[dict[str, Any]] = field(default_factory=list)


def check_resume(store: RunStore, manifest: Manifest, fresh: bool) -> EarlierWarmup:
    """Before ``manifest`` is written to ``store``: with ``fresh``, whatever the dir holds (readable or not) is
    discarded; a run dir holding a run of another fingerprint is refused; one holding this run's keeps its
    ``created_at``, gains a ``resumed_at``, and its earlier warm-ups come back for the run to keep."""
    if fresh:
        store.discard()
        return EarlierWarmup()
    old = store.read_manifest()
    if old is None:
        return EarlierWarmup()
    if fingerprint(old) != fingerprint(manifest_json(manifest)):
        raise ConfigError(
            f"{store.dir} holds a run with a different config (model, task version, data or settings); "
            "resume it with the same command, pass --fresh to start over, or choose another --output-dir"
        )
    manifest.created_at = old.get("created_at", manifest.created_at)
    manifest.resumed_at = [*old.get("resumed_at", []), datetime.now(timezone.utc).isoformat()]
    return earlier_warmup(old, store.read_summary() or {})


def earlier_warmup(manifest: dict[str, Any], summary: dict[str, Any]) -> EarlierWarmup:
    """The warm-up record of a run dir's ``manifest`` and ``summary`` as written (a part that does not read as
    evalkit writes it is left out)."""
    try:
        warm = WarmupSummary.model_validate(summary["warmup"]) if summary.get("warmup") is not None else None
    except ValidationError:
        warm = None
    timings = summary.get("timings_s")
    settings = manifest.get("warmup")
    configs = settings.get("configs") if isinstance(settings, dict) else None
    return EarlierWarmup(
        summary=warm,
        timings={
            k: float(v)
            for k, v in (timings.items() if isinstance(timings, dict) else ())
            if isinstance(k, str) and k.endswith(".warmup") and isinstance(v, int | float) and not isinstance(v, bool)
        },
        configs=[c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else [],
    )


def mark_answered(store: RunStore, plans: list[TaskRun]) -> None:
    """Each plan's ``done_keys``: the requests the opened ``store`` already holds an answer to (the request phase
    skips them); a note on stderr when unreadable lines were set aside (their requests are sent again)."""
    if store.quarantined:
        print(
            f"evalkit: {store.quarantined} unreadable line(s) of {store.samples_path} moved to "
            f"{store.corrupt_path}; a request whose answer they held is sent again",
            file=sys.stderr,
            flush=True,
        )
    for p in plans:
        p.done_keys = store.completed.get(p.task.name, set())
