"""Prometheus, in-process: evalkit.server.metrics parses /metrics text, takes deltas and histogram percentiles,
sums a data-parallel server's engines once (label ``engine``) and keeps each engine's counters; the alert rules'
own test file covers every alert of docker/monitoring.

tests/data/vllm_metrics_0.32_*.txt are real /metrics outputs of vLLM 0.32 (CPU build, SmolLM2-135M) captured
idle, after a first round of 12 completions and after a second identical round (which hit the prefix cache);
tests/data/vllm_metrics_0.32_dp2_*.txt the same with ``--data-parallel-size 2``, idle, after 6 concurrent
completions and after 4 more. The scrapes of a live server are in tests/integration/test_prometheus.py, the
real promtool and Prometheus in tests/system/test_prometheus.py."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from evalkit.reporting.run_tables import server_counters
from evalkit.server import metrics as prom
from evalkit.server.metrics import delta, histogram_quantile, parse_text
from tests.system.test_prometheus import MONITORING, alerts

DATA = Path(__file__).parents[1] / "data"
MODEL = "smollm2-135m"


def load(name: str) -> prom.Snapshot:
    return parse_text((DATA / f"vllm_metrics_0.32_{name}.txt").read_text())


@pytest.fixture(scope="module")
def rounds() -> tuple[prom.Snapshot, prom.Snapshot, prom.Snapshot]:
    return load("idle"), load("round1"), load("round2")


# ------------------------------------------------------------------------------------------------ parse
def test_parse_real_exposition(rounds: tuple[prom.Snapshot, ...]) -> None:
    _, _, snap = rounds
    assert snap.types["vllm:time_to_first_token_seconds"] == "histogram"
    assert snap.types["vllm:kv_cache_usage_perc"] == "gauge"
    assert snap.types["vllm:prompt_tokens_total"] == "counter"  # text format 0.0.4 names counters with _total
    assert snap.value("vllm:prompt_tokens_total", MODEL) == 3284.0
    assert snap.value("vllm:request_success_total", MODEL) == 24.0
    [(labels, value)] = snap.get("vllm:cache_config_info")
    assert value == 1.0 and labels["kv_cache_dtype_skip_layers"] == "[]" and labels["block_size"] == "128"
    inf_bucket = [v for lab, v in snap.get("vllm:time_to_first_token_seconds_bucket") if lab["le"] == "+Inf"]
    assert inf_bucket == [24.0]
    assert snap.value("vllm:no_such_metric") is None


def test_parse_escapes_timestamps_and_special_values() -> None:
    text = (
        "# HELP odd An odd metric\n"
        "# TYPE odd gauge\n"
        'odd{a="q\\"uote,}",b="back\\\\slash",c="new\\nline"} 1.5 1700000000000\n'
        "odd_nan NaN\n"
        "odd_inf +Inf\n"
        "   \n"
        "garbage line that is not a sample {\n"
        "no_labels 7\n"
    )
    snap = parse_text(text)
    assert snap.get("odd") == [({"a": 'q"uote,}', "b": "back\\slash", "c": "new\nline"}, 1.5)]
    assert math.isnan(snap.get("odd_nan")[0][1])
    assert snap.value("odd_inf") == math.inf
    assert snap.value("no_labels") == 7.0


def test_parse_only_prefixes() -> None:
    snap = parse_text((DATA / "vllm_metrics_0.32_round1.txt").read_text(), only=["vllm:kv_cache_usage_perc"])
    assert set(snap.samples) == {"vllm:kv_cache_usage_perc"}


def test_parser_agrees_with_prometheus_client() -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    text = (DATA / "vllm_metrics_0.32_round2.txt").read_text()
    ours = {(n, tuple(sorted(lab.items())), v) for n, rows in parse_text(text).samples.items() for lab, v in rows}
    theirs = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for fam in parser.text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert ours == theirs


# ------------------------------------------------------------------------------------------------ delta
def test_delta_between_real_rounds(rounds: tuple[prom.Snapshot, ...]) -> None:
    _, before, after = rounds
    d = delta(before, after, MODEL)
    assert d["available"] is True
    assert d["requests"] == {
        "total": 12,
        "by_finished_reason": {"abort": 0, "error": 0, "length": 1, "repetition": 0, "stop": 11},
    }
    assert d["prompt_tokens"] == 1642 and d["generation_tokens"] == 73 and d["preemptions"] == 0
    assert d["prefix_cache"] == {"hits": 1536, "queries": 1642}
    assert d["prefix_cache_hit_rate"] == pytest.approx(1536 / 1642)
    # ttft bucket deltas: le 0.08:1, 0.1:1, 0.25:12, then 12 up to +Inf; sums 30.642852306 -> 33.348093987
    ttft = d["ttft_s"]
    assert ttft["n"] == 12
    assert ttft["mean"] == pytest.approx((33.34809398651123 - 30.642852306365967) / 12)
    # 11 of 12 in (0.1, 0.25] with a mean of 0.225 s: they sit near 0.25, not spread evenly (p50 0.168)
    assert 0.2 < ttft["p50"] < ttft["p90"] < ttft["p99"] <= 0.25
    buckets = {0.06: 0, 0.08: 1, 0.1: 1, 0.25: 12, math.inf: 12}
    assert ttft["p50"] == pytest.approx(histogram_quantile(0.5, buckets, ttft["mean"] * 12))
    assert d["tpot_s"]["n"] == 61  # inter-token latencies: one per generated token after the first
    assert d["request_tpot_s"]["n"] == d["e2e_s"]["n"] == d["queue_s"]["n"] == 12
    assert d["absent"] == ["kv_cache_usage_peak", "num_requests_running_peak", "num_requests_waiting_peak"]
    assert d["kv_cache_usage_peak"] is None  # not sampled: absent, not 0


def test_delta_first_round_cold_cache(rounds: tuple[prom.Snapshot, ...]) -> None:
    idle, r1, _ = rounds
    d = delta(idle, r1, MODEL, gauges={"kv_cache_usage_peak": 0.25, "num_requests_running_peak": 12})
    assert d["prefix_cache"] == {"hits": 0, "queries": 1642} and d["prefix_cache_hit_rate"] == 0.0
    assert d["kv_cache_usage_peak"] == 0.25 and d["num_requests_running_peak"] == 12
    assert d["absent"] == ["num_requests_waiting_peak"]


def test_delta_unavailable() -> None:
    assert delta(None, parse_text("")) == {"available": False}
    assert delta(parse_text(""), None) == {"available": False}


def test_absent_metrics_are_none_never_zero() -> None:
    before = parse_text('vllm:prompt_tokens_total{model_name="m"} 10\n')
    after = parse_text('vllm:prompt_tokens_total{model_name="m"} 25\n')
    d = delta(before, after, "m")
    assert d["prompt_tokens"] == 15
    for key in (
        "requests",
        "generation_tokens",
        "preemptions",
        "prefix_cache_hit_rate",
        "ttft_s",
        "tpot_s",
        "e2e_s",
    ):
        assert d[key] is None
        assert key in d["absent"]
    assert "prompt_tokens" not in d["absent"]


def test_older_metric_names() -> None:
    def text(hits: float, queries: float, usage: float, n: float) -> str:
        return (
            f'vllm:gpu_prefix_cache_hits_total{{model_name="m"}} {hits}\n'
            f'vllm:gpu_prefix_cache_queries_total{{model_name="m"}} {queries}\n'
            f'vllm:gpu_cache_usage_perc{{model_name="m"}} {usage}\n'
            f'vllm:time_per_output_token_seconds_bucket{{le="0.01",model_name="m"}} 0\n'
            f'vllm:time_per_output_token_seconds_bucket{{le="0.1",model_name="m"}} {n}\n'
            f'vllm:time_per_output_token_seconds_bucket{{le="+Inf",model_name="m"}} {n}\n'
            f'vllm:time_per_output_token_seconds_sum{{model_name="m"}} {n * 0.05}\n'
            f'vllm:time_per_output_token_seconds_count{{model_name="m"}} {n}\n'
        )

    d = delta(parse_text(text(10, 100, 0.1, 0)), parse_text(text(40, 200, 0.2, 10)), "m")
    assert d["prefix_cache_hit_rate"] == pytest.approx(0.3)
    assert d["tpot_s"]["n"] == 10 and d["tpot_s"]["mean"] == pytest.approx(0.05)
    # mean 0.05 s inside (0.01, 0.1]: a little below the even spread's median (0.055 s)
    assert d["tpot_s"]["p50"] == pytest.approx(histogram_quantile(0.5, {0.01: 0, 0.1: 10, math.inf: 10}, 0.5))
    assert 0.04 < d["tpot_s"]["p50"] < 0.05
    assert prom._gauge(parse_text(text(0, 0, 0.2, 0)), prom.KV_USAGE, "m", "max") == 0.2


def test_data_parallel_engines_are_summed_and_models_filtered() -> None:
    def text(a: float, b: float) -> str:
        return (
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {a}\n'
            f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {b}\n'
            f'vllm:generation_tokens_total{{engine="0",model_name="other"}} 1000\n'
        )

    d = delta(parse_text(text(1, 2)), parse_text(text(11, 32)), "m")
    assert d["generation_tokens"] == 40
    # a name that matches no series (e.g. the model path) falls back to all series
    assert delta(parse_text(text(1, 2)), parse_text(text(11, 32)), "models/m")["generation_tokens"] == 40


def test_counter_reset_is_flagged() -> None:
    d = delta(parse_text("vllm:prompt_tokens_total 100\n"), parse_text("vllm:prompt_tokens_total 5\n"))
    assert d["prompt_tokens"] is None and "server restarted" in d["warnings"][0]


# ------------------------------------------------------------------------------------------- quantiles
@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.5, {0.1: 2, 0.5: 6, 1.0: 8, math.inf: 8}, 0.1 + 0.4 * (4 - 2) / 4),
        (0.25, {0.1: 2, 0.5: 6, 1.0: 8, math.inf: 8}, 0.1),  # rank 2 = end of the first bucket
        (0.1, {0.1: 2, 0.5: 6, 1.0: 8, math.inf: 8}, 0.1 * 0.8 / 2),  # first bucket starts at 0
        (0.99, {0.1: 2, 0.5: 6, 1.0: 8, math.inf: 10}, 1.0),  # in +Inf: largest finite bound
        (0.5, {0.1: 0, math.inf: 0}, None),  # no observations
        (0.5, {0.1: 3}, None),  # no +Inf bucket: malformed
        (0.5, {-1.0: 4, 0.0: 4, math.inf: 4}, -1.0),  # non-positive first bound is returned as is
    ],
)
def test_histogram_quantile(q: float, buckets: dict[float, float], expected: float | None) -> None:
    got = histogram_quantile(q, buckets)
    assert got == (pytest.approx(expected) if expected is not None else None)


VLLM_QUEUE_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def bucketed(values: np.ndarray, bounds: tuple[float, ...]) -> dict[float, float]:
    return {**{b: float((values <= b).sum()) for b in bounds}, math.inf: float(len(values))}


@pytest.mark.parametrize(
    ("name", "bounds", "draw"),
    [
        # the H200 run's queue times: mean 20 ms, all inside vLLM's first queue bucket (0, 0.3 s]
        ("queue exponential 20 ms", VLLM_QUEUE_BUCKETS, lambda r, n: r.exponential(0.02, n)),
        ("queue lognormal 10 ms", VLLM_QUEUE_BUCKETS, lambda r, n: r.lognormal(math.log(0.01), 0.8, n)),
        ("queue exponential 200 ms", VLLM_QUEUE_BUCKETS, lambda r, n: r.exponential(0.2, n)),
        ("ttft lognormal 150 ms", VLLM_TTFT_BUCKETS, lambda r, n: r.lognormal(math.log(0.15), 0.4, n)),
        ("ttft gamma", VLLM_TTFT_BUCKETS, lambda r, n: r.gamma(2.0, 0.05, n)),
        ("itl exponential 20 ms", VLLM_ITL_BUCKETS, lambda r, n: r.exponential(0.02, n)),
        ("itl uniform", VLLM_ITL_BUCKETS, lambda r, n: r.uniform(0.0, 0.3, n)),
    ],
)
def test_quantiles_of_known_distributions(name: str, bounds: tuple[float, ...], draw: Any) -> None:
    """Samples drawn from a known distribution, bucketed with vLLM's bounds: the estimate from the buckets and
    the exact sum is close to the samples' own quantile (within 20%) and never contradicts the mean."""
    values = draw(np.random.default_rng(7), 5000)
    buckets = bucketed(values, bounds)
    for q in (0.5, 0.9, 0.99):
        est = histogram_quantile(q, buckets, float(values.sum()))
        true = float(np.quantile(values, q))
        assert est == pytest.approx(true, rel=0.2), (name, q, est, true)
    mean = float(values.mean())
    assert histogram_quantile(0.5, buckets, float(values.sum())) <= 2 * mean  # Markov: P(X >= 2 mean) <= 1/2


def test_queue_time_percentiles_agree_with_the_mean() -> None:
    """The H200 report's impossible queue-time row (mean 0.020 s, p50 0.15 s) read from the same buckets."""

    def text(n: float, total: float) -> str:
        rows = [f'vllm:request_queue_time_seconds_bucket{{le="{b}",model_name="m"}} {n}' for b in VLLM_QUEUE_BUCKETS]
        rows.append(f'vllm:request_queue_time_seconds_bucket{{le="+Inf",model_name="m"}} {n}')
        rows.append(f'vllm:request_queue_time_seconds_sum{{model_name="m"}} {total}')
        return "\n".join(rows) + "\n"

    queue = delta(parse_text(text(0, 0.0)), parse_text(text(1319, 1319 * 0.020028111040183125)), "m")["queue_s"]
    assert queue["mean"] == pytest.approx(0.020028, rel=1e-4)
    assert queue["p50"] == pytest.approx(0.020028 * math.log(2), rel=0.01)  # an exponential's median
    assert queue["p50"] < queue["p90"] < queue["p99"] < 0.3


def test_quantile_fit_falls_back_to_even_spread() -> None:
    buckets = {0.1: 2, 0.5: 6, 1.0: 8, math.inf: 10}  # observations above the largest bound: their sum unknown
    assert histogram_quantile(0.5, buckets, 100.0) == histogram_quantile(0.5, buckets)
    even = {0.1: 2, 0.5: 6, 1.0: 8, math.inf: 8}  # the mean of an even spread: lam = 0
    total = 2 * 0.05 + 4 * 0.3 + 2 * 0.75
    assert histogram_quantile(0.5, even, total) == pytest.approx(histogram_quantile(0.5, even))
    assert histogram_quantile(0.5, even, 1e9) == histogram_quantile(0.5, even)  # inconsistent sum: no fit


def test_every_alert_has_a_case_that_fires_it_and_one_that_does_not() -> None:
    doc = yaml.safe_load((MONITORING / "alerts_test.yml").read_text())
    assert doc["rule_files"] == ["alerts.yml"]
    cases = [c for t in doc["tests"] for c in t["alert_rule_test"]]
    for name in (r["alert"] for r in alerts()):
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine), f"{name}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{name}: no case where it stays quiet"


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
