"""A capacity dir (``evalkit capacity -o DIR``): ``capacity.json`` (:class:`~evalkit.contracts.CapacityRecord`)
beside the run dirs of its load points. :func:`write_capacity` writes the record atomically;
:func:`open_capacity` reads it back typed, as :func:`~evalkit.store.open_run` reads a run: leniently, field by
field (:func:`~evalkit.store.lenient.lenient`), what does not read named in ``dropped``, and each point's run
dir opened through :func:`~evalkit.store.open_run` on request.

Example::

    cap = open_capacity("reports/cap1")
    cap.record.capacity_rps, cap.record.bracket
    run = cap.point_run(cap.record.points[-1])   # an ordinary Run
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from evalkit.contracts import CapacityPoint, CapacityRecord
from evalkit.contracts.capacity import CAPACITY_SCHEMA_VERSION
from evalkit.errors import StoreError
from evalkit.store.files import write_json_atomic
from evalkit.store.lenient import Dropped, lenient
from evalkit.store.reader import Run, open_run

CAPACITY = "capacity.json"
CAPACITY_HTML = "capacity.html"


def write_capacity(capacity_dir: str | Path, record: CapacityRecord) -> Path:
    """Write ``capacity.json`` into ``capacity_dir`` (atomically: a failed write leaves the previous file)."""
    path = Path(capacity_dir) / CAPACITY
    write_json_atomic(path, record.model_dump(mode="json"))
    return path


@dataclass
class CapacityRead:
    """A capacity dir as read: its ``record``, the values of ``capacity.json`` that did not read (``dropped``)
    and ``notes`` (a newer layout than this evalkit reads)."""

    path: Path
    record: CapacityRecord
    dropped: list[Dropped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def point_run(self, point: CapacityPoint, *, with_samples: bool = True) -> Run:
        """The run dir of ``point`` (FileNotFoundError when it is gone)."""
        run_dir = (self.path / point.run_dir).resolve()
        if not run_dir.is_relative_to(self.path.resolve()):
            raise StoreError(f"{CAPACITY}: point run_dir {point.run_dir!r} leaves the capacity dir {self.path}")
        return open_run(run_dir, with_samples=with_samples)


def open_capacity(capacity_dir: str | Path) -> CapacityRead:
    """Read ``capacity_dir``'s ``capacity.json``: StoreError (one line, naming the file and the fix) when it is
    missing, not JSON, or lacks a field the record cannot be without (status, search, SLOs, decision, …)."""
    path = Path(capacity_dir)
    file = path / CAPACITY
    if not file.is_file():
        raise StoreError(f"{file} is missing: {path} is not a capacity dir (written by evalkit capacity -o DIR)")
    try:
        raw = orjson.loads(file.read_bytes())
    except (orjson.JSONDecodeError, OSError) as e:
        raise StoreError(f"{file} could not be read: {e}") from None
    dropped: list[Dropped] = []
    record = lenient(CapacityRecord, raw, "", dropped)
    if record is None:
        raise StoreError(f"{file} is not a capacity record (a required field is missing or unreadable)")
    notes = []
    if record.capacity_schema_version > CAPACITY_SCHEMA_VERSION:
        notes.append(
            f"{CAPACITY} has capacity_schema_version {record.capacity_schema_version}, newer than this evalkit reads "
            f"({CAPACITY_SCHEMA_VERSION}): upgrade evalkit"
        )
    return CapacityRead(path=path, record=record, dropped=dropped, notes=notes)
