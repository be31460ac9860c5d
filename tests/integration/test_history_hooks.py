"""The commands feed the run history once they have finished: `evalkit run` its run (one over its error rate
too), `evalkit sweep` each
combination under its config's name, `evalkit watch` each tick with its verdict; `off` writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.history import location, session
from evalkit.history.models import RunRow, TickRow
from evalkit.testing.server import Behaviour, TestServer
from evalkit.watch import Watch
from tests.history_fixtures import forget, sqlite_url
from tests.unit.test_watch import settings

pytestmark = pytest.mark.slow


def cli(url: str, *args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [*map(str, args)], env={location.ENV: url})
    print(res.output)
    return res.exit_code, res.output


def test_run_records_its_run_and_off_writes_nothing(tmp_path: Path, test_server: TestServer) -> None:
    url = sqlite_url(tmp_path)
    args = ("run", "gsm8k", "--endpoint", test_server.url, "--limit", "5", "--concurrency", "4", "--no-report", "-q")
    code, out = cli(url, *args, "-o", tmp_path / "run1")
    assert code == 0, out
    with session(url) as s:
        (run,) = s.scalars(sa.select(RunRow)).all()
        assert run.run_dir == str((tmp_path / "run1").resolve()) and run.source == "run"
        assert run.model and [t.task for t in run.tasks] == ["gsm8k"] and run.tasks[0].requests == 5
        assert {m.name for m in run.tasks[0].metrics} == {"exact_match,strict-match", "exact_match,flexible-extract"}
    forget(url)
    code, out = cli("off", *args, "-o", tmp_path / "run2")
    assert code == 0 and "warning" not in out
    with session(url) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(RunRow)) == 1  # run2 was not recorded
    forget(url)


def test_a_run_over_its_error_rate_is_recorded_too(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    with TestServer() as srv:
        srv.faults = [{"status": 400}]  # the first request fails: 1 of 2 is above --max-error-rate 0
        code, out = cli(url, "run", "gsm8k", "--endpoint", srv.url, "--limit", "2", "--concurrency", "1",
                        "--no-report", "-q", "-o", tmp_path / "r")  # fmt: skip
    assert code == 1 and "1 of 2 requests failed" in out
    with session(url) as s:
        (run,) = s.scalars(sa.select(RunRow)).all()
        assert run.run_dir == str((tmp_path / "r").resolve()) and run.tasks[0].counts["api_error"] == 1
    forget(url)


def test_each_sweep_combination_is_recorded_under_its_config(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        spec = tmp_path / "sweep.yaml"
        spec.write_text(
            f"tasks: [gsm8k]\nlimit: 3\nendpoint: {srv.url}\nconfigs:\n  nightly: {{}}\n"
            "sampling:\n  greedy: {max_tokens: 24, temperature: 0}\nconcurrency: [1, 2]\n"
        )
        code, out = cli(url, "sweep", spec, "-o", tmp_path / "out")
        assert code == 0, out
    code, out = cli(url, "history", "list", "--config", "nightly")
    assert code == 0 and len(out.strip().splitlines()) == 3  # the header and both combinations
    with session(url) as s:
        assert {r.source for r in s.scalars(sa.select(RunRow))} == {"sweep"}
    forget(url)


def test_each_watch_tick_is_recorded_with_its_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = sqlite_url(tmp_path)
    monkeypatch.setenv(location.ENV, url)
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        history = Watch(settings(srv.url, tmp_path / "w", ticks=3, per_tick=5, baseline_ticks=2, window=1)).run()
    with session(url) as s:
        ticks = s.scalars(sa.select(TickRow).order_by(TickRow.tick)).all()
        assert [(t.tick, t.verdict) for t in ticks] == [(r.tick, r.verdict) for r in history]
        assert [t.verdict for t in ticks][:2] == ["baseline", "baseline"] and ticks[2].verdict != "none"
        runs = {r.id: r for r in s.scalars(sa.select(RunRow))}
        assert all(runs[t.run_id].source == "watch" and t.task == "gsm8k" for t in ticks if t.run_id is not None)
        assert runs[ticks[0].run_id].run_dir.endswith("ticks/000001")  # type: ignore[index]
    forget(url)
