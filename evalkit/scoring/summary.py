"""A task's entry in ``summary.json``: its metrics, request outcomes and speed."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

from evalkit.contracts import (
    UNRECORDED,
    EndpointSummary,
    MetricValue,
    ResentSummary,
    SampleFields,
    SchedulerStats,
    TaskSummary,
)
from evalkit.scoring.speed import percentile, speed_summary, steady_state

LOOP_LAG_BOUND_MS = 20.0  # event-loop lag above this: requests went out (and streams were read) late
# client-bound on lag only when the loop was late that much often: in at least this many of its 50 ms checks and this
# share of them (fewer is a one-off pause, a start-up import or a garbage collection, not a client that set the pace)
LOOP_LAG_MIN_LATE = 5
LOOP_LAG_LATE_SHARE = 0.05
CPU_BOUND_SHARE = 0.9  # client CPU time over wall time above this: the client's one core was busy throughout
# a loop that lags while its process uses less CPU than this share of the wall time was held up by something else on
# the machine (another process, a pause), not by its own work: lowering the concurrency would not help
LAG_CPU_SHARE = 0.5


def _counts(records: Sequence[SampleFields]) -> dict[str, int]:
    # numpy comes with it: imported by the end of a task, not by the run's start
    from evalkit.scoring.metric_registry import count_statuses

    return {"total": len(records), **count_statuses(records)}  # the tool-calling statuses only where they occur


def _was_resent(r: SampleFields) -> bool:
    if r.retry_lost_s is not None:  # answered after a failed attempt
        return True
    return r.turns is None and r.attempts > 1  # a conversation's attempts sum its requests': only retry_lost_s tells


def resent_summary(records: Sequence[SampleFields]) -> ResentSummary | None:
    """The records whose request was sent more than once (an answered one has ``retry_lost_s``; a failed one, or
    one of a run dir from before that field, ``attempts`` above 1); None when there are none."""
    resent = [r for r in records if _was_resent(r)]
    if not resent:
        return None
    lost = sum(r.retry_lost_s for r in resent if r.retry_lost_s is not None)
    return ResentSummary(requests=len(resent), lost_s=round(lost, 3))


def endpoint_summaries(
    records: Sequence[SampleFields], itl: dict[str, array], servers: dict[str, dict[str, Any] | None]
) -> list[EndpointSummary]:
    """Per endpoint of a sharded run: its requests (by the records' ``endpoint``), their outcomes and speed,
    and its ``/metrics`` deltas (``servers``: endpoint -> delta). The endpoints of ``servers`` come first, in
    their order, then any only the records name (an earlier run of a resumed dir), then ``UNRECORDED``."""
    groups: dict[str, list[SampleFields]] = {name: [] for name in servers}
    for r in records:
        groups.setdefault(r.endpoint or UNRECORDED, []).append(r)
    if UNRECORDED in groups:
        groups[UNRECORDED] = groups.pop(UNRECORDED)
    return [
        EndpointSummary(
            endpoint=name,
            counts=_counts(group),
            speed=speed_summary(group, itl=itl.get(name, array("f"))),
            server=servers.get(name),
        )
        for name, group in groups.items()
    ]


def loop_lagged(lags_ms: Sequence[float]) -> bool:
    """Whether the client's event loop was late by more than :data:`LOOP_LAG_BOUND_MS` in enough of its checks
    (:data:`LOOP_LAG_MIN_LATE`, :data:`LOOP_LAG_LATE_SHARE`) to have set the pace of sending and reading."""
    late = sum(1 for x in lags_ms if x > LOOP_LAG_BOUND_MS)
    return late >= max(LOOP_LAG_MIN_LATE, LOOP_LAG_LATE_SHARE * len(lags_ms))


def task_summary(
    version: str,
    scored: tuple[dict[str, MetricValue], dict[str, Any]],
    records: Sequence[SampleFields],
    stats: SchedulerStats,
    itl: array | None,
    itl_of: Callable[[SampleFields], Sequence[float]] | None = None,
    earlier: set[str] | None = None,
    wall_s: float | None = None,
) -> TaskSummary:
    """The task's summary: ``scored`` is what ``task.summarize`` returned (in the scoring process), ``records``
    every request's latest record, ``itl`` all inter-token latencies of the task (``itl_of``: a record's part of
    it). ``speed.steady_state``: the same figures at the level of requests in flight the scheduler
    ended at (a fixed concurrency, or where auto settled), over this session's records (``earlier``: the keys an
    earlier session of a resumed run answered, timed on another clock). ``wall_s``: the time the throughputs are
    over (default: first send to last answer; a merged run's: the union of its shards' windows)."""
    metrics, detail = scored
    counts = _counts(records)
    speed = speed_summary(records, wall_s=wall_s, itl=itl)
    speed.concurrency = stats.final_concurrency
    speed.client_cpu_s = round(stats.cpu_s, 3)
    lags = sorted(stats.loop_lag_ms)
    speed.loop_lag_ms_p99 = round(percentile(lags, 99), 3) if lags else None
    busy = stats.cpu_s / (stats.wall_s * stats.processes) if stats.wall_s > 1 else 0.0
    speed.client_bound = (loop_lagged(lags) and busy >= LAG_CPU_SHARE) or busy > CPU_BOUND_SHARE
    if stats.final_concurrency > 0:
        session = [r for r in records if r.key not in earlier] if earlier else records
        speed.steady_state = steady_state(session, stats.final_concurrency, itl_of)
    return TaskSummary(
        version=version,
        metrics=metrics,
        counts=counts,
        speed=speed,
        concurrency_trace=stats.concurrency_trace,
        concurrency_levels=stats.auto_levels,
        detail=detail,
        resent=resent_summary(records),
    )
