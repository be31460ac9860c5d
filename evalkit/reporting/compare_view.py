"""The comparison report's view model: config diff, speed/accuracy table with the Pareto front, scatter
charts and (through :mod:`evalkit.reporting.flips`) per-request flips between two runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalkit.contracts import Speed, speed_metric
from evalkit.gating.servers import server_note
from evalkit.reporting.analysis import pareto_front
from evalkit.reporting.compare_groups import CompareGroupRow, compare_group_rows
from evalkit.reporting.economics_view import economics_scatters
from evalkit.reporting.flips import CompareRunHead, FlipsView, flips_view
from evalkit.reporting.formatting import (
    DASH,
    KV,
    NOT_SET,
    Banner,
    MetricView,
    compact_json,
    fmt_ms,
    fmt_num,
    letter,
    metric_label,
    metric_views,
    now_iso,
)
from evalkit.reporting.numerics_view import NumericsCompare, build_numerics_sections
from evalkit.reporting.provenance import argv_str, endpoints_str, gpu_summary, parse_argv
from evalkit.reporting.sides import Sides, colour_scatters_by_side, side_flips, side_timelines
from evalkit.reporting.timecourse import timeline, timeline_chart
from evalkit.reporting.verdict_view import Decision, VerdictView
from evalkit.store.reader import Run, as_dict, as_num


def run_config(run: Run) -> dict[str, str]:
    """A flat {setting: value} of what shapes a run's numbers: server flags, env, sampling, versions."""
    m = run.manifest_read()
    cfg: dict[str, str] = {}

    def put(k: str, v: Any) -> None:
        if v is not None:
            cfg[k] = compact_json(v)

    put("model", m.model)
    server = m.server or {}
    # a server evalkit started listens on a free port: its URL and --port are noise, not config
    host = None if server.get("argv") else endpoints_str(m)
    put("endpoint", " ".join(x for x in (m.endpoint.kind if m.endpoint else None, host) if x) or None)
    put("concurrency", m.concurrency)
    put("server version", server.get("version") or server.get("vllm_version"))
    put("server kv_cache_tokens", server.get("kv_cache_tokens"))
    put("vllm (client)", m.versions.get("vllm"))
    put("gpu", gpu_summary(server.get("gpus")))
    pos, flags = parse_argv(server.get("argv"))
    if pos:
        put("server args", " ".join(pos))
    for k, v in flags.items():
        if k != "--port":
            put(k, v)
    for k, v in as_dict(server.get("env_overrides")).items():
        put(f"env {k}", v)
    for task, t in m.tasks.items():
        for k, v in t.settings.items():
            put(f"{task}.{k}", NOT_SET if v is None else v)
    put("evalkit", m.evalkit_version)
    return cfg


@dataclass
class CompareCell:
    metric: MetricView | None
    delta: str = ""


@dataclass
class CompareRow:
    index: int
    letter: str
    label: str
    present: bool
    diff: list[KV]
    concurrency: str
    speed: list[SpeedCell]
    cells: list[CompareCell]
    on_front: bool
    counts: str


@dataclass
class CompareTask:
    name: str
    anchor: str
    speed_labels: list[str]
    metric_labels: list[str]
    primary: str | None
    primary_label: str
    rows: list[CompareRow]
    front: list[str]  # labels on the Pareto front


@dataclass
class CompareView:
    title: str
    generated_at: str
    runs: list[CompareRunHead]
    common: list[KV]
    banners: list[Banner]
    tasks: list[CompareTask]
    flips: FlipsView | None
    charts: list[dict[str, Any]]
    chart_ids: set[str]
    verdict: VerdictView | None = None  # the release gate's rules, for two runs or two sides
    decision: Decision | None = None  # what a decision page opens with
    sides: Sides | None = None  # baseline and candidate runs, on a decision page
    numerics: list[NumericsCompare] = field(default_factory=list)  # teacher-forced divergence of the pair
    groups: list[CompareGroupRow] = field(default_factory=list)  # lm-eval group aggregates, where the runs have them


def unique_labels(runs: list[Run]) -> list[str]:
    labels = [r.label for r in runs]
    counts = Counter(labels)
    out = []
    for r in runs:
        lab = r.label
        if counts[lab] > 1:
            lab = f"{r.path.resolve().parent.name}/{lab}"
        out.append(lab)
    seen: Counter[str] = Counter()
    final = []
    for lab in out:
        seen[lab] += 1
        final.append(lab if seen[lab] == 1 and out.count(lab) == 1 else f"{lab} ({seen[lab]})")
    return final


@dataclass
class Delta:
    text: str = ""
    verdict: str = ""  # "better" | "worse" | "" (no change or no base)


@dataclass
class SpeedCell:
    value: str
    delta: Delta


# the speed columns of a comparison: catalogue key (header: its ``short``; better: its ``direction``), formatter
SPEED_COLUMNS: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("output_tokens_per_s", fmt_num),
    ("requests_per_s", lambda v: fmt_num(v, 2)),
    ("ttft_p50_ms", fmt_ms),
    ("ttft_p99_ms", fmt_ms),
    ("tpot_p50_ms", fmt_ms),
    ("tpot_p99_ms", fmt_ms),
)


def speed_cells(speed: Speed | None, base: Speed | None, compared: bool) -> list[SpeedCell]:
    """The speed columns of one run, with the change against ``base`` (run A; ``compared``: a later run)
    coloured better or worse."""
    cells = []
    for key, fmt in SPEED_COLUMNS:
        m = speed_metric(key)
        v, b = m.of(speed), m.of(base)
        cells.append(SpeedCell(fmt(v), _rel_delta(v, b, not m.lower_is_better) if compared else Delta()))
    return cells


def _rel_delta(v: Any, base: Any, higher_is_better: bool) -> Delta:
    x, b = as_num(v), as_num(base)
    if x is None or b is None or b == 0:
        return Delta()
    change = (x - b) / abs(b)
    verdict = "" if abs(change) < 0.005 else ("better" if (change > 0) == higher_is_better else "worse")
    return Delta(f"{100 * change:+.1f}%", verdict)


def _concurrency(speed: Speed | None, trace: list[tuple[float, int]]) -> str:
    """The concurrency a run used, and the steps ``auto`` took to it."""
    used = speed.concurrency if speed else None
    text = str(used) if used is not None else DASH
    if len(trace) > 1:
        text += " (" + " → ".join(f"{lim} at {ts or 0:.1f} s" for ts, lim in trace) + ")"
    return text


def _acc_delta(m: MetricView | None, base: MetricView | None) -> str:
    if m is None or base is None or m.value is None or base.value is None:
        return ""
    if m.is_fraction and base.is_fraction:
        return f"{100 * (m.value - base.value):+.1f} pp"
    return f"{m.value - base.value:+.4g}"


def _counts_str(counts: dict[str, int]) -> str:
    statuses = ("api_error", "empty", "no_answer", "truncated")
    return ", ".join(f"{st} {counts[st]:,}" for st in statuses if counts.get(st))


def compare_banners(runs: list[Run], labels: list[str]) -> list[Banner]:
    out: list[Banner] = []
    for run, lab in zip(runs, labels, strict=True):
        for note in run.notes:
            out.append(Banner("warn", f"{lab}: {note}"))
        for t in run.tasks():
            if t.speed is not None and t.speed.client_bound is True:
                out.append(Banner("warn", f"{lab} / {t.name}: client-bound; its speed numbers are lower bounds."))
    base_server = runs[0].manifest_read().server if runs else None
    for run, lab in zip(runs[1:], labels[1:], strict=True):
        differ = server_note(base_server, run.manifest_read().server, f"{labels[0]} vs {lab}")
        if differ is not None:
            out.append(Banner("warn", f"{differ}."))
    tasks: dict[str, list[tuple[str, str, str]]] = {}
    for run, lab in zip(runs, labels, strict=True):
        for name, mt in run.manifest_read().tasks.items():
            sha = compact_json(mt.data_sha256) if mt.data_sha256 else ""
            tasks.setdefault(name, []).append((lab, mt.version or "", sha))
    for name, entries in tasks.items():
        if len({e[1] for e in entries}) > 1:
            out.append(
                Banner(
                    "warn",
                    f"{name}: runs used different task versions ("
                    + ", ".join(f"{e[0]}: {e[1] or '?'}" for e in entries)
                    + ").",
                )
            )
        if len({e[2] for e in entries if e[2]}) > 1:
            out.append(
                Banner(
                    "warn",
                    f"{name}: runs used different data (data_sha256 differs); accuracy is not comparable.",
                )
            )
    return out


def build_compare_view(runs: list[Run], pair: tuple[int, int] | None, sides: Sides | None = None) -> CompareView:
    """The comparison of ``runs``; with ``sides`` of several runs each, flips and charts compare the sides."""
    labels = unique_labels(runs)
    configs = [run_config(r) for r in runs]
    keys: list[str] = []
    for c in configs:
        for k in c:
            if k not in keys:
                keys.append(k)
    differing = [k for k in keys if len({c.get(k) for c in configs}) > 1]
    common = [KV(k, configs[0][k], mono=True) for k in keys if k not in differing]
    heads = []
    for i, (run, lab, cfg) in enumerate(zip(runs, labels, configs, strict=True)):
        manifest = run.manifest_read()
        heads.append(
            CompareRunHead(
                index=i,
                letter=letter(i),
                label=lab,
                model=manifest.model,
                diff=[KV(k, cfg.get(k, DASH), mono=True) for k in differing],
                argv=argv_str((manifest.server or {}).get("argv")),
                notes=run.notes,
            )
        )
    task_names: list[str] = []
    for r in runs:
        for n in r.task_names():
            if n not in task_names and r.task(n).listed:
                task_names.append(n)
    tasks: list[CompareTask] = []
    charts: list[dict[str, Any]] = []
    for ti, name in enumerate(task_names):
        metric_names: list[str] = []
        for r in runs:
            for k in r.task(name).metrics:
                if k not in metric_names:
                    metric_names.append(k)
        primary = metric_names[0] if metric_names else None
        base_t = runs[0].task(name)
        base_speed = base_t.speed
        base_metrics = {mv.name: mv for mv in metric_views(base_t)}
        points: list[tuple[float | None, float | None]] = []
        rows: list[CompareRow] = []
        for i, (run, lab) in enumerate(zip(runs, labels, strict=True)):
            t = run.task(name)
            speed = t.speed
            mvs = {mv.name: mv for mv in metric_views(t)}
            pm = mvs.get(primary) if primary else None
            points.append((speed.output_tokens_per_s if speed else None, pm.value if pm else None))
            # only the config keys of this task (or global) that differ
            diff = [kv for kv in heads[i].diff if "." not in kv.key or kv.key.startswith(f"{name}.")]
            rows.append(
                CompareRow(
                    index=i,
                    letter=letter(i),
                    label=lab,
                    present=t.listed,
                    diff=diff,
                    concurrency=_concurrency(speed, t.concurrency_trace),
                    speed=speed_cells(speed, base_speed, compared=i > 0),
                    cells=[
                        CompareCell(mvs.get(k), _acc_delta(mvs.get(k), base_metrics.get(k)) if i else "")
                        for k in metric_names
                    ],
                    on_front=False,
                    counts=_counts_str(t.counts),
                )
            )
        front = pareto_front(points)
        for i in front:
            rows[i].on_front = True
        anchor = f"cmp-{ti}"
        tasks.append(
            CompareTask(
                name=name,
                anchor=anchor,
                speed_labels=[speed_metric(key).short for key, _ in SPEED_COLUMNS],
                metric_labels=[metric_label(k) for k in metric_names],
                primary=primary,
                primary_label=metric_label(primary) if primary else DASH,
                rows=rows,
                front=[labels[i] for i in front],
            )
        )
        series = side_timelines(runs, sides, name) if sides is not None and sides.pooled else []
        for i, run in enumerate(runs if not series else []):
            tl = timeline([s for s in run.samples if s.get("task") == name and s.get("status") != "api_error"])
            trace = [list(x) for x in run.task(name).concurrency_trace]
            if tl["t"]:
                series.append((f"{letter(i)} {labels[i]}", tl, trace))
        if series:
            charts.append(timeline_chart(f"timeline-{ti}", f"{name}: throughput and requests in flight", series))
        pts = []
        econ: list[tuple[str, Speed | None, float | None, Any, Any]] = []  # the same points, for economics_scatters
        for i, ((x, y), row) in enumerate(zip(points, rows, strict=True)):
            if x is None or y is None:
                continue
            mv = row.cells[0].metric if row.cells else None
            frac = mv.is_fraction if mv else True
            scale = 100.0 if frac else 1.0
            lo = round(mv.lo * scale, 4) if mv and mv.lo is not None else None
            hi = round(mv.hi * scale, 4) if mv and mv.hi is not None else None
            label = f"{letter(i)} {labels[i]}"
            pts.append(
                {"label": label, "x": round(x, 3), "y": round(y * scale, 4), "lo": lo, "hi": hi, "front": i in front}
            )
            econ.append((label, runs[i].task(name).speed, round(y * scale, 4), lo, hi))
        if pts:
            frac0 = all(r.cells[0].metric.is_fraction for r in rows if r.cells and r.cells[0].metric)
            y_label = f"{metric_label(primary or '')}{' (%)' if frac0 else ''}"
            charts += economics_scatters(ti, f"{name}: {metric_label(primary or '')}", y_label, econ)
            charts.append(
                {
                    "id": f"scatter-{ti}",
                    "kind": "scatter",
                    "title": f"{name}: {metric_label(primary or '')} vs output throughput",
                    "x": "output tokens/s",
                    "y": f"{metric_label(primary or '')}{' (%)' if frac0 else ''}",
                    "points": pts,
                    "front": [
                        {
                            "x": round(points[i][0] or 0.0, 3),
                            "y": round((points[i][1] or 0.0) * (100 if frac0 else 1), 4),
                        }
                        for i in front
                    ],
                }
            )
    flips = None
    numerics: list[NumericsCompare] = []
    if sides is not None and sides.pooled:
        point_sides = {f"{letter(i)} {labels[i]}": sides.side_of(i) for i in range(len(runs))}
        colour_scatters_by_side(charts, point_sides, sides)
        flips = side_flips(runs, sides, heads)
        numerics = build_numerics_sections(runs, (sides.runs[0][0], sides.runs[1][0]), task_names)
    elif len(runs) >= 2:
        a, b = pair if pair is not None else (sides.runs[0][0], sides.runs[1][0]) if sides else (0, 1)
        flips = flips_view(runs[a], runs[b], heads[a], heads[b])
        numerics = build_numerics_sections(runs, (a, b), task_names)
    return CompareView(
        title="evalkit comparison · " + " vs ".join(labels[:4]) + (" …" if len(labels) > 4 else ""),
        generated_at=now_iso(),
        runs=heads,
        common=common,
        banners=compare_banners(runs, labels),
        tasks=tasks,
        flips=flips,
        charts=charts,
        chart_ids={c["id"] for c in charts},
        numerics=numerics,
        groups=compare_group_rows(runs),
        sides=sides,
    )
