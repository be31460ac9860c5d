"""The store's column-wise copy of a task's records (evalkit/store/sample_rows.py): every field a summary reads
equals the record's, the latest line of a re-sent request wins, the order is load_for_summary's (document, sample
index, then first line), ITLs by row and by endpoint, and a long run's rows stay small."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from evalkit.contracts import UNRECORDED, SampleFields, SampleRecord
from evalkit.store import RunStore
from evalkit.store.writer import load_for_summary

FIELDS = [name for name in dir(SampleFields) if isinstance(getattr(SampleFields, name), property)]
SLIM = {"prompt": "", "messages": None, "itl_ms": []}  # what a summary never reads
TEXTS = ("response", "reasoning")


def key(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def record(i: int, **kw: Any) -> SampleRecord:
    base: dict[str, Any] = dict(
        key=key(i), task="t", doc_id=i % 7, sample_index=i // 7, prompt=f"prompt {i}", status="ok",
        response=f"answer {i % 3}", finish_reason="stop", target=str(i % 7), extracted={"strict": str(i % 5)},
        correct={"strict": i % 2 == 0}, prompt_tokens=100 + i, output_tokens=i % 40, ttft_ms=10.0 + i,
        tpot_ms=1.5, e2e_ms=100.0 + i, itl_ms=[1.0 + i, 2.0], start_s=0.25 * i,
    )  # fmt: skip
    return SampleRecord(**{**base, **kw})


def varied() -> list[SampleRecord]:
    """Every kind of value a column holds: Nones, other tasks, endpoints, re-sent lines, tool calls, figures."""
    out = [record(i) for i in range(40)]
    out[3] = record(3, status="api_error", error="HTTP 503", response=None, output_tokens=None, ttft_ms=None,
                    tpot_ms=None, e2e_ms=None, itl_ms=[], attempts=3, extracted={}, correct={})  # fmt: skip
    out[5] = record(5, retry_lost_s=1.25, scheduled_s=1.0, endpoint="http://b:8000/v1", reasoning="think")
    out[6] = record(6, tool_calls=[{"id": "c", "name": "f", "arguments": "{}"}], figures={"positions": 3.0})
    out[7] = record(7, turns=[{"user": "hi", "requests": []}], extraction="boxed", reasoning_tokens=12)
    out.append(record(41, task="other"))  # another task's line: not read
    out.append(record(3, attempts=4))  # request 3 re-sent and answered: this line wins, in request 3's place
    out.append(record(42, doc_id=3, sample_index=0))  # a tie with request 3's (document, sample index)
    return out


def slimmed(records: list[SampleRecord], task: str, keep_text: bool) -> list[SampleRecord]:
    """What load_for_summary returned before the columns: the latest record per key (in its first line's place),
    slimmed, ordered by (document, sample index)."""
    by_key: dict[str, SampleRecord] = {}
    for r in records:
        if r.task == task:
            update = {**SLIM, **({} if keep_text else dict.fromkeys(TEXTS))}
            by_key[r.key] = r.model_copy(update=update)
    return sorted(by_key.values(), key=lambda r: (r.doc_id, r.sample_index))


def stored(tmp_path: Path, records: list[SampleRecord]) -> RunStore:
    store = RunStore(tmp_path).open()
    store.append_many(records)
    store.close()
    return store


@pytest.mark.parametrize("keep_text", [False, True])
def test_rows_read_as_the_records_they_hold(tmp_path: Path, keep_text: bool) -> None:
    records = varied()
    rows = load_for_summary(stored(tmp_path, records), "t", keep_text=keep_text, by_endpoint=True)
    want = slimmed(records, "t", keep_text)
    assert len(rows) == len(want) == 41 and len(FIELDS) == len(SampleRecord.model_fields)
    for row, rec in zip(rows, want, strict=True):
        for name in FIELDS:
            assert getattr(row, name) == getattr(rec, name), (rec.key, name)
    assert [r.key for r in rows[:3]] == [r.key for r in want[:3]]  # slices too
    assert rows[-1].key == want[-1].key
    got = {r.key: r for r in rows}
    assert got[key(3)].attempts == 4  # the re-sent request's last line
    ties = [r.key for r in rows if (r.doc_id, r.sample_index) == (3, 0)]
    assert ties == [key(3), key(42)]  # first lines' order: 3 came before 42


def test_itls_by_row_and_by_endpoint(tmp_path: Path) -> None:
    records = varied()
    rows = load_for_summary(stored(tmp_path, records), "t", keep_text=False, by_endpoint=True)
    for row in rows:
        want = next(r for r in reversed(records) if r.key == row.key).itl_ms
        assert rows.itl_of(row).tolist() == want
    assert len(rows.itl) == sum(len(r.itl_ms) for r in records if r.task == "t")  # every line's, as stored
    b = [x for r in records if r.task == "t" and r.endpoint == "http://b:8000/v1" for x in r.itl_ms]
    assert rows.itl_by_endpoint["http://b:8000/v1"].tolist() == b
    assert len(rows.itl_by_endpoint[UNRECORDED]) == len(rows.itl) - len(b)
    without = load_for_summary(stored(tmp_path / "again", records), "t", keep_text=False, keep_itl=False)
    assert len(without.itl) == 0 and without.itl_by_endpoint == {}


def test_any_key_reads_back_and_a_hash_shared_by_two_keys_keeps_both(tmp_path: Path, monkeypatch) -> None:
    records = [record(i) for i in range(6)]
    records[2] = record(2, key="not-a-hex-key")
    monkeypatch.setattr("evalkit.store.sample_rows.HASH_MASK", 0)  # every key hashes alike: told apart by reading
    rows = load_for_summary(stored(tmp_path, [*records, record(4, attempts=2)]), "t", keep_text=False)
    assert [r.key for r in rows] == [r.key for r in slimmed(records, "t", False)]
    assert [r.attempts for r in rows if r.key == key(4)] == [2]


def test_a_long_runs_rows_stay_small(tmp_path: Path) -> None:
    """180,000 records as models were ~400 MB; as columns a row is ~100 bytes (its ITLs apart)."""
    n = 50_000
    store = stored(tmp_path, [record(i, itl_ms=[], scheduled_s=0.02 * i) for i in range(n)])
    load_for_summary(store, "t", keep_text=False)  # numpy's and the modules' imports, outside the count
    tracemalloc.start()
    rows = load_for_summary(store, "t", keep_text=False)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(rows) == n and held / n < 140 and peak / n < 200, f"{held / n:.0f}, peak {peak / n:.0f} bytes a row"
