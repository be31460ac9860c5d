"""The run-dir contract: every run dir stored under tests/data reads back through :func:`open_run` and the models
and writes back byte for byte (what a file predates, listed, aside), so a field added to a model cannot change an
old file; records evolve by the rule of :mod:`evalkit.contracts.record`; the JSON Schemas in docs/schema/ are the
ones ``evalkit schema`` prints."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, Field, create_model
from typer.testing import CliRunner

import evalkit.contracts
import evalkit.contracts.speed_catalogue
from evalkit.cli import app
from evalkit.contracts import (
    SCHEMA_VERSION,
    Manifest,
    Percentiles,
    RunSummary,
    SampleRecord,
    manifest_json,
    summary_json,
)
from evalkit.contracts.record import Record
from evalkit.store import open_run
from evalkit.store.files import MANIFEST, SAMPLES, SUMMARY

ROOT = Path(__file__).parents[2]
DATA = Path(__file__).parents[1] / "data"
RUNS = sorted((DATA / "golden").iterdir())
STORED = sorted(p.parent for p in DATA.rglob(MANIFEST))  # every run dir kept as test data, new ones included
# What a stored file predates: a value the models now require or always write that the file was written without
# (its dotted path -> the value a run of today writes there). The round trip adds it before reading and expects it
# back after writing, and nothing else may differ. A new entry is a change of old files: it needs SCHEMA_VERSION
# bumped (ARCHITECTURE.md, Rules), not an entry here.
H200 = "h200-smollm2-135m-2026-12-02"
H200_RUNS = {"aime25": "aime25", "gsm8k-max-num-seqs-64": "gsm8k", "gsm8k-max-num-seqs-256": "gsm8k"}  # dir: task
PREDATES: dict[str, dict[str, Any]] = {  # written before these fields were (always written, without a bump)
    "cpu-vllm-gsm8k/manifest.json": {"concurrency_cap": None},
    **{
        f"{H200}/{run}/summary.json": {f"tasks.{task}.concurrency_levels": [], "timings_s": {}}
        for run, task in H200_RUNS.items()
    },
    **{
        f"{H200}/{run}/manifest.json": {"concurrency_cap": None, f"tasks.{task}.prompts_streamed": False}
        for run, task in H200_RUNS.items()
    },
}  # fmt: skip
# The fields each record writes at their default (``"reasoning": null``): those of schema 2. A field added to one
# of these changes every old file on its way back, so it comes with a bump of SCHEMA_VERSION.
WRITTEN_AT_DEFAULT: dict[int, dict[str, set[str]]] = {
    2: {
        "Timing": {"ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "start_s"},
        "SampleRecord": {
            "sample_index", "messages", "response", "reasoning", "finish_reason", "error", "attempts", "target",
            "extracted", "correct", "extraction", "prompt_tokens", "output_tokens", "reasoning_tokens", "ttft_ms",
            "tpot_ms", "e2e_ms", "itl_ms", "start_s",
        },
        "MetricValue": {"stderr", "ci95"},
        "EndpointSummary": {"server"},
        "ResentSummary": set(),
        "TaskSummary": {"server", "gpu"},
        "WarmupSummary": set(),
        "GroupSummary": {"sizes", "metrics"},
        "RunSummary": {"schema_version", "tasks", "timings_s"},
        "Endpoint": set(),
        "ManifestTask": {"description", "prompts_streamed", "max_tokens_clamp"},
        "WarmupSettings": {"configs"},
        "Manifest": {"schema_version", "finished_at", "concurrency_cap", "server"},
        "Percentiles": {"mean", "p50", "p90", "p99", "n"},
        "SteadyState": {
            "start_s", "end_s", "duration_s", "requests", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
            "output_tokens_per_s", "requests_per_s",
        },
        "Speed": {"total_tokens_per_s", "concurrency", "client_cpu_s", "loop_lag_ms_p99", "client_bound"},
    }
}  # fmt: skip


WRITE_BACK = {  # a file's content read through its model and written as RunStore writes it
    SUMMARY: lambda doc: summary_json(RunSummary.model_validate(doc)),
    MANIFEST: lambda doc: manifest_json(Manifest.model_validate(doc)),
}


def _contract_models() -> list[type[BaseModel]]:
    modules = (evalkit.contracts, evalkit.contracts.speed_catalogue)
    return [
        v
        for m in modules
        for v in vars(m).values()
        if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == m.__name__
    ]


def _with(doc: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with each dotted path of ``added`` set (a copy)."""
    out = json.loads(json.dumps(doc))
    for path, value in added.items():
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node[key]
        node[leaf] = value
    return out


def _without(doc: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with each dotted path of ``added`` removed, after checking it holds the value added."""
    for path, value in added.items():
        *parents, leaf = path.split(".")
        node = doc
        for key in parents:
            node = node[key]
        assert node.pop(leaf) == value, f"{path} came back changed"
    return doc


def _written(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)  # as RunStore writes it (evalkit.store.files)


def _diff(stored: bytes, again: bytes) -> str:
    lines = difflib.unified_diff(stored.decode().splitlines(), again.decode().splitlines(), lineterm="", n=1)
    return "\n".join(list(lines)[2:40])


@pytest.mark.parametrize("run", STORED, ids=lambda p: str(p.relative_to(DATA)))
def test_stored_run_dirs_write_back_byte_for_byte(run: Path) -> None:
    opened = open_run(run, drop=())
    for name, raw in ((SUMMARY, opened.summary), (MANIFEST, opened.manifest)):
        stored = (run / name).read_bytes()
        predates = PREDATES.get(str((run / name).relative_to(DATA)), {})
        again = _without(WRITE_BACK[name](_with(raw, predates)), predates)
        assert _written(again) == stored, (
            f"{run.relative_to(DATA)}/{name} writes back changed (a field written at its default? see "
            f"evalkit.contracts.record):\n{_diff(stored, _written(again))}"
        )
    if (run / SAMPLES).exists():
        lines = (run / SAMPLES).read_bytes().splitlines()
        lines_again = [orjson.dumps(SampleRecord.model_validate(s).model_dump(mode="json")) for s in opened.samples]
        assert sorted(lines_again) == sorted(lines), f"{run.relative_to(DATA)}/{SAMPLES} writes back changed"


@pytest.mark.parametrize("file", sorted(PREDATES))
def test_what_a_stored_file_predates_is_absent_from_it(file: str) -> None:
    doc = json.loads((DATA / file).read_text())
    for path in PREDATES[file]:
        *parents, leaf = path.split(".")
        for key in parents:
            doc = doc[key]
        assert leaf not in doc, f"{file} has {path}: drop it from PREDATES"


@pytest.mark.parametrize("run", STORED, ids=lambda p: str(p.relative_to(DATA)))
def test_stored_schema_versions_are_ones_this_evalkit_reads(run: Path) -> None:
    for name in (SUMMARY, MANIFEST):
        version = json.loads((run / name).read_text())["schema_version"]
        assert isinstance(version, int) and 1 <= version <= SCHEMA_VERSION, f"{run.name}/{name}: {version}"


def test_every_contract_model_is_a_record() -> None:
    models = _contract_models()
    assert len(models) >= 16
    plain = [m.__name__ for m in models if not issubclass(m, Record)]
    assert not plain, (
        f"derive {plain} from evalkit.contracts.record.Record, so that fields added later stay out of old files"
    )


def test_the_fields_written_at_their_default_are_the_schema_versions() -> None:
    pinned = WRITTEN_AT_DEFAULT.get(SCHEMA_VERSION)
    assert pinned is not None, f"SCHEMA_VERSION {SCHEMA_VERSION}: pin its written_at_default here"
    written = {m.__name__: set(m.written_at_default) for m in _contract_models() if issubclass(m, Record)}
    assert written == pinned, (
        "a field written at its default changes every old file on its way back: give it a default that is left "
        "out (the Record rule), or bump SCHEMA_VERSION and pin the new set here"
    )


@pytest.mark.parametrize("model", [Percentiles, SampleRecord, Manifest, RunSummary], ids=lambda m: m.__name__)
def test_a_field_added_with_a_default_stays_out_of_old_records(model: type[Record]) -> None:
    grown = create_model(  # what a newcomer writes: ``p95: float | None = None`` and the like
        f"Grown{model.__name__}",
        __base__=model,
        added_number=(float | None, None),
        added_list=(list[str], Field(default_factory=list)),
        added_flag=(bool, False),
    )
    old = {
        Percentiles: lambda: json.loads((RUNS[0] / SUMMARY).read_text())["tasks"][RUNS[0].name]["speed"]["ttft_ms"],
        SampleRecord: lambda: json.loads((RUNS[0] / SAMPLES).read_text().splitlines()[0]),
        Manifest: lambda: json.loads((RUNS[0] / MANIFEST).read_text()),
        RunSummary: lambda: json.loads((RUNS[0] / SUMMARY).read_text()),
    }[model]()
    assert grown.model_validate(old).model_dump(mode="json") == old
    set_ = grown.model_validate({**old, "added_number": 1.5, "added_list": ["a"], "added_flag": True})
    assert set_.model_dump(mode="json") == {**old, "added_number": 1.5, "added_list": ["a"], "added_flag": True}


def test_a_model_naming_no_field_in_written_at_default_is_refused() -> None:
    with pytest.raises(TypeError, match=r"written_at_default names no field \['typo'\]"):
        type("Bad", (Record,), {"__annotations__": {"x": int}, "x": 0, "written_at_default": frozenset({"typo"})})


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


def test_open_run_says_when_a_file_is_of_a_newer_schema(tmp_path: Path) -> None:
    for name in (SUMMARY, MANIFEST):
        doc = json.loads((RUNS[0] / name).read_text())
        (tmp_path / name).write_text(json.dumps({**doc, "schema_version": SCHEMA_VERSION + 1}))
    notes = open_run(tmp_path).notes
    newer = [n for n in notes if "newer than this evalkit reads" in n]
    assert [n.split()[0] for n in newer] == [MANIFEST, SUMMARY], notes
    assert f"schema_version {SCHEMA_VERSION + 1}" in newer[0]
