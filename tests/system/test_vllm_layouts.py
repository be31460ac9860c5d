"""Multi-rank CPU vLLM started by ``evalkit run --serve`` on a 2-core box, with ``--cpu-threads-bind spread``: no
process of the group (API server, engine cores, DP coordinator) left after SIGTERM of data parallel 2, or after a
start vLLM refuses (tensor parallel 2 does not divide SmolLM2-135M's 9 heads). A normal end of tensor parallel 3 and
data parallel 2, tp3's three workers and their thread binding are checked by the CPU layout sweep
(test_vllm_cpu_sweep.py), which starts both layouts anyway.

Each start costs ~40-50 s on 2 cores; ``pytest -s`` prints the measured times."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.system.test_vllm_e2e import ServerWatch, _cmdline, cli_env, count_lines, launched_port, serve_argv, vllm_pids
from tests.vllm_env import REPO, VLLM_MARKS

pytestmark = VLLM_MARKS


@pytest.fixture
def watch(tmp_path: Path):
    w = ServerWatch(tmp_path / "run")
    try:
        yield w
    finally:
        w.cleanup()


def titles(watch: ServerWatch) -> list[str]:
    """The process titles of vLLM's group as recorded (``VLLM::EngineCore_DP0``, ``VLLM::Worker`` ...)."""
    return sorted(_cmdline(p)[0] for p in watch.pids if _cmdline(p) not in ([], [""]))


def test_dp2_sigterm_stops_every_engine(watch: ServerWatch) -> None:
    argv = serve_argv(watch.run_dir, "--dp", "2", "--cpu-threads-bind", "spread", "--concurrency", "2", limit=200)
    proc = watch.start([*argv, "--no-report"])
    watch.find_server()
    wait_for_samples = watch.run_dir / "samples.jsonl"
    deadline = time.monotonic() + 300
    while count_lines(wait_for_samples) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert count_lines(wait_for_samples) >= 2, watch.stderr()
    watch.record_group()
    seen = titles(watch)
    assert any("EngineCore_DP0" in t for t in seen) and any("EngineCore_DP1" in t for t in seen), seen
    t_term = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    rc = proc.wait(timeout=60)
    stop_s = time.monotonic() - t_term
    assert rc == 130, watch.stderr()
    watch.assert_gone(timeout_s=5)
    print(f"\n[dp2 SIGTERM] exit {rc} {stop_s:.1f} s after SIGTERM; group was {seen}")


def test_tp2_refused_start_leaves_no_process(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    p = subprocess.run(
        serve_argv(run_dir, "--tp", "2", "--cpu-threads-bind", "spread", limit=1),
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr
    assert "during startup" in p.stderr.splitlines()[0]
    port = launched_port(run_dir / "server.log")
    assert port is not None and vllm_pids(port) == []
    print(f"\n[tp2 refused] exit 2 after {time.monotonic() - t0:.1f} s: {p.stderr.splitlines()[0]}")
