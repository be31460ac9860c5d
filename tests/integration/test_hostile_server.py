"""Hostile and faulty servers, end to end over real HTTP against the test server (its ``faults``, its
``{"hostile": MODE}`` streams, ``OVERSIZED_MODES`` and ``Behaviour.gzip_bomb``): what is retried (and how), what
fails at once, what is abandoned, and how each outcome is recorded in samples.jsonl and summary.json.

- faults: retries, errors that end a request at once, timeouts (``--ttft-timeout``, ``--idle-timeout``);
- malformed streams: each becomes that request's ``api_error`` (or a scored sample whose unreadable usage is
  ignored with a note), never the run's end; the run writes its summary and report, exits as
  ``--max-error-rate`` says, and the same command resumes it; a server that only sends ``: ping`` comments is
  abandoned after ``--idle-timeout``, not after the total timeout;
- what evalkit must not take as it comes: an error message that quotes the ``Authorization`` header back (the
  key, the Basic token and URL credentials reach neither ``samples.jsonl``, nor the report, nor stderr);
  tool-call arguments nested 1,500 deep (that sample's ``bad_arguments``) or 8 MB long (stored cut, with a
  note); a replica answering with another ``model``; a gzip bomb, a flood of events, a huge error body.

The in-process halves: tests/unit/test_hostile_server.py."""

from __future__ import annotations

import asyncio
import json
import math
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.clamp import clamp_max_tokens
from evalkit.client.http_client import RETRYABLE_STATUS, Client, ClientOptions
from evalkit.contracts import GenParams, Request, Response
from evalkit.limits import MAX_STORED_CHARS, STREAM_BASE_BYTES
from evalkit.testing.hostile import HUGE_ARGUMENTS_BYTES, gzip_bomb
from evalkit.testing.server import Behaviour, TestServer, serving
from tests.report_fixtures import sample_data


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
    is bounded by --ttft-timeout, not --idle-timeout (tests/integration/test_queueing.py has the TTFT timeout
    itself)."""
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


USAGE_MODES = {  # mode -> the usage field the note must name
    "usage_string": "completion_tokens",
    "usage_list": "completion_tokens",
    "usage_huge": "completion_tokens",
    "usage_huge_float": "completion_tokens",
    "usage_float": "completion_tokens",
    "usage_negative": "completion_tokens",
    "reasoning_tokens_string": "reasoning_tokens",
}
FAILING_MODES = {  # mode -> what the sample's error must say
    "finish_reason_int": "finish_reason",
    "content_int": "int",
    "long_data_line": "longer than",
    "long_comment_line": "longer than",
}


def run_with_report(out: Path, url: str, *extra: str, task: str = "gsm8k", limit: int = 3) -> tuple[int, str, float]:
    """``evalkit run`` in-process, one request at a time (faults hit requests in doc order), with the report."""
    fixed = ["--max-tokens", "32", "--concurrency", "1", "--num-samples", "1", "--max-attempts", "2", "-q"]
    args = ["run", task, "--endpoint", url, "--limit", str(limit), "-o", str(out), *fixed, *extra]
    t0 = time.monotonic()
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr, time.monotonic() - t0


def assert_written(out: Path, task: str) -> dict[str, Any]:
    """summary.json and report.html are there, and no speed figure is negative, infinite or absurd."""
    assert (out / "report.html").stat().st_size > 0
    s = task_summary(out, task)
    for key in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s"):
        value = s["speed"][key]
        assert value is None or (math.isfinite(value) and 0 <= value < 1e7), (key, value)
    return s


@pytest.fixture
def default_server() -> Any:
    with TestServer() as srv:
        yield srv


# ------------------------------------------------------------------------------- unreadable usage: a note
@pytest.mark.parametrize("task", ["gsm8k", "aime25"])
@pytest.mark.parametrize("mode", sorted(USAGE_MODES))
def test_bad_usage_is_ignored_with_a_note(tmp_path: Path, default_server: TestServer, mode: str, task: str) -> None:
    default_server.faults = [{"hostile": mode}]
    out = tmp_path / "r"
    code, err, _ = run_with_report(out, default_server.url, task=task)
    assert code == 0, err
    recs = by_doc(out)
    bad = recs[0]
    assert bad["status"] != "api_error" and bad["attempts"] == 1 and bad["response"]
    assert bad["error"] is not None and "usage ignored" in bad["error"] and USAGE_MODES[mode] in bad["error"]
    if mode == "reasoning_tokens_string":
        assert bad["reasoning_tokens"] is None and isinstance(bad["output_tokens"], int) and bad["output_tokens"] > 0
    else:
        assert bad["output_tokens"] is None and bad["tpot_ms"] is None
        assert bad["prompt_tokens"] is not None  # the fields that were fine are kept
    for r in (recs[1], recs[2]):
        assert r["error"] is None and isinstance(r["output_tokens"], int) and r["output_tokens"] > 0
    s = assert_written(out, task)
    assert s["counts"]["api_error"] == 0 and s["counts"]["total"] == 3
    assert s["speed"]["output_tokens_per_s"] > 0

    sent = len(default_server.requests)
    default_server.faults = [{"hostile": mode}]
    code, err, _ = run_with_report(out, default_server.url, task=task)  # resumes: everything is done, nothing is sent
    assert code == 0, err
    assert len(default_server.requests) == sent


# ----------------------------------------------------------------------- unreadable stream: api_error
@pytest.mark.parametrize(
    ("mode", "task"),
    [(m, "gsm8k") for m in sorted(FAILING_MODES)] + [("content_int", "aime25"), ("finish_reason_int", "aime25")],
)
def test_unreadable_stream_is_that_requests_api_error(
    tmp_path: Path, default_server: TestServer, mode: str, task: str
) -> None:
    default_server.faults = [{"hostile": mode}] * 2  # both attempts of the first request
    out = tmp_path / "r"
    code, err, _ = run_with_report(out, default_server.url, task=task)
    assert code == 1 and "1 of 3 requests failed" in err, err
    recs = by_doc(out)
    bad = recs[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 2 and bad["correct"] == {}
    assert "malformed" in bad["error"] and FAILING_MODES[mode] in bad["error"], bad["error"]
    assert all(recs[d]["status"] != "api_error" and recs[d]["error"] is None for d in (1, 2))
    s = assert_written(out, task)
    assert s["counts"]["api_error"] == 1 and s["counts"]["total"] == 3

    sent = len(default_server.requests)
    default_server.faults = [{"hostile": mode}] * 2
    code, err, _ = run_with_report(
        out, default_server.url, task=task
    )  # resumes: only the failed request is sent again (twice)
    assert code == 1 and "1 of 3 requests failed" in err, err
    assert [r.prompt for r in default_server.requests[sent:]] == [default_server.requests[0].prompt] * 2
    assert_written(out, task)

    code, err, _ = run_with_report(
        out, default_server.url, task=task
    )  # a healthy server: the failed request is answered
    assert code == 0, err
    assert task_summary(out, task)["counts"]["api_error"] == 0


# ------------------------------------------------------------------------------- pings are not progress
def test_ping_only_stream_fails_at_the_ttft_timeout(tmp_path: Path, default_server: TestServer) -> None:
    """A stream of ``: ping`` comments and no data event is abandoned at --ttft-timeout (pings are not a first
    event), not after the stream's 15 s, and not re-sent into the server's queue. Pings once tokens flow meet the
    idle timeout: tests/integration/test_queueing.py."""
    default_server.faults = [{"hostile": "ping_only", "stall_s": 15}]
    out = tmp_path / "r"
    code, err, elapsed = run_with_report(
        out, default_server.url, "--ttft-timeout", "1", "--max-error-rate", "0.5", limit=2
    )
    assert code == 0, err
    bad = by_doc(out)[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 1
    assert "no data event" in bad["error"] and "(1 s" in bad["error"], bad["error"]
    first, second = default_server.requests[:2]
    assert first.aborted and second.prompt != first.prompt and not second.aborted
    assert 0.95 <= second.time - first.time < 3.0  # the first request was given up after ~1 s of pings
    assert elapsed < 12
    assert_written(out, "gsm8k")


# ---------------------------------------------------------------------------------- lm-eval's LM class
def test_lm_class_survives_a_hostile_stream(default_server: TestServer) -> None:
    """lm-eval's path (evalkit.client.lm_eval_model.EvalkitLM -> execute -> Client): bad usage is a note, a
    malformed event is retried, and what came back is the answer text."""
    from evalkit.client.lm_eval_model import EvalkitLM

    default_server.faults = [{"hostile": "usage_list"}, {"hostile": "content_int"}]
    lm = EvalkitLM(base_url=default_server.url, num_concurrent=1)
    inst = [SimpleNamespace(args=(f"Question: What is {i}+1?\nAnswer:", {"until": ["\n\n"]})) for i in range(2)]
    texts = lm.generate_until(inst)
    assert len(texts) == 2 and all(texts)
    first, second = lm.responses
    assert first.output_tokens is None and first.note is not None and "completion_tokens" in first.note
    assert second.attempts == 2 and second.error is None and isinstance(second.output_tokens, int)


KEY = "sk-evalkit-canary-0123456789abcdef"
BASIC_USER, BASIC_PASSWORD = "evalkit", "hunter2-canary-pw"
BASIC_TOKEN = "ZXZhbGtpdDpodW50ZXIyLWNhbmFyeS1wdw=="  # base64 of evalkit:hunter2-canary-pw
PROXY = "http://admin:s3cret-proxy-pw@10.0.0.1:3128"


def run_full_length(out: Path, url: str, *extra: str, task: str = "gsm8k", limit: int = 3) -> tuple[int, str]:
    """``evalkit run`` in-process, one request at a time (faults hit requests in doc order)."""
    fixed = ["--concurrency", "1", "--num-samples", "1", "--max-attempts", "2", "-q"]
    args = ["run", task, "--endpoint", url, "--limit", str(limit), "-o", str(out), *fixed, *extra]
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def counts(out: Path, task: str) -> dict[str, int]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return dict(summary["tasks"][task]["counts"])


# ------------------------------------------------------------------- 16: credentials quoted back by the server
@pytest.mark.parametrize("auth", ["bearer", "basic"])
def test_credentials_a_server_quotes_back_are_redacted_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, auth: str
) -> None:
    if auth == "bearer":
        behaviour, secrets = Behaviour(api_key=KEY), [KEY]
        monkeypatch.setenv("EVALKIT_API_KEY", KEY)
    else:
        behaviour = Behaviour(basic_auth=f"{BASIC_USER}:{BASIC_PASSWORD}")
        secrets = [BASIC_PASSWORD, BASIC_TOKEN]
        monkeypatch.delenv("EVALKIT_API_KEY", raising=False)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    secrets.append("s3cret-proxy-pw")
    with TestServer(behaviour) as srv:
        url = srv.url if auth == "bearer" else srv.url.replace("://", f"://{BASIC_USER}:{BASIC_PASSWORD}@")
        msg = f"gateway: upstream {PROXY} refused the request"
        srv.faults = [{"status": 502, "echo_auth": True, "message": msg}] * 2  # both attempts of doc 0
        out = tmp_path / "r"
        code, err = run_full_length(out, url)
    assert code == 1 and "1 of 3 requests failed" in err, err
    bad = by_doc(out)[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 2
    assert "HTTP 502: gateway: upstream http://***@10.0.0.1:3128 refused" in bad["error"], bad["error"]
    assert "Authorization: ***" in bad["error"], bad["error"]
    report = (out / "report.html").read_text()
    shown = {
        "samples.jsonl": (out / "samples.jsonl").read_text(),
        "stderr": err,
        "report sample block": json.dumps(sample_data(report)),
        "report.html": report,
    }
    assert "Authorization: ***" in shown["report sample block"]  # the error is in the report, redacted
    for where, text in shown.items():
        for secret in secrets:
            assert secret not in text, (where, secret)


# --------------------------------------------------------------- 17: degenerate tool-call arguments, one sample
def test_arguments_nested_1500_deep_are_that_samples_bad_arguments(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"hostile": "deep_arguments"}]
        out = tmp_path / "r"
        code, err = run_full_length(out, srv.url, task="bfcl-simple")
        assert code == 0, err
        recs = by_doc(out)
        bad = recs[0]
        assert bad["status"] == "bad_arguments" and bad["correct"] == {"ast": False}
        assert (
            bad["extraction"].startswith("bad_arguments: arguments of ") and "nested more than 100" in bad["extraction"]
        )
        assert all(recs[d]["status"] == "ok" for d in (1, 2))
        assert counts(out, "bfcl-simple")["bad_arguments"] == 1
        sent = len(srv.requests)
        srv.faults = [{"hostile": "deep_arguments"}]
        code, err = run_full_length(
            out, srv.url, task="bfcl-simple"
        )  # resumes: the degenerate sample is done, not re-sent
        assert code == 0, err
        assert len(srv.requests) == sent


def test_arguments_nested_1500_deep_end_that_conversations_turn(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_model_len=32768)) as srv:  # room for the history with the 3 KB call
        srv.faults = [{"hostile": "deep_arguments"}]
        out = tmp_path / "r"
        code, err = run_full_length(out, srv.url, task="bfcl-multi-turn-base", limit=2)
    assert code == 0, err
    recs = by_doc(out)
    assert recs[0]["status"] != "api_error" and recs[0]["correct"] == {"multi_turn": False}
    assert recs[1]["correct"] == {"multi_turn": True}


def test_8_mb_of_arguments_are_stored_cut_with_a_note(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"hostile": "huge_arguments"}]
        out = tmp_path / "r"
        code, err = run_full_length(out, srv.url, task="bfcl-simple", limit=4)
    assert code == 0, err
    recs = by_doc(out)
    bad = recs[0]
    full = len('{"pad": "') + HUGE_ARGUMENTS_BYTES + len('"}')
    assert bad["status"] == "bad_arguments"
    assert f"{full:,} characters long, more than the 262,144 evalkit decodes" in bad["extraction"]
    args = bad["tool_calls"][0]["arguments"]
    assert args.startswith('{"pad": "xxx') and args.endswith(
        f"[evalkit: {full - MAX_STORED_CHARS:,} of {full:,} characters cut]"
    )
    assert len(args) < MAX_STORED_CHARS + 100
    assert bad["error"] == f"stored cut to 262,144 characters per text: tool_calls[0].arguments ({full:,} characters)"
    assert all(recs[d]["status"] == "ok" and recs[d]["error"] is None for d in (1, 2, 3))
    assert (out / "samples.jsonl").stat().st_size < 1024**2  # the old store: 67 MB for 4 samples
    report = (out / "report.html").read_text()
    assert (out / "report.html").stat().st_size < 2 * 1024**2
    assert "stored cut to 262,144 characters" in json.dumps(sample_data(report))


# -------------------------------------------------------------------------- 18: a replica of another model
def test_a_response_from_another_model_fails_that_request(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [None, {"model": "other-model"}, {"model": "other-model"}, {"model": "other-model"}]
        out = tmp_path / "r"
        code, err = run_full_length(out, srv.url, limit=4)
        assert code == 1 and "1 of 4 requests failed" in err, err
        recs = by_doc(out)
        bad = recs[1]
        assert bad["status"] == "api_error" and bad["attempts"] == 2 and bad["correct"] == {}
        assert "'other-model'" in bad["error"] and "'test-model'" in bad["error"], bad["error"]
        assert "--allow-model-mismatch" in bad["error"]
        assert recs[2]["status"] != "api_error" and recs[2]["attempts"] == 2  # its retry reached a good replica
        assert counts(out, "gsm8k")["api_error"] == 1
        code, err = run_full_length(out, srv.url, limit=4)  # every replica right again: the failed request is answered
    assert code == 0, err
    assert counts(out, "gsm8k")["api_error"] == 0


def test_ids_the_endpoint_lists_are_accepted(tmp_path: Path) -> None:
    """vLLM with --served-model-name primary alias answers a request for ``alias`` naming ``primary``."""
    with TestServer(Behaviour(models=["primary", "alias"])) as srv:
        srv.faults = [{"model": "primary"}] * 3
        code, err = run_full_length(tmp_path / "r", srv.url, "--model", "alias")
    assert code == 0, err
    assert all(r["status"] != "api_error" and r["attempts"] == 1 for r in by_doc(tmp_path / "r").values())


def test_allow_model_mismatch_accepts_any_model(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"model": "other-model"}] * 3
        code, err = run_full_length(tmp_path / "r", srv.url, "--allow-model-mismatch")
        assert code == 0, err
        assert all(r["status"] != "api_error" for r in by_doc(tmp_path / "r").values())
        shown = CliRunner().invoke(app, ["config", "show", "gsm8k", "--endpoint", srv.url, "--allow-model-mismatch"])
    assert shown.exit_code == 0, shown.output
    line = next(ln for ln in shown.output.splitlines() if ln.startswith("allow_model_mismatch "))
    assert line.split()[1:] == ["True", "command", "line"]
    default = CliRunner().invoke(app, ["config", "show", "gsm8k"])
    assert (
        next(ln for ln in default.output.splitlines() if ln.startswith("allow_model_mismatch ")).split()[1] == "False"
    )


# ------------------------------------------------------------------------------------ 19: bounded bodies
BOMB_BYTES = 512 * 1024**2


def test_a_gzip_bomb_on_models_stops_early_with_one_line(tmp_path: Path) -> None:
    gzip_bomb(BOMB_BYTES)  # built (and cached) before memory is traced: ~0.5 MB of gzip
    with TestServer(Behaviour(gzip_bomb={"paths": ["/v1/models"], "bytes": BOMB_BYTES})) as srv:
        tracemalloc.start()
        t0 = time.monotonic()
        try:
            code, err = run_full_length(tmp_path / "r", srv.url)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line and "/models answered more than 16 MiB (decompressed)" in line, err
    assert peak < 200 * 1024**2, f"peak {peak / 1024**2:.0f} MiB"  # the old read: the whole 512 MiB, twice
    assert time.monotonic() - t0 < 30


def test_a_gzip_bomb_on_tokenize_is_read_no_further_than_the_bound() -> None:
    """The clamp's /tokenize read stops at the bound: the prompt's byte count stands in for its length."""
    gzip_bomb(BOMB_BYTES)
    with TestServer(Behaviour(gzip_bomb={"paths": ["/tokenize"], "bytes": BOMB_BYTES})) as srv:
        req = Request(
            task="t", doc_id=0, sample_index=0, prompt="Question: 1+1?\nAnswer:" * 50, gen=GenParams(max_tokens=4000)
        )
        tracemalloc.start()
        try:
            out, clamp = asyncio.run(clamp_max_tokens([req], srv.url, "test-model", "completions", 4096))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert clamp is not None and clamp["prompt_length_from"] == "utf8-bytes"
    assert out[0].gen.max_tokens < 4000
    assert peak < 200 * 1024**2, f"peak {peak / 1024**2:.0f} MiB"


def test_a_stream_past_its_bound_fails_that_request(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"hostile": "flood"}] * 2
        out = tmp_path / "r"
        code, err = run_full_length(out, srv.url, "--max-tokens", "32")
    assert code == 1 and "1 of 3 requests failed" in err, err
    bad = by_doc(out)[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 2 and bad["response"] is None
    assert f"went past {(STREAM_BASE_BYTES + 32 * 4096) / 1024**2:.1f} MiB" in bad["error"], bad["error"]
    assert (out / "samples.jsonl").stat().st_size < 1024**2


def test_a_huge_error_message_is_cut(tmp_path: Path) -> None:
    """A long message is cut to 500 characters; of a 5 MB error body only the first 64 KiB are read (no longer
    JSON then: its start stands for the message)."""
    with TestServer() as srv:
        srv.faults = [{"status": 400, "message": "bad request: " + "x" * n} for n in (20_000, 5_000_000)]
        out = tmp_path / "r"
        code, err = run_full_length(out, srv.url, "--max-error-rate", "1")
    assert code == 0, err
    long, huge = by_doc(out)[0], by_doc(out)[1]
    assert long["status"] == huge["status"] == "api_error"
    assert long["error"].startswith("HTTP 400: bad request: xxx") and len(long["error"]) <= 510, long["error"][:80]
    assert huge["error"].startswith('HTTP 400: {"error":{"message":"bad request: xxx') and len(huge["error"]) <= 510
