"""One 95% interval per metric: scoring/ chooses it once (Wilson for a share of independent documents, at the
effective sample size for avg@K's samples clustered by problem, over problems for pass@k and maj@K), summary.json
stores it with its ``ci_method``, and the console, report, gate (Markdown, JUnit, JSON) and history show that
stored interval, never one of their own."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.contracts import MetricValue
from evalkit.history import location
from evalkit.scoring.estimators import share_interval
from evalkit.testing.server import TestServer
from tests.history_fixtures import sqlite_url


@pytest.mark.parametrize("task", ["gsm8k", "aime25"])
def test_every_output_shows_the_stored_interval(tmp_path: Path, task: str) -> None:
    out = tmp_path / "run"
    extra = ["--num-samples", "2", "--seed", "1", "--max-tokens", "64"] if task == "aime25" else []
    with TestServer() as srv:
        args = ["run", task, "--endpoint", srv.url, "--limit", "12", *extra]
        res = CliRunner().invoke(app, [*args, "-o", str(out)], env={"COLUMNS": "250"})  # the console's table unfolded
        cand = tmp_path / "cand"  # a second run of the same command, for the gate
        assert CliRunner().invoke(app, [*args, "-o", str(cand), "-q", "--no-report"]).exit_code == 0
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    metrics = {k: MetricValue.model_validate(m) for k, m in summary["tasks"][task]["metrics"].items()}
    assert metrics and all(m.ci_method in ("wilson", "wilson-clustered") for m in metrics.values()), metrics
    name, m = next(iter(metrics.items()))
    assert m.ci95 is not None and m.value is not None
    expected = share_interval(m.value, m.n, m.stderr, summary["tasks"][task]["detail"].get("num_problems"))
    assert m.ci95 == pytest.approx(expected[0]) and m.ci_method == expected[1]  # what scoring/ chose, stored
    text = m.ci_text()  # "[0.3852, 0.6523] wilson"

    # the console's accuracy table
    console = res.output
    for mv in metrics.values():
        assert mv.ci_text() in console, mv.ci_text()
    # the report, as a percentage with one decimal
    report = (out / "report.html").read_text()
    pct = f"{m.ci95[0] * 100:.1f}% – {m.ci95[1] * 100:.1f}%"
    assert f"Wilson 95% CI {pct}" in report, pct

    # the gate: Markdown, JUnit and JSON
    gate_dir = tmp_path / "gate"
    res = CliRunner().invoke(app, ["gate", "-b", str(out), "-c", str(cand), "-o", str(gate_dir)])
    assert res.exit_code in (0, 2) and (gate_dir / "gate.md").is_file(), res.output
    md, junit = (gate_dir / "gate.md").read_text(), (gate_dir / "junit.xml").read_text()
    assert f"| baseline | {task} | {name} | {m.value:.4f} | {text} | {m.n} |" in md
    assert f'value="{m.value:.4f} {text} (n={m.n})"' in junit
    stored = json.loads((gate_dir / "gate.json").read_text())["metrics"]
    row = next(s for s in stored if s["side"] == "candidate" and s["metric"] == name)
    assert row["ci95"] == list(m.ci95) and row["ci_method"] == m.ci_method

    # the history: the trend and export data hold the same ends
    env = {location.ENV: sqlite_url(tmp_path)}
    assert CliRunner().invoke(app, ["history", "add", str(out)], env=env).exit_code == 0
    export = tmp_path / "h.csv"
    assert CliRunner().invoke(app, ["history", "export", "-o", str(export)], env=env).exit_code == 0
    rows = [r for r in csv.DictReader(export.open()) if r["name"] == name and r["kind"] == "metric"]
    assert [(float(r["ci_low"]), float(r["ci_high"])) for r in rows] == [pytest.approx(tuple(m.ci95))]
