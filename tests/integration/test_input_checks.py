"""Input and environment checks: non-finite numbers, out-of-range seeds, GPU counts and prices are bad input (one
line, exit 2); a mistyped EVALKIT_* variable, an unwritable prompt cache and a descriptor limit too small for the
concurrency are each said in one line; a prompt cache that does not hold every document is rebuilt; ``evalkit
report -o`` takes a folder and refuses an unwritable place in one line; a client out of file descriptors is not a
server failure."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from evalkit.testing.server import Behaviour, TestServer
from tests.integration.test_bad_input import REPO, assert_one_error_line, invoke, mini_task_dir

WARNING = "evalkit: warning: "


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
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
def test_non_finite_numbers_are_refused(name: str, tmp_path: Path, server: TestServer) -> None:
    flags, env, config, field = NOT_FINITE[name]
    args = ["run", "gsm8k", *flags, "-o", str(tmp_path / "o")]
    if config is not None:
        (tmp_path / config[0]).write_text(config[1])
        args += ["-c", str(tmp_path / config[0])]
    if "server" not in field:
        args += ["--endpoint", server.url]
    before = len(server.requests)
    assert_one_error_line(invoke(args, env), f"'{field}'", "finite number")  # names the setting and the fix
    assert len(server.requests) == before


@pytest.mark.parametrize(
    ("flags", "env"),
    [([], {"EVALKIT_SEED": "99999999999999999999"}), (["--seed", str(2**63)], None)],
    ids=["env-20-digits", "flag-2^63"],
)
def test_seed_outside_int64_is_refused(flags: list[str], env: dict[str, str] | None, server: TestServer) -> None:
    out = invoke(["run", "gsm8k", "--endpoint", server.url, *flags], env)
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
    flags: list[str], env: dict[str, str] | None, field: str, bound: str, tmp_path: Path, server: TestServer
) -> None:
    """--gpus-billed 99999999999999999999 ended the run in a traceback writing manifest.json (past 64 bits), and
    a price of 1e308 made the cost $inf: both are refused in one line before a request is sent."""
    before = len(server.requests)
    price = [] if field == "cost_per_gpu_hour" else ["--cost-per-gpu-hour", "2"]
    out = invoke(["run", "gsm8k", "--endpoint", server.url, *price, *flags, "-o", str(tmp_path / "o")], env)
    assert_one_error_line(out, f"invalid value for '{field}'", f"less than or equal to {bound}")
    assert len(server.requests) == before and not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------- unknown environment
def test_unknown_evalkit_variable_is_named_with_the_closest_known_one(server: TestServer) -> None:
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
    out = invoke(["run", "--endpoint", server.url], env)
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
def test_a_prompt_cache_missing_documents_is_rebuilt(tmp_path: Path, server: TestServer) -> None:
    folder = mini_task_dir(tmp_path)
    cache = tmp_path / "cache"
    env = {"EVALKIT_CACHE_DIR": str(cache)}
    base = [
        "run",
        "gsm8k-mini",
        "--tasks-dir",
        str(folder),
        "--endpoint",
        server.url,
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


def test_an_unwritable_prompt_cache_is_said_once(tmp_path: Path, server: TestServer) -> None:
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
            server.url,
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
def test_concurrency_is_capped_by_the_open_file_limit(tmp_path: Path, server: TestServer) -> None:
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
            server.url,
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


def test_out_of_descriptors_is_a_client_error(tmp_path: Path, server: TestServer) -> None:
    script = tmp_path / "client.py"
    script.write_text(CLIENT_OUT_OF_FILES)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    p = subprocess.run(
        [sys.executable, str(script), server.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
        preexec_fn=lambda: _limit_open_files(64),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("client error: evalkit's process ran out of file descriptors"), p.stdout
    assert "not a server failure" in p.stdout and "ulimit -n" in p.stdout
