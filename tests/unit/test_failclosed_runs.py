"""`evalkit run` against servers that send what evalkit must not take as it comes, end to end over real HTTP
(the test server's faults, ``OVERSIZED_MODES`` and ``Behaviour.gzip_bomb``):

- an error message that quotes the ``Authorization`` header back: the key, the Basic token and URL credentials
  reach neither ``samples.jsonl``, nor the report's sample block, nor stderr;
- tool-call arguments nested 1,500 deep: that sample's ``bad_arguments``, never a RecursionError that ends the
  run (and every resume); 8 MB of arguments: stored cut to 256 Ki characters per text, with a note saying so;
- a replica answering with another ``model``: those requests fail as ``api_error`` naming both ids (retried, as
  the next attempt may reach another replica); ids ``/v1/models`` lists are fine; ``--allow-model-mismatch``;
- a gzip bomb on ``/v1/models`` (and ``/tokenize``), a flood of events, a huge error body: every body read is
  bounded, decompressed size included.

Here: those of its tests that run in-process; the others are in tests/integration/test_failclosed_runs.py."""

from __future__ import annotations

from evalkit.redact import redact_text
from evalkit.testing.hostile import OVERSIZED_MODES


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
