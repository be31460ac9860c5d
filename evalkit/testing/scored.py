"""The test server's language model for scored requests (``prompt_logprobs``): deterministic logprobs of a
prompt's positions and a greedy continuation, in vLLM's answer shape, with perturbations of known size.

Tokens: a prompt is split as ``usage`` counts it (:data:`evalkit.testing.answers.TOKEN_RE`: a run of non-space
characters with its leading whitespace), each piece's id ``crc32(piece) % VOCAB`` (also what ``POST /tokenize``
returns); a chat request's prompt is its rendered messages (``add_generation_prompt: false`` leaves the
generation prompt off).

The model: the distribution of the token after a prefix depends only on the prefix's ids (a running CRC-32 of
them seeds a generator). It puts logits ``N(0, LOGIT_SD)`` on :data:`CANDIDATES` candidate ids drawn from the
vocabulary and :data:`REST_LOGIT` on every other id; logprobs are exact over the whole vocabulary
(``log Z = logsumexp(candidates, REST_LOGIT + log(VOCAB - CANDIDATES))``). The greedy continuation follows the
top candidate; a generated id's text is ``" w<id>"``.

Perturbations (``Behaviour`` fields, settable at runtime like the other behaviours): ``logit_scale`` multiplies
every logit (the candidates' and the rest's), as a sampling temperature of ``1/scale`` would;
``logit_noise`` adds ``N(0, logit_noise)`` to each candidate logit before normalising, drawn afresh for each
request (run-to-run noise) or, with ``logit_noise_seed`` set, from a generator seeded by it and the prefix
(the same noise on every request). Both are 0 / 1 by default: the same text always gets the same numbers.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalkit.testing.answers import GEN, TOKEN_RE, render_chat

VOCAB = 100_000
CANDIDATES = 32
LOGIT_SD = 2.0
REST_LOGIT = -6.0
_ID = struct.Struct("<i")
_fresh = np.random.default_rng()


def token_id(piece: str) -> int:
    """The test server's id of a token's text."""
    return zlib.crc32(piece.encode()) % VOCAB


def piece_text(tid: int) -> str:
    """The text of a generated (candidate) id."""
    return f" w{tid}"


def prompt_text(body: dict[str, Any], chat: bool) -> str | None:
    """The text a request's prompt is tokenised from: a completions ``prompt`` string, or the rendered
    ``messages`` (without the generation prompt when ``add_generation_prompt`` is false); None otherwise."""
    if chat or isinstance(body.get("messages"), list):
        msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        text = render_chat(msgs, tools)
        return text if body.get("add_generation_prompt", True) else text[: -len(GEN)]
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else None


@dataclass(frozen=True)
class Perturbation:
    """How a server's logits differ from the model's (see the module docstring)."""

    scale: float = 1.0
    noise: float = 0.0
    noise_seed: int | None = None


def distribution(prefix_hash: int, pert: Perturbation) -> tuple[np.ndarray, np.ndarray, float]:
    """The next token's candidates after a prefix: (ids, logprobs), and the logprob of any other id."""
    rng = np.random.default_rng(prefix_hash)
    ids = np.unique(rng.integers(0, VOCAB, CANDIDATES))
    logits: np.ndarray = np.asarray(rng.normal(0.0, LOGIT_SD, ids.shape[0]), dtype=np.float64)
    if pert.noise:
        noise_rng = _fresh if pert.noise_seed is None else np.random.default_rng([pert.noise_seed, prefix_hash])
        logits = logits + noise_rng.normal(0.0, pert.noise, ids.shape[0])
    logits = logits * pert.scale
    rest = REST_LOGIT * pert.scale
    top = max(float(logits.max()), rest)
    log_z = top + math.log(float(np.exp(logits - top).sum()) + (VOCAB - ids.shape[0]) * math.exp(rest - top))
    return np.asarray(ids), logits - log_z, rest - log_z


def _step(h: int, tid: int) -> int:
    return zlib.crc32(_ID.pack(tid), h)


def _entries(ids: np.ndarray, lps: np.ndarray, rest: float, actual: int | None, k: int, text: str) -> dict[str, Any]:
    """One position as vLLM writes it: the actual token first when it is outside the top ``k``, then the top
    ``k`` in rank order (token id text -> logprob, rank, decoded token)."""
    order = np.argsort(-lps, kind="stable")
    top = [(int(ids[i]), float(lps[i]), r + 1) for r, i in enumerate(order[:k])]
    out: dict[str, Any] = {}
    if actual is not None and actual not in {t for t, _, _ in top}:
        where = np.nonzero(ids == actual)[0]
        lp = float(lps[where[0]]) if where.size else rest
        out[str(actual)] = {"logprob": lp, "rank": 1 + int((lps > lp).sum()), "decoded_token": text}
    for tid, lp, rank in top:
        out[str(tid)] = {"logprob": lp, "rank": rank, "decoded_token": piece_text(tid)}
    return out


def scored_fields(body: dict[str, Any], chat: bool, pert: Perturbation, max_tokens: int) -> dict[str, Any] | None:
    """For a request with ``prompt_logprobs``: ``prompt_token_ids``, ``prompt_logprobs``, the greedy
    continuation's ``token_ids`` (``max_tokens`` of them) and its ``text`` (one token longer, so that the answer
    ends with ``finish_reason`` length as a model that never ends does), and ``logprobs`` (vLLM's completions
    shape, when the request asks for ``logprobs``); None for other requests."""
    k = body.get("prompt_logprobs")
    if k is None:
        return None
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError("`prompt_logprobs` must be a non-negative integer")
    text = prompt_text(body, chat)
    if text is None:
        raise ValueError("`prompt_logprobs` needs a string `prompt` or `messages` on the evalkit test server")
    pieces = TOKEN_RE.findall(text)
    ids = [token_id(p) for p in pieces]
    h = 0
    positions: list[dict[str, Any] | None] = [None] if ids else []
    for i, tid in enumerate(ids):
        if i:
            cand, lps, rest = distribution(h, pert)
            positions.append(_entries(cand, lps, rest, tid, k, pieces[i]))
        h = _step(h, tid)
    gen_k = body.get("logprobs")
    gen_k = gen_k if isinstance(gen_k, int) and not isinstance(gen_k, bool) else None
    out_ids: list[int] = []
    lp_tokens: list[str] = []
    lp_values: list[float] = []
    lp_tops: list[dict[str, float]] = []
    for _ in range(max_tokens + 1):  # one past max_tokens: the plan ends with finish_reason length (no EOS)
        cand, lps, rest = distribution(h, pert)
        best = int(np.argmax(lps))
        tid = int(cand[best])
        out_ids.append(tid)
        if gen_k is not None:
            lp_tokens.append(piece_text(tid))
            lp_values.append(float(lps[best]))
            order = np.argsort(-lps, kind="stable")[: max(gen_k, 1)]
            lp_tops.append({piece_text(int(cand[i])): float(lps[i]) for i in order})
        h = _step(h, tid)
    logprobs = None
    if gen_k is not None:
        offsets = [sum(len(t) for t in lp_tokens[:i]) for i in range(len(lp_tokens))]
        logprobs = {
            "text_offset": offsets[:max_tokens], "token_logprobs": lp_values[:max_tokens],
            "tokens": lp_tokens[:max_tokens], "top_logprobs": lp_tops[:max_tokens],
        }  # fmt: skip
    return {
        "prompt_token_ids": ids,
        "prompt_logprobs": positions,
        "token_ids": out_ids[:max_tokens],
        "text": "".join(piece_text(t) for t in out_ids),
        "logprobs": logprobs,
    }
