"""The run report's headline cards (issue 49, item 6): a run made with ``--goodput`` and ``--cost-per-gpu-hour``
shows goodput (requests/s within the SLOs, and their share) and the cost per million output tokens beside
output tok/s, requests/s, TTFT and TPOT, read from its summary.json; a run made without shows neither card."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

import evalkit
from evalkit.testing.server import Behaviour, TestServer


def headline_cards(report: Path) -> dict[str, tuple[str, str]]:
    """The headline's cards of ``report``: label -> (value, the line under it)."""
    text = report.read_text()
    headline = text[text.index('<section id="headline">') :]
    headline = headline[: headline.index("</section>")]
    card = r'<div class="lbl">(.*?)</div><div class="val">(.*?)</div><div class="sub">(.*?)</div>'
    return {unescape(lbl): (unescape(val), unescape(sub)) for lbl, val, sub in re.findall(card, headline)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("headline")
    priced = dict(goodput=["ttft:500", "tpot:50"], cost_per_gpu_hour=2.5, gpus_billed=1)
    with TestServer(Behaviour(ttft_s=0.02, itl_s=0.002)) as srv:
        with_slos = evalkit.run("gsm8k", endpoint=srv.url, limit=12, output_dir=out / "priced", **priced)
        plain = evalkit.run("gsm8k", endpoint=srv.url, limit=12, output_dir=out / "plain")
    return {"priced": with_slos.run_dir, "plain": plain.run_dir}


def test_goodput_and_cost_lead_the_report_when_asked_for(runs: dict[str, Path]) -> None:
    cards = headline_cards(runs["priced"] / "report.html")
    speed = json.loads((runs["priced"] / "summary.json").read_text())["tasks"]["gsm8k"]["speed"]
    value, sub = cards["Goodput req/s"]
    assert value == f"{speed['goodput_requests_per_s']:,.2f}"
    assert sub == f"{100 * speed['goodput_share']:.1f}% of requests within ttft ≤ 500 ms, tpot ≤ 50 ms"
    value, sub = cards["$ per M output tokens"]
    assert value == f"${speed['cost_per_million_output_tokens']:,.4f}"
    assert sub == "$2.5/GPU-hour × 1 GPU"
    assert {"Output tok/s", "Requests/s"} <= set(cards)  # beside the cards every run has


def test_a_run_without_slos_or_price_has_neither_card(runs: dict[str, Path]) -> None:
    cards = headline_cards(runs["plain"] / "report.html")
    assert {"Output tok/s", "Requests/s"} <= set(cards)
    assert not {"Goodput req/s", "$ per M output tokens"} & set(cards)
