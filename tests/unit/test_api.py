"""The Python API (evalkit.api; evalkit.run / open_run / report / gate) and its notebook-like example."""

import sys

import pytest
from typer.testing import CliRunner

import evalkit
from evalkit import api
from evalkit.errors import ConfigError, EvalkitError


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A baseline and a candidate GSM8K run on the test server, through evalkit.run."""
    from evalkit.testing.server import Behaviour, TestServer

    out = tmp_path_factory.mktemp("api")
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        base = evalkit.run("gsm8k", endpoint=srv.url, limit=6, concurrency=3, output_dir=out / "base", report=False)
        cand = evalkit.run(["gsm8k"], endpoint=srv.url, limit=6, concurrency=3, output_dir=out / "cand")
    return base, cand


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


def test_cli_commands_go_through_the_api(monkeypatch, tmp_path):
    """`evalkit report` and `evalkit gate` are the API functions (one code path)."""
    from evalkit.cli import app

    calls = []
    monkeypatch.setattr(
        api, "report", lambda dirs, out, rest=None: calls.append(("report", dirs, out, rest)) or tmp_path / "r.html"
    )

    def fake_gate(*runs, **kw):
        calls.append(("gate", runs, kw))
        raise EvalkitError("gate called")

    monkeypatch.setattr(api, "gate", fake_gate)
    assert CliRunner().invoke(app, ["report", str(tmp_path)]).exit_code == 0
    result = CliRunner().invoke(app, ["gate", str(tmp_path), "--force"])
    assert result.exit_code == 2 and "gate called" in result.output
    assert calls[0] == ("report", [tmp_path], None, None)
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
