"""The gate's checks, each turning inputs and a policy entry into one :class:`Rule`."""

from __future__ import annotations

import numpy as np

from evalkit.gate.inputs import MetricSamples, StatusCounts
from evalkit.gate.matching import LoadMatch, SpeedSlice
from evalkit.gate.policy import AccuracyRule, BootstrapSettings, ExpectedScore, RatesPolicy, SpeedRule
from evalkit.gate.result import Rule, RuleVerdict, decide
from evalkit.gate.stats import (
    Estimate,
    binomial_vs_expected,
    bootstrap_vs_expected,
    mcnemar_exact,
    paired_bootstrap,
    speed_change,
)

SPEED_METRICS = {  # policy key -> (label, SpeedSlice field, lower is better)
    "output_tokens_per_s": ("output tokens/s", "output_tokens", False),
    "ttft_p50_ms": ("TTFT p50", "ttft_ms", True),
    "tpot_p50_ms": ("TPOT p50", "tpot_ms", True),
    "e2e_p50_ms": ("E2E latency p50", "e2e_ms", True),
}
RATES = {
    "max_error_rate": ("api_error", "error rate"),
    "max_truncated_rate": ("truncated", "truncation rate"),
    "max_empty_rate": ("empty", "empty-answer rate"),
    "max_tool_text_rate": ("tool_text", "unparsed tool-call rate"),
    "max_tool_calls_empty_rate": ("tool_calls_empty", "empty tool_calls rate"),
}


def sums(items: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Per item: right answers and scored samples, as float arrays."""
    return np.fromiter(map(sum, items), float, len(items)), np.fromiter(map(len, items), float, len(items))


def _verdict_note(
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
    (sb, nb), (sc, nc) = sums([base.items[d] for d in common]), sums([cand.items[d] for d in common])
    if (nb == 1).all() and (nc == 1).all():
        losses, gains = int(((sb == 1) & (sc == 0)).sum()), int(((sb == 0) & (sc == 1)).sum())
        est = mcnemar_exact(losses, gains, len(common), rule.alpha)
    else:
        est = paired_bootstrap(sb, nb, sc, nc, rule.alpha, boot.resamples, boot.seed)
    base_value = float(sb.sum() / nb.sum())
    budget = rule.budget(base_value)
    verdict, decided_by = decide(-est.value, -est.ci[0], est.p_value, budget, rule.alpha, rule.mode)
    note = _verdict_note(-est.value, est, budget, rule.alpha, verdict, rule.mode, " points")
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
        observed=est.value,
        baseline=base_value,
        candidate=float(sc.sum() / nc.sum()),
        budget=budget,
        mode=rule.mode,
        alpha=rule.alpha,
        p_value=est.p_value,
        ci=est.ci,
        ci_level=est.ci_level,
        mde=est.mde,
        decided_by=decided_by,
        method=est.method,
        note=note,
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
        observed=est.value,
        baseline=exp.value,
        candidate=est.value,
        budget=exp.max_drop,
        mode=exp.mode,
        alpha=exp.alpha,
        p_value=est.p_value,
        ci=est.ci,
        ci_level=est.ci_level,
        mde=est.mde,
        decided_by=decided_by,
        method=est.method,
        note=_verdict_note(drop, est, exp.max_drop, exp.alpha, verdict, exp.mode, " points"),
    )


def rate_rules(task: str, counts: StatusCounts, rates: RatesPolicy) -> list[Rule]:
    """The candidate's error, truncation and empty-answer rates against their maxima (those the policy sets)."""
    out: list[Rule] = []
    for key, (status, label) in RATES.items():
        limit = getattr(rates, key)
        if limit is None:
            continue
        rate = counts.rate(status)
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
                note=f"{getattr(counts, status)} of {counts.total} requests {status}",
            )
        )
    return out


def _figure(s: SpeedSlice, field: str) -> float | None:
    """The slice's figure as the rule shows it: the median, or output tokens/s."""
    values = getattr(s, field)
    if not values:
        return None
    if field == "output_tokens":
        return sum(values) / s.wall_s if s.wall_s else None
    return float(np.median(values))


def speed_rule(
    task: str, key: str, rule: SpeedRule, match: LoadMatch, min_requests: int, boot: BootstrapSettings
) -> Rule:
    """Relative change of one speed figure between the matched slices; fails when it worsens by more than
    ``max_change`` and the worsening is significant, and fails with the "cannot compare" note when the policy
    requires matched load and the runs share no level."""
    label, field, lower_is_better = SPEED_METRICS[key]
    name = f"{task}: {label}"
    if match.base is None or match.cand is None:
        return Rule(name=name, task=task, kind="speed", verdict="fail", budget=rule.max_change, note=match.note)
    bv, cv = getattr(match.base, field), getattr(match.cand, field)
    if min(len(bv), len(cv)) < min_requests:
        return Rule(
            name=name,
            task=task,
            kind="speed",
            verdict="skip",
            budget=rule.max_change,
            note=f"too few requests with this figure ({len(bv)} vs {len(cv)}, need {min_requests})",
        )
    walls = (match.base.wall_s, match.cand.wall_s) if field == "output_tokens" else (None, None)
    if field == "output_tokens" and None in walls:
        return Rule(
            name=name,
            task=task,
            kind="speed",
            verdict="skip",
            budget=rule.max_change,
            note="the request phase's wall time is unknown",
        )
    est = speed_change(
        bv,
        cv,
        lower_is_better=lower_is_better,
        alpha=rule.alpha,
        resamples=boot.resamples,
        seed=boot.seed,
        base_wall_s=walls[0],
        cand_wall_s=walls[1],
    )
    worse = est.value if lower_is_better else -est.value
    upper = est.ci[1] if lower_is_better else -est.ci[0]
    verdict, decided_by = decide(worse, upper, est.p_value, rule.max_change, rule.alpha, "regression")
    note = _verdict_note(worse, est, rule.max_change, rule.alpha, verdict, "regression", "%")
    return Rule(
        name=name,
        task=task,
        kind="speed",
        verdict=verdict,
        observed=est.value,
        baseline=_figure(match.base, field),
        candidate=_figure(match.cand, field),
        budget=rule.max_change,
        mode="regression",
        alpha=rule.alpha,
        p_value=est.p_value,
        ci=est.ci,
        ci_level=est.ci_level,
        mde=est.mde,
        decided_by=decided_by,
        method=est.method,
        note="; ".join(x for x in (note, match.note) if x),
    )
