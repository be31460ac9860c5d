"""The speed-metric catalogue (``evalkit.contracts``: LATENCIES, QUANTILES, SPEED_METRICS) agrees with the models
it names, and every consumer (scoring, report, console, gate, sweep, watch) names its figures by it."""

from __future__ import annotations

from typing import get_args

from evalkit.cli import console
from evalkit.contracts import (
    LATENCIES,
    QUANTILES,
    SPEED,
    SPEED_METRICS,
    Percentiles,
    SampleRecord,
    Speed,
    SteadyState,
    speed_metric,
)
from evalkit.gating.policy import GATED_SPEED, LATENCY_FLOORS_MS, NOISE_BUDGETS, SpeedPolicy
from evalkit.reporting import compare_view, run_tables, run_view
from evalkit.scoring.speed import percentiles, speed_summary
from evalkit.sweep import combination_runs as sweep_run
from evalkit.sweep import page as sweep_page
from evalkit.watch.tick_log import TICK_SPEED, tick_speed_key


def test_quantiles_are_the_percentile_fields() -> None:
    assert [q for q, _ in QUANTILES] == [f for f in Percentiles.model_fields if f not in ("mean", "n")]
    assert all(0 < pct < 100 for _, pct in QUANTILES)


def test_latencies_are_fields_of_the_speed_models_and_the_samples() -> None:
    for lat in LATENCIES:
        assert Speed.model_fields[lat.key].annotation is Percentiles, lat.key
        assert Percentiles in get_args(SteadyState.model_fields[lat.key].annotation), lat.key
        assert lat.key in SampleRecord.model_fields, lat.key


def test_every_metric_names_a_figure_of_speed() -> None:
    assert len(SPEED) == len(SPEED_METRICS)  # keys are unique
    assert len({m.column for m in SPEED_METRICS}) == len(SPEED_METRICS)
    stats = {q for q, _ in QUANTILES}
    for m in SPEED_METRICS:
        assert m.field in Speed.model_fields, m.key
        assert m.direction in ("lower", "higher") and m.unit in ("ms", "tok/s", "req/s", "share", "$/Mtok", "J/tok")
        assert (m.stat in stats) if m.unit == "ms" else m.stat is None, m.key
    # every latency at every percentile
    assert {(m.field, m.stat) for m in SPEED_METRICS if m.stat} == {(lat.key, q) for lat in LATENCIES for q in stats}


def test_figures_read_from_typed_and_json_speed_agree() -> None:
    from evalkit.contracts import SampleRecord as R

    records = [
        R(key=str(i), task="t", doc_id=i, prompt="", status="ok", output_tokens=10, prompt_tokens=5,
          ttft_ms=10.0 + i, tpot_ms=1.0 + i / 10, e2e_ms=100.0 + i, itl_ms=[1.0, 2.0], start_s=i / 10)
        for i in range(40)
    ]  # fmt: skip
    speed = speed_summary(records)
    as_json = speed.model_dump(mode="json")
    for m in SPEED_METRICS:
        assert m.of(speed) == m.of_json(as_json), m.key
    assert speed_metric("ttft_p50_ms").of(speed) == speed.ttft_ms.p50
    assert speed_metric("output_tokens_per_s").of(None) is None


def test_scoring_fills_every_quantile() -> None:
    p = percentiles(float(x) for x in range(101))
    assert [getattr(p, q) for q, _ in QUANTILES] == [pct for _, pct in QUANTILES]


def test_consumers_name_their_figures_by_the_catalogue() -> None:
    keys = [
        *(k for k, _ in compare_view.SPEED_COLUMNS),
        *(k for k, _, _ in run_view.ENDPOINT_COLUMNS),
        *(k for _, ks, _ in console.SPEED_COLUMNS for k in ks),
        *sweep_run.TABLE_SPEED,
        *sweep_run.TABLE_STEADY,
        *(k for _, k in sweep_page.CHART_SPEED),
        *(k for k, _ in sweep_page.PAGE_SPEED),
        *TICK_SPEED,
        *GATED_SPEED,
        *(f"{k.removesuffix('_ms')}_p50_ms" for k in run_tables.CARD_LATENCIES),
    ]
    unknown = [k for k in keys if k not in SPEED]
    assert not unknown, unknown


def test_the_gate_has_a_budget_for_every_figure_it_judges() -> None:
    assert GATED_SPEED == ("output_tokens_per_s", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms")
    assert set(NOISE_BUDGETS) == set(GATED_SPEED)
    assert set(LATENCY_FLOORS_MS) == {k for k in GATED_SPEED if SPEED[k].unit == "ms"}
    assert all(k in SpeedPolicy.model_fields for k in GATED_SPEED)


def test_history_keys_are_unchanged() -> None:
    """history.jsonl's tick speed keys, as watch has always written them."""
    assert [tick_speed_key(k) for k in TICK_SPEED] == [
        "ttft_ms_p50",
        "tpot_ms_p50",
        "e2e_ms_p50",
        "output_tokens_per_s",
    ]
