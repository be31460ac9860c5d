"""Build the gate's inputs (:mod:`evalkit.gating.inputs`) from a run directory.

Reads the run through :func:`evalkit.store.open_run`; this is the only place the gate touches a run directory,
everything else works on :class:`RunInputs`. A missing or unreadable manifest, summary or samples file is refused.
The manifest and the summary are read through the store's typed reads only (tests/unit/test_typed_reads.py):
:meth:`Run.manifest_read`, :meth:`Run.task` (counts, version, concurrency levels) and :meth:`Run.task_as` of
:class:`_TaskFields`, the rest the gate reads with its own bounds (a partly written speed still gives its wall time
and concurrency); each value that does not read is named by the store as a ``Dropped``, as written, and each note
below shows it so (a trace's whole-number time as written, not as the float it reads as).

A malformed summary field is never a traceback: the concurrency trace (it decides which requests are compared at
matched load) is refused with a GateInputError; a field that decides nothing by itself (the auto-concurrency
levels, the wall time, the concurrency, the metric names, a task's entry) is ignored with a line in
:attr:`RunInputs.notes`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, Field

from evalkit.errors import StoreError
from evalkit.gating.economics import FIGURES
from evalkit.gating.errors import GateInputError
from evalkit.gating.inputs import (
    Identity,
    MetricSamples,
    NumericsInputs,
    RunInputs,
    SpeedRecords,
    StatusCounts,
    TaskInputs,
)
from evalkit.gating.per_doc import per_doc_inputs
from evalkit.scoring.numerics import split_passes
from evalkit.store.files import MANIFEST, SAMPLES, SUMMARY
from evalkit.store.positions_file import POSITIONS, read_positions
from evalkit.store.reader import Dropped, ManifestTaskRead, TaskRead, open_run

T = TypeVar("T")
Seconds = Annotated[float, Field(ge=0)]


class _Steady(BaseModel):
    start_s: float | None = None
    end_s: float | None = None


class _SpeedFields(BaseModel):
    """What the gate reads of a task's speed, each field on its own: a partly written speed still gives these."""

    wall_s: Seconds | None = None
    concurrency: Annotated[int, Field(ge=0)] | None = None  # 0: a task that sent no request
    steady_state: _Steady | None = None
    # the goodput and cost figures (evalkit.gating.economics.FIGURES), where the run has them
    goodput_requests_per_s: float | None = None
    goodput_share: float | None = None
    cost_per_million_output_tokens: float | None = None


class _TaskFields(BaseModel):
    """What the gate reads of a task's summary entry beyond :class:`TaskRead`, with its bounds: the metric names
    in their order (whatever each value holds), the speed's fields, the concurrency trace's [seconds, limit]
    pairs (a time of at least 0, a limit of at least 1)."""

    metrics: dict[str, Any] | None = None
    speed: _SpeedFields | None = None
    concurrency_trace: list[tuple[Seconds, Annotated[int, Field(ge=1)]]] | None = None


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
    manifest = run.manifest_read()
    samples: dict[str, list[dict[str, Any]]] = {}
    for rec in run.samples:
        if isinstance(rec.get("doc_id"), int):
            samples.setdefault(str(rec["task"]), []).append(rec)
    notes = _Notes(run.label, run_dir / SUMMARY)
    top: list[Dropped] = []
    in_summary = run.summary_task_names(top)
    notes.dropped(top, "tasks", "a mapping", "")
    names = [*manifest.tasks, *(n for n in in_summary if n not in manifest.tasks)]
    rate, slos = manifest.request_rate, manifest.goodput_slos
    tasks: dict[str, TaskInputs] = {}
    for name in names:
        dropped: list[Dropped] = []  # what the summary's typed read of the task did not take
        read = run.task(name, dropped)
        notes.dropped(dropped, f"tasks.{name}", "a mapping", "")
        bounded: list[Dropped] = []  # what the read of the gate's own fields did not take
        fields = run.task_as(name, _TaskFields, bounded) or _TaskFields()
        typed = ((read, dropped), (fields, bounded))
        task = _task(name, manifest.task(name), typed, samples.get(name, []), notes, (rate, slos))
        numerics = numerics_inputs(run_dir, name, samples.get(name, []))
        if numerics is not None:  # the noise-floor pass re-sends documents: its requests ask for none
            again = sum(1 for s in samples.get(name, []) if s.get("sample_index") == 1)
            task = replace(task, numerics=numerics, asked_docs=asked_docs(manifest.task(name), again))
        tasks[name] = task
    concurrency = manifest.concurrency
    endpoints = tuple(manifest.endpoints or ([manifest.endpoint.base_url] if manifest.endpoint else []))
    return RunInputs(
        label=run.label,
        tasks=tasks,
        concurrency_setting=None if concurrency is None else str(concurrency),
        notes=notes.lines,
        endpoints=endpoints,
        answered_by=_answered_by(run.samples, endpoints[0] if endpoints else None),
    )


def _answered_by(samples: list[dict[str, Any]], default: str | None) -> dict[str, int]:
    """Answers (samples not api_error) by the endpoint each names (``default``, the manifest's, when none)."""
    out: dict[str, int] = {}
    for rec in samples:
        url = rec.get("endpoint") if isinstance(rec.get("endpoint"), str) else default
        if url is not None and rec.get("status") != "api_error":
            out[url] = out.get(url, 0) + 1
    return out


class _Notes:
    """The notes on one run's summary.json: a line per malformed field the gate ignored."""

    def __init__(self, label: str, path: Path) -> None:
        self.label, self.path, self.lines = label, path, list[str]()

    def ignored(self, where: str, value: Any, expected: str, consequence: str) -> None:
        self.lines.append(
            f"{self.label}: summary.json {where} is {_shown(value)}, not {expected}; ignored{consequence}"
        )

    def dropped(self, dropped: list[Dropped], where: str, expected: str, consequence: str) -> None:
        """A note on the value at ``where``, as written, when the typed read dropped it."""
        found = next((d for d in dropped if d.where == where), None)
        if found is not None:
            self.ignored(where, found.value, expected, consequence)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def _int(x: Any, low: int) -> int | None:
    """``x`` when it is an int (not a bool) of at least ``low``, else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= low else None


def _task(
    name: str,
    manifest: ManifestTaskRead,
    reads: tuple[tuple[TaskRead, list[Dropped]], tuple[_TaskFields, list[Dropped]]],
    samples: list[dict[str, Any]],
    notes: _Notes,
    load: tuple[float | None, dict[str, float] | None],
) -> TaskInputs:
    typed, (fields, bounded) = reads
    notes.dropped(bounded, f"tasks.{name}.metrics", "a mapping", " (metrics named by their filters)")
    names = _metric_names(name, manifest, list(fields.metrics or {}))
    counts = _counts(samples)
    inputs = TaskInputs(
        name=name,
        identity=_identity(manifest, typed, samples),
        metrics=_metrics(names, samples),
        speed=_speed(name, (fields, bounded), typed, samples, notes, load),
        counts=counts,
        asked_docs=asked_docs(manifest),
        scored_docs=frozenset(s["doc_id"] for s in samples if s.get("status") != "api_error"),
        problems=tuple(_consistency(name, typed[0].counts.get("total"), counts)),
        stored=dict(typed[0].metrics),
        speed_only=manifest.settings.get("workload") is not None,
    )
    per_doc = per_doc_inputs(name, typed[0].detail, samples, manifest.requests)
    if per_doc is None:
        return inputs
    for where, value in per_doc.ignored:
        notes.ignored(f"tasks.{name}.{where}", value, _per_doc_shape(where), " (that metric not compared)")
    return replace(
        inputs,
        metrics=per_doc.metrics,
        asked_docs=per_doc.asked,
        scored_docs=per_doc.scored,
        problems=(*inputs.problems, *per_doc.problems),
        not_gated=per_doc.not_gated,
        corpus=per_doc.corpus,
    )


def _per_doc_shape(where: str) -> str:
    """What a per-document field of ``detail`` should hold (``where``: its path in ``detail``)."""
    if where.startswith("detail.doc_pairs"):
        return "an aggregation and a mapping of doc ids to [loglikelihood, length]"
    return "a mapping of doc ids to 0/1"


def _metric_names(task: str, manifest: ManifestTaskRead, in_summary: list[str]) -> list[str]:
    """The task's metric names: as its manifest recorded them from the task definition, else (older stores) the
    summary's, else the task registry's. Never only the summary's when the manifest has them: a stale or cut
    summary must not decide which metrics are compared."""
    if manifest.metrics:
        return list(manifest.metrics)
    return [str(m) for m in in_summary] or _registry_metrics(task)


def _registry_metrics(task: str) -> list[str]:
    """The metric names of ``task`` in the builtin task registry ([] when it is not a builtin task)."""
    try:
        from evalkit.tasks.registry import Registry

        return Registry().get(task).metric_names()
    except Exception:  # an unknown or unloadable task: the samples' own filter names are used
        return []


def asked_docs(manifest: ManifestTaskRead, again: int | None = None) -> frozenset[int] | None:
    """The documents the run was asked for, from its manifest: the ``docs`` selection (capped by the request
    count, as ``limit`` caps it) or the first ``requests / num_samples`` documents; None when the manifest does
    not say. ``again``: a numerics task's noise-floor requests (its second samples, sent for a slice of the
    documents only), left out of the count, each remaining request one document."""
    requests, settings = manifest.requests, manifest.settings
    per_doc = settings.get("num_samples")
    per_doc = per_doc if isinstance(per_doc, int) and not isinstance(per_doc, bool) and per_doc > 0 else 1
    if again is not None:
        requests, per_doc = (None if requests is None else requests - again), 1
    if requests is None or requests < 0:
        return None
    n = requests // per_doc
    docs = settings.get("docs")
    if isinstance(docs, list):
        chosen = sorted({d for d in docs if isinstance(d, int) and not isinstance(d, bool) and d >= 0})
        return frozenset(chosen[:n])
    return frozenset(range(n))


def _consistency(task: str, total: int | None, counts: StatusCounts) -> list[str]:
    """Disagreements between the samples and the summary's request count ``total`` (a cut, replaced or
    hand-edited file)."""
    if total is None or total == counts.total:
        return []
    return [
        f"{task}: {SAMPLES} holds {counts.total} requests but {SUMMARY} counts {total} "
        "(a cut, replaced or hand-edited run dir); re-run the same command to complete it"
    ]


def _identity(
    manifest: ManifestTaskRead, typed: tuple[TaskRead, list[Dropped]], samples: list[dict[str, Any]]
) -> Identity:
    """The task's identity; its version from the manifest, else the summary's (as written: one written as a
    number, which the typed read drops, is its text). A document's prompt digest covers each distinct prompt of
    its samples in ``sample_index`` order (an lm-eval multiple-choice document: every choice's text)."""
    settings, (read, dropped) = manifest.settings, typed
    as_written = (d.value for d in dropped if d.where == f"tasks.{read.name}.version")
    version = next((v for v in (manifest.version, read.version) if v is not None), next(as_written, None))
    prompts: dict[int, dict[int, Any]] = {}  # doc -> sample_index -> [prompt, messages]
    for s in samples:
        index = s["sample_index"] if isinstance(s.get("sample_index"), int) else 0
        prompts.setdefault(s["doc_id"], {}).setdefault(index, [s.get("prompt"), s.get("messages")])
    digests: dict[int, str] = {}
    for doc, by_index in prompts.items():  # a document's distinct prompts in sample order (one: that prompt)
        distinct = list({orjson.dumps(p): p for _, p in sorted(by_index.items())}.values())
        text = orjson.dumps(distinct[0] if len(distinct) == 1 else distinct)
        digests[doc] = hashlib.sha256(text).hexdigest()[:16]
    joined = "\n".join(f"{d}:{h}" for d, h in sorted(digests.items())).encode()
    limit, fewshot = settings.get("limit"), settings.get("num_fewshot")
    return Identity(
        version=None if version is None else str(version),
        data_sha256=dict(manifest.data_sha256),
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


def _speed(
    name: str,
    read: tuple[_TaskFields, list[Dropped]],
    typed: tuple[TaskRead, list[Dropped]],
    samples: list[dict[str, Any]],
    notes: _Notes,
    load: tuple[float | None, dict[str, float] | None],
) -> SpeedRecords:
    """The task's speed records; ``load``: the run's --request-rate and the SLOs its goodput was counted under."""
    done = sorted((s for s in samples if s.get("status") != "api_error"), key=lambda s: _num(s.get("start_s")) or 0.0)
    where = f"tasks.{name}"
    fields, bounded = read
    notes.dropped(bounded, f"{where}.speed", "a mapping", " (wall time and concurrency unknown)")
    speed = fields.speed or _SpeedFields()
    notes.dropped(bounded, f"{where}.speed.wall_s", "seconds", " (wall time taken from the requests)")
    notes.dropped(bounded, f"{where}.speed.concurrency", "a whole number", " (concurrency unknown)")
    return SpeedRecords(
        ttft_ms=[_num(s.get("ttft_ms")) for s in done],
        tpot_ms=[_num(s.get("tpot_ms")) for s in done],
        e2e_ms=[_num(s.get("e2e_ms")) for s in done],
        output_tokens=[s["output_tokens"] if isinstance(s.get("output_tokens"), int) else None for s in done],
        start_s=[_num(s.get("start_s")) for s in done],
        wall_s=speed.wall_s,
        concurrency=speed.concurrency,
        trace=_trace(fields.concurrency_trace, bounded, f"{where}.concurrency_trace", notes.path),
        levels=_levels(*typed, notes),
        request_rate=load[0],
        steady=_steady(speed.steady_state),
        figures={k: x for k in FIGURES if (x := _num(getattr(speed, k))) is not None},
        goodput_slos=load[1],
    )


def _trace(
    read: list[tuple[float, int]] | None, dropped: list[Dropped], where: str, path: Path
) -> list[tuple[float, int]]:
    """The (seconds, concurrency) pairs of a concurrency trace; GateInputError naming the trace or its first entry
    that did not read (as written), since the trace decides which requests of the two runs are compared at
    matched load."""
    bad = next((d for d in dropped if d.where == where or d.where.startswith(f"{where}[")), None)
    if bad is not None:
        raise GateInputError(
            f"{path}: {bad.where} is {_shown(bad.value)}, not a list of [seconds, concurrency] pairs (the gate "
            "matches the runs' load by it); re-run the same command to rewrite summary.json"
        )
    return list(read or [])


def _levels(read: TaskRead, dropped: list[Dropped], notes: _Notes) -> list[int]:
    """The limits ``--concurrency auto`` measured and did not find starved, from the typed read (each entry the
    read dropped, or without a positive ``limit``, ignored with a note showing it as written)."""
    where = f"tasks.{read.name}.concurrency_levels"
    levels: list[int] = []
    whole = next((d for d in dropped if d.where == where), None)
    if whole is not None:
        notes.ignored(where, whole.value, "a list", "")
        return levels
    for i, level in _entries(read.concurrency_levels, dropped, where):
        limit = _int(level.get("limit"), 1) if isinstance(level, dict) else None
        if limit is None:
            shown = level.value if isinstance(level, Dropped) else level
            notes.ignored(f"{where}[{i}]", shown, "a level with a positive 'limit'", "")
        elif isinstance(level, dict) and not level.get("starved") and limit not in levels:
            levels.append(limit)
    return levels


def _entries(read: list[T], dropped: list[Dropped], where: str) -> list[tuple[int, T | Dropped]]:
    """The entries of the list at ``where`` as written, by index: each one that read (``read``, in order) or
    the :class:`Dropped` of one that did not."""
    bad = {
        int(d.where[len(where) + 1 : -1]): d
        for d in dropped
        if d.where.startswith(f"{where}[") and d.where.endswith("]") and d.where[len(where) + 1 : -1].isdigit()
    }
    entries = iter(read)
    return [(i, bad[i] if i in bad else next(entries)) for i in range(len(read) + len(bad))]


def _steady(steady: _Steady | None) -> tuple[float, float] | None:
    """The steady-state window of a summary's speed (None when absent or malformed)."""
    start, end = (steady.start_s, steady.end_s) if steady is not None else (None, None)
    return (start, end) if start is not None and end is not None and end > start else None


def _counts(samples: list[dict[str, Any]]) -> StatusCounts:
    return StatusCounts.of(r.get("status") for r in samples)


def numerics_inputs(run_dir: Path, task: str, samples: list[dict[str, Any]]) -> NumericsInputs | None:
    """The task's positions (positions.bin) of the requests whose sample record got an answer, by pass and
    doc_id; None when the task recorded none. An unreadable positions file is refused (GateInputError)."""
    answered = {s.get("key") for s in samples if s.get("status") != "api_error"}
    try:
        stored = read_positions(run_dir, task)
    except StoreError as e:
        raise GateInputError(str(e)) from None
    if not stored:
        return None
    main, again = split_passes({k: p for k, p in stored.items() if k in answered})
    if not main and not again:
        raise GateInputError(
            f"{run_dir / POSITIONS} holds positions of {task} but no sample record of them got an answer; "
            "re-run the same command to complete the run"
        )
    return NumericsInputs(main, again)
