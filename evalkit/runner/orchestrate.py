"""One run: config -> (server) -> tasks -> requests -> scoring -> store -> report.

The :class:`Runner` calls the layers in this order and owns the teardown order (server, workers, lock); each step
is a module of this package: ``endpoints`` (where to send, the model served), ``plan`` (each task's settings and
requests, the manifest), ``resume`` (what the run dir already holds), ``warmups``, ``request_phase`` (a task's
requests sent and summarised) and ``observe`` (the servers' metrics and GPUs around it).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.client.scheduler import fit_open_files
from evalkit.config import RunConfig
from evalkit.contracts import Manifest, RunSummary, TaskSummary
from evalkit.errors import ConfigError, RunError
from evalkit.runner.endpoints import endpoint_urls, served_model, start_server
from evalkit.runner.observe import preload
from evalkit.runner.plan import (
    TaskRun,
    default_output_dir,
    lm_eval_expanded,
    new_manifest,
    plan_tasks,
    split_schedule,
    task_settings,
)
from evalkit.runner.probes import check_rest_run, plan_probes, probe_tasks
from evalkit.runner.prompt_stream import PromptBuilder
from evalkit.runner.request_phase import Progress, RequestPhase, client_options, extra_body
from evalkit.runner.resume import check_resume, mark_answered
from evalkit.runner.warmups import Warmups
from evalkit.runner.worker import Worker, keep_scoring, kept_scoring
from evalkit.scoring.groups import group_results
from evalkit.store.files import write_error
from evalkit.store.writer import RunStore
from evalkit.tasks.base import Task
from evalkit.tasks.lmeval_source import lm_eval_groups
from evalkit.tasks.registry import Registry

_runs_in_process = 0  # Runner.run calls this process has made: only the first one's start-up is the process's


def process_age_s() -> float | None:
    """Seconds since this process started (interpreter start-up and imports included); None off Linux."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
        return float(Path("/proc/uptime").read_text().split()[0]) - start
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class RunOutcome:
    """What :meth:`Runner.run` wrote: the run dir, and the manifest and summary it holds (the models written to
    ``manifest.json`` and ``summary.json``)."""

    run_dir: Path
    manifest: Manifest
    summary: RunSummary


class Runner:
    """Runs a RunConfig end to end and writes the store.

    Example::

        outcome = Runner(load_config({"tasks": ["gsm8k"], "endpoint": url, "limit": 10})).run()
        outcome.summary.tasks["gsm8k"].counts["total"]
    """

    def __init__(
        self,
        cfg: RunConfig,
        progress: Progress | None = None,
        argv: list[str] | None = None,
        server: Any = None,
        scoring: Worker | None = None,
        keep_server: bool = False,
        after_run_imports: Sequence[str] = (),
    ) -> None:
        """``server``: a VLLMServer the caller started and stops, serving ``cfg.endpoint`` or started from
        ``cfg.server`` (its provenance goes into the manifest); without it, ``cfg.server`` makes the run start
        its own and stop it at the end, unless ``keep_server`` (the caller then takes ``self.server`` and stops
        it). ``scoring``: a scoring Worker the caller owns and closes (runs one after another share it); else the
        run starts its own. ``after_run_imports``: modules the caller uses once the run is over (``evalkit run``:
        the history's writer), imported during the first warm-up with the report's."""
        self._created = time.perf_counter()  # a later run of this process counts its start-up from here
        self._groups = lm_eval_groups(cfg.tasks, cfg.include_path)  # before its groups expand into their tasks
        self.cfg = cfg = lm_eval_expanded(cfg)
        self.progress = progress
        self.argv = argv or sys.argv
        self.registry = Registry(cfg.tasks_dir)
        self.server: Any = server
        self._owns_server = server is None and not keep_server
        self._urls: list[str] = []  # the endpoints' base URLs (several: the run is sharded over them)
        self._given_scoring = scoring
        self._first_error: dict[str, str] = {}  # task -> the first failure's message (for the run's error line)
        self._listed: set[str] = set()  # the model ids the endpoints list
        # what the end of each task and of the run import on first use: numpy.ma (np.percentile's np.unique loads it
        # for the speed summary, 80 ms) and the report's modules; then the caller's
        ends = ("numpy.ma", *(("evalkit.reporting",) if cfg.report else ()), *after_run_imports)
        self._warmups = Warmups(cfg, imports=ends)  # the warm-ups sent so far in this run

    # -- setup -------------------------------------------------------------------------------------------
    def _tasks(self) -> list[Task]:
        if not self.cfg.tasks:
            raise ConfigError("no task given; e.g. evalkit run gsm8k --endpoint URL (evalkit tasks list)")
        return [self.registry.get(name) for name in self.cfg.tasks]

    def _endpoints(self, run_dir_hint: Path | None) -> list[str]:
        """The base URLs to send to: the one server evalkit starts (or the caller started), or every
        ``--endpoint`` (normalised)."""
        if self.server is not None:
            return [self.server.base_url.rstrip("/") + "/v1"]
        if self.cfg.server is not None:
            if self.cfg.endpoint:
                raise ConfigError("give either --endpoint or --serve, not both")
            return [self._start_server(run_dir_hint)]
        return endpoint_urls(self.cfg)

    def _start_server(self, run_dir: Path | None) -> str:
        from evalkit.server.vllm_process import VLLMServer

        assert self.cfg.server is not None
        assert run_dir is not None
        self.server = VLLMServer(self.cfg.server, run_dir)  # held before it starts: a failed start is stopped too
        return start_server(self.server, self.cfg, run_dir)

    # -- main --------------------------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        # where the whole command's time goes, in the summary's "timings_s"
        self.timings: dict[str, float | None] = {"startup": self._startup_s()}
        self._t = time.perf_counter()
        self.cfg.billed_gpus()  # a price with no GPU count fails now, not after the requests
        tasks = self._tasks()
        self._probes = probe_tasks(self.registry, self.cfg, tasks)  # checked before anything starts
        check_rest_run(self.cfg, self._probes)
        self._settings = settings = {task.name: task_settings(task, self.cfg) for task in tasks}
        # prompts that take seconds to build (lm-eval, cold prompt cache) are built in a worker process from now
        # on, beside setup (and a server start), and each request is sent as it comes (runner/prompt_stream.py)
        slow = [(task.name, settings[task.name]) for task in tasks if not task.quick_to_build(settings[task.name])]
        self._builder = PromptBuilder(self.cfg.tasks_dir, slow) if slow else None
        # scoring runs in a process of its own (evalkit/runner/worker.py), so that it never holds the GIL the event loop
        # timing the requests needs; each task's scorer loads there from now on, beside server start, prompts and
        # the first requests (answers that come before it is ready wait for it; a failure to load surfaces there)
        self._scoring = self._given_scoring or kept_scoring(self.cfg.tasks_dir) or Worker(self.cfg.tasks_dir)
        for task in [*tasks, *(t for t, _ in self._probes)]:
            self._scoring.load(task.name)
        preload(self._scoring)  # what the end of each task computes there (the servers' deltas), imported meanwhile
        # records are built and appended (fsync included) in one thread, off the event loop
        self._store_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        store: RunStore | None = None
        try:
            out_dir = self.cfg.output_dir
            if out_dir is None and self.cfg.server is not None:
                out_dir = default_output_dir(self.cfg, self.cfg.server.expected_model_name)
            if out_dir is not None:  # owned before a server start (its log goes there): a bad or busy output dir
                store = RunStore(out_dir).lock()  # fails in seconds, not minutes, and before anything is changed
            self._urls = urls = self._endpoints(out_dir)
            base_url = urls[0]  # prompts are tokenised and clamped there (every endpoint serves the same model)
            if self.cfg.server is not None:
                self._lap("server_start")
            api_key = self.cfg.resolved_api_key()
            if self.cfg.server is not None and self.cfg.server.api_key is not None:
                api_key = self.cfg.server.api_key.get_secret_value()
            served, self._listed = served_model(self.cfg, urls, api_key)
            check_rest_run(self.cfg, self._probes, served.id)
            if store is None:
                store = RunStore(default_output_dir(self.cfg, served.id)).lock()
            self._in_flight = fit_open_files(self.cfg.in_flight_cap(), self.cfg.max_concurrency)
            self._lap("setup")
            return self._run_tasks(tasks, base_url, api_key, served.id, served.max_model_len, store)
        finally:
            self._store_pool.shutdown(cancel_futures=True)
            if self._builder is not None:
                self._builder.close(wait=False)  # a no-op once the run has waited for it
            if self._given_scoring is None:  # after a run that ended well, kept for this process's next run
                if sys.exc_info()[0] is None:  # (unless closed after a big store)
                    keep_scoring(self._scoring, self.cfg.tasks_dir)
                else:
                    self._scoring.close()
            if self.server is not None and self._owns_server:
                self.server.stop()
            if store is not None:
                store.unlock()

    def _startup_s(self) -> float | None:
        """This run's start-up: the process's (interpreter, imports) for its first run; for a later run of the same
        process (``--repeats``, a sweep's combinations, watch ticks) the seconds since this Runner was made, so
        that no run counts the runs before it."""
        global _runs_in_process
        _runs_in_process += 1
        if _runs_in_process == 1:
            return process_age_s()
        return round(time.perf_counter() - self._created, 3)

    def _lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.timings[phase] = round(now - self._t, 3)
        self._t = now

    def _run_tasks(
        self,
        tasks: list[Task],
        base_url: str,
        api_key: str | None,
        model: str,
        max_model_len: int | None,
        store: RunStore,
    ) -> RunOutcome:
        plans = plan_tasks(tasks, self._settings, self._builder, base_url, api_key, model, max_model_len)
        probed: list[TaskRun] = []
        if self._probes:  # mixed into the one workload's requests, sent in its timed phase
            (workload,) = (p for p in plans if getattr(p.task, "workload_kind", None))
            probed = plan_probes(workload, self._probes, self.cfg, base_url, api_key, model, max_model_len)
        split_schedule(plans, self.cfg)  # a load's shard: its part of the unsharded run's schedule
        self._lap("prompts")
        manifest = new_manifest(
            self.cfg, [*plans, *probed], self.argv, self._urls, model, self._in_flight.cap, self.server, api_key
        )
        self._warmups.earlier = earlier = check_resume(store, manifest, self.cfg.fresh)
        self.timings.update(earlier.timings)  # a resumed run keeps its earlier warm-ups' record
        if manifest.warmup is not None:
            manifest.warmup.configs = self._warmups.configs()
        store.write_manifest(manifest)
        store.open()  # streams the samples (a resumed big run is not loaded whole): the keys already answered
        try:
            mark_answered(store, [*plans, *probed], self._urls)
            summary = RunSummary()
            summary.timings_s = self.timings  # the same dict: phases timed from here on land in the summary
            self._lap("resume_check")
            phase = RequestPhase(
                cfg=self.cfg,
                urls=self._urls,
                api_key=api_key,
                model=model,
                max_model_len=max_model_len,
                accepted=None if self.cfg.allow_model_mismatch else self._listed,
                in_flight=self._in_flight,
                store=store,
                store_pool=self._store_pool,
                scoring=self._scoring,
                progress=self.progress,
                first_error=self._first_error,
                lap=self._lap,
            )
            for p in plans:
                summary.tasks.update(self._run_one(p, phase, last=p is plans[-1]))
                summary.warmup = self._warmups.summary()
                summary.groups = group_results(self._groups, summary.tasks) or None
                store.write_summary(summary)
                for q in [p, *p.probes]:
                    manifest.tasks[q.task.name].max_tokens_clamp = q.clamp
                if manifest.warmup is not None:
                    manifest.warmup.configs = self._warmups.configs()
                store.write_manifest(manifest)
        finally:
            store.close()
        if self._builder is not None:  # a run with --limit is done before lm-eval has built every prompt: the
            self._builder.close(wait=True)  # build runs to its end, so the prompt cache serves the next run
            self._lap("prompt_cache")
        manifest.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        store.write_manifest(manifest)
        if self.cfg.report:
            self._render_report(store)
            self._lap("report")
            store.write_summary(summary)
        self._check_errors(summary, store.dir)
        return RunOutcome(run_dir=store.dir, manifest=manifest, summary=summary)

    def _run_one(self, p: TaskRun, phase: RequestPhase, last: bool) -> dict[str, TaskSummary]:
        """One task: its warm-up (sampling configs not warmed yet in this run), then its request phase (its summary
        and those of the tasks probed in it)."""
        done = sum(len(q.done_keys) for q in [p, *p.probes])
        if self.progress:
            self.progress(p.task.name, done, p.total, None)
        options = client_options(self.cfg)
        extra = extra_body(self.cfg, p.settings)
        phase.start_senders(p, options, extra)  # several sender processes: their start overlaps the warm-up
        try:
            sent = self._warmups.warm_up(
                p,
                self._urls,
                phase.api_key,
                phase.model,
                phase.max_model_len,
                in_flight=self._in_flight,
                options=options,
                extra=extra,
                left=max(0, p.total - done),
                server=self.server,
            )
        except BaseException:
            phase.stop_senders()
            raise
        if sent:
            key = f"{p.task.name}.warmup"
            self._lap(key)
            self.timings[key] = self._warmups.wall_s(p.task.name, self.timings[key])
        # the scoring process exits once it has summarised the run's last task, unless the caller owns it
        return phase.run(p, options, extra, close_scoring=last and self._given_scoring is None)

    def _render_report(self, store: RunStore) -> None:
        try:
            from evalkit.reporting import render_run
        except ImportError:
            return
        try:
            try:
                render_run(store.dir, rest_run=self.cfg.rest_run)
            except ConfigError as e:  # the rest run does not compare: the report without it, and the reason
                render_run(store.dir)
                raise ConfigError(
                    f"{e} (the run is complete; its report without the rest run's figures is written; with another "
                    f"rest run: evalkit report {store.dir} --rest-run REST_RUN)"
                ) from None
        except OSError as e:
            raise write_error(
                store.dir / "report.html",
                e,
                f"the run is complete and {store.summary_path} is intact; free space "
                f"and run: evalkit report {store.dir}",
            ) from None

    def _check_errors(self, summary: RunSummary, run_dir: Path) -> None:
        for name, t in summary.tasks.items():
            c = t.counts
            if c["total"] and c["api_error"] / c["total"] > self.cfg.max_error_rate:
                first = self._first_error.get(name)
                raise RunError(
                    f"{name}: {c['api_error']} of {c['total']} requests failed (error rate above --max-error-rate "
                    f"{self.cfg.max_error_rate}){f'; first error: {first}' if first else ''}; results so far are in "
                    "the run dir; re-run the same command to retry them",
                    run_dir=run_dir,
                )
