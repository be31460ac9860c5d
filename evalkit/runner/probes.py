"""Probes: a scored task's own requests mixed into a workload's (``--probe TASK:SHARE``), so that its accuracy is
measured under the workload's load. Each probe task's requests are built and scored exactly as its own run
would build and score them (its settings, its first documents), keep its name and document ids, and are spread
through the workload's requests at seeded random places; SHARE is the part of all requests sent that are the
probe's (at most the task's documents). The request phase sends them in the workload's timed phase and
summarises each probe task as a task of the run (evalkit/runner/request_phase.py)."""

from __future__ import annotations

import dataclasses
import random

from evalkit.config import RunConfig
from evalkit.contracts import Request
from evalkit.errors import ConfigError
from evalkit.runner.plan import TaskRun, plan_tasks, task_settings
from evalkit.store.reader import open_run
from evalkit.tasks.base import Task
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings


def probe_tasks(registry: Registry, cfg: RunConfig, tasks: list[Task]) -> list[tuple[Task, float]]:
    """The ``--probe`` tasks with their shares; ConfigError when the run has no workload to mix them into, or
    one, or is also a task of the run (TaskError for an unknown task)."""
    probes = cfg.workload.probes()
    if not probes:
        return []
    workloads = [t.name for t in tasks if getattr(t, "workload_kind", None)]
    if len(workloads) != 1:
        raise ConfigError(
            f"--probe mixes a task into one workload's requests; this run has {len(workloads)} workload tasks "
            f"({', '.join(workloads) or 'none'}): run one of random, sharegpt, trace"
        )
    names = [name for name, _ in probes]
    for name in names:
        if names.count(name) > 1 or name in cfg.tasks:
            raise ConfigError(f"--probe {name}: the task is probed twice or is also a task of the run; give it once")
    out = []
    for name, share in probes:
        task = registry.get(name)
        if getattr(task, "workload_kind", None):
            raise ConfigError(f"--probe {name}: a workload cannot be a probe; probe a scored task, e.g. gsm8k:0.05")
        out.append((task, share))
    return out


def check_rest_run(cfg: RunConfig, probes: list[tuple[Task, float]], model: str | None = None) -> None:
    """ConfigError, before anything is sent, for a ``--rest-run`` the report could not compare: without
    ``--probe``, not a run dir, or (once ``model``, the served model, is known) a run of another model."""
    rest = cfg.rest_run
    if rest is None:
        return
    if not probes:
        raise ConfigError(
            "--rest-run compares the probes of a load run with a run at rest: give --probe TASK:SHARE, or leave "
            "--rest-run out"
        )
    if not (rest / "manifest.json").is_file():
        raise ConfigError(f"--rest-run {rest} is not a run dir (no manifest.json); give a run at rest's dir")
    if model is not None and (other := open_run(rest).manifest_read().model) != model:
        raise ConfigError(
            f"--rest-run {rest} is a run of {other}, this run's model is {model}; give a rest run of {model}"
        )


def probe_count(workload_requests: int, share: float, available: int) -> int:
    """Probe requests for ``share`` of all requests sent beside ``workload_requests`` (at least 1, at most
    ``available``): ``round(n * share / (1 - share))``."""
    return max(1, min(available, round(workload_requests * share / (1 - share))))


def probe_settings(task: Task, cfg: RunConfig, workload_requests: int, share: float) -> TaskSettings:
    """The probe task's settings as its own run's, limited to the first documents its share takes."""
    own = task_settings(task, cfg)
    free = dataclasses.replace(own, limit=None)
    n = probe_count(workload_requests, share, task.count_requests(free))
    return dataclasses.replace(own, limit=n)


def plan_probes(
    workload: TaskRun,
    probes: list[tuple[Task, float]],
    cfg: RunConfig,
    base_url: str,
    api_key: str | None,
    model: str,
    max_model_len: int | None,
) -> list[TaskRun]:
    """The probe tasks' plans (built now, clamped as their own runs' are), their requests mixed into
    ``workload``'s (its ``source``, ``total`` and ``probes`` updated); ConfigError for a probe sent to another
    endpoint kind than the workload's."""
    base = len(workload.source) if isinstance(workload.source, list) else workload.total
    settings = {t.name: probe_settings(t, cfg, base, share) for t, share in probes}
    plans = plan_tasks([t for t, _ in probes], settings, None, base_url, api_key, model, max_model_len)
    for q in plans:
        if q.kind != workload.kind:
            raise ConfigError(
                f"--probe {q.task.name}: its requests go to the {q.kind} endpoint, the workload's to {workload.kind}; "
                f"probe a {workload.kind} task"
            )
    assert isinstance(workload.source, list), "a workload's requests are built, not streamed"
    seed = 0 if cfg.seed is None else cfg.seed
    mixed = mix(workload.source, [q.source for q in plans if isinstance(q.source, list)], seed)
    workload.source = mixed
    workload.total = len(mixed)
    workload.probes = plans
    return plans


def mix(main: list[Request], others: list[list[Request]], seed: int) -> list[Request]:
    """``main`` and ``others`` interleaved at places drawn by ``random.Random(seed)``, each list's order kept; a
    request of ``others`` is due when the ``main`` request before it is (``arrival_s``; at 0 before the first)."""
    slots = [-1] * len(main) + [k for k, reqs in enumerate(others) for _ in reqs]
    random.Random(seed).shuffle(slots)
    iters = [iter(main), *(iter(reqs) for reqs in others)]
    timed = any(r.arrival_s is not None for r in main)
    out = []
    due = 0.0
    for slot in slots:
        req = next(iters[slot + 1])
        if slot == -1:
            due = req.arrival_s if req.arrival_s is not None else due
        elif timed:
            req = dataclasses.replace(req, arrival_s=due)
        out.append(req)
    return out
