"""The gate's verdicts: one :class:`Rule` per check and the :class:`GateResult` that collects them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from evalkit.contracts import MetricValue
from evalkit.gating.policy import Mode

RuleVerdict = Literal["pass", "fail", "skip"]
Kind = Literal["accuracy", "perplexity", "expected", "speed", "rate", "coverage", "numerics"]
EPS = 1e-12  # float slack when an observed value equals its budget


class Rule(BaseModel):
    """One check. ``observed``: the change (candidate - baseline; relative for speed), the score (expected) or
    the rate; ``budget``: the allowed drop, change or rate; ``ci``: two-sided interval at ``ci_level`` of the
    observed value; ``p_value``: one-sided against "no worsening"; ``decided_by``: what settled the verdict;
    ``mde``: the smallest worsening the data could have detected (alpha of the rule, 80% power); ``figure``: the
    speed catalogue's key of the figure a goodput or cost rule judges (:mod:`evalkit.gating.economics`; absent
    from every other rule): a limit rule (no ``mode``) has the candidate's figure in ``observed`` and the policy's
    floor or ceiling in ``budget``."""

    name: str
    task: str
    kind: Kind
    verdict: RuleVerdict
    observed: float | None = None
    baseline: float | None = None
    candidate: float | None = None
    budget: float | None = None
    mode: Mode | None = None
    alpha: float | None = None
    p_value: float | None = None
    ci: tuple[float, float] | None = None
    ci_level: float | None = None
    mde: float | None = None
    decided_by: Literal["p_value", "ci", "threshold"] | None = None
    method: str | None = None
    note: str = ""
    figure: str | None = Field(default=None, exclude_if=lambda v: v is None)


Verdict = Literal["pass", "fail", "cannot_decide"]


class StoredMetric(MetricValue):
    """One metric of one side's run as its ``summary.json`` stores it: value, 95% interval and ``ci_method`` (the
    gate shows the interval the run computed, never one of its own)."""

    side: Literal["baseline", "candidate"]
    task: str
    metric: str


class GateResult(BaseModel):
    """The gate's answer (:func:`overall`): "fail" when any rule failed; else "cannot_decide" when ``reasons``
    name something that kept the gate from comparing what it claims (nothing comparable, coverage below the
    policy's minimum, a metric missing on one side, no rule evaluated); else "pass". ``policy`` is the effective
    policy."""

    verdict: Verdict
    baseline: str | None = None
    candidate: str
    rules: list[Rule] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)  # why the gate cannot decide (empty when it could)
    notes: list[str] = Field(default_factory=list)
    # each side's metrics as its run stored them (one run per side; none for several runs merged)
    metrics: list[StoredMetric] = Field(default_factory=list)
    policy: dict[str, Any] = Field(default_factory=dict)

    @property
    def failed(self) -> list[Rule]:
        return [r for r in self.rules if r.verdict == "fail"]


def decide(
    worsening: float, worst_case: float, p_value: float, budget: float, alpha: float, mode: Mode
) -> tuple[RuleVerdict, Literal["p_value", "ci"]]:
    """Verdict on a worsening (a drop, or a speed change in its bad direction; ``worst_case`` its one-sided
    upper confidence bound). regression: fail when the worsening is beyond the budget and significant
    (``p_value < alpha``); non-inferiority: pass only when the upper bound stays within the budget."""
    if mode == "regression":
        failed = worsening > budget + EPS and p_value < alpha
        return ("fail" if failed else "pass"), "p_value"
    return ("pass" if worst_case <= budget + EPS else "fail"), "ci"


def overall(rules: list[Rule], reasons: list[str]) -> Verdict:
    """The gate's verdict: fail when any rule failed (a failure found on what was compared stands); else
    cannot_decide when there are ``reasons`` or no rule was evaluated (every one skipped); else pass. Adds the
    "no rule evaluated" reason to ``reasons``."""
    if any(r.verdict == "fail" for r in rules):
        return "fail"
    if not any(r.verdict == "pass" for r in rules) and not reasons:
        reasons.append("no rule was evaluated (every rule was skipped or turned off)")
    return "cannot_decide" if reasons else "pass"


EXIT_CODES: dict[str, int] = {"pass": 0, "fail": 1, "cannot_decide": 2}
