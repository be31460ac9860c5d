"""The Python API (evalkit.api; evalkit.run / open_run / report / gate) and its notebook-like example."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import evalkit
from evalkit import api
from evalkit.contracts import Manifest, RunSummary
from evalkit.errors import ConfigError, EvalkitError, RunError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A baseline and a candidate GSM8K run on the test server, through evalkit.run."""
    from evalkit.testing.server import Behaviour, TestServer

    out = tmp_path_factory.mktemp("api")
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        base = evalkit.run("gsm8k", endpoint=srv.url, limit=6, concurrency=3, output_dir=out / "base", report=False)
        cand = evalkit.run(["gsm8k"], endpoint=srv.url, limit=6, concurrency=3, output_dir=out / "cand")
    return base, cand


def test_run_returns_the_contract_records(two_runs):
    base, cand = two_runs
    assert isinstance(base.manifest, Manifest) and isinstance(base.summary, RunSummary)
    assert base.summary.tasks["gsm8k"].metrics["exact_match,strict-match"].n == 6
    assert base.manifest.command[:2] == ["evalkit.run", "gsm8k"]
    assert not (base.run_dir / "report.html").exists()  # report=False, as --no-report
    assert (cand.run_dir / "report.html").is_file()
    assert len(list(cand.open().records())) == 6


def test_open_run_reads_what_run_wrote(two_runs):
    _, cand = two_runs
    run = evalkit.open_run(cand.run_dir)
    assert run.typed_summary() == cand.summary
    assert {r.doc_id for r in run.records()} == set(range(6))


def test_report_and_gate_are_functions_whatever_was_imported_first(two_runs, tmp_path):
    import evalkit.gating  # the packages behind them have other names: importing them changes nothing
    import evalkit.reporting

    base, cand = two_runs
    assert evalkit.report is api.report and evalkit.gate is api.gate
    assert evalkit.report(base.run_dir) == base.run_dir / "report.html"
    assert (base.run_dir / "report.html").is_file()
    assert evalkit.report([base.run_dir, cand.run_dir], tmp_path) == tmp_path / "compare.html"
    outcome = evalkit.gate(base.run_dir, cand.run_dir, output=tmp_path / "gate")
    assert outcome.result.verdict == "pass" and outcome.exit_code == 0
    assert set(outcome.files) >= {"gate.json", "gate.md", "junit.xml", "compare.html"}
    assert evalkit.reporting is sys.modules["evalkit.reporting"] and evalkit.gating is sys.modules["evalkit.gating"]


def test_bad_input_raises_the_commands_one_line_errors(tmp_path):
    with pytest.raises(EvalkitError, match="is not a run dir"):
        evalkit.report(tmp_path)
    with pytest.raises(EvalkitError, match="BASELINE CANDIDATE or CANDIDATE alone, got 3"):
        evalkit.gate(tmp_path, tmp_path, tmp_path)
    with pytest.raises(ConfigError, match="unknown setting 'limt'"):
        evalkit.run("gsm8k", endpoint="http://127.0.0.1:9/v1", limt=3)


def test_error_rate_raises_run_error_after_writing(tmp_path):
    from evalkit.testing.server import TestServer

    with TestServer() as srv:
        srv.faults = [{"status": 400}]
        with pytest.raises(RunError, match="1 of 2 requests failed"):
            evalkit.run("gsm8k", endpoint=srv.url, limit=2, concurrency=1, output_dir=tmp_path / "r", report=False)
    assert evalkit.open_run(tmp_path / "r").typed_summary().tasks["gsm8k"].counts["api_error"] == 1


def test_cli_commands_go_through_the_api(monkeypatch, tmp_path):
    """`evalkit report` and `evalkit gate` are the API functions (one code path)."""
    from evalkit.cli import app

    calls = []
    monkeypatch.setattr(api, "report", lambda dirs, out: calls.append(("report", dirs, out)) or tmp_path / "r.html")

    def fake_gate(*runs, **kw):
        calls.append(("gate", runs, kw))
        raise EvalkitError("gate called")

    monkeypatch.setattr(api, "gate", fake_gate)
    assert CliRunner().invoke(app, ["report", str(tmp_path)]).exit_code == 0
    result = CliRunner().invoke(app, ["gate", str(tmp_path), "--force"])
    assert result.exit_code == 2 and "gate called" in result.output
    assert calls[0] == ("report", [tmp_path], None)
    assert calls[1] == (
        "gate",
        (tmp_path,),
        {"baselines": None, "candidates": None, "policy": None, "output": None, "force": True, "expected_from": None},
    )


def test_cli_run_goes_through_the_api(monkeypatch, tmp_path):
    from evalkit.cli import app

    seen = {}

    def fake_run(**kw):
        seen.update(kw)
        raise ConfigError("stop here")

    monkeypatch.setattr(api, "run", fake_run)
    result = CliRunner().invoke(app, ["run", "gsm8k", "--limit", "3", "--serve", "m", "--tp", "2"])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen["tasks"] == ["gsm8k"] and seen["limit"] == 3 and seen["endpoint"] is None
    assert seen["server"] == {"model": "m", "tensor_parallel_size": 2}


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
