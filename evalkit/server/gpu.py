"""What GPUs the machine has, and how much of their memory a run used (via ``nvidia-smi``).

Both functions are harmless on machines without NVIDIA GPUs: :func:`gpu_info` returns None and
:class:`GpuSampler` records nothing.

    >>> info = gpu_info()   # [{"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771, ...}] or None
    >>> with GpuSampler(interval_s=1.0) as sampler:
    ...     pass            # run the benchmark here
    >>> sampler.summary()["available"] in (True, False)
    True
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from evalkit.server.periodic import PeriodicSampler

QUERY = "index,name,memory.total,memory.used,driver_version"


def _nvidia_smi(query: str, timeout: float) -> list[list[str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        res = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return [[c.strip() for c in line.split(",")] for line in res.stdout.splitlines() if line.strip()]


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def gpu_info(timeout: float = 10.0) -> list[dict[str, Any]] | None:
    """One dict per GPU (``index``, ``name``, ``memory_total_mib``, ``memory_used_mib``, ``driver_version``);
    None when ``nvidia-smi`` is absent or fails. Lists every GPU of the machine, whatever
    ``CUDA_VISIBLE_DEVICES`` says."""
    rows = _nvidia_smi(QUERY, timeout)
    if rows is None:
        return None
    out = []
    for row in rows:
        if len(row) < 5:
            continue
        index, name, total, used, driver = row[:5]
        out.append(
            {
                "index": int(index) if index.isdigit() else index,
                "name": name,
                "memory_total_mib": _num(total),
                "memory_used_mib": _num(used),
                "driver_version": driver,
            }
        )
    return out


class GpuSampler(PeriodicSampler):
    """Background thread sampling ``memory.used`` of each GPU every ``interval_s`` seconds.

    :meth:`summary` gives peak and mean MiB per GPU. Without ``nvidia-smi`` it does nothing and reports
    ``{"available": False}``.
    """

    thread_name = "evalkit-gpu-sampler"

    def __init__(self, interval_s: float = 1.0, timeout: float = 10.0):
        super().__init__(interval_s, timeout)
        self.available = shutil.which("nvidia-smi") is not None
        self._used: dict[str, list[float]] = {}

    @property
    def enabled(self) -> bool:
        return self.available

    def sample_once(self) -> None:
        rows = _nvidia_smi("index,memory.used", self.timeout)
        if not rows:
            return
        with self._lock:
            for row in rows:
                if len(row) >= 2 and (mib := _num(row[1])) is not None:
                    self._used.setdefault(row[0], []).append(mib)

    def summary(self) -> dict[str, Any]:
        """``{"available": True, "interval_s": s, "gpus": [{"index", "peak_mib", "mean_mib", "samples"}]}``,
        or ``{"available": False}`` without nvidia-smi."""
        with self._lock:
            gpus = [
                {
                    "index": int(idx) if idx.isdigit() else idx,
                    "peak_mib": max(vals),
                    "mean_mib": sum(vals) / len(vals),
                    "samples": len(vals),
                }
                for idx, vals in sorted(self._used.items(), key=lambda kv: (len(kv[0]), kv[0]))
                if vals
            ]
        if not self.available:
            return {"available": False}
        return {"available": True, "interval_s": self.interval_s, "gpus": gpus}
