"""Bounds on what evalkit takes from a server: the size of each body it reads, the size and nesting of tool-call
arguments it decodes, and the size of each text it stores per sample.

- Bodies: JSON bodies (``/v1/models``, ``/tokenize``) and ``/metrics`` are read up to :data:`MAX_BODY_BYTES`
  after decompression (a gzip bomb stops there); error bodies up to :data:`MAX_ERROR_BODY_BYTES` (the rest is
  not read); a generation stream up to :func:`max_stream_bytes` of its ``max_tokens``.
- Tool-call arguments: decoded with :func:`loads_arguments`, which refuses more than
  :data:`MAX_ARGUMENT_CHARS` characters or more than :data:`MAX_JSON_DEPTH` levels of nesting (one degenerate
  generation is that sample's ``bad_arguments``, never a RecursionError that ends the run).
- Stored texts: :func:`cap_texts` cuts every string of a sample's server-supplied fields to
  :data:`MAX_STORED_CHARS`, marking each cut in the text and listing the cuts for the sample's note.
"""

from __future__ import annotations

import json
from typing import Any

MAX_BODY_BYTES = 16 * 1024**2  # a JSON or /metrics body, decompressed
MAX_ERROR_BODY_BYTES = 64 * 1024  # the part of an error body read for its message
STREAM_BASE_BYTES = 16 * 1024**2  # a generation stream: this much ...
STREAM_BYTES_PER_TOKEN = 4096  # ... plus this much per max_tokens (vLLM sends ~250 bytes a token)
MAX_ARGUMENT_CHARS = 256 * 1024  # tool-call arguments decoded
MAX_JSON_DEPTH = 100  # nesting of decoded tool-call arguments
MAX_STORED_CHARS = 256 * 1024  # each text of a stored sample


class BodyTooLarge(Exception):
    """A response body went past its bound; the message says which bound."""


def size_text(n: float) -> str:
    """``n`` bytes (or characters) as a short size: ``512 B``, ``64 KiB``, ``8.0 MiB``.

    >>> size_text(16 * 1024**2), size_text(300), size_text(262144)
    ('16 MiB', '300 B', '256 KiB')
    """
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{int(n)} B"


def max_stream_bytes(max_tokens: int) -> int:
    """The most bytes read from one generation stream of ``max_tokens``."""
    return STREAM_BASE_BYTES + STREAM_BYTES_PER_TOKEN * max(0, max_tokens)


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` levels deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def loads_arguments(raw: str) -> tuple[Any, str | None]:
    """(the decoded JSON, None) or (None, why not): not JSON, more than :data:`MAX_ARGUMENT_CHARS` characters,
    or nested more than :data:`MAX_JSON_DEPTH` levels.

    >>> loads_arguments('{"x": 1}')
    ({'x': 1}, None)
    >>> loads_arguments("[" * 2000 + "]" * 2000)[1]
    'nested more than 100 levels deep'
    """
    if len(raw) > MAX_ARGUMENT_CHARS:
        return None, f"{len(raw):,} characters long, more than the {MAX_ARGUMENT_CHARS:,} evalkit decodes"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e.msg})"
    except RecursionError:
        return None, f"nested more than {MAX_JSON_DEPTH} levels deep"
    if _depth_over(value, MAX_JSON_DEPTH):
        return None, f"nested more than {MAX_JSON_DEPTH} levels deep"
    return value, None


def cut_text(text: str, limit: int = MAX_STORED_CHARS) -> str:
    """``text`` cut to its first ``limit`` characters and a marker saying how much was cut (as it is when
    shorter)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[evalkit: {len(text) - limit:,} of {len(text):,} characters cut]"


def cap_texts(value: Any, path: str, cuts: list[str], limit: int = MAX_STORED_CHARS) -> Any:
    """``value`` with every string longer than ``limit`` cut (:func:`cut_text`), in lists and objects too;
    each cut is added to ``cuts`` as ``path (size)``. Values within the limit are returned as they are."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        cuts.append(f"{path} ({len(value):,} characters)")
        return cut_text(value, limit)
    if isinstance(value, list):
        return [cap_texts(v, f"{path}[{i}]", cuts, limit) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: cap_texts(v, f"{path}.{k}", cuts, limit) for k, v in value.items()}
    return value
