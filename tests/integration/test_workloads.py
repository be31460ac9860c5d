"""Workloads (random, sharegpt, trace, sessions: evalkit/tasks/workload_task.py) and probes (``--probe TASK:SHARE``,
evalkit/runner/probes.py) against the deterministic test server: exact lengths, the body's forcing fields, the
trace's timings and shared blocks, ShareGPT's filter, the probes' scores, the gate on speed only, bad input."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

from evalkit.client.clamp import clamp_max_tokens
from evalkit.contracts import GenParams, Request
from evalkit.store import open_run
from evalkit.testing.server import Behaviour, TestServer
from tests.cli_errors import assert_one_error_line, invoke


def _run(srv: TestServer, out: Path, *args: str) -> None:
    res = invoke(["run", *args, "--endpoint", srv.url, "-o", str(out), "-q", "--no-warmup"])
    assert res.code == 0, (res.stderr, res.stdout)


def _samples(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


RANDOM_ARGS = ("random", "--random-input-len", "60", "--random-output-len", "20", "--random-range-ratio", "0.5")
RANDOM_ARGS += ("--random-prefix-len", "8", "--num-prompts", "30")


def _lengths(run_dir: Path) -> dict[int, tuple[int, int]]:
    return {r["doc_id"]: (r["prompt_tokens"], r["output_tokens"]) for r in _samples(run_dir)}


def test_random_lengths_are_exact_and_forced(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        _run(srv, tmp_path / "r", *RANDOM_ARGS, "--seed", "3")
        bodies = [r.body for r in srv.requests]
    recs = _samples(tmp_path / "r")
    assert len(recs) == 30
    for rec in recs:
        assert 8 + 30 <= rec["prompt_tokens"] <= 8 + 90  # prefix + [60 x 0.5, 60 x 1.5]
        assert 10 <= rec["output_tokens"] <= 30
        assert rec["error"] is None  # usage matched the asked lengths: no note
    assert len({r["prompt_tokens"] for r in recs}) > 5 and len({r["output_tokens"] for r in recs}) > 5
    for body in bodies:
        assert body["ignore_eos"] is True and body["min_tokens"] == body["max_tokens"]
        assert isinstance(body["prompt"], list) and all(isinstance(t, int) for t in body["prompt"])
    prefixes = {tuple(b["prompt"][:8]) for b in bodies}
    assert len(prefixes) == 1  # the shared prefix
    recorded = open_run(tmp_path / "r").manifest["tasks"]["random"]["settings"]["workload"]
    assert "turns" not in recorded and "think_time" not in recorded  # the sessions' own settings
    by_len = _lengths(tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())["tasks"]["random"]
    assert summary["metrics"] == {} and summary["speed"]["output_tokens_per_s"] > 0
    # seeded: the same seed gives the same lengths, another seed others
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        _run(srv, tmp_path / "again", *RANDOM_ARGS, "--seed", "3")
        _run(srv, tmp_path / "other", *RANDOM_ARGS, "--seed", "4")
    assert _lengths(tmp_path / "again") == by_len
    assert _lengths(tmp_path / "other") != by_len


def _trace(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_trace_arrivals_and_shared_blocks(tmp_path: Path) -> None:
    from evalkit.tasks.registry import Registry
    from evalkit.tasks.spec import TaskSettings

    trace = _trace(tmp_path / "t.jsonl", [
        {"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]},
        {"timestamp": 1500, "input_length": 700, "output_length": 6, "hash_ids": [7, 9]},
        {"timestamp": 4000, "input_length": 300, "output_length": 7, "hash_ids": [7]},
    ])  # fmt: skip
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        task = Registry().get("trace")
        task.use_endpoint(srv.url, None)
        opts = {"dataset_path": str(trace), "trace_speed": 2.0}
        reqs = task.build_requests(TaskSettings(workload=opts, temperature=0.0))
    assert [r.arrival_s for r in reqs] == [0.0, 0.25, 1.5]  # (ms - first) / 1000 / 2.0
    ids = [r.prompt_ids for r in reqs]
    assert ids[0] is not None and ids[1] is not None and ids[2] is not None
    assert [len(x) for x in ids] == [600, 700, 300]
    assert ids[0][:512] == ids[1][:512] == ids[2][:300] + ids[0][300:512]  # hash id 7: one block for all
    assert ids[0][512:600] != ids[1][512:600]  # 8 and 9: different blocks
    assert [r.gen.max_tokens for r in reqs] == [5, 6, 7] and all(r.gen.min_tokens == r.gen.max_tokens for r in reqs)
    assert task.data_sha256["dataset"]


def test_sharegpt_keeps_vllms_filter(tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(30))
    data = [
        {"conversations": [{"from": "human", "value": words}, {"from": "gpt", "value": words + " x y"}]},
        {"conversations": [{"from": "human", "value": "too short"}, {"from": "gpt", "value": words}]},
        {"conversations": [{"from": "human", "value": words}, {"from": "gpt", "value": "ok"}]},  # reply < 4
        {"conversations": [{"from": "human", "value": words}]},  # one turn: left out
        {"conversations": [{"from": "human", "value": words + " z"}, {"from": "gpt", "value": words}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        _run(srv, tmp_path / "s", "sharegpt", "--dataset-path", str(path), "--ignore-eos")
        bodies = [r.body for r in srv.requests]
    recs = _samples(tmp_path / "s")
    assert sorted(r["output_tokens"] for r in recs) == [30, 32]  # the two kept; outputs forced to the replies' lengths
    assert sorted(b["max_tokens"] for b in bodies) == [30, 32] and all(b["ignore_eos"] for b in bodies)


def test_probe_scores_as_its_own_run(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_model_len=4096, correct_ratio=0.5)) as srv:
        _run(srv, tmp_path / "p", "random", "--random-input-len", "20", "--random-output-len", "4",
             "--num-prompts", "30", "--probe", "gsm8k:0.25", "--seed", "1")  # fmt: skip
        _run(srv, tmp_path / "g", "gsm8k", "--limit", "10", "--seed", "1")  # the same settings
    probed = [r for r in _samples(tmp_path / "p") if r["task"] == "gsm8k"]
    plain = _samples(tmp_path / "g")
    assert len(probed) == 10  # 30 x 0.25 / 0.75
    order = [r["task"] for r in sorted(_samples(tmp_path / "p"), key=lambda r: r["start_s"])]
    assert order[:3] != ["gsm8k"] * 3 and order[-3:] != ["gsm8k"] * 3  # spread through the workload
    assert {(r["doc_id"], r["key"], json.dumps(r["correct"])) for r in probed} == {
        (r["doc_id"], r["key"], json.dumps(r["correct"])) for r in plain
    }
    run = open_run(tmp_path / "p")
    assert set(run.manifest["tasks"]) == {"random", "gsm8k"}
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())["tasks"]
    plain_summary = json.loads((tmp_path / "g" / "summary.json").read_text())["tasks"]["gsm8k"]
    assert summary["gsm8k"]["metrics"] == plain_summary["metrics"]
    assert summary["random"]["counts"]["total"] == 30


def test_gate_judges_a_workload_by_speed(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        for side in ("a", "b"):
            _run(srv, tmp_path / side, "random", "--random-input-len", "20", "--random-output-len", "4",
                 "--num-prompts", "40")  # fmt: skip
    res = invoke(["gate", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "neither run has a scored accuracy metric" not in res.stderr + res.stdout
    assert res.code in (0, 1), res.stderr  # decided on the speed rules
    report = invoke(["report", str(tmp_path / "a")])
    assert report.code == 0, report.stderr


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["random", "--random-input-len", "200", "--random-output-len", "100"], ["max_model_len 256", "300 tokens"]),
        (["random", "--probe", "gsm8k:1.5"], ["gsm8k:1.5", "between 0 and 1"]),
        (["random", "--probe", "gsm8k:0"], ["between 0 and 1"]),
        (["random", "--probe", "nosuchtask:0.1"], ["unknown task 'nosuchtask'"]),
        (["gsm8k", "--probe", "gsm8k:0.1"], ["--probe"]),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    with TestServer(Behaviour(max_model_len=256)) as srv:
        res = invoke(["run", *args, "--endpoint", srv.url, "-o", str(tmp_path / "x"), "-q"])
        assert not srv.requests  # nothing sent
    assert_one_error_line(res, *needles)


def test_malformed_trace_and_dataset_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": []}\n{"timestamp": 1,\n')
    sg = tmp_path / "bad.json"
    sg.write_text('[\n {"conversations": []},\n oops\n]')
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        res = invoke(["run", "trace", "--dataset-path", str(bad), "--endpoint", srv.url, "-o", str(tmp_path / "t")])
        assert_one_error_line(res, f"{bad}:2")
        res = invoke(["run", "sharegpt", "--dataset-path", str(sg), "--endpoint", srv.url, "-o", str(tmp_path / "s")])
        assert_one_error_line(res, f"{sg}:3")
        long = _trace(
            tmp_path / "long.jsonl", [{"timestamp": 0, "input_length": 4000, "output_length": 200, "hash_ids": [1]}]
        )
        res = invoke(["run", "trace", "--dataset-path", str(long), "--endpoint", srv.url, "-o", str(tmp_path / "l")])
        assert_one_error_line(res, f"{long}:1", "4200 tokens", "max_model_len 4096")
        assert not srv.requests


SESSION_ARGS: tuple[str, ...] = ("sessions", "--num-prompts", "3", "--turns", "3", "--random-input-len", "12")
SESSION_ARGS += ("--random-output-len", "5", "--think-time", "0.3")


def test_sessions_send_each_turn_with_the_whole_history(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        _run(srv, tmp_path / "s", *SESSION_ARGS, "--seed", "2")
        sent = list(srv.requests)
    assert len(sent) == 9 and all(r.path == "/v1/chat/completions" for r in sent)  # 3 sessions x 3 turns
    for r in sent:
        assert r.body["ignore_eos"] is True and r.body["min_tokens"] == r.body["max_tokens"] == 5
    recs = {r["doc_id"]: r for r in _samples(tmp_path / "s")}
    assert len(recs) == 3
    for rec in recs.values():
        turns = rec["turns"]
        assert len(turns) == 3
        users = [t["user"][0]["content"] for t in turns]
        answers = [t["requests"][0]["text"] for t in turns]
        assert all(len(u.split()) == 12 for u in users) and len(set(users)) == 3
        mine = sorted((r for r in sent if r.body["messages"][0]["content"] == users[0]), key=lambda r: r.time)
        assert len(mine) == 3
        for k, req in enumerate(mine):  # turn k+1: the k earlier user turns and the server's answers, then its own
            want: list[dict[str, str]] = []
            for u, a in zip(users[:k], answers[:k], strict=True):
                want += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
            assert req.body["messages"] == [*want, {"role": "user", "content": users[k]}]
        for before, after in itertools.pairwise(mine):  # the think time between an answer and the next user turn
            assert before.end_time is not None and after.time - before.end_time >= 0.3
        assert [t["requests"][0]["output_tokens"] for t in turns] == [5, 5, 5]
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())["tasks"]["sessions"]
    per_turn = summary["detail"]["turns"]
    assert [(t["turn"], t["requests"]) for t in per_turn] == [(1, 3), (2, 3), (3, 3)]
    grows = [t["prompt_tokens_mean"] for t in per_turn]
    assert grows[0] < grows[1] < grows[2]  # the history grows
    assert summary["detail"]["turn_requests"]["requests"] == 9  # every turn's request
    assert summary["counts"]["total"] == 3  # a session is one sample
    assert summary["speed"]["output_tokens_per_s"] > 0
    recorded = open_run(tmp_path / "s").manifest["tasks"]["sessions"]["settings"]["workload"]
    assert recorded["turns"] == 3 and recorded["think_time"] == 0.3
    # seeded: the same seed sends the same user turns, another seed others
    with TestServer(Behaviour(max_model_len=4096)) as srv:
        _run(srv, tmp_path / "again", *SESSION_ARGS, "--seed", "2")
        _run(srv, tmp_path / "other", *SESSION_ARGS, "--seed", "3")

    def users_of(run: str) -> set[tuple[str, ...]]:
        return {tuple(t["user"][0]["content"] for t in r["turns"]) for r in _samples(tmp_path / run)}

    assert users_of("again") == users_of("s") and users_of("other").isdisjoint(users_of("s"))


def test_a_forced_turn_clamped_to_the_context_keeps_min_tokens_within_max_tokens() -> None:
    words = " ".join(["word"] * 40)
    gen = GenParams(max_tokens=30, min_tokens=30, ignore_eos=True)
    req = Request("sessions", 0, 0, words, gen, messages=({"role": "user", "content": words},))
    with TestServer(Behaviour(max_model_len=60)) as srv:
        (out,), clamp = asyncio.run(clamp_max_tokens([req], srv.url, "test-model", "chat", 60))
    assert clamp is not None and out.gen.max_tokens < 30
    assert out.gen.min_tokens == out.gen.max_tokens  # vLLM refuses min_tokens above max_tokens


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["sessions", "--turns", "0"], ["workload.turns", "greater than or equal to 1"]),
        (["sessions", "--think-time", "-1"], ["workload.think_time", "greater than or equal to 0"]),
        (
            ["sessions", "--turns", "4", "--random-input-len", "40", "--random-output-len", "30"],
            ["max_model_len 256", "280 tokens", "--turns 4"],
        ),
        (["sessions", "--endpoint-kind", "completions"], ["chat endpoint"]),
    ],
)
def test_sessions_bad_input_is_one_line(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    with TestServer(Behaviour(max_model_len=256)) as srv:
        res = invoke(["run", *args, "--endpoint", srv.url, "-o", str(tmp_path / "x"), "-q"])
        assert not srv.requests  # nothing sent
    assert_one_error_line(res, *needles)
