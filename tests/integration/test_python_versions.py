"""evalkit runs on the oldest Python that ``requires-python`` admits: no language feature or standard-library
module newer than that (vermin's static check), every file compiles under that interpreter when one is installed,
and the type checker and the TOML fallback follow the same floor."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
CODE = ["evalkit", "tasks", "scripts", "benchmarks", "examples", "tests"]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def floor() -> tuple[int, int]:
    """The lowest Python of ``requires-python`` (``>=3.10`` -> (3, 10))."""
    m = re.fullmatch(r">=\s*3\.(\d+)", PYPROJECT["project"]["requires-python"].strip())
    assert m, "requires-python is a plain lower bound, >=3.N"
    return 3, int(m.group(1))


def vermin(*args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("vermin") is None:
        pytest.fail("vermin (the dev extra) is not installed: pip install -e '.[dev]'")
    major, minor = floor()
    flags = [f"--target={major}.{minor}-", "--no-tips", "--violations", "--eval-annotations"]
    return subprocess.run(
        [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", *flags, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def test_no_feature_newer_than_requires_python():
    p = vermin(*CODE)
    assert p.returncode == 0, f"code needs a newer Python than requires-python says:\n{p.stdout}{p.stderr}"


def test_the_check_sees_a_3_11_module(tmp_path):
    (tmp_path / "uses_tomllib.py").write_text("import tomllib\n")
    p = vermin(str(tmp_path))
    assert p.returncode != 0 and "tomllib" in p.stdout


def oldest_interpreter() -> str | None:
    """An interpreter of requires-python's lowest version that runs (a pyenv shim may name one it lacks)."""
    major, minor = floor()
    name = f"python{major}.{minor}"
    pyenv = sorted(map(str, Path.home().glob(f".pyenv/versions/{major}.{minor}.*/bin/{name}")))
    candidates = [*pyenv, shutil.which(name)]
    for exe in filter(None, candidates):
        if subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=60).returncode == 0:
            return exe
    return None


@pytest.mark.slow
def test_every_file_compiles_under_the_oldest_python():
    exe = oldest_interpreter()
    if exe is None:
        pytest.skip("no interpreter of requires-python's lowest version on this machine")
    script = (
        "import pathlib, sys\n"
        "bad = []\n"
        "for top in sys.argv[1:]:\n"
        "    for p in sorted(pathlib.Path(top).rglob('*.py')):\n"
        "        try:\n"
        "            compile(p.read_bytes(), str(p), 'exec', dont_inherit=True)\n"
        "        except SyntaxError as e:\n"
        "            bad.append(f'{p}:{e.lineno}: {e.msg}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    p = subprocess.run([exe, "-c", script, *CODE], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, f"{exe} cannot compile:\n{p.stdout}{p.stderr}"
