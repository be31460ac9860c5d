"""What a person sees in the terminal: a live progress bar and the closing table."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evalkit.contracts import GroupSummary, MetricValue, SampleRecord, speed_metric

console = Console(stderr=True)


class LiveProgress:
    """done/total, accuracy so far (first filter of the primary metric) and output tok/s. Each answer is counted;
    the bar (redrawn ``REFRESH_PER_S`` times a second) is updated at most every ``UPDATE_S``, at a task's start and
    end, and when the display closes: formatting it for every answer cost the timing loop ~12 µs an answer."""

    REFRESH_PER_S = 4
    UPDATE_S = 0.1

    def __init__(self, enabled: bool = True) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("acc {task.fields[acc]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TextColumn("err {task.fields[err]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not enabled,
            refresh_per_second=self.REFRESH_PER_S,
        )
        self.ids: dict[str, Any] = {}
        self.correct: dict[str, list[int]] = {}
        self.tokens: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.t0: dict[str, float] = {}
        self.shown: dict[str, float] = {}  # task -> when its bar was last updated
        self.done: dict[str, int] = {}  # task -> answers done as last counted

    def __enter__(self) -> LiveProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for task in self.ids:
            self._show(task, time.perf_counter())
        self.progress.__exit__(None, None, None)

    def __call__(self, task: str, done: int, total: int, rec: SampleRecord | None) -> None:
        if task not in self.ids:
            self.ids[task] = self.progress.add_task(task, total=total, acc="-", tps="-", err=0)
            self.correct[task], self.tokens[task], self.errors[task] = [0, 0], 0, 0
            self.t0[task] = time.perf_counter()
        if rec is not None:
            if rec.status == "api_error":
                self.errors[task] += 1
            elif rec.correct:
                first = next(iter(rec.correct.values()))
                self.correct[task][0] += int(bool(first))
                self.correct[task][1] += 1
            self.tokens[task] += rec.output_tokens or 0
        self.done[task] = done
        now = time.perf_counter()
        if rec is None or done >= total or now - self.shown.get(task, 0.0) >= self.UPDATE_S:
            self._show(task, now)

    def _show(self, task: str, now: float) -> None:
        self.shown[task] = now
        c, n = self.correct[task]
        elapsed = max(now - self.t0[task], 1e-9)
        self.progress.update(
            self.ids[task],
            completed=self.done[task],
            acc=f"{c / n:.3f}" if n else "-",
            tps=f"{self.tokens[task] / elapsed:,.0f}",
            err=self.errors[task],
        )


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


# the speed table's columns: header, the speed catalogue's keys shown in it (joined by " / "), decimals
SPEED_COLUMNS = (
    ("req/s", ("requests_per_s",), 2),
    ("out tok/s", ("output_tokens_per_s",), 0),
    ("TTFT p50/p99 ms", ("ttft_p50_ms", "ttft_p99_ms"), 1),
    ("TPOT p50/p99 ms", ("tpot_p50_ms", "tpot_p99_ms"), 2),
    ("ITL p50 ms", ("itl_p50_ms",), 2),
)


def _groups(summary: dict[str, Any]) -> dict[str, GroupSummary]:
    """The summary's lm-eval groups, typed (none when it has no ``groups``)."""
    return {str(k): GroupSummary.model_validate(v) for k, v in (summary.get("groups") or {}).items()}


def print_summary(summary: dict[str, Any], run_dir: str) -> None:
    acc = Table(title="accuracy", title_justify="left")
    for col in ("task", "metric", "value", "± stderr", "95% CI", "n"):
        acc.add_column(col, no_wrap=col in ("task", "metric"))  # names whole (the other columns give way)
    speed = Table(title="speed", title_justify="left")
    for col in ("task", *(header for header, _, _ in SPEED_COLUMNS), "conc", "errors"):
        speed.add_column(col)
    for name, t in summary["tasks"].items():
        for metric, m in t["metrics"].items():
            mv = MetricValue.model_validate(m)
            acc.add_row(name, metric, _fmt(mv.value, 4), _fmt(mv.stderr, 4), mv.ci_text(), str(mv.n))
        s, c = t["speed"], t["counts"]
        speed.add_row(
            name,
            *(" / ".join(_fmt(speed_metric(k).of_json(s), digits) for k in keys) for _, keys, digits in SPEED_COLUMNS),
            _fmt(s.get("concurrency")),
            f"{c['api_error']}/{c['total']}",
        )
    for name, g in _groups(summary).items():  # lm-eval groups: their aggregate, after their tasks
        label = f"{name} (group of {len(g.tasks)} tasks)"
        if not g.metrics:
            acc.add_row(label, "-", "-", "-", "-", "-")
        for metric, gm in g.metrics.items():
            acc.add_row(label, metric, _fmt(gm.value, 4), _fmt(gm.stderr, 4), gm.ci_text(), str(gm.n))
    out = Console()
    out.print(acc)
    out.print(speed)
    for name, g in _groups(summary).items():
        if not g.metrics:
            out.print(f"{name}: no group score: {g.reason}")
    for name, t in summary["tasks"].items():
        if (t.get("detail") or {}).get("prefill"):  # scored requests (lm-eval loglikelihood): answered whole
            s = t["speed"]
            prompt_tps = (s.get("total_tokens_per_s") or 0) - (s.get("output_tokens_per_s") or 0)
            e2e = " / ".join(_fmt(speed_metric(k).of_json(s), 1) for k in ("e2e_p50_ms", "e2e_p99_ms"))
            out.print(
                f"{name}: prefill speed {prompt_tps:,.0f} prompt tok/s, {_fmt(s.get('requests_per_s'), 2)} req/s, "
                f"latency p50/p99 {e2e} ms (scored requests, answered whole: no TTFT/TPOT)"
            )
    for name, t in summary["tasks"].items():  # runs made with --goodput / --cost-per-gpu-hour / where NVML reads
        if line := _economics_line(t["speed"]):
            out.print(f"{name}: {line}")
    out.print(f"results: {run_dir}")


def _economics_line(s: dict[str, Any]) -> str:
    """Goodput, cost and energy of a task's speed, those it has, on one line ("" when it has none)."""
    parts = []
    if s.get("goodput_requests_per_s") is not None:
        share = s.get("goodput_share")
        within = f" ({100 * share:.1f}% of requests within the SLOs)" if share is not None else ""
        parts.append(f"goodput {_fmt(s['goodput_requests_per_s'], 2)} req/s{within}")
    if s.get("cost_per_million_output_tokens") is not None:
        parts.append(f"${_fmt(s['cost_per_million_output_tokens'], 4)} per million output tokens")
    if s.get("joules_per_output_token") is not None:
        parts.append(f"{_fmt(s['joules_per_output_token'], 3)} J per output token")
    return " · ".join(parts)
