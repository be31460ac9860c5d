"""The prompt cache: lm-eval's requests for every document of a task, built once and kept as one JSON file per
task and few-shot setting (``{"format", "documents", "sha256", "entries"}``), so later runs skip lm-eval's build.

A file is used only if it still holds every document, unchanged: its entries' count must equal the count stored
with them and the number of documents the task's data has, and their sha256 the one stored. Anything else is
removed and rebuilt, with one line on stderr, so a damaged cache never shrinks a run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import warn
from evalkit.store.files import write_json_atomic

FORMAT = 2

_warned_unwritable: set[Path] = set()


def prompt_cache_dir() -> Path:
    """``$EVALKIT_CACHE_DIR/prompts``, else ``$XDG_CACHE_HOME/evalkit/prompts`` (``~/.cache/evalkit/prompts``)."""
    root = os.environ.get("EVALKIT_CACHE_DIR")
    if root:
        return Path(root) / "prompts"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalkit" / "prompts"


def _sha256(entries: list[dict[str, Any]]) -> str:
    return hashlib.sha256(orjson.dumps(entries)).hexdigest()


def _problem(data: Any, expected: int | None) -> str | None:
    """What is wrong with a cache file's content (None: nothing)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        return "is not a prompt cache file (not JSON, or another format)"
    n = len(data["entries"])
    if n != data.get("documents") or (expected is not None and n != expected):
        return f"holds {n} of the {expected if expected is not None else data.get('documents')} documents"
    if data.get("sha256") != _sha256(data["entries"]):
        return "does not match its checksum"
    return None


def read_cache(path: Path, expected: int | None) -> list[dict[str, Any]] | None:
    """The entries of the cache file at ``path`` if it holds all ``expected`` documents (None: as many as it says
    it holds), unchanged; else None (no file; or a bad one, removed after one line on stderr)."""
    try:
        data = orjson.loads(path.read_bytes())
        problem = _problem(data, expected)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        problem = f"cannot be read ({e.strerror})"
    except orjson.JSONDecodeError:
        problem = _problem(None, expected)
    if problem is not None:
        warn(f"prompt cache {path} {problem}; building the prompts again")
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    entries: list[dict[str, Any]] = data["entries"]
    return entries


def write_cache(path: Path, entries: list[dict[str, Any]]) -> None:
    """Write the cache file atomically; a folder that cannot be written only costs time (``cache_writable`` says
    so when a run finds the cache cold)."""
    with contextlib.suppress(OSError):
        write_json_atomic(
            path, {"format": FORMAT, "documents": len(entries), "sha256": _sha256(entries), "entries": entries}
        )


def cache_writable(folder: Path) -> bool:
    """Whether cache files can be written in ``folder`` (created if missing); if not, says so in one line, once
    per folder: every run would build the prompts again."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except OSError as e:
        if folder not in _warned_unwritable:
            _warned_unwritable.add(folder)
            warn(
                f"the prompt cache {folder} is not writable ({e.strerror}): every run builds the prompts again; "
                "set EVALKIT_CACHE_DIR to a writable folder"
            )
        return False
