"""Hostile servers, in-process: the test server's hostile modes and the limits that keep a hostile answer from
ending a run (the runs themselves against the test server: tests/integration/test_hostile_server.py)."""

from __future__ import annotations

from evalkit.redact import redact_text
from evalkit.testing.hostile import HOSTILE_MODES, OVERSIZED_MODES
from tests.integration.test_hostile_server import FAILING_MODES, USAGE_MODES


def test_every_mode_is_covered() -> None:
    assert set(USAGE_MODES) | set(FAILING_MODES) | {"ping_only"} == set(HOSTILE_MODES)


def test_every_oversized_mode_is_covered() -> None:
    assert set(OVERSIZED_MODES) == {"flood", "deep_arguments", "huge_arguments"}


def test_redaction_of_server_text_by_shape() -> None:
    """Credentials evalkit did not send are still cut out of a server's text by their shape; ordinary words
    ("Basic auth", "Bearer authentication") are left alone."""
    said = (
        "denied: Authorization: Bearer abc.def-123 (token sk-proj-Zx81kLm0) from root:pw1@10.1.1.1 "
        'in {"api_key": "k-99"}; Basic auth failed; Bearer authentication required'
    )
    assert redact_text(said) == (
        "denied: Authorization: *** (token sk-***) from ***@10.1.1.1 "
        'in {"api_key": "***"}; Basic auth failed; Bearer authentication required'
    )
