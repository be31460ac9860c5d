"""The README is a first screen a newcomer can act on, and the reference lives in docs/: the README stays small,
its first commands are ones evalkit and the bundled test server accept (and, run for real, do what it says), every
relative link in the README and docs/ reaches an existing file and heading, and generated reports stay out of git.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_readme_docs.py."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest
import typer

from evalkit.cli import app
from evalkit.testing import server as test_server
from tests.unit.test_readme_docs import QUICKSTART, README, REPO, section


def quickstart_lines() -> list[str]:
    """The shell lines of the README's first commands, comments and the trailing ``&`` cut."""
    block = re.search(r"```bash\n(.*?)```", section(README.read_text(), QUICKSTART), re.S)
    assert block, "the quickstart section holds a bash block"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line.removesuffix("&").strip() for line in lines if line]


def parse_evalkit(args: list[str]) -> None:
    """Parse ``evalkit ARGS`` as the command would, without running it (click raises on what it refuses)."""
    cmd = typer.main.get_command(app)  # typer's own copy of click: groups are told apart by their commands
    name = "evalkit"
    while getattr(cmd, "commands", None) and args and args[0] in cmd.commands:
        name, cmd, args = args[0], cmd.commands[args[0]], args[1:]
    assert not getattr(cmd, "commands", None), f"not a command: evalkit {name} {' '.join(args)}"
    cmd.make_context(name, list(args))


def test_the_quickstart_commands_are_ones_evalkit_and_the_test_server_accept():
    lines = quickstart_lines()
    assert lines[0] == "pip install ."
    servers = [shlex.split(line) for line in lines if line.startswith("python -m evalkit.testing.server")]
    commands = [shlex.split(line) for line in lines if line.startswith("evalkit ")]
    assert len(servers) == 1 and len(commands) == 3 and len(lines) == 5, lines
    test_server.parse_args(servers[0][3:])  # argparse exits on an option it does not know
    for argv in commands:
        parse_evalkit(argv[1:])
    with pytest.raises(Exception, match="No such option"):  # the check refuses what evalkit refuses
        parse_evalkit(["run", "gsm8k", "--no-such-option"])
    with pytest.raises(AssertionError, match="not a command"):
        parse_evalkit(["no-such-command", "x"])


@pytest.mark.slow
def test_the_quickstart_does_what_the_readme_says(tmp_path):
    """The README's commands, run in a fresh folder against the test server they start (on a free port)."""
    lines = quickstart_lines()[1:]  # after `pip install .`: this interpreter's evalkit
    server = shlex.split(lines[0])
    port = server[server.index("--port") + 1]
    srv = subprocess.Popen(
        [sys.executable, *server[1 : server.index("--port")], "--port", "0", *server[server.index("--port") + 2 :]],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert srv.stdout is not None
        ready = srv.stdout.readline()
        assert ready.startswith(test_server.READY_PREFIX), ready
        url = ready.strip().removeprefix(test_server.READY_PREFIX)
        codes = []
        for line in lines[1:]:
            argv = shlex.split(line.replace(f"http://127.0.0.1:{port}", url))
            p = subprocess.run(
                [sys.executable, "-m", "evalkit.cli", *argv[1:]], capture_output=True, text=True, cwd=tmp_path
            )
            codes.append(p.returncode)
        assert codes == [0, 0, 1], codes  # two runs; the gate fails the answers cut at 48 tokens
        assert (tmp_path / "reports/base/report.html").is_file()
        assert (tmp_path / "reports/short/gate/compare.html").is_file()
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def test_generated_reports_are_not_committed():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    p = subprocess.run(["git", "ls-files", "reports"], capture_output=True, text=True, cwd=REPO, check=True)
    assert p.stdout.split() == ["reports/README.md"]


def test_the_readme_goodput_example_runs_against_an_endpoint(tmp_path):
    """The README's goodput and cost options, as written, accepted for a run against an endpoint (an endpoint
    needs --gpus-billed: without it the run is refused, exit 2)."""
    from typer.testing import CliRunner

    (row,) = [line for line in README.read_text().splitlines() if line.startswith("| `evalkit run … --goodput")]
    options = shlex.split(row.split("`")[1].split("…", 1)[1])
    with test_server.TestServer() as srv:
        argv = ["run", "gsm8k", "--endpoint", srv.url, "--limit", "4", "-q", "--no-report", "-o", str(tmp_path / "r")]
        res = CliRunner().invoke(app, [*argv, *options], env={"EVALKIT_HISTORY_URL": "off"})
    assert res.exit_code == 0, res.output
