"""The server a run starts, as configuration: :class:`ServerConfig` (how to launch vLLM) and the checks of how
one launch spreads over GPUs and nodes, done when the config is validated, before anything starts.

evalkit starts the node of a deployment that has the API server: one node, or node 0 of a multi-node one (its
data-parallel ranks elsewhere run on headless nodes started with ``vllm serve --headless``, see
docs/scale-out.md). This module works out how many GPUs that node needs (``tensor x pipeline x local
data-parallel ranks``) and refuses layouts vLLM would refuse later (or that would leave evalkit waiting for an
API server that never comes) with one-line errors. Launching and running the server is :mod:`evalkit.server`'s.

    >>> cfg = ServerConfig(model="m", tensor_parallel_size=2, data_parallel_size=4, gpus="0,1,2,3,4,5,6,7")
    >>> local_gpus(cfg), spans_gpus(cfg)
    (8, True)
"""

from __future__ import annotations

from math import prod
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

# flags evalkit sets itself; giving them in extra_args would contradict what evalkit polls and records
MANAGED_FLAGS = {"--model", "--host", "--port"}
# vLLM's short spellings of the flags evalkit knows (vllm serve --help=ParallelConfig, --help=Frontend)
ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dpl": "--data-parallel-size-local",
    "-dpa": "--data-parallel-address",
    "-dpp": "--data-parallel-rpc-port",
    "-dpb": "--data-parallel-backend",
    "-dpr": "--data-parallel-start-rank",
    "-ep": "--enable-expert-parallel",
    "-n": "--nnodes",
    "-r": "--node-rank",
    "-asc": "--api-server-count",
    "-pcp": "--prefill-context-parallel-size",
}
HEADLESS = (
    "{what} starts a vLLM node without an API server, which evalkit cannot evaluate; start that node yourself "
    "(vllm serve ... --headless, see docs/scale-out.md) and let evalkit start the node with the API server"
)


class ServerConfig(BaseModel):
    """How to launch vLLM. Unknown keys are rejected. Only the fields that are set become CLI flags.

    >>> ServerConfig(model="deepseek-ai/DeepSeek-V3.2", tensor_parallel_size=2, data_parallel_size=4,
    ...              enable_expert_parallel=True, env={"VLLM_USE_DEEP_GEMM": "0"}).data_parallel_size
    4
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(description="model path or Hugging Face id")
    served_model_name: str | None = Field(default=None, description="name clients use; default: `model`")
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    data_parallel_size: int | None = Field(default=None, ge=1)
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    enable_expert_parallel: bool = False
    data_parallel_size_local: int | None = Field(
        default=None, ge=0, description="data-parallel ranks on this node; the others run on headless nodes"
    )
    data_parallel_address: str | None = Field(
        default=None, description="this node's address that the data-parallel ranks on other nodes reach"
    )
    data_parallel_rpc_port: int | None = Field(default=None, ge=1, le=65535, description="the same on every node")
    data_parallel_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="ray: one launch starts the data-parallel ranks of every node of a Ray cluster"
    )
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="ray: tensor/pipeline-parallel workers placed over a Ray cluster"
    )
    api_server_count: int | None = Field(default=None, ge=1, description="API server processes on this node")
    nnodes: int | None = Field(default=None, ge=1, description="nodes of a multiprocessing multi-node deployment")
    master_addr: str | None = Field(default=None, description="with nnodes > 1: this node's address (node rank 0)")
    master_port: int | None = Field(default=None, ge=1, le=65535)
    max_num_seqs: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    dtype: str | None = None
    tokenizer_mode: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = Field(
        default=False,
        description="let the model choose to call tools (requests with tools need it); needs tool_call_parser",
    )
    enforce_eager: bool = False
    batch_invariant: bool = Field(
        default=False,
        description="vLLM's batch-invariant mode (env VLLM_BATCH_INVARIANT=1): the same answer "
        "for a request whatever else is in its batch",
    )
    cpu_threads_bind: str | None = Field(
        default=None,
        description="CPU build of vLLM: VLLM_CPU_OMP_THREADS_BIND, the CPUs of each rank ('0-3|4-7', one entry "
        "per local rank, order DP, PP, TP; 'nobind'; 'auto': vLLM's NUMA binding), or 'spread': the CPUs this "
        "process may use, spread over the local ranks (shared round-robin when ranks outnumber CPUs)",
    )
    extra_args: list[str] = Field(default_factory=list, description='free-form flags, e.g. "--kv-cache-dtype=fp8"')
    env: dict[str, str] = Field(default_factory=dict, description="extra environment, e.g. VLLM_USE_DEEP_GEMM=0")
    gpus: str | None = Field(default=None, description='CUDA_VISIBLE_DEVICES for the server, e.g. "0,1"')
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    launcher: Literal["auto", "serve", "module"] = Field(
        default="auto",
        description="serve: `vllm serve MODEL`; module: `python -m vllm.entrypoints.openai.api_server "
        "--model MODEL`; auto: serve when the `vllm` script and the `vllm` distribution exist (not with "
        "vllm-cpu)",
    )
    command: list[str] | None = Field(
        default=None,
        description="replaces the launcher prefix, for wrappers (e.g. ['uv', 'run', 'vllm', 'serve'])",
    )
    python: str | None = Field(default=None, description="interpreter for the module form; default: this one")
    startup_timeout_s: float = Field(default=1800, gt=0)
    stop_grace_s: float = Field(default=30, ge=0)
    api_key: SecretStr | None = Field(default=None, description="passed as env VLLM_API_KEY, never in argv")

    @model_validator(mode="after")
    def _check_extra_args(self) -> ServerConfig:
        first_class = {flag for flag, _ in flag_values(self)}
        for arg in self.extra_args:
            flag = long_flag(arg)
            if flag in MANAGED_FLAGS:
                raise ValueError(f"extra_args may not contain {flag}: evalkit sets it (use the {flag[2:]} field)")
            if flag == "--api-key":
                raise ValueError("extra_args may not contain --api-key: use api_key (kept out of argv and records)")
            if flag in first_class:
                raise ValueError(f"{flag} is given both as a field and in extra_args; give it once")
        if self.command is not None and not self.command:
            raise ValueError("command must not be empty")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError(
                "enable_auto_tool_choice needs tool_call_parser (vLLM refuses to start without it), e.g. hermes"
            )
        check_layout(self)
        check_cpu_threads_bind(self)
        return self

    @property
    def expected_model_name(self) -> str:
        """The id ``/v1/models`` will list."""
        return self.served_model_name or self.model


# ------------------------------------------------------------------------------------------------ flags
def flag_values(cfg: ServerConfig) -> list[tuple[str, str | None]]:
    """(flag, value) for each first-class field that is set; value None for boolean switches."""
    pairs: list[tuple[str, str | None]] = []
    for name in (
        "served_model_name",
        "tensor_parallel_size",
        "data_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size_local",
        "data_parallel_address",
        "data_parallel_rpc_port",
        "data_parallel_backend",
        "distributed_executor_backend",
        "api_server_count",
        "nnodes",
        "master_addr",
        "master_port",
        "max_num_seqs",
        "gpu_memory_utilization",
        "max_model_len",
        "dtype",
        "tokenizer_mode",
        "reasoning_parser",
        "tool_call_parser",
    ):
        value = getattr(cfg, name)
        if value is not None:
            pairs.append(("--" + name.replace("_", "-"), str(value)))
    for name in ("enable_expert_parallel", "enable_auto_tool_choice", "enforce_eager"):
        if getattr(cfg, name):
            pairs.append(("--" + name.replace("_", "-"), None))
    return pairs


def long_flag(arg: str) -> str:
    """The long name of the flag ``arg`` gives (``-tp=2`` -> ``--tensor-parallel-size``)."""
    flag = arg.split("=", 1)[0]
    return ALIASES.get(flag, flag)


def extra_value(args: list[str], flag: str) -> str | None:
    """The value free-form ``args`` give ``flag`` (``--f=v`` or ``--f v``, aliases included); "" for a bare
    switch; None when absent."""
    for i, arg in enumerate(args):
        if long_flag(arg) != flag:
            continue
        if "=" in arg:
            return arg.split("=", 1)[1]
        following = args[i + 1] if i + 1 < len(args) else ""
        return "" if following.startswith("-") else following
    return None


def gpu_list(gpus: str) -> list[str]:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value names (indices or ``GPU-``/``MIG-`` UUIDs); "" names none."""
    if not gpus.strip():
        return []
    items = [g.strip() for g in gpus.split(",")]
    for g in items:
        if not (g.isdigit() or g.startswith(("GPU-", "MIG-"))):
            raise ValueError(f"gpus {gpus!r}: {g!r} is not a GPU index or UUID; give e.g. '0,1,2,3'")
    if len(set(items)) < len(items):
        raise ValueError(f"gpus {gpus!r} names a GPU twice; give each GPU once")
    return items


def _int_extra(cfg: ServerConfig, flag: str) -> int:
    value = extra_value(cfg.extra_args, flag)
    return int(value) if value and value.isdigit() else 1


def replica_gpus(cfg: ServerConfig) -> int:
    """GPUs one data-parallel rank uses: tensor x pipeline (x prefill context parallel, from extra_args)."""
    sizes = (cfg.tensor_parallel_size, cfg.pipeline_parallel_size)
    return prod(s or 1 for s in sizes) * _int_extra(cfg, "--prefill-context-parallel-size")


def world_size(cfg: ServerConfig) -> int:
    """GPUs of the whole deployment, over all nodes."""
    return replica_gpus(cfg) * (cfg.data_parallel_size or 1)


def uses_ray(cfg: ServerConfig) -> bool:
    return "ray" in (cfg.distributed_executor_backend, cfg.data_parallel_backend)


def local_gpus(cfg: ServerConfig) -> int | None:
    """GPUs the node evalkit starts uses; None with Ray (Ray places the workers over its cluster)."""
    if uses_ray(cfg):
        return None
    if (cfg.nnodes or 1) > 1:
        return world_size(cfg) // (cfg.nnodes or 1)
    local = cfg.data_parallel_size_local
    return replica_gpus(cfg) * (local if local is not None else cfg.data_parallel_size or 1)


def spans_gpus(cfg: ServerConfig) -> bool:
    """Whether the server uses more than one GPU (so NCCL, symmetric memory and NVSHMEM come into play)."""
    return world_size(cfg) > 1 or (cfg.gpus is not None and len(gpu_list(cfg.gpus)) > 1)


# ----------------------------------------------------------------------------------------------- layout
def check_layout(cfg: ServerConfig) -> None:
    """Raise ValueError (one line, naming the fix) for a layout vLLM would refuse or evalkit cannot serve."""
    _check_node_role(cfg)
    dp, local = cfg.data_parallel_size or 1, cfg.data_parallel_size_local
    if local is not None and local > dp:
        raise ValueError(f"data_parallel_size_local {local} exceeds data_parallel_size {dp}; lower it")
    nnodes = cfg.nnodes or 1
    if nnodes > 1:
        _check_nnodes(cfg, nnodes)
    elif cfg.master_addr is not None or cfg.master_port is not None:
        raise ValueError("master_addr/master_port only apply with nnodes > 1 (multi-node tensor/pipeline parallel)")
    if local is not None and local < dp and cfg.data_parallel_address is None and not uses_ray(cfg) and nnodes == 1:
        raise ValueError(
            f"data_parallel_size_local {local} < data_parallel_size {dp} puts ranks on other nodes: set "
            "data_parallel_address to this node's address they reach (and data_parallel_rpc_port)"
        )
    _check_gpus(cfg)


def _check_node_role(cfg: ServerConfig) -> None:
    if extra_value(cfg.extra_args, "--headless") is not None:
        raise ValueError(HEADLESS.format(what="--headless"))
    if extra_value(cfg.extra_args, "--api-server-count") == "0":
        raise ValueError(HEADLESS.format(what="--api-server-count 0"))
    rank = extra_value(cfg.extra_args, "--node-rank")
    if rank not in (None, "0"):
        raise ValueError(HEADLESS.format(what=f"--node-rank {rank} (a worker node, run with --headless)"))


def _check_nnodes(cfg: ServerConfig, nnodes: int) -> None:
    if uses_ray(cfg):
        raise ValueError("nnodes > 1 is vLLM's multiprocessing multi-node mode; with Ray leave nnodes out")
    if world_size(cfg) % nnodes:
        raise ValueError(
            f"nnodes {nnodes} must divide the world size tensor x pipeline x data parallel = {world_size(cfg)}"
        )
    if cfg.master_addr is None:
        raise ValueError(f"nnodes {nnodes} needs master_addr: this node's address that the other nodes reach")


def _check_gpus(cfg: ServerConfig) -> None:
    if cfg.gpus is None:
        return
    named, needed = len(gpu_list(cfg.gpus)), local_gpus(cfg)
    if needed is None or named == needed:
        return
    sizes = f"tensor {cfg.tensor_parallel_size or 1} x pipeline {cfg.pipeline_parallel_size or 1}"
    if (cfg.nnodes or 1) > 1:
        sizes += f" x data parallel {cfg.data_parallel_size or 1} / nnodes {cfg.nnodes}"
    else:
        dp_local = cfg.data_parallel_size_local
        sizes += f" x local data-parallel ranks {dp_local if dp_local is not None else cfg.data_parallel_size or 1}"
    if (pcp := _int_extra(cfg, "--prefill-context-parallel-size")) > 1:
        sizes += f" x prefill context parallel {pcp}"
    raise ValueError(
        f"gpus {cfg.gpus!r} names {named} GPU(s) but {sizes} needs {needed} on this node; "
        "name that many GPUs or change the parallel sizes"
    )


def check_cpu_threads_bind(cfg: ServerConfig) -> None:
    """Raise ValueError (one line) when ``cpu_threads_bind`` is given twice or names CPUs for another number of
    local ranks than the layout has."""
    bind = cfg.cpu_threads_bind
    if bind is None:
        return
    if "VLLM_CPU_OMP_THREADS_BIND" in cfg.env:
        raise ValueError("VLLM_CPU_OMP_THREADS_BIND is given both in env and as cpu_threads_bind; give it once")
    if bind in ("spread", "auto", "nobind"):
        return
    entries, ranks = bind.split("|"), local_gpus(cfg)
    for entry in entries:
        if not entry or not all(part.replace("-", "", 1).isdigit() for part in entry.split(",")):
            raise ValueError(
                f"cpu_threads_bind {bind!r}: {entry!r} is not a CPU list; give e.g. '0-3|4-7' (one list per rank), "
                "'spread', 'auto' or 'nobind'"
            )
    if ranks is not None and len(entries) != ranks:
        raise ValueError(
            f"cpu_threads_bind {bind!r} names CPUs for {len(entries)} rank(s) but the layout has {ranks} on this "
            "node (data x pipeline x tensor parallel); give one CPU list per rank or 'spread'"
        )


def layout_warnings(cfg: ServerConfig) -> list[str]:
    """What vLLM accepts silently but does not do what the config seems to ask."""
    out = []
    if cfg.enable_expert_parallel and (cfg.tensor_parallel_size or 1) * (cfg.data_parallel_size or 1) == 1:
        out.append(
            "enable_expert_parallel has no effect with tensor_parallel_size x data_parallel_size = 1: experts are "
            "split over the TP x DP GPUs"
        )
    if extra_value(cfg.extra_args, "--data-parallel-start-rank") is not None:
        out.append(
            "--data-parallel-start-rank without --headless is vLLM's hybrid load balancing: this node's API server "
            "serves only its own data-parallel ranks, and evalkit measures only those"
        )
    return out
