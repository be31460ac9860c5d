"""Load points as ordinary runs: :class:`RunBench` measures one load level by running the search's task through
the :class:`~evalkit.runner.Runner`, exactly as ``evalkit run TASK --request-rate R --duration D`` (or
``--concurrency N``) would, into a run dir under the capacity dir, warm-up included; the server (``--serve``)
starts with the first point and serves them all. A point's figures come from its run dir, read back through the
store (:func:`level_figures`: the requests of a level's measurements pooled)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.capacity.search import Step
from evalkit.config import RunConfig
from evalkit.contracts import CapacityPoint, LoadFigures, SampleRecord
from evalkit.contracts.capacity import SearchKind
from evalkit.errors import EvalkitError
from evalkit.runner import Runner
from evalkit.runner.plan import lm_eval_expanded
from evalkit.runner.worker import Worker, WorkerError
from evalkit.scoring.goodput import is_good
from evalkit.scoring.speed import percentiles
from evalkit.store.reader import open_run

POINTS_DIR = "points"
OVERHEAD_GUESS_S = 5.0  # a point's time beyond its timed phase (setup, warm-up, scoring), until one is measured
FIRST_CONCURRENCY_REQUESTS = 1000  # a concurrency point's requests before any throughput is known


@dataclass(frozen=True)
class PointPlan:
    """How each point runs: its timed phase's length (``duration_s``) or request count (``requests``), its
    warm-up requests, and the search's kind, SLOs and share."""

    kind: SearchKind
    slos: dict[str, float]
    slo_share: float
    duration_s: float | None
    requests: int | None
    warmup: int
    max_duration_s: float | None


@dataclass
class _RunFacts:
    """What one run dir's summary says that its samples do not: the timed phase's wall time and achieved rate."""

    wall_s: float
    achieved_rps: float | None
    schedule_kept: bool | None


def run_facts(run_dir: Path, task: str) -> _RunFacts:
    read = open_run(run_dir, with_samples=False).task(task)
    speed, load = read.speed, read.load
    wall = speed.wall_s if speed is not None else 0.0
    achieved = load.achieved_rps if load is not None else (speed.requests_per_s if speed is not None else None)
    return _RunFacts(wall_s=wall, achieved_rps=achieved, schedule_kept=load.schedule_kept if load else None)


@dataclass(frozen=True)
class Pooled:
    figures: LoadFigures
    answered: int  # requests that got an answer (not api_error)


def level_figures(offered: float, runs: Sequence[tuple[Path, str]], slos: dict[str, float], slo_share: float) -> Pooled:
    """The curve's figures of one level over the requests of every run dir in ``runs`` (``(dir, task)``) pooled:
    goodput share over all requests (failed ones count against it), TTFT/TPOT percentiles over those answered,
    output tokens/s over the timed phases' wall time, achieved requests/s as sent over the sending time."""
    records: list[SampleRecord] = []
    wall = 0.0
    sending = 0.0
    rates_known = True
    for run_dir, task in runs:
        got = list(open_run(run_dir).records())
        records += got
        facts = run_facts(run_dir, task)
        wall += facts.wall_s
        if facts.achieved_rps:
            sending += len(got) / facts.achieved_rps
        else:
            rates_known = False
    done = [r for r in records if r.status != "api_error"]
    good = sum(is_good(r, slos) for r in records)
    ttft = percentiles(r.ttft_ms for r in done)
    tpot = percentiles(r.tpot_ms for r in done)
    share = good / len(records) if records else None
    figures = LoadFigures(
        offered=offered,
        requests=len(records),
        good_requests=good,
        achieved_rps=len(records) / sending if rates_known and sending > 0 else None,
        goodput_share=share,
        output_tokens_per_s=sum(r.output_tokens or 0 for r in done) / wall if wall > 0 else None,
        ttft_p50_ms=ttft.p50,
        ttft_p99_ms=ttft.p99,
        tpot_p50_ms=tpot.p50,
        tpot_p99_ms=tpot.p99,
        holds=share is not None and share >= slo_share,
    )
    return Pooled(figures=figures, answered=len(done))


def point_dir_name(index: int, kind: SearchKind, level: float, repeat: int) -> str:
    return f"{POINTS_DIR}/{index:02d}-{kind}-{level:g}" + (f"-repeat{repeat}" if repeat else "")


class RunBench:
    """Measures load levels as runs of ``base`` (one task, its workload and probes) under ``out``."""

    def __init__(
        self,
        base: RunConfig,
        out: Path,
        plan: PointPlan,
        *,
        argv: list[str],
        on_point: Callable[[CapacityPoint], None] | None = None,
    ) -> None:
        self.base, self.out, self.plan, self.argv, self.on_point = base, out, plan, argv, on_point
        self.task = base.tasks[0]
        self.started = time.monotonic()
        self.server: Any = None
        self._worker: Worker | None = None
        self._overheads: list[float] = []
        self._per_in_flight_rps: float | None = None  # concurrency search: achieved requests/s per request in flight
        self.runs: dict[float, list[tuple[Path, CapacityPoint]]] = {}  # level -> its measurements (errors left out)
        self.count = 0

    # -- the Bench protocol ----------------------------------------------------------------------------
    def affordable(self, level: float) -> bool:
        if self.plan.max_duration_s is None:
            return True
        left = self.plan.max_duration_s - (time.monotonic() - self.started)
        return self._estimate_s(level) <= left

    def measure(self, level: float, step: Step, repeat: int) -> CapacityPoint:
        self.count += 1
        name = point_dir_name(self.count, self.plan.kind, level, repeat)
        run_dir = self.out / name
        t0 = time.monotonic()
        error: str | None = None
        try:
            self._run(self._point_config(level, run_dir))
        except WorkerError as e:  # the scoring process died: the next point starts another
            self._close_worker()
            error = str(e)
        except EvalkitError as e:
            error = str(e)
        point = self._point(level, step, repeat, name, run_dir, error)
        if point.duration_s is not None:
            self._overheads.append(max(0.0, time.monotonic() - t0 - point.duration_s))
        if self.on_point is not None:
            self.on_point(point)
        return point

    # -- running a point --------------------------------------------------------------------------------
    def _point_config(self, level: float, run_dir: Path) -> RunConfig:
        p = self.plan
        update: dict[str, Any] = {
            "output_dir": run_dir, "fresh": True, "max_error_rate": 1.0, "goodput": p.slos, "warmup": p.warmup,
            "duration_s": p.duration_s,
        }  # fmt: skip
        if p.kind == "rate":
            update["request_rate"] = level
            n = p.requests if p.requests is not None else math.ceil(level * (p.duration_s or 0) * 1.2) + 10
        else:
            update["concurrency"] = int(level)
            n = p.requests if p.requests is not None else self._concurrency_requests(level)
        update["workload"] = self.base.workload.model_copy(update={"num_prompts": n})
        return self.base.model_copy(update=update)

    def _concurrency_requests(self, level: float) -> int:
        duration = self.plan.duration_s
        if self._per_in_flight_rps is None or duration is None:
            return FIRST_CONCURRENCY_REQUESTS
        return math.ceil(self._per_in_flight_rps * level * duration * 1.5) + 2 * int(level)

    def _run(self, cfg: RunConfig) -> None:
        if self._worker is None:
            self._worker = Worker(lm_eval_expanded(cfg).tasks_dir)
        runner = Runner(cfg, argv=self.argv, server=self.server, scoring=self._worker, keep_server=True)
        try:
            runner.run()
        finally:
            self.server = runner.server

    def _point(
        self, level: float, step: Step, repeat: int, name: str, run_dir: Path, error: str | None
    ) -> CapacityPoint:
        figures: dict[str, Any] = {"offered": level, "requests": 0, "good_requests": 0, "holds": False}
        facts = None
        if error is None:
            pooled = level_figures(level, [(run_dir, self.task)], self.plan.slos, self.plan.slo_share)
            figures = {**pooled.figures.model_dump(), "answered": pooled.answered}
            facts = run_facts(run_dir, self.task)
            if figures["answered"] == 0:
                error = f"the server answered none of its {figures['requests']} requests"
            del figures["answered"]
        if error is None and self.plan.kind == "concurrency" and facts is not None and facts.achieved_rps:
            self._per_in_flight_rps = max(self._per_in_flight_rps or 0.0, facts.achieved_rps / level)
        point = CapacityPoint(
            **figures,
            run_dir=name,
            repeat=repeat,
            step=step,
            duration_s=facts.wall_s if facts is not None else None,
            schedule_kept=facts.schedule_kept if facts is not None else None,
            error=error,
        )
        if error is None:
            self.runs.setdefault(level, []).append((run_dir, point))
        return point

    def _estimate_s(self, level: float) -> float:
        seen = self._overheads[1:] if self.base.server is not None else self._overheads  # the first: server start
        overhead = max(seen) if seen else OVERHEAD_GUESS_S
        p = self.plan
        if p.duration_s is not None:
            return p.duration_s + overhead
        if p.kind == "rate" and p.requests is not None:
            return p.requests / level + overhead
        return overhead

    def close(self) -> None:
        self._close_worker()
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _close_worker(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
