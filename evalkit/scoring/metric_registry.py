"""The metric registry behind :meth:`evalkit.tasks.base.Task.summarize`, and status counts.

A task names its metrics (``metrics = ("avg", "pass", "maj")``, or ``metrics:`` in its YAML); each entry of
:data:`METRICS` says which names it reports for K samples per item and computes them from the task's records
grouped by item (:class:`Samples`). The estimators are :mod:`evalkit.scoring.estimators`'s:

- ``accuracy`` → ``accuracy,<key>``: share of scored samples judged correct; stderr ``sqrt(p(1-p)/n)``, Wilson
  95% interval (``ci_method`` ``wilson``); n = samples. For one sample per item.
- ``avg`` → ``avg@K``: mean correctness over all scored samples; stderr clustered by item, Wilson 95% interval
  at the effective sample size that stderr gives (``wilson-clustered``; between the items and the samples);
  n = samples. For several samples per item.
- ``pass`` → ``pass@k`` for k = 1, 2, 4, … and K: unbiased estimator averaged over items with at least k
  scored samples; stderr across items; Wilson 95% interval over the items (``wilson``: each item's estimate lies
  in [0, 1], so the interval of a 0/1 share is the cautious one, and keeps a width at 100%); n = items.
- ``maj`` → ``maj@K``: majority vote over each item's canonical answers, ties give fractional credit; stderr and
  interval as pass@k's; n = items.
- ``logprob`` → ``mean_token_logprob`` and ``top1`` → ``top1_rate`` (``logprobs`` tasks): the mean over texts of
  each text's mean actual-token logprob / share of positions whose actual token the server ranked first (the
  samples' ``figures``, main pass only: ``sample_index`` 0); stderr over texts, normal 95% CI (``normal``);
  n = texts.

Each interval is chosen here (:func:`~evalkit.scoring.estimators.share_interval` for a share), stored with its
``ci_method`` and shown as stored by every output.

Samples with status ``api_error`` are never scored and are left out of every denominator; a verifier timeout
(``correct`` None) counts as wrong.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalkit.contracts import BASE_STATUSES, STATUSES, MetricValue, SampleFields, Status
from evalkit.scoring.estimators import maj_at_k, mean_ci_clustered, pass_at_k, pass_at_k_ladder, share_interval

WILSON_CI = "Wilson 95% interval over the scored samples"
CLUSTER_CI = "Wilson 95% interval at the effective sample size of the stderr clustered by problem"
PROBLEMS_CI = "Wilson 95% interval over problems; stderr across problems"
TEXT_CI = "95% normal CI of the mean over texts (each text's own figure, main pass)"
MAJ_TIE_RULE = "fractional: 1/t when the gold answer is one of t answers tied for most votes"


def count_statuses(records: Iterable[SampleFields], always: Sequence[Status] = BASE_STATUSES) -> dict[str, int]:
    """Requests per status, in ``contracts.STATUSES`` order: those in ``always`` even at 0, the others only
    where they occur."""
    counts = Counter(r.status for r in records)
    return {s: counts[s] for s in STATUSES if counts[s] or s in always}


@dataclass
class Samples:
    """One task's records grouped by item (document), as the metrics read them."""

    records: list[SampleFields]
    key: str  # of the records' ``correct`` / ``extracted``
    canonical: Callable[[str | None], Hashable | None]  # equal answers compare equal (maj@K votes)
    gold: Mapping[int, str | None] = field(default_factory=dict)  # item -> its target
    scored: list[SampleFields] = field(init=False)
    by_doc: dict[int, list[SampleFields]] = field(init=False)  # scored samples, by sample index
    errors_by_doc: Counter[int] = field(init=False)
    doc_ids: list[int] = field(init=False)  # items with any record, failed ones included
    k: int = field(init=False)  # samples per item (from the records' sample indices)

    def __post_init__(self) -> None:
        self.k = max((r.sample_index for r in self.records), default=-1) + 1
        self.scored = [r for r in self.records if r.status != "api_error"]
        self.errors_by_doc = Counter(r.doc_id for r in self.records if r.status == "api_error")
        groups: dict[int, list[SampleFields]] = defaultdict(list)
        for r in self.scored:
            groups[r.doc_id].append(r)
        self.by_doc = {d: sorted(rs, key=lambda r: r.sample_index) for d, rs in groups.items()}
        self.doc_ids = sorted(set(self.by_doc) | set(self.errors_by_doc))

    def is_correct(self, r: SampleFields) -> bool:
        return r.correct.get(self.key) is True

    def answered(self) -> list[list[SampleFields]]:
        """Each item's scored samples, for the items that have any, by doc id."""
        return [self.by_doc[d] for d in self.doc_ids if d in self.by_doc]

    def gold_of(self, doc_id: int) -> str | None:
        for r in self.by_doc.get(doc_id, []):
            if r.target is not None:
                return r.target
        return self.gold.get(doc_id)

    def votes(self, doc_id: int) -> list[Hashable | None]:
        """An item's maj@K votes: a sample judged correct votes for the gold answer even if written differently
        (``\\dfrac{140}{2}``)."""
        gold_key = self.canonical(self.gold_of(doc_id))
        return [
            gold_key if self.is_correct(r) else self.canonical(r.extracted.get(self.key)) for r in self.by_doc[doc_id]
        ]


def share(values: list[list[float]], n: int, clusters: int | None = None) -> MetricValue:
    """Mean of ``values`` (one list per item, each value in [0, 1]) over ``n`` samples with the item-clustered
    stderr and the share's Wilson interval (at the effective sample size when the samples come from fewer
    ``clusters`` items)."""
    if not values:
        return MetricValue(value=None, n=n)
    mean, stderr, _ = mean_ci_clustered(values)
    ci, method = share_interval(mean, n, stderr, clusters)
    return MetricValue(value=mean, stderr=stderr, ci95=ci, n=n, ci_method=method)


def _accuracy(s: Samples) -> dict[str, MetricValue]:
    name = f"accuracy,{s.key}"
    if not s.scored:
        return {name: MetricValue(value=None, n=0)}
    right, n = sum(1 for r in s.scored if s.is_correct(r)), len(s.scored)
    p = right / n
    ci, method = share_interval(p, n)
    return {name: MetricValue(value=p, stderr=(p * (1 - p) / n) ** 0.5, ci95=ci, n=n, ci_method=method)}


def _avg(s: Samples) -> dict[str, MetricValue]:
    if s.k == 0:
        return {}
    values = [[1.0 if s.is_correct(r) else 0.0 for r in rs] for rs in s.answered()]
    return {f"avg@{s.k}": share(values, n=len(s.scored), clusters=len(values))}


def _pass(s: Samples) -> dict[str, MetricValue]:
    counts = [(len(rs), sum(1 for r in rs if s.is_correct(r))) for rs in s.answered()]
    out = {}
    for j in pass_at_k_ladder(s.k):
        per = [[pass_at_k(n, c, j)] for n, c in counts if n >= j]
        out[f"pass@{j}"] = share(per, n=len(per))
    return out


def _maj(s: Samples) -> dict[str, MetricValue]:
    if s.k == 0:
        return {}
    maj = [[maj_at_k(s.votes(d), s.canonical(s.gold_of(d)))] for d in s.doc_ids if d in s.by_doc]
    return {f"maj@{s.k}": share(maj, n=len(maj))}


def _text_mean(s: Samples, figure: str, name: str) -> dict[str, MetricValue]:
    values = [[r.figures[figure]] for r in s.scored if r.sample_index == 0 and r.figures and figure in r.figures]
    if not values:
        return {name: MetricValue(value=None, n=0)}
    mean, stderr, ci = mean_ci_clustered(values)
    method = "normal" if ci is not None else None
    return {name: MetricValue(value=mean, stderr=stderr, ci95=ci, n=len(values), ci_method=method)}


@dataclass(frozen=True)
class Metric:
    names: Callable[[int, str], list[str]]  # (K samples per item, key) -> the metric names reported
    compute: Callable[[Samples], dict[str, MetricValue]]
    ci: str  # how its interval is computed, for the summary's detail


METRICS: dict[str, Metric] = {
    "accuracy": Metric(lambda k, key: [f"accuracy,{key}"], _accuracy, WILSON_CI),
    "avg": Metric(lambda k, key: [f"avg@{k}"], _avg, CLUSTER_CI),
    "pass": Metric(lambda k, key: [f"pass@{j}" for j in pass_at_k_ladder(k)], _pass, PROBLEMS_CI),
    "maj": Metric(lambda k, key: [f"maj@{k}"], _maj, PROBLEMS_CI),
    "logprob": Metric(
        lambda k, key: ["mean_token_logprob"], lambda s: _text_mean(s, "mean_logprob", "mean_token_logprob"), TEXT_CI
    ),
    "top1": Metric(lambda k, key: ["top1_rate"], lambda s: _text_mean(s, "top1_rate", "top1_rate"), TEXT_CI),
}


def metric(name: str) -> Metric:
    if name not in METRICS:
        raise KeyError(f"unknown metric '{name}'; known: {', '.join(METRICS)}")
    return METRICS[name]


def metric_names(names: Sequence[str], k: int, key: str) -> list[str]:
    return [m for name in names for m in metric(name).names(k, key)]


def compute_metrics(names: Sequence[str], samples: Samples) -> dict[str, MetricValue]:
    out: dict[str, MetricValue] = {}
    for name in names:
        out.update(metric(name).compute(samples))
    return out


def token_stats(values: list[int]) -> dict[str, float | int | None]:
    if not values:
        return {"mean": None, "p50": None, "max": None, "n": 0}
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "p50": float(np.median(a)), "max": int(a.max()), "n": len(values)}


def sampled_detail(s: Samples, names: Sequence[str], item_id: Callable[[int], str | None]) -> dict[str, Any]:
    """The summary's detail of a task scored per sample: request outcomes, token statistics and a table per
    item (``item_id``: an item's id, None when unknown); ``names``: the task's metrics."""
    per_problem: list[dict[str, Any]] = []
    for doc_id in s.doc_ids:
        rs = s.by_doc.get(doc_id, [])
        right = sum(1 for r in rs if s.is_correct(r))
        answers = Counter(a for a in (s.canonical(r.extracted.get(s.key)) for r in rs) if a is not None)
        per_problem.append(
            {
                "doc_id": doc_id,
                "id": item_id(doc_id),
                "target": s.gold_of(doc_id),
                "n": len(rs),
                "correct": right,
                "accuracy": right / len(rs) if rs else None,
                "answers": dict(answers.most_common()),
                "no_answer": sum(1 for r in rs if r.extracted.get(s.key) is None),
                "truncated": sum(1 for r in rs if r.status == "truncated"),
                "api_error": s.errors_by_doc[doc_id],
            }
        )
    total = len(s.records)
    counts = count_statuses(s.records)
    detail: dict[str, Any] = {
        "num_samples": s.k,
        "num_problems": len(s.doc_ids),
        "requests": total,
        "scored": len(s.scored),
        "status_counts": counts,
        "rates": {st: (counts.get(st, 0) / total if total else None) for st in BASE_STATUSES[1:]},
        "rates_denominator": total,
        "verify_timeouts": sum(
            1 for r in s.scored if r.extracted.get(s.key) is not None and r.correct.get(s.key) is None
        ),
    }
    if "maj" in names:
        detail["maj_tie_rule"] = MAJ_TIE_RULE
    detail["ci"] = "; ".join(dict.fromkeys(metric(n).ci for n in names))
    detail["tokens"] = {
        "output": token_stats([r.output_tokens for r in s.scored if r.output_tokens is not None]),
        "reasoning": token_stats([r.reasoning_tokens for r in s.scored if r.reasoning_tokens is not None]),
    }
    detail["per_problem"] = per_problem
    return detail
