"""The live progress bar (evalkit/cli/console.py LiveProgress): every answer counted, the bar updated at most every
``UPDATE_S`` while answers stream, and always at a task's start, at its end and when the display closes."""

from __future__ import annotations

import types
from typing import Any

import pytest

from evalkit.cli import console
from evalkit.cli.console import LiveProgress
from evalkit.contracts import SampleRecord


def record(i: int, correct: bool) -> SampleRecord:
    return SampleRecord(
        key=f"k{i}", task="t", doc_id=i, prompt="p", status="ok", correct={"strict": correct}, output_tokens=3
    )


class Clock:
    now = 100.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(console, "time", types.SimpleNamespace(perf_counter=c.perf_counter))
    return c


@pytest.fixture
def updates(monkeypatch: pytest.MonkeyPatch) -> tuple[LiveProgress, list[dict[str, Any]]]:
    live = LiveProgress(enabled=False)
    seen: list[dict[str, Any]] = []
    real = live.progress.update

    def counted(task_id: Any, **fields: Any) -> None:
        seen.append(fields)
        real(task_id, **fields)

    monkeypatch.setattr(live.progress, "update", counted)
    return live, seen


def shown(live: LiveProgress) -> Any:
    (task,) = live.progress.tasks
    return task


def test_answers_streaming_update_the_bar_once_per_interval_and_exactly_at_the_end(
    clock: Clock, updates: tuple[LiveProgress, list[dict[str, Any]]]
) -> None:
    live, seen = updates
    with live:
        live("t", 0, 1000, None)  # the task's start: shown
        for i in range(1, 1001):
            clock.now += 0.001  # an answer a millisecond: 1 s in all
            live("t", i, 1000, record(i, correct=i % 4 == 0))
    # the start, one every 0.1 s of the stream (the last of them at its end), the display's close
    assert 10 <= len(seen) <= 13, len(seen)
    assert [u["completed"] for u in seen[:2]] == [0, 100]
    assert seen[-1]["completed"] == 1000 and shown(live).completed == 1000
    assert seen[-1]["acc"] == "0.250" and seen[-1]["err"] == 0 and seen[-1]["tps"] == "3,000"


def test_a_task_that_stops_early_shows_its_last_count_when_the_display_closes(
    clock: Clock, updates: tuple[LiveProgress, list[dict[str, Any]]]
) -> None:
    live, _ = updates
    with live:
        live("t", 0, 1000, None)
        for i in range(1, 51):  # 50 answers within 0.05 s, then the run is interrupted
            clock.now += 0.001
            live("t", i, 1000, record(i, correct=True))
        assert shown(live).completed == 0  # the bar lags the count while answers stream
    assert shown(live).completed == 50 and shown(live).fields["acc"] == "1.000"
