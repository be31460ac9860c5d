"""Writers of a :class:`GateResult`: gate.json, gate.md (also appended to ``$GITHUB_STEP_SUMMARY``) and
junit.xml (one testcase per rule, a failure element for each failed rule)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from evalkit.contracts import speed_metric
from evalkit.errors import warn
from evalkit.gating import economics
from evalkit.gating.numerics_rules import figure_text
from evalkit.gating.result import GateResult, Rule, StoredMetric
from evalkit.scoring.numerics import FIGURE_LABELS

GATE_JSON, GATE_MD, JUNIT_XML = "gate.json", "gate.md", "junit.xml"
_MARK = {"pass": "✅ pass", "fail": "❌ fail", "skip": "➖ skip", "cannot_decide": "⚠️ cannot decide"}


def to_json(result: GateResult) -> str:
    """gate.json's text: top-level ``verdict``, ``rules``, ``policy`` (effective), ``notes`` and the run labels."""
    return json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def _pct(x: float) -> str:
    return f"{x * 100:+.2f}%"


def observed_text(r: Rule) -> str:
    """The observed value in the rule's unit: points for accuracy, percent for speed and rates."""
    if r.observed is None:
        return "–"
    if r.kind == "accuracy" and r.baseline is not None and r.candidate is not None:
        return f"{r.observed * 100:+.2f} pts ({r.baseline:.2%} → {r.candidate:.2%})"
    if r.kind == "expected":
        return f"{r.observed:.2%} (expected {r.baseline:.2%})" if r.baseline is not None else f"{r.observed:.2%}"
    if r.kind == "speed" and r.figure is not None and r.mode is None:  # a limit: the candidate's own figure
        return economics.figure_text(r.figure, r.observed)
    if r.kind in ("speed", "perplexity"):
        unit = f" {speed_metric(r.figure).unit}" if r.kind == "speed" and r.figure is not None else ""
        figures = f" ({r.baseline:.4g} → {r.candidate:.4g}{unit})" if r.baseline and r.candidate else ""
        return _pct(r.observed) + figures
    if r.kind == "numerics":
        figure = _numerics_figure(r)
        return f"{figure_text(figure, r.observed)} (baseline noise floor {figure_text(figure, r.baseline)})"
    return f"{r.observed:.2%}"


def _numerics_figure(r: Rule) -> str:
    """The numerics figure a rule judges (its name ends with the figure's label)."""
    return next((f for f, label in FIGURE_LABELS.items() if r.name.endswith(label)), "mean_kl")


def budget_text(r: Rule) -> str:
    if r.budget is None:
        return "–"
    if r.kind in ("accuracy", "expected"):
        return f"drop ≤ {r.budget * 100:.2f} pts ({r.mode})"
    if r.kind == "speed" and r.figure is not None and r.mode is None:
        return economics.limit_text(r.figure, r.budget)
    if r.kind == "speed":
        return f"worse by ≤ {r.budget:.0%}"
    if r.kind == "perplexity":
        return f"increase ≤ {r.budget:.2%} ({r.mode})"
    if r.kind == "numerics":
        figure = _numerics_figure(r)
        return f"{'≥' if figure == 'top1' else '≤'} {figure_text(figure, r.budget)}"
    return f"≤ {r.budget:.2%}"


def evidence_text(r: Rule) -> str:
    """The p-value or CI that decided the rule, the other one alongside."""
    parts = []
    if r.kind == "numerics" and r.ci is not None and r.ci_level is not None:
        figure = _numerics_figure(r)
        return f"{r.ci_level:.0%} CI [{figure_text(figure, r.ci[0])}, {figure_text(figure, r.ci[1])}]"
    if r.method == "brackets":  # the capacity rule: the change the two searches' brackets allow
        return f"brackets allow [{r.ci[0]:+.1%}, {r.ci[1]:+.1%}]" if r.ci is not None else "brackets"
    scale, unit = (100.0, " pts") if r.kind == "accuracy" else (100.0, "%")
    if r.p_value is not None:
        parts.append(f"p={r.p_value:.3g}")
    if r.ci is not None and r.ci_level is not None:
        lo, hi = r.ci[0] * scale, r.ci[1] * scale
        parts.append(f"{r.ci_level:.0%} CI [{lo:.4g}, {hi:.4g}]{unit}")
    if r.decided_by == "ci" and len(parts) == 2:
        parts.reverse()
    return "; ".join(parts) or ("threshold" if r.decided_by == "threshold" else "–")


def _mde(r: Rule) -> str:
    if r.mde is None:
        return "–"
    return f"{r.mde * 100:.2f} pts" if r.kind in ("accuracy", "expected") else f"{r.mde:.1%}"


def _value(m: StoredMetric) -> str:
    return f"{m.value:.4f}" if m.value is not None else "-"


def stored_lines(result: GateResult) -> list[str]:
    """Each side's metrics as its run stored them, one line each: ``baseline gsm8k exact_match,strict-match
    0.5200 [0.3852, 0.6523] wilson (n=50)``."""
    return [f"{m.side} {m.task} {m.metric} {_value(m)} {m.ci_text()} (n={m.n})" for m in result.metrics]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(result: GateResult) -> str:
    """gate.md's text: the verdict, a table of the rules, then the notes."""
    title = f"candidate `{result.candidate}`" + (f" vs baseline `{result.baseline}`" if result.baseline else "")
    lines = [
        f"## evalkit gate: {_MARK[result.verdict]}",
        "",
        title,
        "",
        "| rule | verdict | observed | budget | p / CI | MDE | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result.rules:
        row = (r.name, _MARK[r.verdict], observed_text(r), budget_text(r), evidence_text(r), _mde(r), r.note)
        lines.append("| " + " | ".join(_cell(x) for x in row) + " |")
    if result.metrics:
        lines += [
            "",
            "| run | task | metric | value | 95% CI (as the run stored it) | n |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            "| " + " | ".join(_cell(x) for x in (m.side, m.task, m.metric, _value(m), m.ci_text(), str(m.n))) + " |"
            for m in result.metrics
        ]
    if result.reasons:
        lines += ["", "**Cannot decide:**", *(f"- {_cell(n)}" for n in result.reasons)]
    if result.notes:
        lines += ["", *(f"- {_cell(n)}" for n in result.notes)]
    return "\n".join(lines) + "\n"


def to_junit(result: GateResult) -> str:
    """junit.xml's text: one testsuite, one testcase per rule (classname = task), ``failure`` for failed
    rules and ``skipped`` for skipped ones."""
    failures = len(result.failed)
    skipped = sum(1 for r in result.rules if r.verdict == "skip")
    suites = ET.Element("testsuites", name="evalkit gate", tests=str(len(result.rules)), failures=str(failures))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="evalkit gate",
        tests=str(len(result.rules)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    if result.metrics:  # each side's metrics with the interval its run stored
        props = ET.SubElement(suite, "properties")
        for m in result.metrics:
            value = f"{_value(m)} {m.ci_text()} (n={m.n})"
            ET.SubElement(props, "property", name=f"{m.side} {m.task} {m.metric}", value=value)
    for r in result.rules:
        case = ET.SubElement(suite, "testcase", classname=f"evalkit.gating.{r.task}", name=r.name)
        detail = (
            f"observed: {observed_text(r)}\nbudget: {budget_text(r)}\nevidence: {evidence_text(r)}\nMDE: {_mde(r)}\n"
            f"method: {r.method or '–'}\nnote: {r.note}"
        )
        if r.verdict == "fail":
            ET.SubElement(case, "failure", message=r.note or "failed", type=r.kind).text = detail
        elif r.verdict == "skip":
            ET.SubElement(case, "skipped", message=r.note or "skipped")
        else:
            ET.SubElement(case, "system-out").text = detail
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> bool:
    """Append ``markdown`` to the file named by ``$GITHUB_STEP_SUMMARY`` (GitHub Actions); False when unset.

    Best effort: the verdict is in gate.json and the exit code, so a summary file that cannot be written gives a
    one-line warning on stderr (and False), never an error."""
    path = (os.environ if env is None else env).get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8", errors="replace") as f:
            f.write(markdown + "\n")
    except OSError as e:
        warn(f"cannot append the gate's summary to GITHUB_STEP_SUMMARY {path} ({e.strerror or e}); gate.md holds it")
        return False
    return True


def write_outputs(result: GateResult, out_dir: str | Path) -> dict[str, Path]:
    """Write gate.json, gate.md and junit.xml into ``out_dir``; returns their paths by file name."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = {GATE_JSON: to_json(result), GATE_MD: to_markdown(result), JUNIT_XML: to_junit(result)}
    for name, text in texts.items():
        (out / name).write_text(text, encoding="utf-8")
    return {name: out / name for name in texts}
