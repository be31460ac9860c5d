"""Function calls run against BFCL's multi-turn backends, as ``bfcl-eval`` 2026.3.23 runs them
(``multi_turn_utils.execute_multi_turn_func_call``).

The backends (a file system, Twitter, messages, tickets, trading, travel, vehicle control, math) are BFCL's own
code, vendored in :mod:`evalkit.scoring.bfcl_backends`. A sample's :class:`Backends` holds one instance per
involved class, loaded from the sample's ``initial_config``; every public method of every instance is callable
by its name (a name two classes share goes to the later class, as in BFCL). A call's result is the method's return
value as text (a ``dict`` as JSON, anything else ``str()``), or ``Error during execution: MESSAGE`` when it
raised, names an unknown function (``name 'f' is not defined``, as Python's ``eval`` in BFCL says) or is one of
BFCL's refused names (``kill``, ``exit``...).

BFCL builds each call as Python source (``name(k=repr(v), ...)``) and ``eval``s it; here the method is called
with the decoded arguments directly, which is the same call for every argument name that is a Python identifier.
Ground-truth calls (Python source in BFCL's possible answers) are parsed with :mod:`ast`, never evaluated.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from collections.abc import Sequence
from typing import Any

Call = tuple[str, tuple[Any, ...], dict[str, Any]]  # name, positional arguments, keyword arguments
# BFCL's CLASS_FILE_PATH_MAPPING (bfcl_eval/constants/executable_backend_config.py), multi-turn classes only
MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
# BFCL's MULTI_TURN_FUNC_DOC_FILE_MAPPING (bfcl_eval/constants/executable_backend_config.py)
FUNC_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json", "MathAPI": "math_api.json", "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json", "TicketAPI": "ticket_api.json", "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json", "VehicleControlAPI": "vehicle_control.json",
}  # fmt: skip
STATELESS = ("MathAPI",)
REFUSED = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")


def parse_call(source: str) -> Call:
    """``cd(folder='document')`` as ``("cd", (), {"folder": "document"})``; ValueError when the text is not one
    call of a plain name with literal arguments."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError(f"not a call of a plain function name: {source!r}")
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError, TypeError) as e:
        raise ValueError(f"cannot read the call {source!r}: {e}") from None
    return node.func.id, args, kwargs


def named_arguments(call: Call, functions: Sequence[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A parsed call as ``(name, arguments by name)``: positional arguments named in the order of the function
    document's parameters (how a model writes a ground-truth call such as ``sort('report.pdf')`` as a tool call)."""
    name, args, kwargs = call
    if not args:
        return name, dict(kwargs)
    doc = next((f for f in functions if f.get("name") == name), {})
    params = list(doc.get("parameters", {}).get("properties", {}))
    return name, {**dict(zip(params, args, strict=False)), **kwargs}


def _text(result: Any) -> str:
    """BFCL's result text: a str as it is, a dict as JSON (``str()`` when it cannot be), else ``str()``."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


class Backends:
    """The backend instances of one sample (see the module docstring); :meth:`__call__` runs one step's calls.

    Example::

        b = Backends({"GorillaFileSystem": {...}}, ["GorillaFileSystem"])
        b([("cd", {"folder": "document"})])  # ['{"current_working_directory": "document"}']
    """

    def __init__(self, initial_config: dict[str, Any], involved_classes: Sequence[str], long_context: bool = False):
        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for name in involved_classes:
            if name not in MODULES:
                raise ValueError(f"unknown BFCL backend class {name!r}; known: {', '.join(MODULES)}")
            module = importlib.import_module(f"evalkit.scoring.bfcl_backends.{MODULES[name]}")
            instance = getattr(module, name)()
            if name not in STATELESS:
                instance._load_scenario(copy.deepcopy(initial_config.get(name, {})), long_context=long_context)
            self.instances[name] = instance
            for method, bound in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method.startswith("_"):
                    self._methods[method] = bound

    def run(self, call: Call) -> str:
        """One call's result text."""
        name, args, kwargs = call
        if name in REFUSED:
            return f"Error during execution: Function call {name} is not allowed."
        method = self._methods.get(name)
        try:
            if method is None:
                raise NameError(f"name '{name}' is not defined")
            return _text(method(*args, **kwargs))
        except Exception as e:
            return f"Error during execution: {e}"

    def __call__(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
        """The results of one step's calls (``(name, arguments)``), run in order."""
        return [self.run((name, (), dict(args))) for name, args in calls]

    def state(self) -> dict[str, dict[str, Any]]:
        """Each instance's public attributes (what BFCL's state check compares)."""
        return {
            name: {k: v for k, v in vars(inst).items() if not k.startswith("_")}
            for name, inst in self.instances.items()
        }
