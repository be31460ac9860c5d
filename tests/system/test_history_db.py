"""The run history's database on SQLite and on PostgreSQL (each test runs on both; PostgreSQL's skip, saying so,
without a server): a sweep and a watch writing at once from two processes, a writer killed mid-write, a
database made by an earlier migration upgraded in place, and the Grafana panel's query over it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from evalkit.gating.result import GateResult, Rule
from evalkit.history import db, session
from evalkit.history.models import RunRow, TickRow
from evalkit.history.record import add_gate, add_run
from tests.history_fixtures import db_url, forget  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow  # processes started, a PostgreSQL database made per test

RUN = Path(__file__).parents[1] / "data" / "cpu-vllm-gsm8k"
ROOT = Path(__file__).parents[2]

SWEEP = """
import os, sys
from pathlib import Path
os.environ["EVALKIT_HISTORY_URL"] = sys.argv[1]
from evalkit.history import record_run
for d in sys.argv[2:]:
    assert record_run(Path(d), source="sweep", config="fast") is not None
"""
WATCH = """
import os, sys
from pathlib import Path
os.environ["EVALKIT_HISTORY_URL"] = sys.argv[1]
from evalkit.history import record_tick
for i, d in enumerate(sys.argv[3:], 1):
    tick = {"tick": i, "status": "ok", "verdict": "baseline", "started_at": "2026-12-04T10:00:00+00:00"}
    assert record_tick(Path(sys.argv[2]), "gsm8k", tick, Path(d)) is not None
"""
KILLED = """
import os, signal, sys
from pathlib import Path
from evalkit.history import session
from evalkit.history.record import add_run
with session(sys.argv[1]) as s:
    add_run(s, Path(sys.argv[2]), "run")
    s.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def copies(root: Path, n: int, prefix: str) -> list[Path]:
    """``n`` run dirs (the example run's manifest and summary) under ``root``."""
    out = []
    for i in range(n):
        d = root / f"{prefix}{i}"
        d.mkdir(parents=True)
        for name in ("manifest.json", "summary.json"):
            shutil.copy(RUN / name, d / name)
        out.append(d)
    return out


def python(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def test_a_sweep_and_a_watch_write_at_once_from_two_processes(db_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    sweep_runs = copies(tmp_path / "sweep", 8, "run")
    ticks = copies(tmp_path / "watch" / "ticks", 8, "00000")
    shared = sweep_runs[0]  # a run dir both record: one row
    procs = [python(SWEEP, db_url, *sweep_runs), python(WATCH, db_url, tmp_path / "watch", *ticks, shared)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "warning" not in err, err
    with session(db_url) as s:
        runs = s.scalars(sa.select(RunRow)).all()
        assert len(runs) == 16 and all(len(r.tasks) == 1 and len(r.tasks[0].metrics) == 2 for r in runs)
        assert {r.run_dir for r in runs} == {str(d.resolve()) for d in [*sweep_runs, *ticks]}
        ticks_rows = s.scalars(sa.select(TickRow).order_by(TickRow.tick)).all()
        assert [t.tick for t in ticks_rows] == list(range(1, 10)) and all(t.run_id for t in ticks_rows)
        assert ticks_rows[-1].run_id == next(r.id for r in runs if r.run_dir == str(shared.resolve()))


def test_a_writer_killed_mid_write_leaves_the_history_as_it_was(db_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    first, second = copies(tmp_path, 2, "run")
    with session(db_url) as s:
        add_run(s, first, "run")
    p = python(KILLED, db_url, second)
    p.communicate(timeout=120)
    assert p.returncode == -9
    with session(db_url) as s:
        assert [r.run_dir for r in s.scalars(sa.select(RunRow))] == [str(first.resolve())]
        if s.bind is not None and s.bind.dialect.name == "sqlite":
            assert s.execute(sa.text("PRAGMA integrity_check")).scalar() == "ok"
    with session(db_url) as s:  # the next write goes through
        add_run(s, second, "run")
    with session(db_url) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(RunRow)) == 2


def test_a_database_made_by_an_earlier_migration_is_upgraded(db_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    (run,) = copies(tmp_path, 1, "run")
    old = db.make_engine(db_url)
    db.upgrade(old, "0001")  # the schema before gates and watch ticks were recorded
    with old.begin() as c:  # a run as that version recorded it (its columns only)
        run_id = _insert_old_run(c, run, "run")
    assert "gates" not in sa.inspect(old).get_table_names()
    old.dispose()
    forget(db_url)

    result = GateResult(
        verdict="pass", candidate="run0", rules=[Rule(name="gsm8k: x", task="gsm8k", kind="accuracy", verdict="pass")]
    )
    with session(db_url) as s:  # opened by this version: upgraded to the newest migration first
        gate = add_gate(s, result, [], [run], None)
        assert [g.run_id for g in gate.runs] == [run_id]  # the run recorded before the upgrade
        assert s.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == db.HEAD
        assert {"gates", "gate_rules", "watch_ticks"} <= set(sa.inspect(s.connection()).get_table_names())


def _insert_old_run(c: sa.Connection, run_dir: Path, source: str) -> int:
    """A runs row with the columns of migrations 0001-0002 (before ``kind``); its id."""
    from datetime import datetime

    row = {"run_dir": str(run_dir.resolve()), "label": run_dir.name, "recorded_at": datetime(2026, 12, 6, 9, 30)}
    c.execute(
        sa.text("INSERT INTO runs (run_dir, label, recorded_at, source) VALUES (:run_dir, :label, :recorded_at, :s)"),
        {**row, "s": source},
    )
    return int(c.execute(sa.text("SELECT id FROM runs WHERE run_dir = :d"), {"d": row["run_dir"]}).scalar_one())


def test_runs_recorded_before_the_kind_column_get_their_kind(db_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    runs = copies(tmp_path, 3, "run")
    old = db.make_engine(db_url)
    db.upgrade(old, "0002")  # the schema before runs had a kind
    with old.begin() as c:
        ids = [_insert_old_run(c, run, source) for run, source in zip(runs, ("run", "sweep", "watch"), strict=True)]
    old.dispose()
    forget(db_url)
    with session(db_url) as s:  # upgraded on open
        kinds = {r.id: r.kind for r in s.scalars(sa.select(RunRow))}
        assert [kinds[i] for i in ids] == ["run", "sweep point", "watch tick"]
        assert s.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0003"


def test_the_grafana_panel_reads_the_history(db_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    """docker/monitoring: the provisioned data source is compose's history-db, which the watch writes to, and the
    dashboard panel's SQL (Grafana's time macro filled in) gives a time, a series name and a value per run."""
    monitoring = ROOT / "docker" / "monitoring" / "grafana"
    source = yaml.safe_load((monitoring / "provisioning" / "datasources" / "history.yml").read_text())["datasources"][0]
    dash = json.loads((monitoring / "dashboards" / "evalkit-history.json").read_text())
    (panel,) = dash["panels"]
    assert panel["datasource"]["uid"] == source["uid"] and panel["datasource"]["type"] == source["type"]
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]
    url = compose["evalkit-watch"]["environment"]["EVALKIT_HISTORY_URL"]
    assert url.split("@")[1] == f"{source['url']}/{source['jsonData']['database']}"  # the watch writes, Grafana reads
    assert "history-db" in compose and source["url"].startswith("history-db:")

    for i, run in enumerate(copies(tmp_path, 2, "run")):
        with session(db_url) as s:
            add_run(s, run, "watch", config=f"c{i}")
    sql = panel["targets"][0]["rawSql"].replace(
        "$__timeFilter(r.created_at)", "r.created_at BETWEEN '2000-01-01' AND '2100-01-01'"
    )
    with session(db_url) as s:
        rows = s.execute(sa.text(sql)).mappings().all()
    assert [sorted(r) for r in rows] == [["metric", "time", "value"]] * 4
    assert {r["metric"] for r in rows} == {
        f"gsm8k exact_match,{f} (c{i})" for f in ("strict-match", "flexible-extract") for i in (0, 1)
    }
