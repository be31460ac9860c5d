r"""AIME 2025: 30 integer-answer problems, K samples each, scored from the final ``\boxed{}``.

Prompt: MathArena's, verbatim (``eth-sri/matharena`` ``configs/competitions/aime/aime_2025.yaml`` and the
runner's ``f"{instruction}\n\n{problem}"``): the instruction first, a blank line, then the problem.

Scoring: the reasoning is split off (:func:`evalkit.scoring.reasoning.split_reasoning`); the last box of the
answer text is verified against the integer answer (:func:`evalkit.scoring.math_answer.score_answer`).

Metrics (K = samples per problem, read from the records' sample indices): ``avg@K``, ``pass@k`` (k = 1, 2, 4, …
and K) and ``maj@K`` (answers compared by :func:`evalkit.scoring.math_answer.canonical_answer`), computed by the
default summary (:mod:`evalkit.scoring.metrics` says how). Samples with status ``api_error`` are never scored and
are left out of every denominator (counted in detail). A verifier timeout (``correct`` None) counts as wrong.
"""

from __future__ import annotations

from pathlib import Path

from evalkit.contracts import GenParams, Request, Response, Score, Status
from evalkit.errors import DataError, TaskError
from evalkit.scoring.math_answer import canonical_answer, normalize_integer, score_answer
from evalkit.scoring.reasoning import split_reasoning
from evalkit.tasks.base import Task
from evalkit.tasks.data import read_jsonl
from evalkit.tasks.spec import TaskSettings, TaskSpec

# MathArena's AIME 2025 instruction ("\\boxed{{}}" in their YAML is a str.format escape for "\boxed{}").
INSTRUCTION = "Put your final answer within \\boxed{}.\nThe answer is an integer between 0 and 999 inclusive."

EXTRACTOR = "boxed"  # key of Score.extracted / Score.correct


def build_prompt(problem: str) -> str:
    """MathArena's ``f"{instruction}\\n\\n{problem}"`` (concatenated: the instruction holds braces)."""
    return INSTRUCTION + "\n\n" + problem


class Aime25Task(Task):
    endpoint_kind = "chat"  # its sampling defaults are the task file's (aime25.yaml's defaults:), not the class's
    metrics = ("avg", "pass", "maj")
    key = EXTRACTOR

    @staticmethod
    def canonical(answer: str | None) -> str | None:
        return canonical_answer(answer)

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self.items = self.problems = load_problems(self.data_files["test"])

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
        for doc_id, problem in settings.select(self.problems):
            text = build_prompt(problem["problem"])
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
                        target=problem["answer"], messages=messages,
                    )
                )  # fmt: skip
        return requests

    def score(self, request: Request, response: Response) -> Score:
        if request.target is None:
            raise TaskError(f"{self.name}: request doc {request.doc_id} has no target")
        answer, reasoning = split_reasoning(response.text, response.reasoning)
        if not answer:
            status: Status
            if not reasoning:
                status = "empty"
            else:  # thought but never answered: cut off mid-thought, or stopped without an answer
                status = "truncated" if response.finish_reason == "length" else "no_answer"
            return Score(
                status=status, extracted={EXTRACTOR: None}, correct={EXTRACTOR: False}, extraction="none",
                answer=answer, reasoning=reasoning,
            )  # fmt: skip
        s = score_answer(answer, request.target, finish_reason=response.finish_reason)
        return Score(
            status=s.status, extracted={EXTRACTOR: s.extracted}, correct={EXTRACTOR: s.correct}, extraction=s.how,
            answer=answer, reasoning=reasoning,
        )  # fmt: skip


def load_problems(path: Path) -> list[dict[str, str]]:
    problems: list[dict[str, str]] = []
    for i, row in enumerate(read_jsonl(path), 1):
        missing = [key for key in ("id", "problem", "answer") if key not in row]
        if missing:
            raise DataError(f"{path}: row {i} lacks {', '.join(missing)}; restore the file from the package")
        answer = str(row["answer"]).strip()
        if normalize_integer(answer) is None:
            raise DataError(f"{path}: row {i} ({row['id']}) answer {answer!r} is not an integer")
        problems.append({"id": str(row["id"]), "problem": str(row["problem"]), "answer": answer})
    if not problems:
        raise DataError(f"{path}: no problems; restore the file from the package")
    return problems


def make_task(spec: TaskSpec) -> Task:
    """The task declared by ``spec`` (``aime25.yaml``, checked by the registry)."""
    return Aime25Task(spec)
