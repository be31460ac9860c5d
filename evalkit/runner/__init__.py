"""One run of a RunConfig: :class:`Runner` (``orchestrate``) and the modules it calls per task (``endpoints``,
``plan``, ``resume``, ``warmups``, ``request_phase``, ``observe``), the prompt stream (``prompt_stream``) and the
worker process scoring and prompt building run in (``worker``). The package's names load on first use, so that
``python -m evalkit.runner.worker`` starts without the Runner's imports."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit.runner.orchestrate import Runner, RunOutcome
    from evalkit.runner.resume import planned_fingerprint

__all__ = ["RunOutcome", "Runner", "planned_fingerprint"]
_HOMES = {"Runner": "orchestrate", "RunOutcome": "orchestrate", "planned_fingerprint": "resume"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"evalkit.runner.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'evalkit.runner' has no attribute {name!r}")
