"""The numerics tasks on the real vLLM (CPU build, SmolLM2-135M): ``evalkit run numerics --limit 8`` stores in
``positions.bin`` exactly what a direct request with the same body gets back, the noise-floor pass matches the
main pass on one server, and ``numerics-chat`` scores the reply as written (``continue_final_message``).

The numerics run sends one request at a time, as the direct request is sent: on a CPU whose bf16 kernels depend on
the batch (Intel AMX), a text's logprobs in a batch differ from its logprobs alone by up to 0.05 (the noise floor
of a batched run read 0.026-0.042 mean |d-logprob| on 5 of 8 texts), so only a text computed alone can be
compared with a direct request, on every CPU.

Needs ``scripts/setup_vllm_cpu.sh`` (see tests/vllm_env.py); runs on the session's shared vLLM
(tests/conftest.py's ``smollm2_shared``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.server.vllm_process import VLLMServer
from evalkit.store.positions_file import read_positions
from tests.vllm_env import NAME, SHARED_MARKS

pytestmark = SHARED_MARKS


@pytest.fixture
def live_server(smollm2_shared: VLLMServer) -> VLLMServer:
    """The session's shared vLLM."""
    return smollm2_shared


def run(task: str, url: str, out: Path, limit: int, *extra: str) -> None:
    args = ["run", task, "--endpoint", url, "--limit", str(limit), "-o", str(out), "-q", "--no-report", *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr


def test_numerics_positions_match_a_direct_request(tmp_path: Path, live_server: VLLMServer) -> None:
    url = live_server.base_url + "/v1"
    out = tmp_path / "run"
    t0 = time.monotonic()
    run("numerics", url, out, 8, "--concurrency", "1")  # each text computed alone, as the direct request is
    print(f"\n[numerics] 8 texts + 8 noise-floor texts in {time.monotonic() - t0:.1f} s")
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    positions = read_positions(out, "numerics")
    assert len(recs) == len(positions) == 16 and all(r["status"] == "ok" for r in recs)
    first = next(r for r in recs if r["doc_id"] == 0 and r["sample_index"] == 0)
    p = positions[first["key"]]
    body: dict[str, Any] = {
        "model": NAME, "prompt": first["prompt"], "max_tokens": 64, "temperature": 0.0, "prompt_logprobs": 20,
        "stream": False, "return_token_ids": True, "echo": False,
    }  # fmt: skip
    choice = httpx.post(url + "/completions", json=body, timeout=300).json()["choices"][0]
    ids, raw = choice["prompt_token_ids"], choice["prompt_logprobs"]
    assert p.token_ids.tolist() == ids and p.k == 20 and p.n == first["figures"]["positions"] + 1
    assert p.continuation_ids.tolist() == choice["token_ids"]
    want = np.array([raw[i][str(ids[i])]["logprob"] for i in range(1, len(ids))], dtype=np.float32)
    assert np.allclose(p.token_logprobs[1:], want, atol=1e-4)
    top = [sorted((e["rank"], int(t)) for t, e in raw[i].items() if e["rank"] <= 20) for i in range(1, len(ids))]
    agree = np.mean([p.top_ids[i + 1, 0] == row[0][1] for i, row in enumerate(top)])
    assert agree > 0.99  # the same top-1 token at (nearly) every position
    assert "".join(p.tokens) == first["prompt"]  # the decoded tokens give the text back
    # the noise floor: the same server, the same texts again in reverse order, each alone: the same numbers
    by = {(q.doc_id, q.sample_index): q for q in positions.values()}
    diffs = [np.nanmean(np.abs(by[d, 0].token_logprobs - by[d, 1].token_logprobs)) for d in range(8)]
    print(f"[numerics] noise floor: mean abs d-logprob per text {[round(float(x), 5) for x in diffs]}")
    assert max(diffs) < 1e-4
    summary = json.loads((out / "summary.json").read_text())["tasks"]["numerics"]
    assert summary["metrics"]["mean_token_logprob"]["n"] == 8 and summary["speed"]["ttft_ms"]["mean"] is None


def test_numerics_chat_on_real_vllm(tmp_path: Path, live_server: VLLMServer) -> None:
    out = tmp_path / "chat"
    run("numerics-chat", live_server.base_url + "/v1", out, 2)
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    positions = read_positions(out, "numerics-chat")
    assert len(positions) == 4 and all(r["status"] == "ok" for r in recs)
    p = positions[recs[0]["key"]]
    assert p.n == recs[0]["prompt_tokens"] and p.tokens[-1].strip() in recs[0]["messages"][-1]["content"]
