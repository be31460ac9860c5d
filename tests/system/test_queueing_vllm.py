"""A queueing real vLLM (CPU build, SmolLM2-135M, ``--max-num-seqs 2``): 8 requests at once wait their turn past
``--idle-timeout``, and none is abandoned and re-sent; the TTFT of the last ones includes their wait in the queue.

The requests are a ``random`` workload (answers forced to 64 tokens), so each pair's service is the same and the
last pair waits three of them; the run's default warm-up goes first, as in any run: without it, the first
batches of new shapes stalled a CI machine's vLLM for ~8 s while tokens flowed, past the 2 s idle timeout (a
stall after tokens began is rightly re-sent), and the test failed on that instead of on queueing.

Needs ``scripts/setup_vllm_cpu.sh`` (see tests/vllm_env.py); one vLLM start (~45-60 s on 2 cores)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.server.vllm_process import VLLMServer
from tests.vllm_env import VLLM_MARKS, smollm2_server

pytestmark = VLLM_MARKS
IDLE_S = 2.0
N = 8


def test_requests_queued_in_vllm_are_waited_for(tmp_path: Path) -> None:
    cfg = smollm2_server(extra_args=["--max-num-seqs", "2"], dtype="float32")
    with VLLMServer(cfg, tmp_path / "server") as srv:
        out = tmp_path / "run"
        args = ["run", "random", "--endpoint", srv.base_url + "/v1", "--num-prompts", str(N), "--concurrency", str(N)]
        args += ["--random-input-len", "32", "--random-output-len", "64", "--idle-timeout", str(IDLE_S)]
        t0 = time.monotonic()
        res = CliRunner().invoke(app, [*args, "-o", str(out), "-q", "--no-report"])
        wall = time.monotonic() - t0
    assert res.exit_code == 0, res.stderr
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == N and all(r["status"] != "api_error" for r in recs)
    ttfts = sorted(r["ttft_ms"] / 1000 for r in recs)
    service = sorted((r["e2e_ms"] - r["ttft_ms"]) / 1000 for r in recs)
    print(f"\n[queueing] {N} requests in {wall:.1f} s; TTFT {ttfts}; generation {service}")
    assert [r["attempts"] for r in recs] == [1] * N  # no request abandoned and re-sent
    assert ttfts[-1] > IDLE_S  # the last ones waited past the idle timeout: the case was exercised
    assert ttfts[-1] >= 2 * service[N // 2]  # ... and their TTFT holds their wait behind the requests before them
