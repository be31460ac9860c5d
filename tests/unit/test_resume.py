"""Resume: re-running the same command on a run dir continues it (completed keys are never sent again), a
different config is refused, a crash (SIGKILL, torn last line) loses nothing, and --max-error-rate fails the
run (exit 1) after writing everything, with the failed keys retried by the next run.

Here: those of its tests that run in-process; the others are in tests/integration/test_resume.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from evalkit.contracts import SampleRecord
from evalkit.store import RunStore
from evalkit.store.files import write_json_atomic
from tests.integration.test_resume import lines


# --------------------------------------------------------------------------------------- store writes
def test_json_writes_are_atomic(tmp_path: Path) -> None:
    """A write that fails half-way leaves the previous summary/manifest whole, and no temp file behind."""
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"tasks": {"a": 1}})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"tasks": {"a": object()}})  # fails while serializing
    assert json.loads(path.read_text()) == {"tasks": {"a": 1}}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # readable like report.html, not mkstemp's 0600


def test_each_sample_reaches_the_file_as_it_is_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record is written through to the OS at once (a killed evalkit loses nothing: see the SIGKILL test);
    fsync, which can block for milliseconds, runs at most once per ``sync_interval_s`` and on close."""
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    store = RunStore(tmp_path, sync_interval_s=3600).open()
    for i in range(3):
        store.append(SampleRecord(key=f"k{i}", task="t", doc_id=i, prompt="p", status="ok"))
        assert len(lines(tmp_path)) == i + 1  # in the file before the next request completes
    assert len(synced) == 1  # the first append; the next ones fall inside the interval
    store.close()
    assert len(synced) == 2  # and on close

    synced.clear()
    store = RunStore(tmp_path, sync_interval_s=0).open()
    for i in range(3):
        store.append(SampleRecord(key=f"j{i}", task="t", doc_id=i, prompt="p", status="ok"))
        assert len(synced) == i + 1  # interval 0: every append is fsynced
    store.close()
