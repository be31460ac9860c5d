"""The wheel, as a user gets it: built with ``python -m build``, installed in a fresh venv, used outside the repo.

The venv sees the test interpreter's site-packages (evalkit's dependencies) through a ``.pth`` line, after its
own: evalkit itself comes only from the wheel (checked: ``evalkit.__file__`` lies inside the new venv, the command
runs in a folder outside the repo, no PYTHONPATH). Task files, their data and the report templates must be inside
the wheel, or the commands below fail.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, f"python -m build failed (pip install -e '.[dev]' installs build):\n{p.stdout}{p.stderr}"
    (whl,) = out.glob("evalkit-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; dependencies from this interpreter's site-packages."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    (purelib,) = root.glob("lib/python*/site-packages")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(root / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    # dependencies after the wheel is in: with this .pth in place first, pip would find this interpreter's own
    # evalkit (a non-editable install, as in CI) "already satisfied" and install nothing
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "zz_evalkit_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return root


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A working folder outside the repo."""
    where = tmp_path_factory.mktemp("user")
    assert REPO not in where.parents
    return where


def user_env(outside: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["EVALKIT_CACHE_DIR"] = str(outside / "prompt-cache")  # a first run, as on a fresh machine
    return env


def sh(venv: Path, outside: Path, *cmd: str, timeout: int = 300) -> subprocess.CompletedProcess:
    exe = venv / "bin" / cmd[0] if (venv / "bin" / cmd[0]).exists() else Path(cmd[0])
    return subprocess.run(
        [str(exe), *cmd[1:]], cwd=outside, env=user_env(outside), capture_output=True, text=True, timeout=timeout
    )


def test_wheel_holds_tasks_data_and_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        [
            "git",
            "ls-files",
            "tasks",
            "evalkit/reporting/templates",
            "evalkit/reporting/static",
            "evalkit/history/templates",
            "evalkit/history/migrations",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked, "git ls-files found nothing"
    wanted = {f.replace("tasks/", "evalkit/_builtin_tasks/", 1) if f.startswith("tasks/") else f for f in tracked}
    assert wanted - names == set()
    for f in ("gsm8k.yaml", "aime25.yaml", "aime25.py", "data/gsm8k/test.jsonl", "data/aime25/aime25.jsonl"):
        assert f"evalkit/_builtin_tasks/{f}" in names, f
    assert "evalkit/scoring/bfcl_backends/math_api.py" in names  # BFCL's vendored backends (bfcl-multi-turn-base)


def test_evalkit_comes_from_the_wheel(venv, outside):
    code = "import evalkit, json, sys; print(json.dumps([evalkit.__file__, sys.path]))"
    p = sh(venv, outside, "python", "-c", code)
    assert p.returncode == 0, p.stderr
    where, path = json.loads(p.stdout)
    assert venv in Path(where).parents and REPO not in Path(where).parents
    assert all(Path(e).resolve() != REPO for e in path if e), path  # "" is the folder outside the repo


def test_version_tasks_and_config_show(venv, outside, wheel):
    p = sh(venv, outside, "evalkit", "--version")
    version = wheel.name.split("-")[1]
    assert p.returncode == 0 and p.stdout.strip() == f"evalkit {version}", p.stderr
    p = sh(venv, outside, "evalkit", "tasks", "list")
    assert p.returncode == 0, p.stderr
    assert {line.split()[0] for line in p.stdout.splitlines()} >= {"gsm8k", "aime25"}
    for task in ("gsm8k", "aime25"):
        p = sh(venv, outside, "evalkit", "tasks", "show", task)
        assert p.returncode == 0, p.stderr
        file = Path(re.search(r"^file:\s+(\S+)", p.stdout, re.M).group(1))
        assert venv in file.parents, file
        assert "--- first prompt ---" in p.stdout and re.search(r"^data test\s+[0-9a-f]{64}", p.stdout, re.M)
    p = sh(venv, outside, "evalkit", "config", "show", "gsm8k", "--limit", "3")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^limit\s+3\s+command line$", p.stdout, re.M)


def test_the_run_history_from_the_wheel(venv, outside):
    """Its migrations and the trend page's template come with the wheel: a new database is made and read."""
    env = {**user_env(outside), "EVALKIT_HISTORY_URL": f"sqlite:///{outside / 'history.sqlite'}"}
    exe = str(venv / "bin" / "evalkit")
    run = str(REPO / "tests" / "data" / "cpu-vllm-gsm8k")
    for args in (["add", run], ["trend", "--task", "gsm8k", "-o", "t.html"]):
        p = subprocess.run([exe, "history", *args], cwd=outside, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    assert "exact_match,strict-match" in (outside / "t.html").read_text()


def test_runs_gsm8k_and_aime25_against_the_test_server_and_reports(venv, outside):
    server = subprocess.Popen(
        [str(venv / "bin" / "python"), "-m", "evalkit.testing.server", "--port", "0"],
        cwd=outside,
        env=user_env(outside),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = None
        for line in server.stdout:
            if m := re.search(r"evalkit-testserver ready (http://\S+)", line):
                url = m.group(1) + "/v1"
                break
        assert url, "the wheel's test server did not start"
        runs = {
            "gsm8k": ["--limit", "5", "--concurrency", "4"],
            "aime25": ["--limit", "3", "--num-samples", "2", "--concurrency", "4"],
        }
        for task, args in runs.items():
            p = sh(venv, outside, "evalkit", "run", task, "--endpoint", url, "-o", f"runs/{task}", *args)
            assert p.returncode == 0, p.stderr
        p = sh(venv, outside, "python", str(REPO / "examples" / "api_quickstart.py"), url, "api")
        assert p.returncode == 0, p.stderr
        assert "gate: pass" in p.stdout
    finally:
        server.terminate()
        server.wait(30)
    for task in runs:
        for f in ("manifest.json", "samples.jsonl", "summary.json", "report.html"):
            assert (outside / "runs" / task / f).is_file(), f"{task}/{f}"
    (outside / "runs" / "gsm8k" / "report.html").unlink()
    p = sh(venv, outside, "evalkit", "report", "runs/gsm8k")
    assert p.returncode == 0, p.stderr
    html = (outside / "runs" / "gsm8k" / "report.html").read_text()
    assert "gsm8k" in html and "chart" in html.lower()  # the template and the vendored Chart.js are there
    p = sh(venv, outside, "evalkit", "report", "runs/gsm8k", "runs/aime25", "-o", "compare.html")
    assert p.returncode == 0 and (outside / "compare.html").is_file(), p.stderr
    for f in ("api/cand/report.html", "api/compare.html", "api/gate/gate.json"):
        assert (outside / f).is_file(), f
