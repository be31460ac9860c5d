"""``evalkit history trend``: one task's metric over the runs of the history, with its 95% CI band, and a speed
figure over the same runs, the gate's verdicts marked, as one offline HTML page: inline SVG drawn here, Jinja2
with autoescape, a Content-Security-Policy that allows no script and no remote asset."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from evalkit.contracts import SPEED
from evalkit.errors import EvalkitError
from evalkit.history.query import Point
from evalkit.store.files import write_text_atomic

WIDTH, HEIGHT = 960, 280
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50
VERDICT_COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "cannot_decide": "#9a6700", None: "#57606a"}
DEFAULT_SPEED = "output_tokens_per_s"


@dataclass(frozen=True)
class Chart:
    """One SVG chart's geometry: the line and band paths, the points (x, y, colour, tooltip, verdict) and the
    axis ticks (position, label)."""

    title: str
    line: str
    band: str
    points: list[dict[str, Any]]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    empty: bool


def _fmt(v: float | None, pct: bool) -> str:
    if v is None:
        return "—"
    return f"{v * 100:.2f}%" if pct else f"{v:.4g}"


def _scale(values: list[float]) -> tuple[float, float]:
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo < 1e-12:
        lo, hi = lo - (abs(lo) * 0.05 or 0.5), hi + (abs(hi) * 0.05 or 0.5)
    pad = (hi - lo) * 0.08
    return (lo - pad if lo - pad >= 0 or lo < 0 else 0.0), hi + pad  # no axis below 0 for figures that are not


def _x(i: int, n: int) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (span / 2 if n == 1 else span * i / (n - 1))


def chart(title: str, points: list[Point], values: list[float | None], band: bool, pct: bool) -> Chart:
    """The chart of ``values`` (one per point, None: the run has none) with the points' CI band when ``band``."""
    n = len(points)
    known = [v for v in values if v is not None]
    if band:
        known += [c for p in points if p.ci is not None for c in p.ci]
    lo, hi = _scale(known)

    def y(v: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (1 - (v - lo) / (hi - lo))

    coords = [(_x(i, n), y(v)) for i, v in enumerate(values) if v is not None]
    line = " ".join(f"{'M' if k == 0 else 'L'}{x:.1f},{yy:.1f}" for k, (x, yy) in enumerate(coords))
    band_path = ""
    if band:
        cis = [(i, p.ci) for i, p in enumerate(points) if p.ci is not None]
        if cis:
            upper = [f"{_x(i, n):.1f},{y(ci[1]):.1f}" for i, ci in cis]
            lower = [f"{_x(i, n):.1f},{y(ci[0]):.1f}" for i, ci in reversed(cis)]
            band_path = "M" + " L".join(upper + lower) + " Z"
    marks = []
    for i, (p, v) in enumerate(zip(points, values, strict=True)):
        if v is None:
            continue
        ci = f" [{_fmt(p.ci[0], pct)}, {_fmt(p.ci[1], pct)}]" if band and p.ci else ""
        when = p.when.strftime("%Y-%m-%d %H:%M") if p.when else "?"
        tip = f"run {p.run_id} {p.label} ({when}, config {p.config}, vLLM {p.vllm or '-'}): {_fmt(v, pct)}{ci}"
        if p.verdict:
            tip += f"; gate {p.verdict.replace('_', ' ')}"
        marks.append(
            {"x": _x(i, n), "y": y(v), "colour": VERDICT_COLOURS.get(p.verdict, VERDICT_COLOURS[None]),
             "tip": tip, "verdict": p.verdict or "none", "run": p.run_id}
        )  # fmt: skip
    y_ticks = [(y(lo + (hi - lo) * k / 4), _fmt(lo + (hi - lo) * k / 4, pct)) for k in range(5)]
    step = max(1, n // 8)
    x_ticks = [(_x(i, n), p.when.strftime("%m-%d") if p.when else f"#{p.run_id}") for i, p in enumerate(points)]
    return Chart(title, line, band_path, marks, y_ticks, x_ticks[::step], not coords)


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
    metric_chart = chart(f"{task}: {metric} with its 95% CI", points, [p.value for p in points], True, pct)
    speed_chart = chart(f"{task}: {figure.label} ({figure.unit})", points, [p.speed for p in points], False, False)
    rows = [
        {"run": p.run_id, "label": p.label, "when": p.when.strftime("%Y-%m-%d %H:%M") if p.when else "?",
         "config": p.config or "?", "vllm": p.vllm or "-", "value": _fmt(p.value, pct),
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
