"""The comparison report's verdict: the decision banner that opens a decision page (PASS / FAIL / CANNOT DECIDE,
the two sides by name, the one-line reason) and the verdict section: the release gate's rules (one line per task
and metric with the paired test, the CI of the difference and the flips that drive it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evalkit.gating.engine import evaluate
from evalkit.gating.errors import CannotCompare, GateInputError
from evalkit.gating.inputs import MetricSamples, RunInputs
from evalkit.gating.load import from_run_dir
from evalkit.gating.output import budget_text, evidence_text, observed_text
from evalkit.gating.result import GateResult


@dataclass
class Verdict:
    """A gate result with the inputs it was computed from (for the flips); ``error``: why there is none."""

    result: GateResult | None
    baseline: RunInputs | None = None
    candidate: RunInputs | None = None
    error: str | None = None


@dataclass
class VerdictRow:
    name: str
    verdict: str
    observed: str
    budget: str
    evidence: str
    method: str
    flips: str
    note: str


@dataclass
class VerdictView:
    verdict: str | None  # "pass" | "fail" | "cannot_decide"; None when the runs could not be compared
    baseline: str | None
    candidate: str | None
    rows: list[VerdictRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def gate_verdict(baseline: Path, candidate: Path) -> Verdict:
    """The default policy's verdict on two run dirs; a run pair the gate refuses gives ``error`` (one line)."""
    try:
        base, cand = from_run_dir(baseline), from_run_dir(candidate)
        return Verdict(evaluate(base, cand), base, cand)
    except (CannotCompare, GateInputError) as e:
        return Verdict(None, error=str(e))


def flips_text(base: MetricSamples | None, cand: MetricSamples | None) -> str:
    """Per item, whether the candidate got worse or better: for one sample per item the discordant pairs
    (correct in the baseline and wrong in the candidate, and the reverse), else problems whose share of correct
    samples went down or up."""
    if base is None or cand is None:
        return ""
    down = up = 0
    for doc, a in base.items.items():
        b = cand.items.get(doc)
        if not a or not b:
            continue
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        down += ma > mb
        up += mb > ma
    unit = "samples" if max(base.samples_per_item, cand.samples_per_item) <= 1 else "problems"
    return f"{down} {unit} worse, {up} better (net {up - down:+d})"


def build_verdict_view(v: Verdict) -> VerdictView:
    if v.result is None:
        return VerdictView(None, None, None, error=v.error)
    rows = []
    for r in v.result.rules:
        flips = ""
        if r.kind == "accuracy" and v.baseline is not None and v.candidate is not None:
            metric = r.name.split(": ", 1)[-1]
            bt, ct = v.baseline.tasks.get(r.task), v.candidate.tasks.get(r.task)
            flips = flips_text(bt.metrics.get(metric) if bt else None, ct.metrics.get(metric) if ct else None)
        rows.append(
            VerdictRow(
                r.name, r.verdict, observed_text(r), budget_text(r), evidence_text(r), r.method or "", flips, r.note
            )
        )
    res = v.result
    notes = [*(f"cannot decide: {r}" for r in res.reasons), *res.notes]
    return VerdictView(res.verdict, res.baseline, res.candidate, rows, notes)


@dataclass
class Decision:
    """What a decision page opens with: the verdict in capitals, the two sides by name, the one-line reason."""

    verdict: str  # "pass" | "fail" | "cannot_decide" (the CSS class)
    shown: str  # PASS | FAIL | CANNOT DECIDE
    baseline: str
    candidate: str
    reason: str


MAX_RULES_NAMED = 3  # failed rules named in the decision's reason, the rest counted


def decision(view: VerdictView, baseline: str, candidate: str) -> Decision:
    """The decision of ``view`` for sides named ``baseline`` / ``candidate`` (the gate's own names where it has
    them): a failure names the rules that failed (the first three) with the change observed; a pass counts the
    rules; cannot decide gives the first reason (or why the runs could not be compared)."""
    baseline, candidate = view.baseline or baseline, view.candidate or candidate
    if view.verdict is None or view.verdict == "cannot_decide":
        reasons = [n.removeprefix("cannot decide: ") for n in view.notes if n.startswith("cannot decide: ")]
        first = view.error or (reasons[0] if reasons else "the gate could not decide")
        more = f" (and {len(reasons) - 1} more reasons below)" if len(reasons) > 1 else ""
        return Decision("cannot_decide", "CANNOT DECIDE", baseline, candidate, first + more)
    judged = [r for r in view.rows if r.verdict != "skip"]
    skipped = len(view.rows) - len(judged)
    if view.verdict == "fail":
        failed = [r for r in view.rows if r.verdict == "fail"]
        named = "; ".join(f"{r.name} {r.observed.split(' (')[0]}" for r in failed[:MAX_RULES_NAMED])
        more = f"; and {len(failed) - MAX_RULES_NAMED} more" if len(failed) > MAX_RULES_NAMED else ""
        reason = f"{len(failed)} of {len(judged)} rules failed: {named}{more}"
        return Decision("fail", "FAIL", baseline, candidate, reason)
    reason = f"all {len(judged)} rules passed" + (f" ({skipped} skipped)" if skipped else "")
    return Decision("pass", "PASS", baseline, candidate, reason)
