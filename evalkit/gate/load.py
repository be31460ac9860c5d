"""Build the gate's inputs (:mod:`evalkit.gate.inputs`) from a run directory.

Reads the run through :func:`evalkit.store.open_run`; this is the only place the gate touches a run directory,
everything else works on :class:`RunInputs`. A missing or unreadable manifest, summary or samples file is refused.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

from evalkit.gate.errors import GateInputError
from evalkit.gate.inputs import Identity, MetricSamples, RunInputs, SpeedRecords, StatusCounts, TaskInputs
from evalkit.store.files import MANIFEST, SAMPLES, SUMMARY
from evalkit.store.reader import open_run

SAMPLING_KEYS = (
    "num_samples",
    "temperature",
    "top_p",
    "seed",
    "max_tokens",
    "max_length",
    "chat_template_kwargs",
    "endpoint_kind",
)


def from_run_dir(path: str | Path) -> RunInputs:
    """The gate's inputs for every task of the run in ``path``; raises GateInputError (one line) when a file
    is missing or unreadable."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise GateInputError(f"{run_dir} is not a run directory; pass the --output-dir of an evalkit run")
    run = open_run(run_dir)
    for name in (MANIFEST, SUMMARY, SAMPLES):
        if name in run.problems:
            raise GateInputError(_problem(run_dir / name, *run.problems[name]))
    manifest, summary = run.manifest, run.summary
    samples: dict[str, list[dict[str, Any]]] = {}
    for rec in run.samples:
        if isinstance(rec.get("doc_id"), int):
            samples.setdefault(str(rec["task"]), []).append(rec)
    m_tasks, s_tasks = _dict(manifest.get("tasks")), _dict(summary.get("tasks"))
    names = [*m_tasks, *(n for n in s_tasks if n not in m_tasks)]
    tasks = {
        name: _task(name, _dict(m_tasks.get(name)), _dict(s_tasks.get(name)), samples.get(name, [])) for name in names
    }
    concurrency = manifest.get("concurrency")
    return RunInputs(
        label=run.label, tasks=tasks, concurrency_setting=None if concurrency is None else str(concurrency)
    )


def _problem(path: Path, kind: str, why: str) -> str:
    if kind == "json":
        return f"{path} is not valid JSON ({why}); re-run the same command to rewrite it"
    if kind == "object":
        return f"{path} is not a JSON object; pass the directory of an evalkit run"
    if path.name == SAMPLES:
        return f"{path} is missing; pass the directory of an evalkit run"
    return f"{path} is missing (the run did not finish); re-run the same command to complete it"


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _task(name: str, manifest: dict[str, Any], summary: dict[str, Any], samples: list[dict[str, Any]]) -> TaskInputs:
    names = _metric_names(name, manifest, summary)
    counts = _counts(samples)
    return TaskInputs(
        name=name,
        identity=_identity(manifest, summary, samples),
        metrics=_metrics(names, samples),
        speed=_speed(summary, samples),
        counts=counts,
        asked_docs=asked_docs(manifest),
        scored_docs=frozenset(s["doc_id"] for s in samples if s.get("status") != "api_error"),
        problems=tuple(_consistency(name, summary, counts)),
    )


def _metric_names(task: str, manifest: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """The task's metric names: as its manifest recorded them from the task definition, else (older stores) the
    summary's, else the task registry's. Never only the summary's when the manifest has them: a stale or cut
    summary must not decide which metrics are compared."""
    recorded = manifest.get("metrics")
    if isinstance(recorded, list) and recorded:
        return [str(m) for m in recorded]
    in_summary = [str(m) for m in _dict(summary.get("metrics"))]
    return in_summary or _registry_metrics(task)


def _registry_metrics(task: str) -> list[str]:
    """The metric names of ``task`` in the builtin task registry ([] when it is not a builtin task)."""
    try:
        from evalkit.tasks.registry import Registry

        return Registry().get(task).metric_names()
    except Exception:  # an unknown or unloadable task: the samples' own filter names are used
        return []


def asked_docs(manifest: dict[str, Any]) -> frozenset[int] | None:
    """The documents the run was asked for, from its manifest: the ``docs`` selection (capped by the request
    count, as ``limit`` caps it) or the first ``requests / num_samples`` documents; None when the manifest does
    not say."""
    requests, settings = manifest.get("requests"), _dict(manifest.get("settings"))
    per_doc = settings.get("num_samples")
    per_doc = per_doc if isinstance(per_doc, int) and not isinstance(per_doc, bool) and per_doc > 0 else 1
    if not isinstance(requests, int) or isinstance(requests, bool) or requests < 0:
        return None
    n = requests // per_doc
    docs = settings.get("docs")
    if isinstance(docs, list):
        chosen = sorted({d for d in docs if isinstance(d, int) and not isinstance(d, bool) and d >= 0})
        return frozenset(chosen[:n])
    return frozenset(range(n))


def _consistency(task: str, summary: dict[str, Any], counts: StatusCounts) -> list[str]:
    """Disagreements between the samples and the summary's counts (a cut, replaced or hand-edited file)."""
    recorded = _dict(_dict(summary.get("counts")))
    total = recorded.get("total")
    if not isinstance(total, int) or isinstance(total, bool) or total == counts.total:
        return []
    return [
        f"{task}: {SAMPLES} holds {counts.total} requests but {SUMMARY} counts {total} "
        "(a cut, replaced or hand-edited run dir); re-run the same command to complete it"
    ]


def _identity(manifest: dict[str, Any], summary: dict[str, Any], samples: list[dict[str, Any]]) -> Identity:
    settings = _dict(manifest.get("settings"))
    version = manifest.get("version", summary.get("version"))
    digests: dict[int, str] = {}
    for s in samples:
        if s["doc_id"] not in digests:
            text = orjson.dumps([s.get("prompt"), s.get("messages")])
            digests[s["doc_id"]] = hashlib.sha256(text).hexdigest()[:16]
    joined = "\n".join(f"{d}:{h}" for d, h in sorted(digests.items())).encode()
    limit, fewshot = settings.get("limit"), settings.get("num_fewshot")
    return Identity(
        version=None if version is None else str(version),
        data_sha256={str(k): str(v) for k, v in _dict(manifest.get("data_sha256")).items()},
        limit=limit if isinstance(limit, int) else None,
        num_fewshot=fewshot if isinstance(fewshot, int) else None,
        num_samples=settings.get("num_samples") if isinstance(settings.get("num_samples"), int) else None,
        sampling={k: settings.get(k) for k in SAMPLING_KEYS if k in settings},
        prompt_hash=hashlib.sha256(joined).hexdigest()[:16] if digests else None,
        prompt_digests=digests,
    )


def metric_name(filter_key: str, summary_metrics: list[str], n_filters: int) -> str:
    """The summary.json name of the metric a ``correct`` filter feeds: lm-eval's ``metric,filter`` key, else
    ``avg@K`` for a task with one filter (repeated sampling), else the filter's own name."""
    for name in summary_metrics:
        if name.endswith("," + filter_key):
            return name
    avg = [name for name in summary_metrics if name.startswith("avg@")]
    if n_filters == 1 and len(avg) == 1:
        return avg[0]
    return filter_key


def _metrics(summary_metrics: list[str], samples: list[dict[str, Any]]) -> dict[str, MetricSamples]:
    """Per metric, doc_id -> correctness of each scored sample (a None verdict counts as wrong, as in the
    task's own summary); api_error samples are left out."""
    scored = [s for s in samples if s.get("status") != "api_error"]
    filters: list[str] = []
    for s in scored:
        filters.extend(f for f in _dict(s.get("correct")) if f not in filters)
    out: dict[str, MetricSamples] = {}
    for f in filters:
        items: dict[int, list[int]] = {}
        for s in scored:
            items.setdefault(s["doc_id"], []).append(1 if _dict(s.get("correct")).get(f) is True else 0)
        name = metric_name(f, summary_metrics, len(filters))
        out[name] = MetricSamples(name=name, filter=f, items={d: tuple(v) for d, v in items.items()})
    return out


def _speed(summary: dict[str, Any], samples: list[dict[str, Any]]) -> SpeedRecords:
    done = sorted((s for s in samples if s.get("status") != "api_error"), key=lambda s: _num(s.get("start_s")) or 0.0)
    speed = _dict(summary.get("speed"))
    trace = [(float(t), int(c)) for t, c in (summary.get("concurrency_trace") or []) if _num(t) is not None]
    levels: list[int] = []
    for level in summary.get("concurrency_levels") or []:
        limit = _dict(level).get("limit")
        if isinstance(limit, int) and not _dict(level).get("starved") and limit not in levels:
            levels.append(limit)
    concurrency = speed.get("concurrency")
    return SpeedRecords(
        ttft_ms=[_num(s.get("ttft_ms")) for s in done],
        tpot_ms=[_num(s.get("tpot_ms")) for s in done],
        e2e_ms=[_num(s.get("e2e_ms")) for s in done],
        output_tokens=[s["output_tokens"] if isinstance(s.get("output_tokens"), int) else None for s in done],
        start_s=[_num(s.get("start_s")) for s in done],
        wall_s=_num(speed.get("wall_s")),
        concurrency=concurrency if isinstance(concurrency, int) else None,
        trace=trace,
        levels=levels,
    )


def _counts(samples: list[dict[str, Any]]) -> StatusCounts:
    return StatusCounts.of(r.get("status") for r in samples)
