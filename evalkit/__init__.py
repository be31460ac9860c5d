"""evalkit: did this model/server config keep its accuracy, and how fast is it?

The Python API (:mod:`evalkit.api`, loaded on first use so that ``import evalkit`` stays light)::

    import evalkit
    result = evalkit.run("gsm8k", endpoint="http://127.0.0.1:8000/v1", limit=50, output_dir="reports/run1")
    run = evalkit.open_run("reports/run1")
    evalkit.report("reports/run1")
    outcome = evalkit.gate("reports/base", "reports/run1")

The code behind ``report`` and ``gate`` lives in the packages :mod:`evalkit.reporting` and :mod:`evalkit.gating`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evalkit.version import __version__

if TYPE_CHECKING:
    from evalkit.api import gate, open_run, report, run

__all__ = ["__version__", "gate", "open_run", "report", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__[1:]:
        return getattr(importlib.import_module("evalkit.api"), name)
    raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
