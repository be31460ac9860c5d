"""``--alert-webhook URL``: a JSON message POSTed when the verdict changes, from a thread of its own.

Each message is retried with exponential backoff (tenacity) on connection errors, 429 and 5xx, and given up
after ``attempts`` with one warning line; ticks never wait for it. Redirects are not followed. Only http(s)
URLs with a host are taken (:func:`webhook_target`); credentials in the URL (``https://user:pw@host/...``) are
sent as HTTP Basic auth, and the URL is shown with them and any secret query parameter redacted.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from evalkit.errors import ConfigError, warn
from evalkit.redact import redact_url


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is raised as an HTTPError


def webhook_target(url: str) -> tuple[str, dict[str, str]]:
    """The URL to POST to and the headers to send: ``url`` without its credentials, which become a Basic
    ``Authorization`` header. ConfigError unless it is an http(s) URL with a host (and a valid port)."""
    shown = redact_url(url)
    fix = "pass an http(s) URL such as https://hooks.example.com/evalkit"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in 0..65535
    except ValueError as e:
        raise ConfigError(f"--alert-webhook {shown!r} is not a valid URL ({e}); {fix}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--alert-webhook {shown!r} is not an http(s) URL with a host; {fix}")
    headers = {"Content-Type": "application/json"}
    if "@" in parts.netloc:
        user, pw = urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
        url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return url, headers


def _retryable(e: BaseException) -> bool:
    if isinstance(e, urllib.error.HTTPError):
        return e.code == 429 or e.code >= 500
    return isinstance(e, OSError)


class Webhook:
    """Posts messages to ``url`` in order, each retried up to ``attempts`` times."""

    def __init__(
        self, url: str, attempts: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0, timeout_s: float = 10.0
    ) -> None:
        self.url, self._headers = webhook_target(url)
        self.shown = redact_url(url)
        self.attempts, self.backoff_s, self.max_backoff_s, self.timeout_s = (
            attempts,
            backoff_s,
            max_backoff_s,
            timeout_s,
        )
        self.sent = 0
        self.failed = 0
        self._opener = urllib.request.build_opener(_NoRedirect)
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="evalkit-webhook", daemon=True)
        self._thread.start()

    def post(self, message: dict[str, Any]) -> None:
        """Queue ``message``; returns at once."""
        self._queue.put(message)

    def close(self, timeout_s: float = 5.0) -> None:
        """Let queued messages go out for up to ``timeout_s`` seconds, then stop."""
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        req = urllib.request.Request(self.url, data=body, headers=self._headers)
        with self._opener.open(req, timeout=self.timeout_s) as resp:
            resp.read()

    def _loop(self) -> None:
        while (message := self._queue.get()) is not None:
            retrying = Retrying(
                stop=stop_after_attempt(self.attempts),
                wait=wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
                retry=retry_if_exception(_retryable),
                reraise=True,
            )
            try:
                retrying(self._send, message)
                self.sent += 1
            except Exception as e:
                self.failed += 1
                warn(
                    redact_url(
                        f"alert webhook {self.shown} failed after {self.attempts} attempts ({e}); "
                        "the verdict is in the history and /metrics"
                    )
                )
