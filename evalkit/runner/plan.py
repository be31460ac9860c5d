"""A run's tasks planned before any request: each task's settings (its defaults overridden by the user's), its
requests (built and clamped to the server's context length, or streamed by the prompt builder) and the manifest
that records them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.client import warmup
from evalkit.client.arrivals import Arrivals, arrival_offsets, schedule_part, timed
from evalkit.client.clamp import clamp_max_tokens
from evalkit.config import RunConfig
from evalkit.config.endpoint import display_url
from evalkit.contracts import Endpoint, EndpointKind, Manifest, ManifestTask, Request, ShardRecord, WarmupSettings
from evalkit.redact import redact_argv
from evalkit.runner.prompt_stream import PromptBuilder, RequestStream
from evalkit.server.self_report import describe_server
from evalkit.store.files import safe_file_name
from evalkit.store.manifest import package_versions
from evalkit.tasks.base import Task
from evalkit.tasks.lmeval_chat import chat_options
from evalkit.tasks.lmeval_source import expand_lm_eval_tasks
from evalkit.tasks.spec import TaskSettings
from evalkit.version import __version__


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
        workload=cfg.workload.task_options(wk) if (wk := getattr(task, "workload_kind", None)) else None,
        shard=None if splits_schedule(cfg) else cfg.shard,  # a load's shard: its part of the whole schedule
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
    probes: list[TaskRun] = field(default_factory=list)  # tasks whose requests are mixed in (runner/probes.py)
    # a streamed task of a load's shard: (I, N, the whole schedule's offsets): batches() yields the shard's part
    part: tuple[int, int, list[float]] | None = None

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
        """The requests in send order, in batches (a shard's ``part`` of a streamed task: its positions with their
        arrival times, :func:`split_schedule`)."""
        position = 0
        async for batch in self._batches():
            if self.part is None:
                yield batch
                continue
            index, count, offsets = self.part
            yield schedule_part(timed(batch, offsets, position), index, count, start=position)
            position += len(batch)

    async def _batches(self) -> AsyncIterator[list[Request]]:
        if isinstance(self.source, RequestStream):
            if self.head is not None:
                yield self.head
            async for batch in self.source.batches():
                yield batch
        else:
            yield self.source


def settings_record(settings: TaskSettings) -> dict[str, Any]:
    """The task settings as the manifest records them (``docs`` only when a selection was made,
    ``drop_reasoning`` only for tasks with conversations, ``workload`` only for workloads; the shard is the
    manifest's ``shard``)."""
    out = dict(settings.__dict__)
    del out["shard"]  # the manifest's own ``shard``: the shards of one run have the same settings
    for optional in ("drop_reasoning", "workload"):
        if out.get(optional) is None:
            out.pop(optional, None)
    if out.get("docs") is None:
        out.pop("docs", None)
    else:
        out["docs"] = list(out["docs"])
    return out


def lm_eval_expanded(cfg: RunConfig) -> RunConfig:
    """``cfg`` with its ``lm-eval:NAME`` groups expanded into their tasks and the folder of task files that carry
    ``include_path``, ``tokenizer``, ``data_dir`` and the prompts' chat formatting added to its task folders
    (unchanged without such tasks)."""
    chat = chat_options(cfg.apply_chat_template, cfg.fewshot_as_multiturn, cfg.system_instruction)
    tasks, folder = expand_lm_eval_tasks(cfg.tasks, cfg.include_path, cfg.tokenizer, cfg.data_dir, chat)
    if folder is None:
        return cfg
    dirs = cfg.tasks_dir if folder in cfg.tasks_dir else [*cfg.tasks_dir, folder]  # expanded once already
    return cfg.model_copy(update={"tasks": tasks, "tasks_dir": dirs})


def splits_schedule(cfg: RunConfig) -> bool:
    """Whether the run is one shard of a load sent on a schedule (``--shard I/N`` with an arrival process): its
    tasks are then planned whole and the shard sends its part of the unsharded run's schedule
    (:func:`split_schedule`), not a schedule of its own."""
    return cfg.shard is not None and Arrivals.of(cfg) is not None


def split_schedule(plans: list[TaskRun], cfg: RunConfig) -> None:
    """With :func:`splits_schedule`: each plan, planned whole (``--limit`` before the split, probes mixed in), keeps
    its shard's part of the unsharded run's schedule (:func:`~evalkit.client.arrivals.schedule_part`: the requests
    at positions ≡ I mod N of the send order, each with its ``arrival_s`` from the schedule of all of them), so
    that the N shards together send exactly the unsharded schedule at the full rate. A probe's plan keeps the
    requests of it that its workload's part holds; a streamed task's requests are split as they come."""
    if not splits_schedule(cfg):
        return
    arrivals = Arrivals.of(cfg)
    assert arrivals is not None and cfg.shard is not None
    index, count = cfg.shard
    for p in plans:
        if not isinstance(p.source, list):
            p.part = (index, count, arrival_offsets(p.total, arrivals))
            p.total = len(range(index, p.total, count))
            continue
        part = schedule_part(timed(p.source, arrival_offsets(len(p.source), arrivals)), index, count)
        p.source, p.total = part, len(part)
        for q in p.probes:
            mine = {(r.doc_id, r.sample_index) for r in part if r.task == q.task.name}
            assert isinstance(q.source, list)
            q.source = [r for r in q.source if (r.doc_id, r.sample_index) in mine]
            q.total = len(q.source)


def default_output_dir(cfg: RunConfig, model: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe_model = safe_file_name(model.split("/")[-1])
    names = "+".join(safe_file_name(t) for t in cfg.tasks)
    if len(names) > 100:  # a group's many tasks: the first and how many more
        names = f"{safe_file_name(cfg.tasks[0])}+{len(cfg.tasks) - 1}-more"
    return Path("reports") / f"{names}-{safe_model}-{stamp}"


def plan_tasks(
    tasks: list[Task],
    settings: dict[str, TaskSettings],
    builder: PromptBuilder | None,
    base_url: str,
    api_key: str | None,
    model: str,
    max_model_len: int | None,
) -> list[TaskRun]:
    """Each task's requests: built and clamped at ``base_url`` now, or (prompts the ``builder`` builds in its
    worker process) counted now and clamped as they come."""
    plans = []
    for task in tasks:
        task_set = settings[task.name]
        stream = builder.streams.get(task.name) if builder is not None else None
        if stream is not None:  # counted once lm-eval's task is loaded; requests come while they are built
            plans.append(TaskRun(task, task_set, stream.count.result(), stream))
            continue
        kind = task_set.endpoint_kind or task.endpoint_kind
        task.use_endpoint(base_url, api_key)
        reqs = task.build_requests(task_set)
        reqs, clamp = asyncio.run(clamp_max_tokens(reqs, base_url, model, kind, max_model_len, api_key))
        plans.append(TaskRun(task, task_set, len(reqs), reqs, clamp=clamp))
    return plans


def arrivals_record(cfg: RunConfig) -> dict[str, Any] | None:
    """The manifest's ``arrivals``: the arrival process, ``duration_s`` and ``max_in_flight`` (None: no cap);
    None when requests went as fast as the concurrency allowed, for no set time."""
    arrivals = Arrivals.of(cfg)
    if arrivals is None and cfg.duration_s is None:
        return None
    process = arrivals.record() if arrivals is not None else {"process": None}
    out = {**process, "duration_s": cfg.duration_s, "max_in_flight": cfg.in_flight_cap()}
    if splits_schedule(cfg):  # this shard sent its part of the schedule at the full rate (evalkit merge: not summed)
        out["schedule_part"] = "position mod N"
    if cfg.start_at is not None:
        out["start_at_unix"] = cfg.start_at
    return out


def new_manifest(
    cfg: RunConfig,
    plans: list[TaskRun],
    argv: list[str],
    urls: list[str],
    model: str,
    concurrency_cap: dict[str, int] | None,
    server: Any,
    api_key: str | None = None,
) -> Manifest:
    """The manifest of a run of ``plans`` against ``urls`` (the first is the one recorded as ``endpoint``);
    ``server``: a VLLMServer whose provenance it records, or None (:func:`server_record`)."""
    return Manifest(
        evalkit_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=redact_argv([Path(argv[0]).name, *argv[1:]]),
        endpoint=Endpoint(base_url=display_url(urls[0]), kind=plans[0].kind),
        endpoints=[display_url(u) for u in urls] if len(urls) > 1 else None,
        model=model,
        concurrency=cfg.concurrency,
        concurrency_cap=concurrency_cap,
        request_rate=cfg.request_rate,
        arrivals=arrivals_record(cfg),
        versions=package_versions(),
        tasks={
            p.task.name: ManifestTask(
                version=p.task.version,
                description=p.task.description,
                data_sha256=p.task.data_sha256,
                settings=settings_record(p.settings),
                requests=p.total,
                prompts_streamed=p.streamed,
                max_tokens_clamp=p.clamp,  # for streamed prompts: final once the task has run
                metrics=p.task.metric_names(p.settings) or None,
            )
            for p in plans
        },
        server=server_record(urls, api_key, model, server),
        warmup=(
            None
            if cfg.warmup == 0
            else WarmupSettings(requests=cfg.warmup, max_tokens=warmup.MAX_TOKENS, prompts_sha256=warmup.text_sha256())
        ),
        goodput_slos=cfg.goodput,
        pricing=pricing(cfg),
        shard=None if cfg.shard is None else ShardRecord(index=cfg.shard[0], count=cfg.shard[1]),
    )


def pricing(cfg: RunConfig) -> dict[str, Any] | None:
    """The manifest's ``pricing``: the dollars per GPU-hour and the GPUs billed (None without a price)."""
    gpus = cfg.billed_gpus()
    if gpus is None:
        return None
    source = "gpus_billed" if cfg.gpus_billed is not None else "server"
    return {"cost_per_gpu_hour": cfg.cost_per_gpu_hour, "gpus": gpus, "gpus_from": source}


def server_record(urls: list[str], api_key: str | None, model: str, server: Any) -> dict[str, Any]:
    """The manifest's ``server``: what the first endpoint says of itself (:data:`~evalkit.server.self_report.
    SERVER_KEYS`), with a server evalkit started its provenance too (argv, env, GPUs, dtype, the ``max_num_seqs``
    it was given) and, over several endpoints, each one's own description in ``endpoints``."""
    described = [describe_server(u, api_key, model) for u in urls]
    provenance = server.provenance() if server is not None else {}
    out: dict[str, Any] = {**provenance, **described[0]}
    if provenance.get("max_num_seqs") is not None:  # vLLM does not say it; a server evalkit started was given it
        out["max_num_seqs"] = provenance["max_num_seqs"]
    if len(described) > 1:
        out["endpoints"] = described
    return out
