"""Credentials in the endpoint URL and redirects.

``user:password@`` in ``--endpoint`` is sent as HTTP Basic auth (the API key wins when one is set, with a
one-line warning) and appears in no file of the run dir, no console line and no record (``***@`` there).
No HTTP request evalkit makes follows a redirect: credentials never reach another origin, and a redirected
endpoint is one line naming the URL to use instead of a run of failed requests.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.auto_concurrency import _server_counts
from evalkit.client.clamp import clamp_max_tokens
from evalkit.client.http_client import Client
from evalkit.client.model_discovery import list_models
from evalkit.config import ServerConfig
from evalkit.contracts import GenParams, Request
from evalkit.errors import EndpointError
from evalkit.server.metrics import scrape
from evalkit.server.vllm_process import VLLMServer
from evalkit.testing.server import Behaviour, TestServer
from tests.integration.test_secrets import files_holding, run_cli, searched_tree

USER, PASSWORD = "alice", "s3cretPW-7d1c-DO-NOT-LEAK"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
KEY = "sk-canary-redirect-DO-NOT-LEAK"


def with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{PASSWORD}@", 1)


# ----------------------------------------------------------------------------------- URL credentials
@pytest.mark.parametrize("api_key", [None, KEY], ids=["basic-auth", "api-key-wins"])
def test_url_password_is_sent_as_basic_auth_and_written_nowhere(api_key: str | None, tmp_path: Path) -> None:
    """The real CLI in a process, every byte of its run dir, prompt cache, stdout and stderr searched."""
    work = searched_tree(tmp_path)
    env = {"EVALKIT_CACHE_DIR": str(work / "cache"), "TQDM_DISABLE": "1"}
    if api_key:
        env["EVALKIT_API_KEY"] = api_key
    behaviour = Behaviour(api_key=api_key, basic_auth=f"{USER}:{PASSWORD}", correct_ratio=0.5)
    with TestServer(behaviour) as srv:
        srv.faults = [None, {"status": 401, "message": "Unauthorized"}]  # an error text is stored too
        args = ["run", "gsm8k", "--endpoint", with_userinfo(srv.url), "-o", "run", "--limit", "3"]
        p = run_cli([*args, "--max-tokens", "32", "--concurrency", "1", "--max-error-rate", "0.5"], work, env)
        assert p.returncode == 0, p.stderr
        sent = {r.headers.get("Authorization") for r in srv.requests}
        assert sent == {f"Bearer {api_key}" if api_key else BASIC}
    run = work / "run"
    assert {"manifest.json", "samples.jsonl", "summary.json", "report.html"} <= {f.name for f in run.iterdir()}
    for secret in (PASSWORD, BASIC.split()[1]):
        assert files_holding(work, secret) == []
        assert secret not in p.stdout and secret not in p.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["endpoint"]["base_url"] == srv.url
    assert with_userinfo(srv.url).replace(f"{USER}:{PASSWORD}", "***") in manifest["command"]
    server = json.loads((run / "summary.json").read_text())["tasks"]["gsm8k"]["server"]
    assert server["available"] is True  # /metrics was read from the bare URL, with the same credentials
    warnings = [line for line in p.stderr.splitlines() if "user:password in the endpoint URL is ignored" in line]
    assert len(warnings) == (1 if api_key else 0), p.stderr


# ------------------------------------------------------------------------------------------- redirects
@pytest.fixture
def origins() -> Iterator[tuple[TestServer, TestServer]]:
    """(the endpoint, wanting KEY; the other origin it may redirect to, which takes any request)."""
    with TestServer(Behaviour()) as other, TestServer(Behaviour(api_key=KEY)) as endpoint:
        yield endpoint, other


def assert_nothing_reached(other: TestServer) -> None:
    """No request reached the other origin (so no credentials did either)."""
    leaked = [(m, p) for m, p, h in other.seen if any(k.lower() == "authorization" for k in h) or KEY in str(h)]
    assert leaked == []
    assert [(m, p) for m, p, _ in other.seen] == []


def _request() -> Request:
    return Request(task="t", doc_id=0, sample_index=0, prompt="Question: 1+1?\nAnswer:", gen=GenParams(max_tokens=48))


def _models(endpoint: TestServer) -> str:
    with pytest.raises(EndpointError) as err:
        list_models(endpoint.url, KEY)
    return str(err.value)


def _completions(endpoint: TestServer) -> str:
    async def go() -> str | None:
        async with Client(endpoint.url, "test-model", api_key=KEY) as c:
            resp = await c.generate(_request())
            assert resp.attempts == 1
            return resp.error

    return str(asyncio.run(go()))


def _metrics(endpoint: TestServer) -> str:
    return str(scrape(endpoint.base_url, headers={"Authorization": f"Bearer {KEY}"}))


def _auto_concurrency_metrics(endpoint: TestServer) -> str:
    async def go() -> dict[str, float]:
        async with aiohttp.ClientSession() as session:
            return await _server_counts(session, endpoint.base_url + "/metrics")

    return str(asyncio.run(go()))


def _tokenize(endpoint: TestServer) -> str:
    """A prompt that may not fit max_model_len=64 by its byte count: /tokenize is asked for its length."""
    _, clamp = asyncio.run(clamp_max_tokens([_request()], endpoint.url, "test-model", "completions", 64, KEY))
    assert clamp is not None
    return str(clamp["prompt_length_from"])


def _server_health(endpoint: TestServer) -> str:
    server = VLLMServer(ServerConfig(model="m", api_key=KEY), Path("unused-run-dir"))  # nothing is written there
    server.port = endpoint.port
    return str(server._get("/health")[0])


def _moved(what: str) -> Callable[[int, TestServer], str]:
    return lambda status, other: (
        f"HTTP {status}: the endpoint redirected to {other.url}/{what} (use that URL as --endpoint)"
    )


PROBES: dict[str, tuple[Callable[[TestServer], str], Callable[[int, TestServer], str]]] = {
    # path probed: (what evalkit does there, what it must come to when redirected)
    "/v1/models": (_models, _moved("models")),
    "/v1/completions": (_completions, _moved("completions")),
    "/metrics": (_metrics, lambda status, other: "None"),
    "/metrics (auto concurrency)": (_auto_concurrency_metrics, lambda status, other: "{}"),
    "/tokenize": (_tokenize, lambda status, other: "utf8-bytes"),
    "/health (--serve)": (_server_health, lambda status, other: str(status)),
}


@pytest.mark.parametrize("status", [307, 301, 302])
@pytest.mark.parametrize("path", list(PROBES))
def test_no_request_follows_a_redirect(path: str, status: int, origins: tuple[TestServer, TestServer]) -> None:
    endpoint, other = origins
    endpoint.behaviour.redirect = {"status": status, "to": other.base_url}
    probe, expected = PROBES[path]
    outcome = probe(endpoint)
    assert_nothing_reached(other)
    assert outcome == expected(status, other)


def invoke(endpoint: str, out: Path) -> tuple[int, str]:
    """``evalkit run gsm8k`` in-process on 2 problems with EVALKIT_API_KEY=KEY: (exit code, stdout + stderr)."""
    args = ["run", "gsm8k", "--endpoint", endpoint, "-o", str(out), "--limit", "2", "--max-tokens", "16", "--no-report"]
    res = CliRunner().invoke(app, args, env={"EVALKIT_API_KEY": KEY, "OPENAI_API_KEY": None})
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout + res.stderr


@pytest.mark.parametrize("status", [301, 302, 307])
def test_a_redirected_endpoint_fails_fast_in_one_line(
    status: int, origins: tuple[TestServer, TestServer], tmp_path: Path
) -> None:
    """Not one api_error per request (a 301/302 turned each POST into a GET): exit 2 before any is sent, the
    target shown without the credentials its Location may carry."""
    endpoint, other = origins
    endpoint.behaviour.redirect = {"status": status, "to": with_userinfo(other.base_url)}
    code, output = invoke(endpoint.url, tmp_path / "run")
    assert code == 2, output
    assert output.strip().splitlines()[-1] == (
        f"evalkit: error: HTTP {status}: the endpoint redirected to {other.url}/models (use that URL as --endpoint)"
    )
    assert PASSWORD not in output
    assert endpoint.requests == [] and not (tmp_path / "run" / "samples.jsonl").exists()
    assert_nothing_reached(other)


def test_metrics_redirected_elsewhere_gets_no_api_key(origins: tuple[TestServer, TestServer], tmp_path: Path) -> None:
    """Only /metrics redirects (307) to another origin: the run completes, its server metrics are reported
    unavailable, and the scrape that would have carried the key there is not made."""
    endpoint, other = origins
    endpoint.behaviour.redirect = {"status": 307, "to": other.base_url, "paths": ["/metrics"]}
    code, output = invoke(endpoint.url, tmp_path / "run")
    assert code == 0, output
    assert_nothing_reached(other)
    assert {r.headers.get("Authorization") for r in endpoint.requests} == {f"Bearer {KEY}"}
    summary: dict[str, Any] = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["tasks"]["gsm8k"]["server"] == {"available": False}
