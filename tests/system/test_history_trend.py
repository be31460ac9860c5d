"""`evalkit history trend` in headless Chromium: the metric with its CI band and a speed figure over the runs
drawn as inline SVG, the gate's verdicts marked, a hostile run name escaped, no request leaving the page."""

from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.history import location
from tests.history_fixtures import forget, sqlite_url
from tests.report_fixtures import build_gsm8k_run
from tests.system.test_report_browser import assert_clean, chromium, evaluate, open_page, screenshot

pytestmark = pytest.mark.browser
LENIENT = "rates:\n  max_error_rate: 0.01\nbootstrap:\n  resamples: 500\n"
HOSTILE = "n4-<img src=x onerror=alert(1)>"

CHECKS = """(() => {
  const charts = [...document.querySelectorAll('svg.chart')];
  const box = (el) => { const b = el.getBBox(); return {w: b.width, h: b.height}; };
  const inside = charts.every((svg) => [...svg.querySelectorAll('circle')].every((c) => {
    const x = +c.getAttribute('cx'), y = +c.getAttribute('cy'), v = svg.viewBox.baseVal;
    return x >= 0 && x <= v.width && y >= 0 && y <= v.height; }));
  return {charts: charts.length, points: charts.map((s) => s.querySelectorAll('circle').length),
          band: box(charts[0].querySelector('path.band')), line: box(charts[0].querySelector('path.line')),
          speedLine: box(charts[1].querySelector('path.line')), inside: inside,
          fail: document.querySelectorAll('circle.verdict-fail').length,
          pass: document.querySelectorAll('circle.verdict-pass').length,
          speedVerdicts: charts[1].querySelectorAll('circle.verdict-fail, circle.verdict-pass, text.mark').length,
          yTicks: charts.map((s) => [...s.querySelectorAll('g.axis text[text-anchor="end"]')]
            .map((t) => t.textContent)),
          xTicks: [...charts[0].querySelectorAll('g.axis text[text-anchor="middle"]')].map((t) => t.textContent),
          marks: [...document.querySelectorAll('text.mark')].map((t) => t.textContent),
          rows: document.querySelectorAll('tbody tr').length, imgs: document.querySelectorAll('img').length,
          scripts: document.querySelectorAll('script').length,
          hostile: document.body.textContent.includes('onerror=alert(1)'),
          csp: !!document.querySelector('meta[http-equiv="Content-Security-Policy"]')};
})()"""


def cli(url: str, *args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [*map(str, args)], env={location.ENV: url})
    print(res.output)
    return res.exit_code, res.output


def test_trend_page_in_chromium(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    accuracy = {"n1": 0.78, "n2": 0.78, "n3": 0.70, HOSTILE: 0.77}
    runs = {}
    for day, (name, acc) in enumerate(accuracy.items(), 1):
        d = build_gsm8k_run(tmp_path / name, n=400, seed=day, accuracy=acc, speed=1 + day / 10)
        manifest = orjson.loads((d / "manifest.json").read_bytes())
        manifest["created_at"] = f"2026-11-0{day}T02:00:00+00:00"  # one nightly a day
        (d / "manifest.json").write_bytes(orjson.dumps(manifest))
        runs[name] = d
    policy = tmp_path / "gate.yaml"
    policy.write_text(LENIENT.replace("0.01", "0.5"))
    assert cli(url, "history", "add", "--config", "nightly", *runs.values())[0] == 0
    assert cli(url, "gate", runs["n1"], runs["n2"], "--policy", policy, "-o", tmp_path / "g1")[0] == 0
    assert cli(url, "gate", runs["n2"], runs["n3"], "--policy", policy, "-o", tmp_path / "g2")[0] == 1
    page = tmp_path / "trend.html"
    code, out = cli(url, "history", "trend", "--task", "gsm8k", "--speed", "ttft_p50_ms", "-o", page)
    assert code == 0 and "4 runs of gsm8k, exact_match,strict-match" in out, out
    html = page.read_text()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html  # autoescaped

    async def go() -> None:
        async with chromium() as cdp:
            session, page_log = await open_page(cdp, page, width=1100, height=1200)
            checks = await evaluate(cdp, session, CHECKS)
            await screenshot(cdp, session, "history-trend")
            assert_clean(page_log, page)
            assert checks["charts"] == 2 and checks["points"] == [4, 4], checks
            assert checks["band"]["h"] > 5 and checks["band"]["w"] > 500, checks  # the CI band spans the runs
            assert checks["line"]["w"] > 500 and checks["speedLine"]["h"] > 5 and checks["inside"], checks
            assert checks["fail"] == 1 and checks["pass"] == 1, checks  # n2 passed its gate, n3 failed
            # marked on the accuracy chart only; the speed chart's points are plain
            assert sorted(checks["marks"]) == ["fail", "pass"] and checks["speedVerdicts"] == 0, checks
            # round ticks (a step of 1, 2, 2.5 or 5 x 10^k), dated x labels, none repeated
            for labels in checks["yTicks"]:
                values = [float(t.rstrip("%").replace(",", "")) for t in labels]
                (step,) = {round(b - a, 6) for a, b in itertools.pairwise(values)}
                assert round(step / 10 ** math.floor(math.log10(step)), 6) in (1, 2, 2.5, 5), labels
            assert checks["xTicks"] == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"], checks
            assert checks["rows"] == 4 and checks["imgs"] == 0 and checks["scripts"] == 0 and checks["csp"]
            assert checks["hostile"], "the hostile run name is shown as text"

    asyncio.run(go())
    forget(url)
