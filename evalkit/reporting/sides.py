"""The two sides of a decision page (baseline runs, candidate runs), for a gate of several runs a side: the flips
pooled over the runs as the gate's rules pool them (the i-th baseline run paired with the i-th candidate run),
throughput over time as each side's mean, and scatter points coloured by side with a legend instead of labels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.reporting.flips import CompareRunHead, FlipsView, flips_view
from evalkit.reporting.timecourse import timeline
from evalkit.store.reader import Run, as_int, as_num

SIDE_ROLES = ("baseline", "candidate")


@dataclass
class Sides:
    """Which runs of the page are the baseline (``runs[0]``, indices) and which the candidate (``runs[1]``), and
    the sides' names (a side of several runs: their common parent, :func:`evalkit.gating.gate_runs.side_label`)."""

    names: tuple[str, str]
    runs: tuple[list[int], list[int]]

    @property
    def pooled(self) -> bool:
        """Whether a side holds several runs (then the page compares sides, not runs)."""
        return any(len(r) > 1 for r in self.runs)

    def side_of(self, index: int) -> int:
        """0 for a baseline run, 1 for a candidate run."""
        return 0 if index in self.runs[0] else 1

    def title(self, side: int) -> str:
        """``baseline base (3 runs)``."""
        n = len(self.runs[side])
        return f"{SIDE_ROLES[side]} {self.names[side]}" + (f" ({n} runs)" if n > 1 else "")


def sample_stride(runs: list[Run]) -> int:
    """One more than the largest sample_index of any run: the spacing that keeps pooled runs' samples apart."""
    return 1 + max((as_int(s.get("sample_index")) or 0 for r in runs for s in r.samples), default=0)


def side_samples(runs: list[Run], stride: int) -> list[dict[str, Any]]:
    """The samples of a side's runs as one run's: run i's sample k becomes sample ``i * stride + k``, so that the
    i-th runs of two sides pair up request by request, and per problem every run's samples count (as the gate's
    :func:`~evalkit.gating.engine.combine_runs` pools them)."""
    out = []
    for i, run in enumerate(runs):
        for s in run.samples:
            out.append({**s, "sample_index": i * stride + (as_int(s.get("sample_index")) or 0)})
    return out


def side_flips(runs: list[Run], sides: Sides, heads: list[CompareRunHead]) -> FlipsView:
    """The flips from the baseline side to the candidate side, pooled over each side's runs."""
    members = [[runs[i] for i in sides.runs[side]] for side in (0, 1)]
    stride = sample_stride([*members[0], *members[1]])
    side_heads = []
    for side in (0, 1):
        first = heads[sides.runs[side][0]]
        label = f"{sides.names[side]} ({', '.join(heads[i].label for i in sides.runs[side])})"
        side_heads.append(CompareRunHead(-1, SIDE_ROLES[side], label, first.model, [], None, []))
    samples = (side_samples(members[0], stride), side_samples(members[1], stride))
    return flips_view(members[0][0], members[1][0], side_heads[0], side_heads[1], samples, stride)


def side_timelines(runs: list[Run], sides: Sides, task: str) -> list[tuple[str, dict[str, list[float]], list[Any]]]:
    """Per side, output tok/s and requests in flight over time as the mean of its runs (each run's clock from its
    own first request), for :func:`~evalkit.reporting.timecourse.timeline_chart`."""
    series: list[tuple[str, dict[str, list[float]], list[Any]]] = []
    for side in (0, 1):
        pooled: list[dict[str, Any]] = []
        for i in sides.runs[side]:
            mine = [s for s in runs[i].samples if s.get("task") == task and s.get("status") != "api_error"]
            starts = [x for s in mine if (x := as_num(s.get("start_s"))) is not None]
            t0 = min(starts, default=0.0)
            pooled += [{**s, "start_s": x - t0} for s in mine if (x := as_num(s.get("start_s"))) is not None]
        tl = timeline(pooled)
        n = len(sides.runs[side])
        if tl["t"]:
            tl = {"t": tl["t"], **{k: [round(x / n, 2) for x in tl[k]] for k in ("tok_s", "in_flight")}}
            series.append(
                (f"{SIDE_ROLES[side]} {sides.names[side]}" + (f" (mean of {n} runs)" if n > 1 else ""), tl, [])
            )
    return series


def colour_scatters_by_side(charts: list[dict[str, Any]], labels: dict[str, int], sides: Sides) -> None:
    """Give each scatter point its side (``side``: 0 or 1, from its run's ``labels``) and the chart the sides'
    names (``sides``): the page draws one colour per side with a legend, and no per-point labels to overlap."""
    for chart in charts:
        if chart.get("kind") != "scatter":
            continue
        chart["sides"] = [sides.title(0), sides.title(1)]
        for p in chart["points"]:
            p["side"] = labels.get(p["label"], 1)
