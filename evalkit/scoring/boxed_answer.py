r"""The boxed-answer scorer: one response to a ``\boxed{}`` math problem, scored with its status.

:func:`score_boxed_answer` is a scorer function (``(request, response) -> Score``), the kind a task file names
with ``scorer: module:function``; :class:`evalkit.tasks.boxed_task.BoxedAnswerTask` uses it unless the file
names another. The steps:

1. the reasoning is split off (:func:`evalkit.scoring.reasoning.split_reasoning`); only the answer is scored;
2. no answer text: ``empty`` when there is no reasoning either, else ``truncated`` (``finish_reason`` ``length``:
   cut off mid-thought) or ``no_answer`` (stopped without answering); nothing is extracted, the verdict is False;
3. otherwise the last box of the answer is verified against ``request.target``
   (:func:`evalkit.scoring.math_answer.score_answer`, which gives ``ok`` / ``no_answer`` / ``truncated``).

The verdict and the extracted box are stored under :data:`KEY` (``Score.correct`` / ``Score.extracted``).
"""

from __future__ import annotations

from evalkit.contracts import Request, Response, Score, Status
from evalkit.errors import TaskError
from evalkit.scoring.math_answer import score_answer
from evalkit.scoring.reasoning import split_reasoning

KEY = "boxed"  # the key of Score.extracted / Score.correct


def score_boxed_answer(request: Request, response: Response) -> Score:
    """The response's status, extracted box and verdict against ``request.target`` (see the module docstring)."""
    if request.target is None:
        raise TaskError(f"{request.task}: request doc {request.doc_id} has no target")
    answer, reasoning = split_reasoning(response.text, response.reasoning)
    if not answer:
        status: Status
        if not reasoning:
            status = "empty"
        else:  # thought but never answered: cut off mid-thought, or stopped without an answer
            status = "truncated" if response.finish_reason == "length" else "no_answer"
        return Score(
            status=status, extracted={KEY: None}, correct={KEY: False}, extraction="none",
            answer=answer, reasoning=reasoning,
        )  # fmt: skip
    s = score_answer(answer, request.target, finish_reason=response.finish_reason)
    return Score(
        status=s.status, extracted={KEY: s.extracted}, correct={KEY: s.correct}, extraction=s.how,
        answer=answer, reasoning=reasoning,
    )  # fmt: skip
