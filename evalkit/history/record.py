"""Writing the history: a run dir read through the store's typed reader (:func:`evalkit.store.open_run`) becomes
one :class:`~evalkit.history.models.RunRow` with its tasks, metrics and speed figures; a gate's
:class:`~evalkit.gating.result.GateResult` one :class:`~evalkit.history.models.GateRow` with its rules; a watch
tick one :class:`~evalkit.history.models.TickRow`. A run dir recorded again (a resumed run) replaces its rows."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from evalkit.contracts import SPEED_METRICS
from evalkit.history.models import GateRow, GateRunRow, MetricRow, RuleRow, RunRow, SpeedRow, TaskRow, TickRow
from evalkit.store.reader import ManifestRead, open_run

if TYPE_CHECKING:  # the gate's package is not loaded to record a run
    from evalkit.gating.result import GateResult

# server flags that say where it listens, not how it serves: left out of the config hash
_PLACE_FLAGS = ("--host", "--port", "--model")
SAMPLING = ("temperature", "top_p", "seed", "max_tokens", "num_samples")


def utc(text: str | None) -> datetime | None:
    """An ISO 8601 time as a naive UTC datetime (the history's times); None when it does not parse."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _flags(argv: list[str]) -> list[list[str]]:
    """The server's flags as [flag, value...] groups, sorted, without the launcher and the listen address."""
    groups: list[list[str]] = []
    for token in argv:
        if token.startswith("--"):
            groups.append(token.split("=", 1))
        elif groups:
            groups[-1].append(token)
    return sorted(g for g in groups if g[0] not in _PLACE_FLAGS)


# what a server says of itself that changes speed (manifest.json's ``server`` block): part of the identity
SERVER_IDENTITY = ("version", "vllm_version", "kv_cache_tokens", "max_model_len")
NOT_IDENTITY = ("seed",)  # task settings that tell repeats apart, not configs
KINDS = {"sweep": "sweep point", "watch": "watch tick"}  # by the command that wrote the run; else "run"


def identity(manifest: ManifestRead) -> dict[str, Any]:
    """What makes a config, for the history's hash: the model, the server's flags (launcher, host and port left
    out) and the environment evalkit set for it, what the server says of itself (vLLM version, KV cache tokens,
    max_model_len), the endpoints a run against external ones sent to, the concurrency or request rate, and each
    task's settings (sampling, max tokens, limit, few-shot; the seed left out: repeats share a config)."""
    server = manifest.server or {}
    argv = server.get("argv")
    env = server.get("env_overrides")
    started = isinstance(argv, list)
    endpoints = manifest.endpoints or ([manifest.endpoint.base_url] if manifest.endpoint is not None else [])
    return {
        "model": server.get("model") or manifest.model,
        "flags": _flags([str(a) for a in argv]) if isinstance(argv, list) else None,
        "env": env if isinstance(env, dict) else None,
        "server": {k: server.get(k) for k in SERVER_IDENTITY if server.get(k) is not None} or None,
        "endpoints": None if started else sorted(str(e) for e in endpoints) or None,  # a started one: its flags
        "concurrency": manifest.concurrency,
        "request_rate": manifest.request_rate,
        "tasks": {
            name: {k: v for k, v in sorted(t.settings.items()) if k not in NOT_IDENTITY and v is not None}
            for name, t in sorted(manifest.tasks.items())
        },
    }


def config_hash(manifest: ManifestRead) -> str:
    """A short hash of the run's :func:`identity`: runs share it when they ran the same config the same way."""
    return hashlib.sha256(orjson.dumps(identity(manifest), option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def run_kind(manifest: ManifestRead, source: str) -> str:
    """ "run", "sweep point" or "watch tick": by the command the manifest records, else by who recorded it."""
    command = manifest.command[1] if len(manifest.command) > 1 else None
    return KINDS.get(str(command), KINDS.get(source, "run"))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def run_row(run_dir: Path, source: str, config: str | None = None) -> RunRow:
    """The run in ``run_dir`` as rows (not added to a session): identity from its manifest, tasks, metrics and
    speed from its summary, both read through the store's typed reader."""
    run = open_run(run_dir, with_samples=False)
    manifest = run.manifest_read()
    server = manifest.server or {}
    digest = config_hash(manifest)
    row = RunRow(
        run_dir=str(run_dir.resolve()),
        label=run.label,
        created_at=utc(manifest.created_at),
        finished_at=utc(manifest.finished_at),
        recorded_at=now(),
        source=source,
        kind=run_kind(manifest, source),
        model=manifest.model,
        config=config or digest,
        config_hash=digest,
        server_argv=server.get("argv") if isinstance(server.get("argv"), list) else None,
        server_env=server.get("env_overrides") if isinstance(server.get("env_overrides"), dict) else None,
        vllm_version=server.get("vllm_version") or manifest.versions.get("vllm"),
        evalkit_version=manifest.evalkit_version,
        endpoint=manifest.endpoint.base_url if manifest.endpoint is not None else None,
        concurrency=str(manifest.concurrency) if manifest.concurrency is not None else None,
        versions=dict(manifest.versions),
    )
    for task in run.tasks():
        listed = manifest.task(task.name)
        settings = dict(listed.settings)
        t = TaskRow(
            task=task.name,
            version=task.version or listed.version,
            data_sha256=dict(listed.data_sha256) or None,
            settings=settings or None,
            temperature=_num(settings.get("temperature")),
            top_p=_num(settings.get("top_p")),
            seed=_int(settings.get("seed")),
            max_tokens=_int(settings.get("max_tokens")),
            num_samples=_int(settings.get("num_samples")),
            requests=listed.requests,
            counts=dict(task.counts) or None,
        )
        for name, m in task.metrics.items():
            low, high = m.ci95 if m.ci95 is not None else (None, None)
            t.metrics.append(MetricRow(name=name, value=m.value, stderr=m.stderr, ci_low=low, ci_high=high, n=m.n))
        for figure in SPEED_METRICS:
            value = figure.of(task.speed) if task.speed is not None else None
            if value is not None:
                t.speed.append(SpeedRow(key=figure.key, value=float(value)))
        row.tasks.append(t)
    return row


def add_run(session: Session, run_dir: Path, source: str, config: str | None = None) -> RunRow:
    """Record the run in ``run_dir`` (replacing what an earlier record of the same dir held; its config name is
    kept when none is given) and return its row (flushed: ``id`` set)."""
    where = str(run_dir.resolve())
    old = session.scalar(select(RunRow).where(RunRow.run_dir == where))
    row = run_row(run_dir, source, config)
    if old is None:
        session.add(row)
        session.flush()
        return row
    tasks = list(row.tasks)
    row.tasks.clear()  # the new tasks go to the old row (its id, which gates and ticks point at, is kept)
    old.tasks.clear()
    session.flush()
    for column in RunRow.__table__.columns.keys():  # noqa: SIM118 (column names)
        if column in ("id", "source") or (column == "config" and config is None and old.config):
            continue
        setattr(old, column, getattr(row, column))
    old.tasks.extend(tasks)
    session.flush()
    return old


def add_run_retrying(session: Session, run_dir: Path, source: str, config: str | None = None) -> RunRow:
    """:func:`add_run`, once more when another writer recorded the same dir in between (unique ``run_dir``)."""
    try:
        with session.begin_nested():
            return add_run(session, run_dir, source, config)
    except IntegrityError:
        return add_run(session, run_dir, source, config)


def add_gate(
    session: Session, result: GateResult, baselines: Sequence[Path], candidates: Sequence[Path], out_dir: Path | None
) -> GateRow:
    """Record a gate decision: its verdict, reasons, policy and rules, and the runs on each side (each recorded
    as a run too, so that a gate of runs never seen before still points at them)."""
    gate = GateRow(
        decided_at=now(),
        verdict=result.verdict,
        baseline=result.baseline,
        candidate=result.candidate,
        out_dir=str(out_dir.resolve()) if out_dir is not None else None,
        reasons=list(result.reasons) or None,
        policy=orjson.loads(orjson.dumps(result.policy, default=str)) or None,
    )
    for r in result.rules:
        low, high = r.ci if r.ci is not None else (None, None)
        gate.rules.append(
            RuleRow(
                name=r.name,
                task=r.task,
                kind=r.kind,
                verdict=r.verdict,
                observed=r.observed,
                baseline=r.baseline,
                candidate=r.candidate,
                budget=r.budget,
                p_value=r.p_value,
                ci_low=low,
                ci_high=high,
                note=r.note or None,
            )
        )
    for role, dirs in (("baseline", baselines), ("candidate", candidates)):
        for d in dirs:
            existing = session.scalar(select(RunRow).where(RunRow.run_dir == str(d.resolve())))
            run = existing if existing is not None else add_run_retrying(session, d, "gate")
            gate.runs.append(GateRunRow(run_id=run.id, role=role))
    session.add(gate)
    session.flush()
    return gate


def add_tick(session: Session, watch_dir: Path, task: str, tick: dict[str, Any], run_dir: Path | None) -> TickRow:
    """Record one watch tick (``tick``: the watch's history line as a mapping), its run dir as a run when it
    holds one; a tick recorded again (a restarted watch) replaces the earlier row."""
    run = add_run_retrying(session, run_dir, "watch") if run_dir is not None and run_dir.is_dir() else None
    where = str(watch_dir.resolve())
    session.execute(delete(TickRow).where(TickRow.watch_dir == where, TickRow.tick == tick["tick"]))
    row = TickRow(
        watch_dir=where,
        task=task,
        tick=int(tick["tick"]),
        run_id=run.id if run is not None else None,
        started_at=tick.get("started_at") or None,
        finished_at=tick.get("finished_at") or None,
        status=str(tick.get("status")),
        verdict=str(tick.get("verdict")),
        reason=tick.get("reason"),
        p_value=_num(tick.get("p_value")),
        failed_rules=list(tick.get("failed_rules") or []) or None,
        rules=list(tick.get("rules") or []) or None,
        window=orjson.loads(orjson.dumps(tick.get("window") or {}, default=str)) or None,
    )
    session.add(row)
    session.flush()
    return row
