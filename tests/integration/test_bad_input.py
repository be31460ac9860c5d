"""Bad input against the test server or in a fresh process: each mistake gives exactly one line on stderr
(``evalkit: error: ...``) naming the problem and the fix, exit code 2, and nothing already computed is lost.

- settings, endpoints, task files and output dirs: most cases run the CLI in-process (typer's CliRunner); those
  that depend on ``evalkit.cli.main`` (click's own parse errors, exit codes) or on a clean process (timing) run
  ``python -m evalkit.cli``; settings files nested deep run in a fresh process too (its own stack);
- input and environment checks: non-finite numbers, out-of-range seeds, GPU counts and prices are bad input; a
  mistyped EVALKIT_* variable, an unwritable prompt cache and a descriptor limit too small for the concurrency
  are each said in one line; a prompt cache that does not hold every document is rebuilt; a client out of file
  descriptors is not a server failure.

The cases that need no server: tests/unit/test_bad_input.py."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest

from evalkit.tasks.catalogue import builtin_tasks_dir
from evalkit.testing.server import Behaviour, TestServer
from tests.cli_errors import assert_one_error_line, invoke, run_cli
from tests.unit.test_bad_input import COMMANDS

REPO = Path(__file__).resolve().parents[2]


class FakeEndpoint:
    """An HTTP server that answers every request with one fixed response (and counts the requests)."""

    def __init__(self, status: int, content_type: str, body: bytes, encoding: str | None = None) -> None:
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *a: object) -> None:
                pass

            def _answer(self) -> None:
                outer.hits.append(f"{self.command} {self.path}")
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if encoding is not None:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


NGINX_PAGE = b"<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>"


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with TestServer(Behaviour(api_key=None)) as srv:
        yield srv


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[TestServer]:
    with TestServer(Behaviour(api_key="the-right-key")) as srv:
        yield srv


def mini_task_dir(root: Path, *, broken_line: int | None = None, missing_test: bool = False) -> Path:
    """A --tasks-dir with task ``gsm8k-mini``: lm-eval's gsm8k on a few vendored rows."""
    data = builtin_tasks_dir() / "data" / "gsm8k"
    folder = root / "mytasks"
    (folder / "d").mkdir(parents=True)
    (folder / "d" / "train.jsonl").write_bytes(b"\n".join((data / "train.jsonl").read_bytes().splitlines()[:20]))
    rows = (data / "test.jsonl").read_bytes().splitlines()[:6]
    if broken_line is not None:
        rows[broken_line - 1] = rows[broken_line - 1][:40]  # cut mid-record
    if not missing_test:
        (folder / "d" / "test.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    (folder / "mini.yaml").write_text(
        'name: gsm8k-mini\nkind: lm-eval\nversion: "1"\nlm_eval:\n  base: gsm8k/gsm8k.yaml\n'
        "data:\n  train: d/train.jsonl\n  test: d/test.jsonl\n"
    )
    return folder


# ------------------------------------------------------------------------------------- settings and flags
Case = Callable[[Path, str], tuple[list[str], dict[str, str] | None]]

CONFIG_CASES: dict[str, tuple[Case, tuple[str, ...]]] = {
    "unknown key in config file": (
        lambda tmp, url: (["run", "gsm8k", "-c", str(_write(tmp / "c.yaml", f"endpoint: {url}\nlimt: 3\n"))], None),
        ("unknown setting 'limt'", "c.yaml", "known settings:", "limit"),
    ),
    "unknown key in the server section": (
        lambda tmp, url: (["run", "gsm8k", "-c", str(_write(tmp / "c.yaml", "server:\n  model: m\n  tp: 2\n"))], None),
        ("unknown setting 'server.tp'",),
    ),
    "top_p above 1": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--top-p", "2"], None),
        ("invalid value for 'top_p'", "less than or equal to 1", "got 2.0"),
    ),
    "concurrency 0": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--concurrency", "0"], None),
        ("invalid value for 'concurrency'", "positive integer or 'auto'", "got '0'"),
    ),
    "concurrency not a number": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--concurrency", "lots"], None),
        ("invalid value for 'concurrency'", "got 'lots'"),
    ),
    "limit 0": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--limit", "0"], None),
        ("invalid value for 'limit'", "greater than or equal to 1"),
    ),
    "max_error_rate above 1": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--max-error-rate", "5"], None),
        ("invalid value for 'max_error_rate'",),
    ),
    "endpoint kind": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--endpoint-kind", "responses"], None),
        ("invalid value for 'endpoint_kind'", "'completions' or 'chat'"),
    ),
    "chat-template-kwargs not JSON": (
        lambda tmp, url: (
            ["run", "aime25", "--endpoint", url, "--chat-template-kwargs", "{enable_thinking: true"],
            None,
        ),
        ("invalid value for 'chat_template_kwargs'", "not valid JSON"),
    ),
    "chat-template-kwargs not an object": (
        lambda tmp, url: (["run", "aime25", "--endpoint", url, "--chat-template-kwargs", "[1, 2]"], None),
        ("invalid value for 'chat_template_kwargs'", "must be a JSON object"),
    ),
    "bad value from EVALKIT_* env": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url], {"EVALKIT_TEMPERATURE": "warm"}),
        ("invalid value for 'temperature'", "EVALKIT_* environment", "got 'warm'"),
    ),
    "list setting from env not JSON": (
        lambda tmp, url: (["run", "--endpoint", url], {"EVALKIT_TASKS": "gsm8k"}),
        ("EVALKIT_TASKS does not parse", "JSON"),
    ),
    "config file does not parse (YAML)": (
        lambda tmp, url: (["run", "gsm8k", "-c", str(_write(tmp / "c.yaml", "endpoint: [http://x\nlimit: 3\n"))], None),
        ("config file", "c.yaml", "does not parse"),
    ),
    "config file does not parse (TOML)": (
        lambda tmp, url: (["run", "gsm8k", "-c", str(_write(tmp / "c.toml", "limit = \n"))], None),
        ("config file", "c.toml", "does not parse", "line 1"),
    ),
    "config file is not a mapping": (
        lambda tmp, url: (["run", "gsm8k", "-c", str(_write(tmp / "c.yaml", "- gsm8k\n"))], None),
        ("c.yaml", "must hold a mapping"),
    ),
    "config file missing": (
        lambda tmp, url: (["run", "gsm8k", "-c", str(tmp / "nope.yaml")], None),
        ("cannot read config file", "nope.yaml", "No such file"),
    ),
    "api_key in a config file": (
        lambda tmp, url: (["run", "gsm8k", "-c", str(_write(tmp / "c.yaml", "api_key: sk-123\n"))], None),
        ("api_key does not belong in a file", "EVALKIT_API_KEY"),
    ),
    "--server-env without =": (
        lambda tmp, url: (["run", "gsm8k", "--serve", "m", "--server-env", "VLLM_USE_DEEP_GEMM"], None),
        ("--server-env wants KEY=VALUE", "'VLLM_USE_DEEP_GEMM'"),
    ),
    "--endpoint and --serve together": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--serve", "m", "-o", str(tmp / "o")], None),
        ("either --endpoint or --serve, not both",),
    ),
    "no endpoint at all": (
        lambda tmp, url: (["run", "gsm8k"], None),
        ("no endpoint", "--endpoint URL", "--serve MODEL"),
    ),
    "no task": (
        lambda tmp, url: (["run", "--endpoint", url], None),
        ("no task given", "evalkit tasks list"),
    ),
    "unknown task, close to a known one": (
        lambda tmp, url: (["run", "gsm8kk", "--endpoint", url], None),
        ("unknown task 'gsm8kk'", "did you mean 'gsm8k'?"),
    ),
    "unknown task, nothing close": (
        lambda tmp, url: (["run", "mmlu", "--endpoint", url], None),
        ("unknown task 'mmlu'", "known tasks: aime25, bfcl-irrelevance,"),
    ),
    "endpoint not http": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", "ftp://example.org/v1"], None),
        ("is not an http(s) URL", "--endpoint http://"),
    ),
    "--tasks-dir missing": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--tasks-dir", str(tmp / "nodir")], None),
        ("tasks dir not found", "nodir"),
    ),
    "--api-key-file missing": (
        lambda tmp, url: (["run", "gsm8k", "--endpoint", url, "--api-key-file", str(tmp / "key.txt")], None),
        ("cannot read --api-key-file", "key.txt"),
    ),
    "evalkit report on a non-run dir": (
        lambda tmp, url: (["report", str(tmp)], None),
        ("is not a run dir", "no summary.json or samples.jsonl"),
    ),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", list(CONFIG_CASES))
def test_bad_settings_give_one_line_and_exit_2(name: str, tmp_path: Path, server: TestServer) -> None:
    build, needles = CONFIG_CASES[name]
    args, env = build(tmp_path, server.url)
    before = len(server.requests)
    assert_one_error_line(invoke(args, env), *needles)
    assert len(server.requests) == before, "no generation request may be sent for bad input"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", "gsm8k", "--limit", "abc"], ("Invalid value for '--limit'", "--help")),
        (["run", "gsm8k", "--top-p"], ("'--top-p' requires an argument",)),
        (["run", "gsm8k", "--temprature", "0.5"], ("No such option: --temprature",)),
        (["runn", "gsm8k"], ("No such command 'runn'",)),
    ],
    ids=["value-not-int", "missing-value", "unknown-flag", "unknown-command"],
)
def test_click_parse_errors_are_one_line_too(args: list[str], needles: tuple[str, ...]) -> None:
    """Errors found by the argument parser itself (through ``main()``), not by evalkit's validation."""
    assert_one_error_line(run_cli(args), *needles)


# ---------------------------------------------------------------------------------------------- endpoint
def test_unreachable_endpoint_fails_within_seconds(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = invoke(["run", "gsm8k", "--endpoint", f"http://127.0.0.1:{port}", "-o", str(tmp_path / "o")])
    assert_one_error_line(out, f"cannot connect to http://127.0.0.1:{port}/v1", "is the server running")
    assert out.elapsed < 15
    assert not (tmp_path / "o").exists(), "a run that never started leaves no empty run dir behind"


@pytest.mark.parametrize("url", ["htp:/host", "http:/127.0.0.1:8000", "htps://host/v1"])
def test_a_mistyped_scheme_is_an_invalid_url_not_a_failed_connect(url: str, tmp_path: Path) -> None:
    out = invoke(["run", "gsm8k", "--endpoint", url, "-o", str(tmp_path / "o")])
    assert_one_error_line(out, f"endpoint {url!r} is not", "pass e.g. --endpoint http://127.0.0.1:8000/v1")
    assert "cannot connect" not in out.stderr and not (tmp_path / "o").exists()


def test_endpoint_that_never_answers_times_out(tmp_path: Path) -> None:
    """A server that accepts the connection but never answers: the connect/read timeout ends the wait."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # the kernel completes handshakes; nobody ever reads or answers
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        out = invoke(["run", "gsm8k", "--endpoint", url], env={"EVALKIT_CONNECT_TIMEOUT_S": "1"})
    assert_one_error_line(out, "did not answer within 1s")
    assert out.elapsed < 15


def test_wrong_model_name_lists_the_served_ones(tmp_path: Path) -> None:
    with TestServer(Behaviour(models=["qwen3-8b", "llama-3.1-8b"])) as srv:
        out = invoke(["run", "gsm8k", "--endpoint", srv.url, "--model", "qwen3-8B", "-o", str(tmp_path / "o")])
        assert_one_error_line(out, "model 'qwen3-8B' is not served", "served: qwen3-8b, llama-3.1-8b", "--model")
        out = invoke(["run", "gsm8k", "--endpoint", srv.url, "-o", str(tmp_path / "o")])
        assert_one_error_line(out, "serves several models (qwen3-8b, llama-3.1-8b)", "--model")
        assert srv.requests == []


@pytest.mark.parametrize("env", [{}, {"EVALKIT_API_KEY": "a-wrong-key"}], ids=["missing-key", "wrong-key"])
def test_401_says_the_key_is_wrong_or_missing(
    env: dict[str, str], keyed_server: TestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("EVALKIT_API_KEY", raising=False)
    out = invoke(["run", "gsm8k", "--endpoint", keyed_server.url, "-o", str(tmp_path / "o")], env=env)
    line = assert_one_error_line(out, "401", "API key is wrong or missing", "EVALKIT_API_KEY")
    assert "a-wrong-key" not in line and "the-right-key" not in line


@pytest.mark.parametrize(
    ("status", "ctype", "body", "needles"),
    [
        (200, "text/html", NGINX_PAGE, ("answered text/html, not JSON", "not an OpenAI-compatible API")),
        (200, "text/plain", b"OK", ("answered text/plain, not JSON",)),
        (200, "application/json", b'{"status": "ok"}', ("JSON without a 'data' list",)),
        (200, "application/json", b"{not json", ("JSON without a 'data' list",)),
        (404, "text/html", b"<html>404 Not Found</html>", ("answered 404", "ends in /v1")),
        (502, "text/html", b"<html>502 Bad Gateway</html>", ("answered HTTP 502", "check the server log")),
    ],
    ids=["html-page", "plain-text", "json-no-data", "broken-json", "404-html", "502-html"],
)
def test_endpoint_that_is_not_an_openai_api(
    status: int, ctype: str, body: bytes, needles: tuple[str, ...], tmp_path: Path
) -> None:
    with FakeEndpoint(status, ctype, body) as fake:
        out = invoke(["run", "gsm8k", "--endpoint", fake.url, "-o", str(tmp_path / "o")])
    assert_one_error_line(out, *needles)
    assert fake.hits == ["GET /v1/models"], "one request, no SDK retries, no generation"


def test_models_body_that_does_not_decompress(tmp_path: Path) -> None:
    with FakeEndpoint(200, "application/json", b'{"data": [not gzip at all', encoding="gzip") as fake:
        out = invoke(["run", "gsm8k", "--endpoint", fake.url, "-o", str(tmp_path / "o")])
    assert_one_error_line(out, "/models sent a body that does not decode (bad compression)")
    assert fake.hits == ["GET /v1/models"]


# ------------------------------------------------------------------------------------------------- data
def test_corrupt_data_file_names_file_and_line(tmp_path: Path, server: TestServer) -> None:
    folder = mini_task_dir(tmp_path, broken_line=3)
    out = invoke(
        [
            "run",
            "gsm8k-mini",
            "--tasks-dir",
            str(folder),
            "--endpoint",
            server.url,
            "--limit",
            "2",
            "-o",
            str(tmp_path / "o"),
        ]
    )
    assert_one_error_line(out, f"{folder / 'd' / 'test.jsonl'}:3:", "not valid JSON")


def test_missing_data_file_names_the_file(tmp_path: Path, server: TestServer) -> None:
    folder = mini_task_dir(tmp_path, missing_test=True)
    out = invoke(["run", "gsm8k-mini", "--tasks-dir", str(folder), "--endpoint", server.url, "-o", str(tmp_path / "o")])
    assert_one_error_line(out, "gsm8k-mini", "split 'test' not found", str(folder / "d" / "test.jsonl"))


def test_broken_task_file_in_tasks_dir(tmp_path: Path, server: TestServer) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "x.yaml").write_text("name: x\nkind: lm-eval\nversion: [1\n")
    out = invoke(["run", "x", "--tasks-dir", str(folder), "--endpoint", server.url])
    assert_one_error_line(out, str(folder / "x.yaml"), "not valid YAML")


# ------------------------------------------------------------------------------------------- filesystem
def test_output_dir_not_writable(tmp_path: Path, server: TestServer) -> None:
    """Root ignores permission bits, so the unwritable dir is one below a regular file."""
    (tmp_path / "file").write_text("not a folder")
    before = len(server.requests)
    out = invoke(["run", "gsm8k", "--endpoint", server.url, "--limit", "1", "-o", str(tmp_path / "file" / "sub")])
    assert_one_error_line(out, "output dir", "file/sub", "is not writable", "--output-dir")
    assert len(server.requests) == before


def test_port_in_use_for_serve_is_refused_before_launching(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        out = invoke(
            [
                "run",
                "gsm8k",
                "--serve",
                "some/model",
                "--port",
                str(port),
                "--startup-timeout",
                "5",
                "-o",
                str(tmp_path / "o"),
            ]
        )
    assert_one_error_line(out, f"port {port} on 127.0.0.1 is in use", "--port")
    assert not (tmp_path / "o" / "server.log").exists(), "nothing may be launched"
    assert out.elapsed < 15


# ------------------------------------------------------------------------------------ nothing is lost
def test_bad_input_against_an_existing_run_leaves_it_untouched(tmp_path: Path, server: TestServer) -> None:
    out_dir = tmp_path / "run"
    base = [
        "run",
        "gsm8k",
        "--endpoint",
        server.url,
        "--limit",
        "3",
        "--max-tokens",
        "32",
        "--concurrency",
        "3",
        "-o",
        str(out_dir),
        "--no-report",
    ]
    first = invoke(base)
    assert first.code == 0, first.stderr
    files = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    assert {"manifest.json", "samples.jsonl", "summary.json"} <= set(files)
    sent = len(server.requests)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    mistakes = [
        (
            ["run", "gsm8k", "--endpoint", server.url, "--limit", "3", "--max-tokens", "64", "-o", str(out_dir)],
            ("holds a run with a different config", "--fresh"),
        ),
        ([*base, "--model", "other"], ("model 'other' is not served",)),
        ([*base[:3], dead, *base[4:]], ("cannot connect",)),
        ([*base, "--top-p", "7"], ("invalid value for 'top_p'",)),
    ]
    for args, needles in mistakes:
        assert_one_error_line(invoke(args), *needles)
        assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == files, args
    assert len(server.requests) == sent


WARNING = "evalkit: warning: "


@pytest.fixture(scope="module")
def fast_server() -> Iterator[TestServer]:
    with TestServer(Behaviour(fast=True)) as srv:
        yield srv


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(WARNING)]


# ------------------------------------------------------------------------------------------ bad numbers
NOT_FINITE = {
    "--temperature inf": (["--temperature", "inf"], None, None, "temperature"),
    "--top-p nan": (["--top-p", "nan"], None, None, "top_p"),
    "--idle-timeout inf": (["--idle-timeout", "inf"], None, None, "idle_timeout_s"),
    "--max-error-rate nan": (["--max-error-rate", "nan"], None, None, "max_error_rate"),
    "EVALKIT_TEMPERATURE=inf": ([], {"EVALKIT_TEMPERATURE": "inf"}, None, "temperature"),
    "EVALKIT_CONNECT_TIMEOUT_S=nan": ([], {"EVALKIT_CONNECT_TIMEOUT_S": "nan"}, None, "connect_timeout_s"),
    "EVALKIT_MAX_RETRY_S=-inf": ([], {"EVALKIT_MAX_RETRY_S": "-inf"}, None, "max_retry_s"),
    "yaml max_retry_s: .inf": ([], None, ("c.yaml", "max_retry_s: .inf\n"), "max_retry_s"),
    "toml temperature = inf": ([], None, ("c.toml", "temperature = inf\n"), "temperature"),
    "yaml server startup_timeout_s: .nan": (
        [],
        None,
        ("c.yaml", "server:\n  model: m\n  startup_timeout_s: .nan\n"),
        "server.startup_timeout_s",
    ),
}


@pytest.mark.parametrize("name", list(NOT_FINITE))
def test_non_finite_numbers_are_refused(name: str, tmp_path: Path, fast_server: TestServer) -> None:
    flags, env, config, field = NOT_FINITE[name]
    args = ["run", "gsm8k", *flags, "-o", str(tmp_path / "o")]
    if config is not None:
        (tmp_path / config[0]).write_text(config[1])
        args += ["-c", str(tmp_path / config[0])]
    if "server" not in field:
        args += ["--endpoint", fast_server.url]
    before = len(fast_server.requests)
    assert_one_error_line(invoke(args, env), f"'{field}'", "finite number")  # names the setting and the fix
    assert len(fast_server.requests) == before


@pytest.mark.parametrize(
    ("flags", "env"),
    [([], {"EVALKIT_SEED": "99999999999999999999"}), (["--seed", str(2**63)], None)],
    ids=["env-20-digits", "flag-2^63"],
)
def test_seed_outside_int64_is_refused(flags: list[str], env: dict[str, str] | None, fast_server: TestServer) -> None:
    out = invoke(["run", "gsm8k", "--endpoint", fast_server.url, *flags], env)
    assert_one_error_line(out, "invalid value for 'seed'", "signed 64-bit integer", str(2**63 - 1))


@pytest.mark.parametrize(
    ("flags", "env", "field", "bound"),
    [
        (["--gpus-billed", "99999999999999999999"], None, "gpus_billed", "1000000"),
        (["--gpus-billed", "1000001"], None, "gpus_billed", "1000000"),
        ([], {"EVALKIT_GPUS_BILLED": str(2**64)}, "gpus_billed", "1000000"),
        (["--cost-per-gpu-hour", "1e308"], None, "cost_per_gpu_hour", "1000000"),
    ],
    ids=["gpus-20-digits", "gpus-1000001", "gpus-env-2^64", "cost-1e308"],
)
def test_a_price_or_gpu_count_past_its_bound_is_refused_before_anything_is_written(
    flags: list[str], env: dict[str, str] | None, field: str, bound: str, tmp_path: Path, fast_server: TestServer
) -> None:
    """--gpus-billed 99999999999999999999 ended the run in a traceback writing manifest.json (past 64 bits), and
    a price of 1e308 made the cost $inf: both are refused in one line before a request is sent."""
    before = len(fast_server.requests)
    price = [] if field == "cost_per_gpu_hour" else ["--cost-per-gpu-hour", "2"]
    out = invoke(["run", "gsm8k", "--endpoint", fast_server.url, *price, *flags, "-o", str(tmp_path / "o")], env)
    assert_one_error_line(out, f"invalid value for '{field}'", f"less than or equal to {bound}")
    assert len(fast_server.requests) == before and not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------- unknown environment
def test_unknown_evalkit_variable_is_named_with_the_closest_known_one(fast_server: TestServer) -> None:
    env = {
        "EVALKIT_TEMPERATUR": "0.5",
        "EVALKIT_XYZZY": "1",
        # read by evalkit outside the run settings, or a nested/mapping setting: no warning
        "EVALKIT_CACHE_DIR": os.environ.get("EVALKIT_CACHE_DIR", ""),
        "EVALKIT_CHROMIUM": "x",
        "EVALKIT_SERVER__ENV__FOO": "1",
        "EVALKIT_SERVER__MAX_NUM_SEQS": "8",
        "EVALKIT_API_KEY": "k",
    }
    out = invoke(["run", "--endpoint", fast_server.url], env)
    assert out.code == 2  # no task given: the warnings come first
    mine = [w for w in warnings(out.stderr) if any(name in w for name in env)]
    assert mine == [
        f"{WARNING}environment variable EVALKIT_TEMPERATUR is not an evalkit setting and is ignored; "
        "did you mean EVALKIT_TEMPERATURE?",
        f"{WARNING}environment variable EVALKIT_XYZZY is not an evalkit setting and is ignored; "
        "evalkit run --help lists the settings",
    ]


# ---------------------------------------------------------------------------------------- prompt cache
def _cache_file(cache: Path) -> Path:
    [path] = (cache / "prompts").glob("gsm8k-mini-*.json")
    return path


def _truncated(data: dict, keep_count: bool) -> dict:
    entries = data["entries"][:2]
    if keep_count:  # count and checksum rewritten to match: only the data file tells that documents are missing
        return {**data, "entries": entries, "documents": 2, "sha256": hashlib.sha256(orjson.dumps(entries)).hexdigest()}
    return {**data, "entries": entries}


def _edited(data: dict) -> dict:
    entries = [dict(e) for e in data["entries"]]
    entries[0]["context"] = entries[0]["context"].replace("Question:", "Q:", 1)
    return {**data, "entries": entries}


@pytest.mark.slow
def test_a_prompt_cache_missing_documents_is_rebuilt(tmp_path: Path, fast_server: TestServer) -> None:
    folder = mini_task_dir(tmp_path)
    cache = tmp_path / "cache"
    env = {"EVALKIT_CACHE_DIR": str(cache)}
    base = [
        "run",
        "gsm8k-mini",
        "--tasks-dir",
        str(folder),
        "--endpoint",
        fast_server.url,
        "--max-tokens",
        "16",
        "--concurrency",
        "8",
        "--no-report",
    ]
    first = invoke([*base, "-o", str(tmp_path / "cold")], env)
    assert first.code == 0, first.stderr
    good = orjson.loads(_cache_file(cache).read_bytes())
    assert good["documents"] == len(good["entries"]) == 6
    bad = {
        "cut to 2 entries": (_truncated(good, keep_count=False), "holds 2 of the 6 documents"),
        "cut, count and checksum rewritten": (_truncated(good, keep_count=True), "holds 2 of the 6 documents"),
        "a prompt edited": (_edited(good), "does not match its checksum"),
    }
    for i, (case, (data, needle)) in enumerate(bad.items()):
        path = _cache_file(cache)
        path.write_bytes(orjson.dumps(data))
        out = invoke([*base, "-o", str(tmp_path / f"run{i}")], env)
        assert out.code == 0, (case, out.stderr)
        manifest = json.loads((tmp_path / f"run{i}" / "manifest.json").read_text())
        assert manifest["tasks"]["gsm8k-mini"]["requests"] == 6, case
        assert warnings(out.stderr) == [f"{WARNING}prompt cache {path} {needle}; building the prompts again"], case
        assert orjson.loads(_cache_file(cache).read_bytes()) == good, case  # rebuilt whole


def test_an_unwritable_prompt_cache_is_said_once(tmp_path: Path, fast_server: TestServer) -> None:
    (tmp_path / "file").write_text("not a folder")  # root ignores permission bits: the folder is below a file
    cache = tmp_path / "file" / "cache"
    folder = mini_task_dir(tmp_path)
    out = invoke(
        [
            "run",
            "gsm8k-mini",
            "--tasks-dir",
            str(folder),
            "--endpoint",
            fast_server.url,
            "--max-tokens",
            "16",
            "--no-report",
            "-o",
            str(tmp_path / "o"),
        ],
        {"EVALKIT_CACHE_DIR": str(cache)},
    )
    assert out.code == 0, out.stderr
    assert warnings(out.stderr) == [
        f"{WARNING}the prompt cache {cache / 'prompts'} is not writable (Not a directory): every run builds the "
        "prompts again; set EVALKIT_CACHE_DIR to a writable folder"
    ]


# ------------------------------------------------------------------------------------ file descriptors
def _limit_open_files(n: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


@pytest.mark.slow
def test_concurrency_is_capped_by_the_open_file_limit(tmp_path: Path, fast_server: TestServer) -> None:
    """5000 in flight with 256 descriptors: capped (said in one line, recorded in the manifest), and no request
    fails with "Too many open files" (one attempt each, so none hides behind a retry)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalkit.cli",
            "run",
            "aime25",
            "--endpoint",
            fast_server.url,
            "--num-samples",
            "10",
            "--max-tokens",
            "64",
            "--concurrency",
            "5000",
            "--max-attempts",
            "1",
            "--max-error-rate",
            "1",
            "--no-report",
            "-o",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path},
        preexec_fn=lambda: _limit_open_files(256),
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())["tasks"]["aime25"]
    assert summary["counts"]["total"] == 300 and summary["counts"]["api_error"] == 0, summary["counts"]
    cap = json.loads((tmp_path / "o" / "manifest.json").read_text()).get("concurrency_cap")
    assert cap is not None and cap["requested"] == 5000 and cap["open_files_limit"] == 256 and cap["cap"] < 256
    [line] = warnings(p.stderr)
    assert line.startswith(f"{WARNING}--concurrency 5000 needs about") and f"at most {cap['cap']} requests" in line
    assert summary["speed"]["concurrency"] == cap["cap"]


CLIENT_OUT_OF_FILES = """
import asyncio, sys
from evalkit.client.http_client import Client, ClientOptions
from evalkit.contracts import GenParams, Request

async def main():
    async with Client(sys.argv[1], "test-model", options=ClientOptions(max_attempts=1)) as client:
        held = []
        try:
            while True:
                held.append(open(__file__))  # every descriptor taken: the next socket cannot be made
        except OSError:
            pass
        resp = await client.generate(Request("t", 0, 0, "Hi", GenParams(max_tokens=4)))
        for f in held:
            f.close()
        print(resp.error)

asyncio.run(main())
"""


def test_out_of_descriptors_is_a_client_error(tmp_path: Path, fast_server: TestServer) -> None:
    script = tmp_path / "client.py"
    script.write_text(CLIENT_OUT_OF_FILES)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    p = subprocess.run(
        [sys.executable, str(script), fast_server.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
        preexec_fn=lambda: _limit_open_files(64),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("client error: evalkit's process ran out of file descriptors"), p.stdout
    assert "not a server failure" in p.stdout and "ulimit -n" in p.stdout


@pytest.mark.parametrize("command", list(COMMANDS))
def test_deep_nesting_in_a_fresh_process(tmp_path: Path, command: str) -> None:
    file = tmp_path / "f.yaml"
    file.write_bytes(b"[" * 50_000)
    out = run_cli(COMMANDS[command](file, tmp_path))
    assert_one_error_line(out, str(file), "nests lists or mappings")
    assert "Traceback" not in out.stderr + out.stdout
