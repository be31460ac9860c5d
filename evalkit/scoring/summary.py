"""A task's entry in ``summary.json``: its metrics, request outcomes and speed."""

from __future__ import annotations

from array import array
from typing import Any

from evalkit.contracts import BASE_STATUSES, STATUSES, MetricValue, SampleRecord, SchedulerStats, TaskSummary
from evalkit.scoring.speed import percentile, speed_summary

LOOP_LAG_BOUND_MS = 20.0  # event-loop lag p99 above this: the client, not the server, may have set the pace
CPU_BOUND_SHARE = 0.9  # client CPU time over wall time above this: the same


def task_summary(
    version: str,
    scored: tuple[dict[str, MetricValue], dict[str, Any]],
    records: list[SampleRecord],
    stats: SchedulerStats,
    itl: array | None,
) -> TaskSummary:
    """The task's summary: ``scored`` is what ``task.summarize`` returned (in the scoring process), ``records``
    every request's latest record, ``itl`` all inter-token latencies of the task."""
    metrics, detail = scored
    counts: dict[str, int] = {"total": len(records)}
    for status in STATUSES:
        k = sum(1 for r in records if r.status == status)
        if k or status in BASE_STATUSES:
            counts[status] = k
    speed = speed_summary(records, itl=itl)
    speed.concurrency = stats.final_concurrency
    speed.client_cpu_s = round(stats.cpu_s, 3)
    lags = sorted(stats.loop_lag_ms)
    speed.loop_lag_ms_p99 = round(percentile(lags, 99), 3) if lags else None
    speed.client_bound = bool(
        (speed.loop_lag_ms_p99 or 0) > LOOP_LAG_BOUND_MS
        or (stats.wall_s > 1 and stats.cpu_s / stats.wall_s > CPU_BOUND_SHARE)
    )
    return TaskSummary(
        version=version,
        metrics=metrics,
        counts=counts,
        speed=speed,
        concurrency_trace=stats.concurrency_trace,
        concurrency_levels=stats.auto_levels,
        detail=detail,
    )
