"""A load split over shards (``--shard I/N`` with an arrival process): every shard computes the unsharded run's
seeded schedule and sends its part of it (``arrivals.schedule_part``: positions ≡ I mod N), each request at its
``arrival_s`` in that schedule, from a shared ``--start-at``; ``evalkit merge`` then shows the one schedule at the
full rate. The parts against the whole, exactly; shards run as processes with ``JOB_COMPLETION_INDEX`` against the
deterministic test server, merged, against the unsharded run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalkit.client.arrivals import Arrivals, arrival_offsets, schedule_part, timed
from evalkit.contracts import GenParams, Request
from evalkit.runner.plan import TaskRun
from evalkit.runner.prompt_stream import RequestStream
from evalkit.tasks.spec import TaskSettings
from evalkit.testing.server import Behaviour, TestServer
from tests.cli_errors import invoke

RATE = 25.0
LOAD = ("run", "random", "--random-input-len", "20", "--random-output-len", "4", "--num-prompts", "54",
        "--probe", "gsm8k:0.1", "--request-rate", str(RATE), "--seed", "5", "--no-warmup", "-q")  # fmt: skip


def _requests(n: int, trace_every: int = 0) -> list[Request]:
    """``n`` requests; every ``trace_every``-th carries its own ``arrival_s`` (a trace's, a probe's)."""
    return [
        Request(task="t", doc_id=i, sample_index=0, prompt=f"p{i}", gen=GenParams(max_tokens=4),
                arrival_s=100.0 + i if trace_every and i % trace_every == 0 else None)
        for i in range(n)
    ]  # fmt: skip


SCHEDULES = [Arrivals(rate=40.0, seed=3), Arrivals(rate=9.0, burstiness=0.4, seed=1),
             Arrivals(process="constant", rate=5.0), Arrivals(ramp=(2.0, 30.0), seed=2)]  # fmt: skip


@pytest.mark.parametrize("count", [1, 2, 3, 7])
@pytest.mark.parametrize("arrivals", SCHEDULES)
def test_parts_together_are_the_unsharded_schedule_exactly(count: int, arrivals: Arrivals) -> None:
    whole = timed(_requests(50, trace_every=9), arrival_offsets(50, arrivals))
    assert all(r.arrival_s is not None for r in whole)
    assert [r.arrival_s for r in whole if r.doc_id % 9 == 0] == [100.0 + i for i in range(0, 50, 9)]  # kept
    parts = [schedule_part(whole, i, count) for i in range(count)]
    union = sorted((r for part in parts for r in part), key=lambda r: r.doc_id)
    assert union == whole  # each request once, with its arrival_s from the unsharded schedule
    assert sum(len(part) for part in parts) == len(whole)
    for i, part in enumerate(parts):
        assert [r.doc_id for r in part] == list(range(i, 50, count))  # the documents' split (Shard.takes)
    with pytest.raises(ValueError, match=r"0\.\.2"):
        schedule_part(whole, 3, 3)


def test_a_streamed_task_yields_its_part_with_the_whole_schedules_times() -> None:
    arrivals = Arrivals(rate=10.0, seed=4)
    whole = timed(_requests(23), arrival_offsets(23, arrivals))
    stream = RequestStream()
    reqs = _requests(23)
    for start in range(0, 23, 5):  # batches that do not line up with the parts
        stream.feed(reqs[start : start + 5])
    stream.end()
    offsets = [r.arrival_s for r in whole]
    plan = TaskRun(task=None, settings=TaskSettings(), total=8, source=stream, part=(2, 3, offsets))  # type: ignore[arg-type]

    async def collect() -> list[Request]:
        return [r async for batch in plan.batches() for r in batch]

    got = asyncio.run(collect())
    assert got == schedule_part(whole, 2, 3)


# ------------------------------------------------------------------------------ shards as processes, merged


def _samples(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / "samples.jsonl").read_bytes().splitlines()]


def _load(run_dir: Path, task: str = "random") -> dict[str, Any]:
    out: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())["tasks"][task]["load"]
    return out


def _schedule(run_dir: Path) -> dict[tuple[str, int], float]:
    """Each request's due time from its run's schedule zero (the phase's start)."""
    origin = _load(run_dir)["origin_s"]
    return {(r["task"], r["doc_id"]): r["scheduled_s"] - origin for r in _samples(run_dir)}


def test_shards_send_their_parts_of_one_schedule_and_merge_to_it(tmp_path: Path) -> None:
    with TestServer(Behaviour(fast=True, max_model_len=4096, correct_ratio=0.5)) as srv:
        res = invoke([*LOAD, "--endpoint", srv.url, "-o", str(tmp_path / "whole")])
        assert res.code == 0, res.stderr
        start_at = time.time() + 15  # a shard that reaches it late sends what is due at once (its send lag)
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "evalkit.cli",
                    *LOAD,
                    "--endpoint",
                    srv.url,
                    "--shard",
                    "auto/3",
                    "--start-at",
                    f"{start_at:.3f}",
                    "-o",
                    str(tmp_path / f"s{i}"),
                ],
                env={**os.environ, "JOB_COMPLETION_INDEX": str(i)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(3)
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()
    whole = _schedule(tmp_path / "whole")
    assert len(whole) == 60 and sum(1 for t, _ in whole if t == "gsm8k") == 6  # 54 x 0.1 / 0.9 probes
    # each shard: its positions of the one schedule, each request due exactly when the unsharded run had it due
    for i in range(3):
        part = _schedule(tmp_path / f"s{i}")
        assert len(part) == 20
        for key, due in part.items():
            assert due == pytest.approx(whole[key], abs=1e-5), key
        manifest = json.loads((tmp_path / f"s{i}" / "manifest.json").read_text())
        assert manifest["request_rate"] == RATE and manifest["arrivals"]["start_at_unix"] == pytest.approx(start_at)
    # merged: the union is the unsharded schedule, sent at it (within the send lag), at the offered rate R
    res = invoke(["merge", *(str(tmp_path / f"s{i}") for i in range(3)), "-o", str(tmp_path / "m")])
    assert res.code == 0, res.stderr
    merged, load = _schedule(tmp_path / "m"), _load(tmp_path / "m")
    assert set(merged) == set(whole)
    for key, due in merged.items():  # the shards' schedules on one clock: --start-at's, to the clocks' precision
        assert due == pytest.approx(whole[key], abs=0.01), key
    lag_s = max(_load(tmp_path / "m", task)["send_lag_max_ms"] for task in ("random", "gsm8k")) / 1000
    for r in _samples(tmp_path / "m"):  # each sent at its time in the one schedule, within the send lag
        assert -0.002 <= r["start_s"] - load["origin_s"] - whole[(r["task"], r["doc_id"])] <= lag_s + 0.012
    assert load["sent"] == 60
    assert load["offered_rps"] == pytest.approx(_load(tmp_path / "whole")["offered_rps"], rel=0.02)
    assert load["offered_rps"] == pytest.approx(RATE, rel=0.15) and load["request_rate"] == RATE
    assert json.loads((tmp_path / "m" / "manifest.json").read_text())["request_rate"] == RATE


def test_without_start_at_each_shard_counts_from_its_own_start_and_the_merge_records_it(tmp_path: Path) -> None:
    with TestServer(Behaviour(fast=True, max_model_len=4096, correct_ratio=0.5)) as srv:
        res = invoke([*LOAD, "--endpoint", srv.url, "-o", str(tmp_path / "whole")])
        assert res.code == 0, res.stderr
        for i in range(2):  # one after the other: shard 1 starts seconds after shard 0
            res = invoke([*LOAD, "--endpoint", srv.url, "--shard", "auto/2", "-o", str(tmp_path / f"s{i}")],
                         env={"JOB_COMPLETION_INDEX": str(i)})  # fmt: skip
            assert res.code == 0, res.stderr
    res = invoke(["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "-o", str(tmp_path / "m")])
    assert res.code == 0, res.stderr
    whole, merged = _schedule(tmp_path / "whole"), _schedule(tmp_path / "m")
    offsets = [
        s["clock_offset_s"]["random"] for s in json.loads((tmp_path / "m" / "manifest.json").read_text())["shards"]
    ]
    assert offsets[0] == 0 and offsets[1] > 1.0  # shard 1's start, recorded
    for i in range(2):  # each shard's part of the schedule, moved by its own start
        for key in _schedule(tmp_path / f"s{i}"):
            assert merged[key] - whole[key] == pytest.approx(offsets[i], abs=0.02), key
