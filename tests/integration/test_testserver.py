"""The deterministic OpenAI-compatible test server (evalkit.testing): wire format, policy, faults, timing."""

from __future__ import annotations

import itertools
import json
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from evalkit.testing.answers import count_tokens, is_correct, load_data, render_chat
from evalkit.testing.server import Behaviour, SubprocessServer, TestServer
from evalkit.testing.vllm_metrics import parse_prometheus

GSM = load_data().gsm_list
Q0, A0 = GSM[0]  # Janet's ducks, "#### 18"
PROMPT0 = f"Question: {Q0}\nAnswer:"
AIME = load_data().aime


@pytest.fixture
def srv() -> Iterator[TestServer]:
    with TestServer() as s:
        yield s


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as c:
        yield c


def sse(resp: httpx.Response) -> list[Any]:
    """The events of a streamed response, ``"[DONE]"`` included."""
    out: list[Any] = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "", line
    return out


def stream(client: httpx.Client, url: str, body: dict[str, Any]) -> list[Any]:
    with client.stream("POST", url, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse(r)


def cmpl(prompt: str = PROMPT0, **kw: Any) -> dict[str, Any]:
    return {"model": "test-model", "prompt": prompt, "max_tokens": 256, "temperature": 0, **kw}


def chat(content: str, **kw: Any) -> dict[str, Any]:
    return {"model": "test-model", "messages": [{"role": "user", "content": content}], "temperature": 0, **kw}


def final_number(text: str) -> str:
    return text.split("####")[1].split()[0]


# ----------------------------------------------------------------------------------------- basics


def test_health_models_version(srv: TestServer, client: httpx.Client) -> None:
    srv.behaviour.models = ["a", "b"]
    srv.behaviour.max_model_len = 1234
    r = client.get(srv.base_url + "/health")
    assert r.status_code == 200 and r.content == b""
    models = client.get(srv.url + "/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"], m["max_model_len"]) for m in models["data"]] == [
        ("a", "model", "evalkit-test", 1234),
        ("b", "model", "evalkit-test", 1234),
    ]
    assert srv.url == srv.base_url + "/v1" and srv.base_url.startswith("http://127.0.0.1:")
    # vLLM's /tokenize, counted as usage.prompt_tokens is
    tok = client.post(srv.base_url + "/tokenize", json={"model": "a", "prompt": PROMPT0}).json()
    assert tok["count"] == count_tokens(PROMPT0) == len(tok["tokens"]) and tok["max_model_len"] == 1234
    msgs = [{"role": "user", "content": PROMPT0}]
    tok = client.post(srv.base_url + "/tokenize", json={"model": "a", "messages": msgs}).json()
    assert tok["count"] == count_tokens(render_chat(msgs))
    assert client.post(srv.base_url + "/tokenize", json={"model": "zz", "prompt": "x"}).status_code == 404


def test_completions_non_stream_gold_answer_and_usage(srv: TestServer, client: httpx.Client) -> None:
    body = cmpl(stop=["Question:", "</s>"])
    out = client.post(srv.url + "/completions", json=body).json()
    assert out["object"] == "text_completion" and out["model"] == "test-model"
    (c,) = out["choices"]
    assert c["index"] == 0 and c["finish_reason"] == "stop" and c["stop_reason"] == "Question:"
    assert c["text"] == " " + A0 + "\n\n"  # the gold solution, cut before the filler's "Question:"
    assert out["usage"] == {
        "prompt_tokens": count_tokens(PROMPT0),
        "completion_tokens": count_tokens(c["text"]) + 1,  # + the token that held the stop string
        "total_tokens": count_tokens(PROMPT0) + count_tokens(c["text"]) + 1,
        "prompt_tokens_details": None,
    }
    # few-shot prompts: the last question is the one answered
    shots = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in GSM[5:8])
    out = client.post(srv.url + "/completions", json=cmpl(shots + PROMPT0, stop=["Question:"])).json()
    assert out["choices"][0]["text"] == " " + A0 + "\n\n"


def test_completions_stream_matches_non_stream(srv: TestServer, client: httpx.Client) -> None:
    body = cmpl(stop=["\n\n"], stream_options={"include_usage": True})
    full = client.post(srv.url + "/completions", json=body).json()
    events = stream(client, srv.url + "/completions", body)
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {
        k: v for k, v in full["usage"].items() if k != "prompt_tokens_details"
    }
    chunks = events[:-2]
    assert all(e["object"] == "text_completion" and e["id"] == chunks[0]["id"] for e in chunks)
    assert "".join(e["choices"][0]["text"] for e in chunks) == full["choices"][0]["text"] == " " + A0
    assert [e["choices"][0]["finish_reason"] for e in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    assert len(chunks) > 10  # one token per chunk
    # without include_usage there is no usage chunk
    events = stream(client, srv.url + "/completions", cmpl(stop=["\n\n"]))
    assert all(e == "[DONE]" or e["choices"] for e in events)


def test_length_and_stop_spanning_tokens(srv: TestServer, client: httpx.Client) -> None:
    out = client.post(srv.url + "/completions", json=cmpl(max_tokens=5)).json()
    c = out["choices"][0]
    assert c["finish_reason"] == "length" and c["stop_reason"] is None
    assert c["text"] == " Janet sells 16 - 3" and out["usage"]["completion_tokens"] == 5
    events = stream(client, srv.url + "/completions", cmpl(max_tokens=5))
    assert [e["choices"][0]["text"] for e in events[:-1]] == [" Janet", " sells", " 16", " -", " 3"]
    srv.behaviour.tokens_per_chunk = 2
    events = stream(client, srv.url + "/completions", cmpl(max_tokens=5))
    assert [e["choices"][0]["text"] for e in events[:-1]] == [" Janet sells", " 16 -", " 3"]
    srv.behaviour.tokens_per_chunk = 1
    # a stop string spanning two tokens cuts inside the first of them
    out = client.post(srv.url + "/completions", json=cmpl(stop=["s 16"])).json()
    assert out["choices"][0]["text"] == " Janet sell" and out["choices"][0]["stop_reason"] == "s 16"
    assert out["usage"]["completion_tokens"] == 3
    # the earliest stop string wins, whatever the order of the list
    out = client.post(srv.url + "/completions", json=cmpl(stop=["duck", "ls", "sel"])).json()
    assert out["choices"][0]["text"] == " Janet " and out["choices"][0]["stop_reason"] == "sel"
    # max_tokens defaults to 16 for completions, to max_model_len - prompt for chat
    out = client.post(srv.url + "/completions", json={"model": "test-model", "prompt": "hi"}).json()
    assert out["usage"]["completion_tokens"] == 16
    out = client.post(srv.url + "/chat/completions", json=chat(Q0)).json()
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] > 16
    # ignore_eos keeps generating up to max_tokens
    out = client.post(srv.url + "/completions", json=cmpl("hi", max_tokens=300, ignore_eos=True)).json()
    assert out["usage"]["completion_tokens"] == 300 and out["choices"][0]["finish_reason"] == "length"


def test_correct_ratio_policy(srv: TestServer, client: httpx.Client) -> None:
    srv.behaviour.correct_ratio = 0.5
    right = 0
    for q, a in GSM[:40]:
        text = client.post(srv.url + "/completions", json=cmpl(f"Question: {q}\nAnswer:", stop=["Question:"]))
        got = final_number(text.json()["choices"][0]["text"])
        gold = final_number(a)
        assert (got == gold) == is_correct(q, 0.5)
        right += got == gold
    assert 10 <= right <= 30
    srv.behaviour.correct_ratio = 0.0
    out = client.post(srv.url + "/chat/completions", json=chat(PROMPT0, stop=["Question:"])).json()
    assert final_number(out["choices"][0]["message"]["content"]) == "19"
    # unknown prompts: deterministic text
    a1 = client.post(srv.url + "/completions", json=cmpl("hello world")).json()["choices"][0]["text"]
    a2 = client.post(srv.url + "/completions", json=cmpl("hello world")).json()["choices"][0]["text"]
    a3 = client.post(srv.url + "/completions", json=cmpl("hello there")).json()["choices"][0]["text"]
    assert a1 == a2 != a3


def test_n_choices_and_sampling_variation(srv: TestServer, client: httpx.Client) -> None:
    out = client.post(srv.url + "/completions", json=cmpl(n=3, max_tokens=4)).json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert out["usage"]["completion_tokens"] == 12
    events = stream(client, srv.url + "/chat/completions", chat(Q0, n=2, max_tokens=3))
    chunks = [e for e in events if e != "[DONE]"]
    assert all(len(e["choices"]) == 1 for e in chunks)
    for i in (0, 1):
        mine = [e["choices"][0] for e in chunks if e["choices"][0]["index"] == i]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert mine[-1]["finish_reason"] == "length" and len(mine) == 4
    # AIME, temperature > 0: samples differ by choice index and by seed; temperature 0 does not
    srv.behaviour.correct_ratio = 0.5
    _, problem, gold = AIME[0]
    prompt = problem + "\nPut your final answer within \\boxed{}."

    def boxed(**kw: Any) -> list[bool]:
        out = client.post(srv.url + "/chat/completions", json=chat(prompt, **kw)).json()
        contents = [c["message"]["content"] for c in out["choices"]]
        assert all(t.endswith("}") and "\\boxed{" in t for t in contents)
        return [t.rsplit("\\boxed{", 1)[1].rstrip("}") == gold for t in contents]

    sampled = boxed(n=16, temperature=1.0, seed=1)
    assert 0 < sum(sampled) < 16
    assert boxed(n=16, temperature=1.0, seed=1) == sampled  # deterministic
    by_seed = [boxed(temperature=0.7, seed=s)[0] for s in range(16)]
    assert 0 < sum(by_seed) < 16
    by_arrival = [boxed(temperature=0.7)[0] for _ in range(16)]  # no seed: the k-th request for a prompt
    assert 0 < sum(by_arrival) < 16
    greedy = boxed(n=4, temperature=0)
    assert len(set(greedy)) == 1 and greedy[0] == is_correct(problem, 0.5)


def test_chat_reasoning_stream_and_non_stream(srv: TestServer, client: httpx.Client) -> None:
    srv.behaviour.reasoning = "Let me think about the eggs."
    srv.behaviour.reasoning_field = "reasoning_content"
    events = stream(client, srv.url + "/chat/completions", chat(PROMPT0, stop=["Question:"]))
    chunks = [e["choices"][0] for e in events[:-1]]
    assert events[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["delta"] == {"role": "assistant", "content": ""}
    kinds = [next(iter(c["delta"])) for c in chunks[1:]]
    n_r = kinds.count("reasoning_content")
    assert kinds == ["reasoning_content"] * n_r + ["content"] * (len(kinds) - n_r) and n_r == 6
    assert "".join(c["delta"].get("reasoning_content", "") for c in chunks) == srv.behaviour.reasoning
    assert "".join(c["delta"].get("content") or "" for c in chunks) == A0 + "\n\n"
    srv.behaviour.reasoning_field = "reasoning"
    out = client.post(srv.url + "/chat/completions", json=chat(PROMPT0, max_tokens=8)).json()
    msg = out["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["reasoning"] == "Let me think about the eggs."
    assert msg["content"] == "Janet sells" and out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["prompt_tokens"] == count_tokens(render_chat([{"role": "user", "content": PROMPT0}]))
    # chat_template_kwargs are recorded; enable_thinking=False turns reasoning off (as Qwen3 templates do)
    body = chat(PROMPT0, max_tokens=8, chat_template_kwargs={"enable_thinking": False})
    msg = client.post(srv.url + "/chat/completions", json=body).json()["choices"][0]["message"]
    assert msg["reasoning"] is None and msg["content"].startswith("Janet sells 16")
    assert srv.requests[-1]["body"]["chat_template_kwargs"] == {"enable_thinking": False}


def test_errors_unknown_model_bad_json_context(srv: TestServer, client: httpx.Client) -> None:
    r = client.post(srv.url + "/completions", json=cmpl(model="x"))
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "message": "The model `x` does not exist.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        }
    }
    r = client.post(srv.url + "/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    srv.behaviour.max_model_len = 64
    r = client.post(srv.url + "/completions", json=cmpl(max_tokens=60))
    assert r.status_code == 400 and "maximum context length is 64" in r.json()["error"]["message"]


def test_auth(srv: TestServer, client: httpx.Client) -> None:
    srv.behaviour.api_key = "sekrit"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = client.post(srv.url + "/completions", json=cmpl(max_tokens=2), headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == 401
        assert client.get(srv.url + "/models", headers=headers).status_code == 401
    ok = {"Authorization": "Bearer sekrit"}
    assert client.post(srv.url + "/completions", json=cmpl(max_tokens=2), headers=ok).status_code == 200
    assert client.get(srv.url + "/models", headers=ok).status_code == 200
    assert client.get(srv.base_url + "/health").status_code == 200


# ----------------------------------------------------------------------------------------- faults


def test_fault_status_retry_after_html_fifo(srv: TestServer, client: httpx.Client) -> None:
    srv.faults.extend([{"status": 500}, {"status": 429, "retry_after": 1}, None, {"html": True}])
    r = client.post(srv.url + "/completions", json=cmpl(max_tokens=2))
    assert r.status_code == 500 and r.json()["error"]["code"] == 500 and r.json()["error"]["message"]
    r = client.post(srv.url + "/completions", json=cmpl(max_tokens=2))
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert client.post(srv.url + "/completions", json=cmpl(max_tokens=2)).status_code == 200  # None
    r = client.post(srv.url + "/completions", json=cmpl(max_tokens=2))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html") and "<html>" in r.text
    assert client.post(srv.url + "/completions", json=cmpl(max_tokens=2)).status_code == 200  # queue empty
    assert [r.status for r in srv.requests] == [500, 429, 200, 200, 200]
    assert [r.completed for r in srv.requests] == [False, False, True, False, True]
    # the same over HTTP, as the subprocess form needs
    assert client.post(srv.base_url + "/_test/faults", json=[{"status": 503}]).status_code == 200
    assert client.post(srv.url + "/completions", json=cmpl(max_tokens=2)).status_code == 503
    assert client.post(srv.base_url + "/_test/faults", json=[{"bogus": 1}]).status_code == 400


def test_fault_drop_after_tokens(srv: TestServer, client: httpx.Client) -> None:
    srv.faults.append({"drop_after_tokens": 3})
    got: list[Any] = []
    with (
        pytest.raises(httpx.HTTPError),
        client.stream("POST", srv.url + "/completions", json=cmpl(stream=True)) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line[6:]))
    assert [e["choices"][0]["text"] for e in got] == [" Janet", " sells", " 16"]
    assert srv.requests[-1].aborted and not srv.requests[-1].completed
    srv.faults.append({"drop_after_tokens": 0})  # non-streaming: no response at all
    with pytest.raises(httpx.HTTPError):
        client.post(srv.url + "/completions", json=cmpl())
    assert client.post(srv.url + "/completions", json=cmpl(max_tokens=3)).status_code == 200


def test_fault_null_content(srv: TestServer, client: httpx.Client) -> None:
    srv.faults.append({"null_content": True})
    events = stream(client, srv.url + "/chat/completions", chat(PROMPT0, max_tokens=5))
    chunks = [e["choices"][0] for e in events[:-1]]
    assert all(c["delta"]["content"] is None for c in chunks) and len(chunks) == 6
    assert chunks[-1]["finish_reason"] == "length" and events[-1] == "[DONE]"
    srv.faults.append({"null_content": True})
    out = client.post(srv.url + "/chat/completions", json=chat(PROMPT0, max_tokens=5)).json()
    assert out["choices"][0]["message"]["content"] is None


def test_fault_stall_and_delay(srv: TestServer, client: httpx.Client) -> None:
    srv.faults.extend([{"stall_s": 0.4, "after_tokens": 2}, {"delay_s": 0.3}])
    times: list[float] = []
    t0 = time.perf_counter()
    with client.stream("POST", srv.url + "/completions", json=cmpl(max_tokens=4, stream=True)) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter() - t0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 4 and gaps[1] >= 0.38 and gaps[0] < 0.2 and gaps[2] < 0.2
    t0 = time.perf_counter()
    with client.stream("POST", srv.url + "/completions", json=cmpl(max_tokens=2, stream=True)) as r:
        headers_after = time.perf_counter() - t0
        r.read()
    assert headers_after >= 0.28


# ---------------------------------------------------------------------------------- observability


def test_metrics_counters_and_histograms(srv: TestServer, client: httpx.Client) -> None:
    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        r = client.get(srv.base_url + "/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        return parse_prometheus(r.text)

    lab = (("engine", "0"), ("model_name", "test-model"))
    before = scrape()
    assert before[("vllm:prompt_tokens_total", lab)] == 0
    client.post(srv.url + "/completions", json=cmpl(stop=["Question:"]))
    client.post(srv.url + "/completions", json=cmpl(max_tokens=4))
    stream(client, srv.url + "/chat/completions", chat(PROMPT0, max_tokens=4))
    m = scrape()
    sent = srv.requests
    assert m[("vllm:prompt_tokens_total", lab)] == 2 * count_tokens(PROMPT0) + count_tokens(
        render_chat([{"role": "user", "content": PROMPT0}])
    )
    assert m[("vllm:generation_tokens_total", lab)] == count_tokens(" " + A0 + "\n\n") + 1 + 4 + 4
    assert m[("vllm:request_success_total", (*lab[:1], ("finished_reason", "stop"), lab[1]))] == 1
    assert m[("vllm:request_success_total", (*lab[:1], ("finished_reason", "length"), lab[1]))] == 2
    assert m[("vllm:prefix_cache_queries_total", lab)] == m[("vllm:prompt_tokens_total", lab)]
    assert m[("vllm:prefix_cache_hits_total", lab)] >= 32  # the repeated completions prompt
    assert m[("vllm:num_requests_running", lab)] == 0 and m[("vllm:num_requests_waiting", lab)] == 0
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        buckets = sorted((float(dict(k[1])["le"]), v) for k, v in m.items() if k[0] == name + "_bucket")
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1][0] == float("inf")
        assert counts[-1] == m[(name + "_count", lab)] > 0
        assert m[(name + "_sum", lab)] >= 0
    assert m[("vllm:time_to_first_token_seconds_count", lab)] == len(sent) == 3
    assert m[("vllm:e2e_request_latency_seconds_count", lab)] == 3
    srv.reset()
    assert scrape()[("vllm:prompt_tokens_total", lab)] == 0 and srv.requests == []


def test_max_num_seqs_queues_and_concurrency(srv: TestServer, client: httpx.Client) -> None:
    # max_num_seqs 0 holds every request in the queue until all four are there (a loaded machine may start the
    # threads far apart); raised to 1 at runtime, they are served one at a time
    srv.behaviour.max_num_seqs = 0
    srv.behaviour.ttft_s = 0.15
    results: list[int] = []

    def one() -> None:
        results.append(client.post(srv.url + "/completions", json=cmpl(max_tokens=1)).status_code)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    lab = (("engine", "0"), ("model_name", "test-model"))

    def gauges() -> tuple[float, float]:
        m = parse_prometheus(client.get(srv.base_url + "/metrics").text)
        return m[("vllm:num_requests_running", lab)], m[("vllm:num_requests_waiting", lab)]

    deadline = time.monotonic() + 30
    while gauges() != (0, 4):
        assert time.monotonic() < deadline, f"four requests never queued: {gauges()}"
        time.sleep(0.01)
    t0 = time.perf_counter()
    srv.behaviour.max_num_seqs = 1
    seen = set()
    while any(t.is_alive() for t in threads):
        seen.add(gauges())
        time.sleep(0.01)
    for t in threads:
        t.join()
    assert all(running <= 1 and running + waiting <= 4 for running, waiting in seen), seen
    assert any(running == 1 for running, _ in seen), seen
    assert results == [200] * 4 and time.perf_counter() - t0 >= 0.55  # served one at a time
    assert srv.max_concurrency_seen == 4
    assert srv.completed_count(PROMPT0) == 4 and srv.completed_count("other") == 0
    data = client.get(srv.base_url + "/_test/requests").json()
    assert len(data) == 4 and all(d["completed"] and d["prompts"] == [PROMPT0] for d in data)


def test_client_disconnect_is_recorded_as_abort(srv: TestServer, client: httpx.Client) -> None:
    srv.behaviour.itl_s = 0.02
    with client.stream("POST", srv.url + "/completions", json=cmpl(stream=True)) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break
    deadline = time.time() + 5
    while not srv.requests[-1].aborted and time.time() < deadline:
        time.sleep(0.02)
    assert srv.requests[-1].aborted and not srv.requests[-1].completed
    m = parse_prometheus(client.get(srv.base_url + "/metrics").text)
    assert (
        m[
            (
                "vllm:request_success_total",
                (("engine", "0"), ("finished_reason", "abort"), ("model_name", "test-model")),
            )
        ]
        == 1
    )
    assert m[("vllm:num_requests_running", (("engine", "0"), ("model_name", "test-model")))] == 0


def test_timing_ttft_and_itl() -> None:
    with TestServer(Behaviour(ttft_s=0.2, itl_s=0.02)) as srv, httpx.Client(timeout=30) as client:
        client.get(srv.base_url + "/health")  # open the connection
        ttfts, itls = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            times = []
            with client.stream(
                "POST", srv.url + "/chat/completions", json=chat(PROMPT0, max_tokens=11, stream=True)
            ) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and '"content":""' not in line:
                        times.append(time.perf_counter() - t0)
            ttfts.append(times[0])
            itls += [b - a for a, b in itertools.pairwise(times)]
        # within 10% (median, so that one scheduling hiccup on a loaded machine does not fail the test)
        assert abs(statistics.median(ttfts) - 0.2) < 0.02 and all(0.19 < t < 0.3 for t in ttfts), ttfts
        assert abs(statistics.median(itls) - 0.02) < 0.002, itls
        assert abs(statistics.mean(itls) - 0.02) < 0.004, itls
        assert len(itls) == 50


def test_fast_mode_same_content_no_delay() -> None:
    with TestServer(Behaviour(ttft_s=5, itl_s=1, fast=True)) as srv, httpx.Client(timeout=30) as client:
        t0 = time.perf_counter()
        for _ in range(2):
            events = stream(
                client, srv.url + "/completions", cmpl(stop=["\n\n"], stream_options={"include_usage": True})
            )
            full = client.post(srv.url + "/completions", json=cmpl(stop=["\n\n"])).json()
        assert time.perf_counter() - t0 < 2
        assert "".join(e["choices"][0]["text"] for e in events[:-2]) == full["choices"][0]["text"] == " " + A0
        assert events[-2]["usage"]["completion_tokens"] == full["usage"]["completion_tokens"]
        assert srv.completed_count(PROMPT0) == 4


def test_subprocess_form() -> None:
    args = ("--model", "m1", "--correct-ratio", "0", "--ttft", "0.01", "--api-key", "k")
    with SubprocessServer(*args) as proc, httpx.Client(timeout=30) as client:
        h = {"Authorization": "Bearer k"}
        assert [m["id"] for m in client.get(proc.url + "/models", headers=h).json()["data"]] == ["m1"]
        out = client.post(proc.url + "/completions", json=cmpl(model="m1", stop=["Question:"]), headers=h).json()
        assert final_number(out["choices"][0]["text"]) == "19"  # correct ratio 0: always wrong
        reqs = client.get(proc.base_url + "/_test/requests").json()
        assert len(reqs) == 1 and reqs[0]["completed"] and reqs[0]["body"]["model"] == "m1"
        assert client.post(proc.base_url + "/_test/behaviour", json={"correct_ratio": 1.0}).status_code == 200
        out = client.post(proc.url + "/completions", json=cmpl(model="m1", stop=["Question:"]), headers=h).json()
        assert final_number(out["choices"][0]["text"]) == "18"
        assert proc.proc is not None
        proc.kill()
        assert proc.proc.returncode is not None
