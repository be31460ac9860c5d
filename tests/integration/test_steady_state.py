"""Steady-state speed (``speed.steady_state`` in summary.json): the figures over the window in which the requests
in flight were at the run's level, ramp-up and drain tail left out, beside the whole-run figures (whose keys stay
as they are); shown in the run report and the sweep table.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_steady_state.py."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.scoring.speed import STEADY_MIN_REQUESTS
from evalkit.testing.server import Behaviour, TestServer


def test_run_summary_has_steady_state_beside_the_whole_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with TestServer(Behaviour(ttft_s=0.2, first_batch_stall_s=1.5)) as srv:
        res = CliRunner().invoke(
            app,
            ["run", "aime25", "--endpoint", srv.url, "--limit", "15", "--num-samples", "4", "--max-tokens", "8",
             "--concurrency", "8", "--no-warmup", "-o", str(out), "-q"],
        )  # fmt: skip
        assert res.exit_code == 0, res.stderr
    speed = json.loads((out / "summary.json").read_text())["tasks"]["aime25"]["speed"]
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tokens_per_s", "requests_per_s", "wall_s"):
        assert key in speed  # the whole-run figures keep their keys
    steady = speed["steady_state"]
    assert steady["target"] == 8 and steady["requests"] >= STEADY_MIN_REQUESTS and "reason" not in steady
    assert 0 <= steady["start_s"] < steady["end_s"] and steady["duration_s"] < speed["wall_s"]
    # the stalled first batch (no warm-up) is in the whole run's TTFT p99, its ramp-up not in the steady state's
    assert speed["ttft_ms"]["p99"] > 1000 and steady["ttft_ms"]["p99"] < speed["ttft_ms"]["p99"]
    assert steady["ttft_ms"]["n"] == steady["requests"] and steady["output_tokens_per_s"] > 0
    html = (out / "report.html").read_text()
    assert f"Steady state ({steady['requests']} requests" in html and "8 in flight" in html
