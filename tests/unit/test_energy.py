"""Energy per output token from NVML's energy counters (nvmlDeviceGetTotalEnergyConsumption, millijoules), read
before and after the timed phase for the GPUs the measured server uses: checked with a fake ``pynvml`` module, and
absent (never zero) without one."""

from __future__ import annotations

import sys
import types

import pytest

from evalkit.server.gpu import EnergyDevices, GpuSampler, energy_devices


def fake_nvml(step_mj: dict[int, int], supported: set[int] | None = None) -> types.ModuleType:
    """A ``pynvml`` whose GPU i's counter starts at 10**9 mJ and rises by ``step_mj[i]`` at every read; GPU i's
    UUID is ``GPU-i000<i>-...`` (as bytes, as older bindings give it)."""
    counters = {i: 10**9 for i in step_mj}
    mod = types.ModuleType("pynvml")
    mod.nvmlInit = lambda: None  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: len(step_mj)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]

    def energy(handle: int) -> int:
        if supported is not None and handle not in supported:
            raise RuntimeError("NVMLError_NotSupported")
        counters[handle] += step_mj[handle]
        return counters[handle]

    mod.nvmlDeviceGetTotalEnergyConsumption = energy  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUUID = lambda h: f"GPU-i000{h}-5f2c-11ee-8c99-0242ac120002".encode()  # type: ignore[attr-defined]
    return mod


FOUR = {0: 100_000, 1: 200_000, 2: 300_000, 3: 400_000}  # mJ per read: 100, 200, 300, 400 J between two reads


def _counted(monkeypatch, devices: EnergyDevices) -> dict:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(FOUR))
    with GpuSampler(interval_s=60, devices=devices) as sampler:
        pass
    return sampler.summary().get("energy") or {}


@pytest.mark.parametrize(
    ("visible", "devices", "source"),
    [
        (None, [0, 1, 2, 3], "all"),
        ("2,0", [0, 2], "CUDA_VISIBLE_DEVICES"),
        ("GPU-i0001", [1], "CUDA_VISIBLE_DEVICES"),  # a UUID prefix, as CUDA takes it
        ("GPU-i0003-5f2c-11ee-8c99-0242ac120002,1", [1, 3], "CUDA_VISIBLE_DEVICES"),
        ("3,7,1", [3], "CUDA_VISIBLE_DEVICES"),  # CUDA ignores the first item it cannot map and every later one
        ("MIG-4b1a,2", [2], "CUDA_VISIBLE_DEVICES"),  # a MIG instance has no counter of its own
    ],
)
def test_against_an_endpoint_the_gpus_visible_to_evalkit_count(monkeypatch, visible, devices, source) -> None:
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    energy = _counted(monkeypatch, energy_devices(None, environ))
    assert energy["devices"] == devices and energy["devices_from"] == source
    assert [g["index"] for g in energy["gpus"]] == devices
    assert energy["joules"] == sum(100.0 * (i + 1) for i in devices)


def test_the_sampler_reports_each_gpus_joules_between_start_and_stop(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: 500_000, 1: 250_000, 2: 1}, supported={0, 1}))
    with GpuSampler(interval_s=60) as sampler:
        pass
    energy = sampler.summary()["energy"]
    assert energy["gpus"] == [{"index": 0, "joules": 500.0}, {"index": 1, "joules": 250.0}]  # GPU 2: no counter
    assert energy["joules"] == 750.0 and energy["seconds"] >= 0


def test_without_nvml_there_is_no_energy(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as where nvidia-ml-py is not installed
    with GpuSampler(interval_s=60) as sampler:
        pass
    assert "energy" not in sampler.summary()


def test_the_report_names_the_gpus_the_energy_counted() -> None:
    from evalkit.reporting.run_tables import energy_gpus_text

    assert energy_gpus_text({"joules": 1.0, "devices": [0], "devices_from": "server"}) == " · GPUs 0 (server)"
    assert energy_gpus_text({"joules": 1.0}) == ""  # a summary from before devices were recorded
