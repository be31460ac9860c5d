"""The sweep's comparison page (speed against concurrency) and the gate's compare.html (verdict section) in
Chromium: every chart drawn, no console errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evalkit.gating.gate_runs import run_gate
from evalkit.reporting import render_compare, write_gate_compare
from evalkit.sweep.page import concurrency_charts
from tests.report_fixtures import build_gsm8k_run
from tests.system.test_report_browser import CHECKS, assert_clean, chromium, evaluate, open_page, screenshot

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


VIEWPORT_CHECK = """(() => {
  const rec = document.querySelector('#recommendation .banner').getBoundingClientRect();
  const charts = Array.from(document.querySelectorAll('canvas')).map(c => Chart.getChart(c)).filter(Boolean);
  const boxes = charts.map(c => c.$evalkitLabels).filter(Boolean);
  const overlaps = boxes.map(bs => bs.filter((b, i) => bs.some((o, j) => j < i &&
    b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1)).length);
  return {top: rec.top, bottom: rec.bottom, vh: window.innerHeight,
          text: document.querySelector('#recommendation').innerText,
          labelled: boxes.map(bs => bs.length), overlaps: overlaps,
          flips: document.querySelector('#flips') ? document.querySelector('#flips').innerText : null,
          figure: document.querySelector('table.sweep-table thead th:nth-child(2)').innerText,
          figure_right: document.querySelector('table.sweep-table thead th:nth-child(2)').getBoundingClientRect().right,
          vw: document.documentElement.clientWidth};
})()"""


def _sweep_page(tmp_path: Path, configs: tuple[str, ...], levels: tuple[int, ...]) -> Path:
    from evalkit.sweep.combinations import Combination
    from evalkit.sweep.page import write_page
    from evalkit.sweep.recommend import Recommendation

    dirs, rows, combos = [], [], []
    for i, (config, level) in enumerate((c, lv) for c in configs for lv in levels):
        combo = Combination(config, "default", level, None, {}, None)
        # close in speed and accuracy: their scatter labels would fall on one another
        dirs.append(build_gsm8k_run(tmp_path / combo.name, n=80, seed=i, concurrency=level, speed=1 + i / 50))
        combos.append(combo)
        rows.append(
            {
                "config": config,
                "sampling": "default",
                "concurrency": level,
                "output_tok_s": 100.0 * level**0.5,
                "ttft_p50_ms": 20.0 * level,
                "goodput_req_s": 1.5,
                "goodput_share": 0.95,
                "cost_per_m_out_tok": 3.2,
                "good_requests_per_usd": 2700.0 + i,
                "gsm8k exact_match": 0.78,
                "gsm8k exact_match ci95": "[0.6900, 0.8600]",
            }
        )
    pick = combos[-1].name if len(configs) > 1 else combos[0].name
    advice = Recommendation(
        pick, f"{pick}: the most good requests per dollar (2,703) among the combinations with …", {}, combos[0].name
    )
    return write_page(tmp_path / "compare.html", dirs, rows, combos, ["gsm8k"], advice, True)


@pytest.mark.parametrize("size", [(1400, 900), (390, 844)])
def test_sweep_page_opens_with_its_recommendation(tmp_path: Path, size: tuple[int, int]) -> None:
    two_configs = _sweep_page(tmp_path / "two", ("base", "fp8"), (4, 16, 64, 128))
    one_config = _sweep_page(tmp_path / "one", ("base",), (4, 16, 64))

    async def go() -> None:
        async with chromium() as cdp:
            session, page_log = await open_page(cdp, two_configs, width=size[0], height=size[1])
            seen = await evaluate(cdp, session, VIEWPORT_CHECK)
            assert "RECOMMENDED: fp8__default__c128" in seen["text"], seen
            assert seen["top"] >= 0 and seen["bottom"] <= seen["vh"], seen  # within the first screen
            # the combinations table's first figure column follows the name, on screen at either width
            assert seen["figure"] == "output tok/s" and seen["figure_right"] <= seen["vw"], seen
            # the scatter labels its points without one label over another
            assert seen["labelled"] and max(seen["labelled"]) >= 2 and not any(seen["overlaps"]), seen
            # the flips compare the pick with the reference config's run, not two levels of one config
            # (the letters are the runs table's: fp8 c128 is the eighth run)
            assert "A = base__default__c4, H = fp8__default__c128" in seen["flips"], seen["flips"]
            await screenshot(cdp, session, f"sweep-page-{size[0]}")
            assert_clean(page_log, two_configs)
            session, page_log = await open_page(cdp, one_config, width=size[0], height=size[1])
            seen = await evaluate(cdp, session, VIEWPORT_CHECK)
            assert seen["flips"] is None and seen["bottom"] <= seen["vh"], seen
            assert_clean(page_log, one_config)

    asyncio.run(go())
