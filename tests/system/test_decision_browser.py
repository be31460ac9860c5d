"""Decision pages in Chromium (issue 49): the gate's compare.html, the comparison of two runs and the gate of
several runs a side open with the decision (PASS / FAIL / CANNOT DECIDE, both sides by name, the reason) within
the first screen at 1400×900 and at 390×844, the primary metric's column of the runs' table is within the
screen's width at both, and the multi-run page's flips compare baseline with candidate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evalkit.gating.gate_runs import run_gate
from evalkit.reporting import render_compare, write_gate_compare
from tests.report_fixtures import build_gsm8k_run
from tests.system.test_report_browser import assert_clean, chromium, evaluate, open_page, screenshot

pytestmark = pytest.mark.browser

SIZES = ((1400, 900), (390, 844))
FIRST_SCREEN = """(() => {
  const d = document.getElementById('decision'), h = document.querySelector('h1');
  if (!d) { return null; }
  const r = d.getBoundingClientRect();
  return {text: d.innerText, title: document.title, h1: h.innerText, bottom: r.bottom, right: r.right,
          vh: window.innerHeight, vw: document.documentElement.clientWidth,
          sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth};
})()"""
PRIMARY_COLUMN = """(() => {
  const th = Array.from(document.querySelectorAll('table.cmp thead th')).find(t => t.innerText.includes('(primary)'));
  return th ? {header: th.innerText, right: th.getBoundingClientRect().right, vw: document.documentElement.clientWidth}
            : null;
})()"""


def test_decision_pages_lead_with_the_decision(tmp_path: Path) -> None:
    a = build_gsm8k_run(tmp_path / "runs" / "qwen3-8b-bf16", n=200, seed=0)
    b = build_gsm8k_run(tmp_path / "runs" / "qwen3-8b-fp8", n=200, seed=1, accuracy=0.6, speed=0.7)
    bases = [build_gsm8k_run(tmp_path / "base" / f"repeat-{i}", n=200, seed=i) for i in (1, 2, 3)]
    cands = [build_gsm8k_run(tmp_path / "cand" / f"repeat-{i}", n=200, seed=10 + i, speed=1.0) for i in (1, 2, 3)]
    gate = run_gate(a, b, out_dir=tmp_path / "gate", write_compare=write_gate_compare).files["compare.html"]
    multi = run_gate(bases, cands, out_dir=tmp_path / "gate-3", write_compare=write_gate_compare).files["compare.html"]
    pages = {
        "gate": (gate, "FAIL", "qwen3-8b-fp8", "qwen3-8b-bf16"),
        "two-runs": (render_compare([a, b], tmp_path / "compare.html"), "FAIL", "qwen3-8b-fp8", "qwen3-8b-bf16"),
        "multi-run-gate": (multi, "FAIL", "cand", "base"),
    }

    async def go() -> None:
        async with chromium() as cdp:
            for name, (page, verdict, cand, base) in pages.items():
                for width, height in SIZES:
                    session, page_log = await open_page(cdp, page, width=width, height=height)
                    seen = await evaluate(cdp, session, FIRST_SCREEN)
                    assert seen is not None, f"{name}: no decision banner"
                    assert seen["title"] == f"Release gate: {cand} vs {base}", seen
                    assert seen["text"].startswith(verdict), seen
                    assert f"candidate {cand} against baseline {base}" in seen["text"], seen
                    assert "rules" in seen["text"], seen  # the reason: which rules failed, or how many passed
                    assert seen["bottom"] <= seen["vh"] and seen["right"] <= seen["vw"], (name, width, seen)
                    assert seen["sideways"] <= 0, (name, width, seen)
                    primary = await evaluate(cdp, session, PRIMARY_COLUMN)  # the per-task table of the runs
                    assert primary is not None, f"{name}: no primary metric column"
                    assert 0 < primary["right"] <= primary["vw"], (name, width, primary)
                    await screenshot(cdp, session, f"decision-{name}-{width}")
                    assert_clean(page_log, page)
            session, _ = await open_page(cdp, multi)
            flips = await evaluate(cdp, session, "document.getElementById('flips').innerText")
            assert "Flips: baseline → candidate" in flips
            assert "baseline = base (base/repeat-1, base/repeat-2, base/repeat-3)" in flips
            assert "candidate = cand (cand/repeat-1, cand/repeat-2, cand/repeat-3)" in flips
            assert "broken (correct in baseline, wrong in candidate)" in flips
            legend = await evaluate(
                cdp,
                session,
                """Object.values(window.Chart.instances).map(c => c.data.datasets.map(d => d.label)).flat()""",
            )
            assert any(x.startswith("baseline base (mean of 3 runs)") for x in legend), legend
            assert any(x.startswith("candidate cand (3 runs)") for x in legend), legend
            assert not any("repeat-2" in x for x in legend), legend

    asyncio.run(go())
