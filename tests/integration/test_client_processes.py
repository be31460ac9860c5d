"""``--client-processes N``: the timed phase's requests sent by N processes (evalkit/runner/sender_processes.py)
give the run dir one process gives (the same samples, answers and scores), keep the one seeded schedule (the
union of the senders' arrivals is exactly it, on one clock), resume after a kill, and refuse bad input."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit import api
from evalkit.cli import app
from evalkit.client.arrivals import Arrivals, arrival_offsets, part_of, schedule_part, timed
from evalkit.client.scheduler import InFlight
from evalkit.contracts import GenParams, Request
from evalkit.runner.sender_processes import Senders, SenderSpec, sender_count, shares
from evalkit.testing.server import Behaviour, TestServer
from tests.kill_resume import DONE_BEFORE_KILL, STALLED, kill_mid_run_and_resume

SAME = ("key", "task", "doc_id", "sample_index", "prompt", "target", "text", "status", "finish_reason", "score")


def invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def run_args(url: str, out: Path, *extra: str, limit: int = 40) -> list[str]:
    return [
        "run", "gsm8k", "--endpoint", url, "--limit", str(limit), "--max-tokens", "32", "-o", str(out),
        "--no-report", "-q", "--no-warmup", *extra,
    ]  # fmt: skip


def records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "samples.jsonl").read_bytes().splitlines()]


def summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((out / "summary.json").read_bytes())["tasks"]["gsm8k"]
    return data


def by_key(out: Path) -> dict[str, dict[str, Any]]:
    return {r["key"]: {k: r.get(k) for k in SAME} for r in records(out)}


# ------------------------------------------------------------------------------------------ same run dir
def test_two_processes_give_the_samples_answers_and_scores_of_one(tmp_path: Path, test_server: TestServer) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    code, err = invoke(run_args(test_server.url, one, "--concurrency", "4", "--client-processes", "1"))
    assert code == 0, err
    sent_by_one = len(test_server.requests)
    code, err = invoke(run_args(test_server.url, two, "--concurrency", "4", "--client-processes", "2"))
    assert code == 0, err
    assert len(test_server.requests) - sent_by_one == 40  # each request sent once, by one of the two senders
    assert by_key(two) == by_key(one)
    assert len(by_key(two)) == 40
    mine, theirs = summary(two), summary(one)
    assert mine["metrics"] == theirs["metrics"] and mine["counts"] == theirs["counts"]
    assert 0 < mine["metrics"]["exact_match,strict-match"]["value"] < 1
    assert mine["speed"]["concurrency"] == 4  # the senders' shares add up to the run's level
    # one clock: every start_s counts from the shared start, none before it, all within the phase
    starts = [r["start_s"] for r in records(two)]
    assert min(starts) >= 0 and max(starts) < 30


# ------------------------------------------------------------------------------------------ the schedule
def test_the_progress_sees_each_record_once_as_with_one_process(tmp_path: Path, test_server: TestServer) -> None:
    """Over two senders the progress callback is called once per stored record, ``done`` counting 1, 2, ... (the
    live bar counts errors, right answers and tokens from each record), as with one process (calls without a
    record, a task's start, are the bar's own)."""
    calls: dict[int, list[tuple[int, int, str]]] = {}
    for n in (1, 2):
        seen = calls[n] = []
        api.run(
            "gsm8k", endpoint=test_server.url, limit=40, max_tokens=32, concurrency=4, client_processes=n,
            output_dir=tmp_path / str(n), report=False, warmup=0,
            progress=lambda task, done, total, rec, seen=seen: rec is None or seen.append((done, total, rec.key)),
        )  # fmt: skip
        assert [c[:2] for c in seen] == [(i, 40) for i in range(1, 41)], n
    assert sorted(c[2] for c in calls[2]) == sorted(c[2] for c in calls[1])


def test_the_senders_interleave_the_one_schedule_and_their_union_is_it() -> None:
    arrivals = Arrivals(rate=300.0, seed=7)
    offsets = arrival_offsets(101, arrivals)
    n = 3
    reqs = [Request("t", i, 0, f"p{i}", GenParams(max_tokens=8)) for i in range(101)]
    split = [schedule_part(list(enumerate(reqs)), k, n) for k in range(n)]
    assert all(part_of(i, n) == k for k, part in enumerate(split) for i, _ in part)  # the senders' one-by-one deal
    due = sorted((i, timed([req], offsets, i)[0].arrival_s) for part in split for i, req in part)
    assert due == list(enumerate(offsets))
    assert timed([replace(reqs[0], arrival_s=9.0)], offsets)[0].arrival_s == 9.0  # a trace's own time is kept
    assert timed([reqs[0]], offsets, len(offsets))[0].arrival_s is None  # past the schedule's end: as it is
    assert shares(10, 3) == [4, 3, 3] and sum(shares(7, 7)) == 7


def test_an_answer_the_store_could_not_take_stops_the_senders_and_is_raised(test_server: TestServer) -> None:
    """``Senders.send``: a batch handed to ``on_done`` whose outcomes hold an error (an answer that could not be
    scored or stored) stops the sending, every batch already handed over is waited for, and that error is raised;
    the sender processes are gone after it."""
    specs = [SenderSpec([test_server.url], "test-model", {"kind": "completions"}, 2, None) for _ in range(2)]
    senders = Senders(specs)
    total, handed = 3000, []  # more than the senders take before their first batch is stored

    async def todo() -> AsyncIterator[Request]:
        for i in range(total):
            yield Request("t", i, 0, f"p{i}", GenParams(max_tokens=4))

    def on_done(answers: list[tuple[Request, Any]]) -> asyncio.Future[list[Any]]:
        fut: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        handed.extend(req.doc_id for req, _ in answers)
        outcomes = [OSError("disk full") if req.doc_id == 5 else req.doc_id for req, _ in answers]
        asyncio.get_running_loop().call_later(0.01, fut.set_result, outcomes)
        return fut

    with pytest.raises(OSError, match="disk full"):
        asyncio.run(senders.send(todo(), total, None, on_done))
    assert 5 in handed and len(handed) < total  # it stopped the sending
    assert all(s.proc.poll() is not None for s in senders._senders)


@pytest.fixture
def fast_server():
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        yield srv


def test_a_rate_run_over_two_processes_sends_each_request_at_its_scheduled_time(
    tmp_path: Path, fast_server: TestServer
) -> None:
    """The records' due times are exactly the seeded schedule, and no request went before it was due: the
    senders share the schedule's zero (a sender whose clock were off would send early or late by the offset)."""
    out = tmp_path / "rate"
    code, err = invoke(
        run_args(fast_server.url, out, "--request-rate", "80", "--seed", "3", "--client-processes", "2", limit=60)
    )
    assert code == 0, err
    got = records(out)
    origin = summary(out)["load"].get("origin_s", 0.0)  # the shared start: 0 on start_s's clock
    want = arrival_offsets(60, Arrivals(rate=80.0, seed=3))
    assert sorted(r["scheduled_s"] - origin for r in got) == pytest.approx(want, abs=2e-3)
    lags = [r["start_s"] - r["scheduled_s"] for r in got]
    assert min(lags) > -2e-3  # never before its time, on the one clock
    assert sorted(lags)[len(lags) // 2] < 0.25  # and on time, but for a busy machine's stragglers


def test_a_probed_load_at_a_rate_over_two_processes_gives_the_run_of_one(tmp_path: Path) -> None:
    """A workload with a probe mixed in, on a schedule: the same samples (the probe's answers and scores) and the
    same due times with two senders as with one."""
    outs = {n: tmp_path / f"p{n}" for n in (1, 2)}
    with TestServer(Behaviour(max_model_len=4096, correct_ratio=0.5)) as srv:
        for n, out in outs.items():
            args = ["run", "random", "--endpoint", srv.url, "--random-input-len", "20", "--random-output-len", "4",
                    "--num-prompts", "30", "--probe", "gsm8k:0.25", "--seed", "1", "--request-rate", "100",
                    "--client-processes", str(n), "-o", str(out), "--no-report", "-q"]  # fmt: skip
            code, err = invoke(args)
            assert code == 0, err
    one, two = by_key(outs[1]), by_key(outs[2])
    assert one == two and len(two) == 40
    assert sum(r["task"] == "gsm8k" for r in two.values()) == 10

    def due(out: Path) -> list[float]:
        origin = orjson.loads((out / "summary.json").read_bytes())["tasks"]["random"]["load"].get("origin_s", 0.0)
        return sorted(r["scheduled_s"] - origin for r in records(out))

    assert due(outs[2]) == pytest.approx(due(outs[1]), abs=2e-3)


# ------------------------------------------------------------------------------------------ resume after a kill
@pytest.mark.slow
def test_a_killed_two_process_run_resumes_without_resending_and_its_senders_exit(tmp_path: Path) -> None:
    def argv(url: str, out: Path) -> list[str]:
        return run_args(url, out, "--concurrency", str(STALLED), "--client-processes", "2")

    senders: list[int] = []

    def at_kill(proc: subprocess.Popen[bytes]) -> None:
        senders.extend(_children(proc.pid, "evalkit.runner.sender_processes"))
        assert len(senders) == 2

    crash = kill_mid_run_and_resume(tmp_path, argv, records, at_kill)
    gone = time.monotonic() + 10
    while time.monotonic() < gone and any(_alive(pid) for pid in senders):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in senders)  # a sender whose parent died exits: no orphan load
    completed = Counter(r.prompt for r in crash.requests if r.completed)
    assert max(completed.values()) == 1 and sum(completed.values()) == 40
    assert sum(1 for r in crash.requests if r.prompt in crash.done_before) == DONE_BEFORE_KILL  # never re-sent
    assert by_key(crash.out) == by_key(crash.reference)
    assert summary(crash.out)["metrics"] == summary(crash.reference)["metrics"]


def _children(pid: int, marker: str) -> list[int]:
    """``pid``'s child processes whose command line holds ``marker``."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            if marker.encode() in cmdline:
                found.append(int(child))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ------------------------------------------------------------------------------------------ bad input, defaults
def test_zero_processes_is_refused_in_one_line_with_exit_2(tmp_path: Path, test_server: TestServer) -> None:
    code, err = invoke(run_args(test_server.url, tmp_path / "r", "--concurrency", "4", "--client-processes", "0"))
    assert code == 2
    assert "client_processes" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r" / "samples.jsonl").exists()


def test_several_processes_with_concurrency_auto_is_refused_with_exit_2(
    tmp_path: Path, test_server: TestServer
) -> None:
    code, err = invoke(run_args(test_server.url, tmp_path / "r", "--client-processes", "2"))
    assert code == 2
    assert "--client-processes 2" in err and "--concurrency N" in err and len(err.strip().splitlines()) == 1


def test_more_processes_than_cores_run_with_a_note(
    tmp_path: Path, test_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("evalkit.runner.sender_processes.usable_cores", lambda: 1)
    out = tmp_path / "r"
    code, err = invoke(run_args(test_server.url, out, "--concurrency", "4", "--client-processes", "3", limit=12))
    assert code == 0, err
    assert "--client-processes 3 is more than the 1 cores" in err
    assert len(records(out)) == 12


def test_the_default_is_one_process_for_an_ordinary_eval_and_more_for_a_high_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("evalkit.runner.sender_processes.usable_cores", lambda: 16)
    fixed = InFlight(concurrency=256, max_concurrency=512)
    assert sender_count(None, InFlight("auto", 512), None, False, "t") == 1  # evalkit run's default
    assert sender_count(None, fixed, None, False, "t") == 1
    assert sender_count(None, InFlight(2048, 2048), None, False, "t") == 4
    uncapped = InFlight(60000, 512, capped=False)
    assert sender_count(None, uncapped, Arrivals(rate=100.0), False, "t") == 1
    assert sender_count(None, uncapped, Arrivals(rate=1000.0), False, "t") == 7
    assert sender_count(None, uncapped, Arrivals(rate=1e6), False, "t") == 16  # at most the cores
    assert sender_count(8, InFlight(4, 512), None, False, "t") == 4  # never more than the requests in flight
    assert sender_count(4, fixed, None, True, "t") == 1  # conversations run their tools here
