"""The sweep's page: the recommendation and the table of every combination first (what a reader buys, and
why the others lost), then the comparison of its runs (:func:`evalkit.reporting.compare_view.build_compare_view`)
with the sweep's charts of speed against concurrency."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.reporting.formatting import DASH, fmt_num, fmt_pct
from evalkit.reporting.html import render_template
from evalkit.store.files import write_text_atomic
from evalkit.store.reader import open_run

SWEEP_CSS = (
    ".banner.rec-pick{background:#dcfce7;border-color:#86efac;color:#14532d;font-size:15px}"
    "tr.picked td{background:#f0fdf4}.sweep-table td{white-space:nowrap}"
)


@dataclass
class SweepLead:
    """What the page opens with: the recommended combination (``pick``, None when none qualifies or the sweep
    file asks for no recommendation: ``headline`` None), the combinations' names and table rows in the plan's
    order, the table's figure ``columns`` (row key, heading, and how it reads: "num", "pct" a share, "acc" an
    accuracy in [0, 1] with its 95% interval), and per combination the recommendation's word on
    it (``decided``: "recommended" or the rule it lost on)."""

    pick: str | None
    headline: str | None
    names: list[str]
    rows: list[dict[str, Any]]
    columns: list[tuple[str, str, str]]
    decided: dict[str, str] = field(default_factory=dict)


@dataclass
class LeadRow:
    name: str
    config: str
    sampling: str
    concurrency: str
    cells: list[str]
    decided: str
    picked: bool
    error: str | None


def _cell(value: Any, kind: str) -> str:
    if not isinstance(value, int | float):
        return DASH
    if kind == "pct" or (kind == "acc" and 0 <= value <= 1):
        return fmt_pct(value)
    return fmt_num(value, 0 if abs(value) >= 100 else 2)


def _ci(text: Any, value: Any) -> str | None:
    """The sweep table's ``[lo, hi]`` interval as the value is shown (percent for a share)."""
    try:
        lo, hi = (float(x) for x in str(text).strip("[]").split(","))
    except ValueError:
        return None
    if isinstance(value, int | float) and 0 <= value <= 1:
        return f"95% CI {100 * lo:.1f}–{100 * hi:.1f}%"
    return f"95% CI {lo:.4g}–{hi:.4g}"


def lead_rows(lead: SweepLead) -> list[LeadRow]:
    out = []
    for name, row in zip(lead.names, lead.rows, strict=True):
        cells = []
        for key, _, kind in lead.columns:
            text = _cell(row.get(key), kind)
            ci = _ci(row.get(f"{key} ci95"), row.get(key)) if kind == "acc" and text != DASH else None
            cells.append(f"{text} ({ci})" if ci else text)
        out.append(
            LeadRow(
                name=name,
                config=str(row.get("config")),
                sampling=str(row.get("sampling")),
                concurrency=DASH if row.get("concurrency") is None else str(row["concurrency"]),
                cells=cells,
                decided=lead.decided.get(name, ""),
                picked=name == lead.pick,
                error=row.get("error"),
            )
        )
    return out


def render_sweep(
    run_dirs: list[Path],
    out: Path,
    lead: SweepLead,
    pair: tuple[int, int] | None,
    charts: list[dict[str, Any]] | None,
) -> Path:
    """Write the sweep page to ``out``: ``lead`` first, then the comparison of ``run_dirs`` with ``charts`` and
    the per-request flips of ``pair`` (indices into ``run_dirs``; None: no flips, unless a numerics section
    needs its two runs)."""
    from evalkit.reporting.compare_view import build_compare_view
    from evalkit.reporting.numerics_view import numerics_css

    chosen = set(pair or (0, 1))
    runs = [open_run(Path(d), with_samples=i in chosen) for i, d in enumerate(run_dirs)]
    view = build_compare_view(runs, pair)
    if pair is None and not view.numerics:
        view.flips = None
    view.verdict = None  # the recommendation is this page's decision
    view.charts += charts or []
    view.chart_ids |= {c["id"] for c in charts or []}
    view.title = f"Sweep: {lead.pick} recommended" if lead.pick else f"Sweep of {len(lead.names)} combinations"
    rows = lead_rows(lead)
    css = SWEEP_CSS + (numerics_css() if view.numerics else "")
    headings = [h for _, h, _ in lead.columns]
    html = render_template("sweep.html.j2", css, v=view, lead=lead, lead_rows=rows, headings=headings)
    write_text_atomic(Path(out), html)
    return Path(out)
