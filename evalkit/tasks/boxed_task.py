r"""Boxed-answer math tasks: K samples of each problem, the final ``\boxed{}`` of the answer scored.

:class:`BoxedAnswerTask` is a whole task for a ``kind: python`` file that names it by module, with no Python of
its own::

    name: math500-lite
    kind: python
    version: "1"
    class: evalkit.tasks.boxed_task:BoxedAnswerTask
    data: {test: data/math500-lite.jsonl}        # {"id": ..., "problem": ..., "answer": ...} per line
    instruction: "Put your final answer within \\boxed{}."   # optional: the prompt's first paragraph
    scorer: evalkit.scoring.boxed_answer:score_boxed_answer    # optional: the default

and the base of one that has (``tasks/aime25.py``), which overrides its hooks:

- :meth:`BoxedAnswerTask.build_prompt`: an item's prompt (by default the instruction, a blank line, the problem);
- :meth:`BoxedAnswerTask.load_items` and :meth:`BoxedAnswerTask.parse_row`: the data (by default JSONL rows with
  ``id``, ``problem`` and ``answer``, checked one row at a time);
- ``score``: the task file's ``scorer`` (a function of ``(request, response) -> Score``), else
  :func:`evalkit.scoring.boxed_answer.score_boxed_answer` (statuses empty / truncated / no_answer / ok).

Metrics (K = samples per problem): ``avg@K``, ``pass@k`` and ``maj@K`` (answers compared by
:func:`evalkit.scoring.math_answer.canonical_answer`), from the default summary
(:mod:`evalkit.scoring.metric_registry`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from evalkit.contracts import GenParams, Request, Response, Score
from evalkit.errors import DataError, TaskError
from evalkit.scoring.boxed_answer import KEY, score_boxed_answer
from evalkit.scoring.math_answer import canonical_answer
from evalkit.tasks.base import Task
from evalkit.tasks.data import read_jsonl
from evalkit.tasks.spec import TaskSettings, TaskSpec

FIELDS = ("id", "problem", "answer")  # what each data row must hold


class BoxedAnswerTask(Task):
    """A boxed-answer math task (see the module docstring); subclass it and override the hooks for more."""

    endpoint_kind = "chat"
    metrics = ("avg", "pass", "maj")
    key = KEY
    takes_scorer = True
    instruction: str = "Put your final answer within \\boxed{}."  # the task file's ``instruction`` replaces it
    data_fix: ClassVar[str] = "fix the task's data file"  # the fix a data error names

    @staticmethod
    def canonical(answer: str | None) -> str | None:
        return canonical_answer(answer)

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        instruction = spec.options.get("instruction", self.instruction)
        if not isinstance(instruction, str):
            raise TaskError(f"{spec.path}: instruction must be a string (the prompt's first paragraph)")
        self.instruction = instruction
        self.scorer = spec.scorer_function() or score_boxed_answer
        self.items = self.load_items(self.data_files["test"])

    # ---------------------------------------------------------------------------------------------- hooks

    def build_prompt(self, item: dict[str, Any]) -> str:
        """The prompt of one item: the instruction, a blank line, then the problem."""
        return self.instruction + "\n\n" + item["problem"]

    def load_items(self, path: Path) -> list[dict[str, Any]]:
        """The task's problems, one per data row (:meth:`parse_row`), in file order."""
        items = [self.parse_row(path, number, row) for number, row in enumerate(read_jsonl(path), 1)]
        if not items:
            raise DataError(f"{path}: no problems; {self.data_fix}")
        return items

    def parse_row(self, path: Path, number: int, row: dict[str, Any]) -> dict[str, Any]:
        """Data row ``number`` (1-based) as an item: ``id``, ``problem`` and ``answer`` as strings."""
        missing = [key for key in FIELDS if key not in row]
        if missing:
            raise DataError(f"{path}: row {number} lacks {', '.join(missing)}; {self.data_fix}")
        return {"id": str(row["id"]), "problem": str(row["problem"]), "answer": str(row["answer"]).strip()}

    # ----------------------------------------------------------------------------------------- the task

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        kind = settings.endpoint_kind or self.endpoint_kind
        k = settings.num_samples
        if k < 1:
            raise TaskError(f"{self.name}: num_samples must be at least 1, got {k}")
        max_tokens = self.setting(settings, "max_tokens")
        if max_tokens is None:
            raise TaskError(f"{self.name}: max_tokens is not set; pass --max-tokens")
        temperature, top_p = self.setting(settings, "temperature"), self.setting(settings, "top_p")
        requests: list[Request] = []
        for doc_id, item in settings.select(self.items):
            text = self.build_prompt(item)
            messages = ({"role": "user", "content": text},) if kind == "chat" else None
            for i in range(k):
                gen = GenParams(
                    max_tokens=int(max_tokens),
                    temperature=0.0 if temperature is None else float(temperature),
                    top_p=None if top_p is None else float(top_p),
                    seed=None if settings.seed is None else settings.seed + i,  # K distinct samples
                    chat_template_kwargs=settings.chat_template_kwargs,
                )
                requests.append(
                    Request(
                        task=self.name, doc_id=doc_id, sample_index=i, prompt=text, gen=gen,
                        target=item["answer"], messages=messages,
                    )
                )  # fmt: skip
        return requests

    def score(self, request: Request, response: Response) -> Score:
        score = self.scorer(request, response)
        if self.key not in score.correct:
            raise TaskError(
                f"{self.name}: scorer {self.spec.scorer} gave no {self.key!r} verdict; it must set "
                f"Score.correct[{self.key!r}] and Score.extracted[{self.key!r}]"
            )
        return score
