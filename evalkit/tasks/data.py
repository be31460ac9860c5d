"""Reading vendored JSONL data with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import DataError


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a bad line raises DataError naming file and line."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError(f"data file not found: {path}; reinstall evalkit or fix the task's 'data' paths") from None
    rows: list[dict[str, Any]] = []
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise DataError(f"{path}:{lineno}: not valid JSON ({e}); restore the file from the package") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object per line; restore the file from the package")
        rows.append(row)
    return rows
