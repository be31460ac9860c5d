"""``evalkit history``: the run history database (add, list, show, export, trend); reference docs/history.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from evalkit.cli.common import aligned, fail, history_app
from evalkit.errors import EvalkitError

Filter = Annotated[str | None, typer.Option(help="Only runs of this task.")]
ModelOpt = Annotated[str | None, typer.Option(help="Only runs of this model.")]
ConfigOpt = Annotated[str | None, typer.Option(help="Only runs of this config (its name, or a prefix of its hash).")]
SinceOpt = Annotated[str | None, typer.Option(help="Only runs created since: a date (2026-12-01) or an age (7d, 24h).")]
VerdictOpt = Annotated[
    str | None, typer.Option(help="Only runs a gate judged, as candidate, pass, fail or cannot_decide.")
]


def _filters(
    task: str | None, model: str | None, config: str | None, since: str | None, verdict: str | None
) -> dict[str, Any]:
    from evalkit.history.query import parse_since

    return dict(task=task, model=model, config=config, since=parse_since(since) if since else None, verdict=verdict)


@history_app.command("add")
def add(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run dirs to record (old runs, or runs from elsewhere).")],
    config: Annotated[
        str | None, typer.Option(help="The config name to record them under (default: its hash).")
    ] = None,
) -> None:
    """Record run dirs in the history (a dir recorded before is updated in place)."""
    from evalkit.history import session
    from evalkit.history.record import add_run_retrying
    from evalkit.store.files import MANIFEST

    try:
        for d in run_dirs:
            if not (d / MANIFEST).is_file():
                raise EvalkitError(f"{d} is not a run dir (no {MANIFEST}); pass the --output-dir of an evalkit run")
        with session() as s:
            rows = [add_run_retrying(s, d, "add", config) for d in run_dirs]
            lines = [f"run {r.id}: {r.run_dir} ({', '.join(t.task for t in r.tasks) or 'no task'}; "
                     f"model {r.model}; config {r.config})" for r in rows]  # fmt: skip
    except EvalkitError as e:
        fail(e)
    for line in lines:
        typer.echo(line)


@history_app.command("list")
def list_(
    task: Filter = None,
    model: ModelOpt = None,
    config: ConfigOpt = None,
    since: SinceOpt = None,
    verdict: VerdictOpt = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs, newest first.")] = 50,
) -> None:
    """One line per run, newest first: id, time, run dir's name, kind (run, sweep point, watch tick), model,
    config, vLLM, tasks, latest gate verdict."""
    from evalkit.history import session
    from evalkit.history.query import list_runs, verdicts

    try:
        with session() as s:
            runs = list_runs(s, limit=limit, **_filters(task, model, config, since, verdict))
            judged = verdicts(s, [r.id for r in runs])
            rows = [
                [str(r.id), r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else "?", Path(r.run_dir).name,
                 r.kind or "run", r.model or "?", r.config or "?", r.vllm_version or "-",
                 ",".join(t.task for t in r.tasks) or "-", judged.get(r.id, "-")]
                for r in runs
            ]  # fmt: skip
    except EvalkitError as e:
        fail(e)
    if not rows:
        typer.echo("no run in the history matches; evalkit history add RUN_DIR records old runs", err=True)
        return
    head = ["id", "created (UTC)", "run dir", "kind", "model", "config", "vllm", "tasks", "verdict"]
    typer.echo("\n".join(aligned(head, rows)))


@history_app.command("show")
def show(run: Annotated[str, typer.Argument(help="A run's id (evalkit history list) or its run dir.")]) -> None:
    """One run in full: identity, each task's metrics with CIs and speed, the gates that judged it."""
    from sqlalchemy import select

    from evalkit.history import session
    from evalkit.history.models import SpeedRow
    from evalkit.history.query import find_run, gates_of

    try:
        with session() as s:
            r = find_run(s, run)
            lines = [
                f"run {r.id}: {r.run_dir} ({r.kind or 'run'})",
                f"  created {r.created_at or '?'} UTC, recorded {r.recorded_at:%Y-%m-%d %H:%M} UTC from {r.source}",
                f"  model {r.model}; config {r.config} (hash {r.config_hash}); vLLM {r.vllm_version or '-'}; "
                f"evalkit {r.evalkit_version or '-'}; concurrency {r.concurrency or '-'}",
            ]
            if r.server_argv:
                lines.append(f"  server: {' '.join(str(a) for a in r.server_argv)}")
            for t in r.tasks:
                sampling = ", ".join(f"{k} {getattr(t, k)}" for k in ("temperature", "top_p", "seed", "max_tokens")
                                     if getattr(t, k) is not None)  # fmt: skip
                sampling = sampling or "no sampling recorded"
                lines.append(f"  {t.task} v{t.version or '?'} ({t.requests or '?'} requests; {sampling})")
                for m in t.metrics:
                    ci = f" [{m.ci_low:.4f}, {m.ci_high:.4f}]" if m.ci_low is not None and m.ci_high is not None else ""
                    value = f"{m.value:.4f}" if m.value is not None else "-"
                    lines.append(f"    {m.name}: {value}{ci} (n {m.n})")
                speed = s.scalars(select(SpeedRow).where(SpeedRow.run_task_id == t.id).order_by(SpeedRow.id))
                figures = [f"{x.key} {figure(x.value)}" for x in speed if x.value is not None]
                if figures:
                    lines.append(f"    speed: {', '.join(figures)}")
            for g, role in gates_of(s, r.id):
                failed = [x.name for x in g.rules if x.verdict == "fail"]
                lines.append(f"  gate {g.id} ({g.decided_at:%Y-%m-%d %H:%M} UTC) as {role}: {g.verdict}"
                             + (f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    except EvalkitError as e:
        fail(e)
    typer.echo("\n".join(lines))


def figure(value: float) -> str:
    """A speed figure as ``history show`` prints it: four significant digits, whole numbers from 1000 up (no
    exponent: 31380, not 3.138e+04)."""
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"


@history_app.command("export")
def export(
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write.")],
    format: Annotated[str | None, typer.Option(help="csv or parquet (default: from the file's extension).")] = None,
    task: Filter = None,
    model: ModelOpt = None,
    config: ConfigOpt = None,
    since: SinceOpt = None,
    verdict: VerdictOpt = None,
) -> None:
    """Every figure of the runs as one long table (run, task, metric or speed figure, value, CI)."""
    from evalkit.history import session
    from evalkit.history.export import write_table
    from evalkit.history.query import export_rows

    try:
        with session() as s:
            rows = export_rows(s, **_filters(task, model, config, since, verdict))
        path = write_table(rows, output, format)
    except EvalkitError as e:
        fail(e)
    typer.echo(f"{path} ({len(rows)} rows)")


@history_app.command("trend")
def trend(
    task: Annotated[str, typer.Option(help="The task whose metric to follow.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file (or a folder: trend.html in it).")],
    metric: Annotated[str | None, typer.Option(help="The metric (default: the newest run's first).")] = None,
    speed: Annotated[
        str | None, typer.Option(help="The speed figure beside it (default output_tokens_per_s; e.g. ttft_p99_ms).")
    ] = None,
    model: ModelOpt = None,
    config: ConfigOpt = None,
    since: SinceOpt = None,
) -> None:
    """One offline HTML page: the task's metric with its 95% CI band and a speed figure over the runs, the gate's
    verdicts marked."""
    from evalkit.history import session
    from evalkit.history.db import shown_url
    from evalkit.history.location import history_url
    from evalkit.history.query import trend_points
    from evalkit.history.trend import render_trend, speed_key, write_trend

    try:
        key = speed_key(speed)
        filters = _filters(None, model, config, since, None)
        filters.pop("task")
        with session() as s:
            name, points = trend_points(s, task, metric, key, **filters)
        path = write_trend(render_trend(task, name, key, points, shown_url(history_url() or "")), output)
    except EvalkitError as e:
        fail(e)
    typer.echo(f"{path} ({len(points)} runs of {task}, {name})")


@history_app.command("references")
def references_() -> None:
    """The reference scores evalkit ships (for evalkit gate --expected-from MODEL), with their sources."""
    from evalkit.history.reference import references

    try:
        table = references()
    except EvalkitError as e:
        fail(e)
    for r in table:
        sampling = ", ".join(f"{k} {v}" for k, v in r.sampling.items())
        typer.echo(f"{r.model}  {r.task}  {r.metric} >= {r.value:g} - {r.max_drop:g}  ({sampling})")
        typer.echo(f"    source: {r.source}")
