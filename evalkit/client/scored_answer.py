"""The answer to a scored request (:attr:`evalkit.contracts.GenParams.scored`): one JSON body, not a stream.

vLLM sends the logprobs of a prompt's positions (``prompt_logprobs``, or ``echo`` with ``logprobs``) only without
streaming, so such a request is sent with ``"stream": false`` and ``"return_token_ids": true`` and its answer is
read here: the first choice's text and finish reason, the usage, and its ``prompt_token_ids``,
``prompt_logprobs``, ``token_ids`` and ``logprobs`` as the server sent them (what a task reads them for is the
task's business). There is no TTFT or ITL: the whole answer arrives at once, so its latency is its E2E time.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

from evalkit.limits import STREAM_BYTES_PER_TOKEN

LOGPROB_FIELDS = ("prompt_token_ids", "prompt_logprobs", "token_ids", "logprobs")
SCORED_BASE_BYTES = 64 * 1024**2  # a scored answer's body: this much (top-K per prompt position) ...


def max_scored_bytes(max_tokens: int) -> int:
    """The most evalkit reads of a scored answer: a long prompt's top-K logprobs, plus what ``max_tokens`` adds."""
    return SCORED_BASE_BYTES + STREAM_BYTES_PER_TOKEN * max(max_tokens, 0)


class MalformedAnswer(ValueError):
    """The body is not a completion answer; the message says what is wrong."""


@dataclass
class ScoredAnswer:
    text: str
    finish_reason: str
    usage: Any
    logprobs: dict[str, Any]


def read_scored_answer(raw: bytes, model: str, accepted: Collection[str] | None) -> ScoredAnswer:
    """The first choice of a (non-streamed) completion answer; MalformedAnswer when it is not one, or when it
    names a model outside ``accepted`` (None: any)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise MalformedAnswer(f"malformed answer from server: {e}") from None
    if not isinstance(body, dict):
        raise MalformedAnswer("malformed answer from server: not a JSON object")
    named = body.get("model")
    if accepted is not None and named is not None and (not isinstance(named, str) or named not in accepted):
        raise MalformedAnswer(
            f"model mismatch: the response came from model {named!r}, not the run's model {model!r} (nor an id "
            "the endpoint lists); a replica behind the endpoint serves another model (fix it, or pass "
            "--allow-model-mismatch)"
        )
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedAnswer("malformed answer from server: no choices")
    choice = choices[0]
    text = choice.get("text")
    if text is None and isinstance(choice.get("message"), dict):  # a chat answer
        text = choice["message"].get("content")
    finish = choice.get("finish_reason")
    if not isinstance(text, str | None) or not isinstance(finish, str):
        raise MalformedAnswer("malformed answer from server: the choice's text or finish_reason is not a string")
    logprobs = {key: choice[key] for key in LOGPROB_FIELDS if choice.get(key) is not None}
    for key in ("prompt_logprobs", "prompt_token_ids"):  # vLLM's chat answer carries them beside the choices
        if key not in logprobs and body.get(key) is not None:
            logprobs[key] = body[key]
    return ScoredAnswer(text=text or "", finish_reason=finish, usage=body.get("usage"), logprobs=logprobs)
