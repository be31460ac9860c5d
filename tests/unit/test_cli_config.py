"""`evalkit config show` (effective settings with their sources, secrets redacted), `--version`, completion."""

import os

import pytest
from typer.testing import CliRunner

from evalkit.cli import app


def show(*args: str) -> dict[str, tuple[str, str]]:
    result = CliRunner().invoke(app, ["config", "show", *args])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    return {parts[0]: (parts[1], " ".join(parts[2:])) for parts in lines}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in list(os.environ):
        if var.upper().startswith("EVALKIT_") or var == "OPENAI_API_KEY":
            monkeypatch.delenv(var)


def test_each_value_with_its_source_command_line_over_file_over_env_over_default(tmp_path, monkeypatch):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("limit: 9\nseed: 3\nserver:\n  model: m\n  max_num_seqs: 8\n")
    monkeypatch.setenv("EVALKIT_LIMIT", "4")  # the file wins
    monkeypatch.setenv("EVALKIT_TOP_P", "0.5")
    monkeypatch.setenv("evalkit_server__port", "8123")  # names are case-insensitive; nested with __
    got = show("gsm8k", "-c", str(cfg), "--seed", "7", "--max-num-seqs", "16")
    assert got["tasks"] == ('["gsm8k"]', "command line")
    assert got["seed"] == ("7", "command line")
    assert got["limit"] == ("9", f"file {cfg}")
    assert got["top_p"] == ("0.5", "env EVALKIT_TOP_P")
    assert got["concurrency"] == ("auto", "default")
    assert got["server.model"] == ("m", f"file {cfg}")
    assert got["server.max_num_seqs"] == ("16", "command line")
    assert got["server.port"] == ("8123", "env evalkit_server__port")
    assert got["server.host"] == ("127.0.0.1", "default")


def test_secrets_are_redacted(tmp_path, monkeypatch):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "server:\n  model: m\n  env: {HF_TOKEN: hf_filesecret, VLLM_USE_DEEP_GEMM: '0', "
        "HTTPS_PROXY: 'http://u:proxysecret@proxy:3128'}\n"
    )
    monkeypatch.setenv("EVALKIT_API_KEY", "sk-envsecret")
    result = CliRunner().invoke(
        app,
        [
            "config",
            "show",
            "-c",
            str(cfg),
            "--endpoint",
            "http://user:urlsecret@127.0.0.1:8000/v1",
            "--server-arg=--hf-token=argsecret",
        ],
    )
    assert result.exit_code == 0, result.output
    for secret in ("sk-envsecret", "urlsecret", "argsecret", "hf_filesecret", "proxysecret"):
        assert secret not in result.output, secret
    got = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()}
    assert got["api_key"] == ["***", "env", "EVALKIT_API_KEY"]
    assert got["endpoint"][0] == "http://***@127.0.0.1:8000/v1"
    assert "--hf-token=***" in got["server.extra_args"][0]
    assert '"VLLM_USE_DEEP_GEMM":' in " ".join(got["server.env"]) and "proxy:3128" in " ".join(got["server.env"])


def test_api_key_from_openai_variable_or_key_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert show()["api_key"] == ("***", "env OPENAI_API_KEY")
    key = tmp_path / "key"
    key.write_text("sk-file\n")
    assert show("--api-key-file", str(key))["api_key"] == ("***", f"api_key_file {key}")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert show()["api_key"] == ("None", "default")


def test_bad_setting_is_one_line_exit_2(monkeypatch):
    monkeypatch.setenv("EVALKIT_TEMPERATURE", "nan")
    result = CliRunner().invoke(app, ["config", "show"])
    assert result.exit_code == 2
    assert "temperature" in result.output and len(result.output.strip().splitlines()) == 1


def test_every_run_option_reaches_the_settings():
    """`evalkit run` and `evalkit config show` read options through one mapping that takes every option."""
    import inspect

    from evalkit.cli.run import CLUSTER_KEYS, run, run_settings

    params = {name: p.default for name, p in inspect.signature(run).parameters.items()}
    base, _ = run_settings(params)
    for name, default in params.items():
        if name in ("quiet", "config", "repeats"):  # how the command shows progress and how many runs it makes
            continue
        if name in CLUSTER_KEYS:  # --k8s writes the run's manifests instead of running it: not settings of a run
            continue
        value = True if default is False else ["X=1"] if name == "server_env" else ["v"] if name == "tasks" else 7
        changed, _ = run_settings({**params, name: value})
        assert changed != base, f"--{name.replace('_', '-')} does not reach the run settings"
    with pytest.raises(AssertionError, match="new_flag"):
        run_settings({**params, "new_flag": 1})
