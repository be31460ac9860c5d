"""The gate's checks, each turning inputs and a policy entry into one :class:`Rule`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import gmean

from evalkit.contracts import QUANTILES, speed_metric
from evalkit.gating.inputs import MetricSamples, StatusCounts
from evalkit.gating.matching import RunsMatch, SpeedSlice
from evalkit.gating.policy import AccuracyRule, BootstrapSettings, ExpectedScore, RatesPolicy, SpeedRule
from evalkit.gating.result import EPS, Rule, RuleVerdict, decide
from evalkit.gating.rule_catalogue import GatedSpeed
from evalkit.gating.stats import (
    Estimate,
    binomial_vs_expected,
    bootstrap_vs_expected,
    mcnemar_exact,
    paired_bootstrap,
    speed_runs_change,
)

# a rate's SpeedSlice field where it is not the catalogue's: output tokens/s is summed from the requests' tokens
SLICE_FIELDS = {"output_tokens_per_s": "output_tokens"}


def sums(items: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Per item: right answers and scored samples, as float arrays."""
    return np.fromiter(map(sum, items), float, len(items)), np.fromiter(map(len, items), float, len(items))


def verdict_note(
    worsening: float, est: Estimate, budget: float, alpha: float, verdict: str, mode: str, unit: str
) -> str:
    """Why a rule passed or failed, and whether its sample could detect a worsening of the budget's size.
    ``unit`` is " points" (values are fractions, shown x100) or "%" (relative changes, shown x100)."""

    def show(x: float) -> str:
        return f"{x * 100:.2f}{unit}"

    what = f"worse by {show(worsening)}" if worsening > 0 else f"no worse (better by {show(-worsening)})"
    if mode == "non-inferiority":
        shown = "shown within" if verdict == "pass" else "not shown within"
        text = f"{what}; {shown} the budget of {show(budget)} at {1 - alpha:.0%} confidence"
    elif verdict == "fail":
        text = f"{what}: beyond the budget of {show(budget)} and significant (p={est.p_value:.3g} < {alpha})"
    elif worsening > budget:
        text = f"{what}: beyond the budget of {show(budget)} but within noise (p={est.p_value:.3g} ≥ {alpha})"
    else:
        text = f"{what}: within the budget of {show(budget)}"
    if est.mde is not None and est.mde > budget:
        text += f"; this sample detects only worsenings of ≥{show(est.mde)} (MDE)"
    return text


def estimated(est: Estimate) -> dict[str, Any]:
    """A rule's fields that come from its estimate: the observed value, p-value, interval, MDE and method."""
    return dict(
        observed=est.value, p_value=est.p_value, ci=est.ci, ci_level=est.ci_level, mde=est.mde, method=est.method
    )


@dataclass(frozen=True)
class PairedAccuracy:
    """One accuracy metric of two runs over the items scored in both (``items``, sorted): per item right answers
    and scored samples of the baseline (``sb``/``nb``) and the candidate (``sc``/``nc``), and the paired estimate of
    the difference (candidate − baseline)."""

    items: list[int]
    sb: np.ndarray
    nb: np.ndarray
    sc: np.ndarray
    nc: np.ndarray
    estimate: Estimate


def paired_accuracy(base: MetricSamples, cand: MetricSamples, alpha: float, boot: BootstrapSettings) -> PairedAccuracy:
    """The gate's paired test of one accuracy metric over the items scored in both runs (at least one): exact
    McNemar (one-sided: is the candidate worse) with Tango's interval when every item has one sample in both,
    else a paired bootstrap over items with the sign-flip test."""
    common = sorted(base.items.keys() & cand.items.keys())
    (sb, nb), (sc, nc) = sums([base.items[d] for d in common]), sums([cand.items[d] for d in common])
    if (nb == 1).all() and (nc == 1).all():
        losses, gains = int(((sb == 1) & (sc == 0)).sum()), int(((sb == 0) & (sc == 1)).sum())
        est = mcnemar_exact(losses, gains, len(common), alpha)
    else:
        est = paired_bootstrap(sb, nb, sc, nc, alpha, boot.resamples, boot.seed)
    return PairedAccuracy(common, sb, nb, sc, nc, est)


def accuracy_rule(
    task: str, base: MetricSamples, cand: MetricSamples, rule: AccuracyRule, boot: BootstrapSettings
) -> Rule:
    """Paired comparison of one accuracy metric over the items scored in both runs: exact McNemar when every
    item has one sample in both, else a paired bootstrap over items."""
    name = f"{task}: {base.name}"
    common = sorted(base.items.keys() & cand.items.keys())
    if not rule.enabled:
        return Rule(name=name, task=task, kind="accuracy", verdict="skip", note="turned off by the policy")
    if not common:
        return Rule(name=name, task=task, kind="accuracy", verdict="skip", note="no item was scored in both runs")
    paired = paired_accuracy(base, cand, rule.alpha, boot)
    sb, nb, sc, nc, est = paired.sb, paired.nb, paired.sc, paired.nc, paired.estimate
    base_value = float(sb.sum() / nb.sum())
    budget = rule.budget(base_value)
    verdict, decided_by = decide(-est.value, -est.ci[0], est.p_value, budget, rule.alpha, rule.mode)
    note = verdict_note(-est.value, est, budget, rule.alpha, verdict, rule.mode, " points")
    if len(common) < max(len(base.items), len(cand.items)):
        note += (
            f"; compared on the {len(common)} items scored in both runs "
            f"(baseline {len(base.items)}, candidate {len(cand.items)})"
        )
    return Rule(
        name=name,
        task=task,
        kind="accuracy",
        verdict=verdict,
        baseline=base_value,
        candidate=float(sc.sum() / nc.sum()),
        budget=budget,
        mode=rule.mode,
        alpha=rule.alpha,
        decided_by=decided_by,
        note=note,
        **estimated(est),
    )


def expected_rule(task: str, cand: MetricSamples | None, exp: ExpectedScore, boot: BootstrapSettings) -> Rule:
    """The candidate's score against a published value: exact binomial test with one sample per item, else a
    bootstrap over items. A metric the candidate lacks fails (the check could not be made)."""
    name = f"{task}: {exp.metric} vs expected {exp.value:g}"
    if cand is None or not cand.items:
        return Rule(
            name=name,
            task=task,
            kind="expected",
            verdict="fail",
            baseline=exp.value,
            budget=exp.max_drop,
            note=f"the candidate has no scored {exp.metric} for {task}",
        )
    s, n = sums(list(cand.items.values()))
    if (n == 1).all():
        est = binomial_vs_expected(int(s.sum()), len(s), exp.value, exp.alpha)
    else:
        est = bootstrap_vs_expected(s, n, exp.value, exp.alpha, boot.resamples, boot.seed)
    drop = exp.value - est.value
    verdict, decided_by = decide(drop, exp.value - est.ci[0], est.p_value, exp.max_drop, exp.alpha, exp.mode)
    return Rule(
        name=name,
        task=task,
        kind="expected",
        verdict=verdict,
        baseline=exp.value,
        candidate=est.value,
        budget=exp.max_drop,
        mode=exp.mode,
        alpha=exp.alpha,
        decided_by=decided_by,
        **estimated(est),
        note=verdict_note(drop, est, exp.max_drop, exp.alpha, verdict, exp.mode, " points"),
    )


def rate_rules(task: str, counts: StatusCounts, rates: RatesPolicy) -> list[Rule]:
    """The candidate's rates of the rule catalogue's statuses (error, truncation, empty answers, ...) against
    their maxima (those the policy sets)."""
    out: list[Rule] = []
    for rule, limit in rates.limits():
        label, rate = rule.label, counts.rate(*rule.statuses)
        if rate is None:
            out.append(
                Rule(
                    name=f"{task}: {label}",
                    task=task,
                    kind="rate",
                    verdict="skip",
                    budget=limit,
                    note="the candidate sent no requests",
                )
            )
            continue
        verdict: RuleVerdict = "fail" if rate > limit else "pass"
        hits = sum(getattr(counts, s) for s in rule.statuses)
        out.append(
            Rule(
                name=f"{task}: {label}",
                task=task,
                kind="rate",
                verdict=verdict,
                observed=rate,
                candidate=rate,
                budget=limit,
                decided_by="threshold",
                note=f"{hits} of {counts.total} requests {' or '.join(rule.statuses)}",
            )
        )
    return out


def _figure(s: SpeedSlice, field: str, stat: str | None) -> float | None:
    """The slice's figure as the rule shows it: the latency's percentile (the median for p50), or output
    tokens/s."""
    values = getattr(s, field)
    if not values:
        return None
    if field == "output_tokens":
        return sum(values) / s.wall_s if s.wall_s else None
    if stat is None or stat == "p50":
        return float(np.median(values))
    return float(np.percentile(values, dict(QUANTILES)[stat]))


def _speed_skip(name: str, task: str, rule: SpeedRule, note: str, verdict: RuleVerdict = "skip") -> Rule:
    return Rule(name=name, task=task, kind="speed", verdict=verdict, budget=rule.max_change, note=note)


def speed_rule(task: str, gated: GatedSpeed, rule: SpeedRule, match: RunsMatch, min_requests: int) -> Rule:
    """Relative change of one speed figure (each run's median latency, or its output tokens/s). Several runs per
    side: fails when worse by more than ``max_change`` and Welch's test over the runs says so at ``alpha``. One
    run per side: fails when worse by more than the run-to-run noise budget (or ``max_change``, if larger); no
    significance is claimed from the requests of one run. A latency change under the rule's floor never fails.
    Not compared (load not matched): skipped, or failed when the policy requires matched load."""
    key = gated.key
    metric = speed_metric(key)
    field, lower_is_better = SLICE_FIELDS.get(key, metric.field), metric.lower_is_better
    name = f"{task}: {metric.label}"
    if match.base is None or match.cand is None:
        return _speed_skip(name, task, rule, match.note, match.verdict)
    short = [len(getattr(s, field)) for s in (*match.base, *match.cand) if len(getattr(s, field)) < min_requests]
    if short:
        return _speed_skip(
            name, task, rule, f"too few requests with this figure in a run ({min(short)}, need {min_requests})"
        )
    bf = [_figure(s, field, metric.stat) for s in match.base]
    cf = [_figure(s, field, metric.stat) for s in match.cand]
    if any(x is None or x <= 0 for x in (*bf, *cf)):
        return _speed_skip(name, task, rule, "a run's figure is unknown (no wall time or no positive values)")
    b = [float(x) for x in bf if x is not None]
    c = [float(x) for x in cf if x is not None]
    b_mid, c_mid = float(gmean(b)), float(gmean(c))
    if len(b) >= 2 and len(c) >= 2:
        est = speed_runs_change(b, c, lower_is_better=lower_is_better, budget=rule.max_change, alpha=rule.alpha)
        worse = est.value if lower_is_better else -est.value
        failed = worse > rule.max_change + EPS and est.p_value < rule.alpha
        verdict: RuleVerdict = "fail" if failed else "pass"
        note = verdict_note(worse, est, rule.max_change, rule.alpha, verdict, "regression", "%")
        fields: dict[str, Any] = dict(budget=rule.max_change, alpha=rule.alpha, decided_by="p_value", **estimated(est))
    else:
        change = c_mid / b_mid - 1.0
        worse = change if lower_is_better else -change
        budget = max(rule.max_change, rule.noise if rule.noise is not None else gated.noise)
        failed = worse > budget + EPS
        what = f"worse by {worse:.1%}" if worse > 0 else f"no worse (better by {-worse:.1%})"
        note = (
            f"{what}: {'beyond' if failed else 'within'} the run-to-run noise budget of {budget:.0%} "
            f"(one run per side); run each side ≥2 times to test changes of {rule.max_change:.0%}"
        )
        fields = dict(
            observed=change, budget=budget, decided_by="threshold",
            method=f"one run per side: against the run-to-run noise budget of {budget:.0%}, no significance test",
        )  # fmt: skip
    floor = rule.min_abs_ms if rule.min_abs_ms is not None else gated.floor_ms
    if failed and floor is not None and field != "output_tokens" and abs(c_mid - b_mid) < floor:
        failed = False
        note += f"; the change of {abs(c_mid - b_mid):.3g} ms is under the {floor:g} ms floor, so it does not fail"
    return Rule(
        name=name,
        task=task,
        kind="speed",
        verdict="fail" if failed else "pass",
        baseline=b_mid,
        candidate=c_mid,
        mode="regression",
        note="; ".join(x for x in (note, match.note) if x),
        **fields,
    )
