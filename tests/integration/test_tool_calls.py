"""Tool-calling tasks (BFCL): streamed tool-call assembly, statuses and verdicts, the test server's labelled
variants over real HTTP, a whole run with every status, server flags.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_tool_calls.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalkit.client.http_client import Client
from evalkit.config import load_config
from evalkit.contracts import Response
from evalkit.errors import RunError
from evalkit.runner import Runner
from evalkit.store import open_run
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings
from evalkit.testing.server import Behaviour, TestServer

# -------------------------------------------------------------------------------- over HTTP, per variant

VARIANT_OUTCOME = {  # variant -> (status, correct, verdict) for the first bfcl-simple question
    "right": ("ok", True, "match"),
    "wrong_argument": ("ok", False, "wrong_value"),
    "unknown_function": ("ok", False, "unknown_function"),
    "bad_json": ("bad_arguments", False, "bad_arguments"),
    "empty_list": ("tool_calls_empty", False, "no_call"),
    "text": ("tool_text", False, "no_call"),
    "reasoning": ("ok", True, "match"),
    "parallel": ("ok", False, "wrong_count"),
    "no_call": ("no_answer", False, "no_call"),
    "silent": ("empty", False, "no_call"),
}


def test_each_labelled_variant_streams_and_scores_as_labelled() -> None:
    task = Registry().get("bfcl-simple")
    req = task.build_requests(TaskSettings(limit=1))[0]
    with TestServer(Behaviour(tokens_per_chunk=2)) as srv:

        async def ask(variant: str) -> Response:
            srv.behaviour.tool_variant = variant
            async with Client(srv.url, "test-model", kind="chat") as client:
                return await client.generate(req)

        for variant, outcome in VARIANT_OUTCOME.items():
            resp = asyncio.run(ask(variant))
            assert resp.error is None, (variant, resp.error)
            s = task.score(req, resp)
            assert (s.status, s.correct["ast"], (s.extraction or "").split(":")[0]) == outcome, variant
            if resp.tool_calls:
                assert resp.ttft_ms is not None and resp.ttft_ms > 0  # the first tool-call fragment
            if variant == "reasoning":
                assert s.reasoning
        body = srv.requests[-1].body
        assert body["tools"][0]["function"]["name"] == "calculate_triangle_area"
        assert body["tools"][0]["function"]["parameters"]["type"] == "object"
        assert body["tool_choice"] == "auto"


def test_parallel_calls_stream_interleaved_indices() -> None:
    task = Registry().get("bfcl-parallel")
    req = task.build_requests(TaskSettings(limit=1))[0]
    with TestServer(Behaviour()) as srv:

        async def ask() -> Response:
            async with Client(srv.url, "test-model", kind="chat") as client:
                return await client.generate(req)

        resp = asyncio.run(ask())
    assert resp.tool_calls is not None and len(resp.tool_calls) == 2
    assert task.score(req, resp).correct["ast"] is True


# ------------------------------------------------------------------------------------------ whole runs


def run(srv: TestServer, tmp_path, tasks: list[str], **extra):
    cfg = load_config(
        {"tasks": tasks, "endpoint": srv.url, "output_dir": str(tmp_path / "run"), "concurrency": 8, **extra}
    )
    return Runner(cfg).run()


def test_a_run_hits_every_status_and_reports_expected_against_actual(tmp_path) -> None:
    with TestServer(Behaviour(tool_variant="mix")) as srv:
        out = run(srv, tmp_path, ["bfcl-simple", "bfcl-irrelevance"], limit=40)
        short = run(srv, tmp_path / "short", ["bfcl-simple"], limit=10, max_tokens=4)
    counts = out.summary.tasks["bfcl-simple"].counts
    for status in ("ok", "no_answer", "empty", "tool_text", "tool_calls_empty", "bad_arguments"):
        assert counts.get(status, 0) > 0, (status, counts)
    assert short.summary.tasks["bfcl-simple"].counts["truncated"] > 0
    detail = out.summary.tasks["bfcl-simple"].detail
    for verdict in ("match", "no_call", "wrong_value", "unknown_function", "wrong_count", "bad_arguments"):
        assert detail["verdicts"].get(verdict, 0) > 0, (verdict, detail["verdicts"])
    assert "tool-call-parser" in detail["server_hint"]
    irr = out.summary.tasks["bfcl-irrelevance"].detail["verdicts"]
    assert irr["no_call"] > 0 and irr["unexpected_call"] > 0
    samples = [s for s in open_run(tmp_path / "run").samples if s["task"] == "bfcl-simple"]
    right = next(s for s in samples if s["extraction"] == "match" and s["doc_id"] == 0)
    assert json.loads(right["target"])[0]["calculate_triangle_area"]["base"] == [10]  # expected
    assert right["extracted"]["ast"] == "calculate_triangle_area(base=10, height=5, unit='units')"  # actual
    assert right["tool_calls"][0]["name"] == "calculate_triangle_area"
    html = (tmp_path / "run" / "report.html").read_text()
    assert "tool-call parser is likely off or wrong" in html


def test_a_server_without_auto_tool_choice_fails_the_run_with_the_flag_to_set(tmp_path) -> None:
    with TestServer(Behaviour(auto_tool_choice=False)) as srv, pytest.raises(RunError) as err:
        run(srv, tmp_path, ["bfcl-simple"], limit=3)
    assert "3 of 3 requests failed" in str(err.value)
    assert "--enable-auto-tool-choice" in str(err.value)
    samples = open_run(tmp_path / "run").samples
    assert {s["status"] for s in samples} == {"api_error"}


def test_other_tasks_keep_their_records_without_tool_fields(tmp_path, test_server) -> None:
    run(test_server, tmp_path, ["aime25"], limit=1, num_samples=1, max_tokens=64)
    line = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert "tool_calls" not in line
    assert "tools" not in test_server.requests[-1].body


def test_the_gate_fails_a_candidate_whose_parser_drops_calls(tmp_path) -> None:
    from evalkit.gating.gate_runs import run_gate

    with TestServer(Behaviour(tool_variant="right")) as srv:
        run(srv, tmp_path / "base", ["bfcl-simple"], limit=30)
        srv.behaviour.tool_variant = "text"  # the same answers, written as text: a server without a parser
        run(srv, tmp_path / "cand", ["bfcl-simple"], limit=30)
    policy = tmp_path / "gate.yaml"
    policy.write_text("rates: {max_tool_text_rate: 0}\n")
    outcome = run_gate(tmp_path / "base" / "run", tmp_path / "cand" / "run", policy, tmp_path / "gate", env={})
    rule = next(r for r in outcome.result.rules if r.name == "bfcl-simple: unparsed tool-call rate")
    assert rule.verdict == "fail" and outcome.exit_code == 1


def test_max_tokens_is_clamped_to_the_context_left_beside_the_tools(tmp_path) -> None:
    with TestServer(Behaviour(max_model_len=400)) as srv:  # the tools alone take ~100 tokens of it
        out = run(srv, tmp_path, ["bfcl-simple"], limit=3, max_tokens=330)
        sent = [r.body["max_tokens"] for r in srv.requests]
    assert out.summary.tasks["bfcl-simple"].counts["api_error"] == 0
    assert min(sent) < 330
    clamp = out.manifest.tasks["bfcl-simple"].max_tokens_clamp
    assert clamp is not None and clamp["prompt_length_from"] == "tokenize"
