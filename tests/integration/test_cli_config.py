"""`evalkit config show` (effective settings with their sources, secrets redacted), `--version`, completion.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_cli_config.py."""

import os
import subprocess
import sys

import evalkit


def run_main(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    code = "import sys; sys.argv[0] = 'evalkit'; from evalkit.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_version():
    p = run_main("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"evalkit {evalkit.__version__}"


def test_shell_completion_from_typer():
    p = run_main(env={"_EVALKIT_COMPLETE": "complete_bash", "COMP_WORDS": "evalkit con", "COMP_CWORD": "1"})
    assert p.returncode == 0 and p.stdout.split() == ["config"]
    p = run_main(env={"_EVALKIT_COMPLETE": "complete_bash", "COMP_WORDS": "evalkit run --max-con", "COMP_CWORD": "2"})
    assert p.stdout.split() == ["--max-concurrency"]
    assert "--install-completion" in run_main("--help").stdout
