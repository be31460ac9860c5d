"""Reading the history: runs filtered (:func:`list_runs`), one run in full (:func:`find_run`), the latest gate
verdict of each run (:func:`verdicts`), a task's metric over runs (:func:`trend_points`), the long table that
``history export`` writes (:func:`export_rows`) and the run dirs a ``history:`` baseline names
(:func:`resolve_baseline`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from sqlalchemy import Select, exists, or_, select
from sqlalchemy.orm import Session, selectinload

from evalkit.history.db import HistoryError
from evalkit.history.models import GateRow, GateRunRow, RunRow, SpeedRow, TaskRow
from evalkit.history.record import now, utc

VERDICTS = ("pass", "fail", "cannot_decide")
_AGO = re.compile(r"^(\d+)([hdw])$")
PREFIX = "history:"
SELECTORS = ("latest-pass", "latest")
BASELINE_KEYS = ("config", "model", "task")


def parse_since(text: str) -> datetime:
    """``--since``: an ISO date or time (UTC when it names no zone), or an age such as 24h, 7d, 2w."""
    m = _AGO.match(text.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        return now() - timedelta(hours=n * {"h": 1, "d": 24, "w": 168}[unit])
    when = utc(text.strip())
    if when is None:
        raise HistoryError(f"--since {text!r} is neither a date (2026-12-01) nor an age (24h, 7d, 2w); pass one")
    return when


MAX_FILTER_CHARS = 256  # a longer --task/--model/--config or history: filter value names nothing evalkit recorded
_HASH_PREFIX = re.compile(r"[0-9a-f]{1,64}")


def _checked_filter(label: str, value: str) -> str:
    """``value`` when it is at most MAX_FILTER_CHARS long; HistoryError naming ``label`` (not the value) else."""
    if len(value) > MAX_FILTER_CHARS:
        raise HistoryError(
            f"{label} is {len(value):,} characters, over {MAX_FILTER_CHARS}; "
            "pass a name as `evalkit history list` shows it"
        )
    return value


def _config_matches(config: str) -> Any:
    """The runs of config ``config``: by its name exactly, or by a prefix of its hash when ``config`` is hex digits
    (a ``%`` or ``_`` in it is a character, never a wildcard)."""
    if _HASH_PREFIX.fullmatch(config):
        return or_(RunRow.config == config, RunRow.config_hash.startswith(config, autoescape=True))
    return RunRow.config == config


def run_query(
    *,
    task: str | None = None,
    model: str | None = None,
    config: str | None = None,
    since: datetime | None = None,
    verdict: str | None = None,
) -> Select[Any]:
    """Runs newest first, filtered: a task they ran, their model, their config (its name or a prefix of its
    hash), created at or after ``since``, judged as a gate's candidate with ``verdict``. HistoryError when a
    name is over MAX_FILTER_CHARS."""
    for key, value in (("task", task), ("model", model), ("config", config)):
        if value is not None:
            _checked_filter(f"--{key}", value)
    q = select(RunRow).options(selectinload(RunRow.tasks).selectinload(TaskRow.metrics))
    if task is not None:
        q = q.where(exists().where(TaskRow.run_id == RunRow.id, TaskRow.task == task))
    if model is not None:
        q = q.where(RunRow.model == model)
    if config is not None:
        q = q.where(_config_matches(config))
    if since is not None:
        q = q.where(RunRow.created_at >= since)
    if verdict is not None:
        if verdict not in VERDICTS:
            raise HistoryError(f"--verdict {verdict!r} is not one of {', '.join(VERDICTS)}; pass one of them")
        q = q.where(
            exists()
            .where(GateRunRow.run_id == RunRow.id, GateRunRow.role == "candidate")
            .where(GateRow.id == GateRunRow.gate_id, GateRow.verdict == verdict)
        )
    return q.order_by(RunRow.created_at.desc(), RunRow.id.desc())


def list_runs(session: Session, limit: int | None = None, **filters: Any) -> list[RunRow]:
    return list(session.scalars(run_query(**filters).limit(limit)))


def verdicts(session: Session, run_ids: list[int]) -> dict[int, str]:
    """Each run's latest gate verdict as a candidate (runs never gated are absent)."""
    rows = session.execute(
        select(GateRunRow.run_id, GateRow.verdict)
        .join(GateRow, GateRow.id == GateRunRow.gate_id)
        .where(GateRunRow.run_id.in_(run_ids), GateRunRow.role == "candidate")
        .order_by(GateRow.decided_at, GateRow.id)
    )
    return {run_id: verdict for run_id, verdict in rows}


def _run_id(ref: str) -> bool:
    """``ref`` reads as a run's id: ASCII digits of a 64-bit integer."""
    return ref.isascii() and ref.isdigit() and int(ref) < 2**63


def find_run(session: Session, ref: str) -> RunRow:
    """The run named by ``ref``: its id, or its run dir's path; HistoryError when there is none."""
    q = select(RunRow).options(selectinload(RunRow.tasks).selectinload(TaskRow.metrics))
    row = None
    if _run_id(ref):
        row = session.scalar(q.where(RunRow.id == int(ref)))
    if row is None:
        row = session.scalar(q.where(RunRow.run_dir == str(Path(ref).resolve())))
    if row is None:
        raise HistoryError(f"no run {ref!r} in the history; pass an id from `evalkit history list` or a run dir added")
    return row


def gates_of(session: Session, run_id: int) -> list[tuple[GateRow, str]]:
    """The gates that judged the run, oldest first, with its role in each."""
    q = (
        select(GateRow, GateRunRow.role)
        .join(GateRunRow, GateRunRow.gate_id == GateRow.id)
        .where(GateRunRow.run_id == run_id)
        .options(selectinload(GateRow.rules))
        .order_by(GateRow.decided_at, GateRow.id)
    )
    return [(g, role) for g, role in session.execute(q)]


@dataclass(frozen=True)
class Point:
    """One run's value of a metric (with its CI) and a speed figure, for a trend."""

    run_id: int
    label: str
    when: datetime | None
    config: str | None
    vllm: str | None
    value: float | None
    ci: tuple[float, float] | None
    speed: float | None
    verdict: str | None
    identity: str | None = None  # the config hash: runs of one identity are one line of the trend
    concurrency: str | None = None


def trend_points(
    session: Session, task: str, metric: str | None, speed_key: str, **filters: Any
) -> tuple[str, list[Point]]:
    """The runs of ``task`` oldest first with ``metric`` (default: the first metric the newest run has) and the
    speed figure ``speed_key``; HistoryError when no run has the task or the metric."""
    runs = list(reversed(list_runs(session, task=task, **filters)))
    if not runs:
        raise HistoryError(f"no run of task {task!r} in the history; add runs with `evalkit history add RUN_DIR`")
    by_run = {r.id: next(t for t in r.tasks if t.task == task) for r in runs}
    if metric is None:
        metric = next((m.name for m in by_run[runs[-1].id].metrics), None)
    known = {m.name for t in by_run.values() for m in t.metrics}
    if metric is None or metric not in known:
        raise HistoryError(f"no metric {metric!r} for {task} in the history; pass --metric one of {sorted(known)}")
    speeds = dict(
        session.execute(
            select(SpeedRow.run_task_id, SpeedRow.value).where(
                SpeedRow.run_task_id.in_([t.id for t in by_run.values()]), SpeedRow.key == speed_key
            )
        ).all()
    )
    judged = verdicts(session, list(by_run))
    points = []
    for r in runs:
        t = by_run[r.id]
        m = next((m for m in t.metrics if m.name == metric), None)
        ci = (m.ci_low, m.ci_high) if m is not None and m.ci_low is not None and m.ci_high is not None else None
        points.append(
            Point(
                r.id,
                r.label,
                r.created_at,
                r.config,
                r.vllm_version,
                m.value if m else None,
                ci,
                speeds.get(t.id),
                judged.get(r.id),
                r.config_hash,
                r.concurrency,
            )
        )
    return metric, points


EXPORT_COLUMNS = (
    "run_id", "created_at", "run_dir", "model", "config", "config_hash", "vllm_version", "task", "task_version",
    "temperature", "top_p", "max_tokens", "kind", "name", "value", "ci_low", "ci_high", "n", "verdict",
)  # fmt: skip


def export_rows(session: Session, **filters: Any) -> list[dict[str, Any]]:
    """One row per run, task and figure (kind ``metric`` with its CI and n, or ``speed``), oldest run first."""
    runs = list(reversed(list_runs(session, **filters)))
    judged = verdicts(session, [r.id for r in runs])
    task_ids = [t.id for r in runs for t in r.tasks]
    speed: dict[int, list[SpeedRow]] = {}
    for s in session.scalars(select(SpeedRow).where(SpeedRow.run_task_id.in_(task_ids)).order_by(SpeedRow.id)):
        speed.setdefault(s.run_task_id, []).append(s)
    out = []
    for r in runs:
        for t in r.tasks:
            head = dict(
                run_id=r.id, created_at=r.created_at.isoformat() if r.created_at else None, run_dir=r.run_dir,
                model=r.model, config=r.config, config_hash=r.config_hash, vllm_version=r.vllm_version,
                task=t.task, task_version=t.version, temperature=t.temperature, top_p=t.top_p,
                max_tokens=t.max_tokens, verdict=judged.get(r.id),
            )  # fmt: skip
            for m in t.metrics:
                out.append({**head, "kind": "metric", "name": m.name, "value": m.value, "ci_low": m.ci_low,
                            "ci_high": m.ci_high, "n": m.n})  # fmt: skip
            for s in speed.get(t.id, []):
                out.append({**head, "kind": "speed", "name": s.key, "value": s.value, "ci_low": None,
                            "ci_high": None, "n": None})  # fmt: skip
    return [{c: row.get(c) for c in EXPORT_COLUMNS} for row in out]


def is_history_ref(value: str | Path) -> bool:
    return str(value).startswith(PREFIX)


def resolve_baseline(session: Session, ref: str) -> list[Path]:
    """The run dirs a ``history:`` baseline names: ``history:latest-pass?config=NAME`` (the candidate runs of
    the newest gate that passed, of that config), ``history:latest?config=NAME`` (the newest run), or
    ``history:ID`` (that run); ``model=`` and ``task=`` narrow the runs as ``config=`` does. HistoryError (one
    line) when nothing matches or a run dir is gone."""
    body = ref[len(PREFIX) :]
    selector, _, query = body.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(params) - set(BASELINE_KEYS))
    shown = ref if len(ref) <= MAX_FILTER_CHARS else ref[:MAX_FILTER_CHARS] + "…"
    if unknown or not (selector in SELECTORS or _run_id(selector)):
        raise HistoryError(
            f"--baseline {shown}: write history:latest-pass?config=NAME, history:latest?config=NAME or history:ID "
            f"(filters: {', '.join(BASELINE_KEYS)})"
        )
    filters: dict[str, Any] = {
        k: _checked_filter(f"--baseline {PREFIX}{selector}?{k}=…: the {k}", params[k])
        for k in BASELINE_KEYS
        if params.get(k)
    }
    if _run_id(selector):
        dirs = [find_run(session, selector).run_dir]
    elif selector == "latest":
        runs = list_runs(session, limit=1, **filters)
        dirs = [runs[0].run_dir] if runs else []
    else:
        dirs = _latest_pass(session, filters)
    if not dirs:
        what = "no gate passed a candidate run" if selector == "latest-pass" else "no run"
        raise HistoryError(
            f"--baseline {shown}: {what} of {' '.join(f'{k}={v}' for k, v in filters.items()) or 'any config'} in the "
            "history; check `evalkit history list` and its filters"
        )
    gone = [d for d in dirs if not Path(d).is_dir()]
    if gone:
        raise HistoryError(f"--baseline {shown}: its run dir {gone[0]} is gone; restore it or pass a run dir instead")
    return [Path(d) for d in dirs]


def _latest_pass(session: Session, filters: dict[str, Any]) -> list[str]:
    matching = run_query(**filters).with_only_columns(RunRow.id).order_by(None)
    gate = session.scalar(
        select(GateRow)
        .join(GateRunRow, GateRunRow.gate_id == GateRow.id)
        .where(GateRow.verdict == "pass", GateRunRow.role == "candidate", GateRunRow.run_id.in_(matching))
        .order_by(GateRow.decided_at.desc(), GateRow.id.desc())
        .limit(1)
    )
    if gate is None:
        return []
    ids = [g.run_id for g in gate.runs if g.role == "candidate"]
    rows = session.scalars(select(RunRow).where(RunRow.id.in_(ids), RunRow.id.in_(matching)).order_by(RunRow.id))
    return [r.run_dir for r in rows]
