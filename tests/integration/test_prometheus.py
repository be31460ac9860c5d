"""Prometheus against the test server: evalkit.server.metrics scrapes a live /metrics endpoint over HTTP (the
parsing itself: tests/unit/test_prometheus.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from evalkit.config import ServerConfig
from evalkit.server.metrics import MetricsSampler, parse_text, scrape
from evalkit.server.vllm_process import VLLMServer
from tests.unit.test_prometheus import DATA, MODEL

FAKE = str(Path(__file__).parents[2] / "evalkit" / "testing" / "fake_vllm_process.py")


# ------------------------------------------------------------------------------------- scrape and sample
def fake_server(tmp_path: Path, *flags: str) -> VLLMServer:
    cfg = ServerConfig(model=MODEL, command=[sys.executable, FAKE], extra_args=list(flags), stop_grace_s=5)
    return VLLMServer(cfg, tmp_path, poll_interval_s=0.05)


def test_scrape_real_file_over_http(tmp_path: Path) -> None:
    path = DATA / "vllm_metrics_0.32_round2.txt"
    with fake_server(tmp_path, "--fake-metrics", str(path)) as srv:
        snap = scrape(srv.base_url)
    assert snap is not None
    assert snap.samples == parse_text(path.read_text()).samples


def test_scrape_missing_metrics_endpoint(tmp_path: Path) -> None:
    with fake_server(tmp_path, "--fake-no-metrics") as srv:
        assert scrape(srv.base_url) is None  # 404
        with MetricsSampler(srv.base_url, interval_s=0.02) as sampler:
            time.sleep(0.1)
    assert scrape("http://127.0.0.1:9", timeout=1) is None  # connection refused
    s = sampler.summary()
    assert s["samples"] == 0 and s["failed"] >= 1 and s["kv_cache_usage_peak"] is None


def test_metrics_sampler_keeps_peaks(tmp_path: Path) -> None:
    with fake_server(tmp_path) as srv:  # the fake's KV gauge rises 0.1 per scrape; running = scrapes % 4
        with MetricsSampler(srv.base_url, interval_s=0.01, model_name=MODEL) as sampler:
            deadline = time.monotonic() + 10
            while sampler.summary()["samples"] < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
        s = sampler.summary()
    assert s["samples"] >= 5 and s["failed"] == 0
    assert s["kv_cache_usage_peak"] == pytest.approx(min(1.0, s["samples"] / 10))
    assert s["num_requests_running_peak"] == 3 and s["num_requests_waiting_peak"] == 0
