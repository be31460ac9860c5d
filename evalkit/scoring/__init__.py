"""Custom scorers for tasks that lm-eval does not score for us (AIME-style final answers)."""

from evalkit.scoring.estimators import maj_at_k, mean_ci_clustered, pass_at_k, pass_at_k_ladder
from evalkit.scoring.math_answer import (
    AnswerScore,
    Extraction,
    canonical_answer,
    extract_boxed,
    normalize_integer,
    score_answer,
    verify,
)
from evalkit.scoring.reasoning import split_reasoning

__all__ = [
    "AnswerScore",
    "Extraction",
    "canonical_answer",
    "extract_boxed",
    "maj_at_k",
    "mean_ci_clustered",
    "normalize_integer",
    "pass_at_k",
    "pass_at_k_ladder",
    "score_answer",
    "split_reasoning",
    "verify",
]
