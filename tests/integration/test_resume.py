"""Resume: re-running the same command on a run dir continues it (completed keys are never sent again), a
different config is refused, a crash (SIGKILL, torn last line) loses nothing, and --max-error-rate fails the
run (exit 1) after writing everything, with the failed keys retried by the next run."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.testing.server import TestServer
from tests.kill_resume import DONE_BEFORE_KILL, STALLED, kill_mid_run_and_resume


# ------------------------------------------------------------------------------------------------ helpers
def invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def run_args(url: str, out: Path, *extra: str, limit: int = 4) -> list[str]:
    return [
        "run",
        "gsm8k",
        "--endpoint",
        url,
        "--limit",
        str(limit),
        "--max-tokens",
        "32",
        "--concurrency",
        "2",
        "-o",
        str(out),
        "--no-report",
        "-q",
        *extra,
    ]


def lines(out: Path) -> list[bytes]:
    return (out / "samples.jsonl").read_bytes().splitlines()


def records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in lines(out)]


def summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]
    return data


def manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return data


# ---------------------------------------------------------------------------------------------- re-runs
def test_same_command_twice_sends_nothing_the_second_time(tmp_path: Path, test_server: TestServer) -> None:
    out = tmp_path / "run"
    code, err = invoke(run_args(test_server.url, out))
    assert code == 0, err
    sent, before, first = len(test_server.requests), (out / "samples.jsonl").read_bytes(), summary(out)
    created = manifest(out)["created_at"]
    code, err = invoke(run_args(test_server.url, out))
    assert code == 0, err
    assert len(test_server.requests) == sent == 4
    assert (out / "samples.jsonl").read_bytes() == before
    assert summary(out)["metrics"] == first["metrics"] and summary(out)["counts"] == first["counts"]
    m = manifest(out)
    assert m["created_at"] == created and len(m["resumed_at"]) == 1 and m["finished_at"]


def test_different_config_is_refused_and_fresh_starts_over(tmp_path: Path, test_server: TestServer) -> None:
    out = tmp_path / "run"
    assert invoke(run_args(test_server.url, out))[0] == 0
    old_keys = {r["key"] for r in records(out)}
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    sent = len(test_server.requests)
    for change, named in ((["--temperature", "0.7"], "temperature: run dir "), (["--seed", "7"], "seed: run dir ")):
        code, err = invoke(run_args(test_server.url, out, *change))
        assert code == 2
        assert err.strip().splitlines() == [err.strip()]
        assert err.startswith("evalkit: error: ") and "holds a run with a different config" in err
        assert named in err and f", now {change[1]}" in err, err  # the setting that changed, both values
        assert "--fresh" in err and str(out) in err
        assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    assert len(test_server.requests) == sent
    code, err = invoke(run_args(test_server.url, out, "--temperature", "0.7", "--fresh"))
    assert code == 0, err
    new = records(out)
    assert len(new) == 4 and not ({r["key"] for r in new} & old_keys)
    assert len(test_server.requests) == sent + 4
    assert manifest(out)["tasks"]["gsm8k"]["settings"]["temperature"] == 0.7


def test_torn_last_line_is_tolerated_and_only_its_request_resent(tmp_path: Path, test_server: TestServer) -> None:
    out = tmp_path / "run"
    assert invoke(run_args(test_server.url, out))[0] == 0
    full = lines(out)
    torn = full[-1]
    with open(out / "samples.jsonl", "wb") as f:  # a crash in the middle of writing the last record
        f.write(b"\n".join(full[:-1]) + b"\n" + torn[: len(torn) // 2])
    (out / "summary.json").unlink()
    sent = len(test_server.requests)
    code, err = invoke(run_args(test_server.url, out))
    assert code == 0, err
    new = test_server.requests[sent:]
    assert [r.prompt for r in new] == [orjson.loads(torn)["prompt"]]
    recs = records(out)  # every line parses again: the torn tail was cut before appending
    assert len(recs) == 4 and len({r["key"] for r in recs}) == 4
    assert (out / "samples.jsonl").read_bytes().endswith(b"\n")
    assert summary(out)["counts"]["total"] == 4


def test_max_error_rate_exits_1_after_writing_everything_and_rerun_retries_failed_keys(
    tmp_path: Path, test_server: TestServer
) -> None:
    out = tmp_path / "run"
    args = [
        "run",
        "gsm8k",
        "--endpoint",
        test_server.url,
        "--limit",
        "5",
        "--max-tokens",
        "32",
        "--concurrency",
        "1",
        "--max-attempts",
        "2",
        "-o",
        str(out),
        "-q",
    ]  # with the report: "everything" includes it
    test_server.faults = [None, {"status": 500}, {"status": 500}]
    code, err = invoke(args)
    assert code == 1
    assert "gsm8k: 1 of 5 requests failed" in err and "--max-error-rate" in err and "re-run" in err
    s = summary(out)
    assert s["counts"]["api_error"] == 1 and s["counts"]["total"] == 5
    assert all(m["n"] == 4 for m in s["metrics"].values())
    assert manifest(out)["finished_at"] and (out / "report.html").stat().st_size > 0
    failed = [r for r in records(out) if r["status"] == "api_error"]
    assert len(failed) == 1 and failed[0]["doc_id"] == 1 and failed[0]["attempts"] == 2
    before = (out / "samples.jsonl").read_bytes()

    sent = len(test_server.requests)
    code, err = invoke(args)
    assert code == 0, err
    assert [r.prompt for r in test_server.requests[sent:]] == [failed[0]["prompt"]]
    assert (out / "samples.jsonl").read_bytes().startswith(before)  # append-only
    assert len(records(out)) == 6
    s = summary(out)
    assert s["counts"]["api_error"] == 0 and s["counts"]["total"] == 5
    assert all(m["n"] == 5 for m in s["metrics"].values())


def test_error_rate_within_max_error_rate_passes(tmp_path: Path, test_server: TestServer) -> None:
    test_server.faults = [{"status": 400}]
    out = tmp_path / "run"
    code, err = invoke(run_args(test_server.url, out, "--max-error-rate", "0.25", limit=4))
    assert code == 0, err  # 1 of 4 = 0.25, not above
    assert summary(out)["counts"]["api_error"] == 1


# ------------------------------------------------------------------------------------------ crash (SIGKILL)
@pytest.mark.slow
def test_sigkill_mid_run_then_same_command_resumes_without_resending(tmp_path: Path) -> None:
    """kill -9 while requests are in flight, then the same command again: the final store equals an
    uninterrupted run's, and no request the server completed is ever sent again.

    Requests after the first DONE_BEFORE_KILL stall for a minute after two tokens, so at the kill exactly
    DONE_BEFORE_KILL samples are written and every in-flight request is mid-stream (a kill in the few
    milliseconds between the server finishing a response and evalkit writing it could not be told apart from
    a lost result; the stall keeps the test deterministic: tests/kill_resume.py)."""

    def argv(url: str, out: Path) -> list[str]:
        args = ["run", "gsm8k", "--endpoint", url, "--limit", "40", "--max-tokens", "64"]
        return [*args, "--concurrency", str(STALLED), "-o", str(out), "--no-report", "-q"]

    crash = kill_mid_run_and_resume(tmp_path, argv, records)
    assert crash.killed_rc == -signal.SIGKILL
    ref, out, reqs, done_before = crash.reference, crash.out, crash.requests, crash.done_before
    assert len(done_before) == DONE_BEFORE_KILL

    completed = Counter(r.prompt for r in reqs if r.completed)
    assert max(completed.values()) == 1, [p[-60:] for p, n in completed.items() if n > 1]
    assert sum(completed.values()) == 40
    assert all(completed[prompt] == 1 for prompt in done_before)
    assert sum(1 for r in reqs if r.prompt in done_before) == DONE_BEFORE_KILL  # never even re-sent

    got = records(out)
    assert len(got) == 40 and len({r["key"] for r in got}) == 40
    assert {r["key"] for r in got} == {r["key"] for r in records(ref)}
    mine, theirs = summary(out), summary(ref)
    assert mine["metrics"] == theirs["metrics"]
    assert mine["counts"] == theirs["counts"]
    assert 0 < mine["metrics"]["exact_match,strict-match"]["value"] < 1
    assert len(manifest(out)["resumed_at"]) == 1
