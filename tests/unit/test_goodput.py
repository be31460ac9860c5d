"""Goodput under latency SLOs (as vllm bench serve --goodput counts it) and cost per token: the rule per request,
the arithmetic, the settings, and a run on the test server with injected TTFT/ITL checked against a count made
from the run's own samples."""

from __future__ import annotations

import pytest

from evalkit.config import load_config
from evalkit.config.slos import parse_slos
from evalkit.contracts import SampleRecord
from evalkit.errors import ConfigError
from evalkit.gating.economics import goodput_change_rule
from evalkit.gating.inputs import SpeedRecords
from evalkit.scoring.goodput import add_cost, add_goodput, is_good, request_tpot_ms
from evalkit.scoring.speed import speed_summary


def _rec(i: int, ttft: float | None, e2e: float, out: int, status: str = "ok") -> SampleRecord:
    tpot = (e2e - ttft) / (out - 1) if ttft is not None and out > 1 else None
    return SampleRecord(
        key=str(i), task="t", doc_id=i, prompt="", status=status, output_tokens=out, prompt_tokens=10,
        ttft_ms=ttft, tpot_ms=tpot, e2e_ms=e2e, start_s=float(i),
    )  # fmt: skip


def test_a_request_is_good_when_it_meets_every_slo_given() -> None:
    r = _rec(0, ttft=100.0, e2e=1000.0, out=10)  # TPOT (1000 - 100) / 9 = 100 ms
    assert is_good(r, {"ttft": 100.0})  # at the SLO is within it (vLLM: slo >= value)
    assert not is_good(r, {"ttft": 99.9})
    assert is_good(r, {"ttft": 200.0, "tpot": 100.0, "e2el": 1000.0})
    assert not is_good(r, {"ttft": 200.0, "tpot": 99.0})  # one SLO missed is enough
    assert is_good(r, {})  # no SLO: every answered request


def test_tpot_is_vllms_zero_for_one_output_token_and_failed_requests_are_never_good() -> None:
    one = _rec(0, ttft=900.0, e2e=950.0, out=1)
    assert request_tpot_ms(one) == 0.0 and is_good(one, {"tpot": 0.0})
    failed = _rec(1, ttft=1.0, e2e=2.0, out=5, status="api_error")
    assert not is_good(failed, {"e2el": 1e9})
    unstreamed = _rec(2, ttft=None, e2e=20.0, out=5)  # no TTFT measured: cannot be shown to meet it
    assert not is_good(unstreamed, {"ttft": 1e9}) and is_good(unstreamed, {"e2el": 20.0})


def test_goodput_is_good_requests_over_the_wall_time_and_the_share_is_over_all_requests() -> None:
    records = [_rec(i, ttft=10.0 * i, e2e=100.0 + 10.0 * i, out=5) for i in range(10)]
    records.append(_rec(10, ttft=1.0, e2e=2.0, out=5, status="api_error"))
    speed = speed_summary(records)
    add_goodput(speed, records, {"ttft": 45.0})  # i = 0..4 are good
    assert speed.good_requests == 5
    assert speed.goodput_requests_per_s == pytest.approx(5 / speed.wall_s)
    assert speed.goodput_share == pytest.approx(5 / 11)  # the failed request counts in the denominator


def test_cost_is_the_gpu_hours_over_what_they_produced() -> None:
    records = [_rec(i, ttft=10.0, e2e=1000.0, out=100) for i in range(40)]
    speed = speed_summary(records)  # 40 requests, 4,000 output tokens, 4,400 in all, over 40 s
    add_cost(speed, cost_per_gpu_hour=3.0, gpus=8)
    usd_s = 3.0 * 8 / 3600
    assert speed.wall_s == pytest.approx(40.0) and speed.gpus_billed == 8
    assert speed.cost_per_million_output_tokens == pytest.approx(usd_s / 100.0 * 1e6)  # 100 output tok/s
    assert speed.cost_per_million_total_tokens == pytest.approx(usd_s / 110.0 * 1e6)
    assert speed.cost_per_1k_requests == pytest.approx(usd_s / 1.0 * 1e3)  # 1 request/s


def test_slo_settings_are_checked_with_the_fix_named() -> None:
    assert parse_slos(["ttft:500", "tpot:20,e2el:3000"]) == {"ttft": 500.0, "tpot": 20.0, "e2el": 3000.0}
    for bad, says in (("ttfx:5", "unknown SLO"), ("ttft", "KEY:VALUE"), ("ttft:abc", "not a number"),
                      ("ttft:-1", ">= 0"), ("ttft:inf", "finite")):  # fmt: skip
        with pytest.raises(ConfigError, match=says):
            load_config({"goodput": [bad]})
    assert load_config({"goodput": {"e2el": 100}}).goodput == {"e2el": 100.0}
    with pytest.raises(ConfigError, match="give --gpus-billed N"):
        load_config({"cost_per_gpu_hour": 2.0, "endpoint": "http://x"}).billed_gpus()
    served = load_config(
        {"cost_per_gpu_hour": 2.0, "server": {"model": "m", "tensor_parallel_size": 2, "data_parallel_size": 4}}
    )
    assert served.billed_gpus() == 8
    assert load_config({"cost_per_gpu_hour": 2.0, "gpus_billed": 3}).billed_gpus() == 3


def test_goodput_lower_than_the_baselines_by_more_than_allowed_fails() -> None:
    base, cand = (
        SpeedRecords(figures={"goodput_requests_per_s": 10.0}),
        SpeedRecords(figures={"goodput_requests_per_s": 8.0}),
    )
    assert goodput_change_rule("t", [base], [cand], 0.25).verdict == "pass"  # 20% lower, 25% allowed
    rule = goodput_change_rule("t", [base], [cand], 0.1)
    assert rule.verdict == "fail" and rule.observed == pytest.approx(-0.2) and "lower by 20.0%" in rule.note
    assert goodput_change_rule("t", [cand], [base], 0.0).verdict == "pass"  # higher is never worse
