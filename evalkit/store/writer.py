"""Writing a run directory (the lock, samples appended as they come, manifest and summary) for `evalkit run`.

- ``manifest.json``: written at start and rewritten at the end, atomically; on resume, one that is not JSON or
  not shaped as evalkit writes it is a one-line error naming the file and ``--fresh``.
- ``samples.jsonl``: append-only, one record per completed request, written through to the OS as each batch of
  records comes (:meth:`RunStore.append_many`, one write per batch: a killed evalkit loses nothing stored) and
  fsynced at most every ``sync_interval_s`` and on close (a power cut loses at most that much); a torn last line
  (crash mid-write) is ignored on read and cut on open. A failed write (disk full) is cut back to the last whole
  record and raised as a one-line ``StoreError``. Opening for a run moves lines that are not sample records (a
  garbage line mid-file) to ``samples.corrupt.jsonl``. Appends are thread-safe.
- ``summary.json``: written atomically at the end (a failed write leaves the previous one whole).
- ``.evalkit.lock``: a run owns its dir through an OS lock (``flock``) on this file, which holds its pid; the OS
  releases it when the process ends in any way, so a killed run leaves no lock behind. Readers do not lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from evalkit.contracts import Manifest, RunSummary, SampleRecord, manifest_json, summary_json
from evalkit.errors import ConfigError
from evalkit.store.files import (
    CORRUPT,
    LOCK,
    MANIFEST,
    SAMPLES,
    SUMMARY,
    iter_sample_dicts,
    read_json,
    write_all,
    write_error,
    write_json_atomic,
)
from evalkit.store.sample_rows import SampleRows


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def manifest_problem(m: Any) -> str | None:
    """What makes ``m`` unlike a manifest evalkit writes (the parts a resume reads), or None."""
    if not isinstance(m, dict):
        return f"it is {_json_type(m)}, not an object"
    for name, kind in (("model", str), ("endpoint", dict), ("tasks", dict), ("created_at", str), ("resumed_at", list)):
        if name in m and not isinstance(m[name], kind):
            return f'"{name}" is {_json_type(m[name])}, not {_json_type(kind())}'
    for name, task in (m.get("tasks") or {}).items():
        if not isinstance(task, dict):
            return f'task "{name}" is {_json_type(task)}, not an object'
    if not all(isinstance(t, str) for t in m.get("resumed_at") or ()):
        return '"resumed_at" holds something other than strings'
    return None


class RunStore:
    """One run directory.

    Example::

        store = RunStore(Path("reports/run1")).lock()   # owned by this process until unlock() or exit
        store.open()                                     # store.completed: keys answered by earlier runs
        store.append(record)
    """

    def __init__(self, run_dir: Path, sync_interval_s: float = 1.0) -> None:
        self.dir = Path(run_dir)
        self.sync_interval_s = sync_interval_s
        self._fd: int | None = None
        self._size = 0  # bytes of whole records in samples.jsonl
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._created = False  # lock() made the run dir: unlock() removes it again when nothing else was written
        self._synced = -float("inf")  # the first append is fsynced (time.monotonic() may start near 0)
        self.completed: dict[str, set[str]] = {}  # task -> keys stored with an answer (not api_error)
        # records with an answer (not api_error) by the endpoint they name (None: the manifest's endpoint)
        self.answered_by: dict[str | None, int] = {}
        self.quarantined = 0  # unreadable lines moved to samples.corrupt.jsonl by open()

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    @property
    def samples_path(self) -> Path:
        return self.dir / SAMPLES

    @property
    def summary_path(self) -> Path:
        return self.dir / SUMMARY

    @property
    def corrupt_path(self) -> Path:
        return self.dir / CORRUPT

    def _not_writable(self, e: OSError) -> ConfigError:
        return ConfigError(f"output dir {self.dir} is not writable ({e.strerror}); pass another --output-dir")

    def ensure_writable(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / ".evalkit-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise self._not_writable(e) from None

    # -- ownership -----------------------------------------------------------------------------------------
    def lock(self) -> RunStore:
        """Own the run dir (creating it) before anything in it is changed: an exclusive ``flock`` on
        ``.evalkit.lock``, which then holds this pid. Another run holding it is a ConfigError naming its pid."""
        path = self.dir / LOCK
        try:
            self._created = not self.dir.exists()
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise self._not_writable(e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd) if e.errno in (errno.EWOULDBLOCK, errno.EACCES) else None
            os.close(fd)
            if holder is None:
                raise ConfigError(f"cannot lock {path} ({e.strerror}); pass an --output-dir on a local disk") from None
            raise ConfigError(
                f"{self.dir} is in use by another evalkit run (pid {holder}); wait for it to finish, "
                "or pass another --output-dir"
            ) from None
        with contextlib.suppress(OSError):  # the pid is for messages only: the lock holds without it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd
        return self

    def unlock(self) -> None:
        """Give the run dir up (the OS does the same when the process ends). A run dir that :meth:`lock` made
        and that holds nothing but the lock (the run failed before writing, e.g. it could not connect) is
        removed, so that a failed start leaves no empty run dir behind."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            empty = self._created and [p.name for p in self.dir.iterdir()] == [LOCK]
            with contextlib.suppress(OSError):
                if empty:
                    (self.dir / LOCK).unlink()
                os.ftruncate(fd, 0)
            os.close(fd)  # releases the flock
            if empty:
                with contextlib.suppress(OSError):  # someone wrote there meanwhile: it stays
                    self.dir.rmdir()

    # -- samples -------------------------------------------------------------------------------------------
    def open(self) -> RunStore:
        """Open samples.jsonl for appending: cut a torn last line, move unreadable lines (not sample records)
        to samples.corrupt.jsonl (``quarantined`` counts them) and collect ``completed``."""
        self.ensure_writable()
        self._repair_torn_tail()
        bad = self._scan()
        if bad:
            self._quarantine(bad)
        self.quarantined = len(bad)
        self._fd = os.open(self.samples_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        return self

    def _repair_torn_tail(self) -> None:
        """Drop a partial last line left by a crash, so appends start on a fresh line."""
        p = self.samples_path
        if not p.exists() or p.stat().st_size == 0:
            return
        data = p.read_bytes()
        if data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        with open(p, "r+b") as f:
            f.truncate(cut)

    def _scan(self) -> set[int]:
        """Validate every line of samples.jsonl as a SampleRecord, filling ``completed``; the numbers of the
        lines that are not one."""
        self.completed = {}
        self.answered_by = {}
        bad: set[int] = set()
        if not self.samples_path.exists():
            return bad
        with open(self.samples_path, "rb") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    rec = SampleRecord.model_validate_json(line)
                except ValidationError:
                    bad.add(i)
                    continue
                if rec.status != "api_error":  # failed requests are sent again
                    self.completed.setdefault(rec.task, set()).add(rec.key)
                    self.answered_by[rec.endpoint] = self.answered_by.get(rec.endpoint, 0) + 1
        return bad

    def stamp_endpoint(self, url: str) -> int:
        """Before :meth:`open`: name ``url`` as the endpoint of every record of samples.jsonl that names none
        (rewritten atomically; lines that are not records are left for :meth:`open`); how many were stamped.
        A resumed run whose endpoints differ from the manifest's calls it with the old manifest's endpoint, so
        that each kept answer still says which server gave it."""
        if not self.samples_path.exists():
            return 0
        fd, tmp = tempfile.mkstemp(prefix=f".{SAMPLES}.", dir=self.dir)
        stamped = 0
        try:
            with open(self.samples_path, "rb") as src, os.fdopen(fd, "wb") as out:
                for line in src:
                    try:
                        rec = SampleRecord.model_validate_json(line)
                    except ValidationError:
                        out.write(line)
                        continue
                    if rec.endpoint is not None:
                        out.write(line)
                        continue
                    rec.endpoint = url
                    stamped += 1
                    out.write(orjson.dumps(rec.model_dump(mode="json")) + b"\n")
                out.flush()
                os.fsync(out.fileno())
            if not stamped:
                os.unlink(tmp)
                return 0
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.samples_path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise write_error(self.samples_path, e, f"{SAMPLES} was left as it was; free space and re-run") from None
        return stamped

    def _quarantine(self, bad: set[int]) -> None:
        """Append lines ``bad`` to samples.corrupt.jsonl and rewrite samples.jsonl without them (atomically)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{SAMPLES}.", dir=self.dir)
        try:
            with (
                open(self.samples_path, "rb") as src,
                os.fdopen(fd, "wb") as good,
                open(self.corrupt_path, "ab") as junk,
            ):
                for i, line in enumerate(src):
                    (junk if i in bad else good).write(line)
                for f in (good, junk):
                    f.flush()
                    os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.samples_path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise write_error(self.dir / CORRUPT, e, f"{SAMPLES} was left as it was; free space and re-run") from None

    def append(self, record: SampleRecord) -> None:
        """Write one record through to the OS (see :meth:`append_many`)."""
        self.append_many([record])

    def append_many(self, records: list[SampleRecord]) -> None:
        """Write ``records`` through to the OS in one write. A failed write is cut back to the last whole record
        before them and raised as a StoreError: no torn line is left."""
        if not records:
            return
        data = b"".join([orjson.dumps(r.model_dump(mode="json")) + b"\n" for r in records])
        with self._lock:
            if self._fd is None:
                raise ValueError("RunStore.append before open()")
            try:
                write_all(self._fd, data)
                now = time.monotonic()
                if now - self._synced >= self.sync_interval_s:
                    os.fsync(self._fd)
                    self._synced = now
            except OSError as e:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)
                raise write_error(
                    self.samples_path,
                    e,
                    "the answers stored before are kept; free space and re-run the same command to resume",
                ) from None
            self._size += len(data)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            try:
                os.fsync(fd)
            except OSError as e:
                raise write_error(self.samples_path, e, "re-run the same command to resume") from None
            finally:
                os.close(fd)

    def records(self) -> list[SampleRecord]:
        return [SampleRecord.model_validate(d) for d in iter_sample_dicts(self.samples_path)]

    def discard(self) -> None:
        """Delete what a run stored (samples, quarantined lines, summary, positions); the manifest is rewritten by
        the next."""
        from evalkit.store.positions_file import POSITIONS  # numpy, only for a fresh start

        for p in (self.samples_path, self.corrupt_path, self.summary_path, self.dir / POSITIONS):
            p.unlink(missing_ok=True)

    # -- manifest and summary ------------------------------------------------------------------------------
    def write_manifest(self, manifest: Manifest) -> None:
        self._write_json(self.manifest_path, manifest_json(manifest))

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest of the run in this dir, None if there is none. One that cannot be read, is not JSON or
        is not shaped as evalkit writes it is a one-line ConfigError naming the file and ``--fresh``."""
        path = self.manifest_path
        if not path.exists():
            return None
        try:
            manifest = read_json(path)
            problem = manifest_problem(manifest)
        except orjson.JSONDecodeError as e:
            problem = f"not valid JSON: {e}"
        except OSError as e:
            problem = e.strerror or str(e)
        if problem is not None:
            raise ConfigError(
                f"{path} is unreadable ({problem}); pass --fresh to start the run over (its samples are "
                "discarded), or choose another --output-dir"
            )
        return manifest

    def read_summary(self) -> dict[str, Any] | None:
        """The summary the run in this dir last wrote, None if there is none or it does not read as a JSON object
        (the run writes a new one from its samples)."""
        try:
            summary = read_json(self.summary_path)
        except (OSError, orjson.JSONDecodeError):
            return None
        return summary if isinstance(summary, dict) else None

    def write_summary(self, summary: RunSummary) -> None:
        self._write_json(self.summary_path, summary_json(summary))

    def _write_json(self, path: Path, obj: Any) -> None:
        try:
            write_json_atomic(path, obj)
        except OSError as e:
            raise write_error(
                path, e, f"{path.name} was left as it was; free space and re-run the same command"
            ) from None


def _holder(fd: int) -> str:
    """The pid written in a lock file held by another process (it writes it just after locking)."""
    for _ in range(20):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.025)
    return "unknown"


def load_for_summary(
    store: RunStore, task: str, keep_text: bool, keep_itl: bool = True, by_endpoint: bool = False
) -> SampleRows:
    """The task's latest records, streamed from samples.jsonl into columns for summarising
    (:class:`~evalkit.store.sample_rows.SampleRows`): prompts (and responses unless ``keep_text``) dropped, every
    ITL in one float32 array (left empty unless ``keep_itl``), and each endpoint's ITLs in one of their own when
    ``by_endpoint`` (a sharded run; ``UNRECORDED`` for records without one). A one-hour run's 180,000 records
    take a few tens of MB."""
    return SampleRows(store.samples_path, task, keep_text, keep_itl, by_endpoint)
