"""Test helpers: a deterministic vLLM-shaped OpenAI-compatible server (see :mod:`evalkit.testing.server`).

Names are imported lazily so that ``python -m evalkit.testing.server`` does not import its own module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit.testing.answers import count_tokens, default_answer, render_chat
    from evalkit.testing.server import SubprocessServer, TestServer
    from evalkit.testing.state import Behaviour, RecordedRequest
    from evalkit.testing.vllm_metrics import parse_prometheus

_EXPORTS = {
    "Behaviour": "evalkit.testing.state",
    "RecordedRequest": "evalkit.testing.state",
    "TestServer": "evalkit.testing.server",
    "SubprocessServer": "evalkit.testing.server",
    "count_tokens": "evalkit.testing.answers",
    "default_answer": "evalkit.testing.answers",
    "render_chat": "evalkit.testing.answers",
    "parse_prometheus": "evalkit.testing.vllm_metrics",
}

__all__ = [
    "Behaviour",
    "RecordedRequest",
    "SubprocessServer",
    "TestServer",
    "count_tokens",
    "default_answer",
    "parse_prometheus",
    "render_chat",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
