"""The run dir under stress: one process owns it at a time (an OS lock that a killed run does not leave behind),
a full disk stops the run with one line and loses nothing already stored, and a corrupt store is a one-line
error or a counted quarantine on resume, never a traceback (``--fresh`` always starts over)."""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.testing.server import Behaviour, TestServer

REPO = Path(__file__).resolve().parents[2]


def invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def run_args(url: str, out: Path, *extra: str, limit: int = 6, concurrency: int = 2) -> list[str]:
    return [
        *("run", "gsm8k", "--endpoint", url, "--limit", str(limit), "--max-tokens", "32"),
        *("--concurrency", str(concurrency), "-o", str(out), "-q", *extra),
    ]


def lines(out: Path) -> list[bytes]:
    return (out / "samples.jsonl").read_bytes().splitlines()


def records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in lines(out)]


def one_line(err: str) -> str:
    assert err.strip() and err.strip().splitlines() == [err.strip()], err
    assert err.startswith("evalkit: error: "), err
    return err


# ------------------------------------------------------------------------------------------------- disk full
class FullDisk:
    """``os.write`` as on a filesystem with ``free`` bytes left, for files under ``root`` (whose name matches
    ``match``): the write that crosses the limit is cut short, the next fails with ENOSPC. ``free = None``:
    space was freed."""

    def __init__(self, root: Path, free: int | None, match: str = "*") -> None:
        self.root, self.free, self.match = str(root.resolve()) + os.sep, free, match
        self.real = os.write
        self.failed = 0
        self.first_failure: float | None = None  # time.time() of the first ENOSPC

    def __call__(self, fd: int, data: Any) -> int:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if self.free is None or not path.startswith(self.root) or not fnmatch.fnmatch(Path(path).name, self.match):
            return self.real(fd, data)
        if self.free <= 0:
            self.failed += 1
            self.first_failure = self.first_failure or time.time()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self.real(fd, bytes(memoryview(data)[: self.free]))
        self.free -= n
        return n


def test_disk_full_stops_sending_keeps_what_is_stored_and_the_same_command_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers take ~0.25 s at concurrency 2, so the first write (after the scorer has loaded, seconds in) fails
    while most requests are still to be sent."""
    out = tmp_path / "run"
    with TestServer(Behaviour(correct_ratio=0.6, ttft_s=0.05, itl_s=0.006)) as srv:
        args = run_args(srv.url, out, "--no-report", limit=100)
        disk = FullDisk(out, free=30_000)  # the manifest and a few records
        monkeypatch.setattr(os, "write", disk)
        code, err = invoke(args)
        assert code != 0
        one_line(err)
        assert f"could not write {out / 'samples.jsonl'}: no space left on device (disk full)" in err
        assert "re-run the same command" in err
        assert disk.first_failure is not None
        stored = records(out)  # every line parses: no torn last line
        assert (out / "samples.jsonl").read_bytes().endswith(b"\n")
        assert len(stored) >= 1
        sent = len(srv.requests)
        late = [r for r in srv.requests if r.time > disk.first_failure]
        assert sent < 100 and len(late) <= 2, (sent, len(late))  # sending stopped at the failure (2 slots may race)
        assert json.loads((out / "manifest.json").read_text())["tasks"]["gsm8k"]["requests"] == 100

        disk.free = None  # space is freed
        srv.behaviour = Behaviour(correct_ratio=0.6)  # same answers, no delays
        code, err = invoke(args)
        assert code == 0, err
        again = {r.prompt for r in srv.requests[sent:]}
    assert not again & {r["prompt"] for r in stored}  # nothing stored is sent again
    final = records(out)
    assert len(final) == 100 and len({r["key"] for r in final}) == 100
    assert json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]["counts"]["total"] == 100


def test_a_failed_report_write_keeps_summary_json_and_says_so(
    tmp_path: Path, test_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    monkeypatch.setattr(os, "write", FullDisk(out, free=0, match=".report.html.*"))
    code, err = invoke(run_args(test_server.url, out))
    assert code != 0
    one_line(err)
    assert f"could not write {out / 'report.html'}: no space left on device" in err
    assert "summary.json is intact" in err and f"evalkit report {out}" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"]["gsm8k"]["counts"]["total"] == 6
    assert len(records(out)) == 6
    assert not (out / "report.html").exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".report")] == []  # no temp file left


# --------------------------------------------------------------------------------------------- corrupt store
def test_unreadable_sample_lines_are_quarantined_and_counted_on_resume(tmp_path: Path, test_server: TestServer) -> None:
    out = tmp_path / "run"
    assert invoke(run_args(test_server.url, out, "--no-report"))[0] == 0
    good = lines(out)
    lost = orjson.loads(good[2])
    garbage = [b"\x00garbage {", b'{"key": 5, "note": "JSON, but not a sample record"}']
    (out / "samples.jsonl").write_bytes(b"\n".join([*good[:2], garbage[0], garbage[1], *good[3:]]) + b"\n")
    sent = len(test_server.requests)
    code, err = invoke(run_args(test_server.url, out, "--no-report"))
    assert code == 0, err
    note = [line for line in err.splitlines() if "unreadable" in line]
    assert note == [
        f"evalkit: 2 unreadable line(s) of {out / 'samples.jsonl'} moved to {out / 'samples.corrupt.jsonl'}; "
        "a request whose answer they held is sent again"
    ]
    assert [r.prompt for r in test_server.requests[sent:]] == [lost["prompt"]]  # only the record that was lost
    assert (out / "samples.corrupt.jsonl").read_bytes().splitlines() == garbage
    final = records(out)
    assert len(final) == 6 and len({r["key"] for r in final}) == 6
    code, err = invoke(run_args(test_server.url, out, "--no-report"))  # clean now: no note, nothing sent
    assert code == 0 and "unreadable" not in err
    assert len(test_server.requests) == sent + 1


BROKEN_MANIFESTS = {
    "not JSON": (b'{"tasks": ', "not valid JSON"),
    "an array": (b"[1, 2]", "it is an array, not an object"),
    "tasks a string": (None, '"tasks" is a string, not an object'),
    "endpoint an array": (None, '"endpoint" is an array, not an object'),
    "a task a number": (None, 'task "gsm8k" is a number, not an object'),
}


def _break(manifest: Path, case: str) -> None:
    raw, _ = BROKEN_MANIFESTS[case]
    if raw is None:
        m = json.loads(manifest.read_text())
        if case == "tasks a string":
            m["tasks"] = "gsm8k"
        elif case == "endpoint an array":
            m["endpoint"] = ["completions"]
        else:
            m["tasks"]["gsm8k"] = 3
        raw = json.dumps(m).encode()
    manifest.write_bytes(raw)


@pytest.mark.parametrize("case", list(BROKEN_MANIFESTS))
def test_a_broken_manifest_is_one_line_naming_fresh_and_fresh_starts_over(
    tmp_path: Path, test_server: TestServer, case: str
) -> None:
    out = tmp_path / "run"
    assert invoke(run_args(test_server.url, out, "--no-report"))[0] == 0
    _break(out / "manifest.json", case)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    sent = len(test_server.requests)
    code, err = invoke(run_args(test_server.url, out, "--no-report"))
    assert code == 2
    one_line(err)
    assert f"{out / 'manifest.json'} is unreadable ({BROKEN_MANIFESTS[case][1]}" in err and "--fresh" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and len(test_server.requests) == sent

    code, err = invoke(run_args(test_server.url, out, "--no-report", "--fresh"))
    assert code == 0, err
    assert len(test_server.requests) == sent + 6 and len(records(out)) == 6
    assert isinstance(json.loads((out / "manifest.json").read_text())["tasks"]["gsm8k"], dict)


@pytest.mark.slow
def test_one_process_owns_a_run_dir_and_a_killed_owner_leaves_no_lock(tmp_path: Path) -> None:
    """A run holding the dir (its requests stall at the server) makes a second identical command and a --fresh one
    exit 2 naming its pid, without sending or deleting anything; `evalkit report` still reads the dir; after
    kill -9 the same command runs."""
    out = tmp_path / "run"
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": path}
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        args = run_args(srv.url, out, "--no-report", limit=8)
        srv.faults = [{"stall_s": 60, "after_tokens": 1}] * 2  # = --concurrency: the holder waits on both
        holder = subprocess.Popen([sys.executable, "-m", "evalkit.cli", *args], env=env, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while sum(1 for r in srv.requests if r.first_token_time is not None) < 2 and holder.poll() is None:
                assert time.monotonic() < deadline, "the first run did not start its requests"
                time.sleep(0.05)
            assert holder.poll() is None, holder.communicate()
            manifest = (out / "manifest.json").read_bytes()
            samples = (out / "samples.jsonl").stat().st_ino

            for extra in ([], ["--fresh", "--temperature", "0.5"]):
                code, err = invoke([*args, *extra])
                assert code == 2
                one_line(err)
                assert f"{out} is in use by another evalkit run (pid {holder.pid})" in err
                assert len(srv.requests) == 2  # the refused command sent nothing
                assert (out / "manifest.json").read_bytes() == manifest  # and changed nothing
                assert (out / "samples.jsonl").stat().st_ino == samples

            code, err = invoke(["report", str(out), "-o", str(tmp_path / "report.html")])  # readers do not lock
            assert code == 0, err

            os.kill(holder.pid, signal.SIGKILL)
            holder.communicate(timeout=10)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        code, err = invoke(args)  # the dead holder's lock is gone with it
        assert code == 0, err
    assert len(records(out)) == 8
