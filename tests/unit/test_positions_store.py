"""positions.bin: records written are read back exactly; torn tails, damage and re-sent keys are handled."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from evalkit.contracts import PromptPositions
from evalkit.errors import StoreError
from evalkit.store.positions_file import MAGIC, POSITIONS, PositionsWriter, encode, read_positions


def positions(key: str, n: int = 5, k: int = 3, m: int = 4, doc_id: int = 0, shift: float = 0.0) -> PromptPositions:
    rng = np.random.default_rng(abs(hash(key)) % 2**32)
    top = rng.integers(0, 1000, size=(n, k)).astype(np.int32)
    top[0] = -1
    top_lp = np.sort(-rng.random((n, k)).astype(np.float32) * 5, axis=1)[:, ::-1].copy() + np.float32(shift)
    top_lp[0] = np.nan
    lp = (-rng.random(n) * 3).astype(np.float32)
    lp[0] = np.nan
    return PromptPositions(
        key=key, task="numerics", doc_id=doc_id, sample_index=0, token_ids=rng.integers(0, 1000, n).astype(np.int32),
        token_logprobs=lp, top_ids=top, top_logprobs=top_lp, tokens=tuple(f"t{i}\n<&" for i in range(n)),
        continuation_ids=np.arange(m, dtype=np.int32),
    )  # fmt: skip


def same(a: PromptPositions, b: PromptPositions) -> bool:
    arrays = ("token_ids", "token_logprobs", "top_ids", "top_logprobs", "continuation_ids")
    return (a.key, a.task, a.doc_id, a.sample_index, a.tokens) == (
        b.key,
        b.task,
        b.doc_id,
        b.sample_index,
        b.tokens,
    ) and all(
        np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) and getattr(a, f).dtype == getattr(b, f).dtype
        for f in arrays
    )


def test_round_trip_and_task_filter(tmp_path: Path) -> None:
    written = [positions("a"), positions("b", n=1, k=0, m=0), positions("c", n=300, k=20, m=64, doc_id=7)]
    with PositionsWriter(tmp_path) as w:
        for p in written:
            w.append(p)
    got = read_positions(tmp_path)
    assert list(got) == ["a", "b", "c"]
    assert all(same(got[p.key], p) for p in written)
    assert read_positions(tmp_path, task="other") == {}
    assert read_positions(tmp_path / "none") == {}


def test_torn_tail_ignored_then_cut_and_last_record_of_a_key_wins(tmp_path: Path) -> None:
    with PositionsWriter(tmp_path) as w:
        w.append(positions("a"))
        w.append(positions("b"))
    path = tmp_path / POSITIONS
    whole = path.stat().st_size
    path.write_bytes(path.read_bytes() + encode(positions("c"))[:-7])  # a crash mid-write
    assert list(read_positions(tmp_path)) == ["a", "b"]
    again = positions("a", shift=-1.0)
    with PositionsWriter(tmp_path) as w:  # resume: the torn record is cut, "a" re-sent
        assert path.stat().st_size == whole
        w.append(again)
    got = read_positions(tmp_path)
    assert list(got) == ["a", "b"] and same(got["a"], again)


def test_damaged_record_ends_the_read_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with PositionsWriter(tmp_path) as w:
        for key in "abc":
            w.append(positions(key))
    path = tmp_path / POSITIONS
    data = bytearray(path.read_bytes())
    second = len(MAGIC) + len(encode(positions("a")))
    data[second + 40] ^= 0xFF  # a flipped byte inside record "b"
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="evalkit"):
        assert list(read_positions(tmp_path)) == ["a"]
    assert "damaged record" in caplog.text


def test_not_a_positions_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / POSITIONS).write_bytes(b'{"not": "ours"}\n')
    with pytest.raises(StoreError, match="not a positions file evalkit wrote; rerun"):
        read_positions(tmp_path)
    with pytest.raises(StoreError, match="--fresh"):
        PositionsWriter(tmp_path).open()


def test_mismatched_shapes_are_refused(tmp_path: Path) -> None:
    p = positions("a")
    bad = PromptPositions(**{**p.__dict__, "tokens": p.tokens[:-1]})
    with pytest.raises(ValueError, match="token texts"):
        encode(bad)
