"""CPU thread binding of multi-rank vLLM CPU servers: ``server.cpu_threads_bind`` becomes
VLLM_CPU_OMP_THREADS_BIND (given lists verbatim, "spread" derived from the CPUs evalkit may use), its one-line
refusals, its record in the manifest's server provenance and its arrival in the server process's environment.

Here: those of its tests that use the test server or a subprocess; the others are in
tests/unit/test_cpu_threads_bind.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evalkit.server.vllm_process import VLLMServer
from tests.unit.test_cpu_threads_bind import REPO, cfg

FAKE = str(REPO / "evalkit" / "testing" / "fake_vllm_process.py")


@pytest.mark.slow
def test_binding_reaches_the_server_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {2, 3, 4, 5})
    record = tmp_path / "record.json"
    c = cfg(
        command=[sys.executable, FAKE],
        data_parallel_size=2,
        cpu_threads_bind="spread",
        extra_args=["--fake-record", str(record)],
        startup_timeout_s=30,
        stop_grace_s=5,
    )
    with VLLMServer(c, tmp_path / "run", poll_interval_s=0.05) as srv:
        prov = srv.provenance()
    assert json.loads(record.read_text())["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "2-3|4-5"
    assert prov["env_overrides"]["VLLM_CPU_OMP_THREADS_BIND"] == "2-3|4-5"
