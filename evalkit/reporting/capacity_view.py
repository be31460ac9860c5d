"""A capacity search's page (``capacity.html``) and its one-sentence answer, from the capacity dir alone
(:func:`~evalkit.store.capacity_dir.open_capacity`): the curve (offered load → goodput share, output tok/s,
TTFT and TPOT p50/p99) as inline SVG charts (geometry computed here, numbers only; every text goes through the
template's autoescape), the knee (the answer and its bracket) and the SLO lines, and every point's run dir."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.contracts import CapacityRecord, LoadFigures
from evalkit.reporting.formatting import now_iso
from evalkit.reporting.html import render_template
from evalkit.store.capacity_dir import CAPACITY_HTML, open_capacity
from evalkit.store.files import write_text_atomic

WIDTH, HEIGHT, PAD = 640.0, 150.0, 8.0
SLO_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency"}


def _ms_text(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 and ms % 100 == 0 else f"{ms:g} ms"


def slo_words(slos: dict[str, float]) -> str:
    """``TTFT ≤ 2 s and TPOT ≤ 50 ms``."""
    parts = [f"{SLO_NAMES.get(k, k)} ≤ {_ms_text(v)}" for k, v in slos.items()]
    return " and ".join(parts)


def _load(value: float | None, r: CapacityRecord) -> str:
    if value is None:
        return "?"
    return f"{value:,.3g} req/s" if r.search == "rate" else f"{value:,.0f} in flight"


def _bare(value: float | None, r: CapacityRecord) -> str:
    if value is None:
        return "?"
    return f"{value:,.3g}" if r.search == "rate" else f"{value:,.0f}"


def capacity_sentence(r: CapacityRecord) -> str:
    """The answer in one sentence: ``holds 14.2 req/s (bracket 13.6–14.9) with 99% of requests within TTFT ≤ 2 s
    and TPOT ≤ 50 ms; 3,120 output tok/s; $0.41 per million output tokens``, or what the search could say."""
    share = f"{r.slo_share * 100:g}% of requests within {slo_words(r.slos)}"
    low, high = ([*(r.bracket or []), None, None])[:2]
    answer = r.capacity_rps if r.search == "rate" else r.capacity_concurrency
    if r.status == "below_start":
        return f"capacity below the start {_load(r.start, r)}: it does not hold {share}; lower the start load"
    if answer is None:
        bracket = f" (bracket so far {_bare(low, r)}–{_bare(high, r)})" if r.bracket else ""
        return f"cannot decide the capacity{bracket}: {r.reason or r.status}"
    text = f"holds {_load(answer, r)} (bracket {_bare(low, r)}–{_bare(high, r)}) with {share}"
    at = r.at_capacity
    if at is not None and at.output_tokens_per_s is not None:
        text += f"; {at.output_tokens_per_s:,.0f} output tok/s"
    if r.cost_per_million_output_tokens is not None:
        text += f"; ${r.cost_per_million_output_tokens:,.2f} per million output tokens"
    if r.status == "max_duration":
        text += f" (--max-duration ran out: the bracket is wider than the tolerance {r.tolerance:g})"
    return text


@dataclass
class Chart:
    """One chart of the curve: lines (label, SVG path, colour), dots (x, y, held), a dashed SLO line (y in the
    box), the knee (x of the answer, bracket band x from–to), the axis ranges as text."""

    label: str
    lines: list[tuple[str, str, str]] = field(default_factory=list)
    dots: list[tuple[float, float, bool]] = field(default_factory=list)
    slo_y: float | None = None
    slo_label: str = ""
    y_range: str = ""


def _chart(
    label: str, curve: list[LoadFigures], series: list[tuple[str, str, str]], x_max: float, slo: float | None
) -> Chart | None:
    values = [v for _, key, _ in series for c in curve if (v := getattr(c, key)) is not None]
    if not values:
        return None
    top = max([*values, slo or 0.0]) * 1.1 or 1.0

    def xy(x: float, y: float) -> tuple[float, float]:
        return (round(PAD + x / x_max * (WIDTH - 2 * PAD), 1), round(HEIGHT - PAD - y / top * (HEIGHT - 2 * PAD), 1))

    chart = Chart(label=label, y_range=f"0 – {top:,.3g}")
    for name, key, colour in series:
        pts = [(xy(c.offered, v), c.holds) for c in curve if (v := getattr(c, key)) is not None]
        if pts:
            chart.lines.append((name, "M" + " L".join(f"{x},{y}" for (x, y), _ in pts), colour))
            chart.dots += [(x, y, held) for (x, y), held in pts]
    if slo is not None:
        chart.slo_y = xy(0, slo)[1]
    return chart


def page_view(path: Path) -> dict[str, Any]:
    read = open_capacity(path)
    r = read.record
    curve = r.curve
    x_max = max([c.offered for c in curve] + [b for b in (r.bracket or []) if b is not None] + [r.start]) * 1.05
    knee_x = None
    band = None

    def x_of(v: float) -> float:
        return round(PAD + v / x_max * (WIDTH - 2 * PAD), 1)

    if r.bracket and r.bracket[0] is not None:
        knee_x = x_of(r.bracket[0])
        if r.bracket[1] is not None:
            band = (knee_x, x_of(r.bracket[1]))
    charts = [
        _chart("share within every SLO", curve, [("share", "goodput_share", "#2e86de")], x_max, r.slo_share),
        _chart("output tokens/s", curve, [("output tok/s", "output_tokens_per_s", "#27ae60")], x_max, None),
        _chart(
            "TTFT (ms)", curve, [("p50", "ttft_p50_ms", "#2e86de"), ("p99", "ttft_p99_ms", "#8e44ad")], x_max,
            r.slos.get("ttft"),
        ),
        _chart(
            "TPOT (ms)", curve, [("p50", "tpot_p50_ms", "#2e86de"), ("p99", "tpot_p99_ms", "#8e44ad")], x_max,
            r.slos.get("tpot"),
        ),
    ]  # fmt: skip
    unit = "req/s" if r.search == "rate" else "requests in flight"
    v = {
        "title": f"Capacity: {', '.join(r.tasks)}",
        "generated_at": now_iso(),
        "charts": [],
        "sentence": capacity_sentence(r),
        "record": r,
        "notes": read.notes + [f"{d.where}: {d.value!r} did not read as {d.expected}" for d in read.dropped],
        "svg": [c for c in charts if c is not None],
        "knee_x": knee_x,
        "band": band,
        "width": WIDTH,
        "height": HEIGHT,
        "x_label": f"offered load, 0 – {x_max:,.3g} {unit}",
        "unit": unit,
        "slo_text": slo_words(r.slos),
    }
    return v


def write_capacity_page(path: str | Path) -> Path:
    """Write ``capacity.html`` into the capacity dir ``path`` from its ``capacity.json``."""
    out = Path(path) / CAPACITY_HTML
    write_text_atomic(out, render_template("capacity.html.j2", v=page_view(Path(path))))
    return out
