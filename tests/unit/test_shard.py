"""One eval sharded over several endpoints (``--endpoint`` repeated) against real test servers: dispatch by
outstanding requests skews toward the faster endpoint, speed per endpoint and overall, the endpoint of each
sample, a retry sent to another endpoint, resume across endpoints in another order or set, and one-line errors
for an endpoint that serves another model or cannot be reached.

Here: those of its tests that run in-process; the others are in tests/integration/test_shard.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.client.http_client import Client


def test_dispatch_takes_the_least_outstanding_then_round_robin() -> None:
    client = Client(["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1", "http://127.0.0.1:3/v1"], "m")
    assert [client._dispatch(None) for _ in range(3)] == [0, 1, 2]  # ties: round robin
    client.outstanding = [2, 0, 1]
    assert client._dispatch(None) == 1
    assert client.outstanding == [2, 1, 1]
    assert client._dispatch(1) == 2  # a retry leaves the endpoint that failed it, its count moves along
    assert client.outstanding == [2, 0, 2]
    client.outstanding = [1, 3, 3]  # a request failed on the first endpoint, the others are busier
    assert client._dispatch(0) == 1  # still not sent back to the endpoint that failed it
    assert client.outstanding == [0, 4, 3]


def test_a_config_file_and_the_environment_give_a_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.config import load_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text("endpoint: [http://a:1/v1, http://b:2/v1]\n")
    assert load_config({}, cfg).endpoints == ["http://a:1/v1", "http://b:2/v1"]
    monkeypatch.setenv("EVALKIT_ENDPOINT", '["http://a:1", "http://b:2"]')
    assert load_config({}).endpoints == ["http://a:1", "http://b:2"]
    monkeypatch.setenv("EVALKIT_ENDPOINT", "http://a:1")
    assert load_config({}).endpoints == ["http://a:1"]
