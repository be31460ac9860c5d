"""Run a sweep: one run dir per combination under ``DIR/runs/<name>/``, then ``sweep.csv``, ``sweep.md`` and
``compare.html`` over all of them (:func:`collect`, which also tabulates runs that Kubernetes Jobs wrote).

A server starts once per distinct server config (its log in ``DIR/servers/<config>/server.log``) and every
combination of that config runs against it through :class:`~evalkit.runner.Runner`, which records the server's
provenance in the run's manifest. Re-running the same sweep skips finished combinations (a manifest with
``finished_at`` and a summary) and resumes an interrupted one in its run dir.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from evalkit.config import load_config
from evalkit.errors import RunError, ServerError
from evalkit.store.files import write_text_atomic
from evalkit.sweep.plan import Combination, plan
from evalkit.sweep.spec import SweepSpec

# steady_*: over the window at the run's level of requests in flight (summary speed.steady_state); empty where it
# holds fewer requests than its figures need, steady_requests then says how many it held
SPEED_COLUMNS = (
    "output_tok_s",
    "requests_s",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "ttft_p99_ms",
    "steady_output_tok_s",
    "steady_ttft_p50_ms",
    "steady_requests",
)
Echo = Callable[[str], None]


@dataclass
class SweepResult:
    """The rows of the sweep table (one per finished combination), the files written, the combinations whose run
    failed more requests than allowed (``failed``: name -> one-line reason) and those with no finished run
    (``missing``)."""

    rows: list[dict[str, Any]]
    files: dict[str, Path]
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def run_dir_of(out_dir: Path, combo: Combination) -> Path:
    return out_dir / "runs" / combo.name


def read_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(manifest, summary) of a finished run (``finished_at`` set and a summary written), else None. The one
    place the sweep reads a run dir."""
    from evalkit.store.reader import open_run

    if not (run_dir / "manifest.json").is_file() or not (run_dir / "summary.json").is_file():
        return None
    run = open_run(run_dir, with_samples=False)
    if not run.manifest.get("finished_at") or not run.summary_tasks:
        return None
    return run.manifest, run.summary


def table_row(combo: Combination, summary: dict[str, Any], tasks: list[str]) -> dict[str, Any]:
    """One row of the sweep table: the combination, speed of the first task, each task's metrics with CI."""
    row: dict[str, Any] = {"config": combo.config, "sampling": combo.sampling, "concurrency": combo.concurrency}
    by_task = summary.get("tasks") or {}
    speed = (by_task.get(tasks[0]) or {}).get("speed") or {}

    def pct(key: str, q: str) -> Any:
        return (speed.get(key) or {}).get(q)

    row.update(
        output_tok_s=speed.get("output_tokens_per_s"),
        requests_s=speed.get("requests_per_s"),
        ttft_p50_ms=pct("ttft_ms", "p50"),
        tpot_p50_ms=pct("tpot_ms", "p50"),
        ttft_p99_ms=pct("ttft_ms", "p99"),
    )
    steady = speed.get("steady_state") or {}
    row.update(
        steady_output_tok_s=steady.get("output_tokens_per_s"),
        steady_ttft_p50_ms=(steady.get("ttft_ms") or {}).get("p50"),
        steady_requests=steady.get("requests"),
    )
    if combo.concurrency is None:
        row["concurrency"] = speed.get("concurrency")  # what auto settled on
    from evalkit.report.common import metric_views

    for task in tasks:
        for mv in metric_views(by_task.get(task) or {}):  # the report's 95% interval (Wilson for a share)
            row[f"{task} {mv.name}"] = mv.value
            ci = f"[{mv.lo:.4f}, {mv.hi:.4f}]" if mv.lo is not None and mv.hi is not None else None
            row[f"{task} {mv.name} ci95"] = ci
    return row


def run_sweep(spec: SweepSpec, out_dir: Path, *, echo: Echo | None = None, quiet: bool = True) -> SweepResult:
    """Run every combination of ``spec`` not finished yet into ``out_dir`` and write the sweep's tables and
    comparison report. Raises EvalkitError for a run dir that cannot be used or a server that does not start
    (what finished before is kept; the same command resumes)."""
    say = echo or (lambda _: None)
    combos = plan(spec)
    result = SweepResult(rows=[], files={})
    for key, group in groupby(combos, key=lambda c: c.server_key()):
        todo = list(group)
        pending = [c for c in todo if read_run(run_dir_of(out_dir, c)) is None]
        result.skipped += [c.name for c in todo if c not in pending]
        if not pending:
            continue
        server = _start(pending[0], out_dir, say) if key is not None else None
        try:
            for combo in pending:
                say(f"sweep: running {combo.name}")
                try:
                    _run_one(combo, out_dir, server)
                except RunError as e:  # finished and written, with more failed requests than allowed
                    result.failed[combo.name] = str(e)
                result.ran.append(combo.name)
        finally:
            if server is not None:
                server.stop()
    return collect(spec, out_dir, result)


def collect(spec: SweepSpec, out_dir: Path, result: SweepResult | None = None) -> SweepResult:
    """Tabulate the finished combinations under ``out_dir/runs/`` (whoever ran them: this process, or Jobs
    writing a shared volume) into sweep.csv, sweep.md and compare.html; runs nothing. Combinations without a
    finished run are listed in ``missing``."""
    result = result or SweepResult(rows=[], files={})
    combos = plan(spec)
    for combo in combos:
        read = read_run(run_dir_of(out_dir, combo))
        if read is not None:
            result.rows.append(table_row(combo, read[1], spec.tasks))
        else:
            result.missing.append(combo.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    result.files = write_outputs(result.rows, combos, spec, out_dir)
    return result


def _start(combo: Combination, out_dir: Path, say: Echo) -> Any:
    from evalkit.server.vllm_process import ServerStartError, VLLMServer

    assert combo.server is not None
    log_dir = out_dir / "servers" / combo.config
    say(f"sweep: starting the server of config {combo.config}")
    server = VLLMServer(combo.server, log_dir)
    try:
        server.start()
    except ServerStartError as e:
        raise ServerError(f"config {combo.config}: {e} (log: {log_dir / 'server.log'})") from None
    return server


def _run_one(combo: Combination, out_dir: Path, server: Any) -> None:
    from evalkit.runner import Runner

    settings = {**combo.settings, "output_dir": run_dir_of(out_dir, combo)}
    if server is not None:
        settings["endpoint"] = server.base_url + "/v1"
    cfg = load_config(settings)
    Runner(cfg, argv=["evalkit", "sweep", f"({combo.name})"], server=server).run()


def write_outputs(rows: list[dict[str, Any]], combos: list[Combination], spec: SweepSpec, out: Path) -> dict[str, Path]:
    """sweep.csv, sweep.md and compare.html (with speed against concurrency when the sweep has that axis)."""
    columns: list[str] = ["config", "sampling", "concurrency", *SPEED_COLUMNS]
    for row in rows:
        columns += [k for k in row if k not in columns]
    files = {"sweep.csv": out / "sweep.csv", "sweep.md": out / "sweep.md"}
    write_text_atomic(files["sweep.csv"], to_csv(rows, columns))
    write_text_atomic(files["sweep.md"], to_markdown(rows, columns))
    dirs = [run_dir_of(out, c) for c in combos if read_run(run_dir_of(out, c)) is not None]
    if dirs:
        from evalkit.report import render_compare

        charts = concurrency_charts(rows) if spec.concurrency else None
        files["compare.html"] = render_compare(dirs, out / "compare.html", charts=charts)
    return files


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v).replace("|", "\\|")


def to_markdown(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def concurrency_charts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output tokens/s and TTFT p50 against the concurrency level, one line per config and sampling point."""
    charts: list[dict[str, Any]] = []
    for cid, key, label in (
        ("sweep-throughput", "output_tok_s", "output tokens/s"),
        ("sweep-ttft", "ttft_p50_ms", "TTFT p50 (ms)"),
    ):
        series: dict[str, list[dict[str, float]]] = {}
        for r in rows:
            if r.get(key) is not None and r.get("concurrency") is not None:
                points = series.setdefault(f"{r['config']} / {r['sampling']}", [])
                points.append({"x": r["concurrency"], "y": round(float(r[key]), 3)})
        charts.append(
            {
                "id": cid,
                "kind": "line",
                "title": f"{label} against concurrency",
                "x": "concurrency (requests in flight)",
                "y": label,
                "series": [{"label": k, "points": sorted(v, key=lambda p: p["x"])} for k, v in series.items()],
            }
        )
    return charts
