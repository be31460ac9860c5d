"""Keep ``prompt + max_tokens`` within the server's ``max_model_len`` so no request is refused with a 400.

Prompt lengths come from vLLM's ``POST /tokenize`` (exact, chat template included). Where a server has no
``/tokenize`` (or whose answer is not a count, or longer than ``MAX_BODY_BYTES``), the prompt's UTF-8 byte count
plus a margin for the chat template stands in: a BPE token is at least one byte, so the bound never undercounts.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp
import orjson

from evalkit.config.endpoint import credentials, server_root
from evalkit.contracts import Request
from evalkit.limits import BodyTooLarge
from evalkit.server.http_reads import read_capped

TEMPLATE_MARGIN = 64  # tokens a chat template may add around the messages


async def _count_tokens(
    session: aiohttp.ClientSession, root: str, model: str, req: Request, kind: str, headers: dict[str, str]
) -> int | None:
    body: dict[str, Any] = {"model": model}
    if kind == "chat":
        body["messages"] = list(req.messages) if req.messages else [{"role": "user", "content": req.prompt}]
        body["add_generation_prompt"] = True
        if req.tools is not None:  # the chat template renders the tools into the prompt
            body["tools"] = list(req.tools)
    else:
        body["prompt"] = req.prompt
    try:
        async with session.post(
            root + "/tokenize",
            json=body,
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=30),
        ) as r:
            if r.status != 200:
                return None
            data = orjson.loads(await read_capped(r))
            return int(data["count"])
    except (aiohttp.ClientError, asyncio.TimeoutError, BodyTooLarge, KeyError, ValueError, TypeError):
        return None


def _key(req: Request) -> str:
    return repr((req.prompt, req.messages, req.tools))


def _byte_bound(req: Request) -> int:
    text = "".join(m.get("content", "") for m in req.messages) if req.messages else req.prompt
    tools = len(orjson.dumps(req.tools)) if req.tools is not None else 0
    return len(text.encode("utf-8")) + tools + TEMPLATE_MARGIN


async def clamp_max_tokens(
    requests: list[Request],
    base_url: str,
    model: str,
    kind: str,
    max_model_len: int | None,
    api_key: str | None = None,
) -> tuple[list[Request], dict[str, Any] | None]:
    """Requests with ``max_tokens`` lowered where needed (``min_tokens`` with it, never above it), and a record of
    what was clamped (None if nothing)."""
    if not max_model_len:
        return requests, None
    # a prompt sent as token ids was cut to its length by its task (lm-eval's max_length): nothing to count
    need = [r for r in requests if r.prompt_ids is None and r.gen.max_tokens + _byte_bound(r) > max_model_len]
    if not need:
        return requests, None
    headers = credentials(base_url, api_key)[1]
    counts: dict[str, int] = {}
    method = "tokenize"
    async with aiohttp.ClientSession() as session:
        unique = {_key(r): r for r in need}
        sem = asyncio.Semaphore(16)

        async def one(key: Any, r: Request) -> None:
            nonlocal method
            async with sem:
                n = await _count_tokens(session, server_root(base_url), model, r, kind, headers)
            if n is None:
                method = "utf8-bytes"
                n = _byte_bound(r)
            counts[key] = n

        await asyncio.gather(*(one(k, r) for k, r in unique.items()))
    out, clamped, lowest = [], 0, None
    for r in requests:
        n = counts.get(_key(r))
        if n is not None and r.gen.max_tokens + n > max_model_len:
            allowed = max(1, max_model_len - n)
            least = None if r.gen.min_tokens is None else min(r.gen.min_tokens, allowed)  # never above max_tokens
            r = dataclasses.replace(r, gen=dataclasses.replace(r.gen, max_tokens=allowed, min_tokens=least))
            clamped += 1
            lowest = allowed if lowest is None else min(lowest, allowed)
        out.append(r)
    if not clamped:
        return out, None
    requested = max(r.gen.max_tokens for r in need)
    return out, {
        "max_model_len": max_model_len,
        "requested_max_tokens": requested,
        "requests_clamped": clamped,
        "lowest_max_tokens": lowest,
        "prompt_length_from": method,
    }


def merge_clamps(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """One record for requests clamped in batches (prompts streamed as they are built)."""
    if a is None or b is None:
        return a or b
    return {
        "max_model_len": a["max_model_len"],
        "requested_max_tokens": max(a["requested_max_tokens"], b["requested_max_tokens"]),
        "requests_clamped": a["requests_clamped"] + b["requests_clamped"],
        "lowest_max_tokens": min(a["lowest_max_tokens"], b["lowest_max_tokens"]),
        "prompt_length_from": "utf8-bytes"
        if "utf8-bytes" in (a["prompt_length_from"], b["prompt_length_from"])
        else a["prompt_length_from"],
    }
