"""``positions.bin``: the teacher-forced positions of a ``logprobs`` task's requests, one
:class:`evalkit.contracts.PromptPositions` per request, appended as each request completes.

Binary, not JSON lines (a 400-token text at top-20 is ~17,000 numbers). The file starts with :data:`MAGIC`; each
record is ``b"POS1"``, the header's and the body's lengths (``<II``), the header (JSON: ``key``, ``task``,
``doc_id``, ``sample_index``, ``n``, ``k``, ``m``, ``tokens``), the body (little-endian: ``token_ids`` int32[n],
``token_logprobs`` float32[n], ``top_ids`` int32[n*k], ``top_logprobs`` float32[n*k], ``continuation_ids``
int32[m]) and the CRC-32 of header and body (``<I``). A torn last record (a crash mid-write) is ignored on read
and cut when the file is opened for appending (a failed write, disk full, is cut back at once); a record whose
CRC does not match ends the read with a warning.
When a key was written twice (a request re-sent on resume after its positions but before its sample record
reached disk), the last record counts. A record is written before its request's sample record, so a completed
sample always has its positions.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import orjson

from evalkit.contracts import PromptPositions
from evalkit.errors import StoreError
from evalkit.store.files import write_all, write_error

POSITIONS = "positions.bin"
MAGIC = b"EVALKIT-POSITIONS 1\n"
_TAG = b"POS1"
_HEAD = struct.Struct("<4sII")
_CRC = struct.Struct("<I")
_I32, _F32 = "<i4", "<f4"  # as stored (numpy is imported where a record is encoded or decoded, not with the run)
log = logging.getLogger("evalkit")


def encode(p: PromptPositions) -> bytes:
    """One record of ``positions.bin``."""
    import numpy as np

    n, k, m = p.n, p.k, int(p.continuation_ids.shape[0])
    if p.token_logprobs.shape != (n,) or p.top_ids.shape != (n, k) or p.top_logprobs.shape != (n, k):
        raise ValueError(f"positions of {p.key}: arrays of mismatched shapes")
    if len(p.tokens) != n:
        raise ValueError(f"positions of {p.key}: {len(p.tokens)} token texts for {n} tokens")
    header = orjson.dumps(
        {"key": p.key, "task": p.task, "doc_id": p.doc_id, "sample_index": p.sample_index, "n": n, "k": k, "m": m,
         "tokens": list(p.tokens)}
    )  # fmt: skip
    body = b"".join(
        np.ascontiguousarray(a, dtype=t).tobytes()
        for a, t in (
            (p.token_ids, _I32), (p.token_logprobs, _F32), (p.top_ids, _I32), (p.top_logprobs, _F32),
            (p.continuation_ids, _I32),
        )
    )  # fmt: skip
    return _HEAD.pack(_TAG, len(header), len(body)) + header + body + _CRC.pack(zlib.crc32(header + body))


def _decode(header: bytes, body: bytes) -> PromptPositions:
    import numpy as np

    h = orjson.loads(header)
    n, k, m = int(h["n"]), int(h["k"]), int(h["m"])
    if len(body) != 4 * (2 * n + 2 * n * k + m):
        raise ValueError("body length does not match its header")
    arrays, at = [], 0
    layout = ((_I32, n, (n,)), (_F32, n, (n,)), (_I32, n * k, (n, k)), (_F32, n * k, (n, k)), (_I32, m, (m,)))
    for dtype, count, shape in layout:
        stored = np.frombuffer(body, dtype=dtype, count=count, offset=at).reshape(shape)
        arrays.append(stored.astype(np.dtype(dtype).newbyteorder("="), copy=True))  # native byte order, writable
        at += 4 * count
    return PromptPositions(
        key=str(h["key"]), task=str(h["task"]), doc_id=int(h["doc_id"]), sample_index=int(h["sample_index"]),
        token_ids=arrays[0], token_logprobs=arrays[1], top_ids=arrays[2], top_logprobs=arrays[3],
        tokens=tuple(str(t) for t in h["tokens"]), continuation_ids=arrays[4],
    )  # fmt: skip


def _records(data: bytes, path: Path) -> Iterator[tuple[int, PromptPositions]]:
    """(end offset, record) for each whole record; stops at a torn tail, warns at a damaged record."""
    at = len(MAGIC)
    while at + _HEAD.size <= len(data):
        tag, hlen, blen = _HEAD.unpack_from(data, at)
        end = at + _HEAD.size + hlen + blen + _CRC.size
        if tag != _TAG or end > len(data):
            if tag != _TAG:
                log.warning("evalkit: warning: %s: no record at byte %d; the rest is ignored", path, at)
            return
        header = data[at + _HEAD.size : at + _HEAD.size + hlen]
        body = data[at + _HEAD.size + hlen : end - _CRC.size]
        try:
            if _CRC.unpack_from(data, end - _CRC.size)[0] != zlib.crc32(header + body):
                raise ValueError("CRC mismatch")
            record = _decode(header, body)
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
            log.warning("evalkit: warning: %s: damaged record at byte %d (%s); the rest is ignored", path, at, e)
            return
        yield end, record
        at = end


def read_positions(run_dir: Path, task: str | None = None) -> dict[str, PromptPositions]:
    """The run's positions by request key (``task``'s only, when given); {} when the run has none."""
    path = Path(run_dir) / POSITIONS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}; check the run dir's permissions") from None
    if not data.startswith(MAGIC):
        raise StoreError(f"{path} is not a positions file evalkit wrote; rerun the task with --fresh")
    return {p.key: p for _, p in _records(data, path) if task is None or p.task == task}


class PositionsWriter:
    """Appends records to a run dir's ``positions.bin`` (thread-safe; each record reaches the OS as written).

    Example::

        with PositionsWriter(run_dir) as w:
            w.append(positions)
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / POSITIONS
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0

    def open(self) -> PositionsWriter:
        """Opens for appending: creates the file, or cuts a torn last record of an earlier run."""
        try:
            data = self.path.read_bytes() if self.path.exists() else b""
            if data and not data.startswith(MAGIC):
                raise StoreError(f"{self.path} is not a positions file evalkit wrote; rerun with --fresh")
            whole = max((end for end, _ in _records(data, self.path)), default=len(MAGIC)) if data else 0
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.ftruncate(self._fd, whole)
            os.lseek(self._fd, whole, os.SEEK_SET)
            if whole == 0:
                write_all(self._fd, MAGIC)
            self._size = max(whole, len(MAGIC))
        except OSError as e:
            raise write_error(self.path, e, "free space or fix permissions, then resume") from None
        return self

    def append(self, positions: PromptPositions) -> None:
        record = encode(positions)
        with self._lock:
            if self._fd is None:
                self.open()
            assert self._fd is not None
            try:
                write_all(self._fd, record)
                self._size += len(record)
            except OSError as e:  # cut back to the last whole record: the file stays readable
                os.ftruncate(self._fd, self._size)
                os.lseek(self._fd, self._size, os.SEEK_SET)
                raise write_error(
                    self.path, e, "the positions written so far are kept; free space, then resume"
                ) from None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                try:
                    os.fsync(self._fd)
                finally:
                    os.close(self._fd)
                    self._fd = None

    def __enter__(self) -> PositionsWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
