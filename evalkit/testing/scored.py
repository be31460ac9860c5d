"""The test server's language model for scored requests (``prompt_logprobs``, or ``echo`` with ``logprobs``):
deterministic logprobs of a prompt's positions and a greedy continuation, in vLLM's answer shape, with
perturbations of known size. An ``echo`` request's prompt may be token ids (each id's text ``" w<id>"``).

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


def _prompt_ids(body: dict[str, Any], chat: bool, why: str) -> tuple[list[int], list[str]]:
    """The prompt's token ids and their texts: an ``echo`` request's prompt given as token ids (each id's text
    :func:`piece_text`; lm-eval's loglikelihood requests), else the prompt's text split as ``/tokenize`` splits
    it. A batch of one prompt of token ids (``[[ids]]``, as lm-eval's local-completions sends) is that prompt."""
    raw = body.get("prompt")
    if why == "echo" and isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], list):
        raw = raw[0]
    if (
        why == "echo"
        and not chat
        and isinstance(raw, list)
        and raw
        and all(isinstance(x, int) and not isinstance(x, bool) for x in raw)
    ):
        return list(raw), [piece_text(x) for x in raw]
    text = prompt_text(body, chat)
    if text is None:
        raise ValueError(
            f"`{why}` needs a string `prompt` or `messages` (token ids with `echo`) on the evalkit test server"
        )
    pieces = TOKEN_RE.findall(text)
    return [token_id(p) for p in pieces], pieces


def _k(body: dict[str, Any], key: str) -> int | None:
    k = body.get(key)
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
        raise ValueError(f"`{key}` must be a non-negative integer")
    return k


def scored_fields(body: dict[str, Any], chat: bool, pert: Perturbation, max_tokens: int) -> dict[str, Any] | None:
    """For a request with ``prompt_logprobs``, or a completions request with ``echo`` and ``logprobs``:
    ``prompt_token_ids``, ``prompt_logprobs``, the greedy continuation's ``token_ids`` (``max_tokens`` of them)
    and its ``text`` (one token longer, so that the answer ends with ``finish_reason`` length as a model that
    never ends does), and ``logprobs`` (vLLM's completions shape, when the request asks for ``logprobs``; with
    ``echo`` over the prompt's tokens, the first one's logprob null, then the generated ones); None for other
    requests."""
    k, gen_k = _k(body, "prompt_logprobs"), _k(body, "logprobs")
    echo = not chat and body.get("echo") is True and gen_k is not None
    if k is None and not echo:
        return None
    ids, pieces = _prompt_ids(body, chat, "prompt_logprobs" if k is not None else "echo")
    k = gen_k if k is None else k  # echo: vLLM answers the prompt's logprobs with the request's logprobs
    assert k is not None
    h = 0
    positions: list[dict[str, Any] | None] = [None] if ids else []
    echoed: list[tuple[str, float | None, dict[str, float] | None]] = [(pieces[0], None, None)] if ids else []
    for i, tid in enumerate(ids):
        if i:
            cand, lps, rest = distribution(h, pert)
            positions.append(_entries(cand, lps, rest, tid, k, pieces[i]))
            if echo:
                entries = _entries(cand, lps, rest, tid, max(k, 1), pieces[i])
                actual = entries[str(tid)]["logprob"] if str(tid) in entries else rest
                top = {e["decoded_token"]: e["logprob"] for e in entries.values()}
                echoed.append((pieces[i], actual, top))
        h = _step(h, tid)
    out_ids: list[int] = []
    generated: list[tuple[str, float | None, dict[str, float] | None]] = []
    for _ in range(max_tokens + 1):  # one past max_tokens: the plan ends with finish_reason length (no EOS)
        cand, lps, rest = distribution(h, pert)
        best = int(np.argmax(lps))
        tid = int(cand[best])
        out_ids.append(tid)
        if gen_k is not None:
            order = np.argsort(-lps, kind="stable")[: max(gen_k, 1)]
            generated.append(
                (piece_text(tid), float(lps[best]), {piece_text(int(cand[i])): float(lps[i]) for i in order})
            )
        h = _step(h, tid)
    logprobs = None
    if gen_k is not None:
        rows = [*(echoed if echo else []), *generated[:max_tokens]]
        offsets = [sum(len(t) for t, _, _ in rows[:i]) for i in range(len(rows))]
        logprobs = {
            "text_offset": offsets, "token_logprobs": [lp for _, lp, _ in rows],
            "tokens": [t for t, _, _ in rows], "top_logprobs": [top for _, _, top in rows],
        }  # fmt: skip
    text = "".join(piece_text(t) for t in out_ids)
    if echo and isinstance(body.get("prompt"), str):  # vLLM echoes a text prompt before the generated text
        text = body["prompt"] + text
    return {
        "prompt_token_ids": ids,
        "prompt_logprobs": positions,
        "token_ids": out_ids[:max_tokens],
        "text": text,
        "logprobs": logprobs,
    }
