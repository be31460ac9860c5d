"""Multi-GPU and multi-node launches without GPUs: the argv and environment evalkit builds for TP=N, DP=N + EP,
TP x DP, node 0 of a multi-node deployment and Ray; CUDA_VISIBLE_DEVICES counts; one-line refusals; NVLink
multicast off; the TP-vs-DP+EP sweep example's plan; and vLLM's own parser accepting all of it (and the commands
in docs/scale-out.md) where the CPU build of vLLM is installed.

Here: those of its tests that run in-process; the others are in tests/integration/test_server_parallel.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config import load_config
from evalkit.config.server_config import layout_warnings, local_gpus
from evalkit.errors import ConfigError
from evalkit.sweep import load_spec
from tests.integration.test_server_parallel import EIGHT, LAYOUTS, MODEL, cfg  # noqa: F401 (helpers and fixtures shared with that file)


def test_tp8_and_dp8_use_the_same_gpus_tp2_dp4_too() -> None:
    assert {local_gpus(cfg(**LAYOUTS[n][0])) for n in ("tp8", "dp8-ep", "tp2-dp4-ep", "node0-dp16")} == {8}
    assert local_gpus(cfg(**LAYOUTS["nnodes-tp8-pp2"][0])) == 8  # 16 GPUs over 2 nodes
    assert local_gpus(cfg(**LAYOUTS["ray-dp16"][0])) is None  # Ray places the ranks


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"extra_args": ["--headless"]}, "--headless starts a vLLM node without an API server"),
        ({"extra_args": ["--api-server-count=0"]}, "--api-server-count 0 starts a vLLM node without an API"),
        ({"extra_args": ["-r", "1"]}, "--node-rank 1 (a worker node, run with --headless) starts"),
        ({"data_parallel_size": 4, "data_parallel_size_local": 8}, "data_parallel_size_local 8 exceeds"),
        ({"data_parallel_size": 16, "data_parallel_size_local": 8}, "set data_parallel_address"),
        ({"tensor_parallel_size": 8, "nnodes": 2}, "nnodes 2 needs master_addr"),
        ({"tensor_parallel_size": 3, "nnodes": 2, "master_addr": "h"}, "nnodes 2 must divide the world size"),
        ({"tensor_parallel_size": 8, "nnodes": 2, "master_addr": "h", "distributed_executor_backend": "ray"},
         "with Ray leave nnodes out"),
        ({"master_addr": "h"}, "only apply with nnodes > 1"),
        ({"tensor_parallel_size": 2, "extra_args": ["-tp=2"]}, "--tensor-parallel-size is given both"),
        ({"data_parallel_size": 2, "extra_args": ["-dp", "4"]}, "--data-parallel-size is given both"),
        ({"data_parallel_backend": "nccl"}, "Input should be 'mp' or 'ray'"),
    ],
)  # fmt: skip
def test_bad_layouts_are_refused_in_one_line(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"tasks": ["gsm8k"], "server": {"model": MODEL, **fields}})
    text = str(info.value)
    assert message in text and "\n" not in text and "Value error" not in text


def test_cli_wrong_gpu_count_is_one_line_exit_2() -> None:
    res = CliRunner().invoke(app, ["run", "gsm8k", "--serve", "m", "--tp", "2", "--dp", "4", "--gpus", "0,1"])
    assert res.exit_code == 2
    assert res.output.strip().count("\n") == 0 and "needs 8 on this node" in res.output


def test_expert_parallel_on_one_gpu_warns() -> None:
    assert layout_warnings(cfg(enable_expert_parallel=True))[0].startswith("enable_expert_parallel has no effect")
    assert layout_warnings(cfg(enable_expert_parallel=True, data_parallel_size=2)) == []


def test_sweep_refuses_a_config_whose_gpus_do_not_fit_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text('tasks: [gsm8k]\nserver: {model: m, gpus: "0,1,2,3"}\nconfigs: {tp8: {tensor_parallel_size: 8}}\n')
    res = CliRunner().invoke(app, ["sweep", str(path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and res.output.strip().count("\n") == 0
    assert f"sweep file {path}: configs.tp8: gpus '0,1,2,3' names 4 GPU(s) but tensor 8" in " ".join(res.output.split())
    assert not (tmp_path / "out").exists()


def test_sweep_refuses_a_headless_config(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("tasks: [gsm8k]\nserver: {model: m}\nconfigs: {n1: {extra_args: [--headless]}}\n")
    with pytest.raises(ConfigError, match=r"configs\.n1: .*--headless starts a vLLM node without an API server"):
        load_spec(path)
