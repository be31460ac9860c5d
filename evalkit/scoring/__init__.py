"""Custom scorers for tasks that lm-eval does not score for us (AIME-style final answers).

The names below are loaded from their modules on first use (PEP 562 ``__getattr__``): importing a module of this
package (``evalkit.scoring.goodput`` for the run's request phase) does not import numpy, which the estimators
need and the command's start-up does not."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "maj_at_k": "estimators",
    "mean_ci_clustered": "estimators",
    "pass_at_k": "estimators",
    "pass_at_k_ladder": "estimators",
    "AnswerScore": "math_answer",
    "Extraction": "math_answer",
    "canonical_answer": "math_answer",
    "extract_boxed": "math_answer",
    "normalize_integer": "math_answer",
    "score_answer": "math_answer",
    "verify": "math_answer",
    "split_reasoning": "reasoning",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
