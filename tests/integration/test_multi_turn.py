"""Multi-turn tool calling (BFCL multi_turn_base): BFCL's backends and checker, the conversation runner over
real HTTP (tool results sent back, earlier turns' reasoning dropped or kept), whole runs on the test server."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalkit.client.conversation import converse
from evalkit.client.http_client import Client
from evalkit.config import load_config
from evalkit.contracts import Response
from evalkit.errors import RunError
from evalkit.runner import Runner
from evalkit.store import open_run
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings
from evalkit.testing.server import Behaviour, TestServer
from evalkit.testing.tools import THOUGHT

TASK = "bfcl-multi-turn-base"
WIDE = 65536  # the test server's context: BFCL's function documents and histories take thousands of its tokens


@pytest.fixture(scope="module")
def task():
    return Registry().get(TASK)


# ---------------------------------------------------------------------------------- conversation over HTTP


def converse_once(srv: TestServer, req) -> Response:
    task = Registry().get(TASK)

    async def go() -> Response:
        async with Client(srv.url, "test-model", kind="chat") as client:
            return await converse(client.generate, req, task.tool_executor(req))

    return asyncio.run(go())


def assistant_reasoning(body: dict) -> list[tuple[int, bool]]:
    """(user turn, reasoning_content present) for each assistant message of a request's history."""
    turn, out = 0, []
    for m in body["messages"]:
        if m["role"] == "user":
            turn += 1
        elif m["role"] == "assistant":
            out.append((turn, "reasoning_content" in m))
    return out


@pytest.mark.parametrize("drop", [True, False])
def test_tool_results_go_back_and_earlier_turns_reasoning_is_dropped_or_kept(task, drop) -> None:
    req = task.build_requests(TaskSettings(limit=1, drop_reasoning=drop))[0]
    assert req.conversation is not None and req.conversation.drop_reasoning is drop
    with TestServer(Behaviour(tool_variant="reasoning", max_model_len=WIDE)) as srv:
        resp = converse_once(srv, req)
        bodies = [r.body for r in srv.requests]
    assert resp.error is None
    assert len(resp.turns or []) == 4 and len(bodies) == 8  # each turn: the calls, then "Done." after the results
    users = [t[-1]["content"] for t in (req.messages, *req.conversation.turns)]
    assert [t["user"][-1]["content"] for t in resp.turns or []] == users  # the record holds every user turn
    second = bodies[1]["messages"]  # turn 1, request 2: the calls and their results went back
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool", "tool"]
    assert [c["function"]["name"] for c in second[1]["tool_calls"]] == ["cd", "mkdir", "mv"]
    assert second[2]["tool_call_id"] == second[1]["tool_calls"][0]["id"]
    assert json.loads(second[2]["content"]) == {"current_working_directory": "document"}
    assert assistant_reasoning(bodies[1]) == [(1, True)]  # the current turn's reasoning is always sent back
    last = assistant_reasoning(bodies[-1])  # turn 4, request 2
    assert [t for t, _ in last] == [1, 1, 2, 2, 3, 3, 4]
    assert all(has for t, has in last if t == 4)
    assert all(has is not drop for t, has in last if t < 4)
    sent = json.dumps(bodies[-1]["messages"])
    assert (THOUGHT in sent.split('"role": "user"')[1]) is not drop  # turn 1's reasoning text itself


def test_a_conversation_is_one_sample_with_summed_tokens_and_its_first_ttft(task) -> None:
    req = task.build_requests(TaskSettings(limit=1))[0]
    with TestServer(Behaviour(max_model_len=WIDE, tokens_per_chunk=1)) as srv:
        resp = converse_once(srv, req)
    steps = [s for turn in resp.turns or [] for s in turn["requests"]]
    assert resp.output_tokens == sum(s["output_tokens"] for s in steps)
    assert resp.prompt_tokens == sum(s["prompt_tokens"] for s in steps)
    assert resp.ttft_ms == steps[0]["ttft_ms"]
    assert resp.e2e_ms is not None and resp.e2e_ms >= sum(s["e2e_ms"] for s in steps)
    assert [c["name"] for c in resp.tool_calls or []][:3] == ["cd", "mkdir", "mv"]
    assert task.score(req, resp).correct["multi_turn"] is True


# -------------------------------------------------------------------------------------------- whole runs


def report_messages(run_dir) -> list[list[str]]:
    """Per sample row of the report, the labels of its message blocks."""
    import base64
    import gzip

    from evalkit.reporting.sample_data import sample_section

    data = json.loads(gzip.decompress(base64.b64decode(sample_section(open_run(run_dir)).data)))
    return [[m[0] for m in row.get("m", [])] for row in data["rows"]]


def run(srv: TestServer, tmp_path, **extra):
    cfg = load_config({"tasks": [TASK], "endpoint": srv.url, "output_dir": str(tmp_path / "run"), **extra})
    return Runner(cfg).run()


def test_runs_pass_fail_on_state_and_stop_at_the_step_cap(tmp_path) -> None:
    with TestServer(Behaviour(max_model_len=WIDE)) as srv:
        right = run(srv, tmp_path / "right", limit=12, concurrency=4)
        srv.behaviour.tool_variant = "wrong_argument"
        run(srv, tmp_path / "wrong", limit=1)
        srv.behaviour.tool_variant = "endless"
        run(srv, tmp_path / "endless", limit=1)
    summary = right.summary.tasks[TASK]
    assert summary.metrics["accuracy,multi_turn"].value == 1.0
    assert summary.metrics["accuracy,multi_turn"].n == 12
    assert summary.counts["ok"] == 12
    assert right.manifest.tasks[TASK].settings["drop_reasoning"] is True
    sample = open_run(tmp_path / "right" / "run").samples[0]
    assert sample["extraction"] == "match" and len(sample["turns"]) == 4
    assert sample["turns"][0]["requests"][0]["results"][0] == '{"current_working_directory": "document"}'
    shown = report_messages(tmp_path / "right" / "run")[0]  # the report shows the whole conversation
    assert (
        "turn 1 · tool" in shown
        and "turn 2 · user" in shown
        and shown.index("turn 2 · user") > shown.index("turn 1 · tool")
    )
    bad = open_run(tmp_path / "wrong" / "run").samples[0]  # cd into "document (changed)" fails: mkdir lands at root
    assert bad["correct"]["multi_turn"] is False and bad["extraction"].startswith("state_mismatch: turn 1")
    cap = open_run(tmp_path / "endless" / "run").samples[0]
    assert cap["extraction"].startswith("force_terminated") and len(cap["turns"]) == 1
    assert len(cap["turns"][0]["requests"]) == 21  # BFCL's loop: stops once more than 20 requests called tools
    assert "more than 20 requests called tools" in cap["error"]


def test_keep_reasoning_is_recorded_and_a_failed_request_fails_the_sample(tmp_path) -> None:
    with TestServer(Behaviour(max_model_len=WIDE)) as srv:
        srv.faults = [None, {"status": 400, "message": "context too long"}]
        with pytest.raises(RunError, match="1 of 1 requests failed"):
            run(srv, tmp_path, limit=1, concurrency=1, drop_reasoning=False)
    manifest = open_run(tmp_path / "run").manifest
    assert manifest["tasks"][TASK]["settings"]["drop_reasoning"] is False
    failed = open_run(tmp_path / "run").samples[0]
    assert failed["status"] == "api_error"
    assert failed["error"].startswith("turn 1, request 2: HTTP 400: context too long")
    assert len(failed["turns"][0]["requests"]) == 2  # the requests so far are kept


def test_every_request_of_a_conversation_fits_the_context_as_its_history_grows(tmp_path) -> None:
    """A 4096-token context: the first requests (2,172-3,564 tokens of the test server's) fit with max_tokens cut
    once, but each tool result lengthens the history; every request is cut to fit, none is refused with a 400."""
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        out = run(srv, tmp_path, limit=3, warmup=0, concurrency=1)
        bodies = [r.body for r in srv.requests if r.path.endswith("/chat/completions")]
    summary = out.summary.tasks[TASK]
    assert summary.counts["ok"] == 3 and summary.counts["api_error"] == 0
    clamp = out.manifest.tasks[TASK].max_tokens_clamp
    assert clamp is not None and clamp["requests_clamped"] > 3  # requests after the first of a conversation too
    samples = open_run(tmp_path / "run").samples
    steps = [r for s in samples for t in s["turns"] for r in t["requests"]]
    assert len(steps) == len(bodies) == 26  # one request each, none refused and sent again
    assert all(r["prompt_tokens"] + b["max_tokens"] <= 4096 for r, b in zip(steps, bodies, strict=True))


def test_the_command_keeps_reasoning_when_asked(tmp_path) -> None:
    import subprocess
    import sys

    with TestServer(Behaviour(tool_variant="reasoning", max_model_len=WIDE)) as srv:
        p = subprocess.run(
            [sys.executable, "-m", "evalkit.cli", "run", TASK, "--endpoint", srv.url, "--limit", "1",
             "--keep-reasoning", "--output-dir", str(tmp_path / "run"), "--no-report"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        last = srv.requests[-1].body
    assert p.returncode == 0, p.stderr
    assert open_run(tmp_path / "run").manifest["tasks"][TASK]["settings"]["drop_reasoning"] is False
    assert all(has for _, has in assistant_reasoning(last))


def test_calls_whose_arguments_are_not_json_end_the_turn_unexecuted(task) -> None:
    req = task.build_requests(TaskSettings(limit=1))[0]
    executed: list = []
    answers = [
        Response(text="", tool_calls=[{"id": "a", "name": "ls", "arguments": ""}], finish_reason="tool_calls"),
        Response(text="", tool_calls=[{"id": "b", "name": "ls", "arguments": "[1]"}], finish_reason="tool_calls"),
    ]

    async def send(r):
        return answers[len(executed) % 2] if not executed.append(r) else None

    resp = asyncio.run(converse(send, req, lambda calls: pytest.fail(f"executed {calls}")))
    assert [len(t["requests"]) for t in resp.turns or []] == [1, 1, 1, 1]  # one request per turn, nothing run
    assert all(t["requests"][0]["results"] is None for t in resp.turns or [])
