"""Energy per output token from NVML's energy counters (nvmlDeviceGetTotalEnergyConsumption, millijoules), read
before and after the timed phase: checked with a fake ``pynvml`` module, and absent (never zero) without one."""

from __future__ import annotations

import json
import sys
import types

import pytest

import evalkit
from evalkit.server.gpu import GpuSampler


def fake_nvml(step_mj: dict[int, int], supported: set[int] | None = None) -> types.ModuleType:
    """A ``pynvml`` whose GPU i's counter starts at 10**9 mJ and rises by ``step_mj[i]`` at every read."""
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
    return mod


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


@pytest.mark.parametrize("nvml", [True, False])
def test_a_run_gives_joules_per_output_token_and_watts_per_gpu_where_nvml_reads(monkeypatch, tmp_path, nvml) -> None:
    from evalkit.testing.server import Behaviour, TestServer

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: 3_000_000, 1: 1_000_000}) if nvml else None)
    with TestServer(Behaviour(itl_s=0.001)) as srv:
        result = evalkit.run("gsm8k", endpoint=srv.url, limit=8, concurrency=4, output_dir=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())["tasks"]["gsm8k"]
    speed = summary["speed"]
    html = (tmp_path / "report.html").read_text()
    assert ("Energy per output token" in html) == nvml
    if not nvml:
        assert "energy" not in summary["gpu"] and "joules_per_output_token" not in speed
        assert "avg_power_w_per_gpu" not in speed
        return
    energy = summary["gpu"]["energy"]
    assert energy["joules"] == 4000.0  # 3,000 J and 1,000 J between the reads before and after the timed phase
    tokens = sum(r.output_tokens or 0 for r in result.open().records())
    assert speed["joules_per_output_token"] == pytest.approx(4000.0 / tokens)
    assert speed["avg_power_w_per_gpu"] == pytest.approx(4000.0 / energy["seconds"] / 2)
