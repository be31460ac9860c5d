"""Credentials in the endpoint URL and redirects.

``user:password@`` in ``--endpoint`` is sent as HTTP Basic auth (the API key wins when one is set, with a
one-line warning) and appears in no file of the run dir, no console line and no record (``***@`` there).
No HTTP request evalkit makes follows a redirect: credentials never reach another origin, and a redirected
endpoint is one line naming the URL to use instead of a run of failed requests.

Here: those of its tests that run in-process; the others are in tests/integration/test_secrets_redirect.py."""

from __future__ import annotations

import pytest

from evalkit.config.endpoint import normalize_base_url
from evalkit.errors import EndpointError
from evalkit.redact import redact_argv, redact_env, redact_url
from evalkit.reporting.provenance import argv_str
from tests.integration.test_secrets_redirect import PASSWORD, USER, with_userinfo


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (["run", "--endpoint", "http://u:pw@h:1/v1"], ["run", "--endpoint", "http://***@h:1/v1"]),
        (["--endpoint=https://u:p%40w@h/v1"], ["--endpoint=https://***@h/v1"]),
        (["--endpoint", "u:pw@h:8000"], ["--endpoint", "***@h:8000"]),
        (["--endpoint=u:pw@h:8000/v1"], ["--endpoint=***@h:8000/v1"]),
        (["--server-env", "HF_TOKEN=hf_x"], ["--server-env", "HF_TOKEN=***"]),
        (["--server-env", "HTTPS_PROXY=http://u:pw@p:3128"], ["--server-env", "HTTPS_PROXY=http://***@p:3128"]),
        (["--api-key-file", "/k.txt", "--hf-token", "x"], ["--api-key-file", "/k.txt", "--hf-token", "***"]),
        (["--tokenizer-mode", "auto", "--model", "org/m@rev"], ["--tokenizer-mode", "auto", "--model", "org/m@rev"]),
    ],
)
def test_recorded_command_lines_hold_no_credentials(raw: list[str], shown: list[str]) -> None:
    assert redact_argv(raw) == shown


def test_credentials_are_redacted_in_messages_env_and_old_records() -> None:
    assert redact_url("GET http://u:pw@h/x and https://t@h2/y") == "GET http://***@h/x and https://***@h2/y"
    env = {"HTTP_PROXY": "http://u:pw@p:1", "HF_TOKEN": "x", "A": "1"}
    assert redact_env(env) == {"HTTP_PROXY": "http://***@p:1", "HF_TOKEN": "***", "A": "1"}
    with pytest.raises(EndpointError) as err:
        normalize_base_url(f"ftp://{USER}:{PASSWORD}@h:1/v1")
    assert PASSWORD not in str(err.value) and "***@h:1" in str(err.value)
    # a run dir recorded before redaction: its report does not show the password either
    assert PASSWORD not in (argv_str(["evalkit", "run", "--endpoint", with_userinfo("http://h:1/v1")]) or "")
