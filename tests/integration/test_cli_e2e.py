"""The CLI end to end against the deterministic test server: store contents, schema, timing truth."""

import json
import subprocess
import sys

import orjson
import pytest

from evalkit.contracts import SCHEMA_VERSION, MetricValue, SampleRecord, Speed
from evalkit.testing.server import Behaviour, TestServer


def run_cli(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "evalkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_run_gsm8k_writes_a_store_matching_the_schema(tmp_path, test_server):
    out = tmp_path / "run1"
    p = run_cli(
        "run",
        "gsm8k",
        "--endpoint",
        test_server.url,
        "--limit",
        "20",
        "--concurrency",
        "8",
        "--output-dir",
        str(out),
        "--no-report",
    )
    assert p.returncode == 0, p.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    for key in (
        "evalkit_version",
        "command",
        "endpoint",
        "model",
        "concurrency",
        "versions",
        "tasks",
        "created_at",
        "finished_at",
    ):
        assert key in manifest, key
    assert manifest["model"] == "test-model"
    assert manifest["tasks"]["gsm8k"]["data_sha256"]["test"].startswith("3730d312")
    assert manifest["tasks"]["gsm8k"]["settings"]["max_tokens"] == 256
    assert manifest["versions"]["lm_eval"]
    lines = (out / "samples.jsonl").read_bytes().splitlines()
    records = [SampleRecord.model_validate(orjson.loads(line)) for line in lines]
    assert len(records) == 20
    assert {r.doc_id for r in records} == set(range(20))
    assert all(set(r.correct) == {"strict-match", "flexible-extract"} for r in records)
    assert all(r.ttft_ms and r.e2e_ms and r.output_tokens for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schema_version"] == SCHEMA_VERSION == 2
    t = summary["tasks"]["gsm8k"]
    strict = MetricValue.model_validate(t["metrics"]["exact_match,strict-match"])
    assert strict.n == 20
    assert strict.value == pytest.approx(sum(r.correct["strict-match"] for r in records) / 20)
    lo, hi = strict.ci95
    assert lo <= strict.value <= hi
    Speed.model_validate(t["speed"])
    assert t["counts"]["total"] == 20 and t["counts"]["api_error"] == 0
    assert "exact_match,strict-match" in p.stdout  # the console table


def test_timing_truth(tmp_path):
    """Injected TTFT 500 ms and 50 ms per token come back within 10% (TTFT: the test server's and the client's
    own overheads on a loaded 2-core machine reach 10-25 ms, so the injected delays are large against them),
    and TPOT within 2%: (latency - TTFT) / (tokens - 1), where dividing by the token count would read 2.5% low."""
    with TestServer(Behaviour(ttft_s=0.5, itl_s=0.05)) as srv:
        out = tmp_path / "timing"
        p = run_cli(
            "run",
            "gsm8k",
            "--endpoint",
            srv.url,
            "--limit",
            "8",
            "--concurrency",
            "8",
            "--max-tokens",
            "40",
            "--output-dir",
            str(out),
            "--no-report",
        )
    assert p.returncode == 0, p.stderr
    speed = json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]["speed"]
    assert speed["ttft_ms"]["p50"] == pytest.approx(500, rel=0.10)
    assert speed["tpot_ms"]["p50"] == pytest.approx(50, rel=0.02)
    assert speed["itl_ms"]["p50"] == pytest.approx(50, rel=0.05)


def test_model_taken_from_models_endpoint_and_wrong_model_listed(tmp_path, test_server):
    p = run_cli(
        "run",
        "gsm8k",
        "--endpoint",
        test_server.url,
        "--model",
        "nope",
        "--limit",
        "1",
        "--output-dir",
        str(tmp_path / "x"),
    )
    assert p.returncode == 2
    assert "model 'nope' is not served" in p.stderr and "test-model" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_settings_from_env_and_config_file_cli_wins(tmp_path, test_server):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"endpoint: {test_server.url}\nlimit: 3\nmax_tokens: 64\nconcurrency: 2\n")
    out = tmp_path / "run"
    p = run_cli(
        "run",
        "gsm8k",
        "--config",
        str(cfg),
        "--limit",
        "2",
        "--output-dir",
        str(out),
        "--no-report",
        env={"EVALKIT_MAX_TOKENS": "32", "EVALKIT_TEMPERATURE": "0.5"},
    )
    assert p.returncode == 0, p.stderr
    settings = json.loads((out / "manifest.json").read_text())["tasks"]["gsm8k"]["settings"]
    assert settings["limit"] == 2  # CLI beats file
    assert settings["max_tokens"] == 64  # file beats env
    assert settings["temperature"] == 0.5  # env beats task default
    sent = [r["body"] for r in test_server.requests]
    assert all(b["max_tokens"] == 64 and b["temperature"] == 0.5 for b in sent)
