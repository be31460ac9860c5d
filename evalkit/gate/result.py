"""The gate's verdicts: one :class:`Rule` per check and the :class:`GateResult` that collects them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from evalkit.gate.policy import Mode

RuleVerdict = Literal["pass", "fail", "skip"]
Kind = Literal["accuracy", "expected", "speed", "rate", "coverage"]
EPS = 1e-12  # float slack when an observed value equals its budget


class Rule(BaseModel):
    """One check. ``observed``: the change (candidate - baseline; relative for speed), the score (expected) or
    the rate; ``budget``: the allowed drop, change or rate; ``ci``: two-sided interval at ``ci_level`` of the
    observed value; ``p_value``: one-sided against "no worsening"; ``decided_by``: what settled the verdict;
    ``mde``: the smallest worsening the data could have detected (alpha of the rule, 80% power)."""

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


class GateResult(BaseModel):
    """The gate's answer: ``verdict`` is "fail" when any rule failed; ``policy`` is the effective policy."""

    verdict: Literal["pass", "fail"]
    baseline: str | None = None
    candidate: str
    rules: list[Rule] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
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


def overall(rules: list[Rule]) -> Literal["pass", "fail"]:
    """The gate's verdict: fail when any rule failed, else pass."""
    return "fail" if any(r.verdict == "fail" for r in rules) else "pass"
