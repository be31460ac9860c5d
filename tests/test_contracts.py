"""The run-dir contract: the recorded run dirs read back through the models unchanged, and the JSON Schemas in
docs/schema/ are the ones ``evalkit schema`` prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.contracts import Manifest, RunSummary, SampleRecord, manifest_json, summary_json
from evalkit.store import open_run

ROOT = Path(__file__).parent.parent
RUNS = sorted((Path(__file__).parent / "data" / "golden").iterdir())


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_run_dir_files_round_trip_through_the_models(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    assert summary_json(RunSummary.model_validate(summary)) == summary
    assert manifest_json(Manifest.model_validate(manifest)) == manifest
    for line in (run / "samples.jsonl").read_text().splitlines():
        assert SampleRecord.model_validate_json(line).model_dump(mode="json") == json.loads(line)


def test_resumed_at_is_written_only_for_a_resumed_run() -> None:
    manifest = json.loads((RUNS[0] / "manifest.json").read_text())
    model = Manifest.model_validate(manifest)
    assert "resumed_at" not in manifest_json(model)
    model.resumed_at = ["2026-12-03T10:00:00+00:00"]
    assert manifest_json(model)["resumed_at"] == ["2026-12-03T10:00:00+00:00"]


@pytest.mark.parametrize("name", ["summary", "manifest", "sample"])
def test_published_schema_is_current(name: str) -> None:
    res = CliRunner().invoke(app, ["schema", name])
    assert res.exit_code == 0, res.output
    published = (ROOT / "docs" / "schema" / f"{name}.schema.json").read_text()
    hint = f"run: evalkit schema {name} > docs/schema/{name}.schema.json"
    assert json.loads(res.stdout) == json.loads(published), hint


def test_unknown_schema_is_a_one_line_error() -> None:
    res = CliRunner().invoke(app, ["schema", "samples"])
    assert res.exit_code == 2
    assert "pass summary, manifest or sample" in res.stderr


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_open_run_reads_the_models(run: Path) -> None:
    opened = open_run(run)
    assert opened.problems == {} and opened.notes == []
    assert opened.typed_manifest().tasks[run.name].requests == len(opened.samples)
    assert opened.typed_summary().tasks[run.name].counts["total"] == len(opened.samples)
    records = list(opened.records())
    assert [(r.doc_id, r.sample_index) for r in records] == sorted((r.doc_id, r.sample_index) for r in records)


def test_open_run_says_what_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{nope")
    (tmp_path / "manifest.json").write_text("[]")
    opened = open_run(tmp_path)
    assert opened.problems["summary.json"][0] == "json"
    assert opened.problems["manifest.json"] == ("object", "")
    assert opened.problems["samples.jsonl"] == ("missing", "")
    assert opened.summary == {} and opened.samples == []
