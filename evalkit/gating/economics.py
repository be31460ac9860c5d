"""The gate's goodput and cost rules: the run's own figures (``summary.json``'s ``speed``) against the policy's
floors and ceilings (:class:`~evalkit.gating.policy.SpeedPolicy`'s ``min_goodput``, ``min_goodput_share``,
``max_cost_per_million_output_tokens``) and the candidate's goodput against the baseline's (``max_goodput_drop``).
A rule the policy sets on a figure a run lacks (it was not run with ``--goodput`` / ``--cost-per-gpu-hour``), and
the goodput change of runs whose goodput was counted under different SLOs, is skipped and the gate cannot decide
(exit 2, the reason names the fix): a release gate asked to judge a figure neither passes nor fails without it.
The cost rule is a ceiling on the candidate's own figure, so the two runs' prices need not match."""

from __future__ import annotations

from evalkit.config.slos import slos_text
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
CHANGE = "goodput change"
"""The name (after the task) of the goodput change rule."""


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


def _limit_rule(task: str, key: str, figures: dict[str, float], limit: float) -> Rule:
    m = speed_metric(key)
    name = f"{task}: {m.label}"
    value = figures.get(key)
    if value is None:
        note = f"the candidate has no {m.label}; run it with {OPTION[key]} to judge it"
        return Rule(name=name, task=task, kind="speed", verdict="skip", budget=limit, note=note, figure=key)
    higher = not m.lower_is_better
    ok = value >= limit - EPS if higher else value <= limit + EPS
    side = "at least" if higher else "at most"
    return Rule(
        name=name, task=task, kind="speed", verdict="pass" if ok else "fail", candidate=value, observed=value,
        budget=limit, decided_by="threshold", figure=key,
        note=f"{figure_text(key, value)}; the policy asks for {side} {figure_text(key, limit)}",
    )  # fmt: skip


def limit_rules(task: str, speed: SpeedRecords, sp: SpeedPolicy) -> list[Rule]:
    """The candidate's goodput and cost against the policy's floors and ceiling (those it sets)."""
    limits = {
        "goodput_requests_per_s": sp.min_goodput,
        "goodput_share": sp.min_goodput_share,
        "cost_per_million_output_tokens": sp.max_cost_per_million_output_tokens,
    }
    return [_limit_rule(task, key, speed.figures, limit) for key, limit in limits.items() if limit is not None]


def _uncomparable(base: SpeedRecords, cand: SpeedRecords) -> str | None:
    """Why the two runs' goodput cannot be compared (None when it can): a run without the figure, or runs whose
    goodput was counted under different SLOs (or SLOs recorded on one side only)."""
    b, c = base.figures.get("goodput_requests_per_s"), cand.figures.get("goodput_requests_per_s")
    if b is None or c is None:
        side = "baseline" if b is None else "candidate"
        return f"the {side} has no goodput; run both sides with --goodput (the same SLOs) to judge it"
    if base.goodput_slos != cand.goodput_slos:
        shown = [slos_text(s) if s else "none recorded" for s in (base.goodput_slos, cand.goodput_slos)]
        return (
            f"the runs' goodput was counted under different SLOs (baseline {shown[0]}; candidate {shown[1]}), "
            "so it is not compared; run both with the same --goodput"
        )
    return None


def goodput_change_rule(task: str, base: SpeedRecords, cand: SpeedRecords, max_drop: float) -> Rule:
    """The candidate's goodput (requests/s within its SLOs) against the baseline's: fails when lower by more than
    ``max_drop`` (a fraction of the baseline's). One figure per run: a threshold, no significance test. Skipped
    when a run lacks the figure or the two were counted under different SLOs."""
    name = f"{task}: {CHANGE}"
    if (why := _uncomparable(base, cand)) is not None:
        return Rule(
            name=name, task=task, kind="speed", verdict="skip", budget=max_drop, mode="regression", note=why,
            figure="goodput_requests_per_s",
        )  # fmt: skip
    b, c = base.figures["goodput_requests_per_s"], cand.figures["goodput_requests_per_s"]
    change = c / b - 1.0 if b > 0 else (0.0 if c == 0 else float("inf"))
    failed = -change > max_drop + EPS
    what = f"lower by {-change:.1%}" if change < 0 else f"no lower (higher by {change:.1%})"
    return Rule(
        name=name, task=task, kind="speed", verdict="fail" if failed else "pass", baseline=b, candidate=c,
        observed=change, budget=max_drop, decided_by="threshold", mode="regression", figure="goodput_requests_per_s",
        note=f"{what}: {'beyond' if failed else 'within'} the allowed drop of {max_drop:.0%}",
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
