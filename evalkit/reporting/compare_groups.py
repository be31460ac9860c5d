"""The comparison report's lm-eval group table: per group and aggregate metric, each run's value ± stderr, or the
reason the run's group has no score, or "–" where the run has no such group."""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.contracts import GroupSummary
from evalkit.store.reader import Run

NONE = "–"


@dataclass
class CompareGroupRow:
    """One group metric across the compared runs: ``cells`` one per run, in the runs' order."""

    group: str
    metric: str  # as lm-eval keys it ("acc,none"); "" for a group no run scored
    cells: list[str]


def group_cell(group: GroupSummary | None, metric: str) -> str:
    """``0.4312 ± 0.0120`` (``± N/A`` where lm-eval has no stderr); the group's reason where it has no score; "–"
    where the run has no such group or metric."""
    if group is None:
        return NONE
    m = group.metrics.get(metric)
    if m is None or m.value is None:
        return group.reason or NONE
    stderr = f"{m.stderr:.4f}" if m.stderr is not None else "N/A"
    return f"{m.value:.4f} ± {stderr}"


def compare_group_rows(runs: list[Run]) -> list[CompareGroupRow]:
    """The runs' lm-eval groups (in the order first seen), a row per aggregate metric any run has, or one row
    (metric "") for a group no run scored; [] where no run has groups."""
    per_run = [r.groups() for r in runs]
    names: list[str] = []
    for groups in per_run:
        names += [n for n in groups if n not in names]
    rows: list[CompareGroupRow] = []
    for name in names:
        metrics: list[str] = []
        for groups in per_run:
            g = groups.get(name)
            metrics += [k for k in (g.metrics if g else {}) if k not in metrics]
        for metric in metrics or [""]:
            rows.append(CompareGroupRow(name, metric, [group_cell(groups.get(name), metric) for groups in per_run]))
    return rows
