r"""AIME 2025: 30 integer-answer problems, K samples each, scored from the final ``\boxed{}``.

Prompt: MathArena's, verbatim (``eth-sri/matharena`` ``configs/competitions/aime/aime_2025.yaml`` and the
runner's ``f"{instruction}\n\n{problem}"``): the instruction first, a blank line, then the problem.

Scoring: the reasoning is split off (:func:`evalkit.scoring.reasoning.split_reasoning`); the last box of the
answer text is verified against the integer answer (:func:`evalkit.scoring.math_answer.score_answer`).

Metrics (K = samples per problem, read from the records' sample indices):
- ``avg@K``: mean correctness over all scored samples; stderr and 95% CI clustered by problem; n = samples.
- ``pass@k`` for k = 1, 2, 4, … and K: unbiased estimator averaged over problems with at least k scored
  samples; stderr across problems; n = problems.
- ``maj@K``: majority vote over each problem's extracted answers, ties give fractional credit; n = problems.
Samples with status ``api_error`` are never scored and are left out of every denominator (counted in extra).
A verifier timeout (``correct`` None) counts as wrong.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from evalkit.contracts import (
    BASE_STATUSES,
    EndpointKind,
    GenParams,
    MetricValue,
    Request,
    Response,
    SampleRecord,
    Score,
    Status,
)
from evalkit.errors import DataError, TaskError
from evalkit.scoring.estimators import maj_at_k, mean_ci_clustered, pass_at_k, pass_at_k_ladder
from evalkit.scoring.math_answer import canonical_answer, normalize_integer, score_answer
from evalkit.scoring.reasoning import split_reasoning
from evalkit.tasks.base import Task, TaskSettings
from evalkit.tasks.data import read_jsonl

# MathArena's AIME 2025 instruction ("\\boxed{{}}" in their YAML is a str.format escape for "\boxed{}").
INSTRUCTION = "Put your final answer within \\boxed{}.\nThe answer is an integer between 0 and 999 inclusive."

EXTRACTOR = "boxed"  # key of Score.extracted / Score.correct
BUILTIN_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "top_p": 0.95, "num_samples": 8, "max_tokens": 32768}
_SETTINGS_KEYS = {f.name for f in fields(TaskSettings)}


def build_prompt(problem: str) -> str:
    """MathArena's ``f"{instruction}\\n\\n{problem}"`` (concatenated: the instruction holds braces)."""
    return INSTRUCTION + "\n\n" + problem


def _stats(values: list[int]) -> dict[str, float | int | None]:
    if not values:
        return {"mean": None, "p50": None, "max": None, "n": 0}
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "p50": float(np.median(a)), "max": int(a.max()), "n": len(values)}


def _metric(values: list[list[float]], n: int) -> MetricValue:
    if not values:
        return MetricValue(value=None, n=n)
    mean, stderr, ci = mean_ci_clustered(values)
    if ci is not None:  # accuracies: clip the normal interval to [0, 1]
        ci = (max(0.0, ci[0]), min(1.0, ci[1]))
    return MetricValue(value=mean, stderr=stderr, ci95=ci, n=n)


class Aime25Task(Task):
    def __init__(
        self,
        *,
        name: str,
        version: str,
        description: str,
        data_file: Path,
        problems: list[dict[str, str]],
        defaults: dict[str, Any],
        endpoint_kind: EndpointKind,
    ) -> None:
        self.name = name
        self.version = version
        self.description = description
        self.endpoint_kind = endpoint_kind
        self.data_files = {"test": data_file}
        self.problems = problems
        self._defaults = defaults

    # ------------------------------------------------------------------------------------------- requests

    def defaults(self) -> dict[str, Any]:
        return dict(self._defaults)

    def metric_names(self, settings: TaskSettings | None = None) -> list[str]:
        k = settings.num_samples if settings is not None else int(self._defaults.get("num_samples", 1))
        return [f"avg@{k}", *(f"pass@{j}" for j in pass_at_k_ladder(k)), f"maj@{k}"]

    def _setting(self, settings: TaskSettings, key: str) -> Any:
        value = getattr(settings, key)
        return self._defaults.get(key) if value is None else value

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        kind = settings.endpoint_kind or self.endpoint_kind
        k = settings.num_samples
        if k < 1:
            raise TaskError(f"{self.name}: num_samples must be at least 1, got {k}")
        max_tokens = self._setting(settings, "max_tokens")
        if max_tokens is None:
            raise TaskError(f"{self.name}: max_tokens is not set; pass --max-tokens")
        temperature = self._setting(settings, "temperature")
        top_p = self._setting(settings, "top_p")
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
                        task=self.name,
                        doc_id=doc_id,
                        sample_index=i,
                        prompt=text,
                        gen=gen,
                        target=problem["answer"],
                        messages=messages,
                    )
                )
        return requests

    # -------------------------------------------------------------------------------------------- scoring

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
                status=status,
                extracted={EXTRACTOR: None},
                correct={EXTRACTOR: False},
                extraction="none",
                answer=answer,
                reasoning=reasoning,
            )
        s = score_answer(answer, request.target, finish_reason=response.finish_reason)
        return Score(
            status=s.status,
            extracted={EXTRACTOR: s.extracted},
            correct={EXTRACTOR: s.correct},
            extraction=s.how,
            answer=answer,
            reasoning=reasoning,
        )

    # -------------------------------------------------------------------------------------------- summary

    def summarize(self, records: Sequence[SampleRecord]) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        recs = [r for r in records if r.task == self.name]
        k = max((r.sample_index for r in recs), default=-1) + 1
        scored = [r for r in recs if r.status != "api_error"]
        status_counts = Counter(r.status for r in recs)

        by_doc: dict[int, list[SampleRecord]] = defaultdict(list)
        errors_by_doc: Counter[int] = Counter()
        for r in recs:
            if r.status == "api_error":
                errors_by_doc[r.doc_id] += 1
            else:
                by_doc[r.doc_id].append(r)
        doc_ids = sorted(set(by_doc) | set(errors_by_doc))

        def is_correct(r: SampleRecord) -> bool:
            return r.correct.get(EXTRACTOR) is True

        def gold_of(doc_id: int, rs: list[SampleRecord]) -> str | None:
            for r in rs:
                if r.target is not None:
                    return r.target
            return self.problems[doc_id]["answer"] if 0 <= doc_id < len(self.problems) else None

        metrics: dict[str, MetricValue] = {}
        per_problem: list[dict[str, Any]] = []
        values: list[list[float]] = []
        maj: list[list[float]] = []
        counts: list[tuple[int, int]] = []
        for doc_id in doc_ids:
            rs = sorted(by_doc.get(doc_id, []), key=lambda r: r.sample_index)
            gold = gold_of(doc_id, rs)
            gold_key = canonical_answer(gold)
            correct = [is_correct(r) for r in rs]
            histogram = Counter(a for a in (canonical_answer(r.extracted.get(EXTRACTOR)) for r in rs) if a is not None)
            per_problem.append(
                {
                    "doc_id": doc_id,
                    "id": self.problems[doc_id]["id"] if 0 <= doc_id < len(self.problems) else None,
                    "target": gold,
                    "n": len(rs),
                    "correct": sum(correct),
                    "accuracy": sum(correct) / len(rs) if rs else None,
                    "answers": dict(histogram.most_common()),
                    "no_answer": sum(1 for r in rs if r.extracted.get(EXTRACTOR) is None),
                    "truncated": sum(1 for r in rs if r.status == "truncated"),
                    "api_error": errors_by_doc[doc_id],
                }
            )
            if not rs:
                continue
            values.append([1.0 if c else 0.0 for c in correct])
            counts.append((len(rs), sum(correct)))
            # A sample judged correct votes for the gold answer even if written differently (\dfrac{140}{2}).
            votes = [
                gold_key if c else canonical_answer(r.extracted.get(EXTRACTOR))
                for r, c in zip(rs, correct, strict=True)
            ]
            maj.append([maj_at_k(votes, gold_key)])

        if k > 0:
            metrics[f"avg@{k}"] = _metric(values, n=len(scored))
            for j in pass_at_k_ladder(k):
                per = [[pass_at_k(n, c, j)] for n, c in counts if n >= j]
                metrics[f"pass@{j}"] = _metric(per, n=len(per))
            metrics[f"maj@{k}"] = _metric(maj, n=len(maj))

        total = len(recs)
        verify_timeouts = sum(
            1 for r in scored if r.extracted.get(EXTRACTOR) is not None and r.correct.get(EXTRACTOR) is None
        )
        extra: dict[str, Any] = {
            "num_samples": k,
            "num_problems": len(doc_ids),
            "requests": total,
            "scored": len(scored),
            "status_counts": {s: status_counts.get(s, 0) for s in BASE_STATUSES},
            "rates": {s: (status_counts.get(s, 0) / total if total else None) for s in BASE_STATUSES[1:]},
            "rates_denominator": total,
            "verify_timeouts": verify_timeouts,
            "maj_tie_rule": "fractional: 1/t when the gold answer is one of t answers tied for most votes",
            "ci": "95% normal CI, clipped to [0, 1]; stderr clustered by problem (avg@K) or across problems",
            "tokens": {
                "output": _stats([r.output_tokens for r in scored if r.output_tokens is not None]),
                "reasoning": _stats([r.reasoning_tokens for r in scored if r.reasoning_tokens is not None]),
            },
            "per_problem": per_problem,
        }
        return metrics, extra


def _load_problems(path: Path) -> list[dict[str, str]]:
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


def make_task(spec: dict[str, Any], root: Path) -> Task:
    """The task declared by ``spec`` (the parsed ``aime25.yaml``); ``root`` is the folder holding it."""
    name = str(spec.get("name", "aime25"))
    data = spec.get("data") or {}
    if "test" not in data:
        raise TaskError(f"{name}: the task YAML needs data: {{test: <path to the jsonl>}}")
    data_file = (Path(root) / data["test"]).resolve()
    defaults = {**BUILTIN_DEFAULTS, **(spec.get("defaults") or {})}
    unknown = sorted(set(defaults) - _SETTINGS_KEYS)
    if unknown:
        raise TaskError(f"{name}: unknown defaults {unknown}; allowed: {sorted(_SETTINGS_KEYS)}")
    endpoint_kind = spec.get("endpoint_kind", "chat")
    if endpoint_kind not in ("chat", "completions"):
        raise TaskError(f"{name}: endpoint_kind must be chat or completions, got {endpoint_kind!r}")
    return Aime25Task(
        name=name,
        version=str(spec.get("version", "1")),
        description=str(spec.get("description", "")),
        data_file=data_file,
        problems=_load_problems(data_file),
        defaults=defaults,
        endpoint_kind=endpoint_kind,
    )
