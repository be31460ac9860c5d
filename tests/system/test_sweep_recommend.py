"""The sweep's goodput and cost columns and its recommendation, over test servers of known speed and accuracy:
it names the combination the arithmetic says, the rule each other one lost on, and "none qualifies" (with why)
when the SLOs are out of reach.

Here: those of its tests that need a real outside program (PostgreSQL, a browser, docker's tools, Prometheus); the
others are in tests/integration/test_sweep_recommend.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.browser
def test_the_goodput_and_cost_views_draw_in_chromium(tmp_path: Path) -> None:
    import asyncio

    from evalkit.reporting import render_compare
    from tests.report_fixtures import build_gsm8k_run
    from tests.system.test_report_browser import CHECKS, assert_clean, chromium, evaluate, open_page

    dirs = []
    for i, (goodput, cost) in enumerate(((4.0, 0.8), (3.0, 0.2), (1.0, 0.3))):
        run = build_gsm8k_run(tmp_path / f"r{i}", n=40, seed=i, concurrency=4)
        summary = json.loads((run / "summary.json").read_text())
        summary["tasks"]["gsm8k"]["speed"].update(goodput_requests_per_s=goodput, cost_per_million_output_tokens=cost)
        (run / "summary.json").write_text(json.dumps(summary))
        dirs.append(run)
    page = render_compare(dirs, tmp_path / "compare.html")

    async def go() -> None:
        async with chromium() as cdp:
            session, log = await open_page(cdp, page)
            checks = await evaluate(cdp, session, CHECKS)
            # per task: the throughput scatter, the goodput and cost scatters, the throughput over time
            assert checks["canvases"] == 4 and checks["charts"] == 4 and checks["drawn"] == 4, checks
            assert_clean(log, page)

    asyncio.run(go())
