"""`evalkit run` against servers that send what evalkit must not take as it comes, end to end over real HTTP
(the test server's faults, ``OVERSIZED_MODES`` and ``Behaviour.gzip_bomb``):

- an error message that quotes the ``Authorization`` header back: the key, the Basic token and URL credentials
  reach neither ``samples.jsonl``, nor the report's sample block, nor stderr;
- tool-call arguments nested 1,500 deep: that sample's ``bad_arguments``, never a RecursionError that ends the
  run (and every resume); 8 MB of arguments: stored cut to 256 Ki characters per text, with a note saying so;
- a replica answering with another ``model``: those requests fail as ``api_error`` naming both ids (retried, as
  the next attempt may reach another replica); ids ``/v1/models`` lists are fine; ``--allow-model-mismatch``;
- a gzip bomb on ``/v1/models`` (and ``/tokenize``), a flood of events, a huge error body: every body read is
  bounded, decompressed size included.
"""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client.clamp import clamp_max_tokens
from evalkit.contracts import GenParams, Request
from evalkit.limits import MAX_STORED_CHARS, STREAM_BASE_BYTES
from evalkit.testing.hostile import HUGE_ARGUMENTS_BYTES, gzip_bomb
from evalkit.testing.server import Behaviour, TestServer
from tests.report_fixtures import sample_data

KEY = "sk-evalkit-canary-0123456789abcdef"
BASIC_USER, BASIC_PASSWORD = "evalkit", "hunter2-canary-pw"
BASIC_TOKEN = "ZXZhbGtpdDpodW50ZXIyLWNhbmFyeS1wdw=="  # base64 of evalkit:hunter2-canary-pw
PROXY = "http://admin:s3cret-proxy-pw@10.0.0.1:3128"


def run(out: Path, url: str, *extra: str, task: str = "gsm8k", limit: int = 3) -> tuple[int, str]:
    """``evalkit run`` in-process, one request at a time (faults hit requests in doc order)."""
    fixed = ["--concurrency", "1", "--num-samples", "1", "--max-attempts", "2", "-q"]
    args = ["run", task, "--endpoint", url, "--limit", str(limit), "-o", str(out), *fixed, *extra]
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def by_doc(out: Path) -> dict[int, dict[str, Any]]:
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {r["doc_id"]: r for r in recs}  # the last record of a doc wins, as on resume


def counts(out: Path, task: str) -> dict[str, int]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return dict(summary["tasks"][task]["counts"])


# ------------------------------------------------------------------- 16: credentials quoted back by the server
@pytest.mark.parametrize("auth", ["bearer", "basic"])
def test_credentials_a_server_quotes_back_are_redacted_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, auth: str
) -> None:
    if auth == "bearer":
        behaviour, secrets = Behaviour(api_key=KEY), [KEY]
        monkeypatch.setenv("EVALKIT_API_KEY", KEY)
    else:
        behaviour = Behaviour(basic_auth=f"{BASIC_USER}:{BASIC_PASSWORD}")
        secrets = [BASIC_PASSWORD, BASIC_TOKEN]
        monkeypatch.delenv("EVALKIT_API_KEY", raising=False)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    secrets.append("s3cret-proxy-pw")
    with TestServer(behaviour) as srv:
        url = srv.url if auth == "bearer" else srv.url.replace("://", f"://{BASIC_USER}:{BASIC_PASSWORD}@")
        msg = f"gateway: upstream {PROXY} refused the request"
        srv.faults = [{"status": 502, "echo_auth": True, "message": msg}] * 2  # both attempts of doc 0
        out = tmp_path / "r"
        code, err = run(out, url)
    assert code == 1 and "1 of 3 requests failed" in err, err
    bad = by_doc(out)[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 2
    assert "HTTP 502: gateway: upstream http://***@10.0.0.1:3128 refused" in bad["error"], bad["error"]
    assert "Authorization: ***" in bad["error"], bad["error"]
    report = (out / "report.html").read_text()
    shown = {
        "samples.jsonl": (out / "samples.jsonl").read_text(),
        "stderr": err,
        "report sample block": json.dumps(sample_data(report)),
        "report.html": report,
    }
    assert "Authorization: ***" in shown["report sample block"]  # the error is in the report, redacted
    for where, text in shown.items():
        for secret in secrets:
            assert secret not in text, (where, secret)


# --------------------------------------------------------------- 17: degenerate tool-call arguments, one sample
def test_arguments_nested_1500_deep_are_that_samples_bad_arguments(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"hostile": "deep_arguments"}]
        out = tmp_path / "r"
        code, err = run(out, srv.url, task="bfcl-simple")
        assert code == 0, err
        recs = by_doc(out)
        bad = recs[0]
        assert bad["status"] == "bad_arguments" and bad["correct"] == {"ast": False}
        assert (
            bad["extraction"].startswith("bad_arguments: arguments of ") and "nested more than 100" in bad["extraction"]
        )
        assert all(recs[d]["status"] == "ok" for d in (1, 2))
        assert counts(out, "bfcl-simple")["bad_arguments"] == 1
        sent = len(srv.requests)
        srv.faults = [{"hostile": "deep_arguments"}]
        code, err = run(out, srv.url, task="bfcl-simple")  # resumes: the degenerate sample is done, not re-sent
        assert code == 0, err
        assert len(srv.requests) == sent


def test_arguments_nested_1500_deep_end_that_conversations_turn(tmp_path: Path) -> None:
    with TestServer(Behaviour(max_model_len=32768)) as srv:  # room for the history with the 3 KB call
        srv.faults = [{"hostile": "deep_arguments"}]
        out = tmp_path / "r"
        code, err = run(out, srv.url, task="bfcl-multi-turn-base", limit=2)
    assert code == 0, err
    recs = by_doc(out)
    assert recs[0]["status"] != "api_error" and recs[0]["correct"] == {"multi_turn": False}
    assert recs[1]["correct"] == {"multi_turn": True}


def test_8_mb_of_arguments_are_stored_cut_with_a_note(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"hostile": "huge_arguments"}]
        out = tmp_path / "r"
        code, err = run(out, srv.url, task="bfcl-simple", limit=4)
    assert code == 0, err
    recs = by_doc(out)
    bad = recs[0]
    full = len('{"pad": "') + HUGE_ARGUMENTS_BYTES + len('"}')
    assert bad["status"] == "bad_arguments"
    assert f"{full:,} characters long, more than the 262,144 evalkit decodes" in bad["extraction"]
    args = bad["tool_calls"][0]["arguments"]
    assert args.startswith('{"pad": "xxx') and args.endswith(
        f"[evalkit: {full - MAX_STORED_CHARS:,} of {full:,} characters cut]"
    )
    assert len(args) < MAX_STORED_CHARS + 100
    assert bad["error"] == f"stored cut to 262,144 characters per text: tool_calls[0].arguments ({full:,} characters)"
    assert all(recs[d]["status"] == "ok" and recs[d]["error"] is None for d in (1, 2, 3))
    assert (out / "samples.jsonl").stat().st_size < 1024**2  # the old store: 67 MB for 4 samples
    report = (out / "report.html").read_text()
    assert (out / "report.html").stat().st_size < 2 * 1024**2
    assert "stored cut to 262,144 characters" in json.dumps(sample_data(report))


# -------------------------------------------------------------------------- 18: a replica of another model
def test_a_response_from_another_model_fails_that_request(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [None, {"model": "other-model"}, {"model": "other-model"}, {"model": "other-model"}]
        out = tmp_path / "r"
        code, err = run(out, srv.url, limit=4)
        assert code == 1 and "1 of 4 requests failed" in err, err
        recs = by_doc(out)
        bad = recs[1]
        assert bad["status"] == "api_error" and bad["attempts"] == 2 and bad["correct"] == {}
        assert "'other-model'" in bad["error"] and "'test-model'" in bad["error"], bad["error"]
        assert "--allow-model-mismatch" in bad["error"]
        assert recs[2]["status"] != "api_error" and recs[2]["attempts"] == 2  # its retry reached a good replica
        assert counts(out, "gsm8k")["api_error"] == 1
        code, err = run(out, srv.url, limit=4)  # every replica right again: the failed request is answered
    assert code == 0, err
    assert counts(out, "gsm8k")["api_error"] == 0


def test_ids_the_endpoint_lists_are_accepted(tmp_path: Path) -> None:
    """vLLM with --served-model-name primary alias answers a request for ``alias`` naming ``primary``."""
    with TestServer(Behaviour(models=["primary", "alias"])) as srv:
        srv.faults = [{"model": "primary"}] * 3
        code, err = run(tmp_path / "r", srv.url, "--model", "alias")
    assert code == 0, err
    assert all(r["status"] != "api_error" and r["attempts"] == 1 for r in by_doc(tmp_path / "r").values())


def test_allow_model_mismatch_accepts_any_model(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"model": "other-model"}] * 3
        code, err = run(tmp_path / "r", srv.url, "--allow-model-mismatch")
        assert code == 0, err
        assert all(r["status"] != "api_error" for r in by_doc(tmp_path / "r").values())
        shown = CliRunner().invoke(app, ["config", "show", "gsm8k", "--endpoint", srv.url, "--allow-model-mismatch"])
    assert shown.exit_code == 0, shown.output
    line = next(ln for ln in shown.output.splitlines() if ln.startswith("allow_model_mismatch "))
    assert line.split()[1:] == ["True", "command", "line"]
    default = CliRunner().invoke(app, ["config", "show", "gsm8k"])
    assert (
        next(ln for ln in default.output.splitlines() if ln.startswith("allow_model_mismatch ")).split()[1] == "False"
    )


# ------------------------------------------------------------------------------------ 19: bounded bodies
BOMB_BYTES = 512 * 1024**2


def test_a_gzip_bomb_on_models_stops_early_with_one_line(tmp_path: Path) -> None:
    gzip_bomb(BOMB_BYTES)  # built (and cached) before memory is traced: ~0.5 MB of gzip
    with TestServer(Behaviour(gzip_bomb={"paths": ["/v1/models"], "bytes": BOMB_BYTES})) as srv:
        tracemalloc.start()
        t0 = time.monotonic()
        try:
            code, err = run(tmp_path / "r", srv.url)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line and "/models answered more than 16 MiB (decompressed)" in line, err
    assert peak < 200 * 1024**2, f"peak {peak / 1024**2:.0f} MiB"  # the old read: the whole 512 MiB, twice
    assert time.monotonic() - t0 < 30


def test_a_gzip_bomb_on_tokenize_is_read_no_further_than_the_bound() -> None:
    """The clamp's /tokenize read stops at the bound: the prompt's byte count stands in for its length."""
    gzip_bomb(BOMB_BYTES)
    with TestServer(Behaviour(gzip_bomb={"paths": ["/tokenize"], "bytes": BOMB_BYTES})) as srv:
        req = Request(
            task="t", doc_id=0, sample_index=0, prompt="Question: 1+1?\nAnswer:" * 50, gen=GenParams(max_tokens=4000)
        )
        tracemalloc.start()
        try:
            out, clamp = asyncio.run(clamp_max_tokens([req], srv.url, "test-model", "completions", 4096))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert clamp is not None and clamp["prompt_length_from"] == "utf8-bytes"
    assert out[0].gen.max_tokens < 4000
    assert peak < 200 * 1024**2, f"peak {peak / 1024**2:.0f} MiB"


def test_a_stream_past_its_bound_fails_that_request(tmp_path: Path) -> None:
    with TestServer() as srv:
        srv.faults = [{"hostile": "flood"}] * 2
        out = tmp_path / "r"
        code, err = run(out, srv.url, "--max-tokens", "32")
    assert code == 1 and "1 of 3 requests failed" in err, err
    bad = by_doc(out)[0]
    assert bad["status"] == "api_error" and bad["attempts"] == 2 and bad["response"] is None
    assert f"went past {(STREAM_BASE_BYTES + 32 * 4096) / 1024**2:.1f} MiB" in bad["error"], bad["error"]
    assert (out / "samples.jsonl").stat().st_size < 1024**2


def test_a_huge_error_message_is_cut(tmp_path: Path) -> None:
    """A long message is cut to 500 characters; of a 5 MB error body only the first 64 KiB are read (no longer
    JSON then: its start stands for the message)."""
    with TestServer() as srv:
        srv.faults = [{"status": 400, "message": "bad request: " + "x" * n} for n in (20_000, 5_000_000)]
        out = tmp_path / "r"
        code, err = run(out, srv.url, "--max-error-rate", "1")
    assert code == 0, err
    long, huge = by_doc(out)[0], by_doc(out)[1]
    assert long["status"] == huge["status"] == "api_error"
    assert long["error"].startswith("HTTP 400: bad request: xxx") and len(long["error"]) <= 510, long["error"][:80]
    assert huge["error"].startswith('HTTP 400: {"error":{"message":"bad request: xxx') and len(huge["error"]) <= 510
