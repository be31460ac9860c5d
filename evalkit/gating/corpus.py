"""The gate's rule for lm-eval's corpus metrics (``loglikelihood_rolling`` tasks: ``word_perplexity``,
``byte_perplexity``, ``bits_per_byte``), judged from each document's (loglikelihood, length) pair.

Rule ``<task>: <metric> change``: the candidate's corpus metric, aggregated as lm-eval aggregates it over the
documents scored in both runs, against the baseline's; the observed value is the relative change (candidate /
baseline - 1, lower is better, so an increase is a worsening). It fails when the increase is beyond the policy's
``max_increase`` (``accuracy.default.max_increase``, or per task and metric) and a one-sided test says so at the
rule's ``alpha``: a paired bootstrap of the corpus ratio over documents with an expanded percentile interval
(:func:`evalkit.gating.stats.corpus_bootstrap`; p of "within the budget"). The bootstrap is chosen over a Wilcoxon
signed-rank test of per-document bits-per-byte differences because the corpus metric weights each document by
its length while Wilcoxon weights documents equally and tests a pseudo-median: with documents of unequal length
the two can disagree even in sign. In non-inferiority mode it passes only when the interval's upper end is within
the budget. Fewer than :data:`MIN_CORPUS_DOCS` documents scored in both runs, or a document whose length differs
between the runs, leave the gate unable to decide (with the reason).
"""

from __future__ import annotations

import numpy as np

from evalkit.gating.inputs import CorpusMetric
from evalkit.gating.policy import AccuracyRule, BootstrapSettings
from evalkit.gating.result import Rule, decide
from evalkit.gating.rules import estimated, verdict_note
from evalkit.gating.stats import corpus_bootstrap

MIN_CORPUS_DOCS = 20
"""The fewest documents scored in both runs a corpus rule decides on: a bootstrap over fewer documents has few
distinct resamples, and its false-alarm rate at the budget's edge rises
(docs/benchmarks/archive/gate-statistics.md, "The gate's perplexity rule")."""


def corpus_rule(
    task: str, base: CorpusMetric, cand: CorpusMetric, rule: AccuracyRule, boot: BootstrapSettings
) -> tuple[Rule, list[str]]:
    """The rule of one corpus metric both runs scored, and why the gate cannot decide on it (empty when it can)."""
    name = f"{task}: {base.name} change"
    if not rule.enabled:
        return Rule(name=name, task=task, kind="perplexity", verdict="skip", note="turned off by the policy"), []
    if base.aggregation != cand.aggregation:
        why = f"{task}: {base.name} is aggregated by {base.aggregation} in the baseline, {cand.aggregation} in the "
        why += "candidate; compare runs of the same task version"
        return _skip(name, task, why), [why]
    common = sorted(base.items.keys() & cand.items.keys())
    if len(common) < MIN_CORPUS_DOCS:
        why = (
            f"{task}: {base.name} was scored on {len(common)} documents in both runs, fewer than the "
            f"{MIN_CORPUS_DOCS} a paired bootstrap over documents needs; run more documents"
        )
        return _skip(name, task, why), [why]
    lb, ub = (np.array([base.items[d][i] for d in common], dtype=np.float64) for i in (0, 1))
    lc, uc = (np.array([cand.items[d][i] for d in common], dtype=np.float64) for i in (0, 1))
    differ = [d for d, x, y in zip(common, ub, uc, strict=True) if x != y]
    if differ:
        why = (
            f"{task}: {base.name}: {len(differ)} documents have another length in the candidate (first: doc "
            f"{differ[0]}), so the runs scored different texts; compare runs of the same documents"
        )
        return _skip(name, task, why), [why]
    budget = rule.max_increase
    est = corpus_bootstrap((lb, ub, lc, uc), base.aggregation, budget, rule.alpha, boot.resamples, boot.seed)
    verdict, decided_by = decide(est.value, est.ci[1], est.p_value, budget, rule.alpha, rule.mode)
    b_value = CorpusMetric(base.name, base.aggregation, {d: base.items[d] for d in common}).value
    c_value = CorpusMetric(cand.name, cand.aggregation, {d: cand.items[d] for d in common}).value
    note = verdict_note(est.value, est, budget, rule.alpha, verdict, rule.mode, "%")
    if len(common) < max(len(base.items), len(cand.items)):
        note += (
            f"; compared on the {len(common)} documents scored in both runs "
            f"(baseline {len(base.items)}, candidate {len(cand.items)})"
        )
    rule_out = Rule(
        name=name,
        task=task,
        kind="perplexity",
        verdict=verdict,
        baseline=b_value,
        candidate=c_value,
        budget=budget,
        mode=rule.mode,
        alpha=rule.alpha,
        decided_by=decided_by,
        note=note,
        **estimated(est),
    )
    return rule_out, []


def _skip(name: str, task: str, why: str) -> Rule:
    return Rule(name=name, task=task, kind="perplexity", verdict="skip", note=why)
