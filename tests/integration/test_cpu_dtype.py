"""The dtype the CPU build of vLLM runs fast: float32 on a CPU without AVX-512-BF16 or AMX (bf16 is emulated there:
an 841-token prefill took 20 s in bf16 against 3.5 s in float32 on an AVX2-only EPYC), the model's own (auto) where
bf16 runs in hardware; an explicit dtype wins; the server evalkit starts (``--serve``, ``make demo``, the real-vLLM
tests' config) gets it from that one function, says so and records it. The flags are injected: this machine may
have AMX.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_cpu_dtype.py."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from evalkit.config.server_config import ServerConfig
from evalkit.server import vllm_process
from evalkit.server.vllm_process import VLLMServer
from tests.unit.test_cpu_dtype import AVX2_EPYC

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "evalkit" / "testing" / "fake_vllm_process.py"


def test_the_server_evalkit_starts_gets_the_dtype_says_so_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--serve``, ``make demo`` (scripts/demo.sh runs ``evalkit run --serve`` without a dtype) and the real-vLLM
    tests (tests/vllm_env.py's config has none) all start vLLM through VLLMServer, which asks the one function."""
    from tests.vllm_env import smollm2_server

    assert smollm2_server().dtype is None and "--dtype" not in (REPO / "scripts" / "demo.sh").read_text()
    python = tmp_path / "python"  # stands in for the CPU build's interpreter: runs the fake vLLM on `-m MODULE ...`
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {FAKE} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(vllm_process, "cpu_flags", lambda: frozenset(AVX2_EPYC))
    monkeypatch.setattr(vllm_process, "is_cpu_build", lambda python: True)
    cfg = ServerConfig(model="fake-model", python=str(python), launcher="module", startup_timeout_s=30, stop_grace_s=5)
    with VLLMServer(cfg, tmp_path / "run") as server:
        prov = server.provenance()
    assert prov["argv"][prov["argv"].index("--dtype") + 1] == "float32"
    assert prov["dtype"] == "float32" and "avx512_bf16" in prov["dtype_choice"]
    assert "evalkit: CPU vLLM: --dtype float32" in capsys.readouterr().err
    assert os.path.exists(tmp_path / "run" / "server.log")
