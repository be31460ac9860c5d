"""The run directory: the source of truth every downstream tool reads.

- ``manifest.json``: written at start and rewritten at the end, atomically.
- ``samples.jsonl``: append-only, one record per completed request, written through to the OS per record (a
  killed evalkit loses nothing) and fsynced at most every ``sync_interval_s`` and on close (a power cut loses
  at most that much); a torn last line (crash mid-write) is ignored on read. Appends are thread-safe.
- ``summary.json``: written atomically at the end.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import ConfigError
from evalkit.records import SampleRecord

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
SUMMARY = "summary.json"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` via a temp file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are as readable as report.html
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def iter_sample_dicts(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a samples.jsonl, read line by line; a torn (unparseable) last line is skipped."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                if not line.endswith(b"\n") and not f.read(1):  # the last record, cut mid-write by a crash
                    return
                raise


class RunStore:
    """One run directory.

    Example::

        store = RunStore(Path("reports/run1")).open()
        store.append(record)
    """

    def __init__(self, run_dir: Path, sync_interval_s: float = 1.0) -> None:
        self.dir = Path(run_dir)
        self.sync_interval_s = sync_interval_s
        self._fh: Any = None
        self._lock = threading.Lock()
        self._synced = 0.0

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    @property
    def samples_path(self) -> Path:
        return self.dir / SAMPLES

    @property
    def summary_path(self) -> Path:
        return self.dir / SUMMARY

    def ensure_writable(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / ".evalkit-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise ConfigError(
                f"output dir {self.dir} is not writable ({e.strerror}); pass another --output-dir"
            ) from None

    def open(self) -> RunStore:
        self.ensure_writable()
        self._repair_torn_tail()
        self._fh = open(self.samples_path, "ab")  # noqa: SIM115 - closed in close()
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

    def append(self, record: SampleRecord) -> None:
        line = orjson.dumps(record.model_dump(mode="json")) + b"\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
            now = time.monotonic()
            if now - self._synced >= self.sync_interval_s:
                os.fsync(self._fh.fileno())
                self._synced = now

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None

    def records(self) -> list[SampleRecord]:
        return [SampleRecord.model_validate(d) for d in iter_sample_dicts(self.samples_path)]

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json_atomic(self.manifest_path, manifest)

    def read_manifest(self) -> dict[str, Any] | None:
        return read_json(self.manifest_path) if self.manifest_path.exists() else None

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.summary_path, summary)


def load_for_summary(
    store: RunStore, task: str, keep_text: bool, keep_itl: bool = True
) -> tuple[list[SampleRecord], array]:
    """The task's latest records, streamed from samples.jsonl and slimmed for summarising: prompts (and
    responses unless ``keep_text``) dropped, every ITL moved into one float32 array (left empty unless
    ``keep_itl``). Keeps a 20,000-sample run with 1,000-token answers within a few hundred MB."""
    itl = array("f")
    by_key: dict[str, SampleRecord] = {}
    for d in iter_sample_dicts(store.samples_path):
        if d.get("task") != task:
            continue
        if keep_itl:
            itl.extend(d.get("itl_ms") or ())  # only answered requests have ITLs, and those are never re-sent
        d["itl_ms"], d["prompt"], d["messages"] = [], "", None
        if not keep_text:
            d["response"] = d["reasoning"] = None
        by_key[d["key"]] = SampleRecord.model_construct(**d)
    return sorted(by_key.values(), key=lambda r: (r.doc_id, r.sample_index)), itl
