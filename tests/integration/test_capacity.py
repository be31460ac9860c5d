"""``evalkit capacity`` against the test server, whose capacity is known: with ``--max-num-seqs c`` and a fixed
service time D it is an M/D/c queue, and the highest Poisson rate at which 99% of requests have TTFT ≤ X follows
from a discrete-event simulation of the same seeded arrivals (:func:`mdc_capacity`): of the very schedule a load
point sends, or of the long run. The search must land within 10% of the former, in fewer points than a grid of
the same resolution; every point is an ordinary run dir. Bad input: SLOs missing or unparsable, a start the
server already fails (exit 1: below the start, not zero), a server failing every point (cannot decide, exit 2),
--max-duration running out (the bracket so far, exit 2)."""

from __future__ import annotations

import heapq
import json
import math
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.arrivals import Arrivals, arrival_offsets
from evalkit.store.capacity_dir import open_capacity
from evalkit.testing.server import Behaviour, SubprocessServer, TestServer

# 100 ms of service, 4 at once: 40 req/s at full use; 99% within TTFT <= 400 ms leaves ~33 req/s (rho ~0.82), and
# 300 ms of slack over the service time, so that a machine busy elsewhere (a process descheduled for 100 ms) does
# not decide the answer
SEQS, SERVICE_S, TTFT_SLO_MS = 4, 0.1, 400.0
# the default point is 60 s; 4 s here (40 service times), so that the search runs in about a minute
POINT = ("--point-duration", "4s")
LOAD = ("random", "--random-input-len", "20", "--random-output-len", "2")


def mdc_share(
    rate: float, seed: int = 0, duration_s: float | None = None, n: int = 20_000, service_s: float = SERVICE_S
) -> float:
    """The share of requests whose TTFT (wait + service) is within the SLO when evalkit's seeded Poisson schedule
    at ``rate`` is served first come first served by SEQS servers of SERVICE_S each, from an empty queue. With
    ``duration_s``: exactly the schedule a load point of that length sends (``num_prompts`` as
    evalkit.capacity.points asks, those due before the duration); without: ``n`` requests (the long run)."""
    total = math.ceil(rate * duration_s * 1.2) + 10 if duration_s is not None else n
    due_times = arrival_offsets(total, Arrivals(rate=rate, seed=seed))
    if duration_s is not None:
        due_times = [t for t in due_times if t < duration_s]
    free = [0.0] * SEQS
    ok = 0
    for due in due_times:
        start = max(due, heapq.heappop(free))
        heapq.heappush(free, start + service_s)
        ok += start - due + service_s <= TTFT_SLO_MS / 1000 + 1e-12
    return ok / len(due_times)


def mdc_capacity(
    seed: int = 0, duration_s: float | None = None, share: float = 0.99, service_s: float = SERVICE_S
) -> float:
    """The highest rate whose simulated share is at least ``share``, bisected to 0.01 req/s between 0 and twice
    the servers' full use (``mdc_share``'s arguments)."""
    low, high = 0.0, 2 * SEQS / SERVICE_S
    while high - low > 0.01:
        mid = (low + high) / 2
        low, high = (mid, high) if mdc_share(mid, seed, duration_s, service_s=service_s) >= share else (low, mid)
    return low


def invoke(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["capacity", *args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def mdc_server() -> Iterator[SubprocessServer]:
    """The test server in a process of its own (its event loop shares no GIL with the client's)."""
    with SubprocessServer("--max-num-seqs", str(SEQS), "--ttft", str(SERVICE_S)) as srv:
        yield srv


@pytest.mark.serial  # timing: the cores to itself (tests/conftest.py's SERIAL)
def test_the_search_lands_within_10_percent_of_the_mdc_answer(tmp_path: Path, mdc_server: SubprocessServer) -> None:
    """The truth is the simulation of the very schedule each 4 s point sends (a queue that starts empty and has
    4 s to grow: above the long-run M/D/4 answer, ~33 req/s, which 60 s points approach; docs/capacity.md)."""
    assert 33 < mdc_capacity(duration_s=4.0) < 45 and mdc_capacity() < mdc_capacity(duration_s=4.0)
    out = tmp_path / "cap"
    code, stdout, err = invoke(
        *LOAD, "--endpoint", mdc_server.url, "--goodput", f"ttft:{TTFT_SLO_MS:g}", "--start-rate", "10",
        "--cost-per-gpu-hour", "2", "--gpus-billed", "1", *POINT, "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    cap = open_capacity(out).record
    assert cap.status == "ok" and cap.capacity_rps is not None and cap.bracket is not None
    # the service time as this server delivers it (100 ms and its own per-request overhead, a few ms more on a
    # busy machine): the median TTFT of the first point, at a quarter of full use, where requests hardly wait
    first = [r.ttft_ms for r in open_capacity(out).point_run(cap.points[0]).records() if r.ttft_ms is not None]
    service_s = sorted(first)[len(first) // 2] / 1000
    assert SERVICE_S <= service_s < 1.2 * SERVICE_S
    truth = mdc_capacity(duration_s=4.0, service_s=service_s)
    assert abs(cap.capacity_rps - truth) <= 0.10 * truth, (cap.capacity_rps, truth, service_s, cap.bracket)
    low, high = cap.bracket
    assert low == cap.capacity_rps and high is not None and high - low <= 0.05 * low + 1e-9
    grid = cap.decision.grid_points
    assert grid is not None and cap.decision.points < grid, (cap.decision, grid)
    # the console's one sentence, as the issue writes it
    at = cap.at_capacity
    assert at is not None and at.output_tokens_per_s is not None and cap.cost_per_million_output_tokens is not None
    sentence = stdout.splitlines()[0]
    assert sentence == (
        f"holds {cap.capacity_rps:,.3g} req/s (bracket {low:,.3g}–{high:,.3g}) with 99% of requests within "
        f"TTFT ≤ 400 ms; {at.output_tokens_per_s:,.0f} output tok/s; "
        f"${cap.cost_per_million_output_tokens:,.2f} per million output tokens"
    )
    # every point is an ordinary run dir at its offered rate, warmed up, its goodput counted against the SLOs
    read = open_capacity(out)
    for p in cap.points:
        run = read.point_run(p)
        manifest = run.typed_manifest()
        assert manifest.request_rate == p.offered and manifest.goodput_slos == {"ttft": TTFT_SLO_MS}
        assert manifest.warmup is not None and manifest.warmup.requests == 16
        assert len(run.samples) == p.requests
    assert [c.offered for c in cap.curve] == sorted({p.offered for p in cap.points})
    html = (out / "capacity.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|url\(""", html)  # no remote assets
    assert html.count("<svg") >= 4 and "<title>SLO</title>" in html and "<title>capacity</title>" in html
    assert sentence in html


def test_missing_or_unparsable_slos_are_one_line(tmp_path: Path) -> None:
    code, _, err = invoke(*LOAD, "--endpoint", "http://127.0.0.1:9/v1", "-o", str(tmp_path / "a"))
    assert code == 2 and "needs the SLOs: give --goodput ttft:MS" in err and len(err.strip().splitlines()) == 1
    code, _, err = invoke(*LOAD, "--endpoint", "http://127.0.0.1:9/v1", "--goodput", "ttft:soon", "-o", str(tmp_path))
    assert code == 2 and "'soon' is not a number of milliseconds" in err
    code, _, err = invoke(*LOAD, "--endpoint", "http://x:9", "--goodput", "ttft:100", "--slo-share", "1.5", "-o", "x")
    assert code == 2 and "--slo-share 1.5 is not a share" in err
    assert not (tmp_path / "a").exists()


def test_a_start_the_server_already_fails_is_below_the_start(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_num_seqs=1, ttft_s=0.2, max_model_len=4096)) as srv:
        code, stdout, err = invoke(
            *LOAD, "--endpoint", srv.url, "--goodput", "ttft:100", "--start-rate", "4", "--point-requests", "8",
            "--warmup", "1", "--no-report", "-o", str(tmp_path / "c"),
        )  # fmt: skip
    assert code == 1, err
    assert stdout.startswith("capacity below the start 4 req/s: it does not hold 99% of requests within TTFT ≤ 100 ms")
    cap = open_capacity(tmp_path / "c").record
    assert cap.status == "below_start" and cap.capacity_rps is None and cap.bracket == [None, 4.0]
    assert json.loads((tmp_path / "c" / "capacity.json").read_text())["capacity_rps"] is None  # not 0


def test_a_server_failing_every_point_cannot_be_decided(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        srv.faults.extend([{"status": 400, "message": "no"}] * 500)
        code, stdout, err = invoke(
            *LOAD, "--endpoint", srv.url, "--goodput", "ttft:100", "--start-rate", "4", "--point-requests", "8",
            "--warmup", "0", "--no-report", "-o", str(tmp_path / "c"),
        )  # fmt: skip
    assert code == 2, (stdout, err)
    cap = open_capacity(tmp_path / "c").record
    assert cap.status == "cannot_decide" and cap.capacity_rps is None and len(cap.points) == 1
    assert stdout.startswith("cannot decide the capacity: no load could be judged: the run at 4 req/s failed")


def test_max_duration_stops_and_reports_the_bracket_so_far(tmp_path: Path, mdc_server: SubprocessServer) -> None:
    code, stdout, err = invoke(
        *LOAD, "--endpoint", mdc_server.url, "--goodput", "ttft:400", "--start-rate", "16", "--point-duration", "2s",
        "--max-duration", "12s", "--warmup", "1", "--no-report", "-o", str(tmp_path / "c"),
    )  # fmt: skip
    assert code == 2, err
    cap = open_capacity(tmp_path / "c").record
    assert cap.status == "max_duration" and cap.points and cap.bracket is not None
    assert "--max-duration ran out" in stdout
    assert cap.finished_at is not None
    took = datetime.fromisoformat(cap.finished_at) - datetime.fromisoformat(cap.created_at)
    assert took.total_seconds() <= 12 + 2, took  # no point started that the estimate said would end past 12 s


def test_a_concurrency_search_finds_the_queueing_boundary_exactly(tmp_path: Path) -> None:
    """4 run at once, 100 ms each: up to 8 in flight a request waits at most one service (TTFT ~200 ms), from 9 on
    some wait two (~300 ms): 99% within TTFT ≤ 250 ms holds up to 8 in flight, not at 9."""
    with SubprocessServer("--max-num-seqs", "4", "--ttft", "0.1") as srv:
        code, stdout, err = invoke(
            *LOAD, "--endpoint", srv.url, "--goodput", "ttft:250", "--search", "concurrency", "--point-requests",
            "36", "--warmup", "4", "--no-report", "-o", str(tmp_path / "c"),
        )  # fmt: skip
    assert code == 0, err
    cap = open_capacity(tmp_path / "c").record
    assert (cap.capacity_concurrency, cap.bracket, cap.capacity_rps) == (8, [8.0, 9.0], None)
    assert [p.offered for p in cap.points if p.step == "bracket"] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert stdout.startswith("holds 8 in flight (bracket 8–9) with 99% of requests within TTFT ≤ 250 ms; ")
