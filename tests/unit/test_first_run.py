"""The first run a new user makes (README: 50 GSM8K requests against the bundled test server, ``--concurrency
auto``): auto starts at no more requests than there are, and the client-bottleneck banner fires only on evidence
that the client set the pace, stated in a sentence (issue 49, item 5)."""

from __future__ import annotations

from evalkit.contracts import Speed
from evalkit.reporting.banners import client_bound_banner
from evalkit.scoring.summary import loop_lagged


def test_one_late_check_of_the_event_loop_is_no_evidence():
    quiet = [0.5] * 28
    assert not loop_lagged([*quiet, 32.0])  # one start-up pause in a 1.5 s run (was: client-bound)
    assert not loop_lagged([*quiet, 25.0, 30.0, 40.0, 22.0])  # 4 late checks: still fewer than 5
    assert loop_lagged([*quiet, 25.0, 30.0, 40.0, 22.0, 60.0])
    assert not loop_lagged([0.5] * 1000 + [30.0] * 20)  # 20 of 1,020: under 5%


def test_the_banner_states_the_evidence_that_decided_it():
    lagged = client_bound_banner(
        "gsm8k", Speed.model_construct(loop_lag_ms_p99=45.2, client_cpu_s=1.2, wall_s=1.5)
    ).text
    assert "its event loop fell behind again and again (p99 45 ms late on its 50 ms checks" in lagged
    assert (
        "requests were sent and their streams read later than the server was ready, while it kept a CPU core 80%"
        in lagged
    )
    busy = client_bound_banner("gsm8k", Speed.model_construct(loop_lag_ms_p99=3.0, client_cpu_s=9.5, wall_s=10.0)).text
    assert "bottleneck: it kept a CPU core 95% busy (9.5 s of CPU in 10.0 s)." in busy and "event loop" not in busy


def test_lag_without_a_busy_client_is_no_evidence(tmp_path):
    """A loop that lags while the client used 10% of a core was held up by something else on the machine."""
    from evalkit.contracts import SchedulerStats
    from evalkit.scoring.summary import task_summary

    stats = SchedulerStats()
    stats.loop_lag_ms, stats.wall_s, stats.cpu_s = [0.5] * 20 + [40.0] * 10, 1.5, 0.15
    assert task_summary("1", ({}, {}), [], stats, None).speed.client_bound is False
    stats.cpu_s = 1.2
    assert task_summary("1", ({}, {}), [], stats, None).speed.client_bound is True
