"""evalkit watch against the test server: canary marking, rotation, drift caught within the ticks McNemar's
power predicts, no alarm on noise, /metrics, an endpoint outage, a restart, the webhook's retries, the CLI and
the history report.

Here: those of its tests that run in-process; the others are in tests/integration/test_watch.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.watch.tick_log import rotation, slice_for
from tests.integration.test_watch import RUN, settings  # noqa: F401 (helpers and fixtures shared with that file)

pytestmark = pytest.mark.slow


def test_rotation_covers_the_pool_and_is_seeded() -> None:
    order = rotation(list(range(50)), seed=3)
    assert order == rotation(list(range(50)), seed=3) != rotation(list(range(50)), seed=4)
    seen = [d for t in range(1, 6) for d in slice_for(order, t, 10)]
    assert sorted(seen) == list(range(50))  # five ticks of ten: every document once
    assert slice_for(order, 6, 10) == slice_for(order, 1, 10)


def test_cli_refuses_a_bad_interval_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "watch",
            "--endpoint",
            "http://127.0.0.1:9/v1",
            "--task",
            "gsm8k",
            "--every",
            "soon",
            "-o",
            str(tmp_path / "w"),
        ],
    )
    assert res.exit_code == 2
    assert res.stderr.strip() == "evalkit: error: --every 'soon' is not a duration; pass e.g. 10m, 30s, 0.5s or 1h"


def test_a_document_selection_builds_only_those_documents() -> None:
    from evalkit.tasks.registry import Registry
    from evalkit.tasks.spec import TaskSettings

    reg = Registry([])
    aime = reg.get("aime25")
    reqs = aime.build_requests(TaskSettings(docs=(3, 5), num_samples=2, max_tokens=16))
    assert [(r.doc_id, r.sample_index) for r in reqs] == [(3, 0), (3, 1), (5, 0), (5, 1)]
    gsm = reg.get("gsm8k")
    settings = TaskSettings(docs=(7, 2, 5000), max_tokens=16)  # noqa: F811 (the fixture imported above)
    assert [r.doc_id for r in gsm.build_requests(settings)] == [2, 7]
    assert gsm.count_requests(settings) == 2
    streamed: list[int] = []
    gsm.stream_requests(settings, lambda r: streamed.append(r.doc_id))
    assert streamed == [2, 7]
