"""One eval as N shards (``evalkit run --shard I/N``, run as separate processes with ``JOB_COMPLETION_INDEX``
set, as an Indexed Job's pods are) merged by ``evalkit merge``, against the deterministic test server: the same
documents, answers, scores and intervals as the whole run, speed within the tolerance docs/scale-out.md states,
the gate and the report reading the merged dir; a shard killed midway resumes; a set of shards that is not
one run is refused with one line.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_shard_merge.py."""

from __future__ import annotations

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

from evalkit.testing.server import Behaviour, TestServer
from tests.unit.test_shard_merge import invoke

# docs/scale-out.md: the merged run's speed within 30% (latencies: or 10 ms) of the whole run's, on one machine
# shared with other work (their first wave, with new connections, is a larger part of a shard than of the whole)
SPEED_TOLERANCE, LATENCY_FLOOR_MS = 0.3, 10.0


def run_args(url: str, out: Path, *extra: object, limit: int = 120, concurrency: int = 6) -> list[str]:
    return ["run", "gsm8k", "--endpoint", url, "--limit", str(limit), "--max-tokens", "24", "--concurrency",
            str(concurrency), "-o", str(out), "-q", *map(str, extra)]  # fmt: skip


def shard_process(url: str, out: Path, index: int, count: int, *extra: object, **kw: Any) -> subprocess.Popen[bytes]:
    """``python -m evalkit.cli run ... --shard auto/N`` with JOB_COMPLETION_INDEX set, as a pod of the Job runs."""
    env = {**os.environ, "JOB_COMPLETION_INDEX": str(index)}
    args = [sys.executable, "-m", "evalkit.cli", *run_args(url, out, "--shard", f"auto/{count}", *extra, **kw)]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes]) -> None:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()


def samples(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / "samples.jsonl").read_bytes().splitlines()]


def task_summary(run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())["tasks"]["gsm8k"]
    return out


def manifest(run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return out


def close_to(a: float | None, b: float | None, what: str, floor: float = LATENCY_FLOOR_MS) -> None:
    assert a is not None and b is not None, what
    assert abs(a - b) <= max(SPEED_TOLERANCE * abs(a), floor), f"{what}: whole {a}, merged {b}"


# ------------------------------------------------------------------------------------------ merged == whole


@pytest.mark.slow
def test_three_shard_processes_merged_equal_the_whole_run(tmp_path: Path) -> None:
    with TestServer(Behaviour(ttft_s=0.02, itl_s=0.004, correct_ratio=0.6)) as srv:
        whole = tmp_path / "whole"
        code, out = invoke(*run_args(srv.url, whole))
        assert code == 0, out
        # the pods of the Indexed Job, as processes given JOB_COMPLETION_INDEX; one after another at the whole
        # run's --concurrency, so that each request meets the load it met in the whole run (three clients at once
        # on this test's one machine would measure its CPUs, not the server)
        for i in range(3):
            finish(shard_process(srv.url, tmp_path / f"s{i}", i, 3))
    dirs = [tmp_path / f"s{i}" for i in range(3)]
    assert [manifest(d)["shard"] for d in dirs] == [{"index": i, "count": 3} for i in range(3)]
    assert [sorted({r["doc_id"] for r in samples(d)}) for d in dirs] == [list(range(i, 120, 3)) for i in range(3)]

    merged = tmp_path / "merged"
    code, out = invoke("merge", dirs[2], dirs[0], dirs[1], "-o", merged)  # in any order
    assert code == 0, out

    # the same documents, answers and per-document verdicts, in the unsharded order
    def answers(run_dir: Path) -> list[tuple[Any, ...]]:
        return [(r["doc_id"], r["sample_index"], r["key"], r["response"], r["extracted"], r["correct"], r["status"])
                for r in samples(run_dir)]  # fmt: skip

    assert answers(merged) == sorted(answers(whole))
    a, b = task_summary(whole), task_summary(merged)
    assert b["metrics"] == a["metrics"]  # value, stderr, interval and n, recomputed by the task's summarize
    assert b["counts"] == a["counts"] and b["detail"] == a["detail"]
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert b["speed"][key]["n"] == a["speed"][key]["n"] == 120
        close_to(a["speed"][key]["p50"], b["speed"][key]["p50"], f"{key} p50")
    assert b["speed"]["itl_ms"]["n"] == a["speed"]["itl_ms"]["n"]
    close_to(a["speed"]["output_tokens_per_s"], b["speed"]["output_tokens_per_s"], "output tokens/s", floor=0)
    # on the merged clock: each shard's samples after the one before it (their wall-clock starts), the shards'
    # windows apart, their limits one level of 6 (the whole run's); throughput over the windows, not the gaps
    starts = [[r["start_s"] for r in samples(merged) if r["doc_id"] % 3 == i] for i in range(3)]
    assert max(starts[0]) < min(starts[1]) and max(starts[1]) < min(starts[2])
    assert [level for _, level in b["concurrency_trace"]] == [6] and b["speed"]["concurrency"] == 6
    offsets = [s["clock_offset_s"]["gsm8k"] for s in manifest(merged)["shards"]]
    assert offsets[0] == 0 and offsets[0] < offsets[1] < offsets[2]
    # the seconds between one shard's last answer and the next one's first send (process start-up, warm-up) are
    # left out of the merged clock: its span is the three windows, end to end
    walls = sum(task_summary(d)["speed"]["wall_s"] for d in dirs)
    assert b["speed"]["wall_s"] == pytest.approx(walls, rel=0.01)
    assert max(r["start_s"] for r in samples(merged)) < walls
    m = manifest(merged)
    assert "shard" not in m and [s["index"] for s in m["shards"]] == [0, 1, 2]
    assert (
        m["tasks"]["gsm8k"]["requests"] == 120
        and m["tasks"]["gsm8k"]["settings"] == manifest(whole)["tasks"]["gsm8k"]["settings"]
    )
    assert m["concurrency"] == 6 and m["finished_at"]  # the most the shards had in flight together

    # the gate and the report read it as any run dir: full coverage, accuracy unchanged
    code, out = invoke("gate", whole, merged)
    assert code == 0, out
    gate = json.loads((merged / "gate" / "gate.json").read_text())
    assert gate["verdict"] == "pass"
    accuracy = [r for r in gate["rules"] if r["kind"] == "accuracy"]
    assert len(accuracy) == 2 and all("of 120 pairs" in r["method"] for r in accuracy)  # every document paired
    assert all(r["verdict"] == "pass" for r in gate["rules"]) and not gate["reasons"]
    code, out = invoke("report", merged)
    assert code == 0, out
    assert "gsm8k" in (merged / "report.html").read_text()


# ------------------------------------------------------------------------------------------ a killed shard


@pytest.mark.slow
def test_a_shard_killed_midway_resumes_and_only_then_merges(tmp_path: Path) -> None:
    with TestServer(Behaviour(itl_s=0.1)) as srv:  # a request takes 2.4 s: 12 of them at 2 take 14 s
        out = tmp_path / "s1"
        proc = shard_process(srv.url, out, 1, 2, "--no-warmup", limit=24, concurrency=2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(samples(out) if (out / "samples.jsonl").exists() else []) < 2:
            time.sleep(0.05)
        code, text = invoke("merge", out, "-o", tmp_path / "m0")  # while it runs: still being written
        assert code == 2 and "still being written" in text, text
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        done = {r["key"] for r in samples(out)}
        assert 2 <= len(done) < 12
        code, text = invoke("merge", tmp_path / "s1", "-o", tmp_path / "m1")  # killed: not finished
        assert code == 2 and "has not finished" in text and "resume it" in text, text

        sent_before = sum(1 for r in srv.requests if r.path.endswith("/completions"))
        finish(shard_process(srv.url, out, 1, 2, "--no-warmup", limit=24, concurrency=2))  # the same command
        sent = sum(1 for r in srv.requests if r.path.endswith("/completions")) - sent_before
        recs = samples(out)
        assert sorted({r["doc_id"] for r in recs}) == list(range(1, 24, 2))  # shard 1 of 2: every other document
        assert sent == 12 - len(done)  # only what it had not answered
        assert manifest(out)["resumed_at"]

        code, text = invoke(*run_args(srv.url, tmp_path / "s0", "--no-warmup", "--shard", "0/2", limit=24))
        assert code == 0, text
    code, text = invoke("merge", tmp_path / "s0", out, "-o", tmp_path / "m2", "--no-report")
    assert code == 0, text
    assert sorted(r["doc_id"] for r in samples(tmp_path / "m2")) == list(range(24))


# ------------------------------------------------------------------------------------------ refusals


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards 0/2 and 1/2 of one run, 0/2 at other settings, and 0/3: finished run dirs."""
    root = tmp_path_factory.mktemp("shards")
    with TestServer(Behaviour(fast=True)) as srv:
        for name, extra in {
            "a0": ("--shard", "0/2"),
            "a1": ("--shard", "1/2"),
            "t0": ("--shard", "0/2", "--temperature", "0.5"),
            "n0": ("--shard", "0/3"),
        }.items():
            code, out = invoke(*run_args(srv.url, root / name, "--no-report", "--no-warmup", *extra, limit=6))
            assert code == 0, out
    return root


@pytest.mark.parametrize(
    ("dirs", "words"),
    [
        (["a0", "t0"], "setting temperature"),
        (["a0"], "shard 1/2 missing"),
        (["a0", "a0", "a1"], "shard 0/2 is given twice"),
        (["a0", "n0"], "share N"),
        (["a0", "nowhere"], "is not a run dir"),
    ],
)
def test_shards_that_are_not_one_run_are_refused(shard_set: Path, tmp_path: Path, dirs: list[str], words: str) -> None:
    out = tmp_path / "merged"
    code, text = invoke("merge", *(shard_set / d for d in dirs), "-o", out)
    assert code == 2
    (line,) = text.strip().splitlines()
    assert line.startswith("evalkit: error:") and words in line, line
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_an_unsharded_run_or_a_used_output_dir_is_refused(shard_set: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    whole.mkdir()
    m = manifest(shard_set / "a0")
    del m["shard"]
    (whole / "manifest.json").write_text(json.dumps(m))
    code, text = invoke("merge", whole, shard_set / "a1", "-o", tmp_path / "m")
    assert code == 2 and "is not a shard" in text
    code, text = invoke("merge", shard_set / "a0", shard_set / "a1", "-o", shard_set / "a0")
    assert code == 2 and "one of the shards" in text
