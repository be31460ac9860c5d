"""Hostile streams: labelled ways a server breaks the OpenAI event format, chosen per request with the fault
``{"hostile": MODE}`` (see :data:`HOSTILE_MODES`). They apply to streamed responses; ``ping_only`` pings for
the fault's ``stall_s`` seconds (default an hour), or until the client goes away, then closes without a finish.
"""

from __future__ import annotations

from typing import Any

import orjson

_HUGE = "__huge__"  # stands for an integer literal too big for orjson to write
LONG_LINE_BYTES = 20 * 1024**2
PING = b": ping\n\n"
PING_INTERVAL_S = 0.2

_USAGE = {
    "usage_string": "xyz",
    "usage_list": [1, 2, 3],
    "usage_huge": _HUGE,  # 10**30 as a JSON integer (orjson reads it as the float 1e30)
    "usage_huge_float": 1e30,
    "usage_float": 12.5,
    "usage_negative": -40,
}
HOSTILE_MODES: dict[str, str] = {
    **{mode: f"usage.completion_tokens is {value!r}" for mode, value in _USAGE.items()},
    "usage_huge": "usage.completion_tokens is the JSON integer 10^30",
    "reasoning_tokens_string": "usage.completion_tokens_details.reasoning_tokens is 'many'",
    "finish_reason_int": "the final chunk's finish_reason is 7",
    "content_int": "each text-carrying chunk's text (completions) or delta.content (chat) is the integer 7",
    "long_data_line": "a 20 MB `data:` line (valid JSON, no choices) after the first chunk",
    "long_comment_line": "a 20 MB SSE comment line (`: xxx…`) after the first chunk",
    "ping_only": "event-stream headers, then only `: ping` comments, never a data event",
}


def check_mode(mode: Any) -> None:
    if mode not in HOSTILE_MODES:
        raise ValueError(f"unknown hostile mode {mode!r}; known: {sorted(HOSTILE_MODES)}")


def _mutate(mode: str, event: dict[str, Any]) -> None:
    usage = event.get("usage")
    if mode in _USAGE and usage:
        usage["completion_tokens"] = _USAGE[mode]
    elif mode == "reasoning_tokens_string" and usage:
        usage["completion_tokens_details"] = {"reasoning_tokens": "many"}
    for choice in event["choices"]:
        if mode == "finish_reason_int" and choice.get("finish_reason") is not None:
            choice["finish_reason"] = 7
        elif mode == "content_int":
            holder = choice.get("delta", choice)
            key = "content" if "delta" in choice else "text"
            if holder.get(key):
                holder[key] = 7


def encode(mode: str, event: dict[str, Any]) -> bytes:
    """One SSE event for ``event`` (a chunk dict) as the hostile ``mode`` sends it."""
    _mutate(mode, event)
    raw = orjson.dumps(event)
    if mode == "usage_huge":
        raw = raw.replace(orjson.dumps(_HUGE), b"1" + b"0" * 30)
    return b"data: " + raw + b"\n\n"


def extra_line(mode: str) -> bytes:
    """What ``mode`` sends after the first chunk besides the events (b"" for most modes)."""
    if mode == "long_data_line":
        return b'data: {"choices": [], "pad": "' + b"x" * LONG_LINE_BYTES + b'"}\n\n'
    if mode == "long_comment_line":
        return b": " + b"x" * LONG_LINE_BYTES + b"\n\n"
    return b""
