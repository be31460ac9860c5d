"""What GPUs the machine has, how much of their memory a run used (via ``nvidia-smi``) and the energy the measured
server's GPUs used (NVML's energy counters through ``nvidia-ml-py``, the ``gpu`` extra, where it is installed and a
driver answers).

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalkit.config.server_config import ServerConfig, local_gpus
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


@dataclass(frozen=True)
class EnergyDevices:
    """The GPUs whose energy a run counts: those of ``visible`` (a ``CUDA_VISIBLE_DEVICES`` value: NVML indices or
    ``GPU-`` UUIDs, or their prefixes; None: every GPU NVML lists), the first ``first`` of them (None: all);
    ``source`` says whose they are (``server``: the devices of the server evalkit started; ``CUDA_VISIBLE_DEVICES``
    or ``all``: evalkit's own, against an endpoint)."""

    visible: str | None = None
    first: int | None = None
    source: str = "all"


def energy_devices(server: ServerConfig | None, environ: Mapping[str, str]) -> EnergyDevices:
    """The GPUs the measured server uses: for a server evalkit starts, its ``gpus`` (else its ``env``'s
    ``CUDA_VISIBLE_DEVICES``, else evalkit's) and of those the first tensor x pipeline x data parallel ones it
    takes (all of them with Ray); against an endpoint, those visible to evalkit (``environ``'s
    ``CUDA_VISIBLE_DEVICES``, else every GPU)."""
    if server is None:
        visible = environ.get("CUDA_VISIBLE_DEVICES")
        return EnergyDevices(visible, None, "all" if visible is None else "CUDA_VISIBLE_DEVICES")
    visible = server.gpus if server.gpus is not None else server.env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        visible = environ.get("CUDA_VISIBLE_DEVICES")
    return EnergyDevices(visible, local_gpus(server), "server")


def _uuid(nv: Any, index: int) -> str:
    uuid = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(index))
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def nvml_indices(nv: Any, devices: EnergyDevices) -> list[int]:
    """The NVML indices of ``devices`` as CUDA reads ``CUDA_VISIBLE_DEVICES``: each item an index (NVML's, which
    is CUDA's under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) or a unique ``GPU-`` UUID prefix; CUDA ignores the first item
    it cannot map and every later one, and so does this. A ``MIG-`` instance has no energy counter of its own: it
    is left out."""
    count = nv.nvmlDeviceGetCount()
    if devices.visible is None:
        chosen = list(range(count))
    else:
        chosen = []
        for item in (g.strip() for g in devices.visible.split(",")):
            if item.startswith("MIG-"):
                continue
            if item.isdigit():
                index = int(item) if int(item) < count else None
            else:
                found = [i for i in range(count) if item.startswith("GPU-") and _uuid(nv, i).startswith(item)]
                index = found[0] if len(found) == 1 else None
            if index is None or index in chosen:
                break
            chosen.append(index)
    return chosen if devices.first is None else chosen[: devices.first]


class EnergyMeter:
    """The energy counters (NVML's ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded:
    the counter ``vllm bench`` reads) of the GPUs ``devices`` names (:func:`energy_devices`; default every GPU
    NVML lists) at :meth:`start` and at :meth:`stop`; one without the counter is left out."""

    def __init__(self, devices: EnergyDevices | None = None) -> None:
        self.devices = devices or EnergyDevices()
        self._nvml: Any = None
        self._indices: list[int] = []
        self._start: dict[int, int] = {}
        self._end: dict[int, int] = {}
        self._t0 = self._t1 = 0.0

    def _read(self) -> dict[int, int]:
        nv, out = self._nvml, {}
        for i in self._indices:
            try:
                out[i] = int(nv.nvmlDeviceGetTotalEnergyConsumption(nv.nvmlDeviceGetHandleByIndex(i)))
            except Exception:  # NVMLError_NotSupported (GPUs before Volta) or a GPU that went away
                continue
        return out

    def start(self) -> None:
        self._nvml = _nvml()
        if self._nvml is None:
            return
        try:
            self._indices = nvml_indices(self._nvml, self.devices)
        except Exception:  # an NVMLError listing the GPUs: no reading
            self._indices = []
        self._start, self._t0 = self._read(), time.perf_counter()

    def stop(self) -> None:
        if self._nvml is None:
            return
        self._end, self._t1 = self._read(), time.perf_counter()
        with contextlib.suppress(Exception):  # shutting NVML down is a courtesy; a failure changes no reading
            self._nvml.nvmlShutdown()

    def summary(self) -> dict[str, Any] | None:
        """``{"seconds", "joules", "devices_from", "devices", "gpus": [{"index", "joules"}]}`` between start and
        stop: ``devices`` the NVML indices counted (``devices_from`` :attr:`EnergyDevices.source`), ``gpus`` those
        whose counter was read; None where none could be read (never zeros)."""
        gpus = [
            {"index": i, "joules": (self._end[i] - self._start[i]) / 1000.0}
            for i in sorted(self._start)
            if i in self._end and self._end[i] >= self._start[i]
        ]
        if not gpus:
            return None
        return {
            "seconds": self._t1 - self._t0,
            "joules": sum(g["joules"] for g in gpus),
            "devices_from": self.devices.source,
            "devices": sorted(self._indices),
            "gpus": gpus,
        }


class GpuSampler(PeriodicSampler):
    """Background thread sampling ``memory.used`` of each GPU every ``interval_s`` seconds.

    :meth:`summary` gives peak and mean MiB per GPU. Without ``nvidia-smi`` it does nothing and reports
    ``{"available": False}``. The energy of the GPUs ``devices`` names is read at start and stop (:class:`EnergyMeter`).
    """

    thread_name = "evalkit-gpu-sampler"

    def __init__(self, interval_s: float = 1.0, timeout: float = 10.0, devices: EnergyDevices | None = None):
        super().__init__(interval_s, timeout)
        self.available = shutil.which("nvidia-smi") is not None
        self._used: dict[str, list[float]] = {}
        self._energy = EnergyMeter(devices)

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
