"""The API key: read from EVALKIT_API_KEY / OPENAI_API_KEY / --api-key-file, sent only as the Authorization
header, and never written anywhere (manifest, samples, summary, report, server argv records, logs, caches,
console output)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.tasks.lmeval_task import prompt_cache_dir
from evalkit.testing.server import Behaviour, TestServer

REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-7f3e9a1c-DO-NOT-LEAK"
DECOY = "sk-decoy-openai-0000"


def run_cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("EVALKIT_API_KEY", "OPENAI_API_KEY")}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "evalkit.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **env},
        timeout=120,
    )


def files_holding(root: Path, secret: str) -> list[str]:
    """Every file under root (recursively, as bytes) that contains the secret."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes():
            hits.append(str(path.relative_to(root)))
    return hits


def assert_sent_only_as_authorization(srv: TestServer, key: str) -> None:
    assert srv.requests, "the run sent no generation request"
    for rec in srv.requests:
        assert rec.headers.get("Authorization") == f"Bearer {key}"
        others = {k: v for k, v in rec.headers.items() if k.lower() != "authorization"}
        assert key not in json.dumps(others)
        assert key not in json.dumps(rec.body)


def invoke(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The CLI in-process, with only ``env``'s key variables set; returns (exit code, stdout + stderr)."""
    unset = {k: None for k in ("EVALKIT_API_KEY", "OPENAI_API_KEY") if k not in env}
    res = CliRunner().invoke(app, args, env={**unset, **env})
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout + res.stderr


def searched_tree(tmp_path: Path) -> Path:
    """The searched tree: the run dir and the prompt cache (seeded from the user's, so no cold build)."""
    root = tmp_path / "work"
    cache = prompt_cache_dir()
    if cache.is_dir():
        shutil.copytree(cache, root / "cache" / "prompts")
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return searched_tree(tmp_path)


@pytest.mark.parametrize("source", ["OPENAI_API_KEY", "--api-key-file"])
def test_api_key_never_written_anywhere(source: str, tmp_path: Path, work: Path) -> None:
    env = {"EVALKIT_CACHE_DIR": str(work / "cache")}
    extra: list[str] = []
    if source == "--api-key-file":
        key_file = tmp_path / "secret" / "key.txt"  # outside the searched tree: the one place the key may be
        key_file.parent.mkdir()
        key_file.write_text(CANARY + "\n")
        extra = ["--api-key-file", str(key_file)]
    else:
        env[source] = CANARY
    with TestServer(Behaviour(api_key=CANARY, correct_ratio=0.5)) as srv:
        srv.faults = [None, {"status": 401, "message": "Unauthorized"}]  # an error text is stored too
        code, output = invoke(
            [
                "run",
                "gsm8k",
                "--endpoint",
                srv.url,
                "--limit",
                "3",
                "--max-tokens",
                "32",
                "--concurrency",
                "1",
                "--max-error-rate",
                "0.5",
                "-o",
                str(work / "run"),
                *extra,
            ],
            env,
        )
        assert code == 0, output
        assert_sent_only_as_authorization(srv, CANARY)
    assert_run_holds_no(work, CANARY)
    assert CANARY not in output


def assert_run_holds_no(work: Path, secret: str) -> None:
    out = work / "run"
    assert {"manifest.json", "samples.jsonl", "summary.json", "report.html"} <= {f.name for f in out.iterdir()}
    statuses = [json.loads(line)["status"] for line in (out / "samples.jsonl").read_text().splitlines()]
    assert statuses.count("api_error") == 1
    assert files_holding(work, secret) == []


def test_api_key_from_evalkit_env_never_written_anywhere_by_the_process(tmp_path: Path, work: Path) -> None:
    """The same as a real process, whose every byte of stdout and stderr (logs, warnings) is searched too."""
    env = {"EVALKIT_CACHE_DIR": str(work / "cache"), "TQDM_DISABLE": "1", "EVALKIT_API_KEY": CANARY}
    with TestServer(Behaviour(api_key=CANARY, correct_ratio=0.5)) as srv:
        srv.faults = [None, {"status": 401, "message": "Unauthorized"}]
        p = run_cli(
            [
                "run",
                "gsm8k",
                "--endpoint",
                srv.url,
                "--limit",
                "3",
                "--max-tokens",
                "32",
                "--concurrency",
                "1",
                "--max-error-rate",
                "0.5",
                "-o",
                "run",
            ],
            work,
            env,
        )
        assert p.returncode == 0, p.stderr
        assert_sent_only_as_authorization(srv, CANARY)
    assert_run_holds_no(work, CANARY)
    assert CANARY not in p.stdout and CANARY not in p.stderr


def test_api_key_file_beats_the_environment(tmp_path: Path) -> None:
    """An explicit --api-key-file wins over OPENAI_API_KEY (which may belong to another service and must then
    not be sent to this endpoint) and over EVALKIT_API_KEY, as the command line beats the environment."""
    key_file = tmp_path / "key.txt"
    key_file.write_text(CANARY + "\nsecond line is ignored\n")
    with TestServer(Behaviour(api_key=CANARY)) as srv:
        code, output = invoke(
            [
                "run",
                "gsm8k",
                "--endpoint",
                srv.url,
                "--limit",
                "1",
                "--max-tokens",
                "16",
                "--no-report",
                "-o",
                str(tmp_path / "run"),
                "--api-key-file",
                str(key_file),
            ],
            {"OPENAI_API_KEY": DECOY, "EVALKIT_API_KEY": DECOY},
        )
        assert code == 0, output
        assert_sent_only_as_authorization(srv, CANARY)
    assert files_holding(tmp_path / "run", DECOY) == [] and files_holding(tmp_path / "run", CANARY) == []


def test_server_api_key_kept_out_of_argv_records_and_logs(work: Path) -> None:
    """With --serve, the key reaches vLLM only through its environment (VLLM_API_KEY): the recorded argv,
    env overrides, server.log and every other file hold no trace of it. evalkit/testing/fake_vllm_process.py
    stands in for vLLM and answers /v1/models only with the right bearer token."""
    (work / "c.yaml").write_text(
        f"server:\n  command: [{json.dumps(sys.executable)}, "
        f"{json.dumps(str(REPO / 'evalkit' / 'testing' / 'fake_vllm_process.py'))}]\n"
    )
    p = run_cli(
        [
            "run",
            "gsm8k",
            "--serve",
            "fake-model",
            "-c",
            "c.yaml",
            "--limit",
            "1",
            "--max-tokens",
            "16",
            "--max-attempts",
            "1",
            "--max-error-rate",
            "1",
            "--no-report",
            "-o",
            "run",
        ],
        work,
        {"EVALKIT_SERVER__API_KEY": CANARY, "EVALKIT_CACHE_DIR": str(work / "cache")},
    )
    assert p.returncode == 0, p.stderr  # /v1/models accepted the key (the fake has no generation endpoints)
    server = json.loads((work / "run" / "manifest.json").read_text())["server"]
    assert server["env_overrides"]["VLLM_API_KEY"] == "***"
    assert "fake-model" in server["argv"]
    assert (work / "run" / "server.log").stat().st_size > 0
    assert files_holding(work, CANARY) == []
    assert CANARY not in p.stdout and CANARY not in p.stderr
