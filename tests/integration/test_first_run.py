"""The first run a new user makes (README: 50 GSM8K requests against the bundled test server, ``--concurrency
auto``): auto starts at no more requests than there are, and the client-bottleneck banner fires only on evidence
that the client set the pace, stated in a sentence (issue 49, item 5).

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_first_run.py."""

from __future__ import annotations

import json

from evalkit.config import load_config
from evalkit.runner import Runner
from evalkit.testing.server import SubprocessServer


def test_a_50_request_auto_run_starts_at_50_and_is_not_called_client_bound(tmp_path):
    with SubprocessServer("--correct-ratio", "0.7", "--ttft", "0.2", "--itl", "0.01") as srv:
        cfg = load_config(
            {"tasks": ["gsm8k"], "endpoint": srv.url, "limit": 50, "concurrency": "auto", "output_dir": tmp_path / "r"}
        )
        Runner(cfg).run()
    task = json.loads((tmp_path / "r" / "summary.json").read_text())["tasks"]["gsm8k"]
    assert task["concurrency_trace"][0][1] == 50, task["concurrency_trace"]  # was 128
    assert task["speed"]["concurrency"] == 50
    assert task["speed"]["client_bound"] is False, task["speed"]
    report = (tmp_path / "r" / "report.html").read_text()
    assert "the client was the bottleneck" not in report
