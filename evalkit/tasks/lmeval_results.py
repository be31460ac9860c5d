"""An lm-eval task's scores, computed as lm-eval's evaluator computes them: per document, the responses through
the task's own filters and ``process_results``; over documents, the task's aggregations and lm-eval's
``stderr_for_metric`` (``task`` is lm-eval's ConfigurableTask)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from evalkit.contracts import CORPUS_AGGREGATIONS, MetricValue
from evalkit.scoring.estimators import share_interval
from evalkit.tasks.lmeval_scored import doc_results


def generation_metrics(task: Any, name: str, response_text: str, doc_id: int, prompt: str) -> dict[str, dict[str, Any]]:
    """{filter: {metric: value, "_filtered": the filtered answer}} for one generation."""
    from lm_eval.api.instance import Instance

    doc = task.eval_docs[doc_id]
    inst = Instance(
        request_type="generate_until",
        doc=doc,
        arguments=(prompt, {}),
        idx=0,
        metadata=(name, doc_id, 1),
        resps=[response_text],
    )
    for ensemble in task._filters:
        ensemble.apply([inst])
    out = {f: task.process_results(doc, [v]) for f, v in inst.filtered_resps.items()}
    return {f: {**m, "_filtered": inst.filtered_resps[f]} for f, m in out.items()}


def scored_metrics(
    task: Any, name: str, output_type: str, doc_id: int, extracted: Sequence[dict[str, str | None]]
) -> dict[str, dict[str, Any]] | None:
    """{filter: {metric: value}} for one document from its scored answers (in ``sample_index`` order): each of
    lm-eval's requests' result through the filters, then ``process_results`` over them in lm-eval's order; None
    when an answer is missing its logprobs."""
    from lm_eval.api.instance import Instance

    results = doc_results(output_type, extracted)
    if results is None:
        return None
    doc = task.eval_docs[doc_id]
    kind = "loglikelihood_rolling" if output_type == "loglikelihood_rolling" else "loglikelihood"
    insts = [
        Instance(request_type=kind, doc=doc, arguments=("", ""), idx=i, metadata=(name, doc_id, 1), resps=[x])
        for i, x in enumerate(results)
    ]
    for ensemble in task._filters:
        ensemble.apply(insts)
    return {f: task.process_results(doc, [i.filtered_resps[f] for i in insts]) for f in insts[0].filtered_resps}


def aggregate(task: Any, raw: dict[tuple[str, str], list[Any]]) -> dict[str, MetricValue]:
    """Each (metric, filter)'s per-document values aggregated by the task, with lm-eval's stderr and a 95% CI: a
    share of 0/1 documents (their mean) gets its Wilson interval (``ci_method`` ``wilson``), any other metric
    value ± 1.96 × lm-eval's stderr (``lm-eval-normal``, clipped to [0, 1] when every value lies there)."""
    from lm_eval.api.metrics import stderr_for_metric

    out: dict[str, MetricValue] = {}
    aggregations = task.aggregation()
    for (metric, fname), items in raw.items():
        agg = aggregations[metric]
        value = float(agg(items))
        se_fn = stderr_for_metric(metric=agg, bootstrap_iters=100000)
        se = float(se_fn(items)) if se_fn is not None and len(items) > 1 else None
        ci, method = lm_eval_interval(value, se, items)
        out[f"{metric},{fname}"] = MetricValue(value=value, stderr=se, ci95=ci, n=len(items), ci_method=method)
    return out


def lm_eval_interval(
    value: float, se: float | None, items: Sequence[Any]
) -> tuple[tuple[float, float] | None, str | None]:
    """The 95% interval of an lm-eval metric of ``value`` over its per-document ``items`` and its ``ci_method``."""
    binary = bool(items) and all(isinstance(x, int | float) and x in (0, 1) for x in items)
    if binary and abs(value - sum(items) / len(items)) < 1e-9:  # a share of documents: Wilson, as evalkit's own
        return share_interval(value, len(items))
    if se is None:
        return None, None
    ci = (value - 1.96 * se, value + 1.96 * se)
    if all(isinstance(x, int | float) and 0 <= x <= 1 for x in items):
        ci = (max(0.0, ci[0]), min(1.0, ci[1]))  # a proportion's interval stays within [0, 1]
    return ci, "lm-eval-normal"


def aggregation_names(task: Any) -> dict[str, str]:
    """Each metric's aggregation as lm-eval registered it (``weighted_perplexity``, ``mean``, ...)."""
    return {m: getattr(fn, "__name__", "") for m, fn in task.aggregation().items()}


def doc_scores(
    per_doc: dict[str, dict[int, Any]], aggregations: dict[str, str] | None = None
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, Any]], dict[str, str]]:
    """The metrics whose per-document values are all 0/1 (``acc``, ``acc_norm``, ``exact_match``), as
    ``{metric: {doc_id: 0|1}}``; the corpus metrics (an aggregation in :data:`CORPUS_AGGREGATIONS` of
    per-document (loglikelihood, length) pairs: ``word_perplexity``, ``byte_perplexity``, ``bits_per_byte``), as
    ``{metric: {"aggregation": name, "docs": {doc_id: [loglikelihood, length]}}}``; and each other metric with why
    the gate cannot pair it per document. ``aggregations``: "metric,filter"'s metric -> its aggregation's name."""
    scores: dict[str, dict[str, int]] = {}
    pairs: dict[str, dict[str, Any]] = {}
    not_gated: dict[str, str] = {}
    for name, values in per_doc.items():
        aggregation = (aggregations or {}).get(name.split(",", 1)[0], "")
        if all(isinstance(v, bool | int | float) and v in (0, 1) for v in values.values()):
            scores[name] = {str(d): int(v) for d, v in values.items()}
        elif aggregation in CORPUS_AGGREGATIONS and all(_is_pair(v) for v in values.values()):
            docs = {str(d): [float(v[0]), float(v[1])] for d, v in values.items()}
            pairs[name] = {"aggregation": aggregation, "docs": docs}
        else:
            not_gated[name] = (
                "its per-document values are neither 0/1 scores nor (loglikelihood, length) pairs of a "
                "perplexity or bits-per-byte aggregation, so no paired per-document test applies"
            )
    return scores, pairs, not_gated


def _is_pair(value: Any) -> bool:
    """A (loglikelihood, length) pair: two finite numbers, the length positive."""
    return (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value)
        and value[1] > 0
    )
