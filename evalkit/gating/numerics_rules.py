"""The numerics rules: a candidate's token-level divergence from the baseline over the texts both scored
teacher-forced (:mod:`evalkit.scoring.numerics`), one rule per figure (``numerics: top-1 agreement``, ``numerics:
mean KL``, ``numerics: p99 KL``, ``numerics: mean abs d-logprob``), each shown with its interval over texts and
the baseline's own noise floor (its main pass against its noise-floor pass).

A figure's interval decides against its budget (:class:`~evalkit.gating.policy.NumericsPolicy`): fail when even
its better end is beyond the budget (the interval excludes the budget on the bad side), pass when its worse end is
within, cannot decide when the budget lies inside it (a reason names how many texts would settle it), and cannot
decide when the baseline's noise floor is itself beyond the budget (the baseline does not reproduce itself that
closely, so no candidate can be told apart from it). Each figure compares the positions where both runs gave
what it needs (|d-logprob|: the actual token's logprob; top-1 and KL: top-K lists too); when those are fewer
than the policy's ``min_coverage`` of the positions both runs scored, its rule cannot decide, naming the count and
which side gave no top-K list. A text one side lacks (that it was asked for), or one
tokenised differently, is a reason the gate cannot decide (it names the first), and no numerics rule is computed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from evalkit.contracts import PromptPositions
from evalkit.gating.inputs import NumericsInputs, TaskInputs
from evalkit.gating.policy import NumericsPolicy
from evalkit.gating.result import EPS, Rule, RuleVerdict
from evalkit.scoring.numerics import (
    FIGURE_LABELS,
    FIGURES,
    PairFigures,
    TokenMismatch,
    compare_runs,
    noise_floor,
    texts_to_separate,
)

POWER = 0.95  # the power the "texts that would settle it" estimate aims at


def figure_text(figure: str, value: float | None) -> str:
    """A numerics figure as shown: top-1 agreement in percent, the others in 3 significant digits."""
    if value is None or math.isnan(value):
        return "–"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if figure == "top1":
        return f"{value:.3%}"
    return f"{value:.3g}"


def mismatch(task: str, base: TaskInputs, cand: TaskInputs) -> str | None:
    """Why the two runs' texts cannot be compared: the first text (by doc_id) one side scored that the other was
    asked for and lacks (a side whose asked documents are unknown counts as asked for every text), or no text both
    scored; None when they match. A watch's window is a slice of the baseline's texts, so the baseline's others
    are not missing from it."""
    assert base.numerics is not None and cand.numerics is not None
    b, c = base.numerics.main, cand.numerics.main

    def asked(side: TaskInputs, doc: int) -> bool:
        return side.asked_docs is None or doc in side.asked_docs

    lacking = sorted(
        [(d, "the candidate scored doc {d}; the baseline did not") for d in c.keys() - b.keys() if asked(base, d)]
        + [(d, "the baseline scored doc {d}; the candidate did not") for d in b.keys() - c.keys() if asked(cand, d)]
    )
    if lacking:
        d, text = lacking[0]
        n = len(lacking)
        return f"{task}: numerics: {text.format(d=d)} ({n} texts on one side only); run both on the same texts"
    if not b.keys() & c.keys():
        return f"{task}: numerics: no text was scored by both runs; run both on the same texts"
    return None


def _floor(side: NumericsInputs, alpha: float) -> PairFigures | None:
    try:
        return noise_floor(side.main, side.again, alpha)
    except TokenMismatch:
        return None  # a server that tokenises a text differently twice: no floor to show


def _unranked(side: Mapping[int, PromptPositions], docs: set[int]) -> int:
    """Positions after the first of ``docs`` where ``side`` gave no top-K list."""
    return sum(
        int(side[d].n - 1 if side[d].k == 0 else (side[d].top_ids[1:, 0] < 0).sum()) for d in docs if side[d].n > 1
    )


NO_LOGPROB = "a side gave no finite logprob of the actual token at the others"


def _short(figure: str, pair: PairFigures, base: TaskInputs, cand: TaskInputs) -> tuple[str, str]:
    """Why a figure compared fewer positions than both runs scored (the side(s) that gave no top-K list, or no
    actual-token logprob, and at how many positions) and the fix."""
    assert base.numerics is not None and cand.numerics is not None
    if figure == "mean_abs_dlp":
        return NO_LOGPROB, "run both with servers that give the actual token's logprob at every position"
    docs = {t.doc_id for t in pair.texts}
    missing = [
        f"the {name} gave no top-K list at {n:,}"
        for name, side in (("baseline", base.numerics.main), ("candidate", cand.numerics.main))
        if (n := _unranked(side, docs))
    ]
    fix = "run both with servers that give a top-K list (prompt_logprobs) at every position"
    return "; ".join(missing) or NO_LOGPROB, fix


def numerics_rules(
    task: str, base: TaskInputs, cand: TaskInputs, policy: NumericsPolicy, min_coverage: float = 0.95
) -> tuple[list[Rule], list[str], list[str]]:
    """(rules, reasons the gate cannot decide, notes) of a task whose runs hold teacher-forced positions; a rule
    whose figure compared fewer than ``min_coverage`` of the positions both runs scored cannot decide."""
    if base.numerics is None or cand.numerics is None:
        side = "baseline" if base.numerics is not None else "candidate"
        return [], [f"{task}: numerics: only the {side} holds teacher-forced positions; run both the same way"], []
    why = mismatch(task, base, cand)
    if why is not None:
        return [], [why], []
    try:
        pair = compare_runs(base.numerics.main, cand.numerics.main, policy.alpha)
    except TokenMismatch as e:
        return [], [f"{task}: numerics: {e}; compare runs of the same model, tokenizer and texts"], []
    floors = _floor(base.numerics, policy.alpha), _floor(cand.numerics, policy.alpha)
    notes = [] if floors[0] is not None else [f"{task}: numerics: the baseline has no noise-floor pass to show"]
    rules: list[Rule] = []
    reasons: list[str] = []
    for figure in FIGURES:
        budget = policy.budget(figure)
        if budget is None:
            continue
        compared = pair.compared(figure)
        low = None
        if compared < min_coverage * pair.scored - 1e-9 or not compared:
            why, fix = _short(figure, pair, base, cand)
            low = (
                f"{compared:,} of {pair.scored:,} positions compared ({why}), "
                f"below the policy's coverage {min_coverage:.0%}",
                fix,
            )
        rule, reason = _rule(task, figure, budget, pair, floors, policy.alpha, low)
        rules.append(rule)
        reasons += [reason] if reason else []
    return rules, reasons, notes


def _rule(
    task: str,
    figure: str,
    budget: float,
    pair: PairFigures,
    floors: tuple[PairFigures | None, PairFigures | None],
    alpha: float,
    low: tuple[str, str] | None = None,
) -> tuple[Rule, str | None]:
    """One figure's rule and, when it cannot decide, the reason; ``low``: why too few positions were compared
    to decide, and the fix (the rule cannot decide, whatever its interval)."""
    iv = pair.figures[figure]
    higher_is_better = figure == "top1"

    def beyond(x: float) -> bool:  # x is on the bad side of the budget
        return x < budget - EPS if higher_is_better else x > budget + EPS

    best, worst = (iv.hi, iv.lo) if higher_is_better else (iv.lo, iv.hi)
    base_floor = floors[0].figures[figure].value if floors[0] is not None else None
    cand_floor = floors[1].figures[figure].value if floors[1] is not None else None
    label, side = FIGURE_LABELS[figure], ("≥" if higher_is_better else "≤")
    name = f"{task}: {label}"
    shown = (
        f"{figure_text(figure, iv.value)} over {pair.compared_texts(figure)} texts "
        f"({pair.compared(figure):,} of {pair.scored:,} positions)"
    )
    floor_text = f"baseline noise floor {figure_text(figure, base_floor)}"
    reason = None
    verdict: RuleVerdict
    if low is not None:
        verdict = "skip"
        note = f"cannot decide: {low[0]}"
        reason = f"{name}: {low[0]}; {low[1]}"
    elif base_floor is not None and beyond(base_floor):
        verdict = "skip"
        note = f"cannot decide: the {floor_text} is itself beyond the budget {side} {figure_text(figure, budget)}"
        reason = f"{name}: the {floor_text} is beyond the budget; raise the budget or make the baseline reproducible"
    elif beyond(best):
        verdict, note = "fail", f"{shown}: its interval lies beyond the budget {side} {figure_text(figure, budget)}"
    elif not beyond(worst):
        verdict, note = "pass", f"{shown}: its interval lies within the budget {side} {figure_text(figure, budget)}"
    else:
        need = texts_to_separate(pair.per_text(figure), budget, alpha, POWER)
        more = f"; about {need} texts would settle it" if need is not None and need > len(pair.texts) else ""
        verdict = "skip"
        note = f"cannot decide: {shown}: the budget {side} {figure_text(figure, budget)} lies inside its interval{more}"
        reason = f"{name}: the budget lies inside the interval{more}"
    return (
        Rule(
            name=name,
            task=task,
            kind="numerics",
            verdict=verdict,
            observed=iv.value,
            baseline=base_floor,
            candidate=cand_floor,
            budget=budget,
            alpha=alpha,
            ci=(iv.lo, iv.hi),
            ci_level=iv.level,
            decided_by="ci",
            method=f"{iv.method}; noise floor: each run's main pass against its noise-floor pass",
            note=f"{note}; {floor_text}, candidate's {figure_text(figure, cand_floor)}",
        ),
        reason,
    )
