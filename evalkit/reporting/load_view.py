"""The load section of a task in the run report: offered against achieved rate and send lag (the summary's
``load``), the send lag of each request over the phase against its schedule, and the per-second series, as
small inline SVG charts (geometry computed here, numbers only; every text goes through the template's
autoescape), and the banner when the schedule was not kept."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.contracts import LoadSummary
from evalkit.reporting.formatting import KV, Banner, fmt_int, fmt_num
from evalkit.store.reader import as_num

WIDTH, HEIGHT, PAD = 640.0, 110.0, 6.0
MAX_POINTS = 1500  # send-lag dots drawn (evenly thinned beyond)


@dataclass
class Spark:
    """One small chart: a label with its scale, an SVG path (or dots) in a WIDTH x HEIGHT box, a dashed
    reference line (y in the box; None: none) and its label."""

    label: str
    path: str = ""
    dots: list[tuple[float, float]] = field(default_factory=list)
    ref_y: float | None = None
    ref_label: str = ""


@dataclass
class LoadView:
    rows: list[KV]
    kept: bool
    reason: str | None
    charts: list[Spark]
    width: float = WIDTH
    height: float = HEIGHT
    x_label: str = ""


def load_banner(name: str, load: LoadSummary) -> Banner | None:
    """A warning when the task's schedule was not kept: its figures are at the achieved load, not the offered."""
    if load.schedule_kept:
        return None
    return Banner("warn", f"{name}: the arrival schedule was not kept — {load.reason}")


def _scale(lo: float, hi: float, size: float, flip: bool = False) -> Any:
    span = (hi - lo) or 1.0

    def at(v: float) -> float:
        x = (v - lo) / span * (size - 2 * PAD)
        return round(size - PAD - x if flip else PAD + x, 1)

    return at


def _line(t: Sequence[float], ys: Sequence[float], t_end: float, y_max: float) -> str:
    x, y = _scale(0.0, t_end, WIDTH), _scale(0.0, y_max, HEIGHT, flip=True)
    return " ".join(f"{'M' if i == 0 else 'L'}{x(a)},{y(b)}" for i, (a, b) in enumerate(zip(t, ys, strict=False)))


def load_view(load: LoadSummary, samples: Sequence[dict[str, Any]], origin_s: float | None = None) -> LoadView:
    """The task's load table and charts from its ``load`` and its samples (``scheduled_s``, ``start_s``)."""
    lag = load.send_lag_ms
    at = f" at {fmt_num(load.request_rate, 3)} req/s" if load.request_rate else ""
    lags = f"{fmt_num(lag.p50, 2)} / {fmt_num(lag.p99, 2)} / {fmt_num(load.send_lag_max_ms, 2)} ms"
    rows = [
        KV("Arrival process", load.process + at),
        KV("Offered rate", f"{fmt_num(load.offered_rps, 3)} req/s", "(sent − 1) / (last due − first due)"),
        KV("Achieved rate", f"{fmt_num(load.achieved_rps, 3)} req/s", "(sent − 1) / (last send − first send)"),
        KV("Send lag p50 / p99 / max", lags),
        KV("Schedule kept", f"{'yes' if load.schedule_kept else 'no'} (lag p99 ≤ {fmt_num(load.lag_threshold_ms)} ms)"),
        KV("Sent", fmt_int(load.sent) + (f", {fmt_int(load.not_sent)} not sent (--duration)" if load.not_sent else "")),
    ]  # fmt: skip
    charts: list[Spark] = []
    points = [
        (d, (s - d) * 1000.0)
        for d, s in ((as_num(x.get("scheduled_s")), as_num(x.get("start_s"))) for x in samples)
        if d is not None and s is not None
    ]
    series = load.series
    zero = origin_s if origin_s is not None else (min(d for d, _ in points) if points else 0.0)
    t_end = max([series.t[-1] + series.bin_s] if series and series.t else [1.0])
    if points:
        points.sort()
        step = max(1, len(points) // MAX_POINTS)
        shown = points[::step]
        t_end = max(t_end, max(d - zero for d, _ in shown))
        y_max = max(max(v for _, v in shown), load.lag_threshold_ms) * 1.1
        x, y = _scale(0.0, t_end, WIDTH), _scale(0.0, y_max, HEIGHT, flip=True)
        charts.append(
            Spark(
                f"send lag of each request against the time it was due (0–{fmt_num(y_max, 1)} ms)",
                dots=[(x(d - zero), y(v)) for d, v in shown],
                ref_y=y(load.lag_threshold_ms),
                ref_label=f"{fmt_num(load.lag_threshold_ms)} ms: the schedule counts as kept below",
            )
        )
    if series and series.t:
        for label, ys, ref in (
            ("requests sent per second", series.sent_per_s, load.offered_rps),
            ("requests in flight", series.in_flight, None),
            ("output tokens per second completed", series.output_tokens_per_s, None),
        ):
            y_max = max([*ys, ref or 0.0, 1e-9]) * 1.1
            spark = Spark(f"{label} (0–{fmt_num(y_max, 1)})", path=_line(series.t, ys, t_end, y_max))
            if ref:
                spark.ref_y = _scale(0.0, y_max, HEIGHT, flip=True)(ref)
                spark.ref_label = f"offered {fmt_num(ref, 3)} req/s"
            charts.append(spark)
    x_label = f"0–{fmt_num(t_end)} s from the start of the timed phase"
    return LoadView(rows, load.schedule_kept, load.reason, charts, x_label=x_label)
