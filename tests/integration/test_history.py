"""The run history (evalkit/history): its schema against its migrations, `evalkit history add|list|show|export`
on the example runs, the gate recording its verdicts and taking a baseline from the history (both on SQLite and
on PostgreSQL), and the history never failing a command (a write that fails is one warning with the URL's
password redacted).

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_history.py."""

from __future__ import annotations

import os
import subprocess
import sys

from evalkit.history import location
from tests.history_fixtures import db_url, forget, sqlite_url  # noqa: F401  (db_url: the fixture)


def test_an_off_history_records_nothing_and_imports_no_sqlalchemy() -> None:
    # with EVALKIT_HISTORY_URL=off every writer returns None before importing SQLAlchemy (0.15-0.4 s at the end
    # of each command otherwise); a fresh interpreter, since this one has SQLAlchemy loaded
    code = (
        "import sys; from pathlib import Path; from evalkit import history as h; "
        "r = (h.record_run(Path('x')), h.record_gate(None, [], []), h.record_tick(Path('w'), 't', {}, None)); "
        "print(r, sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic')))"
    )
    env = {**os.environ, location.ENV: "off"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(None, None, None) []", out.stderr
