"""Turning an answer text into what a server would emit: stop strings, max_tokens, chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal

from evalkit.testing.answers import endless_tokens, split_tokens


@dataclass
class Step:
    """One streamed chunk of one choice: ``ntokens`` tokens whose text is ``text``."""

    kind: Literal["reasoning", "content"]
    text: str
    ntokens: int


@dataclass
class ChoicePlan:
    index: int
    text: str  # final content (after stop / length cuts)
    reasoning: str | None
    finish_reason: str  # "stop" | "length"
    stop_reason: str | None  # the stop string that ended the text, if any
    completion_tokens: int  # reasoning + content tokens generated
    steps: list[Step] = field(default_factory=list)


def _group(kind: Literal["reasoning", "content"], pieces: list[str], k: int) -> list[Step]:
    return [Step(kind, "".join(pieces[i : i + k]), len(pieces[i : i + k])) for i in range(0, len(pieces), k)]


def _cut_content(tokens: Iterable[str], budget: int, stops: list[str]) -> tuple[str, list[str], str, str | None]:
    """Walk ``tokens`` until a stop string appears, ``budget`` tokens are used, or tokens run out.

    Returns (text, pieces, finish_reason, stop_reason); ``pieces`` has one entry per generated token and
    joins to ``text`` (pieces past a stop string are cut, possibly to "").
    """
    stops = [s for s in stops if s]
    maxlen = max((len(s) for s in stops), default=0)
    acc = ""
    raw: list[str] = []
    finish, stop_reason = "stop", None
    cut_at: int | None = None
    for tok in tokens:
        if len(raw) >= budget:
            finish = "length"
            break
        prev_len = len(acc)
        acc += tok
        raw.append(tok)
        if stops:
            start = max(0, prev_len - maxlen + 1)
            best: tuple[int, str] | None = None
            for s in stops:
                pos = acc.find(s, start)
                if pos >= 0 and (best is None or pos < best[0]):
                    best = (pos, s)
            if best is not None:
                cut_at, stop_reason = best
                break
    # tokens ran out: end of sequence, finish_reason "stop" (the implicit EOS costs no token)
    text = acc if cut_at is None else acc[:cut_at]
    pieces: list[str] = []
    pos = 0
    for tok in raw:
        end = min(pos + len(tok), len(text))
        pieces.append(text[pos:end] if pos < len(text) else "")
        pos += len(tok)
    return text, pieces, finish, stop_reason


def plan_choice(
    index: int,
    full_text: str,
    *,
    reasoning: str | None,
    max_tokens: int,
    stops: list[str],
    tokens_per_chunk: int = 1,
    ignore_eos: bool = False,
    seed: str = "",
) -> ChoicePlan:
    """What one choice generates: ``reasoning`` tokens first (not subject to stop strings), then content."""
    k = max(1, int(tokens_per_chunk))
    r_pieces = split_tokens(reasoning) if reasoning else []
    steps: list[Step] = []
    r_text: str | None = None
    if r_pieces:
        r_pieces = r_pieces[:max_tokens]
        r_text = "".join(r_pieces)
        steps.extend(_group("reasoning", r_pieces, k))
    budget = max_tokens - len(r_pieces)
    tokens: Iterator[str] = iter(split_tokens(full_text))
    if ignore_eos:
        tokens = chain(tokens, endless_tokens(seed))
    if budget > 0:
        text, pieces, finish, stop_reason = _cut_content(tokens, budget, stops)
    else:
        text, pieces, finish, stop_reason = "", [], "length", None
    steps.extend(_group("content", pieces, k))
    if not steps:  # nothing generated at all (empty answer): one empty final chunk
        steps.append(Step("content", "", 0))
    return ChoicePlan(
        index=index,
        text=text,
        reasoning=r_text,
        finish_reason=finish,
        stop_reason=stop_reason,
        completion_tokens=len(r_pieces) + len(pieces),
        steps=steps,
    )
