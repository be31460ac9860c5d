"""``lm-eval:NAME --apply-chat-template`` on the real vLLM (CPU build) with SmolLM2-135M, against ``lm_eval --model
local-chat-completions --apply_chat_template --system_instruction`` on the same server, both at concurrency 1: a
two-shot generation task written by the test (tests/lmeval_tasks.py's ``tiny_chat``: few-shot examples as turns,
lm-eval's CLI default), each document's answer and score and the aggregate metric and stderr equal to lm-eval's.

The server is the session's shared vLLM (tests/conftest.py's ``smollm2_shared``, prefix caching off). Concurrency
1 puts every request alone in its batch: the CPU kernels' rounding depends on the batch's shape, so at concurrency 2
the clients' requests met different neighbours and a greedy answer once differed by a token ('1 + 1' against
'1 + 1 = ') in CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from evalkit.server.vllm_process import VLLMServer
from tests.lmeval_tasks import QA, write_tasks
from tests.system.test_lmeval_any_vllm import _equal_aggregates
from tests.vllm_env import NAME, SHARED_MARKS

pytestmark = SHARED_MARKS
CONCURRENCY = 1  # a batch of one per step: the same computation for both clients (see above)
SYSTEM = "You are a terse quiz bot."


def test_chat_template_answers_and_scores_equal_lm_eval_per_document(
    tmp_path: Path,
    smollm2_shared: VLLMServer,
) -> None:
    url = smollm2_shared.base_url + "/v1"
    folder = write_tasks(tmp_path / "tasks")
    args = f"base_url={url}/chat/completions,model={NAME},num_concurrent={CONCURRENCY}"
    cmd = [sys.executable, "-m", "lm_eval", "--model", "local-chat-completions", "--model_args", args, "--tasks",
           "tiny_chat", "--include_path", str(folder), "--apply_chat_template", "--system_instruction", SYSTEM,
           "--log_samples", "--output_path", str(tmp_path / "lm-eval")]  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "TQDM_DISABLE": "1"})
    lm_eval_s = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(next((tmp_path / "lm-eval").rglob("results_*.json")).read_text())["results"]
    samples = next((tmp_path / "lm-eval").rglob("samples_tiny_chat_*.jsonl")).read_text().splitlines()
    theirs = {s["doc_id"]: s for s in map(json.loads, samples)}

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evalkit.cli", "run", "lm-eval:tiny_chat", "--include-path", str(folder),
           "--endpoint", url, "--concurrency", str(CONCURRENCY), "--apply-chat-template", "--system-instruction",
           SYSTEM, "-o", str(out), "-q", "--no-report"]  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    evalkit_s = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())["tasks"]
    ours = {r["doc_id"]: r for r in map(orjson.loads, (out / "samples.jsonl").read_bytes().splitlines())}

    assert sorted(ours) == sorted(theirs) == list(range(len(QA)))
    for d, s in theirs.items():
        context = s["arguments"]["gen_args_0"]["arg_0"]  # lm-eval's JsonChatStr, logged as a 1-item list
        assert json.loads(context[0] if isinstance(context, list) else context) == ours[d]["messages"], d
        assert ours[d]["response"] == s["resps"][0][0], d
        assert ours[d]["correct"]["none"] == bool(s["exact_match"]), d
    assert any(ours[d]["response"].strip() for d in ours)  # the model really answered
    compared = _equal_aggregates(summary, results, ("tiny_chat",))
    print(f"\n[lm-eval:NAME chat parity] lm-eval {lm_eval_s:.1f} s, evalkit {evalkit_s:.1f} s, equal: {compared}")
