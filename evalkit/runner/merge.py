"""``evalkit merge``: the N shard run dirs of one ``--shard I/N`` run as one run dir, as if one process had run it.

- Samples: every line of each shard's ``samples.jsonl`` (a re-sent request's earlier lines too), ordered as the
  unsharded run's documents (task, document, sample; a key's lines stay in their order), each ``start_s`` moved
  onto the merged run's clock; a logprobs task's ``positions.bin`` records come along.
- The clock: each shard records the wall-clock time its request phase's clock starts at
  (``started_at_unix``, by its own machine's clock); a shard's ``start_s`` and concurrency trace move by its
  start less the earliest shard's, less any stretch before it in which no shard was sending (shards run one after
  another: the merged clock counts the union of their windows, for the summary's throughput as for the gate's
  steady state) (``manifest.shards[].clock_offset_s``); shards that each sent their part of one load's
  schedule (``arrivals.schedule_part``) keep their starts as they were: the gaps are the schedule's. Offsets
  between the machines' clocks are not measured: with NTP-synchronised nodes they are milliseconds, and the
  merged timeline is as good as they are. A resumed shard's earlier session counts from its own start (as in
  any resumed run).
- Accuracy: the task's own ``summarize`` in the scoring process over the merged store, then
  :func:`~evalkit.scoring.summary.task_summary`, the code a run's summary comes from. Speed percentiles over the
  merged samples; throughput over the union of the shards' windows (first send to last answer, each); the
  concurrency trace the sum of the shards' limits where their windows overlap; ``speed.concurrency`` and the
  steady state at its highest level; client CPU summed, the event-loop lag p99 the highest shard's.
- Load: each record's ``scheduled_s`` moves with its ``start_s``; offered and achieved rate, send lag and the
  time series over the merged records (:func:`~evalkit.scoring.load.load_summary`), the run's ``request_rate``
  the shards' own where each sent its part of one schedule (the sum for shards that paced themselves).
- Not merged (each shard saw only part of them, over a shared server): the servers' ``/metrics`` deltas, GPU
  samples and energy (the summary's ``server``/``gpu`` are left out), ``--concurrency auto``'s level table,
  lm-eval group aggregates.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

from evalkit.client.clamp import merge_clamps
from evalkit.config import load_config
from evalkit.config.endpoint import display_url
from evalkit.contracts import (
    LoadSummary,
    Manifest,
    MergedShard,
    RunSummary,
    SampleFields,
    SampleRecord,
    SchedulerStats,
    TaskSummary,
    WarmupSummary,
)
from evalkit.errors import ConfigError
from evalkit.redact import redact_argv
from evalkit.runner.orchestrate import RunOutcome
from evalkit.runner.plan import lm_eval_expanded
from evalkit.runner.resume import manifest_endpoints
from evalkit.runner.shards import ShardRun, wait_for_shards
from evalkit.runner.worker import Worker
from evalkit.scoring.goodput import add_cost, add_goodput
from evalkit.scoring.load import load_summary
from evalkit.scoring.summary import endpoint_summaries, task_summary
from evalkit.store.files import iter_sample_dicts, write_error
from evalkit.store.positions_file import PositionsWriter, read_positions
from evalkit.store.writer import RunStore, load_for_summary

Window = tuple[float, float]


def union_s(windows: Sequence[Window]) -> float:
    """Seconds covered by the union of ``windows`` (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(windows):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def summed_trace(traces: Sequence[tuple[list[tuple[float, int]], float]]) -> list[tuple[float, int]]:
    """One concurrency trace of shards' ``(trace, end)`` (each already on the merged clock, its limit holding
    from its first entry to ``end``): at each change, the sum of the limits of the shards running then. No
    request starts while no shard runs: a gap between shards keeps the level before it (a trace's levels are
    limits of at least 1), and the trace ends at its last level, as a run's does."""
    events: list[tuple[float, int, int]] = []  # (time, shard, limit from then on; 0 once it has ended)
    for i, (trace, end) in enumerate(traces):
        events += [(t, i, level) for t, level in trace if t < end]
        if trace:
            events.append((end, i, 0))
    current: dict[int, int] = {}
    steps: dict[float, int] = {}  # time -> the summed limit after every change at that time
    for t, i, level in sorted(events):
        current[i] = level
        steps[round(t, 3)] = sum(current.values())
    out: list[tuple[float, int]] = []
    for t, total in steps.items():
        if total > 0 and (not out or out[-1][1] != total):
            out.append((t, total))
    return out


def _window(records: Sequence[dict[str, Any]], offset: float) -> Window | None:
    """First send to last answer of a shard's answered records, on the merged clock (speed_summary's span)."""
    spans = [
        (r["start_s"], r["start_s"] + (r.get("e2e_ms") or 0) / 1000.0)
        for r in records
        if r.get("status") != "api_error" and r.get("start_s") is not None
    ]
    if not spans:
        return None
    return (min(a for a, _ in spans) + offset, max(b for _, b in spans) + offset)


def _iso_max(values: Sequence[str | None]) -> str | None:
    dated = [v for v in values if v is not None]
    return max(dated, key=datetime.fromisoformat) if dated else None


class Merge:
    """One merge: the checked shards, the merged run dir, and what the summary needs along the way."""

    def __init__(self, shards: list[ShardRun], store: RunStore, argv: list[str]) -> None:
        self.shards, self.store, self.argv = shards, store, argv
        self.first = shards[0].manifest
        self.tasks = list(self.first.tasks)
        starts = {t: [s.summary.tasks[t].started_at_unix or 0.0 for s in shards] for t in self.tasks}
        # per shard, per task: seconds its clock starts after the earliest shard's
        self.offsets = [{t: round(starts[t][i] - min(starts[t]), 6) for t in self.tasks} for i in range(len(shards))]
        urls = [manifest_endpoints(s.raw_manifest) for s in shards]
        self.endpoints = list(dict.fromkeys(u for us in urls for u in us))
        self.stamp = len(self.endpoints) > 1  # samples name their endpoint once the shards sent to several
        self.shard_urls = [us[0] if us else "" for us in urls]
        self.windows: dict[str, list[Window]] = {t: [] for t in self.tasks}
        self.ends: dict[str, list[float]] = {t: [] for t in self.tasks}  # each shard's last answer, merged clock
        self.firsts: dict[str, list[float]] = {t: [] for t in self.tasks}  # and its first send
        self.counts = [0] * len(shards)

    def write_samples(self) -> None:
        """Every shard's positions, then every sample line on the merged clock, ordered by (task, document,
        sample)."""
        positions = PositionsWriter(self.store.dir)  # opened by its first record: only a logprobs task has any
        try:
            for s in self.shards:
                for _key, p in sorted(read_positions(s.dir).items()):
                    positions.append(p)
        finally:
            positions.close()
        order = {t: i for i, t in enumerate(self.tasks)}
        lines: list[tuple[tuple[int, int, int, int, int], dict[str, Any]]] = []
        per_shard: list[dict[str, list[dict[str, Any]]]] = []
        for i, s in enumerate(self.shards):
            mine: dict[str, list[dict[str, Any]]] = {t: [] for t in self.tasks}
            for n, d in enumerate(iter_sample_dicts(s.dir / "samples.jsonl")):
                task = d.get("task")
                if task not in order:
                    raise ConfigError(f"{s.dir}: a sample of task {task!r}, which its manifest does not list")
                mine[task].append(d)
                if self.stamp and d.get("endpoint") is None:
                    d["endpoint"] = self.shard_urls[i]
                lines.append(((order[task], d["doc_id"], d.get("sample_index", 0), i, n), d))
            self.counts[i] = sum(len(v) for v in mine.values())
            per_shard.append(mine)
        for task in self.tasks:
            self._place(task, [mine[task] for mine in per_shard])
        for i, mine in enumerate(per_shard):
            for task, recs in mine.items():
                for d in recs:
                    for clocked in ("start_s", "scheduled_s"):
                        if d.get(clocked) is not None:
                            d[clocked] = round(d[clocked] + self.offsets[i][task], 6)
        self.store.open()
        try:
            for _, d in sorted(lines, key=lambda x: x[0]):
                self.store.append(SampleRecord.model_validate(d))
        finally:
            self.store.close()

    def _place(self, task: str, records: list[list[dict[str, Any]]]) -> None:
        """Each shard's offset onto the merged clock for ``task``: its start less the earliest shard's, less the
        stretches before it in which no shard was sending (shards run one after another), so that the merged
        clock counts the union of the shards' windows; the windows and ends on that clock."""
        raw = [_window(recs, self.offsets[i][task]) for i, recs in enumerate(records)]
        merged: list[list[float]] = []
        for a, b in sorted(w for w in raw if w is not None):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        one_schedule = self.sent_one_schedule()  # its gaps are the schedule's (a probe's few requests, a lull)
        for i, window in enumerate(raw):
            at = window[0] if window is not None else self.offsets[i][task]
            idle = 0.0 if one_schedule else sum(max(0.0, min(at, nxt[0]) - cur[1]) for cur, nxt in pairwise(merged))
            self.offsets[i][task] = round(self.offsets[i][task] - idle, 6)
            if window is not None:
                self.windows[task].append((window[0] - idle, window[1] - idle))
            self.ends[task].append(window[1] - idle if window is not None else self.offsets[i][task])
            self.firsts[task].append(window[0] - idle if window is not None else self.offsets[i][task])

    def manifest(self) -> Manifest:
        m = self.first.model_copy(deep=True)
        ms = [s.manifest for s in self.shards]
        m.created_at = min((x.created_at for x in ms), key=datetime.fromisoformat)
        m.command = redact_argv([Path(self.argv[0]).name, *self.argv[1:]])
        m.shard = None
        if any(x.concurrency == "auto" for x in ms):
            m.concurrency = "auto"
        m.request_rate = self.request_rate()
        if self.stamp:
            m.endpoints = self.endpoints
        resumed = sorted(r for x in ms for r in x.resumed_at or [])
        m.resumed_at = resumed or None
        for name, task in m.tasks.items():
            task.requests = sum(x.tasks[name].requests for x in ms)
            task.prompts_streamed = any(x.tasks[name].prompts_streamed for x in ms)
            clamp = None
            for x in ms:
                clamp = merge_clamps(clamp, x.tasks[name].max_tokens_clamp)
            task.max_tokens_clamp = clamp
        m.shards = [
            MergedShard(
                index=s.index,
                run_dir=str(s.dir),
                created_at=s.manifest.created_at,
                finished_at=s.manifest.finished_at,
                endpoint=self.shard_urls[i],
                requests=self.counts[i],
                clock_offset_s=self.offsets[i],
            )
            for i, s in enumerate(self.shards)
        ]
        return m

    def task(self, name: str, scored: Any) -> TaskSummary:
        parts = [s.summary.tasks[name] for s in self.shards]
        traces = [
            (  # a trace starts as its sending does (its first entry is at 0, just before the first send)
                [(max(round(t + self.offsets[i][name], 6), self.firsts[name][i]), n) for t, n in p.concurrency_trace],
                self.ends[name][i],
            )
            for i, p in enumerate(parts)
        ]
        trace = summed_trace(traces)
        level = max((n for _, n in trace), default=0)  # the most the shards together allowed in flight
        lags = [p.speed.loop_lag_ms_p99 for p in parts if p.speed.loop_lag_ms_p99 is not None]
        stats = SchedulerStats(
            concurrency_trace=trace,
            final_concurrency=level,
            cpu_s=sum(p.speed.client_cpu_s or 0.0 for p in parts),
        )
        records = load_for_summary(self.store, name, keep_text=False, by_endpoint=self.stamp)
        itl_by = records.itl_by_endpoint if self.stamp else None
        out = task_summary(
            self.first.tasks[name].version,
            scored,
            records,
            stats,
            records.itl,
            records.itl_of,
            wall_s=union_s(self.windows[name]),
        )
        out.load = self._load(name, parts, records)
        out.speed.loop_lag_ms_p99 = max(lags) if lags else None
        out.speed.client_bound = any(p.speed.client_bound for p in parts)
        if self.first.goodput_slos:
            add_goodput(out.speed, records, self.first.goodput_slos)
        pricing = self.first.pricing
        if pricing is not None and pricing.get("cost_per_gpu_hour") is not None:
            add_cost(out.speed, pricing["cost_per_gpu_hour"], pricing["gpus"])
        if itl_by is not None:
            out.endpoints = endpoint_summaries(records, itl_by, {display_url(u): None for u in self.endpoints})
        return out

    def sent_one_schedule(self) -> bool:
        """Whether each shard sent its part of one schedule (a load's shards, ``arrivals.schedule_part``)."""
        return all((s.manifest.arrivals or {}).get("schedule_part") for s in self.shards)

    def request_rate(self) -> float | None:
        """The merged run's ``--request-rate``: the shards' own where each sent its part of one schedule at that
        rate, else (shards that paced themselves at their share of it) their sum."""
        rates = [s.manifest.request_rate for s in self.shards]
        if self.sent_one_schedule():
            return rates[0]
        return sum(r for r in rates if r is not None) if all(r is not None for r in rates) else None

    def _load(self, name: str, parts: list[TaskSummary], records: Sequence[SampleFields]) -> LoadSummary | None:
        """The load of the merged records (their ``scheduled_s`` moved with their ``start_s``): offered and achieved
        rate, send lag and time series over the union, as :func:`~evalkit.scoring.load.load_summary` gives a run's;
        the schedule's zero the earliest shard's. None when no shard sent on a schedule."""
        loads = [(i, p.load) for i, p in enumerate(parts) if p.load is not None]
        if not loads:
            return None
        stats = SchedulerStats(
            sent=sum(x.sent for _, x in loads),
            not_sent=sum(x.not_sent for _, x in loads),
            origin_s=min(x.origin_s + self.offsets[i][name] for i, x in loads),
        )
        first = loads[0][1]
        return load_summary(records, stats, first.process, self.request_rate(), first.duration_s)


def _warmup(shards: Sequence[ShardRun]) -> WarmupSummary | None:
    """The shards' warm-ups together: requests and failures summed, the longest one's seconds."""
    parts = [s.summary.warmup for s in shards if s.summary.warmup is not None]
    if not parts:
        return None
    errors = [p.first_error for p in parts if p.first_error]
    return WarmupSummary(
        requests=sum(p.requests for p in parts),
        failed=sum(p.failed for p in parts),
        wall_s=max(p.wall_s for p in parts),
        first_error=errors[0] if errors else None,
    )


def merge_runs(
    shard_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    argv: list[str],
    tasks_dir: Sequence[Path] = (),
    include_path: Sequence[Path] = (),
    report: bool = True,
    wait_s: float = 0.0,
) -> RunOutcome:
    """Merge ``shard_dirs`` (every shard of one run) into ``out_dir`` (a new run dir); ``tasks_dir`` and
    ``include_path``: the run's own, for tasks outside the builtin catalogue. ConfigError (nothing written) when
    the shards are not exactly the N parts of one finished run, or ``out_dir`` already holds a run; ``wait_s``:
    seconds to wait for shards not there or not finished yet (the Kubernetes merge Job's, docs/scale-out.md)."""
    t0 = time.perf_counter()
    shards = wait_for_shards([Path(d) for d in shard_dirs], wait_s)
    out = Path(out_dir)
    if any(out.resolve() == s.dir.resolve() for s in shards):
        raise ConfigError(f"-o {out} is one of the shards; give the merged run a dir of its own")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty; give evalkit merge a new -o RUN_DIR")
    cfg = lm_eval_expanded(
        load_config(
            {"tasks": list(shards[0].manifest.tasks), "tasks_dir": list(tasks_dir), "include_path": list(include_path)}
        )
    )
    store = RunStore(out).lock()
    scoring = Worker(cfg.tasks_dir)
    try:
        merge = Merge(shards, store, argv)
        for name in merge.tasks:
            scoring.load(name)
        merge.write_samples()
        manifest = merge.manifest()
        store.write_manifest(manifest)
        summary = RunSummary(warmup=_warmup(shards))
        for name in merge.tasks:
            scored = scoring.summarize(name, store.dir).result()
            summary.tasks[name] = merge.task(name, scored)
        if isinstance(manifest.concurrency, int):  # the most the shards had in flight together
            manifest.concurrency = max(t.speed.concurrency or 1 for t in summary.tasks.values())
        summary.timings_s = {"merge": round(time.perf_counter() - t0, 3)}
        store.write_summary(summary)
        manifest.finished_at = _iso_max([s.manifest.finished_at for s in shards]) or datetime.now(
            timezone.utc
        ).isoformat(timespec="seconds")
        store.write_manifest(manifest)
        if report:
            _render(store)
    finally:
        scoring.close()
        store.unlock()
    return RunOutcome(run_dir=store.dir, manifest=manifest, summary=summary)


def _render(store: RunStore) -> None:
    from evalkit.reporting import render_run

    try:
        render_run(store.dir)
    except OSError as e:
        raise write_error(
            store.dir / "report.html", e, f"the merged run is complete; free space and run: evalkit report {store.dir}"
        ) from None
