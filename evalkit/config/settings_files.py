"""The one reader of the settings files a user writes: ``evalkit run --config``, the sweep file and the gate's
policy. A ``.toml`` file is read as TOML, a ``.json`` file as JSON, any other as YAML.

:func:`read_settings_file` returns plain data (dicts, lists, str, int, float, bool, None) or raises the caller's
error class with one line naming the file and the fix, for a file that:

- cannot be read, or is larger than :data:`MAX_BYTES` (checked before parsing);
- is not UTF-8 text, or does not parse;
- uses YAML anchors or aliases (an alias repeats a node wherever it is used: a few KB can expand to gigabytes
  once the data is validated or written out), refused before anything is built;
- nests lists or mappings more than :data:`MAX_DEPTH` levels deep;
- holds a non-finite number (``.inf``, ``nan``) or a value no setting takes (a YAML or TOML date, binary, a set).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser as the tomli distribution (a dependency there)
    import tomli as tomllib

from evalkit.errors import EvalkitError

MAX_BYTES = 1 << 20  # 1 MiB: settings files hold a few KB
MAX_DEPTH = 32  # levels of lists and mappings, the top-level mapping included
_SCALARS = (str, int, float, bool, type(None))


class _Refused(Exception):
    """A YAML construct the reader does not accept, found while composing (before any value is built)."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases as the composer meets them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            kind = "an alias (*" if isinstance(event, yaml.AliasEvent) else "an anchor (&"
            raise _Refused(f"uses {kind}{event.anchor}) at line {event.start_mark.line + 1}")
        return super().compose_node(parent, index)


def read_settings_file(path: Path, what: str, error: type[EvalkitError]) -> dict[str, Any]:
    """The mapping in the settings file ``path`` ({} for an empty file). ``what`` names the file in messages
    ("config file", "policy file"); every problem raises ``error`` with one line."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror or e}; pass an existing, readable file") from None
    if len(raw) > MAX_BYTES:
        raise error(
            f"{what} {path} is larger than {MAX_BYTES // 1024} KiB; pass the right file (settings take a few KB)"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(
            f"{what} {path} is not UTF-8 text (byte {e.start} is {raw[e.start]:#04x}); save it as UTF-8"
        ) from None
    data = _parse(text, path, what, error)
    _check_plain(data, path, what, error)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{what} {path} must hold a mapping of settings (key: value) at the top level, not a list or value")
    return data


def _parse(text: str, path: Path, what: str, error: type[EvalkitError]) -> Any:
    fmt = {".toml": "TOML", ".json": "JSON"}.get(path.suffix.lower(), "YAML")
    try:
        if fmt == "TOML":
            return tomllib.loads(text)
        if fmt == "JSON":
            return json.loads(text) if text.strip() else None
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except _Refused as e:
        raise error(
            f"{what} {path} {e}; write the repeated values out in full (anchors and aliases are refused)"
        ) from None
    except RecursionError:
        raise error(f"{what} {path} nests lists or mappings too deeply to parse; flatten it") from None
    except yaml.MarkedYAMLError as e:
        where = f" at line {e.problem_mark.line + 1}" if e.problem_mark is not None else ""
        why = e.problem or e.context or "invalid syntax"
        raise error(f"{what} {path} does not parse as YAML{where}: {why}; fix its syntax") from None
    except json.JSONDecodeError as e:
        raise error(f"{what} {path} does not parse as JSON at line {e.lineno}: {e.msg}; fix its syntax") from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError) as e:  # ValueError: e.g. an int of 5000 digits
        first = (str(e).splitlines() or ["invalid syntax"])[0]
        raise error(f"{what} {path} does not parse as {fmt}: {first}; fix its syntax") from None


def _check_plain(data: Any, path: Path, what: str, error: type[EvalkitError]) -> None:
    """Refuse nesting deeper than MAX_DEPTH, non-finite numbers and values other than plain data."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, loc, depth = stack.pop()
        where = f"'{loc}'" if loc else "the top level"
        if isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise error(f"{what} {path} nests lists or mappings more than {MAX_DEPTH} levels deep; flatten it")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if not isinstance(key, _SCALARS):
                    raise error(f"{what} {path}: a key under {where} is a {type(key).__name__}; use a plain key")
                stack.append((item, f"{loc}.{key}" if loc else str(key), depth + 1))
        elif isinstance(value, float) and not math.isfinite(value):
            raise error(f"{what} {path}: {where} is {value}; give a finite number")
        elif not isinstance(value, _SCALARS):
            kind = type(value).__name__
            raise error(f"{what} {path}: {where} is a {kind} ({value!r:.40}); quote it if it is meant as text")
