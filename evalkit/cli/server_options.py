"""The ``evalkit run`` options that set a field of the vLLM server evalkit starts (``--serve``), one row each.

One table, read by the ``run`` command's signature (:func:`add_server_options`), by the mapping of its options
to run settings (:func:`server_fields`) and so by ``evalkit config show``. It is plain data, so that the command
starts without loading pydantic; ``tests/unit/test_server_options.py`` checks it against
:class:`evalkit.config.server_config.ServerConfig` (every field has a row or is listed in :data:`NOT_OPTIONS`, and each
row's type is its field's). Adding a server setting: the field in ``ServerConfig``, its flag in
``evalkit/server/launch.py`` (or ``config.server.flag_values``), and a row here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

PANEL = "server (with --serve)"


@dataclass(frozen=True)
class ServerOption:
    field: str  # ServerConfig's field
    type: type  # the option's value type (every option is optional: None when not given)
    flags: tuple[str, ...] = ()  # the flag spellings (default: --field-name)
    help: str | None = None
    param: str | None = None  # the command's parameter name, where it is not the field's

    @property
    def name(self) -> str:
        return self.param or self.field


SERVER_OPTIONS: tuple[ServerOption, ...] = (
    ServerOption("served_model_name", str),
    ServerOption("tensor_parallel_size", int, ("--tensor-parallel-size", "--tp")),
    ServerOption("data_parallel_size", int, ("--data-parallel-size", "--dp")),
    ServerOption("pipeline_parallel_size", int, ("--pipeline-parallel-size", "--pp")),
    ServerOption("enable_expert_parallel", bool, ("--enable-expert-parallel",)),
    ServerOption(
        "data_parallel_size_local",
        int,
        help="Data-parallel ranks on this node (the others on headless nodes, docs/scale-out.md).",
    ),
    ServerOption(
        "data_parallel_address", str, help="This node's address that the other nodes' data-parallel ranks reach."
    ),
    ServerOption("data_parallel_rpc_port", int, help="Data-parallel RPC port, the same on every node."),
    ServerOption(
        "data_parallel_backend", str, help="mp or ray (one launch starts the ranks of every node of a Ray cluster)."
    ),
    ServerOption("distributed_executor_backend", str, help="mp or ray (tensor/pipeline workers over a Ray cluster)."),
    ServerOption("api_server_count", int, help="API server processes on this node."),
    ServerOption("nnodes", int, help="Nodes of a multiprocessing multi-node deployment (evalkit starts node rank 0)."),
    ServerOption("master_addr", str, help="With --nnodes: this node's address that the other nodes reach."),
    ServerOption("master_port", int, help="With --nnodes: the torch.distributed port (vLLM default 29501)."),
    ServerOption("max_num_seqs", int),
    ServerOption("gpu_memory_utilization", float),
    ServerOption("max_model_len", int),
    ServerOption("dtype", str),
    ServerOption("tokenizer_mode", str),
    ServerOption("reasoning_parser", str),
    ServerOption("tool_call_parser", str),
    ServerOption(
        "enable_auto_tool_choice",
        bool,
        ("--enable-auto-tool-choice",),
        "Let the model call tools (tool-calls tasks need it; with --tool-call-parser).",
    ),
    ServerOption("enforce_eager", bool, ("--enforce-eager",)),
    ServerOption(
        "batch_invariant",
        bool,
        ("--batch-invariant",),
        "VLLM_BATCH_INVARIANT=1: answers independent of batching (for gate runs).",
    ),
    ServerOption(
        "cpu_threads_bind",
        str,
        help="CPU vLLM: VLLM_CPU_OMP_THREADS_BIND, e.g. '0|1|0' (one CPU list per rank) or 'spread' (this "
        "process's CPUs shared over the ranks).",
    ),
    ServerOption("gpus", str, help="CUDA_VISIBLE_DEVICES for the server, e.g. 0,1."),
    ServerOption("port", int, help="Server port (default: a free one)."),
    ServerOption(
        "launcher", str, help="auto, serve (vllm serve) or module (python -m vllm.entrypoints.openai.api_server)."
    ),
    ServerOption(
        "startup_timeout_s", float, help="Seconds to wait for the server to become ready.", param="startup_timeout"
    ),
)
"""In the order ``evalkit run --help`` lists them (after ``--serve``, before ``--server-arg`` / ``--server-env``)."""

NOT_OPTIONS: dict[str, str] = {
    "model": "--serve MODEL",
    "extra_args": "--server-arg (repeatable), parsed by the run command",
    "env": "--server-env KEY=VALUE (repeatable), parsed by the run command",
    "host": "the server listens on loopback; a config file's server: section may set it",
    "command": "a config file's server: section (a list)",
    "python": "a config file's server: section",
    "stop_grace_s": "a config file's server: section",
    "api_key": "EVALKIT_API_KEY / --api-key-file, never a flag",
}
"""ServerConfig's fields that are no row of :data:`SERVER_OPTIONS`, and where they are set instead."""


def insert_parameters(func: Callable[..., Any], after: str, added: list[tuple[str, Any, Any]]) -> Callable[..., Any]:
    """Give ``func`` (a command that takes ``**kwargs``) the keyword parameters ``added`` (name, annotation,
    default), placed after its parameter ``after``, as Typer reads a signature; their values come in the
    ``**kwargs``, which the signature Typer reads no longer lists."""
    sig = inspect.signature(func, eval_str=True)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    cut = [p.name for p in own].index(after) + 1
    new = [inspect.Parameter(name, own[cut - 1].kind, default=d, annotation=a) for name, a, d in added]
    params = [*own[:cut], *new, *own[cut:]]
    func.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    func.__annotations__ = {p.name: p.annotation for p in params}
    return func


def add_server_options(after: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give the decorated command (which takes ``**server_options``) one keyword parameter per row of
    :data:`SERVER_OPTIONS`, placed after its parameter ``after``, as Typer reads a signature."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        added = [
            (opt.name, Annotated[opt.type | None, typer.Option(*opt.flags, help=opt.help, rich_help_panel=PANEL)], None)
            for opt in SERVER_OPTIONS
        ]
        return insert_parameters(func, after, added)

    return decorate


def server_fields(take: Callable[[str], Any]) -> dict[str, Any]:
    """The server options' values (None: not given) by ServerConfig field, each taken once by ``take``."""
    return {opt.field: take(opt.name) for opt in SERVER_OPTIONS}
