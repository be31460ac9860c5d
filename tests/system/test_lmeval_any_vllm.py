"""``lm-eval:NAME`` tasks on the real vLLM (CPU build) with SmolLM2-135M, against ``lm_eval --model
local-completions`` (``tokenizer_backend=huggingface`` with the model's own tokenizer, both at concurrency 1) on the
same server: one generation, one multiple-choice and one loglikelihood_rolling task, written by the tests and passed
to both by ``--include-path`` (tests/lmeval_tasks.py). evalkit runs without ``--tokenizer`` (the server's
``/tokenize`` and ``/tokenizer_info``); every document's answers and scores and every aggregate metric and stderr
must equal lm-eval's, to the last digit.

The server is the session's shared vLLM (tests/conftest.py's ``smollm2_shared``: prefix caching off, so both
clients get bit-identical computations, and vLLM's tokenizer-info endpoint on).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalkit.server.vllm_process import VLLMServer
from tests.lmeval_tasks import PAGES, QA, write_tasks
from tests.vllm_env import MODEL_DIR, NAME, SHARED_MARKS

pytestmark = SHARED_MARKS
CONCURRENCY = 1  # every request alone in its batch: CPU rounding depends on the batch's shape
TASKS = ("tiny_gen", "tiny_mc", "tiny_roll")


@pytest.fixture
def live_server(smollm2_shared: VLLMServer) -> VLLMServer:
    """The session's shared vLLM."""
    return smollm2_shared


def _lm_eval(
    url: str, folder: Path, out: Path, tasks: tuple[str, ...] = TASKS, extra: str = ""
) -> tuple[dict[str, Any], dict[str, dict[int, dict[str, Any]]]]:
    """lm-eval's CLI on ``tasks``: its results and, per task, its logged samples by doc_id."""
    args = f"base_url={url}/completions,model={NAME},tokenizer_backend=huggingface,tokenizer={MODEL_DIR}{extra}"
    cmd = [sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args",
           f"{args},num_concurrent={CONCURRENCY}", "--tasks", ",".join(tasks), "--include_path", str(folder),
           "--log_samples", "--output_path", str(out)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "TQDM_DISABLE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    samples = {
        t: {s["doc_id"]: s for s in map(json.loads, next(out.rglob(f"samples_{t}_*.jsonl")).read_text().splitlines())}
        for t in tasks
    }
    return results, samples


def _evalkit(
    url: str, folder: Path, out: Path, tasks: tuple[str, ...] = TASKS, *extra: str
) -> tuple[dict[str, Any], dict[str, dict[int, list[dict[str, Any]]]]]:
    """evalkit's CLI on ``tasks`` (no --tokenizer): its summary and, per task, its records by doc_id."""
    cmd = [sys.executable, "-m", "evalkit.cli", "run", *(f"lm-eval:{t}" for t in tasks), "--include-path",
           str(folder), "--endpoint", url, "--concurrency", str(CONCURRENCY), "-o", str(out), "-q",
           "--no-report", *extra]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "prefill speed" in p.stdout and "no TTFT/TPOT" in p.stdout
    summary = json.loads((out / "summary.json").read_text())["tasks"]
    records: dict[str, dict[int, list[dict[str, Any]]]] = {t: {} for t in tasks}
    for line in (out / "samples.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        records[r["task"].removeprefix("lm-eval:")].setdefault(r["doc_id"], []).append(r)
    return summary, records


def test_three_request_types_equal_lm_eval_per_document(tmp_path: Path, live_server: VLLMServer) -> None:
    url = live_server.base_url + "/v1"
    folder = write_tasks(tmp_path / "tasks")
    t0 = time.monotonic()
    results, theirs = _lm_eval(url, folder, tmp_path / "lm-eval")
    lm_eval_s = time.monotonic() - t0
    t0 = time.monotonic()
    summary, ours = _evalkit(url, folder, tmp_path / "run")
    evalkit_s = time.monotonic() - t0

    gen = ours["tiny_gen"]
    assert sorted(gen) == sorted(theirs["tiny_gen"]) == list(range(len(QA)))
    for d, s in theirs["tiny_gen"].items():
        assert gen[d][0]["response"] == s["resps"][0][0], d
        assert gen[d][0]["correct"]["none"] == bool(s["exact_match"]), d
    assert any(gen[d][0]["response"].strip() for d in gen)  # the model really answered

    mc = ours["tiny_mc"]
    for d, s in theirs["tiny_mc"].items():
        by_idx = sorted(mc[d], key=lambda r: r["sample_index"])
        assert [r["extracted"]["loglikelihood"] for r in by_idx] == [x[0][0] for x in s["resps"]], d
        assert [r["extracted"]["is_greedy"] == "1" for r in by_idx] == [x[0][1] == "True" for x in s["resps"]], d

    roll = ours["tiny_roll"]
    assert sorted(roll) == list(range(len(PAGES)))
    for d, s in theirs["tiny_roll"].items():
        windows = sorted(roll[d], key=lambda r: r["sample_index"])
        assert sum(float(r["extracted"]["loglikelihood"]) for r in windows) == float(s["resps"][0][0]), d

    compared = _equal_aggregates(summary, results, TASKS)
    print(f"\n[lm-eval:NAME parity] lm-eval {lm_eval_s:.1f} s, evalkit {evalkit_s:.1f} s, equal: {compared}")


def _equal_aggregates(summary: dict[str, Any], results: dict[str, Any], tasks: tuple[str, ...]) -> dict[str, float]:
    """Every metric and stderr of lm-eval's results equal to evalkit's summary; the values compared."""
    compared = {}
    for task in tasks:
        mine = summary[f"lm-eval:{task}"]["metrics"]
        ref = results[task]
        names = [k for k in ref if "," in k and "_stderr," not in k]
        assert sorted(names) == sorted(mine), task
        for name in names:
            metric, filt = name.split(",")
            assert mine[name]["value"] == ref[name], (task, name)
            se = ref[f"{metric}_stderr,{filt}"]
            assert mine[name]["stderr"] == (None if se == "N/A" else se), (task, name)
            compared[f"{task} {name}"] = mine[name]["value"]
    return compared


def test_rolling_windows_and_truncation_at_a_short_max_length(tmp_path: Path, live_server: VLLMServer) -> None:
    """max_length 24: documents split into several rolling windows, multiple-choice contexts cut from the left."""
    url = live_server.base_url + "/v1"
    folder = write_tasks(tmp_path / "tasks")
    tasks = ("tiny_mc", "tiny_roll")
    results, theirs = _lm_eval(url, folder, tmp_path / "lm-eval", tasks, ",max_length=24")
    summary, ours = _evalkit(url, folder, tmp_path / "run", tasks, "--max-length", "24")
    assert sum(len(v) for v in ours["tiny_roll"].values()) > len(PAGES)  # several windows
    for d, s in theirs["tiny_roll"].items():
        windows = sorted(ours["tiny_roll"][d], key=lambda r: r["sample_index"])
        assert sum(float(r["extracted"]["loglikelihood"]) for r in windows) == float(s["resps"][0][0]), d
    for d, s in theirs["tiny_mc"].items():
        by_idx = sorted(ours["tiny_mc"][d], key=lambda r: r["sample_index"])
        assert [r["extracted"]["loglikelihood"] for r in by_idx] == [x[0][0] for x in s["resps"]], d
    print(f"\n[lm-eval:NAME parity, max_length 24] equal: {_equal_aggregates(summary, results, tasks)}")
