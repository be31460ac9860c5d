"""The numerics rules of the gate, the watch's window and the sweep's columns over synthetic ``numerics`` run dirs
(tests/numerics_fixtures.py), and the report's numerics sections (hostile token text escaped).

Here: those of its tests that use the test server or a subprocess; the others are in
tests/unit/test_numerics_gate.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.gating import from_run_dir
from tests.numerics_fixtures import TASK
from tests.unit.test_numerics_gate import RULES, _run, _verdicts, base, gate, positions_noise  # noqa: F401 (helpers and fixtures shared with that file)


def _evalkit_run(url: str, out: Path) -> None:
    res = CliRunner().invoke(app, ["run", TASK, "--endpoint", url, "--limit", "20", "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output


def test_runs_of_the_numerics_task_on_the_test_server_pass_or_fail_the_gate(tmp_path: Path) -> None:
    from evalkit.testing.server import Behaviour, TestServer

    with TestServer() as srv:
        _evalkit_run(srv.url, tmp_path / "base")
        _evalkit_run(srv.url, tmp_path / "again")
        srv.state.behaviour.update(logit_noise=0.3, logit_noise_seed=5)  # a server that computes other numbers
        _evalkit_run(srv.url, tmp_path / "noisy")
    with TestServer(Behaviour(logit_scale=1.02)) as srv:  # a 2% logit scale: small, still beyond the budgets
        _evalkit_run(srv.url, tmp_path / "scaled")
    base = from_run_dir(tmp_path / "base").tasks[TASK]  # 20 texts and 16 noise-floor requests: 20 asked for  # noqa: F811 (the fixture imported above)
    assert base.asked_docs == frozenset(range(20)) and base.numerics is not None and len(base.numerics.again) == 16
    code, data = gate(tmp_path / "base", tmp_path / "again")
    assert code == 0 and _verdicts(data) == {f"{TASK}: {r}": "pass" for r in RULES}
    code, data = gate(tmp_path / "base", tmp_path / "noisy")
    assert code == 1 and _verdicts(data) == {f"{TASK}: {r}": "fail" for r in RULES}
    code, data = gate(tmp_path / "base", tmp_path / "scaled")
    assert code == 1 and "fail" in _verdicts(data).values()
    html = (tmp_path / "noisy" / "gate" / "compare.html").read_text()
    assert '<section id="numerics-0">' in html and '<svg class="hist"' in html
    assert '<section id="numerics-floor">' in (tmp_path / "base" / "report.html").read_text()


def test_a_numerics_watch_passes_on_the_same_numbers_and_fails_when_they_change(tmp_path: Path) -> None:
    from evalkit.config import load_config
    from evalkit.runner import Runner
    from evalkit.testing.server import TestServer
    from evalkit.watch import Watch, WatchSettings

    with TestServer() as srv:
        base = tmp_path / "base"
        cfg = {"tasks": [TASK], "endpoint": srv.url, "limit": 12, "output_dir": base, "report": False}
        Runner(load_config(cfg)).run()
        s = WatchSettings(task=TASK, endpoint=srv.url, out=tmp_path / "w", every_s=0.05, per_tick=4, window=2,
                          baseline=base, ticks=2, concurrency=2, request_rate=None, run={})  # fmt: skip
        healthy = Watch(s).run()
        srv.state.behaviour.update(logit_noise=0.3, logit_noise_seed=3)  # a silent kernel change
        changed = Watch(dataclasses.replace(s, out=tmp_path / "w2")).run()
    assert [r.verdict for r in healthy] == ["pass", "pass"], [r.reason for r in healthy]
    assert [r.verdict for r in changed] == ["fail", "fail"]
    assert any(name.endswith("mean KL") for name in changed[0].failed_rules)
