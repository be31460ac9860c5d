"""Workloads and probes against real vLLM (CPU build, SmolLM2-135M, prefix caching on; one server start for the
module): a ``random`` run's usage counts are the asked lengths, a ``trace`` replay's shared ``hash_ids`` are
prefix-cache hits in vLLM's ``/metrics``, and GSM8K probes inside a workload score as a plain GSM8K run of the same
documents does.

Needs ``scripts/setup_vllm_cpu.sh`` (see tests/vllm_env.py); one vLLM start (~45-60 s on 2 cores)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.server.vllm_process import VLLMServer
from tests.vllm_env import VLLM_MARKS, smollm2_server

pytestmark = [*VLLM_MARKS, pytest.mark.xdist_group("smollm2-prefix-caching")]  # one worker, one server start
HITS = re.compile(r"^vllm:prefix_cache_hits_total\{[^}]*\} ([0-9.e+]+)$", re.M)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    with VLLMServer(smollm2_server(prefix_caching=True), tmp_path_factory.mktemp("server")) as srv:
        yield srv


def _run(srv: VLLMServer, out: Path, *args: str) -> list[dict]:
    base = ["run", *args, "--endpoint", srv.base_url + "/v1", "-o", str(out), "-q", "--no-warmup", "--no-report"]
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 0, res.stderr
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def _prefix_hits(srv: VLLMServer) -> float:
    with urllib.request.urlopen(srv.base_url + "/metrics", timeout=30) as r:
        return sum(float(v) for v in HITS.findall(r.read().decode()))


def test_random_usage_matches_the_asked_lengths(server: VLLMServer, tmp_path: Path) -> None:
    recs = _run(server, tmp_path / "r", "random", "--random-input-len", "64", "--random-output-len", "16",
                "--random-range-ratio", "0.25", "--num-prompts", "12", "--seed", "5")  # fmt: skip
    assert len(recs) == 12 and all(r["status"] == "ok" for r in recs)
    for r in recs:
        assert 48 <= r["prompt_tokens"] <= 80 and 12 <= r["output_tokens"] <= 20
        assert int(r["prompt"].split()[0].strip("[")) == r["prompt_tokens"]  # the ids sent, as usage counts them
        assert r["error"] is None  # no note: the output is exactly the max_tokens asked (min_tokens = max_tokens)
    assert len({r["output_tokens"] for r in recs}) > 1  # the range ratio spread them


def test_trace_shared_hash_ids_are_prefix_cache_hits(server: VLLMServer, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    lines = [{"timestamp": 100 * i, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 100 + i]}
             for i in range(4)]  # fmt: skip
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    before = _prefix_hits(server)
    recs = _run(server, tmp_path / "t", "trace", "--dataset-path", str(trace), "--concurrency", "1")
    hits = _prefix_hits(server) - before
    assert [r["prompt_tokens"] for r in recs] == [1100] * 4
    # blocks 1 and 2 (1024 tokens) computed once, then found in the cache by the 3 requests after the first
    assert hits >= 3 * 1024 - 3 * 128, hits
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())["tasks"]["trace"]
    assert summary["server"]["prefix_cache"]["hits"] >= 3 * 1024 - 3 * 128


def test_gsm8k_probes_score_as_a_plain_gsm8k_run(server: VLLMServer, tmp_path: Path) -> None:
    # one request at a time in both runs: each answer computed alone, so that batching (which changes CPU vLLM's
    # numerics) does not make the same request's answer differ between the runs
    same = ("--num-fewshot", "0", "--max-tokens", "96", "--seed", "2", "--concurrency", "1")
    probed = _run(server, tmp_path / "p", "random", "--random-input-len", "32", "--random-output-len", "8",
                  "--num-prompts", "9", "--probe", "gsm8k:0.25", *same)  # fmt: skip
    plain = _run(server, tmp_path / "g", "gsm8k", "--limit", "3", *same)
    probes = {r["doc_id"]: r for r in probed if r["task"] == "gsm8k"}
    assert sorted(probes) == [0, 1, 2]  # 9 x 0.25 / 0.75 = 3 documents, the first ones
    for r in plain:
        p = probes[r["doc_id"]]
        assert (p["key"], p["response"], p["extracted"], p["correct"]) == (
            r["key"], r["response"], r["extracted"], r["correct"]
        )  # fmt: skip
    summaries = [json.loads((tmp_path / d / "summary.json").read_text())["tasks"]["gsm8k"] for d in ("p", "g")]
    assert summaries[0]["metrics"] == summaries[1]["metrics"]
