"""Tool-calling tasks (BFCL): streamed tool-call assembly, statuses and verdicts, the test server's labelled
variants over real HTTP, a whole run with every status, server flags."""

from __future__ import annotations

import pytest

from evalkit.client.tool_stream import ToolCallAssembler
from evalkit.config import ServerConfig
from evalkit.scoring.tool_calls import score_tool_answer
from evalkit.server.launch import build_argv

AREA = {
    "name": "calculate_triangle_area",
    "parameters": {
        "type": "dict",
        "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}, "unit": {"type": "string"}},
        "required": ["base", "height"],
    },
}
AREA_TRUTH = [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]


def call(name: str, args: str) -> dict:
    return {"id": "c", "name": name, "arguments": args}


def score(calls, text="", finish="tool_calls", category="simple", reasoning=None):
    truth = None if category == "irrelevance" else AREA_TRUTH
    return score_tool_answer(category, [AREA], truth, text, reasoning, calls, finish)


# ------------------------------------------------------------------------------------------ assembly


def test_fragments_assemble_as_vllm_streams_them() -> None:
    tc = ToolCallAssembler()
    assert tc.calls() is None  # no tool_calls field at all
    head = {"index": 0, "id": "chatcmpl-tool-1", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert tc.feed([head]) is True
    assert tc.feed([{"index": 1, "id": "t2", "function": {"name": "g"}}]) is True  # a parallel call starts
    assert tc.feed([{"index": 0, "function": {"arguments": '{"x": '}}]) is True
    assert tc.feed([{"index": 1, "function": {"arguments": "{}"}}]) is True
    assert tc.feed([{"index": 0, "function": {"arguments": "1}"}}]) is True
    assert tc.calls() == [
        {"id": "chatcmpl-tool-1", "name": "f", "arguments": '{"x": 1}'},
        {"id": "t2", "name": "g", "arguments": "{}"},
    ]


def test_an_empty_list_is_seen_and_malformed_fragments_are_refused() -> None:
    tc = ToolCallAssembler()
    assert tc.feed([]) is False
    assert tc.calls() == []
    with pytest.raises(ValueError, match="not a list"):
        ToolCallAssembler().feed({"index": 0})
    with pytest.raises(ValueError, match="named 'f' and then 'g'"):
        t = ToolCallAssembler()
        t.feed([{"index": 0, "function": {"name": "f"}}])
        t.feed([{"index": 0, "function": {"name": "g"}}])


# ------------------------------------------------------------------------------------ statuses, verdicts


@pytest.mark.parametrize(
    ("calls", "text", "finish", "status", "correct", "verdict"),
    [
        ([call("calculate_triangle_area", '{"base": 10, "height": 5}')], "", "tool_calls", "ok", True, "match"),
        ([call("calculate_triangle_area", '{"base": 11, "height": 5}')], "", "tool_calls", "ok", False, "wrong_value"),
        ([call("calculate_triangle_area", '{"base": "10", "height": 5}')], "", "tool_calls", "ok", False, "wrong_type"),
        ([call("calculate_triangle_area", '{"base": 10}')], "", "tool_calls", "ok", False, "missing_argument"),
        ([call("area", '{"base": 10, "height": 5}')], "", "tool_calls", "ok", False, "unknown_function"),
        (
            [call("calculate_triangle_area", '{"base": 10, "height": 5}')] * 2,
            "",
            "tool_calls",
            "ok",
            False,
            "wrong_count",
        ),
        (
            [call("calculate_triangle_area", '{"base": 10, "height"')],
            "",
            "tool_calls",
            "bad_arguments",
            False,
            "bad_arguments",
        ),
        ([], "", "tool_calls", "tool_calls_empty", False, "no_call"),
        (None, "", "tool_calls", "tool_calls_empty", False, "no_call"),
        (
            None,
            '<tool_call>{"name": "calculate_triangle_area", "arguments": {}}</tool_call>',
            "stop",
            "tool_text",
            False,
            "no_call",
        ),
        (None, "calculate_triangle_area(base=10, height=5, unit='units')", "stop", "tool_text", False, "no_call"),
        (None, "[calculate_triangle_area(base=10, height=5)]", "stop", "tool_text", False, "no_call"),
        (None, "```python\ncalculate_triangle_area(base=10, height=5)\n```", "stop", "tool_text", False, "no_call"),
        (None, "The area is 25.", "stop", "no_answer", False, "no_call"),
        (None, "Use this:\n```python\ncalculate_triangle_area(10, 5)\n```", "stop", "no_answer", False, "no_call"),
        (None, "", "stop", "empty", False, "no_call"),
        (None, "The area is", "length", "truncated", False, "no_call"),
    ],
)
def test_status_and_verdict(calls, text, finish, status, correct, verdict) -> None:
    s = score(calls, text, finish)
    assert (s.status, s.correct["ast"], (s.extraction or "").split(":")[0]) == (status, correct, verdict)


def test_irrelevance_is_right_without_a_decodable_call() -> None:
    assert score(None, "I cannot do that.", "stop", "irrelevance").correct["ast"] is True
    assert score(None, "I cannot do that.", "stop", "irrelevance").status == "ok"
    wrong = score([call("calculate_triangle_area", "{}")], category="irrelevance")
    assert (wrong.status, wrong.correct["ast"], wrong.extraction) == ("ok", False, "unexpected_call")


def test_reasoning_before_the_call_is_kept_apart() -> None:
    s = score([call("calculate_triangle_area", '{"base": 10, "height": 5}')], "<think>base 10</think>")
    assert (s.status, s.correct["ast"], s.reasoning, s.answer) == ("ok", True, "base 10", "")


# ---------------------------------------------------------------------------------------------- flags


def test_serve_flags_for_tool_calling() -> None:
    cfg = ServerConfig(model="m", enable_auto_tool_choice=True, tool_call_parser="hermes")
    argv = build_argv(cfg, 8000, launcher="module")
    assert "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    with pytest.raises(ValueError, match="needs tool_call_parser"):
        ServerConfig(model="m", enable_auto_tool_choice=True)
