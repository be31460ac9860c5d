"""capacity.json: the record (evalkit.contracts.capacity), its published schema and the store's typed reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.contracts import CapacityDecision, CapacityPoint, CapacityRecord, LoadFigures, ServerIdentity
from evalkit.errors import StoreError
from evalkit.store.capacity_dir import CAPACITY, open_capacity, write_capacity

ROOT = Path(__file__).resolve().parents[2]


def _record() -> CapacityRecord:
    point = CapacityPoint(
        offered=4.0, run_dir="points/01-rate-4", requests=40, good_requests=40, achieved_rps=3.9,
        goodput_share=1.0, output_tokens_per_s=120.0, ttft_p50_ms=10.0, ttft_p99_ms=20.0, tpot_p50_ms=1.0,
        tpot_p99_ms=2.0, holds=True, step="bracket",
    )  # fmt: skip
    figures = LoadFigures(**point.model_dump(include=set(LoadFigures.model_fields)))
    return CapacityRecord(
        status="ok", search="rate", slos={"ttft": 200.0}, slo_share=0.99, tolerance=0.05, start=1.0,
        capacity_rps=4.0, bracket=[4.0, 4.2], at_capacity=figures, points=[point], curve=[figures],
        decision=CapacityDecision(rule="r", bracket_steps=3, bisect_steps=2, repeats=1, points=6),
        tasks=["random"], server=ServerIdentity(endpoint="http://127.0.0.1:1/v1", model="m"),
        created_at="2026-12-06T19:00:00+00:00", evalkit_version="0",
    )  # fmt: skip


def test_capacity_json_round_trips_through_the_store(tmp_path: Path) -> None:
    write_capacity(tmp_path, _record())
    written = json.loads((tmp_path / CAPACITY).read_text())
    assert written["capacity_rps"] == 4.0 and written["bracket"] == [4.0, 4.2]
    assert "capacity_concurrency" in written and written["capacity_concurrency"] is None  # written at its default
    read = open_capacity(tmp_path)
    assert read.record == _record() and read.dropped == [] and read.notes == []
    assert read.record.model_dump(mode="json") == written


def test_an_odd_field_is_named_and_the_rest_still_reads(tmp_path: Path) -> None:
    raw = _record().model_dump(mode="json")
    raw["cost_per_million_output_tokens"] = "cheap"
    (tmp_path / CAPACITY).write_text(json.dumps(raw))
    read = open_capacity(tmp_path)
    assert read.record.capacity_rps == 4.0 and read.record.cost_per_million_output_tokens is None
    assert [d.where for d in read.dropped] == ["cost_per_million_output_tokens"]


def test_a_dir_without_capacity_json_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"capacity\.json is missing"):
        open_capacity(tmp_path)
    (tmp_path / CAPACITY).write_text("{}")
    with pytest.raises(StoreError, match="not a capacity record"):
        open_capacity(tmp_path)


def test_a_point_run_dir_cannot_leave_the_capacity_dir(tmp_path: Path) -> None:
    write_capacity(tmp_path, _record())
    read = open_capacity(tmp_path)
    with pytest.raises(StoreError, match="leaves the capacity dir"):
        read.point_run(read.record.points[0].model_copy(update={"run_dir": "../elsewhere"}))


def test_published_capacity_schema_is_current() -> None:
    res = CliRunner().invoke(app, ["schema", "capacity"])
    assert res.exit_code == 0, res.output
    published = (ROOT / "docs" / "schema" / "capacity.schema.json").read_text()
    assert json.loads(res.stdout) == json.loads(published), (
        "run: evalkit schema capacity > docs/schema/capacity.schema.json"
    )
