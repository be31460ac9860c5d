"""What identifies a request across runs (its key) and the record stored for it."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from evalkit.contracts import Request, Response, SampleRecord, Score
from evalkit.limits import MAX_STORED_CHARS, cap_texts


def request_key(model: str, kind: str, task: str, version: str, data_sha: dict[str, str], req: Request) -> str:
    """Identity of a request: same key = same answer expected, so a completed key is never sent again."""
    parts: list[Any] = [
        model,
        kind,
        task,
        version,
        data_sha,
        req.prompt,
        req.messages,
        req.gen.as_dict(),
        req.doc_id,
        req.sample_index,
    ]
    if req.prompt_ids is not None:  # requests sent as token ids only, so that other requests keep their keys
        parts.append(list(req.prompt_ids))
    if req.tools is not None:  # tool-calling requests only, so that other requests keep their keys
        parts += [req.tools, req.tool_choice]
    if req.conversation is not None:  # multi-turn requests only
        c = req.conversation
        parts += [c.turns, c.drop_reasoning, c.max_steps]
    blob = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


# the fields of a record that hold what the server sent (or what was computed from it): each of their texts is
# stored cut to MAX_STORED_CHARS
SERVER_FIELDS = ("response", "reasoning", "tool_calls", "turns", "extracted", "extraction", "error")


def _capped(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with every text of SERVER_FIELDS cut to MAX_STORED_CHARS (each cut marked in the text), and the
    cuts named in ``error`` (the sample's note)."""
    cuts: list[str] = []
    for name in SERVER_FIELDS:
        if fields.get(name) is not None:
            fields[name] = cap_texts(fields[name], name, cuts)
    if cuts:
        note = f"stored cut to {MAX_STORED_CHARS:,} characters per text: {', '.join(cuts)}"
        fields["error"] = f"{fields['error']}; {note}" if fields.get("error") else note
    return fields


def record_for(req: Request, resp: Response, key: str, score: Score | None) -> SampleRecord:
    """The record stored for a request: its answer and timings, with its score (None: the request failed).
    Texts longer than MAX_STORED_CHARS are stored cut, and the record's ``error`` says which."""
    base: dict[str, Any] = dict(
        key=key,
        task=req.task,
        doc_id=req.doc_id,
        sample_index=req.sample_index,
        prompt=req.prompt,
        messages=list(req.messages) if req.messages else None,
        response=resp.text,
        reasoning=resp.reasoning,
        finish_reason=resp.finish_reason,
        attempts=resp.attempts,
        target=req.target,
        prompt_tokens=resp.prompt_tokens,
        output_tokens=resp.output_tokens,
        reasoning_tokens=resp.reasoning_tokens,
        ttft_ms=resp.ttft_ms,
        tpot_ms=resp.tpot_ms,
        e2e_ms=resp.e2e_ms,
        itl_ms=resp.itl_ms,
        start_s=resp.start_s,
        retry_lost_s=resp.retry_lost_s,
        scheduled_s=resp.scheduled_s,
        endpoint=resp.endpoint,
        tool_calls=resp.tool_calls,
        turns=resp.turns,
    )
    if resp.error is not None or score is None:
        return SampleRecord(**_capped({**base, "error": resp.error}), status="api_error")
    if score.answer is not None:
        base["response"] = score.answer
    if score.reasoning is not None:
        base["reasoning"] = score.reasoning
    scored = {**base, "error": resp.note, "extracted": score.extracted, "extraction": score.extraction}
    if score.figures is not None:
        scored["figures"] = score.figures
    return SampleRecord(**_capped(scored), status=score.status, correct=score.correct)
