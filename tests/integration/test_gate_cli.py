"""``evalkit gate`` (exit codes, outputs, the printed policy), the verdict section of the comparison report, and
the batch-invariant server option the gate notes.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_gate_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.server.vllm_process import VLLMServer
from tests.integration.test_server import fake_cfg
from tests.report_fixtures import build_gsm8k_run
from tests.unit.test_gate_cli import _edit_manifest, gate


@pytest.mark.slow
def test_batch_invariant_reaches_vllm_and_the_manifest(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    with VLLMServer(fake_cfg("--fake-record", str(record), batch_invariant=True), tmp_path / "run") as srv:
        prov = srv.provenance()
    assert json.loads(record.read_text())["env"]["VLLM_BATCH_INVARIANT"] == "1"
    assert prov["env_overrides"]["VLLM_BATCH_INVARIANT"] == "1"
    base = build_gsm8k_run(tmp_path / "base", n=100, seed=0)
    cand = build_gsm8k_run(tmp_path / "cand", n=100, seed=0)
    _edit_manifest(cand, lambda m: m["server"].update(env_overrides=prov["env_overrides"]))
    code, out = gate(base, cand)
    assert code in (0, 1)
    assert "VLLM_BATCH_INVARIANT (batch-invariant vLLM): baseline off, candidate on" in out
    assert "the runs differ in batch-invariant mode" in out
