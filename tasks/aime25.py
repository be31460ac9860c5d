r"""AIME 2025: 30 integer-answer problems, K samples each, scored from the final ``\boxed{}``.

Prompt: MathArena's, verbatim (``eth-sri/matharena`` ``configs/competitions/aime/aime_2025.yaml`` and the
runner's ``f"{instruction}\n\n{problem}"``): the instruction first, a blank line, then the problem.

A boxed-answer task (:class:`evalkit.tasks.boxed_task.BoxedAnswerTask`): this module sets the instruction and
the data check (every answer an integer). Scoring: the boxed-answer scorer
(:func:`evalkit.scoring.boxed_answer.score_boxed_answer`): the reasoning split off, the last box of the answer
text verified against the integer answer, empty / truncated / no-answer responses recorded as such.

Metrics (K = samples per problem, read from the records' sample indices): ``avg@K``, ``pass@k`` (k = 1, 2, 4, …
and K) and ``maj@K`` (answers compared by :func:`evalkit.scoring.math_answer.canonical_answer`), computed by the
default summary (:mod:`evalkit.scoring.metric_registry` says how). Samples with status ``api_error`` are never
scored and are left out of every denominator (counted in detail). A verifier timeout (``correct`` None) counts as wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.errors import DataError
from evalkit.scoring.math_answer import normalize_integer
from evalkit.tasks.base import Task
from evalkit.tasks.boxed_task import BoxedAnswerTask
from evalkit.tasks.spec import TaskSpec

# MathArena's AIME 2025 instruction ("\\boxed{{}}" in their YAML is a str.format escape for "\boxed{}").
INSTRUCTION = "Put your final answer within \\boxed{}.\nThe answer is an integer between 0 and 999 inclusive."


class Aime25Task(BoxedAnswerTask):
    instruction = INSTRUCTION  # MathArena's f"{instruction}\n\n{problem}": the base class's prompt
    data_fix = "restore the file from the package"

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self.problems = self.items

    def parse_row(self, path: Path, number: int, row: dict[str, Any]) -> dict[str, Any]:
        """A row as the base class reads it, whose answer must be an integer."""
        problem = super().parse_row(path, number, row)
        if normalize_integer(problem["answer"]) is None:
            raise DataError(f"{path}: row {number} ({problem['id']}) answer {problem['answer']!r} is not an integer")
        return problem


def make_task(spec: TaskSpec) -> Task:
    """The task declared by ``spec`` (``aime25.yaml``, checked by the registry)."""
    return Aime25Task(spec)
