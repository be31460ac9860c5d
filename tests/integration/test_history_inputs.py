"""A run history setting or filter that is malformed: ``EVALKIT_HISTORY_URL`` of any shape never prints its
password (the "is not a database URL" error, `evalkit config show`, the warning of `evalkit run`), a URL that
SQLAlchemy or the file system refuses is one line and exit 2 for every `evalkit history` command, and a
``config=`` filter matches a config by its name (or a hex prefix of its hash), bounded in length.

Here: those of its tests that use the test server or a subprocess; the others are in
tests/unit/test_history_inputs.py."""

from __future__ import annotations

from pathlib import Path

from evalkit.testing.server import TestServer
from tests.unit.test_history_inputs import MALFORMED, PASSWORD, cli


def test_evalkit_run_warns_about_a_malformed_history_url_without_its_password(tmp_path: Path) -> None:
    """`evalkit run` records into the history at its end: its one warning (in every CI log) names the URL
    redacted, whatever its shape; the run stands."""
    with TestServer() as srv:
        for i, url in enumerate(MALFORMED):
            code, out = cli(url, "run", "gsm8k", "--endpoint", srv.url, "--limit", "1", "--no-report", "-q",
                            "-o", tmp_path / f"r{i}")  # fmt: skip
            warnings = [line for line in out.splitlines() if "not recorded in the run history" in line]
            assert code == 0 and len(warnings) == 1, out
            assert PASSWORD not in out and "***@" in warnings[0]
