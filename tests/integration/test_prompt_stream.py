"""With a cold prompt cache, lm-eval builds the prompts in a worker process and evalkit sends each request as it
comes: the first request reaches the server before lm-eval has built the later prompts, the requests streamed are
exactly lm-eval's own (and the cached ones), a resumed run skips what was answered, and a builder that dies is a
clear error.

Here: those of its tests that use the test server or a subprocess; the others are in
tests/unit/test_prompt_stream.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from evalkit.config import load_config
from evalkit.runner import Runner
from evalkit.runner.prompt_stream import PromptBuilder
from evalkit.runner.worker import WorkerError
from evalkit.tasks.spec import TaskSettings
from evalkit.testing.server import TestServer
from tests.unit.test_prompt_stream import cold_cache  # noqa: F401 (helpers and fixtures shared with that file)


def run(url: str, out: Path, limit: int = 8) -> dict:
    cfg = load_config(
        {
            "tasks": ["gsm8k"],
            "endpoint": url,
            "limit": limit,
            "max_tokens": 16,
            "concurrency": "1",
            "max_attempts": 1,
            "max_error_rate": 1.0,
            "output_dir": out,
            "report": False,
        }
    )
    return Runner(cfg).run()


def samples(out: Path) -> list[dict]:
    return [orjson.loads(line) for line in (out / "samples.jsonl").read_bytes().splitlines()]


@pytest.mark.slow
def test_requests_go_out_while_lm_eval_builds_the_rest(tmp_path: Path, cold_cache: Path, test_server: TestServer):  # noqa: F811 (the fixture imported above)
    test_server.faults = [None, {"status": 400}]  # the second request fails: the resumed run sends it again
    out = run(test_server.url, tmp_path / "run")
    [cache] = cold_cache.glob("gsm8k-*.json")
    first_request = min(r.time for r in test_server.requests)
    # lm-eval builds 1319 prompts (seconds); the run's 8 requests went out before it was done and wrote the cache
    assert first_request < cache.stat().st_mtime - 0.5, (first_request, cache.stat().st_mtime)
    task = out.manifest.tasks["gsm8k"]
    assert task.prompts_streamed is True and task.requests == 8
    assert out.summary.timings_s["prompt_cache"] >= 0  # the build's tail (for the cache) is a phase of its own
    counts = out.summary.tasks["gsm8k"].counts
    assert counts["total"] == 8 and counts["api_error"] == 1
    # what was sent is the cache's (lm-eval's) first 8 prompts, in order
    built = orjson.loads(cache.read_bytes())["entries"]
    assert len(built) == 1319
    assert [r.prompt for r in test_server.requests] == [b["context"] for b in built[:8]]
    first_keys = {r["key"] for r in samples(tmp_path / "run") if r["status"] != "api_error"}

    # resumed with a cold cache again: streamed, and only the failed request is sent
    cache.unlink()
    sent = len(test_server.requests)
    again = run(test_server.url, tmp_path / "run")
    assert again.manifest.tasks["gsm8k"].prompts_streamed is True
    assert [r.prompt for r in test_server.requests[sent:]] == [built[1]["context"]]  # doc 1 had failed
    assert again.summary.tasks["gsm8k"].counts["api_error"] == 0

    # warm: built from the cache before sending, and every request is the one streamed (same keys)
    warm = run(test_server.url, tmp_path / "warm")
    assert warm.manifest.tasks["gsm8k"].prompts_streamed is False
    warm_keys = {r["key"] for r in samples(tmp_path / "warm")}
    assert first_keys < warm_keys and len(warm_keys) == 8
    assert "prompt_cache" not in warm.summary.timings_s


@pytest.mark.slow
def test_a_dying_builder_is_a_clear_error(cold_cache: Path):  # noqa: F811 (the fixture imported above)
    builder = PromptBuilder(None, [("gsm8k", TaskSettings())])
    stream = builder.streams["gsm8k"]
    try:
        assert stream.count.result(120) == 1319

        async def read_all() -> int:
            n = 0
            async for batch in stream.batches():
                n += len(batch)
                if n >= 1:
                    builder._worker._proc.kill()  # dies mid-build
            return n

        with pytest.raises(WorkerError, match="prompt building process exited"):
            asyncio.run(asyncio.wait_for(read_all(), 60))
    finally:
        builder.close(wait=False)
    assert not list(cold_cache.glob("gsm8k-*.json"))  # no half-built cache is left
