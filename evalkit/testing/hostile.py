"""Hostile streams: labelled ways a server breaks the OpenAI event format (:data:`HOSTILE_MODES`) or sends
well-formed streams bigger than evalkit takes (:data:`OVERSIZED_MODES`), chosen per request with the fault
``{"hostile": MODE}``. They apply to streamed responses; ``ping_only`` pings for the fault's ``stall_s`` seconds
(default an hour), or until the client goes away, then closes without a finish. The ``*_arguments`` modes apply to
chat answers with tool calls (the first call's arguments are replaced).

:func:`gzip_bomb` is the body ``Behaviour.gzip_bomb`` answers its paths with: a small gzip that decompresses to
the given size.
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Any

import orjson

_HUGE = "__huge__"  # stands for an integer literal too big for orjson to write
LONG_LINE_BYTES = 20 * 1024**2
FLOOD_BYTES = 24 * 1024**2
DEEP_LEVELS = 1500
DEEP_ARGUMENTS = '{"x": ' + "[" * DEEP_LEVELS + "]" * DEEP_LEVELS + "}"  # 3 KB
HUGE_ARGUMENTS_BYTES = 8 * 1024**2
PIECE_BYTES = 64 * 1024  # an SSE line of the flood and huge_arguments modes
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
# well-formed streams past what evalkit reads, decodes or stores (evalkit.limits)
OVERSIZED_MODES: dict[str, str] = {
    "flood": "24 MB of text events after the first chunk (64 KiB of text each, as `text` and `delta.content`)",
    "deep_arguments": "the first tool call's arguments are a JSON object nesting lists 1,500 deep (3 KB)",
    "huge_arguments": "the first tool call's arguments are an 8 MB JSON object, sent in 64 KiB fragments",
}


def check_mode(mode: Any) -> None:
    if mode not in HOSTILE_MODES and mode not in OVERSIZED_MODES:
        raise ValueError(f"unknown hostile mode {mode!r}; known: {sorted({**HOSTILE_MODES, **OVERSIZED_MODES})}")


def _mutate_arguments(mode: str, choice: dict[str, Any]) -> None:
    """The first call's arguments as ``mode`` sends them: all of them in its first fragment (deep) or its
    opening (huge: the rest follows in :func:`extra_line`); its later fragments carry none."""
    for frag in (choice.get("delta") or {}).get("tool_calls") or []:
        fn = frag.get("function")
        if frag.get("index", 0) != 0 or not isinstance(fn, dict) or "arguments" not in fn:
            continue
        if not frag.get("id"):
            fn["arguments"] = ""
        else:
            fn["arguments"] = DEEP_ARGUMENTS if mode == "deep_arguments" else '{"pad": "'


def _mutate(mode: str, event: dict[str, Any]) -> None:
    usage = event.get("usage")
    if mode in _USAGE and usage:
        usage["completion_tokens"] = _USAGE[mode]
    elif mode == "reasoning_tokens_string" and usage:
        usage["completion_tokens_details"] = {"reasoning_tokens": "many"}
    for choice in event["choices"]:
        if mode.endswith("_arguments"):
            _mutate_arguments(mode, choice)
        elif mode == "finish_reason_int" and choice.get("finish_reason") is not None:
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
    if mode == "flood":
        event = {"choices": [{"index": 0, "text": "x" * PIECE_BYTES, "delta": {"content": "x" * PIECE_BYTES}}]}
        return (b"data: " + orjson.dumps(event) + b"\n\n") * (FLOOD_BYTES // (2 * PIECE_BYTES))
    if mode == "huge_arguments":

        def piece(args: str) -> bytes:
            frag = {"index": 0, "function": {"arguments": args}}
            return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [frag]}}]}) + b"\n\n"

        return piece("x" * PIECE_BYTES) * (HUGE_ARGUMENTS_BYTES // PIECE_BYTES) + piece('"}')
    return b""


@lru_cache(maxsize=4)
def gzip_bomb(size: int) -> bytes:
    """A gzip body (~1/1000 of ``size``) that decompresses to ``size`` bytes: the opening of a JSON model list,
    then spaces."""
    head = b'{"object": "list", "data": ['
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [z.compress(head)]
    block = b" " * (1024**2)
    left = size - len(head)
    while left > 0:
        parts.append(z.compress(block[: min(left, len(block))]))
        left -= len(block)
    parts.append(z.flush())
    return b"".join(parts)
