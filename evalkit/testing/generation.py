"""Turning an answer text into what a server would emit: stop strings, max_tokens, chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any, Literal

from evalkit.testing.answers import endless_tokens, split_tokens


@dataclass
class Step:
    """One streamed chunk of one choice: ``ntokens`` tokens whose text is ``text``; a ``tool`` step carries one
    ``delta.tool_calls`` fragment in ``tool`` (None: an empty ``tool_calls`` list)."""

    kind: Literal["reasoning", "content", "tool"]
    text: str
    ntokens: int
    tool: dict[str, Any] | None = None


@dataclass
class ChoicePlan:
    index: int
    text: str  # final content (after stop / length cuts)
    reasoning: str | None
    finish_reason: str  # "stop" | "length"
    stop_reason: str | None  # the stop string that ended the text, if any
    completion_tokens: int  # reasoning + content tokens generated
    steps: list[Step] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] | None = None  # complete calls (non-streamed responses), OpenAI's shape


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
    min_tokens: int = 0,
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
    pieces_of_text = split_tokens(full_text)
    tokens: Iterator[str] = iter(pieces_of_text)
    if ignore_eos:
        tokens = chain(tokens, endless_tokens(seed))
    elif min_tokens > len(r_pieces) + len(pieces_of_text):  # vLLM's min_tokens: no EOS before that many tokens
        tokens = chain(tokens, islice(endless_tokens(seed), min_tokens - len(r_pieces) - len(pieces_of_text)))
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


def plan_tool_choice(
    index: int,
    text: str,
    calls: list[tuple[str, str]],
    *,
    reasoning: str | None,
    max_tokens: int,
    finish: str | None,
    tokens_per_chunk: int = 1,
    call_id: str = "",
) -> ChoicePlan:
    """A tool-calling answer as vLLM streams it: reasoning, text, then per call a fragment with its id and name
    (one token) followed by fragments of its arguments; ``finish_reason`` ``tool_calls`` when there are calls
    (or ``finish`` says so: then an empty ``tool_calls`` list ends the stream), ``length`` at ``max_tokens``."""
    k = max(1, int(tokens_per_chunk))
    plan = plan_choice(index, text, reasoning=reasoning, max_tokens=max_tokens, stops=[], tokens_per_chunk=k)
    if plan.finish_reason == "length" or not (calls or finish):
        return plan
    steps = [st for st in plan.steps if st.text or st.kind == "reasoning"]
    used = plan.completion_tokens
    complete: list[dict[str, Any]] = []
    cut = False
    for i, (name, args) in enumerate(calls):
        if used >= max_tokens:
            cut = True
            break
        cid = f"chatcmpl-tool-{call_id}{index}{i}"
        head = {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
        steps.append(Step("tool", name, 1, head))
        used += 1
        pieces = split_tokens(args)
        room = max_tokens - used
        if len(pieces) > room:
            pieces, cut = pieces[:room], True
        for j in range(0, len(pieces), k):
            part = "".join(pieces[j : j + k])
            steps.append(Step("tool", part, len(pieces[j : j + k]), {"index": i, "function": {"arguments": part}}))
        used += len(pieces)
        complete.append({"id": cid, "type": "function", "function": {"name": name, "arguments": "".join(pieces)}})
        if cut:
            break
    if not calls:
        steps.append(Step("tool", "", 0, None))
    plan.steps = steps or [Step("content", "", 0)]
    plan.finish_reason = "length" if cut else "tool_calls"
    plan.completion_tokens = used
    plan.tool_calls = complete
    return plan
