"""Report, gate and watch read ``summary.json`` through the typed models only.

The rule: no module of ``evalkit/reporting``, ``evalkit/gating`` or ``evalkit/watch`` reads a run's raw summary dict
(``run.summary``, ``run.summary_tasks``); they read :meth:`Run.task` / :meth:`Run.tasks` (:class:`TaskRead`, each
field of :class:`~evalkit.contracts.TaskSummary` typed) or :meth:`Run.typed_summary`, so that mypy shows every
reader of a field that changes. The one exception is the gate's fail-closed loader (``gating/load.py``), which
checks each raw value itself to say in one line which field of which file was refused or ignored.

The manifest is read as a dict in a few places still (``MANIFEST_READS``): that count may only go down.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from evalkit.contracts import Speed, TaskSummary
from evalkit.store.reader import TaskRead, lenient, open_run
from tests.report_fixtures import build_gsm8k_run

ROOT = Path(__file__).resolve().parents[1] / "evalkit"
PACKAGES = ("reporting", "gating", "watch")
SUMMARY_ATTRS = {"summary", "summary_tasks"}
MANIFEST_ATTRS = {"manifest", "manifest_tasks"}
# file -> why it may read the raw summary
SUMMARY_ALLOWED = {
    "gating/load.py": "the gate's fail-closed loader: each raw value checked, refused or ignored with a note naming it"
}
# file -> raw manifest reads left (a ratchet: lower it when one goes, never raise it)
MANIFEST_READS = {
    "gating/load.py": 1,
    "reporting/banners.py": 2,
    "reporting/compare_view.py": 5,
    "reporting/flips.py": 1,
    "reporting/provenance.py": 2,
    "reporting/run_view.py": 4,
    "reporting/sample_data.py": 1,
}


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


def test_no_raw_summary_reads_in_report_gate_watch() -> None:
    found = {name: lines for name, source in _modules() if (lines := raw_reads(source, SUMMARY_ATTRS))}
    unexpected = {name: lines for name, lines in found.items() if name not in SUMMARY_ALLOWED}
    assert not unexpected, (
        f"raw summary.json reads {unexpected}: read Run.task(name) / Run.tasks() (typed TaskRead) instead"
    )


def test_raw_manifest_reads_only_go_down() -> None:
    found = {name: len(lines) for name, source in _modules() if (lines := raw_reads(source, MANIFEST_ATTRS))}
    grown = {name: n for name, n in found.items() if n > MANIFEST_READS.get(name, 0)}
    assert not grown, f"new raw manifest reads {grown}: read Run.typed_manifest() or add a typed read to the store"
    if found != MANIFEST_READS:  # one went: lower the ratchet with it
        pytest.fail(f"MANIFEST_READS is stale: it is {found} now")


@pytest.mark.parametrize(
    "source",
    [
        "def f(run):\n    return run.summary['tasks']['gsm8k']['speed']['ttft_ms']['p50']\n",
        "def f(run, name):\n    return run.summary_tasks.get(name, {}).get('speed')\n",
        "def f(r):\n    s = r.summary\n    return s\n",
    ],
)
def test_the_rule_catches_a_dict_read(source: str) -> None:
    assert raw_reads(source, SUMMARY_ATTRS)


def test_typed_reads_are_not_flagged() -> None:
    source = "def f(run, name):\n    t = run.task(name)\n    return t.speed.ttft_ms.p50 if t.speed else None\n"
    assert not raw_reads(source, SUMMARY_ATTRS)


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
