"""The Python API (evalkit.api; evalkit.run / open_run / report / gate) and its notebook-like example.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_api.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import evalkit
from evalkit.contracts import Manifest, RunSummary
from evalkit.errors import RunError
from tests.unit.test_api import two_runs  # noqa: F401 (helpers and fixtures shared with that file)

REPO = Path(__file__).resolve().parents[2]


def test_run_returns_the_contract_records(two_runs):  # noqa: F811 (the fixture imported above)
    base, cand = two_runs
    assert isinstance(base.manifest, Manifest) and isinstance(base.summary, RunSummary)
    assert base.summary.tasks["gsm8k"].metrics["exact_match,strict-match"].n == 6
    assert base.manifest.command[:2] == ["evalkit.run", "gsm8k"]
    assert not (base.run_dir / "report.html").exists()  # report=False, as --no-report
    assert (cand.run_dir / "report.html").is_file()
    assert len(list(cand.open().records())) == 6


def test_error_rate_raises_run_error_after_writing(tmp_path):
    from evalkit.testing.server import TestServer

    with TestServer() as srv:
        srv.faults = [{"status": 400}]
        with pytest.raises(RunError, match="1 of 2 requests failed"):
            evalkit.run("gsm8k", endpoint=srv.url, limit=2, concurrency=1, output_dir=tmp_path / "r", report=False)
    assert evalkit.open_run(tmp_path / "r").typed_summary().tasks["gsm8k"].counts["api_error"] == 1


@pytest.mark.slow
def test_api_quickstart_example_runs(tmp_path):
    """examples/api_quickstart.py, as a user runs it, from another folder (it starts the test server)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    script = REPO / "examples" / "api_quickstart.py"
    p = subprocess.run(
        [sys.executable, str(script), "", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    assert "gsm8k strict-match:" in p.stdout and "aime25 avg@2:" in p.stdout and "gate: pass" in p.stdout
    for f in ("base/summary.json", "cand/report.html", "compare.html", "gate/gate.json"):
        assert (tmp_path / f).is_file(), f


def test_import_stays_light():
    """`import evalkit`, the API module and the command's start load no scipy, lm-eval, jinja2 or pydantic
    models (`evalkit --version` and shell completion answer at once)."""
    code = (
        "import sys, evalkit, evalkit.api, evalkit.cli; evalkit.run; evalkit.open_run\n"
        "heavy = {'scipy', 'lm_eval', 'jinja2', 'evalkit.gating', 'evalkit.reporting', 'evalkit.contracts',\n"
        "         'evalkit.runner'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
