"""The single-run report's view model: banners, one view per task, latency/accuracy charts, samples."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalkit.contracts import LATENCIES, STATUSES, EndpointSummary, Percentiles, Speed, speed_metric
from evalkit.reporting.analysis import accuracy_by_length, cdf_points, length_bucket_labels, sample_values
from evalkit.reporting.banners import run_banners
from evalkit.reporting.formatting import (
    DASH,
    KV,
    Banner,
    MetricView,
    fmt_int,
    fmt_ms,
    fmt_num,
    fmt_pct,
    metric_views,
    now_iso,
)
from evalkit.reporting.load_view import LoadView, load_view
from evalkit.reporting.provenance import TaskProvenance, provenance
from evalkit.reporting.run_tables import (
    DetailView,
    GpuRow,
    LatencyRow,
    PctRow,
    SpeedCard,
    detail_view,
    economics_rows,
    gpu_rows,
    latency_rows,
    pct_rows,
    server_counters,
    speed_cards,
    speed_table,
)
from evalkit.reporting.sample_data import SampleSection, sample_section
from evalkit.reporting.timecourse import timeline, timeline_chart
from evalkit.scoring.estimators import wilson_interval
from evalkit.store.positions_file import POSITIONS
from evalkit.store.reader import Run, TaskRead, as_dict, as_int, as_list, as_num, as_str

if TYPE_CHECKING:
    from pathlib import Path

    from evalkit.reporting.numerics_view import NumericsFloor
    from evalkit.reporting.probe_view import ProbeSection

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
    ci: str
    truncated: int


def wilson_str(k: int, n: int) -> str:
    """'lo–hi' of a Wilson 95% interval for k of n."""
    lo, hi = wilson_interval(k, n)
    return f"{fmt_pct(lo)}–{fmt_pct(hi)}"


def ttft_split(server: dict[str, Any], speed: Speed | None) -> str | None:
    """Where the mean TTFT went: the server's queue and its engine before the first token (server TTFT - queue),
    and, when client and server counted the same requests, outside the engine (client TTFT - server TTFT: HTTP,
    the API server, the client)."""
    c, srv = speed.ttft_ms if speed else Percentiles(), as_dict(server.get("ttft_s"))
    client, stt = c.mean, as_num(srv.get("mean"))
    queue = as_num(as_dict(server.get("queue_s")).get("mean"))
    if client is None or stt is None or queue is None:
        return None
    inside = (
        f"{fmt_ms(queue * 1000)} in the server's queue + {fmt_ms((stt - queue) * 1000)} in its engine before the "
        "first token"
    )
    cn, sn = c.n, as_int(srv.get("n"))
    if cn is not None and cn == sn:
        outside = fmt_ms(client - stt * 1000)
        return f"{fmt_ms(client)} mean = {inside} + {outside} outside the engine (HTTP, API server, client)"
    return (
        f"server: {inside} (means over {fmt_int(sn)} requests); client: {fmt_ms(client)} mean over the "
        f"{fmt_int(cn)} requests that returned text, so the two are not subtracted"
    )


def concurrency_str(speed: Speed | None, trace: list[tuple[float, int]], manifest_concurrency: Any) -> str | None:
    """The concurrency a task ran at, with how ``auto`` got there (its trace)."""
    used = speed.concurrency if speed else None
    steps = [f"{lim} at {ts:.1f} s" for ts, lim in trace]
    asked = f" (asked: {manifest_concurrency})" if manifest_concurrency is not None else ""
    if used is None and not steps:
        return None
    text = f"{used if used is not None else '—'}{asked}"
    if len(steps) > 1:
        text += "; limit " + ", ".join(steps)
    return text


@dataclass
class EndpointRow:
    """One endpoint of a sharded run in the report's per-endpoint speed table."""

    endpoint: str
    requests: str
    errors: str
    speed: list[str]  # one per ENDPOINT_COLUMNS entry
    wall: str


# the speed columns of the per-endpoint table: catalogue key, header, how the figure is shown
ENDPOINT_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("output_tokens_per_s", "output tok/s", fmt_num),
    ("requests_per_s", "requests/s", lambda v: fmt_num(v, 3)),
    ("ttft_p50_ms", "TTFT p50", fmt_ms),
    ("tpot_p50_ms", "TPOT p50", fmt_ms),
    ("e2e_p50_ms", "E2E p50", fmt_ms),
)


def endpoint_rows(endpoints: list[EndpointSummary]) -> list[EndpointRow]:
    """The task summary's ``endpoints`` (a sharded run) as table rows; none for a run against one endpoint."""
    rows = []
    for e in endpoints:
        speed, counts = e.speed, e.counts
        rows.append(
            EndpointRow(
                endpoint=e.endpoint or "?",
                requests=fmt_int(counts.get("total")),
                errors=fmt_int(counts.get("api_error")),
                speed=[show(speed_metric(key).of(speed)) for key, _, show in ENDPOINT_COLUMNS],
                wall=f"{speed.wall_s:,.1f} s",
            )
        )
    return rows


def _server_speed(t: TaskRead, server: dict[str, Any]) -> Speed | None:
    """The client speed to set beside the server's histograms: in a sharded run the summary's ``server`` is
    one endpoint's (it names it), so that endpoint's client speed; else the task's."""
    name = server.get("endpoint")
    for e in t.endpoints:
        if name is not None and e.endpoint == name:
            return e.speed
    return t.speed


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
    steady_title: str | None  # speed.steady_state: its window, or why it has no figures
    steady_rows: list[PctRow]
    steady_extra: list[KV]
    endpoints: list[EndpointRow]
    server_endpoint: str | None  # a sharded run: whose /metrics the server section shows
    server_available: bool | None
    latency: list[LatencyRow]
    latency_bounded: bool
    server_counters: list[KV]
    server_absent: list[str]
    gpu_available: bool | None
    gpu_rows: list[GpuRow]
    gpu_extra: list[KV]
    detail: DetailView
    length_rows: list[LengthRow]
    length_unknown: int
    has_summary: bool
    load: LoadView | None = None  # requests sent on a schedule: offered/achieved, send lag, the charts


def steady_table(speed: Speed | None) -> tuple[str | None, list[PctRow], list[KV]]:
    """The steady-state window's heading, percentile rows and rates (``speed.steady_state``); no rows when it
    holds too few requests (the heading then says why), no heading for a summary without one."""
    s = speed.steady_state if speed else None
    if s is None:
        return None, [], []
    target = str(s.target)
    if s.reason:
        return f"Steady state ({target} in flight): no figures; {s.reason}.", [], []
    start, end = fmt_num(s.start_s), fmt_num(s.end_s)
    title = f"Steady state ({fmt_int(s.requests)} requests, {start}–{end} s, {target} in flight)"
    extra = [
        KV("Output tokens/s", fmt_num(s.output_tokens_per_s)),
        KV("Requests/s", fmt_num(s.requests_per_s, 3)),
        KV("Window", fmt_num(s.duration_s) + " s" if s.duration_s is not None else DASH),
    ]
    return title, pct_rows(s), extra


def task_view(run: Run, name: str, index: int) -> TaskView:
    t = run.task(name)
    counts = t.counts
    chips = [CountChip(st, counts[st]) for st in STATUSES if counts.get(st)]
    chips += [CountChip(k, v) for k, v in counts.items() if k not in STATUSES and k != "total" and v]
    speed = t.speed
    server = t.server or {}
    srows, sextra = speed_table(speed)
    steady_title, steady_rows, steady_extra = steady_table(speed)
    manifest = run.manifest_read()
    conc = concurrency_str(speed, t.concurrency_trace, manifest.concurrency)
    sextra = [KV("Concurrency", conc) if kv.key == "Concurrency" else kv for kv in sextra]
    gpu = t.gpu or {}
    sextra += economics_rows(speed, manifest.goodput_slos, manifest.pricing, gpu.get("energy"))
    split = ttft_split(server, speed)
    if split:
        sextra.append(KV("Where TTFT went", split))
    grows, gextra = gpu_rows(gpu, (manifest.server or {}).get("gpus"))
    la = accuracy_by_length(s for s in run.samples if s.get("task") == name)
    length_rows = [
        LengthRow(b.label, b.n, fmt_pct(b.accuracy), wilson_str(b.correct, b.n), b.truncated) for b in la.buckets if b.n
    ]
    available = server.get("available")
    shown = bool(server) and available is not False
    lat = latency_rows(server, _server_speed(t, server)) if shown else []
    return TaskView(
        name=name,
        anchor=f"task-{index}",
        version=t.version or manifest.task(name).version,
        metrics=metric_views(t),
        counts=chips,
        total=counts.get("total"),
        cards=speed_cards(speed, manifest.goodput_slos, manifest.pricing),
        speed_rows=srows,
        speed_extra=sextra,
        steady_title=steady_title,
        steady_rows=steady_rows,
        steady_extra=steady_extra,
        endpoints=endpoint_rows(t.endpoints),
        server_endpoint=as_str(server.get("endpoint")),
        server_available=available if isinstance(available, bool) else None,
        latency=lat,
        latency_bounded=any(r.bounded for r in lat),
        server_counters=server_counters(server) if shown else [],
        server_absent=[str(x) for x in as_list(server.get("absent"))],
        gpu_available=gpu.get("available") if isinstance(gpu.get("available"), bool) else None,
        gpu_rows=grows,
        gpu_extra=gextra,
        detail=detail_view(t.detail),
        length_rows=length_rows,
        length_unknown=la.unknown_length,
        has_summary=t.present,
        load=load_view(t.load, [s for s in run.samples if s.get("task") == name], t.load.origin_s) if t.load else None,
    )


# the latencies with a CDF chart: one value per request (the samples are read without their inter-token gaps)
CDF_LATENCIES = tuple(lat for lat in LATENCIES if lat.key != "itl_ms")


def _chart_series_cdf(run: Run, tasks: list[str], key: str) -> list[dict[str, Any]]:
    series = []
    for task in tasks:
        vals = sample_values((s for s in run.samples if s.get("task") == task and s.get("status") != "api_error"), key)
        if vals:
            series.append({"label": task, "points": cdf_points(vals)})
    return series


def run_charts(run: Run, tasks: list[str]) -> list[dict[str, Any]]:
    charts: list[dict[str, Any]] = []
    for lat in CDF_LATENCIES:
        key, title = lat.key, f"{lat.label} (ms)"
        series = _chart_series_cdf(run, tasks, key)
        if series:
            charts.append({"id": f"cdf-{key}", "kind": "cdf", "title": f"CDF of {title}", "x": title, "series": series})
    for task in tasks:
        tl = timeline([s for s in run.samples if s.get("task") == task and s.get("status") != "api_error"])
        if tl["t"]:
            trace = [list(x) for x in run.task(task).concurrency_trace]
            charts.append(
                timeline_chart(f"timeline-{task}", f"{task}: throughput and requests in flight", [(task, tl, trace)])
            )
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
class GroupView:
    """An lm-eval group in the headline: its aggregate metrics as rows (metric, value, stderr, 95% CI, n), its
    members and sizes, or why it has no score."""

    name: str
    label: str  # "lm-eval:mmlu (group of 57 tasks)"
    members: str
    rows: list[tuple[str, str, str, str, str]]
    reason: str | None


def group_views(run: Run) -> list[GroupView]:
    """The summary's lm-eval groups (through the store's reader), children before parents as lm-eval aggregates."""
    out: list[GroupView] = []
    for name, g in run.groups().items():
        rows = [
            (
                key,
                f"{m.value:.4f}" if m.value is not None else "-",
                f"{m.stderr:.4f}" if m.stderr is not None else "N/A",
                m.ci_text(),
                str(m.n),
            )
            for key, m in g.metrics.items()
        ]
        members = ", ".join(f"{t} ({g.sizes[t]})" if t in g.sizes else t for t in g.members)
        out.append(GroupView(name, f"{name} (group of {len(g.tasks)} tasks)", members, rows, g.reason))
    return out


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
    groups: list[GroupView]
    samples: SampleSection
    charts: list[dict[str, Any]]
    chart_ids: set[str]
    cdf_ids: list[str] = field(default_factory=lambda: [f"cdf-{lat.key}" for lat in CDF_LATENCIES])
    endpoint_headers: list[str] = field(default_factory=lambda: [h for _, h, _ in ENDPOINT_COLUMNS])
    numerics: list[NumericsFloor] = field(default_factory=list)  # each numerics task's noise floor
    probes: ProbeSection | None = None  # a probed load run's probes, beside a rest run's accuracy when given


def numerics_floors(run: Run) -> list[NumericsFloor]:
    """The noise floors of ``run``'s tasks holding teacher-forced positions; the numerics view (gate, scipy) is
    imported only for a run that has a positions file."""
    if not (run.path / POSITIONS).exists():
        return []
    from evalkit.reporting.numerics_view import build_numerics_floors

    return build_numerics_floors(run)


def probes_of(run: Run, rest_run: Path | None) -> ProbeSection | None:
    """The probe section of a probed load run (a workload beside scored tasks), or of any run given a rest run;
    the probe view (gate, scipy) is imported only then."""
    manifest = run.manifest_read()
    workload = any(manifest.task(n).settings.get("workload") is not None for n in manifest.tasks)
    if rest_run is None and not (workload and len(manifest.tasks) > 1):
        return None
    from evalkit.errors import EvalkitError
    from evalkit.reporting.probe_view import probe_section

    try:
        return probe_section(run, rest_run)
    except EvalkitError:
        if rest_run is not None:
            raise
        return None  # a run the gate cannot read yet (no summary: cut short): its report without the section


def build_run_view(run: Run, rest_run: Path | None = None) -> RunView:
    """The report of ``run``; ``rest_run``: a run of its probe tasks at rest, compared in the probe section."""
    names = run.task_names()
    model = run.manifest_read().model
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
        groups=group_views(run),
        samples=sample_section(run),
        charts=charts,
        chart_ids={c["id"] for c in charts},
        numerics=numerics_floors(run),
        probes=probes_of(run, rest_run),
    )
