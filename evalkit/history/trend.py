"""``evalkit history trend``: one task's metric over the runs of the history, with its 95% CI band, and a speed
figure over the same runs, the gate's verdicts marked, as one offline HTML page: inline SVG drawn here, Jinja2
with autoescape, a Content-Security-Policy that allows no script and no remote asset."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from evalkit.contracts import SPEED
from evalkit.errors import EvalkitError
from evalkit.history.query import Point
from evalkit.store.files import write_text_atomic

WIDTH, HEIGHT = 960, 280
LEFT, RIGHT, TOP, BOTTOM = 70, 50, 20, 50
VERDICT_COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "cannot_decide": "#9a6700", None: "#57606a"}
DEFAULT_SPEED = "output_tokens_per_s"


SERIES_COLOURS = ("#0969da", "#8250df", "#bf3989", "#1b7c83", "#953800", "#4d2d00", "#6639ba", "#0a3069")


@dataclass(frozen=True)
class Series:
    """One config identity's line (and CI band) in a chart, its legend label and colour."""

    label: str
    colour: str
    line: str
    band: str


@dataclass(frozen=True)
class Chart:
    """One SVG chart's geometry: a line (and CI band) per config identity, the points (x, y, colour, tooltip,
    verdict: "none" on a chart that does not mark verdicts) and the axis ticks (position, label)."""

    title: str
    series: list[Series]
    points: list[dict[str, Any]]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    empty: bool


def _fmt(v: float | None, pct: bool) -> str:
    if v is None:
        return "—"
    return f"{v * 100:.2f}%" if pct else f"{v:.4g}"


def nice_ticks(values: list[float], pct: bool, count: int = 4) -> list[float]:
    """Round axis ticks over ``values``: a step of 1, 2, 2.5 or 5 times a power of ten giving about ``count``
    intervals, from a multiple of it at or below the smallest value to one at or above the largest; the axis starts
    at 0 unless the values sit in a band narrower than their distance from 0 (a share spread over more than half
    of its range: 0-100%)."""
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if lo >= 0 and (not pct or hi - lo > 0.5 or lo < (hi - lo)):
        lo = 0.0  # an axis from 0 unless the values sit in a narrow band far from it
    if hi - lo < 1e-12:
        hi = lo + (abs(lo) * 0.1 or (0.1 if pct else 1.0))
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw - 1e-12)
    first, last = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    return [round(first + k * step, 12) for k in range(round((last - first) / step) + 1)]


def _tick_label(v: float, ticks: list[float], pct: bool) -> str:
    """A tick as a round number: as many decimals as the step needs (25%, 2.5%, 200, 0.25)."""
    scale = 100 if pct else 1
    step = (ticks[1] - ticks[0] if len(ticks) > 1 else 1.0) * scale
    digits = 0
    while round(step * 10**digits, 9) % 1 and digits < 6:
        digits += 1
    return f"{v * scale:,.{digits}f}" + ("%" if pct else "")


def _x(i: int, n: int) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (span / 2 if n == 1 else span * i / (n - 1))


def x_ticks(points: list[Point], most: int = 8) -> list[tuple[float, str]]:
    """Dated x labels: the date alone when no two runs share a day, else date and time; at most ``most``,
    spread over the runs, none repeating the label before it."""
    n = len(points)
    days = [p.when.date() for p in points if p.when]
    fmt = "%Y-%m-%d" if len(days) == len(set(days)) else "%m-%d %H:%M"
    step = max(1, math.ceil(n / most))
    out: list[tuple[float, str]] = []
    for i in range(0, n, step):
        p = points[i]
        label = p.when.strftime(fmt) if p.when else f"#{p.run_id}"
        if not out or out[-1][1] != label:
            out.append((_x(i, n), label))
    return out


def series_labels(points: list[Point]) -> dict[str | None, str]:
    """Each identity's legend label: its config name, with the concurrency when the name is shared by several
    identities, and the hash's first characters when that is still not enough."""
    names: dict[str | None, str] = {}
    for p in points:
        names.setdefault(p.identity, p.config or "?")
    shared = {n for n in names.values() if list(names.values()).count(n) > 1}
    conc = {p.identity: p.concurrency for p in points}
    labels = {k: f"{n} · concurrency {conc[k] or '?'}" if n in shared else n for k, n in names.items()}
    twice = {v for v in labels.values() if list(labels.values()).count(v) > 1}
    return {k: f"{v} · {(k or '?')[:6]}" if v in twice else v for k, v in labels.items()}


def chart(title: str, points: list[Point], values: list[float | None], band: bool, pct: bool, verdicts: bool) -> Chart:
    """The chart of ``values`` (one per point, None: the run has none), one line per config identity, with the
    points' CI band when ``band`` and the gate verdicts marked when ``verdicts``."""
    n = len(points)
    known = [v for v in values if v is not None]
    if band:
        known += [c for p in points if p.ci is not None for c in p.ci]
    ticks = nice_ticks(known, pct)
    lo, hi = ticks[0], ticks[-1]

    def y(v: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (1 - (v - lo) / (hi - lo))

    labels = series_labels(points)
    colours = {k: SERIES_COLOURS[i % len(SERIES_COLOURS)] for i, k in enumerate(labels)}
    series = []
    for key, label in labels.items():
        idx = [i for i, p in enumerate(points) if p.identity == key]
        coords = [(_x(i, n), y(v)) for i in idx if (v := values[i]) is not None]
        line = " ".join(f"{'M' if k == 0 else 'L'}{x:.1f},{yy:.1f}" for k, (x, yy) in enumerate(coords))
        band_path = ""
        cis = [(i, ci) for i in idx if (ci := points[i].ci) is not None] if band else []
        if cis:
            upper = [f"{_x(i, n):.1f},{y(ci[1]):.1f}" for i, ci in cis]
            lower = [f"{_x(i, n):.1f},{y(ci[0]):.1f}" for i, ci in reversed(cis)]
            band_path = "M" + " L".join(upper + lower) + " Z"
        series.append(Series(label, colours[key], line, band_path))
    marks = []
    for i, (p, v) in enumerate(zip(points, values, strict=True)):
        if v is None:
            continue
        shown = f" [{_fmt(p.ci[0], pct)}, {_fmt(p.ci[1], pct)}]" if band and p.ci else ""
        when = p.when.strftime("%Y-%m-%d %H:%M") if p.when else "?"
        tip = f"run {p.run_id} {p.label} ({when}, {labels[p.identity]}, vLLM {p.vllm or '-'}): {_fmt(v, pct)}{shown}"
        verdict = p.verdict if verdicts else None
        if p.verdict:
            tip += f"; gate {p.verdict.replace('_', ' ')}"
        colour = VERDICT_COLOURS.get(verdict, colours[p.identity]) if verdict else colours[p.identity]
        marks.append({"x": _x(i, n), "y": y(v), "colour": colour, "tip": tip, "verdict": verdict or "none",
                      "run": p.run_id})  # fmt: skip
    y_ticks = [(y(t), _tick_label(t, ticks, pct)) for t in ticks]
    return Chart(title, series, marks, y_ticks, x_ticks(points), not known)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def render_trend(task: str, metric: str, speed_key: str, points: list[Point], source: str) -> str:
    """The trend page of ``points`` (oldest first); ``source``: the database, as shown (its password redacted)."""
    figure = SPEED[speed_key]
    pct = all(v is None or 0.0 <= v <= 1.0 for v in (p.value for p in points))
    metric_chart = chart(f"{task}: {metric} with its 95% CI", points, [p.value for p in points], True, pct, True)
    speed_values = [p.speed for p in points]
    speed_chart = chart(f"{task}: {figure.label} ({figure.unit})", points, speed_values, False, False, False)
    labels = series_labels(points)
    rows = [
        {"run": p.run_id, "label": p.label, "when": p.when.strftime("%Y-%m-%d %H:%M") if p.when else "?",
         "config": labels[p.identity], "vllm": p.vllm or "-", "value": _fmt(p.value, pct),
         "ci": f"[{_fmt(p.ci[0], pct)}, {_fmt(p.ci[1], pct)}]" if p.ci else "—",
         "speed": _fmt(p.speed, False), "verdict": p.verdict or "none"}
        for p in points
    ]  # fmt: skip
    return _environment().get_template("trend.html.j2").render(
        task=task, metric=metric, speed=figure, charts=[metric_chart, speed_chart], rows=rows, source=source,
        width=WIDTH, height=HEIGHT, left=LEFT, right=RIGHT, top=TOP, bottom=BOTTOM, colours=VERDICT_COLOURS,
    )  # fmt: skip


def write_trend(html: str, output: Path) -> Path:
    """Write the page to ``output`` (a folder gets ``trend.html``); EvalkitError when it cannot be written."""
    path = output / "trend.html" if output.is_dir() else output
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, html)
    except OSError as e:
        raise EvalkitError(f"cannot write {path} ({e.strerror}); pass -o a writable file") from None
    return path


def speed_key(key: str | None) -> str:
    """The speed figure asked for (a ``contracts.SPEED_METRICS`` key), default output tokens/s."""
    key = key or DEFAULT_SPEED
    if key not in SPEED:
        raise EvalkitError(f"--speed {key!r} is not a speed figure; pass one of {', '.join(SPEED)}")
    return key
