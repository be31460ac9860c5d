"""Report, gate, watch and the run history read ``summary.json`` and ``manifest.json`` through the typed models only.

The rule: no module of ``evalkit/reporting``, ``evalkit/gating``, ``evalkit/watch`` or ``evalkit/history`` reads a
run's raw summary dict (``run.summary``, ``run.summary_tasks``) or raw manifest dict (``run.manifest``,
``run.manifest_tasks``); they read
:meth:`Run.task` / :meth:`Run.tasks` (:class:`TaskRead`, each field of :class:`~evalkit.contracts.TaskSummary`
typed), :meth:`Run.manifest_read` (:class:`ManifestRead`, each field of :class:`~evalkit.contracts.Manifest` typed,
its tasks as :class:`ManifestTaskRead`) or the strict :meth:`Run.typed_summary` / :meth:`Run.typed_manifest`, so
that mypy shows every reader of a field that changes. The exceptions are listed in ``ALLOWED``, one line each.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_typed_reads.py."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.store.reader import Dropped, ManifestRead, open_run
from tests.report_fixtures import build_gsm8k_run


def test_a_manifest_field_that_does_not_read_is_dropped_and_named(tmp_path: Path) -> None:
    run_dir = build_gsm8k_run(tmp_path / "run", n=12)
    path = run_dir / "manifest.json"
    doc = json.loads(path.read_text())
    doc["model"] = 7
    doc["concurrency"] = "lots"
    doc["endpoint"] = {"base_url": "http://x/v1"}  # no kind: the endpoint does not read
    doc["tasks"]["gsm8k"]["requests"] = "12"
    doc["tasks"]["gsm8k"]["data_sha256"]["train"] = None
    doc["tasks"]["odd"] = ["not", "a", "task"]
    path.write_text(json.dumps(doc))
    read = open_run(run_dir).manifest_read()
    assert read.model is None and read.concurrency is None and read.endpoint is None
    assert read.evalkit_version == "0.1.0" and read.server and read.versions["vllm"] == "0.11.0"
    task = read.task("gsm8k")
    assert task.requests is None and task.version == "3"  # a version written as a number reads as its text
    assert list(task.data_sha256) == ["test"] and task.settings["num_fewshot"] == 5
    assert read.task("odd").listed and not read.task("odd").present
    dropped = {d.where: d for d in read.dropped}
    assert dropped["model"] == Dropped("model", 7, "str")
    assert dropped["concurrency"].value == "lots"
    assert dropped["endpoint"] == Dropped("endpoint", {"base_url": "http://x/v1"}, "Endpoint")
    assert dropped["tasks.gsm8k.requests"] == Dropped("tasks.gsm8k.requests", "12", "int")
    assert dropped["tasks.odd"].value == ["not", "a", "task"]
    assert "tasks.gsm8k.version" not in dropped
    assert dropped["tasks.gsm8k.data_sha256.train"] == Dropped("tasks.gsm8k.data_sha256.train", None, "str")
    assert ManifestRead.of("abc") == ManifestRead()
