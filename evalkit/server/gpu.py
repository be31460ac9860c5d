"""What GPUs the machine has, how much of their memory a run used (via ``nvidia-smi``) and the energy they used
(NVML's energy counters through ``nvidia-ml-py``, where it is installed and a driver answers).

Both functions are harmless on machines without NVIDIA GPUs: :func:`gpu_info` returns None and
:class:`GpuSampler` records nothing (and no energy).

    >>> info = gpu_info()   # [{"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771, ...}] or None
    >>> with GpuSampler(interval_s=1.0) as sampler:
    ...     pass            # run the benchmark here
    >>> sampler.summary()["available"] in (True, False)
    True
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
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


def _nvml() -> Any | None:
    """NVML's bindings (``pynvml``, from ``nvidia-ml-py``), initialised; None where they are not installed or
    no NVIDIA driver answers."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]

        pynvml.nvmlInit()
    except Exception:  # ImportError, or NVMLError: no library, no driver, no GPU
        return None
    return pynvml


class EnergyMeter:
    """Each GPU's energy counter (NVML's ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver
    loaded: the counter ``vllm bench`` reads) at :meth:`start` and at :meth:`stop`. Every GPU NVML lists is read
    (as ``nvidia-smi`` lists every GPU of the machine); one without the counter is left out."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._start: dict[int, int] = {}
        self._end: dict[int, int] = {}
        self._t0 = self._t1 = 0.0

    def _read(self) -> dict[int, int]:
        nv, out = self._nvml, {}
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                out[i] = int(nv.nvmlDeviceGetTotalEnergyConsumption(nv.nvmlDeviceGetHandleByIndex(i)))
            except Exception:  # NVMLError_NotSupported (GPUs before Volta) or a GPU that went away
                continue
        return out

    def start(self) -> None:
        self._nvml = _nvml()
        if self._nvml is not None:
            self._start, self._t0 = self._read(), time.perf_counter()

    def stop(self) -> None:
        if self._nvml is None:
            return
        self._end, self._t1 = self._read(), time.perf_counter()
        with contextlib.suppress(Exception):  # shutting NVML down is a courtesy; a failure changes no reading
            self._nvml.nvmlShutdown()

    def summary(self) -> dict[str, Any] | None:
        """``{"seconds", "joules", "gpus": [{"index", "joules"}]}`` between start and stop; None where no GPU's
        counter could be read (never zeros)."""
        gpus = [
            {"index": i, "joules": (self._end[i] - self._start[i]) / 1000.0}
            for i in sorted(self._start)
            if i in self._end and self._end[i] >= self._start[i]
        ]
        if not gpus:
            return None
        return {"seconds": self._t1 - self._t0, "joules": sum(g["joules"] for g in gpus), "gpus": gpus}


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
        self._energy = EnergyMeter()

    def start(self) -> GpuSampler:
        self._energy.start()
        return super().start()

    def stop(self) -> None:
        super().stop()
        self._energy.stop()

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
        or ``{"available": False}`` without nvidia-smi; with ``"energy"`` (:meth:`EnergyMeter.summary`) where
        NVML's counters were read."""
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
        out: dict[str, Any] = (
            {"available": True, "interval_s": self.interval_s, "gpus": gpus} if self.available else {"available": False}
        )
        energy = self._energy.summary()
        if energy is not None:
            out["energy"] = energy
        return out
