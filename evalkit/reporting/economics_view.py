"""The comparison's Pareto views on what a configuration costs: accuracy against goodput (requests/s within the
runs' SLOs, higher better) and against cost per million output tokens (lower better), each with its front, for
runs made with ``--goodput`` / ``--cost-per-gpu-hour`` (a chart only where at least two runs have the figure)."""

from __future__ import annotations

from typing import Any

from evalkit.contracts import Speed, speed_metric
from evalkit.reporting.analysis import pareto_front

AXES = (("goodput", "goodput_requests_per_s", "goodput (requests/s within the SLOs)"),
        ("cost", "cost_per_million_output_tokens", "$ per million output tokens"))  # fmt: skip


def economics_scatters(
    ti: int, title: str, y_label: str, points: list[tuple[str, Speed | None, float | None, Any, Any]]
) -> list[dict[str, Any]]:
    """Charts ``scatter-goodput-<ti>`` and ``scatter-cost-<ti>``: one point per run (``points``: label, speed,
    accuracy as shown, its interval's ends), the front of the runs no other is better than on both axes."""
    charts = []
    for axis, key, x_label in AXES:
        m = speed_metric(key)
        sign = -1.0 if m.lower_is_better else 1.0
        have = [(label, x, y, lo, hi) for label, speed, y, lo, hi in points if (x := m.of(speed)) is not None]
        have = [p for p in have if p[2] is not None]
        if len(have) < 2:
            continue
        front = set(pareto_front([(sign * x, y) for _, x, y, _, _ in have]))
        charts.append(
            {
                "id": f"scatter-{axis}-{ti}",
                "kind": "scatter",
                "title": f"{title} vs {x_label}",
                "x": x_label,
                "y": y_label,
                "points": [
                    {"label": label, "x": round(x, 6), "y": y, "lo": lo, "hi": hi, "front": i in front}
                    for i, (label, x, y, lo, hi) in enumerate(have)
                ],
                "front": [
                    {"x": round(have[i][1], 6), "y": have[i][2]} for i in sorted(front, key=lambda i: have[i][1])
                ],
            }
        )
    return charts
