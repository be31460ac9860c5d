"""What served a run: every run (``--endpoint`` as ``--serve``) records what its server says of itself in the
manifest's ``server`` (version from ``/version``; KV cache capacity and settings from ``/metrics``'
``vllm:cache_config_info``; ``max_model_len`` from ``/v1/models``), the report shows it beside the client's package
versions, and the gate and the comparison page note servers that differ (here two test servers whose KV caches
are 65,536 and 16,384 tokens)."""

from __future__ import annotations

import re
from pathlib import Path

from evalkit.config import load_config
from evalkit.gating.gate_runs import run_gate
from evalkit.reporting import render_compare_html
from evalkit.runner import Runner
from evalkit.server.self_report import SERVER_KEYS
from evalkit.store import open_run
from evalkit.testing.server import Behaviour, TestServer


def run(srv: TestServer, out: Path) -> Path:
    Runner(load_config({"tasks": ["gsm8k"], "endpoint": srv.url, "output_dir": str(out), "limit": 20})).run()
    return out


def text(html: str) -> str:
    html = re.sub(r"<(script|style).*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_manifest_report_gate_and_comparison_say_what_served_each_run(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_num_seqs=16)) as big, TestServer(Behaviour(max_num_seqs=4)) as small:
        base = run(big, tmp_path / "base")
        same = run(big, tmp_path / "same")
        cand = run(small, tmp_path / "cand")
    server = open_run(base).manifest["server"]
    assert list(server) == list(SERVER_KEYS)  # an endpoint run: what the server said, nothing evalkit started
    assert server["version"] == "evalkit-test" and server["max_model_len"] == 4096
    assert (server["kv_cache_tokens"], server["kv_cache_blocks"], server["block_size"]) == (65536, 4096, 16)
    assert server["prefix_caching"] is True and server["gpu_memory_utilization"] == 0.92
    assert open_run(cand).manifest["server"]["kv_cache_tokens"] == 16384

    shown = text((base / "report.html").read_text())
    assert "Server version evalkit-test" in shown
    assert "Server KV cache 65,536 tokens (4,096 blocks x 16); gpu_memory_utilization 0.92; prefix caching on" in shown
    assert "vllm (client) " in shown and "Server not launched by evalkit" in shown

    differ = "the servers differ (baseline vs candidate): KV cache 65,536 vs 16,384 tokens (75% smaller)"
    gate = run_gate(base, cand, out_dir=tmp_path / "gate")
    assert any(n.startswith(differ) for n in gate.result.notes)
    assert not any("servers differ" in n for n in run_gate(base, same, out_dir=tmp_path / "gate2").result.notes)
    page = text(render_compare_html([base, cand]))
    assert "the servers differ (base vs cand): KV cache 65,536 vs 16,384 tokens (75% smaller)" in page
