"""An lm-eval group's aggregate score in ``summary.json`` equals lm-eval's own to the last digit: three tiny
multiple-choice tasks of different sizes (data written here), a group of two of them aggregating ``acc`` by size and
``acc_norm`` unweighted, a group of that group and the third task (nested), and a group with no
``aggregate_metric_list``; evalkit and lm-eval's ``simple_evaluate(model="local-completions")`` each run them on the
deterministic test server (its echo logprobs; its ``/tokenize`` is lm-eval's remote tokenizer). Then a group whose
task did not complete has no aggregate and says why, and the console and the HTML report show the group rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.contracts import GroupSummary, MetricValue, TaskSummary
from evalkit.scoring.groups import group_result
from evalkit.scoring.speed import speed_summary


def _task(acc: float, n: int, api_errors: int = 0) -> TaskSummary:
    return TaskSummary(version="1", metrics={"acc,none": MetricValue(value=acc, stderr=0.1, n=n)},
                       counts={"total": n, "ok": n - api_errors, "api_error": api_errors}, speed=speed_summary([]),
                       concurrency_trace=[], concurrency_levels=[], detail={})  # fmt: skip


def test_a_group_whose_tasks_did_not_all_complete_has_a_reason_not_a_score() -> None:
    group = GroupSummary(members=["t1", "t2"], tasks=["t1", "t2"], aggregate_metric_list=[{"metric": "acc"}])
    partial = group_result("g", group, {"t1": _task(0.5, 4)})
    assert partial.metrics == {} and partial.reason and "1 of its 2 tasks have no result yet: t2" in partial.reason
    failed = group_result("g", group, {"t1": _task(0.5, 4), "t2": _task(0.25, 8, api_errors=1)})
    assert failed.metrics == {} and failed.reason and "requests failed in t2" in failed.reason
    done = group_result("g", group, {"t1": _task(0.5, 4), "t2": _task(0.25, 8)})
    assert done.reason is None and done.metrics["acc,none"].value == pytest.approx((2 + 2) / 12)
    assert done.sizes == {"t1": 4, "t2": 8}


def test_the_reader_reads_groups_leniently(tmp_path: Path) -> None:
    from evalkit.store.reader import Dropped, open_run

    good = {"members": ["t1"], "tasks": ["t1"], "aggregate_metric_list": [], "reason": "no aggregate_metric_list"}
    (tmp_path / "summary.json").write_text(json.dumps({"tasks": {}, "groups": {"g": good, "bad": {"members": 3}}}))
    dropped: list[Dropped] = []
    groups = open_run(tmp_path).groups(dropped)
    assert list(groups) == ["g"] and groups["g"].reason == "no aggregate_metric_list" and groups["g"].metrics == {}
    assert [d.where for d in dropped if d.where.startswith("groups.bad")]
    (tmp_path / "summary.json").write_text(json.dumps({"tasks": {}}))
    assert open_run(tmp_path).groups() == {}
