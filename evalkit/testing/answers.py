"""Deterministic text for the test server: tokenization, the GSM8K / AIME answer policy, filler text.

Everything here is pure (no I/O besides reading the bundled task data once) so it can be unit-tested and
reused by tests that need to predict what the server will say.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from evalkit.tasks.catalogue import builtin_tasks_dir

TOKEN_RE = re.compile(r"\s*\S+")
_PIECE_RE = re.compile(r"\s*\S+|\s+")
_QUESTION_RE = re.compile(r"Question:[ \t]*(.*?)\s*\nAnswer:", re.S)
_Q_RE = re.compile(r"(?:^|\n)Q:[ \t]*(.*?)\s*\nA:", re.S)
_FINAL_RE = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)\s*$")
_WS_RE = re.compile(r"\s+")

_WORDS = (
    "the", "model", "considers", "each", "quantity", "in", "turn", "and", "writes", "a", "short",
    "note", "about", "what", "it", "has", "found", "so", "far", "before", "moving", "on", "to",
    "check", "next", "value", "against", "previous", "result", "which", "keeps", "every", "step",
    "clear", "simple", "careful", "steady", "number", "total", "part", "remainder", "sum",
    "product", "difference", "ratio", "answer",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------- tokens


def count_tokens(text: str) -> int:
    """Number of tokens in ``text``: a token is a run of non-space characters with its leading whitespace."""
    return len(TOKEN_RE.findall(text))


def split_tokens(text: str) -> list[str]:
    """``text`` split into tokens whose concatenation is ``text`` (trailing whitespace is its own token)."""
    return _PIECE_RE.findall(text)


GEN = "<|assistant|>\n"  # the generation prompt that ends a rendered chat


def render_chat(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
    """The test server's "chat template": what ``usage.prompt_tokens`` is counted on for chat requests (the
    tools, when a request has them, as JSON in front of the messages)."""
    head = f"<|tools|>\n{json.dumps(tools)}\n" if tools else ""
    parts = [f"<|{m.get('role', 'user')}|>\n{message_text(m)}\n" for m in messages]
    return head + "".join(parts) + GEN


def message_text(message: dict[str, Any]) -> str:
    """Text of a chat message whose content is a string or a list of ``{"type": "text"}`` parts."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return message_text(m)
    return message_text(messages[-1]) if messages else ""


# ------------------------------------------------------------------------------------------------ data


def data_dir() -> Path | None:
    """The built-in catalogue's ``data/`` folder (:func:`evalkit.tasks.catalogue.builtin_tasks_dir`)."""
    data = builtin_tasks_dir() / "data"
    return data if data.is_dir() else None


def _norm(text: str) -> str:
    return _WS_RE.sub(" ", text).strip()


@dataclass(frozen=True)
class _Data:
    gsm_list: tuple[tuple[str, str], ...]  # (question, answer) in file order
    gsm: dict[str, int]  # normalized question -> index in gsm_list
    aime: tuple[tuple[str, str, str], ...]  # (id, normalized problem, answer)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@lru_cache(maxsize=1)
def load_data() -> _Data:
    root = data_dir()
    gsm_rows = _read_jsonl(root / "gsm8k" / "test.jsonl") if root else []
    aime_rows = _read_jsonl(root / "aime25" / "aime25.jsonl") if root else []
    gsm_list = tuple((str(r["question"]), str(r["answer"])) for r in gsm_rows)
    gsm = {_norm(q): i for i, (q, _) in enumerate(gsm_list)}
    aime = tuple((str(r["id"]), _norm(str(r["problem"])), str(r["answer"]).strip()) for r in aime_rows)
    return _Data(gsm_list=gsm_list, gsm=gsm, aime=aime)


# ---------------------------------------------------------------------------------------------- policy


def stable_bucket(key: str) -> int:
    """0..999 from sha256(key): the stable hash behind every "correct or not" decision."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:12], 16) % 1000


def is_correct(key: str, correct_ratio: float) -> bool:
    return stable_bucket(key) < round(max(0.0, min(1.0, correct_ratio)) * 1000)


def wrong_number(gold: str) -> str:
    """A different number than ``gold`` (kept in the same style)."""
    plain = gold.replace(",", "")
    try:
        return str(int(plain) + 1)
    except ValueError:
        try:
            return repr(float(plain) + 1.0)
        except ValueError:
            return gold + "1"


def corrupt_solution(solution: str) -> str:
    """The GSM8K solution with its final ``#### N`` changed to a wrong number."""
    m = _FINAL_RE.search(solution)
    if not m:
        return solution.rstrip() + "\n#### 0"
    return solution[: m.start(1)] + wrong_number(m.group(1)) + solution[m.end(1) :]


def extract_question(prompt: str) -> str | None:
    """The last ``Question: X\\nAnswer:`` (or ``Q: X\\nA:``) question of a prompt."""
    for rx in (_QUESTION_RE, _Q_RE):
        found = rx.findall(prompt)
        if found:
            # ``.*?`` may have swallowed earlier shots when the question text was empty: keep the tail.
            q = found[-1]
            if "Question:" in q:
                q = q.rsplit("Question:", 1)[-1]
            return q.strip()
    return None


def find_gsm8k(prompt: str, *, whole_text_ok: bool) -> int | None:
    data = load_data()
    q = extract_question(prompt)
    if q is not None:
        idx = data.gsm.get(_norm(q))
        if idx is not None:
            return idx
    if whole_text_ok:
        return data.gsm.get(_norm(prompt))
    return None


def find_aime(prompt: str) -> int | None:
    text = _norm(prompt)
    for i, (_, problem, _) in enumerate(load_data().aime):
        if problem and problem in text:
            return i
    return None


def hash_words(seed: str, n: int) -> list[str]:
    """``n`` pseudo-random words derived from sha256(seed)."""
    out: list[str] = []
    counter = 0
    while len(out) < n:
        digest = hashlib.sha256(f"{seed}\x00{counter}".encode()).digest()
        out.extend(_WORDS[b % len(_WORDS)] for b in digest)
        counter += 1
    return out[:n]


def unknown_text(prompt: str) -> str:
    words = hash_words("text:" + prompt, 40)
    sentences = [" ".join(words[i : i + 10]) for i in range(0, len(words), 10)]
    return ". ".join(s[:1].upper() + s[1:] for s in sentences) + "."


def filler(seed: str) -> str:
    """``\\n\\nQuestion: ...\\nAnswer: ...``: what a base model rambles on with after its answer."""
    data = load_data()
    if data.gsm_list:
        q, a = data.gsm_list[stable_bucket("filler:" + seed) % len(data.gsm_list)]
        return f"\n\nQuestion: {q}\nAnswer: {a}"
    return "\n\nQuestion: What is 2 + 3?\nAnswer: 2 + 3 = 5\n#### 5"


def aime_text(problem_id: str, number: str) -> str:
    return (
        f"We work through problem {problem_id} step by step, checking each case.\n"
        f"Collecting the cases, the requested quantity equals {number}.\n"
        f"Therefore, the final answer is \\boxed{{{number}}}"
    )


def default_answer(prompt: str, *, chat: bool, correct_ratio: float, variant: str = "") -> str:
    """The default policy (see the module docstring of :mod:`evalkit.testing.server`).

    ``prompt`` is the completions prompt or the last user message; ``variant`` is mixed into the
    correctness hash when sampling (temperature > 0) so that different samples can differ.
    """
    if "\\boxed" in prompt:
        idx = find_aime(prompt)
        if idx is not None:
            pid, problem, gold = load_data().aime[idx]
            ok = is_correct(problem + variant, correct_ratio)
            return aime_text(pid, gold if ok else wrong_number(gold))
        if chat:
            number = str(stable_bucket("aime:" + prompt + variant))
            return aime_text("unknown", number)
    idx = find_gsm8k(prompt, whole_text_ok=chat)
    if idx is not None:
        question, solution = load_data().gsm_list[idx]
        text = solution if is_correct(question + variant, correct_ratio) else corrupt_solution(solution)
        lead = "" if chat else " "
        return lead + text + filler(question)
    return (" " if not chat else "") + unknown_text(prompt) + filler(prompt)


def endless_tokens(seed: str) -> Iterator[str]:
    """Tokens to continue with once the text is exhausted and ``ignore_eos`` is set."""
    counter = 0
    while True:
        for w in hash_words(f"more:{seed}:{counter}", 32):
            yield " " + w
        counter += 1
