"""The load a timed phase put on the server, from its sample records: offered against achieved rate, the send
lag (how late requests left against their schedule) and per-second time series (docs/load.md).

The schedule counts as kept when the send lag p99 is at most ``max(10 ms, 10% of the mean inter-arrival time)``:
10 ms is below any LLM request's own latency, and at low rates a tenth of the gap between requests still leaves
the arrival process's shape intact. Beyond it the client (its event loop, or the --concurrency cap) set the
load, and the summary says so rather than passing the achieved rate off as the offered one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from evalkit.contracts import LoadSeries, LoadSummary, SampleFields, SchedulerStats
from evalkit.scoring.speed import floats, percentiles

LAG_FLOOR_MS = 10.0
LAG_SHARE_OF_GAP = 0.1
MAX_BINS = 3600  # longer phases get wider bins


def lag_threshold_ms(mean_gap_s: float | None) -> float:
    """The send lag p99 up to which a schedule counts as kept."""
    if mean_gap_s is None or not math.isfinite(mean_gap_s):
        return LAG_FLOOR_MS
    return max(LAG_FLOOR_MS, LAG_SHARE_OF_GAP * mean_gap_s * 1000.0)


def _rate(times: Any) -> tuple[float | None, float | None]:
    """(window, (n − 1) / window) of sorted ``times``; Nones for fewer than two or a zero window."""
    if len(times) < 2:
        return None, None
    window = float(times[-1] - times[0])
    return (round(window, 6), (len(times) - 1) / window) if window > 0 else (round(window, 6), None)


def load_summary(
    records: Sequence[SampleFields],
    stats: SchedulerStats,
    process: str,
    request_rate: float | None = None,
    duration_s: float | None = None,
) -> LoadSummary | None:
    """The load of one session's ``records`` (each request's latest record, failed ones included) sent on a
    schedule; None when none was (no record has a ``scheduled_s``)."""
    import numpy as np

    due = [r for r in records if r.scheduled_s is not None]
    if not due:
        return None
    dues, sends = np.sort(floats(r.scheduled_s for r in due)), np.sort(floats(r.start_s for r in due))
    sent = [r for r in due if r.start_s is not None]
    lags = (floats(r.start_s for r in sent) - floats(r.scheduled_s for r in sent)) * 1000.0
    schedule_window, offered = _rate(dues)
    sending_window, achieved = _rate(sends)
    threshold = lag_threshold_ms(schedule_window / (len(dues) - 1) if schedule_window else None)
    lag = percentiles(lags)
    kept = lag.p99 is None or lag.p99 <= threshold
    reason = None
    if not kept:
        got = f"{achieved:.4g} req/s" if achieved is not None else "-"
        reason = (
            f"send lag p99 {lag.p99:.1f} ms is over {threshold:.1f} ms: the client (its event loop, or the "
            f"--concurrency cap) could not keep the schedule; the server received {got}, not the offered "
            f"{offered:.4g} req/s"
            if offered is not None
            else f"send lag p99 {lag.p99:.1f} ms is over {threshold:.1f} ms: the schedule was not kept"
        )
    return LoadSummary(
        process=process,
        request_rate=request_rate,
        origin_s=round(stats.origin_s, 6),
        sent=max(stats.sent, len(due)),
        not_sent=stats.not_sent,
        duration_s=duration_s,
        schedule_window_s=schedule_window,
        sending_window_s=sending_window,
        offered_rps=offered,
        achieved_rps=achieved,
        send_lag_ms=lag,
        send_lag_max_ms=float(lags.max()) if len(lags) else None,
        lag_threshold_ms=threshold,
        schedule_kept=kept,
        reason=reason,
        series=load_series(records, stats.origin_s),
    )


def load_series(records: Sequence[SampleFields], origin_s: float) -> LoadSeries | None:
    """Requests sent per second, requests in flight (time-averaged) and output tokens per second completed, per
    bin from ``origin_s`` (the phase's start on the records' clock); None without timed records."""

    def rows() -> Iterator[tuple[float, float, int, float | None]]:  # read twice, never held: 180,000 are 30 MB
        for r in records:
            if r.start_s is not None:
                start = r.start_s - origin_s
                yield start, start + (r.e2e_ms or 0.0) / 1000.0, r.output_tokens or 0, r.e2e_ms

    last = max((end for _, end, _, _ in rows()), default=None)
    if last is None:
        return None
    span = max(last, 0.0)
    width = float(max(1, math.ceil(span / MAX_BINS)))
    n = max(1, math.ceil(span / width) or 1)
    sent, busy, tokens = [0.0] * n, [0.0] * n, [0.0] * n
    for start, end, out, e2e in rows():
        sent[min(max(int(start // width), 0), n - 1)] += 1
        if e2e is None:  # failed: no end recorded, no tokens
            continue
        tokens[min(max(int(end // width), 0), n - 1)] += out
        i = max(int(start // width), 0)
        while i < n and i * width < end:
            busy[i] += max(0.0, min(end, (i + 1) * width) - max(start, i * width)) / width
            i += 1
    return LoadSeries(
        bin_s=width,
        t=[i * width for i in range(n)],
        sent_per_s=[round(x / width, 3) for x in sent],
        in_flight=[round(x, 3) for x in busy],
        output_tokens_per_s=[round(x / width, 3) for x in tokens],
    )
