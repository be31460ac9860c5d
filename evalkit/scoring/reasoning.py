"""Separating a reasoning model's thinking from its final answer.

Only the final answer text is ever scored. Reasoning reaches evalkit in one of two ways:

- the server's reasoning parser puts it in a separate field (``reasoning`` / ``reasoning_content`` of the
  OpenAI-compatible response), which the client passes here as ``reasoning``;
- no reasoning parser is configured and the thinking stays inline in ``content`` between ``<think>`` and
  ``</think>``. Chat templates such as DeepSeek-R1's and Qwen3's put the opening ``<think>`` in the prompt,
  so the generated content often holds only the closing ``</think>``; a ``<think>`` that is never closed means
  the generation stopped (or was cut off) while still thinking, so all of it is reasoning and there is no
  answer.
"""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def _join(*parts: str | None) -> str | None:
    kept = [p.strip() for p in parts if p is not None and p.strip()]
    return "\n\n".join(kept) if kept else None


def split_reasoning(
    content: str | None,
    reasoning: str | None,
    *,
    open_tag: str = THINK_OPEN,
    close_tag: str = THINK_CLOSE,
) -> tuple[str, str | None]:
    """``(answer_text, reasoning_text)`` of one response.

    ``content`` is the message content (or completion text); ``reasoning`` is the server's separate reasoning
    field, if any. Rules for inline tags in ``content``:

    - ``…</think>answer`` (with or without an opening ``<think>``): everything before the LAST closing tag is
      reasoning (tags removed), everything after it is the answer;
    - ``<think>…`` never closed: text before the tag is the answer (normally nothing), the rest is reasoning;
    - no tags: all of ``content`` is the answer.

    The answer is stripped of surrounding whitespace and is ``""`` when there is none. The reasoning is the
    server field and any inline reasoning joined by a blank line, or ``None`` when there is neither.
    """
    text = content or ""
    inline: str | None = None
    answer = text
    close_at = text.rfind(close_tag)
    if close_at >= 0:
        inline = text[:close_at].replace(open_tag, "").replace(close_tag, "")
        answer = text[close_at + len(close_tag) :]
    else:
        open_at = text.find(open_tag)
        if open_at >= 0:
            inline = text[open_at + len(open_tag) :].replace(open_tag, "")
            answer = text[:open_at]
    return answer.strip(), _join(reasoning, inline)
