"""A server that queues, over real HTTP against the test server: a request waiting its turn is waited for (its
first event bounded by --ttft-timeout, never by --idle-timeout), not abandoned and re-sent; a stream that stalls
once its tokens flow still hits the idle timeout; and latencies count from a request's first send, a re-sent
request's failed attempts and backoff included (``retry_lost_s``, the summary's ``resent``, the report's banner)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.http_client import Client, ClientOptions
from evalkit.contracts import GenParams, Request, Response
from evalkit.testing.server import Behaviour, TestServer, long_answer_fn, serving


def run(out: Path, url: str, *extra: str, limit: int, concurrency: int, report: bool = False) -> tuple[int, str]:
    args = ["run", "gsm8k", "--endpoint", url, "--limit", str(limit), "--concurrency", str(concurrency)]
    args += ["--no-warmup", "-o", str(out), "-q", *([] if report else ["--no-report"]), *extra]
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def samples(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def task_summary(out: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]
    return summary


@pytest.fixture
def queueing() -> Iterator[TestServer]:
    """Two requests run at once (vLLM's --max-num-seqs 2); each generates its answer (padded to 100 tokens, cut
    at its stop string) 15 ms a token."""
    b = Behaviour(max_num_seqs=2, itl_s=0.015)
    b.answer_fn = long_answer_fn(100, b)
    with TestServer(b) as srv:
        yield srv


# ------------------------------------------------------------------------------ queued streamed requests
def test_queued_requests_are_waited_for_not_resent(tmp_path: Path, queueing: TestServer) -> None:
    """The issue's repro, scaled: 12 requests at once on a server that runs 2, so the last ones wait ~5 s for their
    first event, past --idle-timeout 1.5. None is re-sent; each TTFT includes its wait in the queue."""

    code, err = run(
        tmp_path / "r", queueing.url, "--idle-timeout", "1.5", "--max-tokens", "120", limit=12, concurrency=12
    )
    assert code == 0, err
    recs = samples(tmp_path / "r")
    assert len(recs) == 12 and {r["status"] for r in recs} <= {"ok", "truncated"}
    assert [r["attempts"] for r in recs] == [1] * 12  # before: 7 of 12 re-sent (attempts 2-3)
    assert len(queueing.requests) == 12 and not any(r.aborted for r in queueing.requests)
    ttfts = sorted(r["ttft_ms"] / 1000 for r in recs)
    service = min((r["e2e_ms"] - r["ttft_ms"]) / 1000 for r in recs)
    assert ttfts[-1] >= max(4 * service, 2.0), (service, ttfts)  # the last ones waited ~5 service times
    assert all("retry_lost_s" not in r for r in recs)
    assert "resent" not in task_summary(tmp_path / "r")


def test_queued_streamed_request_gets_headers_at_once() -> None:
    """The test server queues as vLLM does: a waiting streamed request has its headers at once, its first data
    event only when it runs."""

    async def go(url: str) -> tuple[float, float]:
        body = {"model": "test-model", "prompt": "Question: 1+1?\nAnswer:", "max_tokens": 50, "stream": True}
        async with aiohttp.ClientSession() as s:
            first = asyncio.create_task(s.post(url + "/completions", json=body).__aenter__())
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            async with s.post(url + "/completions", json=body) as resp:
                headers = time.monotonic() - t0
                async for line in resp.content:
                    if line.startswith(b"data:"):
                        break
                data = time.monotonic() - t0
            (await first).release()
            return headers, data

    with TestServer(Behaviour(max_num_seqs=1, itl_s=0.02)) as srv:
        headers, data = asyncio.run(go(srv.url))
    assert headers < 0.3 < data, (headers, data)  # the first request's 50 tokens take ~1 s


def test_ttft_timeout_ends_a_wait_for_the_first_event_and_is_not_resent(tmp_path: Path) -> None:
    """A request whose first event does not come within --ttft-timeout fails without being re-sent (it would join
    the back of the same queue); the error names the option."""
    with TestServer(Behaviour()) as srv:
        srv.faults = [{"delay_s": 3}]  # then answered: a failure means the 1 s bound ended the wait
        code, err = run(tmp_path / "r", srv.url, "--ttft-timeout", "1", "--max-tokens", "16", limit=1, concurrency=1)
        sent = len(srv.requests)
    assert code == 1 and "1 of 1 requests failed" in err, err
    (rec,) = samples(tmp_path / "r")
    assert rec["status"] == "api_error" and rec["attempts"] == 1 and sent == 1
    assert "TTFT timeout (1 s:" in rec["error"] and "--ttft-timeout" in rec["error"], rec["error"]


# ------------------------------------------------------------------------------- non-streamed requests
def _request(max_tokens: int = 16, *, scored: bool = False, doc_id: int = 0) -> Request:
    gen = GenParams(max_tokens=max_tokens, prompt_logprobs=1 if scored else None)
    return Request(task="t", doc_id=doc_id, sample_index=0, prompt=f"Question: {doc_id}+1?\nAnswer:", gen=gen)


def _generate_all(url: str, options: ClientOptions, reqs: list[Request]) -> list[Response]:
    async def go() -> list[Response]:
        async with Client(url, "test-model", options=options) as c:
            return list(await asyncio.gather(*(c.generate(r) for r in reqs)))

    return asyncio.run(go())


def test_queued_non_streamed_requests_are_waited_for() -> None:
    """A non-streamed (scored) request's only bytes are its answer: 4 at once on a server that runs 1 (~0.5 s
    each) wait past an idle timeout of 0.2 s, and are neither abandoned nor re-sent."""
    opts = ClientOptions(idle_timeout_s=0.2, max_attempts=3, backoff_base_s=0.02, backoff_max_s=0.05)
    with TestServer(Behaviour(max_num_seqs=1, itl_s=0.05)) as srv:
        t0 = time.monotonic()
        resps = _generate_all(srv.url, opts, [_request(10, scored=True, doc_id=i) for i in range(4)])
        elapsed = time.monotonic() - t0
        sent = len(srv.requests)
    assert [r.error for r in resps] == [None] * 4 and [r.attempts for r in resps] == [1] * 4
    assert all(r.logprobs and r.logprobs.get("prompt_logprobs") for r in resps)
    assert sent == 4 and elapsed >= 1.5  # served one after another
    assert max(r.e2e_ms or 0 for r in resps) >= 1500  # the last one's latency includes its wait


def test_non_streamed_bound_scales_with_the_prompt_and_a_timeout_is_not_resent() -> None:
    """A non-streamed request's bound is the TTFT timeout plus a base, per token asked and per prompt token; past
    it the request fails once, and is not sent again into the same queue."""
    opts = ClientOptions(
        ttft_timeout_s=0.2, total_base_s=0.1, total_per_token_s=0.01, total_per_prompt_token_s=0.001, max_attempts=3
    )
    assert opts.scored_timeout(1000, 10) == pytest.approx(0.1 + 0.1 + 1.0)
    with TestServer(Behaviour(itl_s=0.1)) as srv:  # ~1 s for 10 tokens: past 0.2 + 0.2 + ~0.02 s
        t0 = time.monotonic()
        (resp,) = _generate_all(srv.url, opts, [_request(10, scored=True)])
        elapsed = time.monotonic() - t0
        sent = len(srv.requests)
    assert resp.error is not None and "no answer within" in resp.error and "not re-sent" in resp.error, resp.error
    assert resp.attempts == 1 and sent == 1 and elapsed < 0.9


# ------------------------------------------------------------------------ latencies from the first send
def test_a_resent_request_counts_from_its_first_send(tmp_path: Path) -> None:
    """A 500 after 0.5 s on the first attempt: the sample's TTFT and E2E count from the first send (the failed
    attempt and the backoff included, given apart as retry_lost_s); the summary and the report say it was re-sent."""
    with TestServer(Behaviour(ttft_s=0.05)) as srv:
        srv.faults = [{"delay_s": 0.5, "status": 500}]
        code, err = run(tmp_path / "r", srv.url, "--max-tokens", "16", limit=2, concurrency=1, report=True)
        first, second = srv.requests[:2]
    assert code == 0, err
    recs = {r["doc_id"]: r for r in samples(tmp_path / "r")}
    rec = recs[0]
    assert rec["attempts"] == 2 and rec["status"] != "api_error"
    lost = second.time - first.time  # the failed attempt (0.5 s) and its backoff, as the server saw them
    assert lost >= 0.5 + 0.25 * 0.5
    assert rec["retry_lost_s"] == pytest.approx(lost, abs=0.05)
    assert rec["ttft_ms"] / 1000 >= rec["retry_lost_s"] + 0.05 - 0.01  # before: ~0.05 s, the last attempt's
    assert rec["e2e_ms"] >= rec["ttft_ms"]
    assert recs[1]["attempts"] == 1 and "retry_lost_s" not in recs[1]
    resent = task_summary(tmp_path / "r")["resent"]
    assert resent["requests"] == 1 and resent["lost_s"] == pytest.approx(rec["retry_lost_s"], abs=0.01)
    html = (tmp_path / "r" / "report.html").read_text()
    assert "1 request was re-sent" in html and f"{rec['retry_lost_s']:.1f} s" in html


# --------------------------------------------------------------------- streams that stall once tokens flow
async def _one_token_then_pings(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    chunk = {"model": "test-model", "choices": [{"index": 0, "text": " 2", "finish_reason": None}]}
    await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    for _ in range(100):  # 10 s of pings: not progress
        await resp.write(b": ping\n\n")
        await asyncio.sleep(0.1)
    return resp


def test_pings_after_the_first_token_are_idle() -> None:
    """Once tokens flow, SSE comments do not reset the idle timeout: a stream of pings is abandoned after it."""

    async def go() -> tuple[Response, float]:
        ep = web.Application()
        ep.router.add_post("/v1/completions", _one_token_then_pings)
        async with serving(ep) as base:
            opts = ClientOptions(idle_timeout_s=0.5, max_attempts=1)
            async with Client(base + "/v1", "test-model", options=opts) as c:
                t0 = time.monotonic()
                resp = await c.generate(_request())
                return resp, time.monotonic() - t0

    resp, elapsed = asyncio.run(go())
    assert resp.error is not None and "idle timeout (0.5 s) once tokens flowed" in resp.error, resp.error
    assert elapsed < 2.0
