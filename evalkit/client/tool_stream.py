"""Tool calls assembled from streamed ``delta.tool_calls`` fragments, as vLLM and the OpenAI API send them.

Each fragment names its call by ``index``; the first fragment of a call carries its ``id``, ``type`` and
``function.name`` (with ``arguments`` "" or a first piece), the following ones carry pieces of
``function.arguments`` to be concatenated. A server that sends a whole call in one fragment fits the same rule.
A fragment without ``index`` continues the last call (or starts the first). The name is taken as given once
(vLLM and OpenAI never split it); a later different name on the same index is a malformed event.
"""

from __future__ import annotations

from typing import Any


class ToolCallAssembler:
    """Collects one choice's tool-call fragments; :attr:`seen` is whether any chunk had a ``tool_calls`` field
    (an empty list included), :meth:`calls` the assembled calls in index order.

    Example::

        tc = ToolCallAssembler()
        tc.feed([{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": ""}}])
        tc.feed([{"index": 0, "function": {"arguments": "{\\"x\\": 1}"}}])
        tc.calls()  # [{"id": "call_1", "name": "f", "arguments": '{"x": 1}'}]
    """

    def __init__(self) -> None:
        self.seen = False
        self._calls: dict[int, dict[str, Any]] = {}
        self._last: int | None = None

    def feed(self, fragments: Any) -> bool:
        """Add a delta's ``tool_calls`` value; True when it carried any piece of a call (a generated token).
        Raises ValueError for a value that is not shaped like OpenAI's (the client's malformed event)."""
        self.seen = True
        if fragments is None:
            return False
        if not isinstance(fragments, list):
            raise ValueError(f"tool_calls is {type(fragments).__name__}, not a list")
        carried = False
        for frag in fragments:
            if not isinstance(frag, dict):
                raise ValueError(f"a tool_calls entry is {type(frag).__name__}, not an object")
            index = frag.get("index", self._last if self._last is not None else 0)
            if not isinstance(index, int):
                raise ValueError(f"tool call index {index!r} is not an integer")
            call = self._calls.setdefault(index, {"id": None, "name": None, "arguments": []})
            self._last = index
            if frag.get("id"):
                call["id"] = frag["id"]
            fn = frag.get("function") or {}
            if not isinstance(fn, dict):
                raise ValueError(f"tool call function is {type(fn).__name__}, not an object")
            name, args = fn.get("name"), fn.get("arguments")
            if name:
                if call["name"] not in (None, name):
                    raise ValueError(f"tool call {index} named {call['name']!r} and then {name!r}")
                call["name"] = name
                carried = True
            if args:
                if not isinstance(args, str):
                    raise ValueError(f"tool call arguments {str(args)[:40]!r} are not a string")
                call["arguments"].append(args)  # joined once in calls(): no quadratic concatenation
                carried = True
        return carried

    def calls(self) -> list[dict[str, Any]] | None:
        """The calls in index order; None when no chunk had a ``tool_calls`` field."""
        if not self.seen:
            return None
        return [{**c, "arguments": "".join(c["arguments"])} for _, c in sorted(self._calls.items())]
