"""Energy per output token from NVML's energy counters (nvmlDeviceGetTotalEnergyConsumption, millijoules), read
before and after the timed phase for the GPUs the measured server uses: checked with a fake ``pynvml`` module, and
absent (never zero) without one.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_energy.py."""

from __future__ import annotations

import json
import sys

import pytest

import evalkit
from evalkit.config.server_config import ServerConfig
from evalkit.server.gpu import energy_devices
from tests.unit.test_energy import FOUR, _counted, fake_nvml  # noqa: F401 (helpers and fixtures shared with that file)


@pytest.mark.parametrize(
    ("server", "environ", "devices"),
    [
        (ServerConfig(model="m", tensor_parallel_size=2, gpus="1,3"), {"CUDA_VISIBLE_DEVICES": "0"}, [1, 3]),
        (ServerConfig(model="m", data_parallel_size=2, env={"CUDA_VISIBLE_DEVICES": "0,2"}), {}, [0, 2]),
        (ServerConfig(model="m", tensor_parallel_size=2), {"CUDA_VISIBLE_DEVICES": "3,2,1"}, [2, 3]),  # the first 2
        (ServerConfig(model="m"), {}, [0]),  # one GPU: vLLM takes the first it sees
    ],
)
def test_a_started_server_counts_the_gpus_it_was_given(monkeypatch, server, environ, devices) -> None:
    energy = _counted(monkeypatch, energy_devices(server, environ))
    assert energy["devices"] == devices and energy["devices_from"] == "server"
    assert energy["joules"] == sum(100.0 * (i + 1) for i in devices)


@pytest.mark.parametrize("nvml", [True, False])
def test_a_run_gives_joules_per_output_token_and_watts_per_gpu_where_nvml_reads(monkeypatch, tmp_path, nvml) -> None:
    from evalkit.testing.server import Behaviour, TestServer

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # an endpoint: every GPU evalkit sees counts
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
    assert energy["devices"] == [0, 1] and energy["devices_from"] == "all"
    assert "per GPU · GPUs 0, 1 (all)" in html  # the report says which GPUs the energy counted


def test_a_run_against_an_endpoint_counts_the_gpus_in_its_cuda_visible_devices(monkeypatch, tmp_path) -> None:
    from evalkit.testing.server import Behaviour, TestServer

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: 3_000_000, 1: 1_000_000}))
    with TestServer(Behaviour(itl_s=0.001)) as srv:
        evalkit.run("gsm8k", endpoint=srv.url, limit=4, concurrency=2, output_dir=tmp_path, report=False)
    summary = json.loads((tmp_path / "summary.json").read_text())["tasks"]["gsm8k"]
    energy = summary["gpu"]["energy"]
    assert energy["devices"] == [1] and energy["devices_from"] == "CUDA_VISIBLE_DEVICES"
    assert energy["joules"] == 1000.0  # GPU 0's 3,000 J are another process's
    assert summary["speed"]["avg_power_w_per_gpu"] == pytest.approx(1000.0 / energy["seconds"])
