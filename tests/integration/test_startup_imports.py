"""What `evalkit run` has imported when its run starts (``Runner.run``: after the interpreter, the command's
imports and the settings, before setup and the first request): only what the run needs before its requests.
numpy (0.1-0.2 s to import), the report's renderer, the run history's ORM, lm-eval and its stack come later, in
the warm-up's import thread or where they are used, never in the start-up the whole command waits for."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runner.run replaced by a probe that prints the modules loaded when it is called, then ends the process: the
# command runs as `evalkit run` does (python -m evalkit.cli), up to its run's start; no server is contacted
PROBE = """
import os, sys
import evalkit.runner.orchestrate as orchestrate

def probe(self):
    print(" ".join(sorted(sys.modules)), flush=True)
    os._exit(0)

orchestrate.Runner.run = probe
sys.argv = ["evalkit", *sys.argv[1:]]
from evalkit.cli import main
main()
"""

# each: a top-level package (or module) the run's start must not have imported
NOT_AT_START = (
    "numpy",
    "scipy",
    "pandas",
    "jinja2",
    "sqlalchemy",
    "alembic",
    "lm_eval",
    "datasets",
    "transformers",
    "httpx",
    "evalkit.reporting",
    "evalkit.gating",
    "evalkit.history.db",
)


def modules_at_run_start(tmp_path: Path, *args: str) -> set[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "EVALKIT_CACHE_DIR": str(tmp_path / "cache"),
    }
    p = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    return set(p.stdout.split())


def test_a_run_starts_without_numpy_or_the_after_run_modules(tmp_path: Path) -> None:
    # the endpoint is never reached: the probe ends the process when the run starts
    loaded = modules_at_run_start(tmp_path, "run", "gsm8k", "--endpoint", "http://127.0.0.1:9/v1", "-o", "out", "-q")
    assert "evalkit.runner.orchestrate" in loaded and "aiohttp" in loaded  # the probe saw a run about to start
    early = sorted({name for m in loaded for name in NOT_AT_START if m == name or m.startswith(name + ".")})
    assert early == [], f"imported before the run starts: {early}"


def test_a_run_is_recorded_in_the_history_without_the_command_importing_sqlalchemy(tmp_path: Path) -> None:
    # the history's writer (SQLAlchemy's ORM) is imported and run in a worker process: the command's own process,
    # whose imports -X importtime lists (a child's are not), never imports it, and the run is recorded all the same
    from evalkit.testing.server import TestServer

    db = tmp_path / "history.sqlite"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "EVALKIT_CACHE_DIR": str(tmp_path / "cache"),
        "EVALKIT_HISTORY_URL": f"sqlite:///{db}",
    }
    with TestServer() as srv:
        args = ["run", "aime25", "--endpoint", srv.url, "--limit", "3", "-o", str(tmp_path / "run"), "-q"]
        p = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "evalkit.cli", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
    assert p.returncode == 0, p.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert "evalkit.runner.warmups" in imported and (tmp_path / "run" / "report.html").is_file()
    assert sorted(m for m in imported if m.split(".")[0] in ("sqlalchemy", "alembic")) == []
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT run_dir, source FROM runs").fetchall() == [(str((tmp_path / "run").resolve()), "run")]
