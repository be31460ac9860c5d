"""Arrival processes (evalkit/client/arrivals.py, docs/load.md): the schedule's statistics (seeded, against
scipy), the scheduler keeping it (a request's own ``arrival_s``, ``--duration``, the rate achieved against the
fast test server), the task's ``load`` summary and the report's timeline, and the flags' bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.arrivals import Arrivals
from evalkit.client.http_client import Client
from evalkit.client.scheduler import execute
from evalkit.contracts import GenParams, Request, Response, SampleRecord, SchedulerStats
from evalkit.scoring.load import load_summary
from evalkit.testing.server import Behaviour, SubprocessServer, TestServer

BAD = {
    "rate 0": (["--request-rate", "0"], "request_rate"),
    "rate negative": (["--request-rate", "-3"], "greater than 0"),
    "rate nan": (["--request-rate", "nan"], "finite"),
    "rate inf": (["--request-rate", "inf"], "finite"),
    "burstiness 0": (["--request-rate", "5", "--burstiness", "0"], "burstiness"),
    "burstiness nan": (["--request-rate", "5", "--burstiness", "nan"], "burstiness"),
    "burstiness alone": (["--burstiness", "2"], "give --request-rate too"),
    "burstiness constant": (["--request-rate", "5", "--arrival", "constant", "--burstiness", "2"], "drop one"),
    "ramp one end": (["--ramp-up-start-rps", "2"], "give both"),
    "ramp and rate": (["--request-rate", "5", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "9"], "not both"),
    "auto with a rate": (["--request-rate", "5", "--concurrency", "auto"], "--concurrency N"),
    "arrival unknown": (["--request-rate", "5", "--arrival", "bursty"], "arrival"),
    "duration typo": (["--duration", "10x"], "90s, 10m, 1h"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arrival_flags_give_one_line_and_exit_2(name: str, tmp_path: Path) -> None:
    args, needle = BAD[name]
    with TestServer() as srv:
        res = CliRunner().invoke(app, ["run", "gsm8k", "--endpoint", srv.url, "-o", str(tmp_path / "r"), *args])
        assert not srv.requests, "nothing may be sent for bad input"
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalkit: error: ") and needle in lines[0], res.stderr
    assert not (tmp_path / "r" / "samples.jsonl").exists()


# ------------------------------------------------------------------------------------------- the scheduler
def _requests(n: int, arrival: list[float] | None = None) -> list[Request]:
    gen = GenParams(max_tokens=4)
    return [Request("t", i, 0, f"q {i}", gen, arrival_s=None if arrival is None else arrival[i]) for i in range(n)]


def _send(url: str, reqs: list[Request], **kw) -> tuple[SchedulerStats, list[Response]]:
    got: list[Response] = []

    async def main() -> SchedulerStats:
        async with Client(url, "test-model") as client:
            return await execute(reqs, client, lambda _q, r: got.append(r), **kw)

    return asyncio.run(main()), got


def test_a_request_is_sent_at_its_own_arrival_time() -> None:
    """A trace's timestamps (in order, as a trace is): each request leaves at its own, whatever the process."""
    with TestServer() as srv:
        stats, got = _send(srv.url, _requests(3, [0.0, 0.15, 0.3]), concurrency=8, arrivals=Arrivals(rate=1.0))
    by_due = sorted(got, key=lambda r: r.scheduled_s or 0)
    assert [round((r.scheduled_s or 0) - stats.origin_s, 6) for r in by_due] == [0.0, 0.15, 0.3]
    for r in got:  # never early, and on time on an idle client
        assert 0 <= (r.start_s or 0) - (r.scheduled_s or 0) < 0.05


def test_duration_stops_sending_and_keeps_what_was_in_flight() -> None:
    with TestServer(Behaviour(ttft_s=0.2)) as srv:
        reqs = _requests(100)
        stats, got = _send(srv.url, reqs, concurrency=64, arrivals=Arrivals("constant", 50.0), duration_s=0.5)
    assert stats.sent == 25 and stats.not_sent == 75  # due at 0, 0.02, ... 0.48
    assert len(got) == 25 and all(r.error is None for r in got)  # the last ones were answered after 0.5 s


def test_achieved_rate_is_within_3_percent_of_200_per_second_over_10000_arrivals() -> None:
    """Integration: 10,000 Poisson arrivals at 200 req/s (50 s) against the fast test server in its own
    process, no cap on requests in flight."""
    n, rate = 10_000, 200.0
    with SubprocessServer("--fast") as srv:
        stats, got = _send(srv.url, _requests(n), concurrency=4096, total=n, arrivals=Arrivals(rate=rate, seed=5))
    records = [
        SampleRecord(key=str(i), task="t", doc_id=i, prompt="", status="ok", start_s=r.start_s,
                     scheduled_s=r.scheduled_s, e2e_ms=r.e2e_ms, output_tokens=r.output_tokens)
        for i, r in enumerate(got)
    ]  # fmt: skip
    load = load_summary(records, stats, "poisson", rate)
    assert load is not None and load.sent == n and load.achieved_rps is not None
    assert abs(load.achieved_rps / rate - 1) <= 0.03, load.model_dump(exclude={"series"})
    assert abs(load.achieved_rps / (load.offered_rps or 0) - 1) <= 0.03
    print(f"\nachieved {load.achieved_rps:.2f} req/s of {rate}; send lag {load.send_lag_ms}")


# ------------------------------------------------------------------------------------------- a run
def test_a_paced_run_records_its_schedule_and_the_report_draws_it(tmp_path: Path) -> None:
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        args = ["--limit", "30", "--request-rate", "40", "--seed", "9", "--no-warmup", "-q", "-o", str(tmp_path / "r")]
        res = CliRunner().invoke(app, ["run", "gsm8k", "--endpoint", srv.url, *args])
    assert res.exit_code == 0, res.output
    run = tmp_path / "r"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["arrivals"] == {"process": "poisson", "request_rate": 40.0, "seed": 9, "burstiness": 1.0,
                                    "duration_s": None, "max_in_flight": None}  # fmt: skip
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert all(s["scheduled_s"] <= s["start_s"] for s in samples)
    load = json.loads((run / "summary.json").read_text())["tasks"]["gsm8k"]["load"]
    assert load["process"] == "poisson" and load["sent"] == 30 and load["send_lag_ms"]["n"] == 30
    assert load["offered_rps"] > 0 and load["achieved_rps"] > 0 and "schedule_kept" in load
    assert sum(load["series"]["sent_per_s"]) * load["series"]["bin_s"] == 30
    html = (run / "report.html").read_text()
    assert 'id="load-gsm8k"' in html and "<svg" in html and "send lag" in html
