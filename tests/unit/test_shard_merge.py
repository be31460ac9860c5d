"""One eval as N shards (``evalkit run --shard I/N``, run as separate processes with ``JOB_COMPLETION_INDEX``
set, as an Indexed Job's pods are) merged by ``evalkit merge``, against the deterministic test server: the same
documents, answers, scores and intervals as the whole run, speed within the tolerance docs/scale-out.md states,
the gate and the report reading the merged dir; a shard killed midway resumes; a set of shards that is not
one run is refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config.shard import Shard, parse_shard
from evalkit.runner.merge import summed_trace, union_s
from evalkit.tasks.spec import TaskSettings


def invoke(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


# ------------------------------------------------------------------------------------------ the split


@pytest.mark.parametrize("limit", [None, 10, 11])
@pytest.mark.parametrize("count", [1, 3, 4])
def test_the_shards_take_exactly_the_unsharded_documents_after_limit(limit: int | None, count: int) -> None:
    items = list(range(25))
    whole = TaskSettings(limit=limit).select(items)
    parts = [TaskSettings(limit=limit, shard=(i, count)).select(items) for i in range(count)]
    assert sorted(d for part in parts for d in part) == whole  # each document once, none more
    assert [len(p) for p in parts] == [Shard(i, count).share(len(whole)) for i in range(count)]
    # a selection of documents (evalkit watch's docs) is split the same way: after it and after limit
    chosen = TaskSettings(limit=limit, docs=(1, 5, 9, 13, 20, 24)).select(items)
    split = [
        TaskSettings(limit=limit, docs=(1, 5, 9, 13, 20, 24), shard=(i, count)).select(items) for i in range(count)
    ]
    assert sorted(d for part in split for d in part) == chosen


def test_shard_values_and_the_index_from_the_environment() -> None:
    assert parse_shard("2/3", {}) == Shard(2, 3)
    assert parse_shard("auto/3", {"JOB_COMPLETION_INDEX": "1"}) == Shard(1, 3)
    assert parse_shard("3", {"JOB_COMPLETION_INDEX": "2", "SLURM_ARRAY_TASK_ID": "0"}) == Shard(2, 3)
    assert parse_shard("auto/3", {"SLURM_ARRAY_TASK_ID": "0"}) == Shard(0, 3)
    assert parse_shard("auto/3", {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1"}) == Shard(2, 3)
    for text, env, words in [
        ("3/3", {}, "not in 0..2"),
        ("auto/3", {}, "neither is set"),
        ("auto/3", {"JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX must be a whole number"),
        ("1/0", {}, "must be 1.."),
        ("-1/3", {}, "whole number"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_shard(text, env)


@pytest.mark.parametrize(
    ("value", "env", "words"),
    [("3/3", {}, "not in 0..2"), ("auto/3", {}, "neither is set"), ("2", {"JOB_COMPLETION_INDEX": "7"}, "not in 0..1")],
)
def test_a_bad_shard_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, env: dict[str, str], words: str
) -> None:
    for name in ("JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, v in env.items():
        monkeypatch.setenv(name, v)
    code, out = invoke("run", "gsm8k", "--endpoint", "http://127.0.0.1:9/v1", "--shard", value, "-o", tmp_path / "r")
    assert code == 2
    (line,) = out.strip().splitlines()
    assert line.startswith("evalkit: error:") and "shard" in line and words in line
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_the_summed_trace_and_the_union_of_windows() -> None:
    assert union_s([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0
    # two shards at 2 overlapping from 1 s to 3 s, a third after a gap (no 0 level: no request starts in a gap)
    traces = [([(0.0, 2)], 3.0), ([(1.0, 2), (2.0, 4)], 4.0), ([(6.0, 2)], 7.0)]
    assert summed_trace(traces) == [(0.0, 2), (1.0, 4), (2.0, 6), (3.0, 4), (6.0, 2)]
