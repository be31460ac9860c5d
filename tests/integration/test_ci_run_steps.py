""".ci/run with its steps replaced by stubs: the docker step runs in the background beside lint and the tests, and
CI still fails when any step fails (the docker step included, whether it ends before or after the tests), always
showing the docker step's output and stopping PostgreSQL."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STUB_SCRIPTS = ("setup_vllm_cpu.sh", "docker_ci.sh", "postgres.sh", "test.sh")


def _sandbox(tmp_path: Path, *, docker_rc: int, docker_wait_s: float, tests_rc: int, lint_rc: int = 0) -> Path:
    """A copy of .ci/run whose scripts, venv and tools are stubs that log what they did to ``calls``."""
    root = tmp_path / "repo"
    (root / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "run", root / ".ci" / "run")
    calls = tmp_path / "calls"
    bodies = {
        "setup_vllm_cpu.sh": "exit 0",
        # waits up to docker_wait_s for the tests to start: in the background, it ends after they started
        "docker_ci.sh": f'echo "docker: started" >>{calls}; for _ in $(seq {int(docker_wait_s * 10)}); do '
        f"grep -q tests: {calls} && break; sleep 0.1; done; "
        f'echo "docker says hello"; echo "docker: ended {docker_rc}" >>{calls}; exit {docker_rc}',
        "postgres.sh": f'if [ "$1" = start ]; then echo "export EVALKIT_TEST_POSTGRES_DIR=/pg"; '
        f'else echo "postgres: $1 $2" >>{calls}; fi',
        "test.sh": f'echo "tests: $*" >>{calls}; exit {tests_rc}',
    }
    (root / "scripts").mkdir()
    for name in STUB_SCRIPTS:
        (root / "scripts" / name).write_text(f"#!/usr/bin/env bash\n{bodies[name]}\n")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    tools = {"python": "exit 0", "ruff": f"exit {lint_rc}", "mypy": "exit 0", "lint-imports": "exit 0"}
    tools |= {"chromium": "exit 0", "promtool": "exit 0", "prometheus": "exit 0"}
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"\n')
    return root


def _ci(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{root / '.venv' / 'bin'}:{os.environ['PATH']}", "TMPDIR": str(root)}
    return subprocess.run(["bash", str(root / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    ("docker_rc", "docker_wait_s", "tests_rc", "lint_rc", "ok"),
    [
        (0, 20, 0, 0, True),
        (1, 0, 0, 0, False),  # the docker step failed before the tests ended
        (1, 20, 0, 0, False),  # ... or after they started
        (0, 20, 1, 0, False),  # the tests failed while the docker step still ran
        (0, 1, 0, 1, False),  # lint failed: no tests, the docker step still waited for
    ],
    ids=["all-pass", "docker-fails-early", "docker-fails-late", "tests-fail", "lint-fails"],
)
def test_ci_fails_when_any_step_fails_and_always_waits_for_the_docker_step(
    tmp_path: Path, docker_rc: int, docker_wait_s: float, tests_rc: int, lint_rc: int, ok: bool
) -> None:
    root = _sandbox(tmp_path, docker_rc=docker_rc, docker_wait_s=docker_wait_s, tests_rc=tests_rc, lint_rc=lint_rc)
    p = _ci(root)
    assert (p.returncode == 0) is ok, p.stdout + p.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    # the docker step ran and was waited for, whatever failed; PostgreSQL stopped last
    assert "docker: started" in calls and f"docker: ended {docker_rc}" in calls
    assert calls[-1] == "postgres: stop /pg"
    if docker_wait_s and lint_rc == 0:  # it ran beside the tests: they started before it ended
        assert calls.index("tests: -q -p no:cacheprovider --durations=25") < calls.index(f"docker: ended {docker_rc}")
    assert "docker says hello" in p.stdout
    assert list(root.glob("evalkit-docker-ci.*")) == []  # its output shown, then removed
    assert f"[ci] docker: cpu image built and run, compose cpu profile done (exit {docker_rc})" in p.stdout
