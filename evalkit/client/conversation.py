"""A multi-turn conversation (``Request.conversation``) sent through the one client.

For each user turn (after the first, once the conversation's ``think_s`` seconds have passed since the last answer)
the user's messages are appended to the history and the chat request is sent with the tools; while the answer calls
tools, the calls run against the sample's backends (a :class:`evalkit.contracts.ToolExecutor` the task gives;
without one, an answer's calls end the turn), the assistant message (``content``, ``tool_calls``, and
``reasoning_content`` when the server sent reasoning) and one ``tool`` message per result are appended, and the
request is sent again. A turn ends at an answer without calls or whose calls' arguments are not JSON objects (BFCL's
loop, ``base_handler``); a turn in which more than ``max_steps`` requests called tools stops the whole conversation
(BFCL's force-quit: the sample then has fewer turns than its ground truth). With ``drop_reasoning`` (the default)
the reasoning of the assistant messages of earlier turns is removed from the history when a new user turn starts, as
DeepSeek-V3.2's inference guide asks (within a turn, the reasoning of its earlier requests is sent back).

One conversation is one sample: its Response sums the requests' token counts, ``attempts`` and ``retry_lost_s``
and keeps, per user turn, its messages and each request in ``turns`` (``[{"user": [...], "requests": [...]}]``).
Timings:
``ttft_ms`` is the first request's TTFT (when the user first sees tokens); ``e2e_ms`` runs from the first request
sent to the last answer, tool execution and the gaps between requests included; ``tpot_ms`` is the requests'
decode time (each one's ``e2e - ttft``) over their output tokens after the first of each; ``itl_ms`` holds the
gaps within each request (never between two requests). A request that fails (after the client's retries) fails
the sample, with the turn and request named and the requests so far in ``turns``.

The history grows with every request, so each request is fitted to the server's context before it is sent
(``fit``: :func:`evalkit.client.clamp.clamp_max_tokens` over that one request, its ``max_tokens`` lowered so
that the history and the answer fit ``max_model_len``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from evalkit.contracts import Request, Response, ToolExecutor
from evalkit.limits import loads_arguments

Send = Callable[[Request], Awaitable[Response]]
Fit = Callable[[Request], Awaitable[Request]]


def _step(resp: Response, results: list[str] | None) -> dict[str, Any]:
    return {
        "text": resp.text, "reasoning": resp.reasoning, "finish_reason": resp.finish_reason,
        "tool_calls": resp.tool_calls, "results": results, "prompt_tokens": resp.prompt_tokens,
        "output_tokens": resp.output_tokens, "ttft_ms": resp.ttft_ms, "e2e_ms": resp.e2e_ms,
    }  # fmt: skip


def _decoded(calls: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls as ``(name, arguments)``; None when an ``arguments`` is not a JSON object, ``""`` included, or is
    too long or deep to decode (the turn ends: BFCL's decoding fails on it, and the scorer leaves that request
    out)."""
    out = []
    for c in calls:
        raw = c.get("arguments")
        args, why = loads_arguments(raw) if isinstance(raw, str) else (raw, None)
        if why is not None or not isinstance(args, dict):
            return None
        out.append((str(c.get("name")), args))
    return out


def _assistant(resp: Response, calls: list[dict[str, Any]]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": resp.text or ""}
    if calls:
        msg["tool_calls"] = [
            {"id": c.get("id") or f"call_{i}", "type": "function",
             "function": {"name": c.get("name"), "arguments": c.get("arguments") or ""}}
            for i, c in enumerate(calls)
        ]  # fmt: skip
    if resp.reasoning:
        msg["reasoning_content"] = resp.reasoning
    return msg


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def merge(steps: list[Response], turns: list[dict[str, Any]], error: str | None, note: str | None) -> Response:
    """One Response for the conversation's requests (see the module docstring for the timings)."""
    first, last = steps[0], steps[-1]
    decode_ms = tokens = 0.0
    for s in steps:
        if s.ttft_ms is not None and s.e2e_ms is not None and s.output_tokens and s.output_tokens > 1:
            decode_ms += s.e2e_ms - s.ttft_ms
            tokens += s.output_tokens - 1
    e2e = None
    if first.start_s is not None and last.start_s is not None and last.e2e_ms is not None:
        e2e = (last.start_s - first.start_s) * 1000.0 + last.e2e_ms
    notes = [n for n in (*(s.note for s in steps), note) if n]
    reasoning = [s.reasoning for s in steps if s.reasoning]
    return Response(
        text=None if error else last.text,
        reasoning="\n\n".join(reasoning) if reasoning else None,
        finish_reason=None if error else last.finish_reason,
        error=error,
        note="; ".join(notes) if notes else None,
        http_status=last.http_status,
        attempts=sum(s.attempts for s in steps),
        prompt_tokens=_sum([s.prompt_tokens for s in steps]),
        output_tokens=_sum([s.output_tokens for s in steps]),
        reasoning_tokens=_sum([s.reasoning_tokens for s in steps]),
        ttft_ms=first.ttft_ms,
        tpot_ms=decode_ms / tokens if tokens else None,
        e2e_ms=e2e,
        itl_ms=[gap for s in steps for gap in s.itl_ms],
        start_s=first.start_s,
        retry_lost_s=sum(lost) if (lost := [s.retry_lost_s for s in steps if s.retry_lost_s is not None]) else None,
        endpoint=first.endpoint,
        tool_calls=[c for s in steps for c in (s.tool_calls or [])],
        turns=turns,
    )


async def converse(send: Send, req: Request, execute: ToolExecutor | None, fit: Fit | None = None) -> Response:
    """Run ``req``'s conversation (see the module docstring); ``send`` is the client's ``generate``, ``execute``
    runs tool calls (None: no tools), ``fit`` (if given) fits each request to the server's context before it is
    sent."""
    conv = req.conversation
    assert conv is not None, "converse needs a Request with a conversation"
    history: list[dict[str, Any]] = []
    steps: list[Response] = []
    turns: list[dict[str, Any]] = []
    user_turns = (req.messages or (), *conv.turns)
    for t, user in enumerate(user_turns):
        if t and conv.think_s > 0:
            await asyncio.sleep(conv.think_s)
        if conv.drop_reasoning:
            for m in history:
                m.pop("reasoning_content", None)
        history.extend(dict(m) for m in user)
        turn: list[dict[str, Any]] = []
        turns.append({"user": [dict(m) for m in user], "requests": turn})
        called = 0
        while True:
            step = replace(req, messages=tuple(history))
            resp = await send(await fit(step) if fit is not None else step)
            steps.append(resp)
            if resp.error is not None:
                turn.append(_step(resp, None))
                return merge(steps, turns, f"turn {t + 1}, request {len(turn)}: {resp.error}", None)
            calls = resp.tool_calls or []
            history.append(_assistant(resp, calls))
            decoded = _decoded(calls) if calls and execute is not None else None
            if not decoded or execute is None:
                turn.append(_step(resp, None))
                break
            results = execute(decoded)
            turn.append(_step(resp, results))
            for call, result in zip(history[-1]["tool_calls"], results, strict=True):
                history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            called += 1
            if called > conv.max_steps:
                stop = f"stopped in turn {t + 1} of {len(user_turns)}: more than {conv.max_steps} requests called tools"
                return merge(steps, turns, None, stop)
    return merge(steps, turns, None, None)
