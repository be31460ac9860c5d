"""Bad input to ``evalkit gate``, ``evalkit sweep FILE`` and ``evalkit run --config FILE`` fails closed: one line,
exit 2, no traceback; a malformed summary field that decides nothing is ignored with a note; the step summary
is best effort (the exit code is the verdict's).

The commands run in-process (typer's CliRunner, an exception other than SystemExit fails the test); the deep
nesting cases also run as ``python -m evalkit.cli`` (a fresh process with its own stack).

Here: those of its tests that use the test server or a subprocess; the others are in
tests/unit/test_failclosed_inputs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_bad_input import assert_one_error_line, run_cli
from tests.unit.test_failclosed_inputs import COMMANDS


@pytest.mark.parametrize("command", list(COMMANDS))
def test_deep_nesting_in_a_fresh_process(tmp_path: Path, command: str) -> None:
    file = tmp_path / "f.yaml"
    file.write_bytes(b"[" * 50_000)
    out = run_cli(COMMANDS[command](file, tmp_path))
    assert_one_error_line(out, str(file), "nests lists or mappings")
    assert "Traceback" not in out.stderr + out.stdout
