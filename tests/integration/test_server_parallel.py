"""Multi-GPU and multi-node launches without GPUs: the argv and environment evalkit builds for TP=N, DP=N + EP,
TP x DP, node 0 of a multi-node deployment and Ray; CUDA_VISIBLE_DEVICES counts; one-line refusals; NVLink
multicast off; the TP-vs-DP+EP sweep example's plan; and vLLM's own parser accepting all of it (and the commands
in docs/scale-out.md) where the CPU build of vLLM is installed."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import ValidationError

from evalkit.cli import app
from evalkit.config.server_config import ServerConfig
from evalkit.server.launch import MULTICAST_OFF, build_argv
from evalkit.server.vllm_process import VLLMServer
from evalkit.sweep import load_spec, plan

REPO = Path(__file__).resolve().parents[2]
FAKE = str(REPO / "evalkit" / "testing" / "fake_vllm_process.py")
EIGHT = "0,1,2,3,4,5,6,7"
MODEL = "deepseek-ai/DeepSeek-V3.2"


def cfg(**kw: Any) -> ServerConfig:
    return ServerConfig.model_validate({"model": MODEL, **kw})


def env_of(c: ServerConfig) -> dict[str, str]:
    return VLLMServer(c, "/nonexistent").env_overrides()


LAYOUTS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "tp8": ({"tensor_parallel_size": 8, "gpus": EIGHT}, ["--tensor-parallel-size", "8"]),
    "dp8-ep": (
        {"data_parallel_size": 8, "enable_expert_parallel": True, "gpus": EIGHT},
        ["--data-parallel-size", "8", "--enable-expert-parallel"],
    ),
    "tp2-dp4-ep": (
        {"tensor_parallel_size": 2, "data_parallel_size": 4, "enable_expert_parallel": True, "gpus": EIGHT},
        ["--tensor-parallel-size", "2", "--data-parallel-size", "4", "--enable-expert-parallel"],
    ),
    "node0-dp16": (
        {
            "tensor_parallel_size": 1,
            "data_parallel_size": 16,
            "data_parallel_size_local": 8,
            "data_parallel_address": "10.0.0.1",
            "data_parallel_rpc_port": 13345,
            "enable_expert_parallel": True,
            "api_server_count": 8,
            "gpus": EIGHT,
        },
        [
            "--tensor-parallel-size", "1", "--data-parallel-size", "16", "--data-parallel-size-local", "8",
            "--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "13345", "--api-server-count", "8",
            "--enable-expert-parallel",
        ],
    ),
    "ray-dp16": (
        {"data_parallel_size": 16, "data_parallel_size_local": 8, "data_parallel_backend": "ray"},
        ["--data-parallel-size", "16", "--data-parallel-size-local", "8", "--data-parallel-backend", "ray"],
    ),
    "nnodes-tp8-pp2": (
        {"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "nnodes": 2, "master_addr": "10.0.0.1",
         "gpus": EIGHT},
        ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--nnodes", "2", "--master-addr",
         "10.0.0.1"],
    ),
    "ray-executor-tp16": (
        {"tensor_parallel_size": 16, "distributed_executor_backend": "ray", "gpus": EIGHT},
        ["--tensor-parallel-size", "16", "--distributed-executor-backend", "ray"],
    ),
}  # fmt: skip


# ------------------------------------------------------------------------------------------ argv + env
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_argv_and_env(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in MULTICAST_OFF:
        monkeypatch.delenv(var, raising=False)
    fields, expected = LAYOUTS[name]
    c = cfg(**fields)
    argv = build_argv(c, 8000, launcher="serve")
    assert argv[1:7] == ["serve", MODEL, "--host", "127.0.0.1", "--port", "8000"]
    assert argv[7:] == expected
    env = env_of(c)
    assert {k: env[k] for k in MULTICAST_OFF} == MULTICAST_OFF  # every layout here spans several GPUs
    assert env.get("CUDA_VISIBLE_DEVICES") == fields.get("gpus")


@pytest.mark.parametrize(
    ("fields", "needed"),
    [
        ({"tensor_parallel_size": 4, "gpus": "4,5,6,7"}, None),
        ({"tensor_parallel_size": 2, "data_parallel_size": 2, "gpus": "GPU-aa,GPU-bb,GPU-cc,GPU-dd"}, None),
        ({"data_parallel_size": 2, "gpus": "6, 7"}, None),
        ({"tensor_parallel_size": 2, "gpus": "3"}, "names 1 GPU(s) but tensor 2 x pipeline 1 x local "
         "data-parallel ranks 1 needs 2 on this node"),
        ({"tensor_parallel_size": 2, "data_parallel_size": 4, "gpus": "0,1,2,3"}, "names 4 GPU(s) but tensor 2 "
         "x pipeline 1 x local data-parallel ranks 4 needs 8"),
        ({"data_parallel_size": 8, "gpus": EIGHT, "extra_args": ["-pcp", "2"]}, "x prefill context parallel 2"),
        ({"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "nnodes": 2, "master_addr": "h", "gpus": "0,1"},
         "data parallel 1 / nnodes 2 needs 8"),
        ({"gpus": "0,0"}, "names a GPU twice"),
        ({"gpus": "0;1"}, "is not a GPU index or UUID"),
    ],
)  # fmt: skip
def test_cuda_visible_devices_count(fields: dict[str, Any], needed: str | None) -> None:
    if needed is None:
        c = cfg(**fields)
        assert env_of(c)["CUDA_VISIBLE_DEVICES"] == fields["gpus"]
        return
    with pytest.raises(ValidationError, match=re.escape(needed)):
        cfg(**fields)


# ---------------------------------------------------------------------------------------- multicast env
def test_multicast_off_only_when_spanning_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in MULTICAST_OFF:
        monkeypatch.delenv(var, raising=False)
    assert not set(MULTICAST_OFF) & set(env_of(cfg(gpus="0")))
    assert not set(MULTICAST_OFF) & set(env_of(cfg()))
    assert env_of(cfg(gpus="0,1", data_parallel_size=2))["NCCL_NVLS_ENABLE"] == "0"
    assert env_of(cfg(tensor_parallel_size=2))["NVSHMEM_DISABLE_NVLS"] == "1"  # GPUs not named: still 2


def test_multicast_user_override_wins_and_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0")  # exported in evalkit's shell: kept
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    monkeypatch.delenv("NVSHMEM_DISABLE_NVLS", raising=False)
    srv = VLLMServer(cfg(tensor_parallel_size=8, env={"NCCL_NVLS_ENABLE": "1"}), "/nonexistent")
    recorded = srv.provenance()["env_overrides"]
    assert recorded["NCCL_NVLS_ENABLE"] == "1"
    assert recorded["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "0"
    assert recorded["NVSHMEM_DISABLE_NVLS"] == "1"


@pytest.mark.slow
def test_multicast_env_reaches_the_server_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in MULTICAST_OFF:
        monkeypatch.delenv(var, raising=False)
    record = tmp_path / "record.json"
    c = ServerConfig(
        model="fake-model",
        command=[sys.executable, FAKE],
        tensor_parallel_size=2,
        data_parallel_size=4,
        data_parallel_size_local=2,
        data_parallel_address="127.0.0.1",
        data_parallel_rpc_port=13345,
        enable_expert_parallel=True,
        gpus="4,5,6,7",
        extra_args=["--fake-record", str(record)],
        startup_timeout_s=30,
        stop_grace_s=5,
    )
    with VLLMServer(c, tmp_path / "run", poll_interval_s=0.05) as srv:
        prov = srv.provenance()
    seen = json.loads(record.read_text())
    assert {k: seen["env"][k] for k in MULTICAST_OFF} == MULTICAST_OFF
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert {k: prov["env_overrides"][k] for k in MULTICAST_OFF} == MULTICAST_OFF
    assert prov["argv"][prov["argv"].index("--data-parallel-size-local") + 1] == "2"


# ------------------------------------------------------------------------------------------------ sweep
def test_tp_vs_dp_ep_sweep_example_plans_three_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in MULTICAST_OFF:
        monkeypatch.delenv(var, raising=False)
    spec = load_spec(REPO / "examples" / "sweeps" / "tp-vs-dp-ep.yaml")
    combos = plan(spec)
    assert [c.name for c in combos] == [
        f"{cfg_name}__default__c{level}" for cfg_name in ("tp8", "dp8-ep", "tp2-dp4-ep") for level in (32, 128, 512)
    ]
    assert len({c.server_key() for c in combos}) == 3  # one server per layout
    by_config = {c.config: c.server for c in combos}
    for name in ("tp8", "dp8-ep", "tp2-dp4-ep"):  # the layouts tested above, argv and env included
        fields, expected = LAYOUTS[name]
        server = by_config[name]
        assert server is not None and server.model_dump(include=set(fields)) == fields
        argv = build_argv(server, 8000, launcher="serve")
        pairs = [expected[i : i + 2] for i in range(0, len(expected), 2) if expected[i] != "--enable-expert-parallel"]
        assert all(argv[argv.index(flag) + 1] == value for flag, value in pairs)
        assert ("--enable-expert-parallel" in argv) is ("--enable-expert-parallel" in expected)
        env = env_of(server)
        assert env["CUDA_VISIBLE_DEVICES"] == EIGHT and env["NCCL_NVLS_ENABLE"] == "0"
    assert all(c.settings["concurrency"] == c.concurrency for c in combos)


def doc_commands(program: str) -> list[list[str]]:
    """The ``program …`` commands of docs/scale-out.md's bash blocks, continuation lines joined."""
    text = (REPO / "docs" / "scale-out.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    commands = [shlex.split(line) for b in blocks for line in b.replace("\\\n", " ").splitlines() if line.strip()]
    return [c for c in commands if c and c[0] == program]


def test_docs_evalkit_commands_parse_and_validate() -> None:
    """Every ``evalkit run`` of docs/scale-out.md parses, and its server settings pass evalkit's checks."""
    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    commands = doc_commands("evalkit")
    assert len(commands) >= 4
    for command in commands:
        params = run.make_context("run", command[2:]).params
        if params["serve"] is None:
            continue
        keys = set(ServerConfig.model_fields) & set(params)
        server = {k: params[k] for k in keys if params[k] is not None} | {"model": params["serve"]}
        assert ServerConfig.model_validate(server).data_parallel_size in (None, 16)


@pytest.mark.slow
def test_start_warns_when_expert_parallel_cannot_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = ServerConfig(
        model="fake-model", command=[sys.executable, FAKE], enable_expert_parallel=True, startup_timeout_s=30
    )
    with VLLMServer(c, tmp_path, poll_interval_s=0.05):
        pass
    err = capsys.readouterr().err
    assert "evalkit: warning: enable_expert_parallel has no effect" in err and err.count("\n") == 1
