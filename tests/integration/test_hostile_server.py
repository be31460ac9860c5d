"""A hostile server, end to end through ``evalkit run``: each malformed stream of the test server's
``{"hostile": MODE}`` faults becomes that request's ``api_error`` (or a scored sample whose unreadable usage is
ignored with a note), never the run's end; the run writes its summary and report, exits as
``--max-error-rate`` says, and the same command resumes it. A server that only sends ``: ping`` comments is
abandoned after ``--idle-timeout``, not after the total timeout."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.testing.server import TestServer

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


def run(out: Path, url: str, *extra: str, task: str = "gsm8k", limit: int = 3) -> tuple[int, str, float]:
    """``evalkit run`` in-process, one request at a time (faults hit requests in doc order), with the report."""
    fixed = ["--max-tokens", "32", "--concurrency", "1", "--num-samples", "1", "--max-attempts", "2", "-q"]
    args = ["run", task, "--endpoint", url, "--limit", str(limit), "-o", str(out), *fixed, *extra]
    t0 = time.monotonic()
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr, time.monotonic() - t0


def by_doc(out: Path) -> dict[int, dict[str, Any]]:
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {r["doc_id"]: r for r in recs}  # the last record of a doc wins, as on resume


def task_summary(out: Path, task: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())["tasks"][task]
    return summary


def assert_written(out: Path, task: str) -> dict[str, Any]:
    """summary.json and report.html are there, and no speed figure is negative, infinite or absurd."""
    assert (out / "report.html").stat().st_size > 0
    s = task_summary(out, task)
    for key in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s"):
        value = s["speed"][key]
        assert value is None or (math.isfinite(value) and 0 <= value < 1e7), (key, value)
    return s


@pytest.fixture
def server() -> Any:
    with TestServer() as srv:
        yield srv


# ------------------------------------------------------------------------------- unreadable usage: a note
@pytest.mark.parametrize("task", ["gsm8k", "aime25"])
@pytest.mark.parametrize("mode", sorted(USAGE_MODES))
def test_bad_usage_is_ignored_with_a_note(tmp_path: Path, server: TestServer, mode: str, task: str) -> None:
    server.faults = [{"hostile": mode}]
    out = tmp_path / "r"
    code, err, _ = run(out, server.url, task=task)
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

    sent = len(server.requests)
    server.faults = [{"hostile": mode}]
    code, err, _ = run(out, server.url, task=task)  # resumes: everything is done, nothing is sent
    assert code == 0, err
    assert len(server.requests) == sent


# ----------------------------------------------------------------------- unreadable stream: api_error
@pytest.mark.parametrize(
    ("mode", "task"),
    [(m, "gsm8k") for m in sorted(FAILING_MODES)] + [("content_int", "aime25"), ("finish_reason_int", "aime25")],
)
def test_unreadable_stream_is_that_requests_api_error(tmp_path: Path, server: TestServer, mode: str, task: str) -> None:
    server.faults = [{"hostile": mode}] * 2  # both attempts of the first request
    out = tmp_path / "r"
    code, err, _ = run(out, server.url, task=task)
    assert code == 1 and "1 of 3 requests failed" in err, err
    recs = by_doc(out)
    bad = recs[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 2 and bad["correct"] == {}
    assert "malformed" in bad["error"] and FAILING_MODES[mode] in bad["error"], bad["error"]
    assert all(recs[d]["status"] != "api_error" and recs[d]["error"] is None for d in (1, 2))
    s = assert_written(out, task)
    assert s["counts"]["api_error"] == 1 and s["counts"]["total"] == 3

    sent = len(server.requests)
    server.faults = [{"hostile": mode}] * 2
    code, err, _ = run(out, server.url, task=task)  # resumes: only the failed request is sent again (twice)
    assert code == 1 and "1 of 3 requests failed" in err, err
    assert [r.prompt for r in server.requests[sent:]] == [server.requests[0].prompt] * 2
    assert_written(out, task)

    code, err, _ = run(out, server.url, task=task)  # a healthy server: the failed request is answered
    assert code == 0, err
    assert task_summary(out, task)["counts"]["api_error"] == 0


# ------------------------------------------------------------------------------- pings are not progress
def test_ping_only_stream_fails_at_the_ttft_timeout(tmp_path: Path, server: TestServer) -> None:
    """A stream of ``: ping`` comments and no data event is abandoned at --ttft-timeout (pings are not a first
    event), not after the stream's 15 s, and not re-sent into the server's queue. Pings once tokens flow meet the
    idle timeout: tests/test_queueing.py."""
    server.faults = [{"hostile": "ping_only", "stall_s": 15}]
    out = tmp_path / "r"
    code, err, elapsed = run(out, server.url, "--ttft-timeout", "1", "--max-error-rate", "0.5", limit=2)
    assert code == 0, err
    bad = by_doc(out)[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 1
    assert "no data event" in bad["error"] and "(1 s" in bad["error"], bad["error"]
    first, second = server.requests[:2]
    assert first.aborted and second.prompt != first.prompt and not second.aborted
    assert 0.95 <= second.time - first.time < 3.0  # the first request was given up after ~1 s of pings
    assert elapsed < 12
    assert_written(out, "gsm8k")


# ---------------------------------------------------------------------------------- lm-eval's LM class
def test_lm_class_survives_a_hostile_stream(server: TestServer) -> None:
    """lm-eval's path (evalkit.client.lm_eval_model.EvalkitLM -> execute -> Client): bad usage is a note, a
    malformed event is retried, and what came back is the answer text."""
    from evalkit.client.lm_eval_model import EvalkitLM

    server.faults = [{"hostile": "usage_list"}, {"hostile": "content_int"}]
    lm = EvalkitLM(base_url=server.url, num_concurrent=1)
    inst = [SimpleNamespace(args=(f"Question: What is {i}+1?\nAnswer:", {"until": ["\n\n"]})) for i in range(2)]
    texts = lm.generate_until(inst)
    assert len(texts) == 2 and all(texts)
    first, second = lm.responses
    assert first.output_tokens is None and first.note is not None and "completion_tokens" in first.note
    assert second.attempts == 2 and second.error is None and isinstance(second.output_tokens, int)
