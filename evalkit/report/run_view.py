"""The single-run report's view model: banners, one view per task, latency/accuracy charts, samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.report.analysis import accuracy_by_length, cdf_points, length_bucket_labels, sample_values
from evalkit.report.common import (
    KV,
    STATUSES,
    Banner,
    MetricView,
    compact_json,
    fmt_pct,
    metric_views,
    now_iso,
)
from evalkit.report.provenance import TaskProvenance, provenance
from evalkit.report.run_tables import (
    DetailView,
    GpuRow,
    PctRow,
    ServerRow,
    SpeedCard,
    detail_view,
    gpu_rows,
    server_rows,
    speed_cards,
    speed_table,
)
from evalkit.report.samples import SampleSection, sample_section
from evalkit.report.store import RunData, as_dict, as_int, as_list, as_num, as_str

# ----------------------------------------------------------------------------------------------------------
# Banners


def run_banners(run: RunData) -> list[Banner]:
    out: list[Banner] = []
    for note in run.notes:
        out.append(Banner("warn", note))
    for name, t in run.summary_tasks.items():
        speed = as_dict(t.get("speed"))
        if speed.get("client_bound") is True:
            lag = as_num(speed.get("loop_lag_ms_p99"))
            cpu = as_num(speed.get("client_cpu_s"))
            wall = as_num(speed.get("wall_s"))
            detail = []
            if lag is not None:
                detail.append(f"event-loop lag p99 {lag:.1f} ms")
            if cpu is not None and wall is not None:
                detail.append(f"client CPU {cpu:.1f} s over {wall:.1f} s wall")
            extra = f" ({'; '.join(detail)})" if detail else ""
            out.append(
                Banner(
                    "warn",
                    f"{name}: the client was the bottleneck{extra}. Speed numbers are lower bounds for the "
                    "server; rerun with lower concurrency or a faster client machine.",
                )
            )
        counts = as_dict(t.get("counts"))
        total = as_int(counts.get("total"))
        of = f" of {total:,}" if total is not None else ""
        errors = as_int(counts.get("api_error")) or 0
        if errors > 0:
            out.append(Banner("warn", f"{name}: {errors:,}{of} requests failed (api_error) and were not scored."))
        truncated = as_int(counts.get("truncated")) or 0
        if truncated > 0:
            out.append(
                Banner(
                    "warn",
                    f"{name}: {truncated:,}{of} responses were truncated at max_tokens (finish_reason "
                    "length); they are scored as they are.",
                )
            )
    for name, t in run.manifest_tasks.items():
        clamp = t.get("max_tokens_clamp")
        if clamp:
            out.append(Banner("info", f"{name}: max_tokens was clamped: {compact_json(clamp)}"))
    return out


# ----------------------------------------------------------------------------------------------------------
# Single-run report


@dataclass
class CountChip:
    status: str
    count: int


@dataclass
class LengthRow:
    label: str
    n: int
    accuracy: str
    truncated: int


@dataclass
class TaskView:
    name: str
    anchor: str
    version: str | None
    metrics: list[MetricView]
    counts: list[CountChip]
    total: int | None
    cards: list[SpeedCard]
    speed_rows: list[PctRow]
    speed_extra: list[KV]
    server_available: bool | None
    server_rows: list[ServerRow]
    server_absent: list[str]
    gpu_rows: list[GpuRow]
    gpu_extra: list[KV]
    detail: DetailView
    length_rows: list[LengthRow]
    length_unknown: int
    has_summary: bool


def task_view(run: RunData, name: str, index: int) -> TaskView:
    t = run.summary_tasks.get(name, {})
    counts = as_dict(t.get("counts"))
    chips = [CountChip(st, as_int(counts.get(st)) or 0) for st in STATUSES if as_int(counts.get(st))]
    chips += [
        CountChip(str(k), as_int(v) or 0) for k, v in counts.items() if k not in STATUSES and k != "total" and as_int(v)
    ]
    speed = as_dict(t.get("speed"))
    server = as_dict(t.get("server"))
    srows, sextra = speed_table(speed)
    grows, gextra = gpu_rows(as_dict(t.get("gpu")), as_dict(run.manifest.get("server")).get("gpus"))
    la = accuracy_by_length(s for s in run.samples if s.get("task") == name)
    length_rows = [LengthRow(b.label, b.n, fmt_pct(b.accuracy), b.truncated) for b in la.buckets if b.n]
    available = server.get("available")
    return TaskView(
        name=name,
        anchor=f"task-{index}",
        version=as_str(t.get("version") or run.manifest_tasks.get(name, {}).get("version")),
        metrics=metric_views(t),
        counts=chips,
        total=as_int(counts.get("total")),
        cards=speed_cards(speed),
        speed_rows=srows,
        speed_extra=sextra,
        server_available=available if isinstance(available, bool) else None,
        server_rows=server_rows(server, speed) if server and available is not False else [],
        server_absent=[str(x) for x in as_list(server.get("absent"))],
        gpu_rows=grows if as_dict(t.get("gpu")) else [],
        gpu_extra=gextra,
        detail=detail_view(t.get("detail")),
        length_rows=length_rows,
        length_unknown=la.unknown_length,
        has_summary=bool(t),
    )


def _chart_series_cdf(run: RunData, tasks: list[str], key: str) -> list[dict[str, Any]]:
    series = []
    for task in tasks:
        vals = sample_values((s for s in run.samples if s.get("task") == task and s.get("status") != "api_error"), key)
        if vals:
            series.append({"label": task, "points": cdf_points(vals)})
    return series


def run_charts(run: RunData, tasks: list[str]) -> list[dict[str, Any]]:
    charts: list[dict[str, Any]] = []
    for key, title in (("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("e2e_ms", "E2E latency (ms)")):
        series = _chart_series_cdf(run, tasks, key)
        if series:
            charts.append({"id": f"cdf-{key}", "kind": "cdf", "title": f"CDF of {title}", "x": title, "series": series})
    labels = length_bucket_labels()
    datasets = []
    used: set[int] = set()
    for task in tasks:
        la = accuracy_by_length(s for s in run.samples if s.get("task") == task)
        if not any(b.n for b in la.buckets):
            continue
        values = [round(100 * b.accuracy, 2) if b.accuracy is not None else None for b in la.buckets]
        used |= {i for i, b in enumerate(la.buckets) if b.n}
        datasets.append({"label": task, "values": values, "n": [b.n for b in la.buckets]})
    if datasets:
        keep = sorted(used)
        for d in datasets:
            d["values"] = [d["values"][i] for i in keep]
            d["n"] = [d["n"][i] for i in keep]
        charts.append(
            {
                "id": "acc-length",
                "kind": "bar",
                "title": "Accuracy by output length",
                "x": "output tokens",
                "y": "accuracy (%)",
                "labels": [labels[i] for i in keep],
                "series": datasets,
            }
        )
    return charts


@dataclass
class RunView:
    title: str
    model: str | None
    label: str
    generated_at: str
    banners: list[Banner]
    provenance: list[KV]
    task_provenance: list[TaskProvenance]
    tasks: list[TaskView]
    samples: SampleSection
    charts: list[dict[str, Any]]
    chart_ids: set[str]


def build_run_view(run: RunData) -> RunView:
    names = run.task_names()
    model = as_str(run.manifest.get("model"))
    prov, tprov = provenance(run)
    charts = run_charts(run, names)
    return RunView(
        title=f"{model or run.label} · evalkit report",
        model=model,
        label=run.label,
        generated_at=now_iso(),
        banners=run_banners(run),
        provenance=prov,
        task_provenance=tprov,
        tasks=[task_view(run, n, i) for i, n in enumerate(names)],
        samples=sample_section(run),
        charts=charts,
        chart_ids={c["id"] for c in charts},
    )
