"""The gate's goodput and cost rules: the run's own figures (``summary.json``'s ``speed``) against the policy's
floors and ceilings (:class:`~evalkit.gating.policy.SpeedPolicy`'s ``min_goodput``, ``min_goodput_share``,
``max_cost_per_million_output_tokens``) and the candidate's goodput against the baseline's (``max_goodput_drop``).
A rule the policy sets on a figure a run lacks (it was not run with ``--goodput`` / ``--cost-per-gpu-hour``) is
skipped and the gate cannot decide (exit 2, the reason names the option): a release gate asked to judge a figure
neither passes nor fails without it."""

from __future__ import annotations

from evalkit.contracts import speed_metric
from evalkit.gating.inputs import SpeedRecords
from evalkit.gating.policy import SpeedPolicy
from evalkit.gating.result import EPS, Rule

FIGURES = ("goodput_requests_per_s", "goodput_share", "cost_per_million_output_tokens")
"""The summary's figures these rules read (keys of the speed catalogue, :data:`evalkit.contracts.SPEED_METRICS`)."""
OPTION = {
    "goodput_requests_per_s": "--goodput",
    "goodput_share": "--goodput",
    "cost_per_million_output_tokens": "--cost-per-gpu-hour",
}


def _limit_rule(task: str, key: str, figures: dict[str, float], limit: float) -> Rule:
    m = speed_metric(key)
    name = f"{task}: {m.label}"
    value = figures.get(key)
    if value is None:
        note = f"the candidate has no {m.label}; run it with {OPTION[key]} to judge it"
        return Rule(name=name, task=task, kind="speed", verdict="skip", budget=limit, note=note)
    higher = not m.lower_is_better
    ok = value >= limit - EPS if higher else value <= limit + EPS
    side = "at least" if higher else "at most"
    return Rule(
        name=name, task=task, kind="speed", verdict="pass" if ok else "fail", candidate=value, observed=value,
        budget=limit, decided_by="threshold",
        note=f"{value:.4g} {m.unit}; the policy asks for {side} {limit:.4g}",
    )  # fmt: skip


def limit_rules(task: str, speed: SpeedRecords, sp: SpeedPolicy) -> list[Rule]:
    """The candidate's goodput and cost against the policy's floors and ceiling (those it sets)."""
    limits = {
        "goodput_requests_per_s": sp.min_goodput,
        "goodput_share": sp.min_goodput_share,
        "cost_per_million_output_tokens": sp.max_cost_per_million_output_tokens,
    }
    return [_limit_rule(task, key, speed.figures, limit) for key, limit in limits.items() if limit is not None]


def goodput_change_rule(task: str, base: SpeedRecords, cand: SpeedRecords, max_drop: float) -> Rule:
    """The candidate's goodput (requests/s within its SLOs) against the baseline's: fails when lower by more than
    ``max_drop`` (a fraction of the baseline's). One figure per run: a threshold, no significance test."""
    name = f"{task}: goodput change"
    b, c = base.figures.get("goodput_requests_per_s"), cand.figures.get("goodput_requests_per_s")
    if b is None or c is None:
        side = "baseline" if b is None else "candidate"
        note = f"the {side} has no goodput; run both sides with --goodput (the same SLOs) to judge it"
        return Rule(name=name, task=task, kind="speed", verdict="skip", budget=max_drop, note=note)
    change = c / b - 1.0 if b > 0 else (0.0 if c == 0 else float("inf"))
    failed = -change > max_drop + EPS
    what = f"lower by {-change:.1%}" if change < 0 else f"no lower (higher by {change:.1%})"
    return Rule(
        name=name, task=task, kind="speed", verdict="fail" if failed else "pass", baseline=b, candidate=c,
        observed=change, budget=max_drop, decided_by="threshold", mode="regression",
        note=f"{what}: {'beyond' if failed else 'within'} the allowed drop of {max_drop:.0%}",
    )  # fmt: skip


def missing_figure_reasons(rules: list[Rule]) -> list[str]:
    """The gate's reasons for the goodput and cost rules skipped for want of their figure (cannot decide)."""
    return [f"{r.name}: {r.note}" for r in rules if r.verdict == "skip" and r.note and " has no " in r.note]
