"""The run directory's file names, the one atomic writer evalkit uses for whole files (JSON, HTML, the prompt
cache) and line-by-line reading of ``samples.jsonl``."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import StoreError

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
SUMMARY = "summary.json"
CORRUPT = "samples.corrupt.jsonl"
LOCK = ".evalkit.lock"


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``: a failed write leaves
    the previous file whole and no temp file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are as readable as report.html
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def safe_file_name(text: str, limit: int = 100) -> str:
    """``text`` fit to be one file name inside a folder: ASCII letters, digits, ``-``, ``_`` and ``.`` kept,
    anything else (``/``, ``\\``, ``:``, spaces) as ``_``, a leading dot as ``_`` (so never ``..`` nor a
    hidden file), at most ``limit`` characters. A task or model name joined into a path cannot leave its folder.

    >>> safe_file_name("lm-eval:../../etc/x")
    'lm-eval_.._.._etc_x'
    """
    name = "".join(c if c.isascii() and (c.isalnum() or c in "-._") else "_" for c in text)[:limit]
    return "_" + name[1:] if name.startswith(".") else name or "_"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` atomically (see ``_replace_atomic``)."""
    _replace_atomic(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def write_text_atomic(path: Path, text: str) -> None:
    _replace_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    _replace_atomic(path, data)


def write_error(path: Path, err: OSError, then: str) -> StoreError:
    """The one-line error for a failed write of ``path``; ``then`` says what was kept and what to do."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left on device (disk full)"
    else:
        what = err.strerror or str(err)
    return StoreError(f"could not write {path}: {what}; {then}")


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def iter_sample_dicts(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a samples.jsonl, read line by line; a torn (unparseable) last line is skipped."""
    return (d for _, d in iter_sample_lines(path))


def iter_sample_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(byte offset of its line, record) of each record of a samples.jsonl; a torn (unparseable) last line is
    skipped."""
    if not path.exists():
        return
    offset = 0
    with open(path, "rb") as f:
        for line in f:
            at, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                yield at, orjson.loads(line)
            except orjson.JSONDecodeError:
                if not line.endswith(b"\n") and not f.read(1):  # the last record, cut mid-write by a crash
                    return
                raise


def sample_at(path: Path, offset: int) -> dict[str, Any]:
    """The record whose line starts at byte ``offset`` of a samples.jsonl."""
    with open(path, "rb") as f:
        f.seek(offset)
        record: dict[str, Any] = orjson.loads(f.readline())
        return record
