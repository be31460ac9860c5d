"""Arrival processes (evalkit/client/arrivals.py, docs/load.md): the schedule's statistics (seeded, against
scipy), the scheduler keeping it (a request's own ``arrival_s``, ``--duration``, the rate achieved against the
fast test server), the task's ``load`` summary and the report's timeline, and the flags' bad input.

Here: those of its tests that run in-process; the others are in tests/integration/test_arrivals.py."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from evalkit.client.arrivals import Arrivals, arrival_offsets, ramp_rate
from evalkit.client.scheduler import fit_open_files
from evalkit.config import load_config
from evalkit.contracts import SampleRecord, SchedulerStats
from evalkit.scoring.load import lag_threshold_ms, load_summary


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]


# ------------------------------------------------------------------------------------------- the schedule
def test_poisson_gaps_pass_a_kolmogorov_smirnov_test_against_the_exponential() -> None:
    from scipy import stats

    rate = 50.0
    gaps = _gaps(arrival_offsets(5000, Arrivals(rate=rate, seed=7)))
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.01
    # and a gamma of shape 4 at the same mean does not pass: the test can tell
    bursty = _gaps(arrival_offsets(5000, Arrivals(rate=rate, burstiness=4.0, seed=7)))
    assert stats.kstest(bursty, "expon", args=(0, 1 / rate)).pvalue < 1e-6


@pytest.mark.parametrize("k", [0.25, 0.5, 2.0, 4.0])
def test_gamma_gaps_have_the_coefficient_of_variation_of_their_shape(k: float) -> None:
    gaps = _gaps(arrival_offsets(5000, Arrivals(rate=20.0, burstiness=k, seed=11)))
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert abs(cv - 1 / math.sqrt(k)) <= 0.1 / math.sqrt(k), (k, cv)


def test_the_schedule_is_seeded_and_ends_at_n_over_r_as_vllm_rescales_it() -> None:
    a = arrival_offsets(1000, Arrivals(rate=100.0, seed=3))
    assert a == arrival_offsets(1000, Arrivals(rate=100.0, seed=3))
    assert a != arrival_offsets(1000, Arrivals(rate=100.0, seed=4))
    assert a[-1] == pytest.approx(1000 / 100.0) and a == sorted(a) and a[0] > 0


def test_constant_arrivals_are_due_at_i_over_r() -> None:
    assert arrival_offsets(5, Arrivals(process="constant", rate=4.0)) == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_a_linear_ramp_runs_from_its_start_rate_to_its_end_rate() -> None:
    assert ramp_rate(0, 101, 2.0, 10.0) == 2.0 and ramp_rate(100, 101, 2.0, 10.0) == 10.0
    assert ramp_rate(50, 101, 2.0, 10.0) == 6.0
    even = _gaps(arrival_offsets(101, Arrivals(process="constant", ramp=(2.0, 10.0))))
    assert even[1] == pytest.approx(1 / 2.0) and even[-1] == pytest.approx(1 / ramp_rate(99, 101, 2.0, 10.0))
    drawn = _gaps(arrival_offsets(4000, Arrivals(ramp=(5.0, 50.0), seed=1)))
    first, last = statistics.fmean(drawn[:400]), statistics.fmean(drawn[-400:])
    assert first == pytest.approx(1 / ramp_rate(200, 4000, 5.0, 50.0), rel=0.15)
    assert last == pytest.approx(1 / ramp_rate(3800, 4000, 5.0, 50.0), rel=0.15)


# ------------------------------------------------------------------------------------------- settings
def test_a_rate_without_concurrency_means_no_cap_and_watch_paces_evenly() -> None:
    paced = load_config({"tasks": ["gsm8k"], "request_rate": 5})
    assert paced.in_flight_cap() is None and Arrivals.of(paced) == Arrivals(rate=5.0)
    assert load_config({"tasks": ["gsm8k"], "request_rate": 5, "concurrency": 3}).in_flight_cap() == 3
    assert load_config({"tasks": ["gsm8k"]}).in_flight_cap() == "auto"  # no rate: as before
    assert fit_open_files(None, 512).capped is False
    assert load_config({"duration_s": "10m"}).duration_s == 600.0
    from evalkit.watch.loop import Watch, WatchSettings

    watch = Watch.__new__(Watch)
    watch.s = WatchSettings(task="gsm8k", endpoint="http://127.0.0.1:1", out=Path("/tmp/w"), every_s=60, per_tick=4)
    assert watch.tick_config(1, [0]).arrival == "constant"


# ------------------------------------------------------------------------------------------- the summary
def _rec(i: int, due: float, sent: float, e2e_ms: float = 100.0) -> SampleRecord:
    return SampleRecord(key=str(i), task="t", doc_id=i, prompt="", status="ok", scheduled_s=due,
                        start_s=sent, e2e_ms=e2e_ms, output_tokens=10)  # fmt: skip


def test_a_late_client_is_said_to_have_missed_the_schedule() -> None:
    on_time = [_rec(i, i * 0.1, i * 0.1 + 0.001) for i in range(50)]
    kept = load_summary(on_time, SchedulerStats(sent=50), "constant", 10.0)
    assert kept is not None and kept.schedule_kept and kept.reason is None
    assert kept.offered_rps == pytest.approx(10.0) and kept.achieved_rps == pytest.approx(10.0)
    assert kept.send_lag_ms.p50 == pytest.approx(1.0)
    late = [_rec(i, i * 0.1, i * 0.15) for i in range(50)]  # the client falls behind: 6.7 req/s reached
    missed = load_summary(late, SchedulerStats(sent=50), "constant", 10.0)
    assert missed is not None and not missed.schedule_kept
    assert missed.achieved_rps == pytest.approx(10 / 1.5) and missed.offered_rps == pytest.approx(10.0)
    assert "not the offered 10 req/s" in (missed.reason or "") and "6.667 req/s" in (missed.reason or "")
    assert lag_threshold_ms(0.001) == 10.0 and lag_threshold_ms(1.0) == 100.0


def test_the_per_second_series_counts_sends_in_flight_and_tokens() -> None:
    recs = [_rec(i, i * 0.5, i * 0.5, e2e_ms=1000.0) for i in range(4)]  # sent at 0, .5, 1, 1.5; 1 s each
    series = load_summary(recs, SchedulerStats(sent=4), "constant", 2.0).series  # type: ignore[union-attr]
    assert series is not None and series.bin_s == 1.0
    assert series.sent_per_s == [2.0, 2.0, 0.0] and series.output_tokens_per_s == [0.0, 20.0, 20.0]
    assert series.in_flight == [1.5, 2.0, 0.5]


def test_unscheduled_records_have_no_load() -> None:
    assert load_summary([_rec(0, 0.0, 0.0).model_copy(update={"scheduled_s": None})], SchedulerStats(), "x") is None
