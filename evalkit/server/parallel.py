"""How one vLLM launch spreads over GPUs and nodes, checked before it starts.

evalkit starts the node of a deployment that has the API server: one node, or node 0 of a multi-node one (its
data-parallel ranks elsewhere run on headless nodes started with ``vllm serve --headless``, see
docs/scale-out.md). This module works out how many GPUs that node needs (``tensor x pipeline x local
data-parallel ranks``), refuses layouts vLLM would refuse later (or that would leave evalkit waiting for an API
server that never comes) with one-line errors, and gives the environment that keeps NVLink multicast off for a
server spanning several GPUs.

    >>> from evalkit.server.vllm_process import ServerConfig
    >>> cfg = ServerConfig(model="m", tensor_parallel_size=2, data_parallel_size=4, gpus="0,1,2,3,4,5,6,7")
    >>> local_gpus(cfg), multicast_env(cfg, {})["NCCL_NVLS_ENABLE"]
    (8, '0')
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evalkit.server.vllm_process import ServerConfig

# NVLink SHARP / multicast objects off in NCCL, torch symmetric memory and NVSHMEM (set unless the server's env
# or the inherited environment gives a value)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
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


def multicast_env(cfg: ServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """NVLink multicast off for a server spanning several GPUs: :data:`MULTICAST_OFF`, except a variable the
    server's ``env`` sets (that value wins, given by the caller) or the inherited ``environ`` sets (kept, and
    returned so the manifest records what the server got)."""
    if not spans_gpus(cfg):
        return {}
    return {k: environ.get(k, v) for k, v in MULTICAST_OFF.items() if k not in cfg.env}


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
