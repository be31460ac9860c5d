"""A task's request phase: the servers' ``/metrics`` scraped, the requests not answered yet sent (on the run's
arrival process, if any; each answer handed to the answer sink, which scores and stores the answers in
batches as they come), then the task's
summary built from the store, with the load it put on the server (scoring/load.py). Only the sending is inside
the timed phase (``TASK.requests`` in the summary's ``timings_s``)."""

from __future__ import annotations

import asyncio
import os
import time
from array import array
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from evalkit.client.arrivals import Arrivals
from evalkit.client.clamp import clamp_max_tokens, merge_clamps
from evalkit.client.conversation import converse
from evalkit.client.http_client import Client, ClientOptions
from evalkit.client.scheduler import InFlight, execute
from evalkit.config import RunConfig
from evalkit.config.endpoint import display_url, server_root
from evalkit.contracts import Request, Response, SampleFields, SampleRecord, SchedulerStats, Score, TaskSummary
from evalkit.runner.answer_sink import AnswerSink, Outcome
from evalkit.runner.observe import ServerObserver
from evalkit.runner.plan import TaskRun
from evalkit.runner.sender_processes import Senders, SenderSpec, sender_count, shares
from evalkit.runner.worker import Worker
from evalkit.scoring.goodput import add_cost, add_energy, add_goodput
from evalkit.scoring.load import load_summary
from evalkit.scoring.summary import endpoint_summaries, task_summary
from evalkit.server.gpu import energy_devices
from evalkit.store.identity import record_for, request_key
from evalkit.store.positions_file import PositionsWriter
from evalkit.store.writer import RunStore, load_for_summary
from evalkit.tasks.spec import TaskSettings

Progress = Callable[[str, int, int, SampleRecord | None], None]  # task, done, total, last record
READ_BACK_BESIDE_BYTES = 64 << 20  # a samples.jsonl up to this size is read back while the scoring process summarises


def client_options(cfg: RunConfig) -> ClientOptions:
    """The client's timeouts and retries, as the run set them."""
    return ClientOptions(
        connect_timeout_s=cfg.connect_timeout_s,
        idle_timeout_s=cfg.idle_timeout_s,
        ttft_timeout_s=cfg.ttft_timeout_s,
        max_attempts=cfg.max_attempts,
        max_retry_s=cfg.max_retry_s,
    )


def extra_body(cfg: RunConfig, settings: TaskSettings) -> dict[str, Any]:
    """What each request's body carries beyond the task's own: ``truncate_prompt_tokens`` (``--max-length``) and
    ``user``."""
    extra: dict[str, Any] = {}
    if cfg.max_length is not None:
        extra["truncate_prompt_tokens"] = max(1, cfg.max_length - (settings.max_tokens or 0))
    if cfg.user is not None:
        extra["user"] = cfg.user
    return extra


@dataclass
class RequestPhase:
    """What every task's request phase of one run shares: the endpoints (``urls``; ``urls[0]`` clamps streamed
    prompts) serving ``model``, the model ids a response may name (``accepted``; None: any), the run's requests
    in flight, the store and its writer thread, the scoring process, the progress callback, each task's first
    failure (filled here) and the run's phase timer ``lap``."""

    cfg: RunConfig
    urls: list[str]
    api_key: str | None
    model: str
    max_model_len: int | None
    accepted: set[str] | None
    in_flight: InFlight
    store: RunStore
    store_pool: ThreadPoolExecutor
    scoring: Worker
    progress: Progress | None
    first_error: dict[str, str]
    lap: Callable[[str], None]
    _records: Sequence[SampleFields] = ()  # the last task summarised: its records
    _itl_by: dict[str, array] | None = None  # and its inter-token latencies by endpoint (a sharded run)
    clock_start_unix: float = 0.0  # set by each task's sending: time.time() at its client's start
    _started: dict[str, Senders] = field(default_factory=dict)  # a task's sender processes, started ahead

    def run(
        self, p: TaskRun, options: ClientOptions, extra: dict[str, Any], close_scoring: bool
    ) -> dict[str, TaskSummary]:
        """Scrape, send what ``p`` has not answered yet, summarise: ``p``'s summary and those of the tasks probed in
        its requests (``p.probes``), each of its own requests. ``close_scoring``: the scoring process exits once it
        has summarised this task when its store is big (the run's last, on a process the run owns; a small store's
        is kept for the next run, evalkit/runner/worker.py)."""
        task = p.task
        own = {task.name: p, **{q.task.name: q for q in p.probes}}  # a request's task -> its plan
        total = p.total
        done = sum(len(q.done_keys) for q in own.values())
        store = self.store
        base_url, api_key, model, max_model_len = self.urls[0], self.api_key, self.model, self.max_model_len

        positions = PositionsWriter(store.dir)  # opened by its first record: only a logprobs task writes any

        def store_many(answers: list[tuple[Request, Response, str, Score | None]]) -> list[SampleRecord]:
            records = []
            for req, resp, key, score in answers:
                records.append(record_for(req, resp, key, score))
                if score is not None and score.positions is not None:  # before the record: a sample has its positions
                    positions.append(replace(score.positions, key=key))
            store.append_many(records)
            return records

        local = {name: q.task.score for name, q in own.items() if q.task.scores_in_run_process}
        sink = AnswerSink(self.scoring, store_many, self.store_pool, local=local)
        keys: dict[int, str] = {}  # id(request) -> its key, while it is in flight

        def count(record: SampleRecord) -> None:
            """One answer stored: the progress sees it (its error, right answer and tokens)."""
            nonlocal done
            done += 1
            if self.progress:
                self.progress(task.name, done, total, record)

        def hand(req: Request, resp: Response) -> tuple[Request, Response, str]:
            """An answer as the sink takes it, with its key; a failure noted as its task's first, if it is."""
            if resp.error is not None:
                self.first_error.setdefault(req.task, resp.error)
            return req, resp, keys.pop(id(req))

        def counted(stored: asyncio.Future[SampleRecord]) -> None:
            if not stored.cancelled() and stored.exception() is None:
                count(stored.result())

        def on_done(req: Request, resp: Response) -> asyncio.Future[SampleRecord]:
            """The answer handed to the sink: a future that ends once it is scored (unless it failed) and stored."""
            stored = sink.put(*hand(req, resp))
            stored.add_done_callback(counted)
            return stored

        def counted_many(stored: asyncio.Future[list[Outcome]]) -> None:
            if not stored.cancelled() and stored.exception() is None:
                for outcome in stored.result():  # each record, as one by one
                    if isinstance(outcome, SampleRecord):
                        count(outcome)

        def on_done_many(answers: list[tuple[Request, Response]]) -> asyncio.Future[list[Outcome]]:
            """Answers that came back together (a sender process's batch) handed to the sink at once: one future,
            with each one's record or error once all are scored and stored."""
            stored = sink.put_many([hand(req, resp) for req, resp in answers])
            stored.add_done_callback(counted_many)
            return stored

        async def todo() -> AsyncIterator[Request]:
            """The requests not answered yet (a resumed run skips the rest), as they come."""
            seen = 0
            async for batch in p.batches():
                if p.streamed:  # the plan clamped built requests; streamed ones are clamped as they come
                    batch, clamp = await clamp_max_tokens(batch, base_url, model, p.kind, max_model_len, api_key)
                    p.clamp = merge_clamps(p.clamp, clamp)
                for req in batch:
                    mine = own[req.task]
                    t = mine.task
                    key = request_key(model, p.kind, t.name, t.version, t.data_sha256, req)
                    if key not in mine.done_keys:
                        keys[id(req)] = key
                        yield req
                seen += len(batch)
                if seen >= total:  # with --limit, lm-eval goes on building the rest (for the cache): not waited for
                    return

        observer = ServerObserver(self.urls, api_key, model, energy_devices(self.cfg.server, os.environ))
        observer.snapshot()
        self.lap(f"{task.name}.before_requests")
        try:
            with observer:
                stats = asyncio.run(self._send(todo(), max(0, total - done), p, options, extra, on_done, on_done_many))
        finally:
            positions.close()
            self.stop_senders()
        self.lap(f"{task.name}.requests")
        deltas = observer.server_deltas(self.scoring)
        out = {q.task.name: self._summary(q, stats, close_scoring=False) for q in p.probes}
        main = out[task.name] = self._summary(p, stats, close_scoring)
        servers = deltas.result()
        main.server = servers[0]
        if len(self.urls) > 1:  # the summary's own server section is the first endpoint's, and says so
            shown = [display_url(u) for u in self.urls]
            main.server = {**servers[0], "endpoint": shown[0]}
            main.endpoints = endpoint_summaries(
                self._records, self._itl_by or {}, dict(zip(shown, servers, strict=True))
            )
        main.gpu = observer.gpu_summary()
        if self.cfg.shard is not None:  # evalkit merge puts the shards' start_s on one clock by it
            for summary in out.values():
                summary.started_at_unix = round(self.clock_start_unix, 6)
        timed = [r for r in self._records if r.status != "api_error" and not (p.done_keys and r.key in p.done_keys)]
        add_energy(main.speed, main.gpu.get("energy"), sum(r.output_tokens or 0 for r in timed))
        self.lap(f"{task.name}.scoring_summary")
        return {task.name: main, **{k: v for k, v in out.items() if k != task.name}}

    def _summary(self, p: TaskRun, stats: SchedulerStats, close_scoring: bool) -> TaskSummary:
        """``p``'s task summarised from the store (its records kept in ``_records`` for the caller)."""
        store, name = self.store, p.task.name
        # a big store is read back here only once the scoring process has let go of its copy of the records (after
        # the last task it exits): two copies of a big run's records are never in memory at once; a small one is
        # read back while the scoring process summarises, and the process is kept for this process's next run
        big = store.samples_path.stat().st_size > READ_BACK_BESIDE_BYTES
        close_scoring = close_scoring and big
        summarized = self.scoring.summarize(name, store.dir, release=not close_scoring)
        if big:
            self._settle(summarized, close_scoring)
        records = load_for_summary(store, name, keep_text=False, by_endpoint=len(self.urls) > 1)
        itl_by = records.itl_by_endpoint if len(self.urls) > 1 else None
        if not big:
            self._settle(summarized, close_scoring)
        out = task_summary(
            p.task.version, summarized.result(), records, stats, records.itl, records.itl_of, earlier=p.done_keys
        )
        if not self.in_flight.capped:  # no cap on requests in flight: no level to hold, no steady state at one
            out.speed.concurrency, out.speed.steady_state = None, None
        session = [r for r in records if r.key not in p.done_keys] if p.done_keys else records
        arrivals = Arrivals.of(self.cfg)
        process = arrivals.name if arrivals is not None else "trace"
        out.load = load_summary(session, stats, process, self.cfg.request_rate, self.cfg.duration_s)
        if self.cfg.goodput:
            add_goodput(out.speed, records, self.cfg.goodput)
        if (gpus := self.cfg.billed_gpus()) is not None and self.cfg.cost_per_gpu_hour is not None:
            add_cost(out.speed, self.cfg.cost_per_gpu_hour, gpus)
        self._records, self._itl_by = records, itl_by
        return out

    def _settle(self, summarized: Future[Any], close_scoring: bool) -> None:
        """Wait for the scoring process's summary (its failure is raised by the caller) and, after the run's last
        task, for the process to exit."""
        summarized.exception()
        if close_scoring:
            self.scoring.close()

    def _start_at(self, p: TaskRun) -> float | None:
        """``--start-at``, unless ``p`` resumes: a resumed session's schedule counts from its own start (what was
        due before is answered)."""
        return self.cfg.start_at if not any(q.done_keys for q in [p, *p.probes]) else None

    def start_senders(self, p: TaskRun, options: ClientOptions, extra: dict[str, Any]) -> Senders | None:
        """The sender processes of ``p``'s request phase, started now and kept for it, where its requests go out
        over several (None: this process sends them; evalkit/runner/sender_processes.py)."""
        if sum(len(q.done_keys) for q in [p, *p.probes]) >= p.total:  # nothing left to send
            return None
        known = p.source if isinstance(p.source, list) else p.head or []  # a streamed task has no conversations
        conversations = any(r.conversation is not None for r in known[:64])
        cfg, in_flight = self.cfg, self.in_flight
        n = sender_count(cfg.client_processes, in_flight, Arrivals.of(cfg), conversations, p.task.name)
        if n == 1:
            return None
        client = dict(
            kind=p.kind, api_key=self.api_key, options=options, extra_body=extra, headers=cfg.headers,
            models=self.accepted,
        )  # fmt: skip
        specs = [
            SenderSpec(self.urls, self.model, client, c, cfg.duration_s) for c in shares(int(in_flight.concurrency), n)
        ]
        senders = self._started[p.task.name] = Senders(specs)
        return senders

    def stop_senders(self) -> None:
        """End sender processes started for a phase that did not use them (it failed before sending)."""
        while self._started:
            self._started.popitem()[1].close()

    async def _send(
        self,
        todo: AsyncIterator[Request],
        total: int,
        p: TaskRun,
        options: ClientOptions,
        extra: dict[str, Any],
        on_done: Callable[[Request, Response], asyncio.Future[SampleRecord]],
        on_done_many: Callable[[list[tuple[Request, Response]]], asyncio.Future[list[Outcome]]],
    ) -> SchedulerStats:
        """Send through one client over every endpoint: ``--concurrency`` bounds the requests in flight over
        all of them together, and the client gives each to the least loaded endpoint. A request with a
        conversation is one sample of several requests (requests/conversation.py), tools run by the task's
        backends, each of its requests fitted to the context as its history grows. A response naming a model that is
        neither ``model`` nor ``accepted`` fails its attempt. Each answer goes to ``on_done`` as it comes, or, where
        sender processes send, each batch of them one sends back to ``on_done_many``."""
        urls, task, kind = self.urls, p.task, p.kind
        senders = self._started.pop(task.name, None) or self.start_senders(p, options, extra)
        if senders is not None:  # several processes send
            stats, self.clock_start_unix = await senders.send(
                todo, total, Arrivals.of(self.cfg), on_done_many, start_at_unix=self._start_at(p)
            )
            return stats
        async with Client(
            urls,
            self.model,
            kind=kind,
            api_key=self.api_key,
            options=options,
            extra_body=extra,
            headers=self.cfg.headers,
            models=self.accepted,
        ) as client:
            # the wall-clock time the records' start_s count from, by this machine's clock (kept by a shard)
            self.clock_start_unix = time.time() - (time.perf_counter() - client.t0)

            async def fit(req: Request) -> Request:
                """One request of a conversation with ``max_tokens`` lowered to fit its history in the context
                (recorded in the task's ``max_tokens_clamp``)."""
                (out,), clamp = await clamp_max_tokens(
                    [req], urls[0], self.model, kind, self.max_model_len, self.api_key
                )
                p.clamp = merge_clamps(p.clamp, clamp)
                return out

            async def send(req: Request) -> Response:
                if req.conversation is None:
                    return await client.generate(req)
                return await converse(client.generate, req, task.tool_executor(req), fit)

            return await execute(
                todo,
                client,
                on_done,
                total=total,
                concurrency=self.in_flight.concurrency,
                max_concurrency=self.in_flight.max_concurrency,
                auto_start=self.cfg.auto_start,
                metrics_url=[server_root(u) + "/metrics" for u in urls],
                send=send,
                arrivals=Arrivals.of(self.cfg),
                duration_s=self.cfg.duration_s,
                start_at_unix=self._start_at(p),
            )
