"""The numerics run side (issue 28): the ``logprobs`` task kind and the built-in ``numerics`` tasks on the test
server: its requests, the positions stored in ``positions.bin`` against what the server sent, the samples'
figures and the summary, resume, the noise-floor pass, failed and misfit answers, the chat variant, the sweep;
and the test server's prompt logprobs (vLLM's shape, /tokenize, perturbations of known size)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.store.positions_file import POSITIONS, read_positions
from evalkit.testing.server import Behaviour, TestServer

TEXT = "Question: Tom has 3 apples and buys 4 more.\nAnswer: 3 + 4 = 7 apples.\n#### 7"


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def run(url: str, out: Path, *extra: str, task: str = "numerics", limit: int = 6) -> None:
    code, err = invoke("run", task, "--endpoint", url, "--limit", str(limit), "-o", str(out), "-q", *extra)
    assert code == 0, err


def samples(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "samples.jsonl").read_bytes().splitlines()]


def scored(url: str, path: str = "/v1/completions", **body: Any) -> dict[str, Any]:
    payload = {"model": "test-model", "max_tokens": 4, "temperature": 0, "prompt_logprobs": 5, **body}
    answer: dict[str, Any] = httpx.post(url.removesuffix("/v1") + path, json=payload, timeout=30).json()
    return answer


def top_matrix(raw: list[Any], k: int) -> np.ndarray:
    """Each position's logprobs of its top-k entries in rank order (rank > k left out), NaN-padded."""
    out = np.full((len(raw), k), np.nan)
    for i, pos in enumerate(raw[1:], start=1):
        ranked = sorted((e["rank"], e["logprob"]) for e in pos.values() if e["rank"] <= k)
        out[i, : len(ranked)] = [lp for _, lp in ranked]
    return out


# ---------------------------------------------------------------------------------------- the test server
def test_test_server_answers_prompt_logprobs_in_vllm_shape_and_tokenizes_alike() -> None:
    with TestServer() as srv:
        body = scored(srv.url, prompt=TEXT, logprobs=2, return_token_ids=True)
        choice = body["choices"][0]
        ids, pl = choice["prompt_token_ids"], choice["prompt_logprobs"]
        tok = httpx.post(srv.base_url + "/tokenize", json={"prompt": TEXT}).json()
        assert ids == tok["tokens"] and tok["count"] == len(ids) == body["usage"]["prompt_tokens"]
        assert set(tok) >= {"tokens", "count", "max_model_len"}
        assert pl[0] is None and len(pl) == len(ids)
        for i in range(1, len(ids)):
            entries = list(pl[i].items())
            assert str(ids[i]) in pl[i]
            ranks = [e["rank"] for _, e in entries]
            actual = pl[i][str(ids[i])]
            if actual["rank"] <= 5:  # the top 5 in rank order, the actual token among them
                assert ranks == [1, 2, 3, 4, 5]
            else:  # the actual token first, then the top 5
                assert entries[0][0] == str(ids[i]) and ranks[1:] == [1, 2, 3, 4, 5]
            lps = [e["logprob"] for _, e in entries if e["rank"] <= 5]
            assert lps == sorted(lps, reverse=True) and all(lp < 0 for lp in lps)
            assert {"logprob", "rank", "decoded_token"} == set(actual)
        assert len(choice["token_ids"]) == 4 and choice["finish_reason"] == "length"
        assert len(choice["logprobs"]["token_logprobs"]) == 4
        # deterministic: the same text, the same numbers; a text sharing a prefix shares its positions
        assert scored(srv.url, prompt=TEXT, return_token_ids=True)["choices"][0]["prompt_logprobs"] == pl
        longer = scored(srv.url, prompt=TEXT + " more", return_token_ids=True)["choices"][0]["prompt_logprobs"]
        assert longer[: len(pl)] == pl
        # chat: prompt_logprobs and prompt_token_ids beside the choices, as vLLM sends them
        msgs = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
        chat = scored(srv.url, "/v1/chat/completions", messages=msgs, add_generation_prompt=False)
        tok = httpx.post(srv.base_url + "/tokenize", json={"messages": msgs, "add_generation_prompt": False}).json()
        assert chat["prompt_token_ids"] == tok["tokens"] and chat["prompt_logprobs"][0] is None
        assert httpx.post(srv.url + "/completions", json={"model": "test-model", "prompt": [1, 2],
                                                           "prompt_logprobs": 2}).status_code == 400  # fmt: skip


def _centred(raw_a: list[Any], raw_b: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Logprobs of the ids both answers list at each position, each position's mean taken off (the shared
    normaliser cancels), pooled."""
    xs, ys = [], []
    for a, b in zip(raw_a[1:], raw_b[1:], strict=True):
        common = [t for t in a if t in b and a[t]["rank"] <= 20 and b[t]["rank"] <= 20]
        if len(common) < 3:
            continue
        x = np.array([a[t]["logprob"] for t in common])
        y = np.array([b[t]["logprob"] for t in common])
        xs.append(x - x.mean())
        ys.append(y - y.mean())
    return np.concatenate(xs), np.concatenate(ys)


@pytest.mark.parametrize("sigma", [0.05, 0.3])
def test_logit_noise_of_known_size_is_recovered(sigma: float) -> None:
    with TestServer() as srv:
        text = " ".join([TEXT] * 6)
        base = scored(srv.url, prompt=text, prompt_logprobs=20)["choices"][0]["prompt_logprobs"]
        srv.state.behaviour.update(logit_noise=sigma)
        a = scored(srv.url, prompt=text, prompt_logprobs=20)["choices"][0]["prompt_logprobs"]
        b = scored(srv.url, prompt=text, prompt_logprobs=20)["choices"][0]["prompt_logprobs"]
        assert a != b  # fresh noise per request: run-to-run divergence
        srv.state.behaviour.update(logit_noise_seed=7)
        assert scored(srv.url, prompt=text, prompt_logprobs=20) ["choices"][0]["prompt_logprobs"] == scored(
            srv.url, prompt=text, prompt_logprobs=20
        )["choices"][0]["prompt_logprobs"]  # fmt: skip
    x, y = _centred(base, a)
    # centred differences: the noise less its mean over the m listed ids, sd sigma * sqrt(1 - 1/m) ~ sigma
    assert np.std(y - x) == pytest.approx(sigma, rel=0.15)


def test_logit_scale_of_known_size_is_recovered() -> None:
    with TestServer(Behaviour(logit_scale=1.25)) as srv:
        text = " ".join([TEXT] * 4)
        scaled = scored(srv.url, prompt=text, prompt_logprobs=20)["choices"][0]["prompt_logprobs"]
        srv.state.behaviour.update(logit_scale=1.0)
        base = scored(srv.url, prompt=text, prompt_logprobs=20)["choices"][0]["prompt_logprobs"]
    x, y = _centred(base, scaled)
    assert float(np.dot(x, y) / np.dot(x, x)) == pytest.approx(1.25, rel=1e-6)  # logits times the scale


# ------------------------------------------------------------------------------------------------ runs
def test_run_stores_the_positions_the_server_sent(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with TestServer() as srv:
        run(srv.url, out)
        bodies = [r.body for r in srv.requests]
        assert len(bodies) == 6 + 6
        assert all(b["stream"] is False and b["prompt_logprobs"] == 20 and b["return_token_ids"] for b in bodies)
        direct = [scored(srv.url, **{**b, "model": "test-model"})["choices"][0] for b in bodies[:3]]
    recs = samples(out)
    positions = read_positions(out, "numerics")
    assert len(recs) == len(positions) == 12 and {r["key"] for r in recs} == set(positions)
    by_prompt = {(r["prompt"], r["sample_index"]): positions[r["key"]] for r in recs}
    for body, answer in zip(bodies, direct, strict=False):
        p = by_prompt[(body["prompt"], 0)]
        ids, raw = answer["prompt_token_ids"], answer["prompt_logprobs"]
        assert p.token_ids.tolist() == ids and p.continuation_ids.tolist() == answer["token_ids"]
        assert np.isnan(p.token_logprobs[0]) and (p.top_ids[0] == -1).all()
        want = [raw[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]
        assert np.array_equal(p.token_logprobs[1:], np.array(want, dtype=np.float32))
        assert np.array_equal(p.top_logprobs, top_matrix(raw, 20).astype(np.float32), equal_nan=True)
        firsts = [min(raw[i], key=lambda t: raw[i][t]["rank"]) for i in range(1, len(ids))]
        assert p.top_ids[1:, 0].tolist() == [int(t) for t in firsts]
        assert "".join(p.tokens) == body["prompt"]  # the decoded tokens give the text back
    rec = recs[0]
    assert rec["status"] == "ok" and set(rec["figures"]) == {"positions", "mean_logprob", "top1_rate"}
    p = positions[rec["key"]]
    assert rec["figures"]["positions"] == p.n - 1
    assert rec["figures"]["mean_logprob"] == pytest.approx(float(np.mean(p.token_logprobs[1:], dtype=np.float64)))
    # the summary: mean token logprob with its CI over the main pass's texts, top-1 rate; no streamed latencies
    task = json.loads((out / "summary.json").read_text())["tasks"]["numerics"]
    m = task["metrics"]["mean_token_logprob"]
    mains = [r["figures"]["mean_logprob"] for r in recs if r["sample_index"] == 0]
    assert m["n"] == 6 and m["value"] == pytest.approx(np.mean(mains)) and m["ci95"][0] < m["value"] < m["ci95"][1]
    assert task["metrics"]["top1_rate"]["n"] == 6 and task["detail"]["noise_floor_texts"] == 6
    speed = task["speed"]
    assert speed["ttft_ms"]["mean"] is None and speed["tpot_ms"]["mean"] is None and speed["itl_ms"]["n"] == 0
    assert speed["e2e_ms"]["n"] == 12 and speed["requests_per_s"] > 0
    assert all(r["ttft_ms"] is None and r["tpot_ms"] is None for r in recs)
    assert (out / "report.html").is_file()
    # the noise floor of a deterministic server: the second pass equals the first
    for r in recs:
        if r["sample_index"] == 1:
            a, b = by_prompt[(r["prompt"], 0)], by_prompt[(r["prompt"], 1)]
            assert np.array_equal(a.top_logprobs, b.top_logprobs, equal_nan=True)


def test_noise_floor_pass_sees_a_noisy_servers_own_divergence(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with TestServer(Behaviour(logit_noise=0.2)) as srv:
        run(srv.url, out, "--limit", "3", "--no-report")
    positions = read_positions(out, "numerics")
    by = {(p.doc_id, p.sample_index): p for p in positions.values()}
    assert sorted(by) == [(d, i) for d in range(3) for i in (0, 1)]
    for d in range(3):
        a, b = by[d, 0], by[d, 1]
        assert a.token_ids.tolist() == b.token_ids.tolist()
        diff = np.abs(a.token_logprobs[1:] - b.token_logprobs[1:])
        assert 0 < float(diff.mean()) < 1


def test_resume_keeps_positions_and_a_resent_request_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with TestServer() as srv:
        run(srv.url, out, "--no-report", limit=4)
        before, sent = (out / POSITIONS).read_bytes(), len(srv.requests)
        run(srv.url, out, "--no-report", limit=4)
        assert len(srv.requests) == sent and (out / POSITIONS).read_bytes() == before
        # a crash after a request's positions were written but before its record: it is sent again
        lines = (out / "samples.jsonl").read_bytes().splitlines(keepends=True)
        (out / "samples.jsonl").write_bytes(b"".join(lines[:-1]))
        lost = orjson.loads(lines[-1])["key"]
        run(srv.url, out, "--no-report", limit=4)
        assert len(srv.requests) == sent + 1
        assert len((out / POSITIONS).read_bytes()) > len(before)  # appended: the last record of a key counts
        positions = read_positions(out, "numerics")
        assert len(positions) == 8 and lost in positions and {r["key"] for r in samples(out)} == set(positions)
        # --fresh starts the positions over too
        run(srv.url, out, "--no-report", "--fresh", limit=2)
        assert len(read_positions(out, "numerics")) == 4


def test_failed_and_misfit_answers_have_no_positions(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with TestServer() as srv:
        srv.faults = [{"status": 400, "message": "bad"}]
        run(srv.url, out, "--no-report", "--max-attempts", "1", "--max-error-rate", "1", limit=2)
    recs = samples(out)
    failed = [r for r in recs if r["status"] == "api_error"]
    assert len(failed) == 1 and "figures" not in failed[0]
    assert failed[0]["key"] not in read_positions(out, "numerics") and len(read_positions(out)) == 3


def test_numerics_chat_scores_the_reply_as_written(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with TestServer() as srv:
        run(srv.url, out, "--no-report", task="numerics-chat", limit=2)
        body = srv.requests[0].body
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["messages"][-1]["role"] == "assistant" and body["prompt_logprobs"] == 20
    positions = read_positions(out, "numerics-chat")
    assert len(positions) == 4 and all(p.n > 10 for p in positions.values())


def test_sweep_runs_numerics_like_any_task(tmp_path: Path) -> None:
    with TestServer() as srv:
        spec = tmp_path / "sweep.yaml"
        spec.write_text(f"tasks: [numerics]\nlimit: 2\nendpoint: {srv.url}\nconcurrency: [1, 2]\n")
        res = CliRunner().invoke(app, ["sweep", str(spec), "-o", str(tmp_path / "out")])
        assert res.exit_code == 0, res.output
    runs = sorted((tmp_path / "out" / "runs").iterdir())
    assert len(runs) == 2 and all(len(read_positions(r, "numerics")) == 4 for r in runs)
    table = (tmp_path / "out" / "sweep.csv").read_text()
    assert "numerics mean_token_logprob" in table and "numerics top1_rate" in table


def test_watch_runs_numerics_like_any_task(tmp_path: Path) -> None:
    out = tmp_path / "w"
    with TestServer() as srv:
        args = ["watch", "--endpoint", srv.url, "--task", "numerics", "--every", "0.05s", "--per-tick", "3",
                "--baseline-ticks", "1", "--window", "1", "--ticks", "2", "-o", str(out)]  # fmt: skip
        res = CliRunner().invoke(app, args)
    # the ticks run and store their positions; the window's verdict is the gate's numerics rules' to give
    assert "tick 1: 6 requests" in res.output and "tick 2: 6 requests" in res.output, res.output
    ticks = sorted(p for p in out.rglob(POSITIONS))
    assert len(ticks) == 2 and all(len(read_positions(t.parent, "numerics")) == 6 for t in ticks)


def _hostile_positions(answer: dict[str, Any], n: int) -> None:
    """The ``n``-th scored answer made hostile in one way: a token id past int32, a key that is no token id, a
    top-K key past int32, a continuation id past int64."""
    choice = answer["choices"][0]
    ids, entries = choice["prompt_token_ids"], choice["prompt_logprobs"]
    if n == 1:  # the actual token's id 2**31, its entry under that key
        entries[1][str(2**31)] = entries[1].pop(str(ids[1]))
        ids[1] = 2**31
    elif n == 2:
        entries[2]["not-a-token"] = {"logprob": -0.5, "rank": 1, "decoded_token": "x"}
    elif n == 3:
        entries[1][str(2**40)] = {"logprob": -0.1, "rank": 1, "decoded_token": "x"}
    elif n == 4:
        choice["token_ids"] = [5, 2**63]


def test_a_hostile_answer_is_that_samples_bad_positions_not_the_runs_end(tmp_path: Path) -> None:
    """A token id >= 2**31 or a prompt_logprobs key that is no token id ended the run (a traceback, no summary):
    each such answer is its sample's bad_positions; the others are scored and the summary written."""
    from tests.tampering import TamperingProxy

    seen = [0]

    def tamper(path: str, body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        if body.get("prompt_logprobs") and answer.get("choices"):
            seen[0] += 1
            _hostile_positions(answer, seen[0])
        return answer

    out = tmp_path / "run"
    with TestServer() as srv, TamperingProxy(srv.url.removesuffix("/v1"), tamper) as proxy:
        run(proxy.url, out, "--no-report", "--num-samples", "1", "--concurrency", "1", "--warmup", "0", limit=6)
    recs = {r["doc_id"]: r for r in samples(out)}
    bad = {d: r["extraction"] for d, r in recs.items() if r["status"] == "bad_positions"}
    assert sorted(bad) == [0, 1, 2, 3] and [recs[d]["status"] for d in (4, 5)] == ["ok", "ok"], recs
    assert "a prompt token id is out of range (0 to 2**31 - 1): 2147483648" in bad[0]
    assert "position 2: a prompt_logprobs key is not a token id: 'not-a-token'" in bad[1]
    assert "position 1: a prompt_logprobs key is out of range" in bad[2] and "a token id is out of range" in bad[3]
    assert set(read_positions(out, "numerics")) == {recs[4]["key"], recs[5]["key"]}
    task = json.loads((out / "summary.json").read_text())["tasks"]["numerics"]
    assert task["counts"]["bad_positions"] == 4 and task["metrics"]["mean_token_logprob"]["n"] == 2
