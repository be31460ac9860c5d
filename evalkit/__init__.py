"""evalkit: did this model/server config keep its accuracy, and how fast is it?

The Python API (:mod:`evalkit.api`, loaded on first use so that ``import evalkit`` stays light)::

    import evalkit
    result = evalkit.run("gsm8k", endpoint="http://127.0.0.1:8000/v1", limit=50, output_dir="reports/run1")
    run = evalkit.open_run("reports/run1")
    evalkit.report("reports/run1")
    outcome = evalkit.gate("reports/base", "reports/run1")

``evalkit.report`` and ``evalkit.gate`` are also the packages of those names, made callable
(:mod:`evalkit._callable`); type-checked code can call :func:`evalkit.api.report` and :func:`evalkit.api.gate`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from evalkit.api import open_run, run

__all__ = ["__version__", "gate", "open_run", "report", "run"]


def __getattr__(name: str) -> Any:
    if name in ("run", "open_run"):
        return getattr(importlib.import_module("evalkit.api"), name)
    if name in ("report", "gate"):  # the package, callable as the API function
        return importlib.import_module(f"evalkit.{name}")
    raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
