"""The API key: read from EVALKIT_API_KEY / OPENAI_API_KEY / --api-key-file, sent only as the Authorization
header, and never written anywhere (manifest, samples, summary, report, server argv records, logs, caches,
console output).

Here: those of its tests that run in-process; the others are in tests/integration/test_secrets.py."""

from __future__ import annotations

import json

import pytest

from evalkit.config import load_config
from tests.integration.test_secrets import CANARY


def test_api_key_is_a_secret_in_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_API_KEY", CANARY)
    cfg = load_config({"tasks": ["gsm8k"], "endpoint": "http://127.0.0.1:1/v1"})
    assert cfg.resolved_api_key() == CANARY
    for shown in (repr(cfg), str(cfg), cfg.model_dump_json(), json.dumps(cfg.model_dump(mode="json"))):
        assert CANARY not in shown
