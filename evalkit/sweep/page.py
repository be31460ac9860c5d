"""The sweep's page (``compare.html``): it opens with the recommendation and a table of every combination (speed,
goodput, cost and each task's primary accuracy, and what the recommendation decided about it), then speed against
concurrency (one line per config and sampling point) and the comparison of the runs.

Its per-request flips compare two configs: the recommended combination with the reference config's run it was
judged against, else the first two finished runs of different configs at the same sampling point, concurrency
and repeat. A sweep of one config shows none (two concurrency levels of one config differ only by batching).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.contracts import speed_metric
from evalkit.sweep.combinations import Combination
from evalkit.sweep.recommend import GOOD_PER_USD, Recommendation

CHART_SPEED = (("sweep-throughput", "output_tokens_per_s"), ("sweep-ttft", "ttft_p50_ms"))  # against concurrency
# the page table's figures: (speed catalogue key, short heading); goodput and cost only where some run has them
PAGE_SPEED = (
    ("output_tokens_per_s", "output tok/s"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("goodput_requests_per_s", "goodput (req/s within SLOs)"),
    ("goodput_share", "share within SLOs"),
    ("cost_per_million_output_tokens", "$ per M output tokens"),
)


def page_columns(rows: list[dict[str, Any]], tasks: list[str]) -> list[tuple[str, str, str]]:
    """The table's figure columns as (row key, heading, "num" | "pct" | "acc"): speed, goodput and cost where
    any row has them, then each task's first metric (its primary) with its 95% interval."""
    cols = [((m := speed_metric(key)).column, head, "pct" if m.unit == "share" else "num") for key, head in PAGE_SPEED]
    cols.append((GOOD_PER_USD, "good requests per $", "num"))
    for task in tasks:
        first = next((k for r in rows for k in r if k.startswith(f"{task} ") and not k.endswith(" ci95")), None)
        if first is not None:
            cols.append((first, first, "acc"))
    return [col for col in cols if any(r.get(col[0]) is not None for r in rows)]


def flip_pair(combos: list[Combination], finished: list[bool], advice: Recommendation | None) -> tuple[int, int] | None:
    """Indices (into the finished combinations) of the two runs whose per-request flips the page lists: the
    recommendation's reference and pick, else the first two of different configs at the same sampling point,
    concurrency and repeat; None when no two such runs exist."""
    done = [c for c, ok in zip(combos, finished, strict=True) if ok]
    names = [c.name for c in done]
    if advice is not None and advice.pick in names and advice.reference in names and advice.pick != advice.reference:
        return names.index(advice.reference), names.index(advice.pick)
    for i, a in enumerate(done):
        for j in range(i + 1, len(done)):
            b = done[j]
            if a.config != b.config and (a.sampling, a.concurrency, a.repeat) == (b.sampling, b.concurrency, b.repeat):
                return i, j
    return None


def concurrency_charts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output tokens/s and TTFT p50 against the concurrency level, one line per config and sampling point (named
    in the legend)."""
    charts: list[dict[str, Any]] = []
    for cid, metric in CHART_SPEED:
        m = speed_metric(metric)
        key, label = m.column, m.label if m.unit != "ms" else f"{m.label} (ms)"
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


def write_page(
    out: Path,
    dirs: list[Path],
    rows: list[dict[str, Any]],
    combos: list[Combination],
    tasks: list[str],
    advice: Recommendation | None,
    with_charts: bool,
) -> Path:
    """Write the sweep page ``out`` over the finished runs ``dirs`` (``rows`` and ``combos``: every combination,
    in the plan's order)."""
    from evalkit.reporting.sweep_view import SweepLead, render_sweep

    finished = [d is not None for d in _dirs_by_combo(dirs, combos)]
    decided = dict(advice.lost) if advice is not None else {}
    if advice is not None and advice.pick is not None:
        decided[advice.pick] = "recommended"
    lead = SweepLead(
        pick=advice.pick if advice is not None else None,
        headline=advice.headline if advice is not None else None,
        names=[c.name for c in combos],
        rows=rows,
        columns=page_columns(rows, tasks),
        decided=decided,
    )
    pair = flip_pair(combos, finished, advice)
    charts = concurrency_charts(rows) if with_charts else None
    return render_sweep(dirs, out, lead, pair, charts)


def _dirs_by_combo(dirs: list[Path], combos: list[Combination]) -> list[Path | None]:
    by_name = {d.name: d for d in dirs}
    return [by_name.get(c.name) for c in combos]
