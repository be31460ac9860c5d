"""vLLM's own engine-config checks (``AsyncEngineArgs.create_engine_config``, the CPU build with SmolLM2) on the
argv evalkit builds for data-parallel and multi-node layouts: no server starts, nothing needs a GPU."""

from __future__ import annotations

from typing import Any

import pytest

from evalkit.config.server_config import ServerConfig, local_gpus, world_size
from evalkit.server.launch import build_argv
from tests.vllm_env import MODEL_DIR, VLLM_MARKS, serve_parser

pytestmark = VLLM_MARKS


@pytest.fixture(scope="module")
def vllm_parser() -> Any:
    return serve_parser()


ENGINE_LAYOUTS = {  # SmolLM2-135M: dense, 9 attention heads, 30 layers
    "node0-dp16": {"data_parallel_size": 16, "data_parallel_size_local": 8, "data_parallel_address": "10.0.0.1",
                   "data_parallel_rpc_port": 13345, "api_server_count": 8},
    "tp3-pp2-nnodes2": {"tensor_parallel_size": 3, "pipeline_parallel_size": 2, "nnodes": 2,
                        "master_addr": "10.0.0.1"},
    "tp3-dp4": {"tensor_parallel_size": 3, "data_parallel_size": 4},
}  # fmt: skip


@pytest.mark.parametrize("name", list(ENGINE_LAYOUTS))
def test_vllm_engine_config_accepts_the_layouts(vllm_parser: Any, name: str) -> None:
    """vLLM's own layout checks (arg_utils.create_engine_config) pass on the argv evalkit builds, and land on the
    world size and local ranks evalkit counted."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    c = ServerConfig.model_validate({"model": str(MODEL_DIR), **ENGINE_LAYOUTS[name]})
    ns = vllm_parser(build_argv(c, 8000, launcher="serve")[2:])
    ns.model = ns.model_tag
    pc = AsyncEngineArgs.from_cli_args(ns).create_engine_config().parallel_config
    assert pc.world_size * pc.data_parallel_size == world_size(c)
    assert pc.world_size * pc.data_parallel_size_local // pc.nnodes == local_gpus(c)


def test_vllm_refuses_expert_parallel_for_a_dense_model(vllm_parser: Any) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    c = ServerConfig(model=str(MODEL_DIR), data_parallel_size=2, enable_expert_parallel=True)
    ns = vllm_parser(build_argv(c, 8000, launcher="serve")[2:])
    ns.model = ns.model_tag
    with pytest.raises(Exception, match="Number of experts in the model must be greater than 0"):
        AsyncEngineArgs.from_cli_args(ns).create_engine_config()
