"""The run dir under stress: one process owns it at a time (an OS lock that a killed run does not leave behind),
a full disk stops the run with one line and loses nothing already stored, and a corrupt store is a one-line
error or a counted quarantine on resume, never a traceback (``--fresh`` always starts over).

Here: those of its tests that run in-process; the others are in tests/integration/test_run_dir.py."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from evalkit.contracts import SampleRecord
from evalkit.errors import ConfigError, StoreError
from evalkit.store import RunStore
from tests.integration.test_run_dir import FullDisk, lines


def test_a_full_disk_cuts_back_to_the_last_whole_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore(tmp_path).open()
    store.append(SampleRecord(key="k0", task="t", doc_id=0, prompt="p", status="ok"))
    disk = FullDisk(tmp_path, free=20)  # less than a record: the next write is cut short, then fails
    monkeypatch.setattr(os, "write", disk)
    with pytest.raises(StoreError, match=r"samples\.jsonl: no space left on device \(disk full\)"):
        store.append(SampleRecord(key="k1", task="t", doc_id=1, prompt="p", status="ok"))
    assert disk.failed == 1
    assert [orjson.loads(x)["key"] for x in lines(tmp_path)] == ["k0"]  # the partial line is gone
    disk.free = None
    store.append(SampleRecord(key="k2", task="t", doc_id=2, prompt="p", status="ok"))
    store.close()
    assert [orjson.loads(x)["key"] for x in lines(tmp_path)] == ["k0", "k2"]


# -------------------------------------------------------------------------------------------------- the lock
def test_a_locked_dir_is_refused_naming_the_holder_and_free_once_unlocked(tmp_path: Path) -> None:
    first = RunStore(tmp_path / "run").lock()
    with pytest.raises(ConfigError, match=rf"run is in use by another evalkit run \(pid {os.getpid()}\)"):
        RunStore(tmp_path / "run").lock()
    first.unlock()
    RunStore(tmp_path / "run").lock().unlock()
