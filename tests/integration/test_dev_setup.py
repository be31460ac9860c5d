"""The test command works on a fresh clone and after `make demo`: scripts/test.sh installs what is missing, and
README, Makefile and .ci/run all run that one command."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_dev_missing_names_evalkit_and_the_dev_extra_in_a_bare_venv(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True, timeout=120)
    p = subprocess.run(
        [str(tmp_path / "v" / "bin" / "python"), str(REPO / "scripts" / "dev_missing.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert {"evalkit", "pytest", "ruff", "mypy", "build", "hatchling", "sqlalchemy"} <= set(p.stdout.split())


def test_dev_missing_reads_the_dependencies_and_the_dev_extra_of_pyproject(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\ndependencies = ["no-such-main-xyz>=1", "no-such-old-xyz; python_version < \'3.0\'"]\n'
        '[project.optional-dependencies]\ndev = ["pytest>=8", "no-such-dist-xyz[extra]>=1"]\n'
    )
    p = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "dev_missing.py"), str(pyproject)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "no-such-dist-xyz" in p.stdout.split() and "pytest" not in p.stdout.split()
    assert "no-such-main-xyz" in p.stdout.split() and "no-such-old-xyz" not in p.stdout.split()  # marker false
