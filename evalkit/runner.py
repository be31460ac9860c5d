"""One run: config -> (server) -> tasks -> requests -> scoring -> store -> report.

Over 400 lines because it is the one place the layers meet: setup, per-task planning, the request loop's two
callbacks and the teardown order (server, workers, lock) read best together; what each step does lives in the
layer modules it calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit import __version__
from evalkit.config import RunConfig
from evalkit.config.endpoint import credentials, display_url, normalize_base_url, server_root
from evalkit.contracts import (
    Endpoint,
    EndpointKind,
    Manifest,
    ManifestTask,
    Request,
    Response,
    RunSummary,
    SampleRecord,
    SchedulerStats,
    Score,
    TaskSummary,
    WarmupSettings,
    WarmupSummary,
    manifest_json,
    summary_json,
)
from evalkit.errors import ConfigError, EndpointError, RunError, ServerError
from evalkit.redact import redact_argv, redact_text, secrets_of
from evalkit.requests import warmup
from evalkit.requests.clamp import clamp_max_tokens, merge_clamps
from evalkit.requests.client import Client, ClientOptions
from evalkit.requests.conversation import converse
from evalkit.requests.endpoint import ServedModel, list_models, resolve_model
from evalkit.requests.scheduler import execute, fit_open_files
from evalkit.scoring.summary import endpoint_summaries, task_summary
from evalkit.server.gpu import GpuSampler
from evalkit.server.metrics import MetricsSampler, delta, scrape
from evalkit.store.files import write_error
from evalkit.store.identity import record_for, request_key
from evalkit.store.manifest import fingerprint, package_versions
from evalkit.store.writer import RunStore, load_for_summary
from evalkit.tasks.base import Task, TaskSettings
from evalkit.tasks.prompt_stream import PromptBuilder, RequestStream
from evalkit.tasks.registry import Registry
from evalkit.worker import Worker

Progress = Callable[[str, int, int, SampleRecord | None], None]  # task, done, total, last record


def process_age_s() -> float | None:
    """Seconds since this process started (interpreter start-up and imports included); None off Linux."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
        return float(Path("/proc/uptime").read_text().split()[0]) - start
    except (OSError, ValueError, IndexError):
        return None


def task_settings(task: Task, cfg: RunConfig) -> TaskSettings:
    """The task's defaults overridden by what the user set."""
    d = task.defaults()

    def pick(name: str) -> Any:
        v = getattr(cfg, name)
        return v if v is not None else d.get(name)

    return TaskSettings(
        limit=cfg.limit,
        num_fewshot=pick("num_fewshot"),
        num_samples=int(pick("num_samples") or 1),
        max_tokens=pick("max_tokens"),
        max_length=cfg.max_length,
        temperature=pick("temperature"),
        top_p=pick("top_p"),
        seed=cfg.seed,
        chat_template_kwargs=cfg.chat_template_kwargs,
        endpoint_kind=cfg.endpoint_kind or task.endpoint_kind,
        docs=None if cfg.docs is None else tuple(cfg.docs),
        drop_reasoning=pick("drop_reasoning") if "drop_reasoning" in d else None,
    )


@dataclass
class TaskRun:
    """One task of the run: its requests, built (a list) or coming from the prompt builder (a stream)."""

    task: Task
    settings: TaskSettings
    total: int  # requests in the run
    source: list[Request] | RequestStream
    clamp: dict[str, Any] | None = None
    done_keys: set[str] = field(default_factory=set)
    head: list[Request] | None = None  # a streamed task's first batch, taken by peek() before the timed phase

    @property
    def kind(self) -> EndpointKind:
        """completions or chat: the user's choice, else the task's (resolved by task_settings)."""
        return self.settings.endpoint_kind or self.task.endpoint_kind

    @property
    def streamed(self) -> bool:
        return isinstance(self.source, RequestStream)

    async def peek(self) -> list[Request]:
        """The requests known before sending: all of them, or a streamed task's first batch (kept for
        ``batches``, which yields it first)."""
        if not isinstance(self.source, RequestStream):
            return self.source
        if self.head is not None:
            return self.head
        stream = self.source.batches()
        try:
            head: list[Request] = await anext(stream, [])
        finally:
            await stream.aclose()  # type: ignore[attr-defined]  # an async generator
        self.head = head
        return head

    async def batches(self) -> AsyncIterator[list[Request]]:
        if isinstance(self.source, RequestStream):
            if self.head is not None:
                yield self.head
            async for batch in self.source.batches():
                yield batch
        else:
            yield self.source


def _settings_record(settings: TaskSettings) -> dict[str, Any]:
    """The task settings as the manifest records them (``docs`` only when a selection was made,
    ``drop_reasoning`` only for tasks with conversations)."""
    out = dict(settings.__dict__)
    if out.get("drop_reasoning") is None:
        out.pop("drop_reasoning", None)
    if out.get("docs") is None:
        out.pop("docs", None)
    else:
        out["docs"] = list(out["docs"])
    return out


def planned_fingerprint(cfg: RunConfig, tasks: list[Task], model: str | None) -> dict[str, Any]:
    """The :func:`~evalkit.store.manifest.fingerprint` a run of ``cfg`` (its ``tasks`` loaded from the registry)
    against ``model`` records, known before it starts: a run dir whose manifest has another holds a run with other
    settings, which the Runner refuses to resume (and a sweep does not reuse)."""
    settings = {task.name: task_settings(task, cfg) for task in tasks}
    first = settings[tasks[0].name]
    return fingerprint(
        {
            "model": model,
            "endpoint": {"kind": first.endpoint_kind or tasks[0].endpoint_kind},
            "tasks": {
                t.name: {
                    "version": t.version,
                    "data_sha256": t.data_sha256,
                    "settings": _settings_record(settings[t.name]),
                }
                for t in tasks
            },
        }
    )


def default_output_dir(cfg: RunConfig, model: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe_model = "".join(c if c.isalnum() or c in "-._" else "_" for c in model.split("/")[-1])
    return Path("reports") / f"{'+'.join(cfg.tasks)}-{safe_model}-{stamp}"


class Runner:
    """Runs a RunConfig end to end and writes the store.

    Example::

        result = Runner(load_config({"tasks": ["gsm8k"], "endpoint": url, "limit": 10})).run()
    """

    def __init__(
        self,
        cfg: RunConfig,
        progress: Progress | None = None,
        argv: list[str] | None = None,
        server: Any = None,
        scoring: Worker | None = None,
        keep_server: bool = False,
    ) -> None:
        """``server``: a VLLMServer the caller started and stops, serving ``cfg.endpoint`` or started from
        ``cfg.server`` (its provenance goes into the manifest); without it, ``cfg.server`` makes the run start
        its own and stop it at the end, unless ``keep_server`` (the caller then takes ``self.server`` and stops
        it). ``scoring``: a scoring Worker the caller owns and closes (runs one after another share it); else the
        run starts its own."""
        self.cfg = cfg
        self.progress = progress
        self.argv = argv or sys.argv
        self.registry = Registry(cfg.tasks_dir)
        self.server: Any = server
        self._owns_server = server is None and not keep_server
        self._urls: list[str] = []  # the endpoints' base URLs (several: the run is sharded over them)
        self._given_scoring = scoring
        self._first_error: dict[str, str] = {}  # task -> the first failure's message (for the run's error line)
        self._listed: set[str] = set()  # the model ids the endpoints list
        self._warmed: set[warmup.SamplingKey] = set()  # the sampling configs warmed so far in this run
        self._warmups: list[tuple[str, warmup.WarmupResult]] = []  # (task, what its warm-up did)

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
        if not self.cfg.endpoint:
            raise ConfigError(
                "no endpoint: pass --endpoint URL (a running server) or --serve MODEL (evalkit starts vLLM)"
            )
        urls = [normalize_base_url(u) for u in self.cfg.endpoints]
        shown = [display_url(u) for u in urls]
        for i, url in enumerate(shown):
            if url in shown[:i]:
                raise ConfigError(f"--endpoint {url} is given twice; give each server once")
        return urls

    def _served(self, urls: list[str], api_key: str | None) -> ServedModel:
        """The model every endpoint serves (its smallest ``max_model_len``); a one-line error naming the first
        endpoint that is unreachable or does not serve it. ``self._listed``: every id the endpoints list (the ids
        a response's ``model`` may name)."""
        wanted = self.cfg.model or (self.cfg.server.expected_model_name if self.cfg.server else None)
        first = list_models(urls[0], api_key, timeout_s=self.cfg.connect_timeout_s)
        served = resolve_model(first, wanted, urls[0])
        self._listed = {m.id for m in first}
        lens = [served.max_model_len]
        for url in urls[1:]:
            models = list_models(url, api_key, timeout_s=self.cfg.connect_timeout_s)
            self._listed |= {m.id for m in models}
            same = next((m for m in models if m.id == served.id), None)
            if same is None:
                raise EndpointError(
                    f"endpoint {display_url(url)} does not serve model '{served.id}' (served there: "
                    f"{', '.join(m.id for m in models) or 'none'}) but {display_url(urls[0])} does; every --endpoint "
                    "must serve the same model: drop that endpoint or start it with this model"
                )
            lens.append(same.max_model_len)
        known = [n for n in lens if n is not None]
        return ServedModel(served.id, min(known) if known else None)

    def _start_server(self, run_dir: Path | None) -> str:
        from evalkit.server.vllm_process import ServerStartError, VLLMServer

        assert self.cfg.server is not None
        assert run_dir is not None
        log_dir = run_dir
        self.server = VLLMServer(self.cfg.server, log_dir)
        try:
            self.server.start()
        except ServerStartError as e:
            if not (e.log_tail or "").strip():  # refused before launching (e.g. port in use): one line
                raise ServerError(str(e)) from None
            key = self.cfg.server.api_key
            shown = redact_text(e.log_tail or "", secrets_of(key.get_secret_value() if key else None))
            tail = "\n".join("    " + line for line in shown.splitlines()[-15:])
            raise ServerError(f"{e}\n  last lines of {log_dir / 'server.log'}:\n{tail}") from None
        return self.server.base_url.rstrip("/") + "/v1"

    # -- main --------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        # where the whole command's time goes, in the summary's "timings_s"
        self.timings: dict[str, float | None] = {"startup": process_age_s()}
        self._t = time.perf_counter()
        tasks = self._tasks()
        self._settings = settings = {task.name: task_settings(task, self.cfg) for task in tasks}
        # prompts that take seconds to build (lm-eval, cold prompt cache) are built in a worker process from now
        # on, beside setup (and a server start), and each request is sent as it comes (tasks/prompt_stream.py)
        slow = [(task.name, settings[task.name]) for task in tasks if not task.quick_to_build(settings[task.name])]
        self._builder = PromptBuilder(self.cfg.tasks_dir, slow) if slow else None
        # scoring runs in a process of its own (evalkit/worker.py), so that it never holds the GIL the event loop
        # timing the requests needs; each task's scorer loads there from now on, beside server start, prompts and
        # the first requests (answers that come before it is ready wait for it; a failure to load surfaces there)
        self._scoring = self._given_scoring or Worker(self.cfg.tasks_dir)
        for task in tasks:
            self._scoring.load(task.name)
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
            served = self._served(urls, api_key)
            if store is None:
                store = RunStore(default_output_dir(self.cfg, served.id)).lock()
            self._in_flight = fit_open_files(self.cfg.concurrency, self.cfg.max_concurrency)
            self._lap("setup")
            return self._run_tasks(tasks, base_url, api_key, served.id, served.max_model_len, store)
        finally:
            self._store_pool.shutdown(cancel_futures=True)
            if self._builder is not None:
                self._builder.close(wait=False)  # a no-op once the run has waited for it
            if self._given_scoring is None:
                self._scoring.close()
            if self.server is not None and self._owns_server:
                self.server.stop()
            if store is not None:
                store.unlock()

    def _lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.timings[phase] = round(now - self._t, 3)
        self._t = now

    def _plan(
        self, tasks: list[Task], base_url: str, api_key: str | None, model: str, max_model_len: int | None
    ) -> list[TaskRun]:
        plans = []
        for task in tasks:
            settings = self._settings[task.name]
            stream = self._builder.streams.get(task.name) if self._builder is not None else None
            if stream is not None:  # counted once lm-eval's task is loaded; requests come while they are built
                plans.append(TaskRun(task, settings, stream.count.result(), stream))
                continue
            kind = settings.endpoint_kind or task.endpoint_kind
            reqs = task.build_requests(settings)
            reqs, clamp = asyncio.run(clamp_max_tokens(reqs, base_url, model, kind, max_model_len, api_key))
            plans.append(TaskRun(task, settings, len(reqs), reqs, clamp=clamp))
        return plans

    def _manifest(self, plans: list[TaskRun], base_url: str, model: str, kind: EndpointKind) -> Manifest:
        return Manifest(
            evalkit_version=__version__,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            command=redact_argv([Path(self.argv[0]).name, *self.argv[1:]]),
            endpoint=Endpoint(base_url=display_url(base_url), kind=kind),
            endpoints=[display_url(u) for u in self._urls] if len(self._urls) > 1 else None,
            model=model,
            concurrency=self.cfg.concurrency,
            concurrency_cap=self._in_flight.cap,
            request_rate=self.cfg.request_rate,
            versions=package_versions(),
            tasks={
                p.task.name: ManifestTask(
                    version=p.task.version,
                    description=p.task.description,
                    data_sha256=p.task.data_sha256,
                    settings=_settings_record(p.settings),
                    requests=p.total,
                    prompts_streamed=p.streamed,
                    max_tokens_clamp=p.clamp,  # for streamed prompts: final once the task has run
                    metrics=p.task.metric_names(p.settings) or None,
                )
                for p in plans
            },
            server=self.server.provenance() if self.server is not None else None,
            warmup=(
                None
                if self.cfg.warmup == 0
                else WarmupSettings(
                    requests=self.cfg.warmup, max_tokens=warmup.MAX_TOKENS, prompts_sha256=warmup.text_sha256()
                )
            ),
        )

    def _check_resume(self, store: RunStore, manifest: Manifest) -> dict[str, Any] | None:
        if self.cfg.fresh:  # whatever the dir holds, readable or not
            store.discard()
            return None
        old = store.read_manifest()
        if old is None:
            return None
        if fingerprint(old) != fingerprint(manifest_json(manifest)):
            raise ConfigError(
                f"{store.dir} holds a run with a different config (model, task version, data or settings); "
                "resume it with the same command, pass --fresh to start over, or choose another --output-dir"
            )
        return old

    def _run_tasks(
        self,
        tasks: list[Task],
        base_url: str,
        api_key: str | None,
        model: str,
        max_model_len: int | None,
        store: RunStore,
    ) -> dict[str, Any]:
        plans = self._plan(tasks, base_url, api_key, model, max_model_len)
        self._lap("prompts")
        manifest = self._manifest(plans, base_url, model, plans[0].kind)
        old = self._check_resume(store, manifest)
        if old is not None:
            manifest.created_at = old.get("created_at", manifest.created_at)
            manifest.resumed_at = [*old.get("resumed_at", []), datetime.now(timezone.utc).isoformat()]
        store.write_manifest(manifest)
        store.open()  # streams the samples (a resumed big run is not loaded whole): the keys already answered
        try:
            if store.quarantined:
                print(
                    f"evalkit: {store.quarantined} unreadable line(s) of {store.samples_path} moved to "
                    f"{store.corrupt_path}; a request whose answer they held is sent again",
                    file=sys.stderr,
                    flush=True,
                )
            for p in plans:
                p.done_keys = store.completed.get(p.task.name, set())
            summary = RunSummary()
            summary.timings_s = self.timings  # the same dict: phases timed from here on land in the summary
            self._lap("resume_check")
            for p in plans:
                summary.tasks[p.task.name] = self._run_one(
                    p, base_url, api_key, model, max_model_len, store, last=p is plans[-1]
                )
                summary.warmup = self._warmup_summary()
                store.write_summary(summary)
                manifest.tasks[p.task.name].max_tokens_clamp = p.clamp
                if manifest.warmup is not None:
                    manifest.warmup.configs = [pt.record(name) for name, w in self._warmups for pt in w.points]
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
        self._check_errors(summary)
        return {"run_dir": str(store.dir), "summary": summary_json(summary), "manifest": manifest_json(manifest)}

    def _run_one(
        self,
        p: TaskRun,
        base_url: str,
        api_key: str | None,
        model: str,
        max_model_len: int | None,
        store: RunStore,
        last: bool,
    ) -> TaskSummary:
        task = p.task
        total = p.total
        done = len(p.done_keys)
        if self.progress:
            self.progress(task.name, done, total, None)

        def store_record(req: Request, resp: Response, key: str, score: Score | None) -> SampleRecord:
            rec = record_for(req, resp, key, score)
            store.append(rec)
            return rec

        keys: dict[int, str] = {}  # id(request) -> its key, while it is in flight

        async def on_done(req: Request, resp: Response) -> None:
            nonlocal done
            if resp.error is not None:
                self._first_error.setdefault(task.name, resp.error)
            key = keys.pop(id(req))
            score = None
            if resp.error is None:  # failed requests are recorded as such, never scored
                score = await asyncio.wrap_future(self._scoring.score(task.name, req, resp))
            rec = await asyncio.get_running_loop().run_in_executor(
                self._store_pool, store_record, req, resp, key, score
            )
            done += 1
            if self.progress:
                self.progress(task.name, done, total, rec)

        rate = self.cfg.request_rate
        next_send = time.monotonic()

        async def paced() -> None:
            """Wait for the request's turn under ``--request-rate`` (requests per second)."""
            nonlocal next_send
            if rate is not None:
                now = time.monotonic()
                if next_send > now:
                    await asyncio.sleep(next_send - now)
                next_send = max(now, next_send) + 1.0 / rate

        async def todo() -> AsyncIterator[Request]:
            """The requests not answered yet (a resumed run skips the rest), as they come."""
            sha = task.data_sha256
            seen = 0
            async for batch in p.batches():
                if p.streamed:  # the plan clamped built requests; streamed ones are clamped as they come
                    batch, clamp = await clamp_max_tokens(batch, base_url, model, p.kind, max_model_len, api_key)
                    p.clamp = merge_clamps(p.clamp, clamp)
                for req in batch:
                    key = request_key(model, p.kind, task.name, task.version, sha, req)
                    if key not in p.done_keys:
                        keys[id(req)] = key
                        await paced()
                        yield req
                seen += len(batch)
                if seen >= total:  # with --limit, lm-eval goes on building the rest (for the cache): not waited for
                    return

        options = ClientOptions(
            connect_timeout_s=self.cfg.connect_timeout_s,
            idle_timeout_s=self.cfg.idle_timeout_s,
            max_attempts=self.cfg.max_attempts,
            max_retry_s=self.cfg.max_retry_s,
        )
        extra: dict[str, Any] = {}
        if self.cfg.max_length is not None:
            extra["truncate_prompt_tokens"] = max(1, self.cfg.max_length - (p.settings.max_tokens or 0))
        if self.cfg.user is not None:
            extra["user"] = self.cfg.user
        self._warm_up(p, api_key, model, max_model_len, options, extra, max(0, total - done))
        roots = [server_root(u) for u in self._urls]
        auths = [credentials(u, api_key)[1] for u in self._urls]
        before = [scrape(root, headers=auth) for root, auth in zip(roots, auths, strict=True)]
        self._lap(f"{task.name}.before_requests")
        with contextlib.ExitStack() as stack:
            gauges = [stack.enter_context(MetricsSampler(r, interval_s=1.0, model_name=model)) for r in roots]
            gpu = stack.enter_context(GpuSampler(1.0))
            stats = asyncio.run(
                self._send(
                    todo(), max(0, total - done), self._urls, api_key, model, p.kind, options, extra, on_done, task
                )
            )
        self._lap(f"{task.name}.requests")
        after = [scrape(root, headers=auth) for root, auth in zip(roots, auths, strict=True)]
        servers = [delta(b, a, model, gauges=g.summary()) for b, a, g in zip(before, after, gauges, strict=True)]
        # the scoring process summarises first and lets go of its copy of the records (after the last task it
        # exits) before this process reads its own: two copies of a big run's store are never in memory at once
        scored = self._scoring.summarize(task.name, store.dir).result()
        if last and self._given_scoring is None:
            self._scoring.close()
        sharded = len(self._urls) > 1
        itl_by: dict[str, array] | None = {} if sharded else None
        spans: dict[str, tuple[int, int]] = {}
        records, itl = load_for_summary(store, task.name, keep_text=False, itl_by_endpoint=itl_by, itl_spans=spans)
        out = task_summary(task.version, scored, records, stats, itl, spans, earlier=p.done_keys)
        out.server = servers[0]
        if sharded:  # the summary's own server section is the first endpoint's, and says so
            shown = [display_url(u) for u in self._urls]
            out.server = {**servers[0], "endpoint": shown[0]}
            out.endpoints = endpoint_summaries(records, itl_by or {}, dict(zip(shown, servers, strict=True)))
        out.gpu = gpu.summary()
        self._lap(f"{task.name}.scoring_summary")
        return out

    def _warm_up(
        self,
        p: TaskRun,
        api_key: str | None,
        model: str,
        max_model_len: int | None,
        options: ClientOptions,
        extra: dict[str, Any],
        left: int,
    ) -> None:
        """The warm-up before the task's timed phase (evalkit/requests/warmup.py), for its sampling configs not
        warmed yet in this run: ``--warmup`` requests each (default: the run's level of requests in flight,
        capped by the ``left`` requests to send), at that level; none with ``--warmup 0`` or nothing left."""
        if self.cfg.warmup == 0 or left == 0:
            return
        c = self._in_flight.concurrency
        level = min(self.cfg.auto_start, self._in_flight.max_concurrency) if c == "auto" else int(c)
        count = self.cfg.warmup if self.cfg.warmup is not None else min(level, left)
        reset_root = server_root(self.server.base_url) if self.server is not None else None

        async def go() -> warmup.WarmupResult:
            return await warmup.run(
                self._urls,
                model,
                p.kind,
                await p.peek(),
                count=count,
                level=level,
                options=options,
                api_key=api_key,
                extra_body=extra,
                headers=self.cfg.headers,
                skip=self._warmed,
                max_model_len=max_model_len,
                reset_root=reset_root,
            )

        result = asyncio.run(go())
        if result.points:
            self._warmed |= {pt.key for pt in result.points}
            self._warmups.append((p.task.name, result))
            self._lap(f"{p.task.name}.warmup")

    def _warmup_summary(self) -> WarmupSummary | None:
        """``summary.json``'s ``warmup``: every task's warm-up together (None: none was sent)."""
        if not self._warmups:
            return None
        results = [w for _, w in self._warmups]
        resets = [w.prefix_cache_reset for w in results if w.prefix_cache_reset is not None]
        return WarmupSummary(
            requests=sum(w.requests for w in results),
            failed=sum(w.failed for w in results),
            wall_s=round(sum(w.wall_s for w in results), 3),
            first_error=next((w.first_error for w in results if w.first_error), None),
            prefix_cache_reset=all(resets) if resets else None,
            prefix_cache_note=next((w.prefix_cache_note for w in results if w.prefix_cache_note), None),
        )

    async def _send(
        self,
        todo: AsyncIterator[Request],
        total: int,
        urls: list[str],
        api_key: str | None,
        model: str,
        kind: str,
        options: ClientOptions,
        extra: dict[str, Any],
        on_done: Callable[[Request, Response], Awaitable[None]],
        task: Task,
    ) -> SchedulerStats:
        """Send through one client over every endpoint: ``--concurrency`` bounds the requests in flight over
        all of them together, and the client gives each to the least loaded endpoint. A request with a
        conversation is one sample of several requests (requests/conversation.py), tools run by the task's
        backends. A response naming a model that is neither ``model`` nor listed by the endpoints fails its
        attempt, unless ``allow_model_mismatch``."""
        accepted = None if self.cfg.allow_model_mismatch else self._listed
        async with Client(
            urls,
            model,
            kind=kind,
            api_key=api_key,
            options=options,
            extra_body=extra,
            headers=self.cfg.headers,
            models=accepted,
        ) as client:

            async def send(req: Request) -> Response:
                executor = task.tool_executor(req) if req.conversation is not None else None
                if executor is None:
                    return await client.generate(req)
                return await converse(client.generate, req, executor)

            return await execute(
                todo,
                client,
                on_done,
                total=total,
                concurrency=self._in_flight.concurrency,
                max_concurrency=self._in_flight.max_concurrency,
                auto_start=self.cfg.auto_start,
                metrics_url=[server_root(u) + "/metrics" for u in urls],
                send=send,
            )

    def _render_report(self, store: RunStore) -> None:
        try:
            from evalkit.reporting import render_run
        except ImportError:
            return
        try:
            render_run(store.dir)
        except OSError as e:
            raise write_error(
                store.dir / "report.html",
                e,
                f"the run is complete and {store.summary_path} is intact; free space "
                f"and run: evalkit report {store.dir}",
            ) from None

    def _check_errors(self, summary: RunSummary) -> None:
        for name, t in summary.tasks.items():
            c = t.counts
            if c["total"] and c["api_error"] / c["total"] > self.cfg.max_error_rate:
                first = self._first_error.get(name)
                raise RunError(
                    f"{name}: {c['api_error']} of {c['total']} requests failed (error rate above --max-error-rate "
                    f"{self.cfg.max_error_rate}){f'; first error: {first}' if first else ''}; results so far are in "
                    "the run dir; re-run the same command to retry them"
                )
