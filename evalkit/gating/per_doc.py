"""The gate's inputs of a task whose records are one per request, not per document (lm-eval's
``multiple_choice`` / ``loglikelihood`` / ``loglikelihood_rolling`` tasks: a request per choice or rolling window).

Such a task's sample records carry no correctness; its summary's ``detail.doc_scores`` holds lm-eval's own 0/1
score of each document (``{"acc,none": {"<doc_id>": 0|1}}``, from ``process_results``), which the gate pairs
document by document as it pairs a generation task's samples; ``detail.doc_pairs`` each corpus metric's
per-document (loglikelihood, length) pairs (``{"word_perplexity,none": {"aggregation": "weighted_perplexity",
"docs": {"<doc_id>": [ll, words]}}}``), judged by :mod:`evalkit.gating.corpus`; and ``detail.not_gated`` each
metric with neither, with the reason. Coverage counts documents: those asked for are the documents of the run's
records (every request of an asked document is recorded, answered or not), those scored the documents lm-eval
scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from evalkit.contracts import CORPUS_AGGREGATIONS
from evalkit.gating.inputs import CorpusMetric, MetricSamples
from evalkit.store.files import SAMPLES


@dataclass(frozen=True)
class PerDocInputs:
    """What ``detail`` gives the gate for a per-request task (see the module docstring)."""

    metrics: dict[str, MetricSamples]
    asked: frozenset[int]
    scored: frozenset[int]
    not_gated: dict[str, str]
    corpus: dict[str, CorpusMetric]
    problems: tuple[str, ...]
    ignored: tuple[tuple[str, Any], ...]  # (where in detail, value as written): malformed, left out


def per_doc_inputs(
    task: str, detail: dict[str, Any], samples: list[dict[str, Any]], planned: int | None
) -> PerDocInputs | None:
    """The per-document metrics of ``task`` from its summary's ``detail`` (None when it holds no
    ``doc_scores``: the task's records are per document); ``planned``: the manifest's request count."""
    raw = detail.get("doc_scores")
    if raw is None:
        return None
    ignored: list[tuple[str, Any]] = []
    metrics: dict[str, MetricSamples] = {}
    for name, values in raw.items() if isinstance(raw, dict) else ():
        items = _items(values)
        if items is None:
            ignored.append((f"detail.doc_scores.{name}", values))
            continue
        metrics[name] = MetricSamples(name=name, filter=name.split(",", 1)[-1], items=items)
    if not isinstance(raw, dict):
        ignored.append(("detail.doc_scores", raw))
    corpus: dict[str, CorpusMetric] = {}
    pairs = detail.get("doc_pairs", {})
    for name, entry in pairs.items() if isinstance(pairs, dict) else ():
        metric = _corpus(str(name), entry)
        if metric is None:
            ignored.append((f"detail.doc_pairs.{name}", entry))
        else:
            corpus[metric.name] = metric
    if not isinstance(pairs, dict):
        ignored.append(("detail.doc_pairs", pairs))
    not_gated = detail.get("not_gated")
    if not isinstance(not_gated, dict):
        not_gated = {}
    problems = []
    if planned is not None and len(samples) < planned:
        problems.append(
            f"{task}: {SAMPLES} holds {len(samples)} of the {planned} requests the manifest planned (a cut run "
            "dir); re-run the same command to complete it"
        )
    return PerDocInputs(
        metrics=metrics,
        asked=frozenset(s["doc_id"] for s in samples),
        scored=frozenset(
            {d for m in metrics.values() for d in m.items} | {d for c in corpus.values() for d in c.items}
        ),
        not_gated={str(k): str(v) for k, v in not_gated.items()},
        corpus=corpus,
        problems=tuple(problems),
        ignored=tuple(ignored),
    )


def _items(values: Any) -> dict[int, tuple[int, ...]] | None:
    """``{"<doc_id>": 0|1}`` as doc_id -> (score,); None when any key or value is something else."""
    if not isinstance(values, dict):
        return None
    items: dict[int, tuple[int, ...]] = {}
    for key, value in values.items():
        if not (isinstance(key, str) and key.isdigit()) or isinstance(value, bool) or value not in (0, 1):
            return None
        items[int(key)] = (int(value),)
    return items


def _corpus(name: str, entry: Any) -> CorpusMetric | None:
    """``{"aggregation": ..., "docs": {"<doc_id>": [ll, length]}}`` as a CorpusMetric; None when malformed (an
    unknown aggregation, a key that is not a doc id, a value that is not two finite numbers with a positive
    length)."""
    if not isinstance(entry, dict) or entry.get("aggregation") not in CORPUS_AGGREGATIONS:
        return None
    docs = entry.get("docs")
    if not isinstance(docs, dict):
        return None
    items: dict[int, tuple[float, float]] = {}
    for key, value in docs.items():
        if not (isinstance(key, str) and key.isdigit()) or not _pair(value):
            return None
        items[int(key)] = (float(value[0]), float(value[1]))
    return CorpusMetric(name=name, aggregation=str(entry["aggregation"]), items=items)


def _pair(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value)
        and value[1] > 0
    )
