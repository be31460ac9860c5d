"""Reads of an answer's fields besides its text: its ``Retry-After`` header, its usage counts against the lengths
the request asked for exactly (the client's note on the sample)."""

from __future__ import annotations

from typing import Any

from evalkit.contracts import Request


def length_note(req: Request, counts: dict[str, int | None]) -> str | None:
    """What differs between the usage's counts and the lengths a request asked for exactly: its prompt's token ids
    (``prompt_ids``) and, when its output length is forced (``min_tokens`` = ``max_tokens``), its output; None when
    nothing does (or the usage has no count)."""
    out: list[str] = []
    prompt, output = counts["prompt_tokens"], counts["completion_tokens"]
    if req.prompt_ids is not None and prompt is not None and prompt != len(req.prompt_ids):
        out.append(f"usage counts {prompt} prompt tokens for {len(req.prompt_ids)} prompt token ids sent")
    g = req.gen
    if g.min_tokens is not None and g.min_tokens == g.max_tokens and output is not None and output != g.max_tokens:
        out.append(f"usage counts {output} output tokens, {g.max_tokens} asked exactly (min_tokens = max_tokens)")
    return "; ".join(out) or None


def retry_after(headers: Any) -> float | None:
    """The seconds an answer's ``Retry-After`` header asks to wait (None: none, or not a number of seconds)."""
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
