"""Tool-calling answers of the test server: a chat request with ``tools`` gets calls built from BFCL's own
possible answer for the question (found by its text in the bundled ``tasks/data/bfcl``), shaped by a labelled
variant (``Behaviour.tool_variant``):

- ``right``: the expected calls (all of them for parallel questions); for an irrelevance question, plain text;
- ``wrong_argument``: the first argument of the first call changed (a value or type mismatch);
- ``unknown_function``: the first call under a name that is not among the tools;
- ``bad_json``: the first call's arguments cut off mid-JSON;
- ``empty_list``: ``finish_reason`` ``tool_calls`` with an empty ``tool_calls`` list and no text;
- ``text``: the calls written as ``<tool_call>{...}</tool_call>`` text, none parsed (a server without a parser);
- ``reasoning``: reasoning streamed first (in the reasoning field), then the right calls;
- ``parallel``: the right calls followed by the first one again (one call too many);
- ``no_call``: a plain-text answer; ``silent``: nothing at all;
- ``mix``: one of the above per question, from a stable hash of the question.

A conversation of BFCL's multi-turn data (found by its first user message in the bundled data; the turn is the
count of user messages) is played as a script: the first request of each turn gets that turn's ground-truth calls
(all in one answer, positional arguments named), shaped by the variant as above; a request after tool results gets
the text ``Done.`` (the turn ends). ``endless`` (conversations only) calls the turn's first expected call at every
request (the conversation hits its step cap). ``reasoning`` streams reasoning before each answer.

An irrelevance question has no expected call: variants that call use the first offered function with its
required arguments set to ``1``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from evalkit.testing.answers import data_dir, message_text, stable_bucket, unknown_text

VARIANTS = (
    "right", "wrong_argument", "unknown_function", "bad_json", "empty_list", "text", "reasoning", "parallel",
    "no_call", "silent",
)  # fmt: skip
REFUSED = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
SCRIPT_ONLY = ("endless",)
DONE = "Done."
THOUGHT = "The user asks for something a tool can do, so I call it with the values from the question."


@dataclass(frozen=True)
class ToolAnswer:
    text: str
    reasoning: str | None
    calls: list[tuple[str, str]]  # (name, arguments JSON text)
    finish: str | None  # "tool_calls" forced (empty_list), else None: "tool_calls" when there are calls


@lru_cache(maxsize=1)
def _questions() -> dict[str, list[dict[str, Any]] | None]:
    """User message text -> BFCL ground truth (None: an irrelevance question), over the bundled categories."""
    root = data_dir()
    out: dict[str, list[dict[str, Any]] | None] = {}
    folder = root / "bfcl" if root else None
    if folder is None or not folder.is_dir():
        return out
    for path in sorted(folder.glob("BFCL_v4_*.json")):
        if "multi_turn" in path.name:
            continue
        answers_path = folder / "possible_answer" / path.name
        truths: dict[str, Any] = {}
        if answers_path.is_file():
            with open(answers_path, encoding="utf-8") as f:
                truths = {r["id"]: r["ground_truth"] for r in map(json.loads, filter(str.strip, f))}
        with open(path, encoding="utf-8") as f:
            for row in map(json.loads, filter(str.strip, f)):
                out[str(row["question"][0][-1]["content"])] = truths.get(row["id"])
    return out


@lru_cache(maxsize=1)
def _conversations() -> dict[str, list[tuple[tuple[str, ...], list[list[str]]]]]:
    """First user message text -> (each turn's user text, BFCL ground truth per turn as Python source) of the
    multi-turn entries that open with it (two may share a first message)."""
    root = data_dir()
    folder = root / "bfcl" if root else None
    out: dict[str, list[tuple[tuple[str, ...], list[list[str]]]]] = {}
    if folder is None or not folder.is_dir():
        return out
    for path in sorted(folder.glob("BFCL_v4_multi_turn_*.json")):
        with open(folder / "possible_answer" / path.name, encoding="utf-8") as f:
            truths = {r["id"]: r["ground_truth"] for r in map(json.loads, filter(str.strip, f))}
        with open(path, encoding="utf-8") as f:
            for row in map(json.loads, filter(str.strip, f)):
                users = tuple(str(turn[-1]["content"]) for turn in row["question"])
                out.setdefault(users[0], []).append((users, truths[row["id"]]))
    return out


def script_step(body: dict[str, Any]) -> tuple[list[tuple[str, dict[str, Any]]], int] | None:
    """For a request of a scripted conversation: the current turn's expected calls and how many requests of
    the turn came before (assistant messages after the last user message); None for any other request."""
    msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    users = [i for i, m in enumerate(msgs) if m.get("role") == "user"]
    seen = tuple(message_text(msgs[i]) for i in users)
    entries = _conversations().get(seen[0], []) if seen else []
    truth = next((t for texts, t in entries if texts[: len(seen)] == seen), None)
    if truth is None:
        return None
    # imported here: scripts/bfcl_agreement.py imports this module where evalkit's dependencies are not installed
    from evalkit.scoring.bfcl_exec import named_arguments, parse_call

    fns = _tool_names(body)
    calls = [named_arguments(parse_call(c), fns) for c in truth[len(seen) - 1]]
    return calls, sum(1 for m in msgs[users[-1] :] if m.get("role") == "assistant")


def _materialize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: pick(v) for k, v in value.items() if any(x != "" for x in v)}
    if isinstance(value, list):
        return [_materialize(x) if isinstance(x, dict) else x for x in value]
    return value


def pick(possible: list[Any]) -> Any:
    """The first accepted value of a BFCL possible-answer list (``""`` marks "may be left out")."""
    return _materialize(next(x for x in possible if x != ""))


def expected_calls(truth: list[dict[str, Any]], functions: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One right answer for a BFCL ground truth: (API name, arguments) per call, each argument at its first
    accepted value; left out: optional arguments the function does not document (a few possible answers list
    one) and those with no value to give."""
    documented = {f.get("name", "").replace(".", "_"): f.get("parameters", {}).get("properties", {}) for f in functions}
    calls = []
    for call in truth:
        name, params = next(iter(call.items()))
        known = documented.get(name.replace(".", "_"), {})
        args = {k: pick(v) for k, v in params.items() if v != [""] and ("" not in v or k in known)}
        calls.append((name.replace(".", "_"), args))
    return calls


def _tool_names(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t.get("function", {}) for t in body.get("tools") or [] if isinstance(t, dict)]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + " (changed)"
    return "changed"


def tool_answer(prompt: str, body: dict[str, Any], variant: str) -> ToolAnswer:
    """What the server answers to a chat request with ``tools`` (see the module docstring)."""
    if variant == "mix":
        variant = VARIANTS[stable_bucket("tool:" + prompt) % len(VARIANTS)]
    if variant not in VARIANTS + SCRIPT_ONLY:
        raise ValueError(f"unknown tool_variant {variant!r}; one of {', '.join(VARIANTS + SCRIPT_ONLY)} or mix")
    thought = THOUGHT if variant == "reasoning" else None
    scripted = script_step(body)
    truth: Any = None
    if scripted is not None:
        truth, step = scripted
        if variant == "endless":
            truth, variant = truth[:1], "right"
        elif step:
            return ToolAnswer(DONE, thought, [], None)
        calls = list(truth)
        if not calls:  # a turn whose ground truth is no call
            return ToolAnswer(unknown_text(prompt), thought, [], None)
    elif variant in SCRIPT_ONLY:
        raise ValueError(f"tool_variant {variant!r} plays BFCL's multi-turn conversations only")
    else:
        truth = _questions().get(prompt)
    if scripted is None and truth:
        calls = expected_calls(truth, _tool_names(body))
    elif scripted is None:  # irrelevance (or an unknown question): the first tool, required arguments set to 1
        fns = _tool_names(body)
        fn: dict[str, Any] = fns[0] if fns else {"name": "tool", "parameters": {}}
        calls = [(str(fn.get("name")), {k: 1 for k in fn.get("parameters", {}).get("required", [])})]
    plain = unknown_text(prompt)
    if variant == "right" and not truth:
        return ToolAnswer(plain, None, [], None)
    if variant == "no_call":
        return ToolAnswer(plain, None, [], None)
    if variant == "silent":
        return ToolAnswer("", None, [], None)
    if variant == "empty_list":
        return ToolAnswer("", None, [], "tool_calls")
    if variant == "wrong_argument" and calls[0][1]:
        name, args = calls[0]
        first = next(iter(args))
        calls[0] = (name, {**args, first: _changed(args[first])})
    if variant == "unknown_function":
        calls[0] = (calls[0][0] + "_v2", calls[0][1])
    if variant == "parallel":
        calls.append(calls[0])
    encoded = [(name, json.dumps(args)) for name, args in calls]
    if variant == "bad_json":
        name, args_text = encoded[0]
        encoded[0] = (name, args_text[: max(1, len(args_text) // 2)])
    if variant == "text":
        text = "".join(f'<tool_call>\n{{"name": "{n}", "arguments": {a}}}\n</tool_call>' for n, a in encoded)
        return ToolAnswer(text, None, [], None)
    return ToolAnswer("", thought, encoded, None)
