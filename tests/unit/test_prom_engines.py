"""/metrics of a data-parallel server: vLLM reports one series per engine (label ``engine``); the run's server
section sums them once and keeps each engine's counters.

tests/data/vllm_metrics_0.32_dp2_*.txt are real /metrics outputs of vLLM 0.32 (CPU build, SmolLM2-135M,
``--data-parallel-size 2``) captured idle, after 6 concurrent completions and after 4 more."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalkit.reporting.run_tables import server_counters
from evalkit.server.metrics import delta, parse_text

DATA = Path(__file__).parents[1] / "data"
MODEL = "smollm2-135m"
ROUNDS = ("idle", "round1", "round2")


def text(name: str) -> str:
    return (DATA / f"vllm_metrics_0.32_dp2_{name}.txt").read_text()


def raw_sum(body: str, sample: str, engine: str | None = None) -> float:
    """The sum of a sample's series in the text, read line by line (independently of the parser under test)."""
    total = 0.0
    for line in body.splitlines():
        m = re.match(rf"^{re.escape(sample)}\{{(.*)\}} (\S+)$", line)
        if m and (engine is None or f'engine="{engine}"' in m.group(1)):
            total += float(m.group(2))
    return total


def test_the_data_has_two_engines_and_no_unlabelled_total() -> None:
    body = text("round2")
    for sample in ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        lines = [line for line in body.splitlines() if line.startswith(sample + "{")]
        assert {re.search(r'engine="(\d+)"', line).group(1) for line in lines} == {"0", "1"}  # type: ignore[union-attr]


@pytest.mark.parametrize(("before", "after"), [("idle", "round1"), ("round1", "round2"), ("idle", "round2")])
def test_totals_are_the_sums_of_the_engines_counted_once(before: str, after: str) -> None:
    b, a = text(before), text(after)
    section = delta(parse_text(b), parse_text(a), MODEL)
    for key, sample in (
        ("requests", "vllm:request_success_total"),
        ("prompt_tokens", "vllm:prompt_tokens_total"),
        ("generation_tokens", "vllm:generation_tokens_total"),
    ):
        expected = raw_sum(a, sample) - raw_sum(b, sample)
        total = section[key]["total"] if key == "requests" else section[key]
        assert total == expected > 0
        per_engine = [section["engines"][e][key] for e in ("0", "1")]
        assert per_engine == [raw_sum(a, sample, e) - raw_sum(b, sample, e) for e in ("0", "1")]
        assert sum(per_engine) == total
    assert section["prefix_cache"]["queries"] == sum(e["prefix_cache_queries"] for e in section["engines"].values())
    count = "vllm:time_to_first_token_seconds_count"
    assert section["ttft_s"]["n"] == raw_sum(a, count) - raw_sum(b, count) == section["requests"]["total"]


def test_the_measured_rounds() -> None:
    first = delta(parse_text(text("idle")), parse_text(text("round1")), MODEL)
    second = delta(parse_text(text("round1")), parse_text(text("round2")), MODEL)
    assert first["requests"]["total"] == 6 and second["requests"]["total"] == 4
    assert [first["engines"][e]["requests"] for e in ("0", "1")] == [3, 3]
    assert [second["engines"][e]["requests"] for e in ("0", "1")] == [2, 2]


def test_a_single_engine_server_has_no_engine_breakdown() -> None:
    one = [(DATA / f"vllm_metrics_0.32_{n}.txt").read_text() for n in ("idle", "round1")]
    assert 'engine="0"' in one[1]
    assert "engines" not in delta(parse_text(one[0]), parse_text(one[1]), MODEL)


def test_the_report_shows_each_engine_once() -> None:
    section = delta(parse_text(text("idle")), parse_text(text("round1")), MODEL)
    rows = {r.key: r.value for r in server_counters(section)}
    assert rows["Per engine"] == (
        f"engine 0: 3 requests, {section['engines']['0']['prompt_tokens']} prompt + "
        f"{section['engines']['0']['generation_tokens']} generation tokens · engine 1: 3 requests, "
        f"{section['engines']['1']['prompt_tokens']} prompt + {section['engines']['1']['generation_tokens']} "
        "generation tokens"
    )
    assert "engines" not in rows
