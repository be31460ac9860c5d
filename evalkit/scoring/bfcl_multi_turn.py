"""BFCL's multi-turn checker (``bfcl-eval`` 2026.3.23: ``eval_runner._evaluate_single_multi_turn_entry`` and
``multi_turn_checker.multi_turn_checker``) over a conversation's executed calls.

The model's calls are taken per turn and per request (step) as the conversation made them; a step whose calls do
not decode (arguments that are not a JSON object) or that holds no call is left out, as BFCL leaves it out. A
conversation with fewer turns than the ground truth (stopped at the step cap) fails as ``force_terminated``.
Then, turn by turn, the model's calls and the ground truth's run on fresh backends of their own
(:class:`evalkit.scoring.bfcl_exec.Backends`, kept across turns), and for each turn whose ground truth is not empty:

- ``empty_turn``: the model made no decodable call in the turn;
- ``state_mismatch``: an instance's public attributes differ from the ground truth's after the turn;
- ``response_mismatch``: a result of the ground truth's calls in the turn is missing from the results of all the
  model's calls so far (any order, each result matched once).

A sample passes when every turn passes.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.contracts import Score, Status
from evalkit.scoring.bfcl_exec import Backends, Call, parse_call
from evalkit.scoring.reasoning import split_reasoning
from evalkit.scoring.tool_calls import decode, render_calls, status_of

KEY = "multi_turn"  # key of Score.extracted / Score.correct
_FLAGGED: tuple[Status, ...] = ("tool_calls_empty", "bad_arguments", "tool_text", "truncated")


def _missing(expected: list[str], got: list[str]) -> list[str]:
    """BFCL's ``_is_subsequence_unordered``: items of ``expected`` not found in ``got`` (each used once)."""
    left = list(got)
    out = []
    for item in expected:
        if item in left:
            left.remove(item)
        else:
            out.append(item)
    return out


def _differences(model: Backends, truth: Backends) -> tuple[str, dict[str, Any]] | None:
    """The first class whose state differs, with the differing attributes; None when all agree."""
    mine, theirs = model.state(), truth.state()
    for name, attrs in theirs.items():
        diff = {k: {"model": mine[name].get(k), "ground_truth": v} for k, v in attrs.items() if mine[name].get(k) != v}
        if diff:
            return name, diff
    return None


def check_conversation(
    entry: dict[str, Any], ground_truth: list[list[str]], model_turns: list[list[list[tuple[str, dict[str, Any]]]]]
) -> dict[str, Any]:
    """BFCL's verdict: ``{"valid": True}`` or ``{"valid": False, "error_type", "error_message", "turn"}``.
    ``model_turns``: per turn, per step, the decoded calls ``(name, arguments)`` (steps without calls left out)."""
    if len(model_turns) != len(ground_truth):
        return {
            "valid": False, "error_type": "force_terminated", "turn": len(model_turns),
            "error_message": f"the conversation stopped after {len(model_turns)} of {len(ground_truth)} turns "
            "(a turn reached the step cap)",
        }  # fmt: skip
    long_context = "long_context" in str(entry.get("id", "")) or "composite" in str(entry.get("id", ""))
    model = Backends(entry["initial_config"], entry["involved_classes"], long_context)
    truth = Backends(entry["initial_config"], entry["involved_classes"], long_context)
    all_results: list[str] = []
    for t, (steps, expected) in enumerate(zip(model_turns, ground_truth, strict=True)):
        for step in steps:
            all_results.extend(model(step))
        calls: list[Call] = [parse_call(c) for c in expected]
        expected_results = [truth.run(c) for c in calls]
        if not expected:
            continue
        if not steps:
            return {
                "valid": False, "error_type": "empty_turn", "turn": t,
                "error_message": f"no call in turn {t + 1}",
            }  # fmt: skip
        diff = _differences(model, truth)
        if diff is not None:
            name, attrs = diff
            shown = "; ".join(f"{k}: {v['model']!r} (expected {v['ground_truth']!r})" for k, v in attrs.items())
            return {
                "valid": False, "error_type": "state_mismatch", "turn": t,
                "error_message": f"turn {t + 1}: {name} state differs: {shown[:400]}",
            }  # fmt: skip
        missing = _missing(expected_results, all_results)
        if missing:
            return {
                "valid": False, "error_type": "response_mismatch", "turn": t,
                "error_message": f"turn {t + 1}: results of the expected calls missing: {json.dumps(missing)[:400]}",
            }  # fmt: skip
    return {"valid": True}


def model_turns(turns: list[dict[str, Any]]) -> tuple[list[list[list[tuple[str, dict[str, Any]]]]], str | None]:
    """Per turn, per step, the decoded calls of a conversation's trace (``Response.turns``), leaving out steps
    without calls or whose calls do not decode; and why the first undecodable step was left out (None: none was)."""
    out: list[list[list[tuple[str, dict[str, Any]]]]] = []
    bad_first: str | None = None
    for turn in turns:
        kept = []
        for step in turn["requests"]:
            decoded, bad = decode(step.get("tool_calls") or [])
            if bad is not None:
                bad_first = bad_first or bad
                continue
            if decoded:
                kept.append([(name, args) for call in decoded for name, args in call.items()])
        out.append(kept)
    return out, bad_first


def _status(turns: list[dict[str, Any]], names: list[str]) -> Status:
    """A problem of any request (in the order of :data:`_FLAGGED`), else ``ok`` when any call was made, else
    ``no_answer`` (text only) or ``empty``."""
    found = set()
    for turn in turns:
        for step in turn["requests"]:
            answer, _ = split_reasoning(step.get("text"), step.get("reasoning"))
            _, step_bad = decode(step.get("tool_calls") or [])
            found.add(status_of(answer, step.get("tool_calls"), step.get("finish_reason"), step_bad, names, KEY))
    for s in _FLAGGED:
        if s in found:
            return s
    if "ok" in found:
        return "ok"
    return "no_answer" if "no_answer" in found else "empty"


def score_conversation(
    entry: dict[str, Any], ground_truth: list[list[str]], turns: list[dict[str, Any]], names: list[str]
) -> Score:
    """The score of one conversation (``Response.turns``) of BFCL multi-turn ``entry``; ``names`` the offered
    function names (to flag calls written as text)."""
    decoded, bad = model_turns(turns)
    verdict = check_conversation(entry, ground_truth, decoded)
    shown = " | ".join(render_calls([{n: a} for step in steps for n, a in step]) for steps in decoded[: len(turns)])
    how = "match" if verdict["valid"] else f"{verdict['error_type']}: {verdict['error_message']}"
    if bad is not None and not verdict["valid"]:
        how += f" (a request's calls were left out: {bad})"
    last = turns[-1]["requests"][-1] if turns and turns[-1]["requests"] else {}
    answer, _ = split_reasoning(last.get("text"), last.get("reasoning"))
    return Score(
        status=_status(turns, names),
        extracted={KEY: shown or None},
        correct={KEY: bool(verdict["valid"])},
        extraction=how,
        answer=answer,
        reasoning=None,
    )
