"""Bad input: each mistake gives exactly one line on stderr (``evalkit: error: ...``) naming the problem and the
fix, exit code 2, and nothing already computed is lost.

Most cases run the CLI in-process (typer's CliRunner); the few that depend on ``evalkit.cli.main`` (click's own
parse errors, exit codes) or on a clean process (timing) run ``python -m evalkit.cli``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.tasks.catalogue import builtin_tasks_dir
from evalkit.testing.server import Behaviour, TestServer

ERROR_PREFIX = "evalkit: error: "
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------ helpers
@dataclass
class Outcome:
    code: int
    stderr: str
    stdout: str
    elapsed: float


def invoke(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    """The CLI in-process; ``env`` is set for the duration of the call."""
    t0 = time.monotonic()
    res = CliRunner().invoke(app, args, env=env)
    elapsed = time.monotonic() - t0
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception  # a traceback is never an acceptable answer to bad input
    return Outcome(res.exit_code, res.stderr, res.stdout, elapsed)


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> Outcome:
    """``python -m evalkit.cli`` in a child process (through ``main()``)."""
    t0 = time.monotonic()
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    p = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
    )
    return Outcome(p.returncode, p.stderr, p.stdout, time.monotonic() - t0)


def assert_one_error_line(out: Outcome, *needles: str) -> str:
    """Exit 2 and exactly one stderr line, starting ``evalkit: error:`` and holding every needle."""
    assert out.code == 2, (out.code, out.stderr, out.stdout)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert line.startswith(ERROR_PREFIX), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


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
