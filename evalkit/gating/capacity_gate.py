"""The gate on two capacity searches (``evalkit gate BASE CAND`` where both are capacity dirs of ``evalkit
capacity``): ``speed.max_capacity_drop`` (the rule catalogue's :data:`~evalkit.gating.rule_catalogue.
CAPACITY_RULES`) judges the candidate's capacity against the baseline's on the uncertainty each search has, its
bracket ``[low, high]``: ``low`` held (its measurements pooled, repeated near the boundary), ``high`` failed, so
the true capacity lies between them. With ``d`` the allowed drop:

- **fail** when ``cand.high < base.low × (1 − d)``: even the candidate's highest possible capacity is below what
  the baseline surely carries, less the allowed drop;
- **pass** when ``cand.low ≥ base.high × (1 − d)``: the candidate surely carries what the baseline at most
  carries, less the allowed drop;
- otherwise **cannot decide** (exit 2): the brackets are too wide to tell; the reason names both brackets.

A search below its start has ``low`` 0; one where no load failed has ``high`` unbounded (it cannot pass as a
baseline nor fail as a candidate). Searches under different SLOs, SLO share, search kind (rate or concurrency),
tasks or workload settings, and a search that measured nothing (status ``cannot_decide``), are not compared:
cannot decide, the reason naming the difference.
"""

from __future__ import annotations

import math
from pathlib import Path

from evalkit.config.slos import slos_text
from evalkit.contracts import CapacityRecord
from evalkit.gating.errors import GateInputError
from evalkit.gating.output import write_outputs
from evalkit.gating.policy import Policy
from evalkit.gating.result import EPS, GateResult, Rule, overall
from evalkit.gating.rule_catalogue import CAPACITY_RULES
from evalkit.store.capacity_dir import CAPACITY, CapacityRead, open_capacity

UNIT = {"rate": "req/s", "concurrency": "in flight"}


def is_capacity_dir(path: Path) -> bool:
    """Whether ``path`` holds a ``capacity.json`` (a capacity dir, not a run dir)."""
    return (path / CAPACITY).is_file()


def capacity_sides(bases: list[Path], cands: list[Path]) -> tuple[CapacityRead, CapacityRead] | None:
    """The two capacity dirs read (None when neither side is one); GateInputError (one line) for a capacity dir
    beside a run dir, or several dirs on a side."""
    kinds = [is_capacity_dir(p) for p in (*bases, *cands)]
    if not any(kinds):
        return None
    if not all(kinds):
        named = zip((*bases, *cands), kinds, strict=True)
        mixed = ", ".join(f"{p} ({'capacity dir' if k else 'run dir'})" for p, k in named)
        raise GateInputError(f"evalkit gate compares two run dirs or two capacity dirs, got {mixed}")
    if len(bases) != 1 or len(cands) != 1:
        raise GateInputError(
            f"evalkit gate compares one capacity dir per side, got {len(bases)} baseline(s) and {len(cands)} "
            "candidate(s); pass BASELINE CANDIDATE (each search's bracket is its own uncertainty)"
        )
    return open_capacity(bases[0]), open_capacity(cands[0])


def _difference(base: CapacityRecord, cand: CapacityRecord) -> str | None:
    """What makes the two searches not comparable (None when they are)."""
    if base.slos != cand.slos:
        return f"the SLOs differ (baseline {slos_text(base.slos)}; candidate {slos_text(cand.slos)})"
    if base.slo_share != cand.slo_share:
        return f"the SLO share differs (baseline {base.slo_share:g}; candidate {cand.slo_share:g})"
    if base.search != cand.search:
        return f"the search kind differs (baseline {base.search}; candidate {cand.search})"
    if base.tasks != cand.tasks:
        return f"the tasks differ (baseline {', '.join(base.tasks)}; candidate {', '.join(cand.tasks)})"
    if base.workload != cand.workload:
        keys = sorted(k for k in {*base.workload, *cand.workload} if base.workload.get(k) != cand.workload.get(k))
        shown = "; ".join(f"{k}: {base.workload.get(k)!r} vs {cand.workload.get(k)!r}" for k in keys)
        return f"the workload settings differ ({shown})"
    return None


def bounds(record: CapacityRecord) -> tuple[float, float]:
    """The search's bracket as numbers: ``low`` (0 below the start), ``high`` (infinity when no load failed)."""
    low, high = (record.bracket or [None, None]) + [None, None][len(record.bracket or []) :]
    return (0.0 if low is None else float(low)), (math.inf if high is None else float(high))


def _evidence(record: CapacityRecord, load: float) -> str:
    """How many measurements decided ``load`` and their pooled share."""
    n = sum(1 for p in record.points if math.isclose(p.offered, load))
    pooled = next((c for c in record.curve if math.isclose(c.offered, load)), None)
    share = f", {pooled.goodput_share:.1%} within the SLOs" if pooled and pooled.goodput_share is not None else ""
    return f"{n} measurement{'s' if n != 1 else ''}{share}"


def _bracket_text(record: CapacityRecord) -> str:
    low, high = bounds(record)
    lo = f"{low:.4g}" if record.bracket and record.bracket[0] is not None else "below the start"
    hi = f"{high:.4g}" if math.isfinite(high) else "none failed"
    parts = [f"[{lo}, {hi}] {UNIT[record.search]}"]
    if low > 0:
        parts.append(f"low {_evidence(record, low)}")
    if math.isfinite(high):
        parts.append(f"high {_evidence(record, high)}")
    return f"{parts[0]} ({'; '.join(parts[1:])})" if len(parts) > 1 else parts[0]


def capacity_change_rule(base: CapacityRecord, cand: CapacityRecord, max_drop: float) -> Rule:
    """The candidate's capacity against the baseline's by their brackets (the module's rule): pass, fail, or
    skip (the gate cannot decide) with the reason in the note."""
    task = ", ".join(cand.tasks) or "capacity"
    label = next(r.label for r in CAPACITY_RULES if r.key == "max_capacity_drop")
    rule = Rule(name=f"{task}: {label}", task=task, kind="speed", verdict="skip", budget=max_drop, mode="regression")
    for side, record in (("baseline", base), ("candidate", cand)):
        if record.status == "cannot_decide":
            rule.note = f"the {side}'s search measured no load point ({record.reason or 'no reason recorded'})"
            return rule
    if (why := _difference(base, cand)) is not None:
        rule.note = f"the searches are not comparable: {why}; search both under the same settings"
        return rule
    b_low, b_high = bounds(base)
    c_low, c_high = bounds(cand)
    b_mid = b_low if b_low > 0 else None
    c_mid = c_low if c_low > 0 else None
    rule.baseline, rule.candidate = b_mid, c_mid
    if b_mid and c_mid:
        rule.observed = c_mid / b_mid - 1.0
    if b_low > 0 and math.isfinite(b_high):
        lo = c_low / b_high - 1.0
        hi = c_high / b_low - 1.0 if math.isfinite(c_high) else math.inf
        rule.ci = (lo, hi) if math.isfinite(hi) else None
    rule.decided_by, rule.method = "ci", "brackets"
    brackets = f"baseline {_bracket_text(base)}; candidate {_bracket_text(cand)}"
    keep = 1.0 - max_drop
    if c_high < b_low * keep - EPS:
        rule.verdict = "fail"
        rule.note = (
            f"the candidate's bracket high {c_high:.4g} is below the baseline's low {b_low:.4g} × (1 − "
            f"{max_drop:.0%}) = {b_low * keep:.4g}: it carries less beyond the allowed drop ({brackets})"
        )
    elif c_low >= b_high * keep - EPS:
        rule.verdict = "pass"
        rule.note = (
            f"the candidate's bracket low {c_low:.4g} is at least the baseline's high {b_high:.4g} × (1 − "
            f"{max_drop:.0%}) = {b_high * keep:.4g}: within the allowed drop ({brackets})"
        )
    else:
        rule.note = (
            f"the brackets overlap the allowed drop of {max_drop:.0%} (neither candidate high < baseline low × "
            f"{keep:g}, nor candidate low ≥ baseline high × {keep:g}): {brackets}; narrow them with a smaller "
            "--tolerance or longer --point-duration"
        )
    return rule


def gate_capacity(base: CapacityRead, cand: CapacityRead, policy: Policy, out_dir: Path) -> GateResult:
    """Decide the capacity rules of ``policy`` on the two searches and write gate.json / gate.md / junit.xml into
    ``out_dir``."""
    rules = [capacity_change_rule(base.record, cand.record, getattr(policy.speed, r.key)) for r in CAPACITY_RULES]
    reasons = [f"{r.name}: {r.note}" for r in rules if r.verdict == "skip"]
    notes = [
        "capacity dirs: only the policy's capacity rules (speed.max_capacity_drop) are judged; the accuracy, "
        "speed, numerics and rate rules judge run dirs (gate a point's run dirs for those)"
    ]
    notes += [f"{side}: {n}" for side, read in (("baseline", base), ("candidate", cand)) for n in read.notes]
    result = GateResult(
        verdict=overall(rules, reasons), baseline=base.path.resolve().name, candidate=cand.path.resolve().name,
        rules=rules, reasons=reasons, notes=notes, policy=policy.model_dump(mode="json"),
    )  # fmt: skip
    try:
        write_outputs(result, out_dir)
    except OSError as e:
        raise GateInputError(
            f"cannot write the gate's outputs ({e.strerror}: {e.filename}); pass -o a writable folder"
        ) from None
    return result
