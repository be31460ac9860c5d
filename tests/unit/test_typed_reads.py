"""Report, gate, watch and the run history read ``summary.json`` and ``manifest.json`` through the typed models only.

The rule: no module of ``evalkit/reporting``, ``evalkit/gating``, ``evalkit/watch`` or ``evalkit/history`` reads a
run's raw summary dict (``run.summary``, ``run.summary_tasks``) or raw manifest dict (``run.manifest``,
``run.manifest_tasks``); they read
:meth:`Run.task` / :meth:`Run.tasks` (:class:`TaskRead`, each field of :class:`~evalkit.contracts.TaskSummary`
typed), :meth:`Run.manifest_read` (:class:`ManifestRead`, each field of :class:`~evalkit.contracts.Manifest` typed,
its tasks as :class:`ManifestTaskRead`) or the strict :meth:`Run.typed_summary` / :meth:`Run.typed_manifest`, so
that mypy shows every reader of a field that changes. The exceptions are listed in ``ALLOWED``, one line each.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from evalkit.contracts import Manifest, ManifestTask, Speed, TaskSummary
from evalkit.store.reader import Dropped, ManifestRead, ManifestTaskRead, TaskRead, lenient, open_run
from tests.report_fixtures import build_gsm8k_run

ROOT = Path(__file__).resolve().parents[2] / "evalkit"
PACKAGES = ("reporting", "gating", "watch", "history")
RAW_ATTRS = {"summary", "summary_tasks", "manifest", "manifest_tasks"}
# (file, attribute) -> why it may read that raw dict (none: a reader with bounds of its own declares them as a
# model that Run.task_as reads, and each value out of them comes back as written in a Dropped)
ALLOWED: dict[tuple[str, str], str] = {}


def raw_reads(source: str, attrs: set[str]) -> list[int]:
    """Lines of ``source`` that read one of ``attrs`` off anything but ``self`` (a Run's raw dicts)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr in attrs
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    ]


def _modules() -> list[tuple[str, str]]:
    return [
        (f"{pkg}/{path.name}", path.read_text(encoding="utf-8"))
        for pkg in PACKAGES
        for path in sorted((ROOT / pkg).glob("*.py"))
    ]


def test_no_raw_summary_or_manifest_reads_in_report_gate_watch() -> None:
    found = {
        (name, attr): lines
        for name, source in _modules()
        for attr in sorted(RAW_ATTRS)
        if (lines := raw_reads(source, {attr}))
    }
    unexpected = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert not unexpected, (
        f"raw run-dict reads {unexpected}: read Run.task(name) / Run.tasks() (typed TaskRead) or "
        "Run.manifest_read() (typed ManifestRead) instead"
    )
    assert not set(ALLOWED) - set(found), f"stale allowances: {set(ALLOWED) - set(found)}"


@pytest.mark.parametrize(
    "source",
    [
        "def f(run):\n    return run.summary['tasks']['gsm8k']['speed']['ttft_ms']['p50']\n",
        "def f(run, name):\n    return run.summary_tasks.get(name, {}).get('speed')\n",
        "def f(r):\n    s = r.summary\n    return s\n",
        "def f(run):\n    return run.manifest.get('model')\n",
        "def f(run, name):\n    return run.manifest_tasks[name]['settings']\n",
    ],
)
def test_the_rule_catches_a_dict_read(source: str) -> None:
    assert raw_reads(source, RAW_ATTRS)


def test_typed_reads_are_not_flagged() -> None:
    source = "def f(run, name):\n    t = run.task(name)\n    return t.speed.ttft_ms.p50 if t.speed else None\n"
    assert not raw_reads(source, RAW_ATTRS)
    source = "def f(run, name):\n    m = run.manifest_read()\n    return m.model, m.task(name).settings\n"
    assert not raw_reads(source, RAW_ATTRS)


def test_task_read_has_every_task_summary_field() -> None:
    """A field added to TaskSummary needs its typed read (else report, gate and watch cannot see it)."""
    fields = [f.name for f in dataclasses.fields(TaskRead)]
    assert fields[:3] == ["name", "listed", "present"]
    assert fields[3:] == list(TaskSummary.model_fields)


def test_task_read_of_a_written_run_equals_the_validated_summary(tmp_path: Path) -> None:
    run_dir = build_gsm8k_run(tmp_path / "run", n=12)
    doc = json.loads((run_dir / "summary.json").read_text())  # the fixture's summary, made whole
    doc["tasks"]["gsm8k"].update(version="3", concurrency_trace=[[0.0, 8], [1.5, 4]], concurrency_levels=[])
    (run_dir / "summary.json").write_text(json.dumps(doc))
    run = open_run(run_dir)
    typed = run.typed_summary().tasks["gsm8k"]
    t = run.task("gsm8k")
    assert t.listed and t.present
    for name in TaskSummary.model_fields:
        value = getattr(typed, name)
        assert getattr(t, name) == (value if value is not None or name != "endpoints" else []), name


def test_a_field_that_does_not_read_falls_back_and_the_rest_reads(tmp_path: Path) -> None:
    run_dir = build_gsm8k_run(tmp_path / "run", n=12)
    path = run_dir / "summary.json"
    doc = json.loads(path.read_text())
    task = doc["tasks"]["gsm8k"]
    task["speed"]["ttft_ms"]["p50"] = "fast"  # a nested optional figure: that figure is None
    task["speed"]["client_bound"] = 1  # no bools from numbers
    task["counts"]["api_error"] = "x"  # one entry of a mapping: the others read
    task["version"] = ["odd"]
    path.write_text(json.dumps(doc))
    t = open_run(run_dir).task("gsm8k")
    assert t.speed is not None and t.speed.ttft_ms.p50 is None and t.speed.ttft_ms.p99 is not None
    assert t.speed.client_bound is None and t.speed.output_tokens_per_s is not None
    assert "api_error" not in t.counts and t.counts["total"] == 12
    assert t.version is None and t.metrics
    task["speed"]["wall_s"] = "abc"  # a required figure: no speed, everything else still reads
    path.write_text(json.dumps(doc))
    t = open_run(run_dir).task("gsm8k")
    assert t.speed is None and t.metrics and t.counts["total"] == 12


def test_lenient_reads_json_strictly() -> None:
    p = {"mean": 1, "p50": 2, "p90": 3, "p99": 4, "n": 5}
    speed = {"ttft_ms": p, "tpot_ms": p, "itl_ms": p, "e2e_ms": p, "output_tokens_per_s": 1.5}
    assert lenient(Speed, {**speed, "requests_per_s": 2, "wall_s": 3}) is not None
    assert lenient(Speed, {**speed, "requests_per_s": 2, "wall_s": "3"}) is None  # no numbers from strings
    assert lenient(Speed, {**speed, "requests_per_s": 2, "wall_s": True}) is None  # nor from bools
    assert lenient(Speed, [1, 2]) is None
    assert TaskRead.of("t", "abc").present is False and TaskRead.of("t", None, listed=False).listed is False


def test_manifest_read_has_every_manifest_field() -> None:
    """A field added to Manifest or ManifestTask needs its typed read (else report, gate and watch cannot see it)."""
    fields = [f.name for f in dataclasses.fields(ManifestRead)]
    assert fields == [*Manifest.model_fields, "keys", "dropped"]
    fields = [f.name for f in dataclasses.fields(ManifestTaskRead)]
    assert fields[:3] == ["name", "listed", "present"]
    assert fields[3:] == list(ManifestTask.model_fields)


def test_manifest_read_of_a_written_run_equals_the_validated_manifest(tmp_path: Path) -> None:
    run_dir = build_gsm8k_run(tmp_path / "run", n=12)
    doc = json.loads((run_dir / "manifest.json").read_text())  # the fixture's manifest, made whole
    doc["tasks"]["gsm8k"].update(version="3", description="", requests=12, metrics=["exact_match,strict-match"])
    doc["tasks"]["gsm8k"].update(prompts_streamed=False)
    doc["schema_version"] = Manifest.model_fields["schema_version"].default
    doc["versions"]["vllm"] = None
    (run_dir / "manifest.json").write_text(json.dumps(doc))
    run = open_run(run_dir)
    typed, read = run.typed_manifest(), run.manifest_read()
    assert read.dropped == () and read.keys == set(doc)
    for name in Manifest.model_fields:
        if name != "tasks":
            value = getattr(typed, name)
            assert getattr(read, name) == value, name
    assert list(read.tasks) == ["gsm8k"] and read.task("gsm8k").listed and read.task("gsm8k").present
    for name in ManifestTask.model_fields:
        assert getattr(read.task("gsm8k"), name) == getattr(typed.tasks["gsm8k"], name), name
    assert not read.task("other").listed and read.task("other").settings == {}


def test_the_gate_notes_each_dropped_level_by_its_index_as_written(tmp_path: Path) -> None:
    """The gate reads the concurrency levels through the typed read: an entry the read dropped (not a mapping,
    null) and one without a positive limit are each noted at their index in the file, showing it as written."""
    from evalkit.gating import from_run_dir

    run_dir = build_gsm8k_run(tmp_path / "run", n=12)
    path = run_dir / "summary.json"
    doc = json.loads(path.read_text())
    levels = [{"limit": 4}, 1, {"limit": 0}, None, {"limit": 8, "starved": False}, {"limit": 16, "starved": True}]
    doc["tasks"]["gsm8k"]["concurrency_levels"] = levels
    path.write_text(json.dumps(doc))
    inputs = from_run_dir(run_dir)
    assert inputs.tasks["gsm8k"].speed.levels == [4, 8]
    where = "run: summary.json tasks.gsm8k.concurrency_levels"
    assert [n for n in inputs.notes if "concurrency_levels" in n] == [
        f"{where}[1] is 1, not a level with a positive 'limit'; ignored",
        f"{where}[2] is {{'limit': 0}}, not a level with a positive 'limit'; ignored",
        f"{where}[3] is None, not a level with a positive 'limit'; ignored",
    ]


def test_a_reader_with_bounds_of_its_own_gets_each_value_out_of_them_as_written(tmp_path: Path) -> None:
    """Run.task_as: the fields a reader declares, with its bounds, each read on its own (a partial speed reads);
    each value that does not read comes back as written (a whole-number time stays whole), and a summary whose
    ``tasks`` is not a mapping names no task and is named itself."""
    from typing import Annotated

    from pydantic import BaseModel, Field

    class SpeedPart(BaseModel):
        wall_s: Annotated[float, Field(ge=0)] | None = None
        concurrency: int | None = None

    class Bounded(BaseModel):
        speed: SpeedPart | None = None
        concurrency_trace: list[tuple[Annotated[float, Field(ge=0)], Annotated[int, Field(ge=1)]]] | None = None

    run_dir = build_gsm8k_run(tmp_path / "run", n=12)
    path = run_dir / "summary.json"
    doc = json.loads(path.read_text())
    doc["tasks"]["gsm8k"]["speed"] = {"wall_s": -2, "concurrency": 8}  # no ttft_ms...: not a Speed, still read
    doc["tasks"]["gsm8k"]["concurrency_trace"] = [[0, 8], [3, 0]]
    doc["tasks"]["odd"] = 7
    path.write_text(json.dumps(doc))
    run = open_run(run_dir)
    dropped: list[Dropped] = []
    read = run.task_as("gsm8k", Bounded, dropped)
    assert read is not None and read.speed == SpeedPart(concurrency=8) and read.concurrency_trace == [(0.0, 8)]
    assert [(d.where, d.value) for d in dropped] == [
        ("tasks.gsm8k.speed.wall_s", -2),
        ("tasks.gsm8k.concurrency_trace[1]", [3, 0]),  # as written, not (3.0, 0)
    ]
    assert run.task_as("odd", Bounded) is None and run.task_as("absent", Bounded) is None
    entry: list[Dropped] = []
    assert run.task("odd", entry).present is False and entry == [Dropped("tasks.odd", 7, "TaskSummary")]
    assert run.summary_task_names() == ["gsm8k", "odd"]
    doc["tasks"] = ["gsm8k"]
    path.write_text(json.dumps(doc))
    top: list[Dropped] = []
    assert open_run(run_dir).summary_task_names(top) == []
    assert top == [Dropped("tasks", ["gsm8k"], "dict[str, TaskSummary]")]
