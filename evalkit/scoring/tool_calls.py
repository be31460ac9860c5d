"""Scoring one tool-calling answer: what went wrong (the sample's status) and whether the calls are right
(BFCL's AST checker, :mod:`evalkit.scoring.bfcl_ast`).

Statuses (the server's or the format's problems, each flagged apart and never hidden in the score):

- ``tool_calls_empty``: ``finish_reason`` is ``tool_calls`` but the list of calls is empty or missing;
- ``bad_arguments``: a call's ``arguments`` is not a JSON object (or is too long or too deeply nested to decode:
  :func:`evalkit.limits.loads_arguments`);
- ``tool_text``: no call was parsed but the text looks like one (markup such as ``<tool_call>``, a JSON object
  with ``name`` and ``arguments``, or an answer that opens with ``offered_function(``): the server's tool-call
  parser is off or wrong;
- ``truncated`` (``finish_reason`` length), ``empty`` (no call, no text), ``no_answer`` (text but no call where
  one was expected), else ``ok``.

The verdict follows BFCL for a model behind an OpenAI-style function-calling API: the calls are decoded as
``{name: json.loads(arguments)}`` (one undecodable call makes the whole answer undecodable); in ``irrelevance``
an answer is right when it holds no decodable call; elsewhere the decoded calls go through the AST checker.
``Score.extraction`` names the verdict (``match``, ``no_call``, ``unexpected_call``, ``unknown_function``,
``wrong_function``, ``wrong_count``, ``wrong_type``, ``wrong_value``, ``missing_argument``,
``unexpected_argument``, ``bad_arguments``) followed by BFCL's message.
"""

from __future__ import annotations

import re
from typing import Any

from evalkit.contracts import Score, Status
from evalkit.limits import loads_arguments
from evalkit.scoring.bfcl_ast import api_name, check
from evalkit.scoring.reasoning import split_reasoning

KEY = "ast"  # key of Score.extracted / Score.correct
IRRELEVANCE = "irrelevance"
CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", IRRELEVANCE)
_MARKUP = (
    "<tool_call>", "</tool_call>", "<function=", "<|python_tag|>", "[TOOL_CALLS]", "<tool_calls>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜DSML｜", "functools[",
)  # fmt: skip
_OPENING = r"\s*(?:```[\w]*\s*)?\[?\s*"  # what may come before a call written as the whole answer
_JSON_CALL = re.compile(r"\"name\"\s*:\s*\"[^\"]+\"\s*,\s*\"(?:arguments|parameters)\"\s*:", re.S)
_ERROR_KINDS = (
    ("wrong_func_name", "wrong_function"),
    ("wrong_count", "wrong_count"),
    ("type_error", "wrong_type"),
    ("missing_required", "missing_argument"),
    ("missing_optional", "missing_argument"),
    ("unexpected_param", "unexpected_argument"),
)


def looks_like_call(text: str, names: list[str]) -> bool:
    """Whether ``text`` holds what a tool-call parser should have turned into a call: tool-call markup or a JSON
    object with ``name`` and ``arguments`` anywhere, or an answer that opens with ``offered_function(`` (bare,
    in brackets or in a code fence; prose that shows code calling the function further on is not a call)."""
    if any(m in text for m in _MARKUP) or _JSON_CALL.search(text):
        return True
    return any(re.match(_OPENING + re.escape(n) + r"\s*\(", text) for n in names)


def decode(calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]] | None, str | None]:
    """``[{name: arguments}]`` as BFCL decodes function-calling output, or (None, why) when a call's arguments
    are not a JSON object."""
    out: list[dict[str, Any]] = []
    for c in calls:
        raw = c.get("arguments")
        name = str(c.get("name"))[:100] if c.get("name") is not None else None
        args, why = loads_arguments(raw) if isinstance(raw, str) else (raw, None)
        if why is not None:  # not JSON, or too long or deep to decode (evalkit.limits)
            return None, f"arguments of {name!r} are {why}: {str(raw)[:200]!r}"
        if not isinstance(args, dict):
            return None, f"arguments of {name!r} are not a JSON object: {str(raw)[:200]!r}"
        out.append({str(c.get("name")): args})
    return out, None


def render_calls(decoded: list[dict[str, Any]]) -> str:
    """``name(a=1, b='x'); other()``: calls as one line for the report."""
    parts = []
    for call in decoded:
        for name, args in call.items():
            parts.append(f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
    return "; ".join(parts)


def _kind(verdict: dict[str, Any]) -> str:
    etype = str(verdict.get("error_type", ""))
    if etype.endswith("cannot_find_match"):  # parallel: the kind of the first call that matched nothing
        for item in verdict.get("error", []):
            if isinstance(item, dict):
                sub = next(iter(item.values()))
                return _kind({"error_type": sub.get("sub_error_type", "")})
    for marker, kind in _ERROR_KINDS:
        if marker in etype:
            return kind
    return "wrong_value"


def _message(verdict: dict[str, Any]) -> str:
    errors = verdict.get("error") or []
    for e in errors:
        if isinstance(e, dict):
            sub = next(iter(e.values()))
            return "; ".join(map(str, sub.get("sub_error", [])))
    return "; ".join(map(str, errors))


def status_of(
    answer: str,
    calls: list[dict[str, Any]] | None,
    finish: str | None,
    bad: str | None,
    names: list[str],
    category: str,
) -> Status:
    """The sample's status (see the module docstring)."""
    if finish == "tool_calls" and not calls:
        return "tool_calls_empty"
    if bad is not None:
        return "bad_arguments"
    if not calls and looks_like_call(answer, names):
        return "tool_text"
    if finish == "length":
        return "truncated"
    if not calls:
        if not answer.strip():
            return "empty"
        return "ok" if category == IRRELEVANCE else "no_answer"
    return "ok"


def score_tool_answer(
    category: str,
    functions: list[dict[str, Any]],
    answers: list[dict[str, Any]] | None,
    text: str | None,
    reasoning: str | None,
    calls: list[dict[str, Any]] | None,
    finish: str | None,
) -> Score:
    """The score of one answer: ``functions`` the BFCL function documents offered, ``answers`` BFCL's possible
    answer (None for irrelevance), ``calls`` the parsed calls (``{"name", "arguments"}``; None when the server
    sent no ``tool_calls`` at all)."""
    answer, thought = split_reasoning(text, reasoning)
    decoded, bad = decode(calls or [])
    offered = [api_name(f["name"]) for f in functions]
    status = status_of(answer, calls, finish, bad, offered + [f["name"] for f in functions], category)
    shown = render_calls(decoded) if decoded else None
    if category == IRRELEVANCE:
        correct = not decoded
        how = "no_call" if correct else "unexpected_call"
    elif bad is not None:
        correct, how = False, f"bad_arguments: {bad}"
    elif not decoded:
        correct, how = False, "no_call"
    else:
        verdict = check(category, functions, decoded, answers or [])
        correct = bool(verdict["valid"])
        unknown = [n for call in decoded for n in call if n not in offered]
        if correct:
            how = "match"
        elif unknown:
            how = f"unknown_function: {', '.join(map(repr, unknown))} is not among the offered tools"
        else:
            how = f"{_kind(verdict)}: {_message(verdict)}"
    return Score(
        status=status,
        extracted={KEY: shown},
        correct={KEY: correct},
        extraction=how,
        answer=answer,
        reasoning=thought,
    )
