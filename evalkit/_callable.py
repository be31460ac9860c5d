"""Packages that can also be called: ``evalkit.report(...)`` and ``evalkit.gate(...)``.

``evalkit.report`` and ``evalkit.gate`` are packages, and importing a package binds its name on ``evalkit``, so a
plain function of that name there would be replaced by the package at the first ``import evalkit.report``. Their
module object gets a class with ``__call__`` instead: the package stays a package (``evalkit.report.render_run``)
and calling it calls the API function (:mod:`evalkit.api`), whatever was imported first.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


class CallableModule(types.ModuleType):
    """A module whose call runs its ``__evalkit_call__`` function."""

    __evalkit_call__: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__evalkit_call__(*args, **kwargs)


def make_callable(module_name: str, func: Callable[..., Any]) -> None:
    """Make the (already imported) module ``module_name`` callable as ``func``."""
    module = sys.modules[module_name]
    module.__class__ = CallableModule
    module.__evalkit_call__ = func  # type: ignore[attr-defined]
