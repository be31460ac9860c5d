"""A run killed with SIGKILL mid-request and resumed by the same command (tests/integration/test_resume.py, and
test_client_processes.py with two sender processes): the uninterrupted reference run, the crashed run with every
request slot stalled mid-stream at the kill, and the resumed run, all against test servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.testing.server import Behaviour, TestServer
from evalkit.testing.state import RecordedRequest

REPO = Path(__file__).resolve().parents[1]
STALLED = 4  # = the run's --concurrency: every slot ends up holding a stalled request, so the kill lands mid-request
DONE_BEFORE_KILL = 8


@dataclass
class Resumed:
    """What the three runs left: the reference and the resumed run dirs, the requests the crashed and resumed
    runs' server received, the prompts stored before the kill and the killed process's exit status."""

    reference: Path
    out: Path
    requests: list[RecordedRequest]
    done_before: set[str]
    killed_rc: int | None


def kill_mid_run_and_resume(
    tmp_path: Path,
    argv: Callable[[str, Path], list[str]],
    stored: Callable[[Path], list[dict[str, Any]]],
    at_kill: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> Resumed:
    """``argv(url, out)`` (``run ...`` arguments of the CLI) run three times: once uninterrupted, in-process; once
    as ``python -m evalkit.cli`` against a server whose requests after the first ``DONE_BEFORE_KILL`` stall for
    a minute after two tokens, killed with SIGKILL once ``DONE_BEFORE_KILL`` records are ``stored`` and
    ``STALLED`` requests are mid-stream (``at_kill(proc)`` runs just before the kill: exactly that many are
    stored then); then again the same way, on the same server, to its end."""
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    ref = tmp_path / "reference"
    with TestServer(Behaviour(correct_ratio=0.6)) as fast:  # answers that do not depend on timing or process
        res = CliRunner().invoke(app, argv(fast.url, ref))
        assert res.exit_code == 0, res.stderr

    out = tmp_path / "crashed"
    command = [sys.executable, "-m", "evalkit.cli"]
    with TestServer(Behaviour(correct_ratio=0.6, ttft_s=0.02, itl_s=0.004)) as srv:
        srv.faults = [None] * DONE_BEFORE_KILL + [{"stall_s": 60, "after_tokens": 2}] * STALLED
        proc = subprocess.Popen(
            [*command, *argv(srv.url, out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                stalled = [r for r in srv.requests if r.fault and r.first_token_time is not None]
                written = len(stored(out)) if (out / "samples.jsonl").exists() else 0
                if len(stalled) == STALLED and written >= DONE_BEFORE_KILL:
                    break
                time.sleep(0.02)
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
            assert len(stored(out)) == DONE_BEFORE_KILL  # nothing else can complete: every slot is stalled
            if at_kill is not None:
                at_kill(proc)
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert not (out / "summary.json").exists()
        done_before = {r["prompt"] for r in stored(out)}
        p = subprocess.run([*command, *argv(srv.url, out)], capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        return Resumed(ref, out, srv.requests, done_before, proc.returncode)
