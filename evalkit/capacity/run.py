"""``evalkit capacity``: the settings checked, the search run over load points (:mod:`evalkit.capacity.points`,
:mod:`evalkit.capacity.search`), and the capacity dir written: the points' run dirs, ``capacity.json`` and
``capacity.html``."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.capacity.points import POINTS_DIR, PointPlan, RunBench, level_figures
from evalkit.capacity.search import SearchResult, SearchSettings, deciding, decision_rule, search
from evalkit.config import RunConfig, load_config
from evalkit.config.slos import parse_slos
from evalkit.contracts import CapacityDecision, CapacityPoint, CapacityRecord, LoadFigures, ServerIdentity
from evalkit.contracts.capacity import SearchKind
from evalkit.errors import ConfigError
from evalkit.reporting.capacity_view import write_capacity_page
from evalkit.scoring.goodput import per_unit, usd_per_second
from evalkit.store.capacity_dir import CAPACITY, write_capacity
from evalkit.store.reader import open_run
from evalkit.version import __version__

DEFAULT_POINT_DURATION_S = 60.0
DEFAULT_WARMUP = 16
# run settings a capacity search sets per point itself (the flags that replace them, for the error line)
SET_PER_POINT = {
    "request_rate": "--start-rate", "duration_s": "--point-duration", "output_dir": "-o",
    "ramp_up_start_rps": "--start-rate", "ramp_up_end_rps": "--start-rate",
}  # fmt: skip


@dataclass(frozen=True)
class CapacityOptions:
    """What ``evalkit capacity`` asks besides the run settings of its points."""

    out: Path
    goodput: Sequence[str]  # --goodput KEY:MS, as evalkit run takes them
    slo_share: float = 0.99
    search: SearchKind = "rate"
    start: float | None = None  # --start-rate / --start-concurrency (default 1)
    tolerance: float = 0.05
    point_duration_s: float | None = None  # default DEFAULT_POINT_DURATION_S unless point_requests
    point_requests: int | None = None
    max_duration_s: float | None = None
    warmup: int = DEFAULT_WARMUP
    fresh: bool = False


def check_options(o: CapacityOptions) -> tuple[dict[str, float], SearchSettings, PointPlan]:
    """The SLOs, the search's settings and the points' plan; ConfigError (one line, naming the fix) otherwise."""
    if not o.goodput:
        raise ConfigError("evalkit capacity needs the SLOs: give --goodput ttft:MS and/or --goodput tpot:MS")
    try:
        slos = parse_slos(list(o.goodput))
    except ValueError as e:
        raise ConfigError(f"--goodput: {e}") from None
    if not slos:
        raise ConfigError("evalkit capacity needs the SLOs: give --goodput ttft:MS and/or --goodput tpot:MS")
    if not (math.isfinite(o.slo_share) and 0 < o.slo_share <= 1):
        raise ConfigError(f"--slo-share {o.slo_share:g} is not a share; give a number in (0, 1], e.g. 0.99")
    if not (math.isfinite(o.tolerance) and 0.001 <= o.tolerance < 1):
        raise ConfigError(f"--tolerance {o.tolerance:g} is out of range; give 0.001 to 0.99 (e.g. 0.05 = 5%)")
    start = o.start if o.start is not None else 1.0
    if not (math.isfinite(start) and start > 0) or (o.search == "concurrency" and start != int(start)):
        want = "a whole number of requests in flight >= 1" if o.search == "concurrency" else "requests/s > 0"
        raise ConfigError(f"start load {start:g} is not valid: give {want}")
    if o.point_duration_s is not None and o.point_requests is not None:
        raise ConfigError("give either --point-duration or --point-requests, not both")
    duration = o.point_duration_s if o.point_requests is None else None
    if duration is None and o.point_requests is None:
        duration = DEFAULT_POINT_DURATION_S
    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise ConfigError(f"--point-duration {duration:g} must be a positive time, e.g. 60s")
    if o.point_requests is not None and o.point_requests < 1:
        raise ConfigError(f"--point-requests {o.point_requests} must be >= 1")
    if o.max_duration_s is not None and not (math.isfinite(o.max_duration_s) and o.max_duration_s > 0):
        raise ConfigError(f"--max-duration {o.max_duration_s:g} must be a positive time, e.g. 30m")
    settings = SearchSettings(kind=o.search, start=start, slo_share=o.slo_share, tolerance=o.tolerance)
    plan = PointPlan(
        kind=o.search, slos=slos, slo_share=o.slo_share, duration_s=duration, requests=o.point_requests,
        warmup=o.warmup, max_duration_s=o.max_duration_s,
    )  # fmt: skip
    return slos, settings, plan


def base_config(names: Sequence[str], settings: dict[str, Any], config: Path | None, o: CapacityOptions) -> RunConfig:
    """The run settings every point shares (each point sets its own load, length and run dir)."""
    given = {k: v for k, v in settings.items() if v is not None}
    for key, flag in SET_PER_POINT.items():
        if key in given:
            raise ConfigError(f"evalkit capacity sets each point's {key} itself; drop it (see {flag})")
    if o.search == "concurrency" and given.get("concurrency") is not None:
        raise ConfigError("--search concurrency sets each point's --concurrency itself; drop --concurrency")
    if len(names) != 1:
        raise ConfigError(
            f"evalkit capacity measures one load: give one task or workload, not {len(names)} "
            "(mix other tasks into a workload with --probe TASK:SHARE)"
        )
    return load_config({"tasks": list(names), **given, "report": settings.get("report")}, config)


def run_capacity(
    names: Sequence[str],
    o: CapacityOptions,
    *,
    config: Path | None = None,
    argv: list[str] | None = None,
    on_point: Callable[[CapacityPoint], None] | None = None,
    **settings: Any,
) -> CapacityRecord:
    """Search for the highest load meeting the SLOs; write the capacity dir ``o.out``; return its record."""
    slos, s, plan = check_options(o)
    base = base_config(names, settings, config, o)
    base.check_arrivals()
    gpus = base.billed_gpus()  # a price with no GPU count is refused before anything runs
    out = Path(o.out)
    if (out / CAPACITY).exists() and not o.fresh:
        raise ConfigError(f"{out} already holds a capacity search ({CAPACITY}); give another -o DIR or --fresh")
    if o.fresh and (out / POINTS_DIR).is_dir():
        shutil.rmtree(out / POINTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    created = _now()
    bench = RunBench(base, out, plan, argv=argv or ["evalkit", "capacity"], on_point=on_point)
    try:
        result = search(s, bench)
    finally:
        bench.close()
    record = _record(base, o, s, slos, result, bench, gpus, created)
    write_capacity(out, record)
    if base.report:
        write_capacity_page(out)
    return record


def _record(
    base: RunConfig,
    o: CapacityOptions,
    s: SearchSettings,
    slos: dict[str, float],
    r: SearchResult,
    bench: RunBench,
    gpus: int | None,
    created: str,
) -> CapacityRecord:
    task = base.tasks[0]
    curve = []
    for level, measured in sorted(bench.runs.items()):
        used = deciding([p for _, p in measured])
        dirs = [(d, task) for d, p in measured if p in used]
        curve.append(level_figures(level, dirs, slos, s.slo_share).figures)
    at: LoadFigures | None = next((c for c in curve if r.low is not None and c.offered == r.low), None)
    answer = r.low if r.status in ("ok", "max_duration") else None
    cost = None
    if base.cost_per_gpu_hour is not None and gpus and at is not None:
        cost = per_unit(usd_per_second(base.cost_per_gpu_hour, gpus), at.output_tokens_per_s, 1e6)
    return CapacityRecord(
        status=r.status,
        reason=r.reason,
        search=s.kind,
        slos=slos,
        slo_share=s.slo_share,
        tolerance=s.tolerance,
        start=s.start,
        capacity_rps=answer if s.kind == "rate" else None,
        capacity_concurrency=int(answer) if s.kind == "concurrency" and answer is not None else None,
        bracket=[r.low, r.high] if (r.low, r.high) != (None, None) else None,
        at_capacity=at if answer is not None else None,
        cost_per_gpu_hour=base.cost_per_gpu_hour,
        cost_per_million_output_tokens=cost if answer is not None else None,
        points=r.points,
        curve=curve,
        decision=CapacityDecision(
            rule=decision_rule(s),
            bracket_steps=r.bracket_steps,
            bisect_steps=r.bisect_steps,
            repeats=r.repeats,
            points=len(r.points),
            grid_points=r.grid_points(s),
        ),
        point_duration_s=bench.plan.duration_s,
        point_requests=bench.plan.requests,
        warmup_requests=bench.plan.warmup,
        max_duration_s=o.max_duration_s,
        tasks=list(base.tasks),
        workload=_workload(base),
        server=_server(base, bench, gpus),
        created_at=created,
        finished_at=_now(),
        evalkit_version=__version__,
    )


def _workload(base: RunConfig) -> dict[str, Any]:
    """The load's identity: the workload settings (less the per-point request count) and the arrival process."""
    out: dict[str, Any] = base.workload.model_dump(mode="json", exclude={"num_prompts"})
    out |= {"arrival": base.arrival or "poisson", "burstiness": base.burstiness, "seed": base.seed}
    out |= {k: v for k in ("limit", "max_tokens", "temperature") if (v := getattr(base, k)) is not None}
    return out


def _server(base: RunConfig, bench: RunBench, gpus: int | None) -> ServerIdentity:
    """The endpoint, model and started server (``--serve``: its provenance) as the first measured point's
    manifest records them (credentials and secrets redacted there), and the GPUs billed."""
    for measured in bench.runs.values():
        manifest = open_run(measured[0][0], with_samples=False).manifest_read()
        endpoint = manifest.endpoint.base_url if manifest.endpoint is not None else None
        return ServerIdentity(endpoint=endpoint, model=manifest.model, serve=manifest.server, gpus=gpus)
    return ServerIdentity(model=base.server.model if base.server is not None else base.model, gpus=gpus)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
