"""The sweep's comparison page (speed against concurrency) and the gate's compare.html (verdict section) in
Chromium: every chart drawn, no console errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evalkit.gating.gate_runs import run_gate
from evalkit.reporting import render_compare, write_gate_compare
from evalkit.sweep.combination_runs import concurrency_charts
from tests.report_fixtures import build_gsm8k_run
from tests.test_report_browser import CHECKS, assert_clean, chromium, evaluate, open_page, screenshot

pytestmark = pytest.mark.browser


def test_sweep_and_gate_pages_in_chromium(tmp_path: Path) -> None:
    dirs, rows = [], []
    for i, (config, level) in enumerate((("a", 4), ("a", 16), ("b", 4), ("b", 16))):
        dirs.append(build_gsm8k_run(tmp_path / f"{config}__default__c{level}", n=80, seed=i, concurrency=level))
        tok_s = 100.0 * level**0.5 * (1.2 if config == "b" else 1)
        rows.append(
            {
                "config": config,
                "sampling": "default",
                "concurrency": level,
                "output_tok_s": tok_s,
                "ttft_p50_ms": 20.0 * level,
            }
        )
    sweep_page = render_compare(dirs, tmp_path / "sweep.html", charts=concurrency_charts(rows))
    gate_page = run_gate(dirs[0], dirs[2], out_dir=tmp_path / "gate", write_compare=write_gate_compare).files[
        "compare.html"
    ]

    async def go() -> None:
        async with chromium() as cdp:
            session, page_log = await open_page(cdp, sweep_page)
            checks = await evaluate(cdp, session, CHECKS)
            # 2 sweep charts + per task the scatter and the throughput over time
            assert checks["canvases"] == 4 and checks["charts"] == 4 and checks["drawn"] == 4, checks
            await screenshot(cdp, session, "sweep-compare")
            assert_clean(page_log, sweep_page)
            session, page_log = await open_page(cdp, gate_page)
            verdict = await evaluate(cdp, session, "document.querySelectorAll('#verdict tbody tr').length")
            assert verdict >= 5  # accuracy x2, speed x3, error rate
            await evaluate(cdp, session, "document.getElementById('verdict').scrollIntoView(), true")
            await screenshot(cdp, session, "gate-compare-verdict")
            assert_clean(page_log, gate_page)

    asyncio.run(go())
