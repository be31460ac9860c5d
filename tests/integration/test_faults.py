"""Fault injection against the deterministic test server over real HTTP: what is retried (and how), what fails
at once, what is abandoned, and how each outcome is recorded in samples.jsonl and summary.json."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.http_client import RETRYABLE_STATUS, Client, ClientOptions
from evalkit.contracts import GenParams, Request, Response
from evalkit.testing.server import Behaviour, TestServer, serving


# ------------------------------------------------------------------------------------------------ helpers
def run(out: Path, url: str, *extra: str, limit: int = 3, task: str = "gsm8k") -> tuple[int, str, float]:
    """``evalkit run`` in-process, one request at a time (so faults hit requests in doc order)."""
    args = [
        "run",
        task,
        "--endpoint",
        url,
        "--limit",
        str(limit),
        "--max-tokens",
        "32",
        "--concurrency",
        "1",
        "-o",
        str(out),
        "--no-report",
        "-q",
        *extra,
    ]
    t0 = time.monotonic()
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr, time.monotonic() - t0


def samples(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def by_doc(out: Path) -> dict[int, dict[str, Any]]:
    return {r["doc_id"]: r for r in samples(out)}


def task_summary(out: Path, task: str = "gsm8k") -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())["tasks"][task]
    return summary


@pytest.fixture
def server() -> Iterator[TestServer]:
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        yield srv


def assert_clean_after(recs: dict[int, dict[str, Any]], first: int = 1) -> None:
    """Documents after the faulted one were untouched: one attempt each, no error."""
    for doc_id, r in recs.items():
        if doc_id >= first:
            assert r["attempts"] == 1 and r["error"] is None and r["status"] != "api_error", r


# --------------------------------------------------------------------------------------- retried faults
def test_500_then_success(tmp_path: Path, server: TestServer) -> None:
    server.faults = [{"status": 500, "message": "engine hiccup"}]
    code, err, _ = run(tmp_path / "r", server.url)
    assert code == 0, err
    recs = by_doc(tmp_path / "r")
    assert recs[0]["attempts"] == 2 and recs[0]["status"] != "api_error" and recs[0]["error"] is None
    assert recs[0]["response"]
    assert_clean_after(recs)
    reqs = server.requests
    assert [r.status for r in reqs] == [500, 200, 200, 200]
    assert reqs[0].prompt == reqs[1].prompt == recs[0]["prompt"]
    assert task_summary(tmp_path / "r")["counts"]["api_error"] == 0


def test_429_honours_retry_after(tmp_path: Path, server: TestServer) -> None:
    server.faults = [{"status": 429, "retry_after": 1}]
    code, err, _ = run(tmp_path / "r", server.url)
    assert code == 0, err
    recs = by_doc(tmp_path / "r")
    assert recs[0]["attempts"] == 2 and recs[0]["error"] is None
    reqs = server.requests
    assert reqs[0].status == 429 and reqs[1].prompt == reqs[0].prompt
    gap = reqs[1].time - reqs[0].time
    assert 0.95 <= gap < 3.0, gap  # waited as told (the default backoff would retry after 0.25-0.5 s)


def test_401_mid_run_fails_fast_and_is_recorded(tmp_path: Path, server: TestServer) -> None:
    server.faults = [None, {"status": 401, "message": "Invalid API key"}]
    code, err, _ = run(tmp_path / "r", server.url)
    assert code == 1  # error rate 1/3 > --max-error-rate 0
    assert "1 of 3 requests failed" in err
    recs = by_doc(tmp_path / "r")
    bad = recs[1]
    assert bad["status"] == "api_error" and bad["attempts"] == 1
    assert "401" in bad["error"] and "Invalid API key" in bad["error"]
    assert bad["correct"] == {} and bad["response"] is None  # never scored
    assert recs[0]["status"] != "api_error" and recs[2]["status"] != "api_error"
    assert [r.status for r in server.requests] == [200, 401, 200]  # not retried
    s = task_summary(tmp_path / "r")
    assert s["counts"]["api_error"] == 1 and s["counts"]["total"] == 3
    for metric in s["metrics"].values():
        assert metric["n"] == 2  # the failure is left out of the denominator, and n says so


def test_connection_dropped_mid_stream_is_retried(tmp_path: Path, server: TestServer) -> None:
    server.faults = [{"drop_after_tokens": 3}]
    code, err, _ = run(tmp_path / "r", server.url)
    assert code == 0, err
    recs = by_doc(tmp_path / "r")
    assert recs[0]["attempts"] == 2 and recs[0]["error"] is None and recs[0]["response"]
    assert_clean_after(recs)
    first, second = server.requests[:2]
    assert first.aborted and not first.completed
    assert second.completed and second.prompt == first.prompt


def test_stall_past_idle_timeout_is_abandoned_and_retried(tmp_path: Path, server: TestServer) -> None:
    server.faults = [{"stall_s": 3, "after_tokens": 2}]
    code, err, elapsed = run(tmp_path / "r", server.url, "--idle-timeout", "1")
    assert code == 0, err
    recs = by_doc(tmp_path / "r")
    assert recs[0]["attempts"] == 2 and recs[0]["error"] is None and recs[0]["response"]
    first, second = server.requests[:2]
    assert first.first_token_time is not None
    gap = second.time - first.first_token_time
    assert 0.95 <= gap < 2.5, gap  # abandoned after the 1 s idle timeout (+ backoff), not after the 3 s stall
    assert not first.completed
    assert elapsed < 15


def test_slow_headers_past_idle_timeout_are_waited_for(tmp_path: Path, server: TestServer) -> None:
    """The wait for the response headers and the first event (a request waiting its turn) is not idle time: it
    is bounded by --ttft-timeout, not --idle-timeout (tests/test_queueing.py has the TTFT timeout itself)."""
    server.faults = [{"delay_s": 3}]
    code, err, _ = run(tmp_path / "r", server.url, "--idle-timeout", "1", limit=1)
    assert code == 0, err
    rec = by_doc(tmp_path / "r")[0]
    assert rec["attempts"] == 1 and rec["ttft_ms"] >= 3000
    assert len(server.requests) == 1 and not server.requests[0].aborted


def test_retries_stop_at_max_attempts(tmp_path: Path, server: TestServer) -> None:
    server.faults = [{"status": 503}] * 3
    code, err, _ = run(tmp_path / "r", server.url, "--max-attempts", "3", limit=2)
    assert code == 1 and "1 of 2 requests failed" in err
    recs = by_doc(tmp_path / "r")
    assert recs[0]["status"] == "api_error" and recs[0]["attempts"] == 3 and "503" in recs[0]["error"]
    assert recs[1]["attempts"] == 1 and recs[1]["status"] != "api_error"
    assert [r.status for r in server.requests] == [503, 503, 503, 200]


def test_html_error_page_from_a_proxy(tmp_path: Path, server: TestServer) -> None:
    """A 502 HTML page (nginx in front of vLLM) is retried; a 200 HTML page is not an API: failed at once."""
    server.faults = [{"html": True, "status": 502}, None, {"html": True}]
    code, err, _ = run(tmp_path / "r", server.url)
    assert code == 1 and "1 of 3" in err
    recs = by_doc(tmp_path / "r")
    assert recs[0]["attempts"] == 2 and recs[0]["error"] is None
    assert recs[1]["attempts"] == 1 and recs[1]["status"] == "api_error"
    assert "text/html" in recs[1]["error"] and "OpenAI-compatible" in recs[1]["error"]


# ---------------------------------------------------------------------------------------- empty answers
def test_null_text_on_completions_is_status_empty(tmp_path: Path, server: TestServer) -> None:
    server.faults = [{"null_content": True}]
    code, err, _ = run(tmp_path / "r", server.url)
    assert code == 0, err
    recs = by_doc(tmp_path / "r")
    assert recs[0]["status"] == "empty" and not recs[0]["response"] and recs[0]["error"] is None
    assert recs[0]["attempts"] == 1  # a valid (empty) answer, not a failure to retry
    s = task_summary(tmp_path / "r")
    assert s["counts"]["empty"] == 1 and s["counts"]["api_error"] == 0
    assert all(m["n"] == 3 for m in s["metrics"].values())  # empty answers stay in the denominator


def test_null_content_on_chat_is_status_empty(tmp_path: Path, server: TestServer) -> None:
    server.faults = [{"null_content": True}]
    code, err, _ = run(tmp_path / "r", server.url, "--num-samples", "1", "--max-tokens", "200", task="aime25")
    assert code == 0, err
    assert server.requests[0].path == "/v1/chat/completions"
    recs = by_doc(tmp_path / "r")
    assert recs[0]["status"] == "empty" and not recs[0]["response"] and recs[0]["error"] is None
    assert recs[1]["status"] == "ok" and recs[2]["status"] == "ok"
    s = task_summary(tmp_path / "r", "aime25")
    assert s["counts"]["empty"] == 1 and s["counts"]["total"] == 3
    assert s["metrics"]["avg@1"]["n"] == 3


# ------------------------------------------------------------------------------------ the client itself
def _request(max_tokens: int = 16) -> Request:
    return Request(
        task="t", doc_id=0, sample_index=0, prompt="Question: 1+1?\nAnswer:", gen=GenParams(max_tokens=max_tokens)
    )


def _generate(url: str, options: ClientOptions, req: Request | None = None) -> Response:
    async def go() -> Response:
        async with Client(url, "test-model", options=options) as c:
            return await c.generate(req or _request())

    return asyncio.run(go())


FAST = ClientOptions(max_attempts=3, backoff_base_s=0.02, backoff_max_s=0.05)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_never_retries_client_errors(status: int, server: TestServer) -> None:
    server.faults = [{"status": status, "message": f"server says no ({status})"}]
    resp = _generate(server.url, FAST)
    assert resp.attempts == 1 and resp.http_status == status
    assert resp.error == f"HTTP {status}: server says no ({status})"
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", sorted(RETRYABLE_STATUS))
def test_client_retries_transient_statuses(status: int, server: TestServer) -> None:
    assert {408, 409, 429, 500, 502, 503, 504} == RETRYABLE_STATUS
    server.faults = [{"status": status}]
    resp = _generate(server.url, FAST)
    assert resp.error is None and resp.attempts == 2 and resp.text


def test_client_retries_bounded_by_total_time(server: TestServer) -> None:
    server.faults = [{"status": 500}] * 50
    opts = ClientOptions(max_attempts=50, max_retry_s=0.6, backoff_base_s=0.2, backoff_max_s=0.2)
    t0 = time.monotonic()
    resp = _generate(server.url, opts)
    assert resp.error is not None and "HTTP 500" in resp.error
    assert 2 <= resp.attempts < 10
    assert time.monotonic() - t0 < 2.0


def test_client_total_timeout_scales_with_max_tokens(server: TestServer) -> None:
    """A stream that keeps trickling (never idle) is still cut by the total timeout, base + per token."""
    opts = ClientOptions(idle_timeout_s=5, total_base_s=0.3, total_per_token_s=0.01, max_attempts=1)
    assert opts.total_timeout(1000) == pytest.approx(10.3)
    server.behaviour.update(itl_s=0.05)
    t0 = time.monotonic()
    resp = _generate(server.url, opts, _request(max_tokens=40))  # ~2 s of streaming, timeout 0.7 s
    assert resp.error is not None and "timed out" in resp.error and resp.attempts == 1
    assert time.monotonic() - t0 < 1.9  # the whole answer would take 2 s


async def _garbage_events(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'data: ["not", "a", "chunk"]\n\ndata: [DONE]\n\n')
    return resp


def test_client_survives_malformed_events() -> None:
    """JSON events of the wrong shape are a failed attempt (retried, then recorded), never a crash."""

    async def go() -> tuple[Response, int]:
        hits = 0

        async def handler(request: web.Request) -> web.StreamResponse:
            nonlocal hits
            hits += 1
            return await _garbage_events(request)

        application = web.Application()
        application.router.add_post("/v1/completions", handler)
        async with serving(application) as base, Client(base + "/v1", "m", options=FAST) as c:
            return await c.generate(_request()), hits

    resp, hits = asyncio.run(go())
    assert resp.error is not None and "malformed event" in resp.error
    assert resp.attempts == 3 and hits == 3
