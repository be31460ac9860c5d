"""Where the real-vLLM tests find vLLM and the model, the marks that skip them when either is missing, the CPU
server configuration they start SmolLM2 with, and the one SmolLM2 server the tests that only need an endpoint share
(tests/conftest.py's session fixture ``smollm2_shared``; their marks are ``SHARED_MARKS``)."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import ServerConfig
from evalkit.server.process_group import group_alive
from evalkit.server.vllm_process import VLLMServer

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


# One rank's worker inside vLLM's engine-core process: two processes to start, not three (each imports vLLM and
# torch, ~10 s of one core here). vLLM's CPU platform takes the in-process executor only with V1 multiprocessing
# off, which leaves the API server and the engine core in processes of their own.
IN_PROCESS_WORKER_ARGS = ("--distributed-executor-backend", "uni")
IN_PROCESS_WORKER_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def in_process_worker_cli() -> list[str]:
    """``IN_PROCESS_WORKER_ARGS`` and ``IN_PROCESS_WORKER_ENV`` as options of ``evalkit run --serve``."""
    env = [x for key, value in IN_PROCESS_WORKER_ENV.items() for x in ("--server-env", f"{key}={value}")]
    return [*(f"--server-arg={arg}" for arg in IN_PROCESS_WORKER_ARGS), *env]


def smollm2_server(
    *, prefix_caching: bool = False, extra_args: Sequence[str] = (), in_process_worker: bool = True, **fields: Any
) -> ServerConfig:
    """The SmolLM2 CPU server the real-vLLM tests start: vLLM as ``python -m`` (the CPU build has no ``vllm``
    distribution for ``vllm serve``), eager, 2048-token context, 1 GiB of KV cache, offline, prefix caching off
    unless ``prefix_caching``, its one worker in the engine-core process unless ``in_process_worker`` is false
    (``IN_PROCESS_WORKER_ARGS``). ``extra_args`` are added to vLLM's arguments; ``fields`` set or replace any
    other :class:`ServerConfig` field (e.g. ``dtype``, ``launcher``)."""
    args = [
        *([] if prefix_caching else ["--no-enable-prefix-caching"]),
        *(IN_PROCESS_WORKER_ARGS if in_process_worker else ()),
        *extra_args,
    ]
    base: dict[str, Any] = {
        "model": str(MODEL_DIR),
        "served_model_name": NAME,
        "launcher": "module",
        "enforce_eager": True,
        "max_model_len": 2048,
        "env": {
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            **(IN_PROCESS_WORKER_ENV if in_process_worker else {}),
        },
        "startup_timeout_s": 600,
        "stop_grace_s": 30,
    }
    if args:
        base["extra_args"] = args
    return ServerConfig.model_validate({**base, **fields})


SHARED_GROUP = "smollm2-shared"
# the tests on the shared server: VLLM_MARKS, and one pytest-xdist worker for all of them (``--dist loadgroup``),
# so that a parallel run starts the shared server once
SHARED_MARKS = [*VLLM_MARKS, pytest.mark.xdist_group(SHARED_GROUP)]


def keep_xdist_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup``, gives each item marked ``xdist_group`` its group in its node id (``...@GROUP``),
    which pytest-xdist's scheduler keeps on one worker. pytest-xdist adds it itself by setting ``item._nodeid``,
    which pytest 9 no longer reads (its node id is ``item._id``): without this the groups are silently split."""
    if not config.getoption("loadgroup", False):
        return
    for item in items:
        names = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def shared_server_config() -> ServerConfig:
    """The server the endpoint-only tests share: :func:`smollm2_server`'s defaults (prefix caching off, so that
    lm-eval's and evalkit's identical prompts get bit-identical computations whichever runs first), with vLLM's
    tokenizer-info endpoint on (``lm-eval:NAME`` tasks without ``--tokenizer`` read it)."""
    return smollm2_server(extra_args=["--enable-tokenizer-info-endpoint"])


def shared_server(log_dir: Path) -> Iterator[VLLMServer]:
    """Starts the shared server with its log in ``log_dir``, yields it, stops it; checks its process group is
    gone."""
    with VLLMServer(shared_server_config(), log_dir) as srv:
        print(f"\n[shared vLLM] {srv.base_url}, log {srv.log_path}")
        yield srv
        pgid = srv.pid
    assert pgid is not None and not group_alive(pgid), f"the shared vLLM's process group {pgid} outlived it"


def served_dtype(srv: VLLMServer) -> str:
    """The dtype the running vLLM computes in (``bfloat16``, ``float32`` ...), as its engine config line in the
    server's log says (``dtype=torch.bfloat16``): what ``auto`` resolved to."""
    found = re.search(r"\bdtype=torch\.(\w+)", srv.log_path.read_text(errors="replace"))
    assert found is not None, f"no dtype=torch.* in {srv.log_path}"
    return found.group(1)


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
