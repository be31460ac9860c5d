"""The warm-up before the timed phase (evalkit/client/warmup.py): against the test server's first-batch stall
(the first request of each new sampling config holds every request in flight, as vLLM compiling its top-k/top-p
kernel), the default warm-up takes the stall out of the run's speed figures; warm-up requests use the run's
sampling settings with their own distinct prompts, are never scored or stored as samples, are recorded in the
manifest and summary, come before the server's /metrics "before" snapshot, and can be sized or turned off.

Here: those of its tests that run in-process; the others are in tests/integration/test_warmup.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.client import warmup
from evalkit.watch.loop import Watch, WatchSettings


def test_warmup_prompts_are_distinct_and_fit() -> None:
    many = warmup.prompts(5000)
    assert len(set(many)) == 5000
    assert all(len(p.split()) <= 260 for p in many)
    assert all(len(p.split()) <= 10 for p in warmup.prompts(50, max_words=10))


def test_watch_ticks_send_no_warmup(tmp_path: Path) -> None:
    w = Watch(WatchSettings(task="aime25", endpoint="http://127.0.0.1:9/v1", out=tmp_path, every_s=60, per_tick=2))
    assert w.tick_config(1, [0]).warmup == 0


def test_evalkit_run_imports_the_history_writer_only_when_the_history_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.history import writer_modules
    from evalkit.history.location import ENV

    monkeypatch.setenv(ENV, "off")
    assert writer_modules() == ()
    monkeypatch.setenv(ENV, "sqlite:////tmp/x.sqlite")
    assert set(writer_modules()) == {"evalkit.history.db", "evalkit.history.record"}
