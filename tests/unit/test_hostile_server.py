"""A hostile server, end to end through ``evalkit run``: each malformed stream of the test server's
``{"hostile": MODE}`` faults becomes that request's ``api_error`` (or a scored sample whose unreadable usage is
ignored with a note), never the run's end; the run writes its summary and report, exits as
``--max-error-rate`` says, and the same command resumes it. A server that only sends ``: ping`` comments is
abandoned after ``--idle-timeout``, not after the total timeout.

Here: those of its tests that run in-process; the others are in tests/integration/test_hostile_server.py."""

from __future__ import annotations

from evalkit.testing.hostile import HOSTILE_MODES
from tests.integration.test_hostile_server import FAILING_MODES, USAGE_MODES


def test_every_mode_is_covered() -> None:
    assert set(USAGE_MODES) | set(FAILING_MODES) | {"ping_only"} == set(HOSTILE_MODES)
