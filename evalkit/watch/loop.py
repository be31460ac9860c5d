"""``evalkit watch``: a small eval against a live endpoint every interval, judged for drift against a baseline.

Each tick runs one slice of the task (a seeded rotation of the documents) through the :class:`~evalkit.runner.Runner`
into a run dir of its own, at a low concurrency and request rate, every request marked as a canary (the
``user`` field and an ``X-Evalkit-Canary: 1`` header). The window of the last ticks is judged against the
baseline by the gate (:mod:`evalkit.watch.window`), the tick and its verdict are appended to the history, and
``/metrics`` and the alert webhook are updated. A tick that fails (endpoint down) is recorded as failed and the
watch goes on; a restart carries on after the last recorded tick.

Each tick ends in one of three verdicts: ``pass`` or ``fail`` (the gate's, on the window), or ``cannot_decide``
with a reason (the tick failed, the baseline has no scored answer for the window's documents, the gate could not
compare); :func:`~evalkit.watch.tick_log.exit_code` maps the last one to 0, 1 or 2, and ``/metrics`` says which
through ``evalkit_watch_can_judge``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.config import RunConfig, load_config
from evalkit.contracts import speed_metric
from evalkit.errors import ConfigError, EvalkitError
from evalkit.gating import CannotCompare, GateResult, RunInputs, from_run_dir, load_policy
from evalkit.gating.policy import Policy
from evalkit.history import record_tick
from evalkit.runner import Runner
from evalkit.runner.plan import lm_eval_expanded
from evalkit.runner.worker import Worker, WorkerError
from evalkit.server.gpu import gpu_info
from evalkit.store.reader import as_num, open_run
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings
from evalkit.watch.exporter import WatchMetrics, check_port
from evalkit.watch.tick_log import (
    JUDGED,
    TICK_SPEED,
    TickRecord,
    append_history,
    check_settings,
    lock,
    read_history,
    rotation,
    slice_for,
    tick_dir,
    tick_speed_key,
)
from evalkit.watch.webhook import Webhook, webhook_target
from evalkit.watch.window import Accuracy, judge, merge, tick_inputs, watch_policy

CANARY_USER = "evalkit-canary"
CANARY_HEADER = "X-Evalkit-Canary"
NO_BASELINE_FIX = "run the watch again in another -o once the endpoint answers, or pass --baseline RUN_DIR"


@dataclass
class WatchSettings:
    """What ``evalkit watch`` was asked. ``run``: further RunConfig settings for every tick (model,
    max_tokens, temperature, num_fewshot, tasks_dir, api_key_file, ...). ``ticks``: stop after this many
    ticks in all (None: run until stopped)."""

    task: str
    endpoint: str
    out: Path
    every_s: float
    per_tick: int
    window: int = 6
    baseline: Path | None = None
    baseline_ticks: int = 3
    seed: int = 0
    concurrency: int = 2
    request_rate: float | None = 2.0
    ticks: int | None = None
    policy: Path | None = None
    alert_webhook: str | None = None
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    run: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """The settings a restart must keep (they decide which documents each tick holds)."""
        return {
            "task": self.task,
            "per_tick": self.per_tick,
            "window": self.window,
            "seed": self.seed,
            "baseline": None if self.baseline is None else str(self.baseline.resolve()),
            "baseline_ticks": None if self.baseline is not None else self.baseline_ticks,
        }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Watch:
    """Runs the ticks; :meth:`run` until ``settings.ticks`` or :meth:`stop`. ``echo``: one line per tick."""

    def __init__(self, s: WatchSettings, echo: Any = None) -> None:
        self.s = s
        self.echo = echo or (lambda line: None)
        self.metrics = WatchMetrics()
        self.metrics_port: int | None = None
        self._stop = threading.Event()
        self._worker: Worker | None = None
        self._baseline: RunInputs | None = None
        self.policy: Policy = load_policy(s.policy) if s.policy is not None else watch_policy()
        self.tick_config(1, [0])  # bad settings are refused now, in one line, not at every tick
        if s.metrics_port is not None:
            check_port(s.metrics_port)
        if s.alert_webhook:
            webhook_target(s.alert_webhook)

    def stop(self) -> None:
        self._stop.set()

    # -- setup -----------------------------------------------------------------------------------------------
    def tick_config(self, tick: int, docs: list[int]) -> RunConfig:
        s = self.s
        if not docs:  # an empty selection would be no selection: every document of the task
            raise ConfigError(f"tick {tick} has no documents to send; pass a baseline that scored some")
        cli = {
            **s.run,
            "tasks": [s.task],
            "endpoint": s.endpoint,
            "docs": docs,
            "output_dir": tick_dir(s.out, tick),
            "concurrency": s.concurrency,
            "request_rate": s.request_rate,
            # the canary's pacing is even (request i due at i/R): its load is the same in every tick
            "arrival": "constant" if s.request_rate is not None else None,
            "warmup": 0,  # a tick's load is the canary's, as the user set it: no warm-up
            "user": CANARY_USER,
            "headers": {CANARY_HEADER: "1"},
            "report": False,
            "max_error_rate": 1.0,
            "max_attempts": s.run.get("max_attempts") or 2,
            "max_retry_s": min(max(s.every_s, 5.0), 120.0),
        }
        return load_config(cli)

    def _order(self) -> list[int]:
        """The documents the ticks rotate through: those the baseline scored, or (no baseline) those the first
        ``baseline_ticks`` ticks cover, which later ticks cover again. Refuses a baseline with no scored
        document and a task that does not keep to a document selection (each tick would send all of it); a task of
        several requests per document (lm-eval's multiple-choice) rotates through its documents."""
        s = self.s
        cfg = lm_eval_expanded(self.tick_config(1, [0]))
        task = Registry(cfg.tasks_dir).get(s.task)
        task.use_endpoint(s.endpoint, cfg.resolved_api_key())  # a loglikelihood task tokenises at the endpoint
        one = task.count_requests(TaskSettings(num_samples=1, max_tokens=1, docs=(0,)))
        several = one > 1  # several requests per document (a multiple-choice task's choices) or all of them
        if several and task.count_requests(TaskSettings(num_samples=1, max_tokens=1, docs=(0, 1))) <= one:
            raise ConfigError(
                f"task {s.task} does not keep to a document selection (each tick would send all of it); "
                "evalkit watch cannot run it: build only the documents TaskSettings.docs names"
            )
        if s.baseline is not None:
            self._baseline = from_run_dir(s.baseline)
            base = self._baseline.tasks.get(s.task)
            if base is None:
                raise ConfigError(f"the baseline {s.baseline} holds no {s.task} run; pass a baseline of that task")
            docs = base.scored()
            if not docs:
                raise ConfigError(
                    f"the baseline {s.baseline} has no scored {s.task} document ({base.counts.api_error} of its "
                    f"{base.counts.total} requests api_error); pass a baseline run that got answers"
                )
            return rotation(sorted(docs), s.seed)
        every = TaskSettings(num_samples=1, max_tokens=1)
        n = len({r.doc_id for r in task.build_requests(every)}) if several else task.count_requests(every)
        return rotation(rotation(list(range(n)), s.seed)[: s.baseline_ticks * s.per_tick], s.seed)

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self) -> list[TickRecord]:
        """Tick until done; returns the history."""
        s = self.s
        held = lock(s.out)
        try:
            check_settings(s.out, self.s.identity())
            order = self._order()
            history = read_history(s.out)
            self.metrics.start(s.task)
            if s.metrics_port is not None:
                self.metrics_port = self.metrics.serve(s.metrics_port, s.metrics_addr)
                self.echo(f"metrics on http://{s.metrics_addr}:{self.metrics_port}/metrics")
            hook = Webhook(s.alert_webhook) if s.alert_webhook else None
            previous = next((r.verdict for r in reversed(history) if r.verdict in JUDGED), None)
            tick = history[-1].tick + 1 if history else 1
            try:
                while not self._stop.is_set() and (s.ticks is None or tick <= s.ticks):
                    began = time.monotonic()
                    rec = self.tick(tick, slice_for(order, tick, s.per_tick), history)
                    history.append(rec)
                    append_history(s.out, rec)
                    record_tick(s.out, s.task, rec.model_dump(), s.out / rec.dir)
                    self.echo(_line(rec))
                    if hook is not None and rec.verdict in JUDGED and rec.verdict != previous:
                        hook.post(_message(s, rec, previous))
                    previous = rec.verdict if rec.verdict in JUDGED else previous
                    tick += 1
                    if s.ticks is None or tick <= s.ticks:
                        self._stop.wait(max(0.0, began + s.every_s - time.monotonic()))
            finally:
                if hook is not None:
                    if hook.pending:
                        self.echo(
                            f"alert webhook: {hook.pending} alert(s) still being sent; waiting up to "
                            f"{hook.delivery_bound_s(hook.pending):.0f} s (Ctrl-C gives up)"
                        )
                    hook.close()
            return history
        finally:
            if self._worker is not None:
                self._worker.close()
            self.metrics.close()
            held.close()

    def tick(self, tick: int, docs: list[int], history: list[TickRecord]) -> TickRecord:
        """Run one tick and judge the window it ends."""
        s = self.s
        d = tick_dir(s.out, tick)
        rec = TickRecord(
            tick=tick, dir=str(d.relative_to(s.out)), started_at=_now(), finished_at="", status="ok", docs=docs
        )
        try:
            if self._worker is None:
                self._worker = Worker(lm_eval_expanded(self.tick_config(tick, docs)).tasks_dir)  # lm-eval:NAME
            Runner(
                self.tick_config(tick, docs), argv=["evalkit", "watch", "tick", str(tick)], scoring=self._worker
            ).run()
        except WorkerError as e:  # the scoring process died: the next tick starts another
            if self._worker is not None:
                self._worker.close()
            self._worker = None
            rec.error = str(e)
        except EvalkitError as e:
            rec.error = str(e)
        except Exception as e:  # anything else a tick meets is recorded with it; the watch goes on
            rec.error = f"{type(e).__name__}: {e}"
        rec.finished_at = _now()
        inputs = tick_inputs(d, s.task)
        if inputs is None or inputs.counts.total == 0:
            rec.status = "failed"
            rec.error = rec.error or "the tick stored no answers"
            self.metrics.tick_done(s.task, True, time.time())
            gone = tick > s.baseline_ticks and self._baseline_inputs([*history, rec]) is None
            self._cannot_decide(rec, f"tick {tick} failed: {rec.error}" + (f"; {self._no_baseline()}" if gone else ""))
            return rec
        self._record_tick(rec, d)
        self._verdict(rec, [*history, rec])
        return rec

    def _record_tick(self, rec: TickRecord, d: Path) -> None:
        s = self.s
        run = open_run(d)
        task = run.task(s.task)
        rec.counts = dict(task.counts)
        rec.accuracy = {k: as_num(m.value) for k, m in task.metrics.items()}
        speed = task.speed
        rec.speed = {tick_speed_key(key): speed_metric(key).of(speed) for key in TICK_SPEED}
        server, gpu = task.server or {}, task.gpu or {}
        rec.server = {
            k: server.get(k)
            for k in ("kv_cache_usage_peak", "num_requests_running_peak", "num_requests_waiting_peak", "preemptions")
            if k in server
        }
        rec.server["gpus"] = gpu.get("gpus") or []
        totals = {str(g["index"]): g["memory_total_mib"] for g in gpu_info() or [] if g.get("memory_total_mib")}
        m = self.metrics
        m.tick_done(s.task, False, time.time())
        m.requests_seen(s.task, (x for x in run.samples if x.get("task") == s.task), rec.speed["output_tokens_per_s"])
        m.server_figures(s.task, server, gpu, totals)

    def _baseline_inputs(self, history: list[TickRecord]) -> RunInputs | None:
        s = self.s
        if self._baseline is not None:
            return self._baseline
        first = [r for r in history if r.tick <= s.baseline_ticks and r.status == "ok"]
        if history[-1].tick < s.baseline_ticks or not first:
            return None
        ticks = [t for r in first if (t := tick_inputs(s.out / r.dir, s.task)) is not None]
        self._baseline = merge("baseline (first ticks)", s.task, ticks)
        return self._baseline

    def _cannot_decide(self, rec: TickRecord, reason: str) -> None:
        rec.verdict, rec.reason = "cannot_decide", reason
        self.metrics.cannot_judge(self.s.task)

    def _baseline_name(self) -> str:
        s = self.s
        return f"the baseline {s.baseline}" if s.baseline is not None else f"the first {s.baseline_ticks} ticks"

    def _no_baseline(self) -> str:
        return f"no usable baseline: every one of {self._baseline_name()} failed; {NO_BASELINE_FIX}"

    def _baseline_gaps(self, base: RunInputs, window_docs: set[int]) -> list[str]:
        """Why the baseline cannot judge the window's documents (empty when it holds a scored answer for some)."""
        s = self.s
        scored = base.tasks[s.task].scored()
        if not scored:
            counts = base.tasks[s.task].counts
            return [
                f"no usable baseline: no scored answer in {self._baseline_name()} ({counts.api_error} of "
                f"{counts.total} requests api_error); {NO_BASELINE_FIX}"
            ]
        if not scored & window_docs:
            return [f"no scored answer in {self._baseline_name()} for any of the window's {len(window_docs)} documents"]
        return []

    def _verdict(self, rec: TickRecord, history: list[TickRecord]) -> None:
        s = self.s
        if s.baseline is None and rec.tick <= s.baseline_ticks:
            rec.verdict = "baseline"
            self.metrics.cannot_judge(s.task)
            if rec.tick == s.baseline_ticks:
                self._baseline_inputs(history)
            return
        base = self._baseline_inputs(history)
        if base is None:
            return self._cannot_decide(rec, self._no_baseline())
        floor = s.baseline_ticks if s.baseline is None else 0
        recent = [r for r in history if r.status == "ok" and r.tick > floor][-s.window :]
        ticks = [t for r in recent if (t := tick_inputs(s.out / r.dir, s.task)) is not None]
        if not ticks:
            return self._cannot_decide(rec, "the window holds no tick with stored answers")
        limit = base.tasks[s.task].identity.limit
        window = merge(f"ticks {recent[0].tick}-{recent[-1].tick}", s.task, ticks, limit=limit)
        try:
            result = judge(base, window, self.policy)
        except CannotCompare as e:
            raise ConfigError(f"the baseline cannot be compared with the watch's ticks: {e}") from None
        gaps = self._baseline_gaps(base, {d for r in recent for d in r.docs})
        if gaps:  # a failure found on what was compared stands; a pass without a baseline to compare is none
            verdict = "cannot_decide" if result.verdict == "pass" else result.verdict
            result = result.model_copy(update={"verdict": verdict, "reasons": [*gaps, *result.reasons]})
        self._store_verdict(rec, result, base, window, [r.tick for r in recent])

    def _store_verdict(
        self, rec: TickRecord, result: GateResult, base: RunInputs, window: RunInputs, ticks: list[int]
    ) -> None:
        task = self.s.task
        acc_rules = [r for r in result.rules if r.kind == "accuracy" and r.p_value is not None]
        rec.verdict = result.verdict
        rec.reason = "; ".join(result.reasons) if result.verdict == "cannot_decide" else None
        rec.p_value = acc_rules[0].p_value if acc_rules else None
        rec.failed_rules = [r.name for r in result.failed]
        rec.rules = [
            {"name": r.name, "verdict": r.verdict, "observed": r.observed, "p_value": r.p_value, "note": r.note}
            for r in result.rules
        ]
        cand, baseline = window.tasks[task], base.tasks[task]
        metric = next((m for m in cand.metrics if m in baseline.metrics), None)
        rec.window = {"ticks": ticks, "requests": cand.counts.total, "counts": cand.counts.__dict__}
        if metric is not None:
            docs = set(cand.metrics[metric].items)
            acc, base_acc = Accuracy.of(cand.metrics[metric], docs), Accuracy.of(baseline.metrics[metric], docs)
            rec.window.update(
                metric=metric,
                items=len(docs),
                accuracy=acc.__dict__ if acc else None,
                baseline=base_acc.__dict__ if base_acc else None,
            )
            self.metrics.window(task, metric, acc, base_acc, cand.counts.__dict__)
        if result.verdict == "cannot_decide":
            self.metrics.cannot_judge(task)
        else:
            self.metrics.verdict_made(
                task, result.verdict == "pass", rec.p_value, {r.name: r.verdict == "fail" for r in result.rules}
            )


def _line(rec: TickRecord) -> str:
    if rec.status == "failed":
        return f"tick {rec.tick}: failed: {rec.error}; verdict cannot_decide"
    acc = rec.window.get("accuracy") or {}
    shown = f" window accuracy {acc['value']:.3f} [{acc['lo']:.3f}, {acc['hi']:.3f}]" if acc else ""
    p = f" p={rec.p_value:.3g}" if rec.p_value is not None else ""
    failed = f" failed: {', '.join(rec.failed_rules)}" if rec.failed_rules else ""
    reason = f": {rec.reason}" if rec.reason else ""
    return f"tick {rec.tick}: {rec.counts.get('total', 0)} requests, verdict {rec.verdict}{p}{shown}{failed}{reason}"


def _message(s: WatchSettings, rec: TickRecord, previous: str | None) -> dict[str, Any]:
    return {
        "source": "evalkit-watch",
        "task": s.task,
        "verdict": rec.verdict,
        "previous": previous,
        "tick": rec.tick,
        "at": rec.finished_at,
        "p_value": rec.p_value,
        "failed_rules": rec.failed_rules,
        "reason": rec.reason,
        "window": rec.window,
        "watch_dir": str(s.out),
    }
