"""Reusable task parts: the boxed-answer scorer in scoring/, task classes and scorer functions named by module in
a task file (checked as the file is read), the boxed-answer base class's prompt and data hooks, and a new
boxed-answer task made of one YAML file and its data, run end to end against the test server.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_boxed_task.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.config import load_config
from evalkit.runner import Runner
from evalkit.store import open_run
from tests.unit.test_boxed_task import AIME, CLASS, LITE, SCORER, lite_dir  # noqa: F401 (helpers and fixtures shared with that file)

# ----------------------------------------------------------------------------------------------- end to end


def run(srv, tmp_path: Path, folder: Path, out: str, **extra):
    cfg = load_config(
        {"tasks": ["math500-lite"], "endpoint": srv.url, "output_dir": str(tmp_path / out), "tasks_dir": [str(folder)],
         "concurrency": 4, "seed": 1, **extra}
    )  # fmt: skip
    return Runner(cfg).run()


def test_a_boxed_answer_task_of_one_yaml_file_runs_end_to_end(tmp_path, test_server):
    """math500-lite: one task file naming the base class and the scorer by module, and its data; no Python."""
    folder = lite_dir(tmp_path / "tasks")
    result = run(test_server, tmp_path, folder, "run")
    summary = result.summary.tasks["math500-lite"]
    assert sorted(summary.metrics) == ["avg@2", "maj@2", "pass@1", "pass@2"]
    samples = [s for s in open_run(tmp_path / "run").samples if s["task"] == "math500-lite"]
    assert len(samples) == 10 and {s["status"] for s in samples} == {"ok"}
    for s in samples:  # the test server boxes the gold answer (60% of the time) or a wrong one
        assert s["correct"]["boxed"] == (s["extracted"]["boxed"] == s["target"]), s
    right = sum(s["correct"]["boxed"] for s in samples)
    assert 0 < right < 10
    assert summary.metrics["avg@2"].value == pytest.approx(right / 10)
    assert [p["id"] for p in summary.detail["per_problem"]] == [f"lite-{i}" for i in range(5)]
    # cut short (8 tokens: no box yet): recorded as truncated, never scored as a wrong answer
    short = run(test_server, tmp_path, folder, "short", max_tokens=8, limit=2)
    counts = short.summary.tasks["math500-lite"].counts
    assert (counts["truncated"], counts["total"], counts["ok"]) == (4, 4, 0)
