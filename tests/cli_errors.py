"""The command line run as a user runs it, for the bad-input tests: in-process (typer's CliRunner) or as
``python -m evalkit.cli`` in a child process, and the check that an answer is exactly one ``evalkit: error:`` line
with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from evalkit.cli import app

REPO = Path(__file__).resolve().parents[1]
ERROR_PREFIX = "evalkit: error: "


@dataclass
class Outcome:
    code: int
    stderr: str
    stdout: str
    elapsed: float


def invoke(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    """The CLI in-process; ``env`` is set for the duration of the call."""
    t0 = time.monotonic()
    res = CliRunner().invoke(app, args, env=env)
    elapsed = time.monotonic() - t0
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception  # a traceback is never an acceptable answer to bad input
    return Outcome(res.exit_code, res.stderr, res.stdout, elapsed)


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> Outcome:
    """``python -m evalkit.cli`` in a child process (through ``main()``)."""
    t0 = time.monotonic()
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    p = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
    )
    return Outcome(p.returncode, p.stderr, p.stdout, time.monotonic() - t0)


def assert_one_error_line(out: Outcome, *needles: str) -> str:
    """Exit 2 and exactly one stderr line, starting ``evalkit: error:`` and holding every needle."""
    assert out.code == 2, (out.code, out.stderr, out.stdout)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert line.startswith(ERROR_PREFIX), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line
