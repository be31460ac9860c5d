"""One eval sharded over several endpoints (``--endpoint`` repeated) against real test servers: dispatch by
outstanding requests skews toward the faster endpoint, speed per endpoint and overall, the endpoint of each
sample, a retry sent to another endpoint, resume across endpoints in another order or set, and one-line errors
for an endpoint that serves another model or cannot be reached."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.auto_concurrency import _server_counts
from evalkit.client.http_client import Client, ClientOptions
from evalkit.config.endpoint import display_url
from evalkit.contracts import EndpointSummary
from evalkit.testing.server import Behaviour, TestServer


def invoke(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def run_args(
    urls: list[str], out: Path, *extra: str, limit: int = 10, concurrency: str = "4", max_tokens: int = 24
) -> list[str]:
    ends = [arg for url in urls for arg in ("--endpoint", url)]
    return ["run", "gsm8k", *ends, "--limit", str(limit), "--max-tokens", str(max_tokens), "--concurrency", concurrency,
            "-o", str(out), "-q", *extra]  # fmt: skip


def records(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / "samples.jsonl").read_bytes().splitlines()]


def task_summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]
    return data


def generated(srv: TestServer) -> int:
    return sum(1 for r in srv.requests if r.path.endswith("/completions"))


@pytest.fixture
def pair() -> Any:
    """A fast endpoint and one ten times slower per token, serving the same model."""
    with TestServer(Behaviour(itl_s=0.002)) as fast, TestServer(Behaviour(itl_s=0.02)) as slow:
        yield fast, slow


@pytest.mark.slow
def test_dispatch_skews_to_the_fast_endpoint_and_speed_is_per_endpoint_and_overall(tmp_path: Path, pair: Any) -> None:
    fast, slow = pair
    out = tmp_path / "run"
    code, err = invoke(run_args([fast.url, slow.url], out, limit=40))
    assert code == 0, err
    names = [display_url(fast.url), display_url(slow.url)]
    assert json.loads((out / "manifest.json").read_text())["endpoints"] == names
    recs = records(out)
    by = {name: sum(1 for r in recs if r["endpoint"] == name) for name in names}
    assert by[names[0]] == generated(fast) and by[names[1]] == generated(slow)  # each sample names its server
    assert by[names[0]] > 0.6 * len(recs) and by[names[1]] > 0  # fewest outstanding: the fast one frees first

    t = task_summary(out)
    ends = [EndpointSummary.model_validate(e) for e in t["endpoints"]]
    assert [e.endpoint for e in ends] == names
    assert [e.counts["total"] for e in ends] == [by[n] for n in names]
    assert sum(e.counts["total"] for e in ends) == t["counts"]["total"] == 40  # overall is their union
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert sum(e.speed.model_dump()[key]["n"] for e in ends) == t["speed"][key]["n"], key
    fast_s, slow_s = ends[0].speed, ends[1].speed
    assert fast_s.tpot_ms.p50 is not None and slow_s.tpot_ms.p50 is not None
    assert slow_s.tpot_ms.p50 > 3 * fast_s.tpot_ms.p50  # 20 ms against 2 ms per token, as injected
    assert slow_s.tpot_ms.p50 == pytest.approx(20, rel=0.5)
    assert t["speed"]["wall_s"] >= max(fast_s.wall_s, slow_s.wall_s)
    for e in ends:  # each endpoint's own /metrics, counted over its own requests
        assert e.server is not None and e.server["available"] is True
        assert e.server["requests"]["total"] == e.counts["total"]
    assert t["server"]["endpoint"] == names[0]  # the summary's server section says whose it is
    html = (out / "report.html").read_text()
    assert "Endpoints" in html and names[1] in html


def test_a_retry_goes_to_another_endpoint(tmp_path: Path) -> None:
    with TestServer() as a, TestServer() as b:
        a.faults.append({"status": 503})  # the first attempt (round robin starts at the first endpoint) fails
        out = tmp_path / "run"
        code, err = invoke(run_args([a.url, b.url], out, limit=1, concurrency="1"))
        assert code == 0, err
        (rec,) = records(out)
        assert rec["attempts"] == 2 and rec["status"] != "api_error"
        assert rec["endpoint"] == display_url(b.url)  # retried on the other one
        assert [r.status for r in a.requests if r.path.endswith("/completions")] == [503]


def test_an_endpoint_failing_every_request_leaves_the_eval_to_the_other(tmp_path: Path) -> None:
    with TestServer() as good, TestServer() as bad:
        bad.faults.extend([{"status": 503}] * 100)
        out = tmp_path / "run"
        code, err = invoke(run_args([good.url, bad.url], out, "--no-report", limit=10))
        assert code == 0, err  # every request answered: a retry never goes back to the failing endpoint
        recs = records(out)
        assert len(recs) == 10 and all(r["endpoint"] == display_url(good.url) for r in recs)
        failed = [r for r in bad.requests if r.path.endswith("/completions")]
        assert failed and all(r.status == 503 for r in failed)
        assert sum(r["attempts"] - 1 for r in recs) == len(failed)  # each failure cost its request one attempt


def test_single_endpoint_records_name_no_endpoint(tmp_path: Path, test_server: TestServer) -> None:
    out = tmp_path / "run"
    code, err = invoke(run_args([test_server.url], out, "--no-report", limit=3))
    assert code == 0, err
    assert all("endpoint" not in r for r in records(out))
    assert "endpoints" not in task_summary(out) and "endpoint" not in task_summary(out)["server"]
    assert "endpoints" not in json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
def test_resume_across_endpoints_in_another_order_and_set_sends_only_the_missing(tmp_path: Path, pair: Any) -> None:
    fast, slow = pair
    out = tmp_path / "run"
    code, err = invoke(run_args([fast.url, slow.url], out, "--no-report"))
    assert code == 0, err
    kept = (out / "samples.jsonl").read_bytes().splitlines()[:6]  # as if interrupted after 6 answers
    (out / "samples.jsonl").write_bytes(b"\n".join(kept) + b"\n")
    sent = generated(fast) + generated(slow)
    code, err = invoke(run_args([slow.url, fast.url], out, "--no-report"))  # the same servers, another order
    assert code == 0, err
    assert generated(fast) + generated(slow) - sent == 4
    assert len(records(out)) == 10
    sent = generated(fast) + generated(slow)
    with TestServer(Behaviour(itl_s=0.002)) as third:  # another replica of the same model
        code, err = invoke(run_args([third.url, fast.url], out, "--no-report"))
        assert code == 0, err
        assert generated(third) == 0 and generated(fast) + generated(slow) == sent  # nothing was missing
        kept = (out / "samples.jsonl").read_bytes().splitlines()[:8]
        (out / "samples.jsonl").write_bytes(b"\n".join(kept) + b"\n")
        code, err = invoke(run_args([third.url, fast.url], out, "--no-report"))
        assert code == 0, err
        assert generated(third) + generated(fast) + generated(slow) - sent == 2
    t = task_summary(out)
    assert t["counts"]["total"] == 10
    ends = {e["endpoint"]: e["counts"]["total"] for e in t["endpoints"]}
    assert sum(ends.values()) == 10  # answers of earlier runs stay with the endpoint that gave them
    assert list(ends)[:2] == [display_url(third.url), display_url(fast.url)]


def test_an_endpoint_serving_another_model_is_a_one_line_error(tmp_path: Path, test_server: TestServer) -> None:
    with TestServer(Behaviour(models=["other-model"])) as other:
        code, err = invoke(run_args([test_server.url, other.url], tmp_path / "run"))
        assert code == 2
        assert len(err.strip().splitlines()) == 1
        assert f"endpoint {display_url(other.url)} does not serve model 'test-model'" in err
        assert "other-model" in err and "same model" in err
    assert generated(test_server) == 0


def test_unreachable_or_repeated_endpoint_is_a_one_line_error(tmp_path: Path, test_server: TestServer) -> None:
    code, err = invoke(run_args([test_server.url, "http://127.0.0.1:9/v1"], tmp_path / "a"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "cannot connect to http://127.0.0.1:9/v1" in err
    code, err = invoke(run_args([test_server.url, test_server.url + "/completions"], tmp_path / "b"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "is given twice" in err
    assert generated(test_server) == 0


def test_credentials_of_each_endpoint_go_to_it_only_and_never_to_disk(tmp_path: Path) -> None:
    with TestServer(Behaviour(basic_auth="u1:sekret-one")) as a, TestServer(Behaviour(basic_auth="u2:sekret-two")) as b:
        urls = [a.url.replace("http://", "http://u1:sekret-one@"), b.url.replace("http://", "http://u2:sekret-two@")]
        out = tmp_path / "run"
        code, err = invoke(run_args(urls, out, limit=6))
        assert code == 0, err
        assert generated(a) and generated(b)
    stored = b"".join(p.read_bytes() for p in out.iterdir() if p.is_file())
    assert b"sekret" not in stored


def test_auto_concurrency_reads_the_sum_of_every_endpoints_metrics(tmp_path: Path, pair: Any) -> None:
    fast, slow = pair
    out = tmp_path / "run"
    # long enough (30 answers, ~1 s each on the slow endpoint) for the controller to finish a measuring window
    # before the last answer: 10 short answers could all be in before the first window closed on a loaded machine
    args = run_args([fast.url, slow.url], out, "--no-report", "--auto-start", "2", concurrency="auto", limit=30,
                    max_tokens=48)  # fmt: skip
    code, err = invoke(args)
    assert code == 0, err
    levels = task_summary(out)["concurrency_levels"]
    assert levels and all(lv["tok_s"] is not None for lv in levels), levels  # read from the servers' counters

    async def counts() -> list[dict[str, float]]:
        async with Client(fast.url, "test-model", options=ClientOptions()) as c:
            assert c._session is not None
            urls = [fast.base_url + "/metrics", slow.base_url + "/metrics"]
            return [await _server_counts(c._session, u) for u in (*urls, urls)]

    one, two, both = asyncio.run(counts())
    assert both["generated"] == one["generated"] + two["generated"] > 0
