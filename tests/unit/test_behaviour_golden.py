"""Behaviour pinned byte for byte: GSM8K and AIME25 runs against the deterministic test server give the recorded
``samples.jsonl``, ``summary.json`` and ``manifest.json`` (timing and environment fields masked), and the report
rendered from the recorded store is the recorded ``report.html`` (timing-derived text masked).

Regenerate after an intended change of output:
``EVALKIT_GOLDEN_UPDATE=1 pytest tests/integration/test_behaviour_golden.py``.
The files are stored with their volatile values masked too (a string ``<volatile>``, a number 0, a list empty, a
measured flag false; keys, None and the other flags kept, so they still read as a run dir), so that regenerating
shows only what behaviour changed.

Here: those of its tests that run in-process; the others are in tests/integration/test_behaviour_golden.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from tests.integration.test_behaviour_golden import GOLDEN, MASK, RUNS, UPDATE

RENDERED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 · ")


def normalised_html(text: str) -> str:
    """The report with its rendering time masked: the same store renders the same bytes otherwise."""
    return RENDERED_AT.sub(MASK, text)


@pytest.mark.parametrize("task", sorted(RUNS))
def test_report_from_recorded_store_is_unchanged(task: str, tmp_path: Path) -> None:
    store = tmp_path / task
    shutil.copytree(GOLDEN / task, store, ignore=shutil.ignore_patterns("report.html"))
    res = CliRunner().invoke(app, ["report", str(store), "-o", str(tmp_path / "report.html")])
    assert res.exit_code == 0, res.stderr
    html = (tmp_path / "report.html").read_text()
    if UPDATE:
        (GOLDEN / task / "report.html").write_text(normalised_html(html))  # stored with its rendering time masked
    assert normalised_html(html) == normalised_html((GOLDEN / task / "report.html").read_text()), (
        f"{task} report changed"
    )
