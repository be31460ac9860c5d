"""The gate's goodput and cost rules: the run's own figures (``summary.json``'s ``speed``) against the policy's
floors and ceilings (:class:`~evalkit.gating.policy.SpeedPolicy`'s ``min_goodput``, ``min_goodput_share``,
``max_cost_per_million_output_tokens``) and the candidate's goodput against the baseline's (``max_goodput_drop``).
A rule the policy sets on a figure a run lacks (it was not run with ``--goodput`` / ``--cost-per-gpu-hour``), and
the goodput change of runs whose goodput was counted under different SLOs, is skipped and the gate cannot decide
(exit 2, the reason names the fix): a release gate asked to judge a figure neither passes nor fails without it.
The cost rule is a ceiling on the candidate's own figure, so the two runs' prices need not match. With several runs
per side (``evalkit gate --baseline A --baseline B``) every run counts: a limit holds in each candidate run, and
the goodput change is Welch's test over the runs' figures (a threshold on one run per side)."""

from __future__ import annotations

from collections.abc import Sequence

from scipy.stats import gmean

from evalkit.config.slos import slos_text
from evalkit.contracts import speed_metric
from evalkit.gating.inputs import SpeedRecords
from evalkit.gating.policy import SpeedPolicy, SpeedRule
from evalkit.gating.result import EPS, Rule, RuleVerdict
from evalkit.gating.rules import estimated, verdict_note
from evalkit.gating.stats import speed_runs_change

FIGURES = ("goodput_requests_per_s", "goodput_share", "cost_per_million_output_tokens")
"""The summary's figures these rules read (keys of the speed catalogue, :data:`evalkit.contracts.SPEED_METRICS`)."""
OPTION = {
    "goodput_requests_per_s": "--goodput",
    "goodput_share": "--goodput",
    "cost_per_million_output_tokens": "--cost-per-gpu-hour",
}
CHANGE = "goodput change"
"""The name (after the task) of the goodput change rule."""
CHANGE_KEY = "goodput_requests_per_s"
GOODPUT_ALPHA: float = SpeedRule.model_fields["alpha"].default
"""The goodput change rule's significance level with several runs per side (the speed rules' default)."""


def figure_text(key: str, value: float) -> str:
    """``value`` of the speed figure ``key`` in its unit: ``99.62%`` (a share), ``$0.0170`` (dollars; cents
    where they say it all), ``1060 req/s`` (three significant digits below 100)."""
    unit = speed_metric(key).unit
    if unit == "share":
        return f"{value * 100:.2f}".rstrip("0").rstrip(".") + "%"
    if unit.startswith("$"):
        return f"${value:,.2f}" if abs(value) >= 1 or round(value, 2) == value else f"${value:#.3g}"
    number = f"{value:,.0f}".replace(",", "") if abs(value) >= 100 else f"{value:.3g}"
    return f"{number} {unit}"


def limit_text(key: str, limit: float) -> str:
    """The policy's floor (a higher-is-better figure) or ceiling on ``key``: ``≥ 90%``, ``≤ $0.50``."""
    return f"{'≤' if speed_metric(key).lower_is_better else '≥'} {figure_text(key, limit)}"


def _limit_rule(task: str, key: str, runs: Sequence[SpeedRecords], limit: float) -> Rule:
    """``key`` of every candidate run against ``limit``; several runs: the worst run's figure decides (each run
    must meet the limit, so the verdict rests on all of them)."""
    m = speed_metric(key)
    name = f"{task}: {m.label}"
    values = [r.figures.get(key) for r in runs]
    if any(v is None for v in values):
        which = "" if len(runs) == 1 else f" (in {sum(v is None for v in values)} of its {len(runs)} runs)"
        note = f"the candidate has no {m.label}{which}; run it with {OPTION[key]} to judge it"
        return Rule(name=name, task=task, kind="speed", verdict="skip", budget=limit, note=note, figure=key)
    higher = not m.lower_is_better
    figures = [float(v) for v in values if v is not None]
    value = min(figures) if higher else max(figures)
    ok = value >= limit - EPS if higher else value <= limit + EPS
    side = "at least" if higher else "at most"
    of = "" if len(figures) == 1 else f" (the worst of {len(figures)} runs, {_figures_text(key, figures)})"
    return Rule(
        name=name, task=task, kind="speed", verdict="pass" if ok else "fail", candidate=value, observed=value,
        budget=limit, decided_by="threshold", figure=key,
        note=f"{figure_text(key, value)}{of}; the policy asks for {side} {figure_text(key, limit)}",
    )  # fmt: skip


def _figures_text(key: str, figures: Sequence[float]) -> str:
    return ", ".join(figure_text(key, v) for v in figures)


def limit_rules(task: str, runs: Sequence[SpeedRecords], sp: SpeedPolicy) -> list[Rule]:
    """The candidate's goodput and cost against the policy's floors and ceiling (those it sets), judged in every
    one of its ``runs``."""
    limits = {
        "goodput_requests_per_s": sp.min_goodput,
        "goodput_share": sp.min_goodput_share,
        "cost_per_million_output_tokens": sp.max_cost_per_million_output_tokens,
    }
    return [_limit_rule(task, key, runs, limit) for key, limit in limits.items() if limit is not None]


def _slos(slos: dict[str, float] | None) -> str:
    return slos_text(slos) if slos else "none recorded"


def _uncomparable(bases: Sequence[SpeedRecords], cands: Sequence[SpeedRecords]) -> str | None:
    """Why the runs' goodput cannot be compared (None when it can): a run without the figure, or runs whose
    goodput was counted under different SLOs (or SLOs recorded in some runs only), within a side or across."""
    for side, runs in (("baseline", bases), ("candidate", cands)):
        lacking = sum(r.figures.get(CHANGE_KEY) is None for r in runs)
        if lacking:
            which = "" if len(runs) == 1 else f" in {lacking} of its {len(runs)} runs"
            return f"the {side} has no goodput{which}; run both sides with --goodput (the same SLOs) to judge it"
    for side, runs in (("baseline", bases), ("candidate", cands)):
        odd = [r.goodput_slos for r in runs[1:] if r.goodput_slos != runs[0].goodput_slos]
        if odd:
            return (
                f"the {side} runs' goodput was counted under different SLOs ({_slos(runs[0].goodput_slos)}; "
                f"{_slos(odd[0])}), so it is not compared; run every run with the same --goodput"
            )
    if bases[0].goodput_slos != cands[0].goodput_slos:
        return (
            f"the runs' goodput was counted under different SLOs (baseline {_slos(bases[0].goodput_slos)}; "
            f"candidate {_slos(cands[0].goodput_slos)}), so it is not compared; run both with the same --goodput"
        )
    return None


def goodput_change_rule(
    task: str,
    bases: Sequence[SpeedRecords],
    cands: Sequence[SpeedRecords],
    max_drop: float,
    *,
    unmatched: tuple[str, RuleVerdict] | None = None,
    alpha: float = GOODPUT_ALPHA,
) -> Rule:
    """The candidate's goodput (requests/s within its SLOs) against the baseline's: fails when lower by more than
    ``max_drop`` (a fraction of the baseline's). One figure per run. Two or more runs per side, each with goodput
    above 0: Welch's t-test on the logs of the runs' figures (as the speed rules), failing when the drop beyond
    ``max_drop`` is significant at ``alpha``; otherwise a threshold on the sides' mean goodput, no significance
    test. Skipped when a run lacks the figure or the runs were counted under different SLOs, and (with the
    verdict it gives) when the speed rules' load matching did not compare the runs (``unmatched``: its note and
    verdict)."""
    name = f"{task}: {CHANGE}"

    def not_compared(verdict: RuleVerdict, note: str) -> Rule:
        return Rule(
            name=name, task=task, kind="speed", verdict=verdict, budget=max_drop, mode="regression", note=note,
            figure=CHANGE_KEY,
        )  # fmt: skip

    if unmatched is not None:
        return not_compared(unmatched[1], f"goodput not compared: {unmatched[0]}")
    if (why := _uncomparable(bases, cands)) is not None:
        return not_compared("skip", why)
    b = [float(r.figures[CHANGE_KEY]) for r in bases]
    c = [float(r.figures[CHANGE_KEY]) for r in cands]
    b_mean, c_mean = sum(b) / len(b), sum(c) / len(c)
    if len(b) >= 2 and len(c) >= 2 and min(*b, *c) > 0:
        est = speed_runs_change(b, c, lower_is_better=False, budget=max_drop, alpha=alpha)
        b_mean, c_mean = float(gmean(b)), float(gmean(c))  # the test compares geometric means
        failed = -est.value > max_drop + EPS and est.p_value < alpha
        verdict: RuleVerdict = "fail" if failed else "pass"
        note = verdict_note(-est.value, est, max_drop, alpha, verdict, "regression", "%")
        return Rule(
            name=name, task=task, kind="speed", verdict=verdict, baseline=b_mean, candidate=c_mean, budget=max_drop,
            mode="regression", alpha=alpha, decided_by="p_value", figure=CHANGE_KEY, **estimated(est),
            note=f"{note} (runs: baseline {_figures_text(CHANGE_KEY, b)}; candidate {_figures_text(CHANGE_KEY, c)})",
        )  # fmt: skip
    change = c_mean / b_mean - 1.0 if b_mean > 0 else (0.0 if c_mean == 0 else float("inf"))
    failed = -change > max_drop + EPS
    what = f"lower by {-change:.1%}" if change < 0 else f"no lower (higher by {change:.1%})"
    runs = "" if len(b) == len(c) == 1 else f"; the mean of {len(b)} and {len(c)} runs, no significance test"
    if len(b) > 1 and len(c) > 1:
        runs += " (a run with goodput 0 has no log for Welch's test)"
    return Rule(
        name=name, task=task, kind="speed", verdict="fail" if failed else "pass", baseline=b_mean, candidate=c_mean,
        observed=change, budget=max_drop, decided_by="threshold", mode="regression", figure=CHANGE_KEY,
        note=f"{what}: {'beyond' if failed else 'within'} the allowed drop of {max_drop:.0%}{runs}",
    )  # fmt: skip


def undecided_reasons(rules: list[Rule]) -> list[str]:
    """The gate's reasons (cannot decide) for the goodput and cost rules that were skipped: a figure missing, or
    goodput counted under different SLOs."""
    names = {speed_metric(k).label for k in FIGURES} | {CHANGE}
    return [
        f"{r.name}: {r.note}"
        for r in rules
        if r.kind == "speed" and r.verdict == "skip" and r.note and r.name.split(": ", 1)[-1] in names
    ]
