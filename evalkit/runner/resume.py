"""Resuming a run dir: the fingerprint its manifest must have for the run to go on there, the manifest's dates
when it does, and what the store already holds (each task's answered request keys; the rest is sent again).

The fingerprint leaves the endpoint out (a run may be resumed against other shards), so a run dir may hold
answers another server gave. Those stay that server's: a sample that names no endpoint was answered by its
manifest's endpoint, so before the manifest names another, the old one is written into each such sample
(:meth:`~evalkit.store.writer.RunStore.stamp_endpoint`), and the run says on stderr how many answers it kept
from which endpoint. The gate refuses a candidate whose answers came from the baseline's endpoint."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from evalkit.config import RunConfig
from evalkit.config.endpoint import display_url
from evalkit.contracts import Manifest, WarmupSummary, manifest_json
from evalkit.errors import ConfigError
from evalkit.runner.plan import TaskRun, settings_record, task_settings
from evalkit.store.manifest import fingerprint, fingerprint_differences
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


def manifest_endpoints(manifest: dict[str, Any]) -> list[str]:
    """The endpoints (URLs without credentials) a manifest as written says its run sent requests to."""
    many = manifest.get("endpoints")
    if isinstance(many, list) and all(isinstance(u, str) for u in many) and many:
        return list(many)
    one = manifest.get("endpoint")
    url = one.get("base_url") if isinstance(one, dict) else None
    return [url] if isinstance(url, str) else []


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
    ``created_at``, gains a ``resumed_at``, and its earlier warm-ups come back for the run to keep; when it sent to
    one endpoint and this run sends to others, the samples that name no endpoint get that one (the module
    docstring)."""
    if fresh:
        store.discard()
        return EarlierWarmup()
    old = store.read_manifest()
    if old is None:
        return EarlierWarmup()
    if fingerprint(old) != fingerprint(manifest_json(manifest)):
        changed = fingerprint_differences(fingerprint(old), fingerprint(manifest_json(manifest)), "run dir", "now")
        raise ConfigError(
            f"{store.dir} holds a run with a different config ({changed}); "
            "resume it with the same command, pass --fresh to start over, or choose another --output-dir"
        )
    manifest.created_at = old.get("created_at", manifest.created_at)
    manifest.resumed_at = [*old.get("resumed_at", []), datetime.now(timezone.utc).isoformat()]
    earlier, now = manifest_endpoints(old), manifest_endpoints(manifest_json(manifest))
    if len(earlier) == 1 and set(earlier) != set(now):  # a sharded run's samples already name theirs
        store.stamp_endpoint(earlier[0])
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


def mark_answered(store: RunStore, plans: list[TaskRun], urls: list[str]) -> None:
    """Each plan's ``done_keys``: the requests the opened ``store`` already holds an answer to (the request phase
    skips them); a note on stderr when unreadable lines were set aside (their requests are sent again), and one
    per endpoint other than this run's ``urls`` whose answers the store holds (they are kept, not sent again)."""
    shown = {display_url(u) for u in urls}
    for url, n in sorted((u, n) for u, n in store.answered_by.items() if u is not None and u not in shown):
        print(
            f"evalkit: resuming {store.dir}: {n} answer(s) there were given by {url}, not by this run's "
            f"endpoint{'s' if len(shown) > 1 else ''} {', '.join(sorted(shown))}; they are kept as {url}'s "
            "answers and not sent again (pass --fresh to send every request to this run's endpoints)",
            file=sys.stderr,
            flush=True,
        )
    if store.quarantined:
        print(
            f"evalkit: {store.quarantined} unreadable line(s) of {store.samples_path} moved to "
            f"{store.corrupt_path}; a request whose answer they held is sent again",
            file=sys.stderr,
            flush=True,
        )
    for p in plans:
        p.done_keys = store.completed.get(p.task.name, set())
