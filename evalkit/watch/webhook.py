"""``--alert-webhook URL``: a JSON message POSTed when the verdict changes, from a thread of its own.

Each message is retried with exponential backoff (tenacity) on connection errors, 429 and 5xx, and given up
after ``attempts`` with one warning line; ticks never wait for it. Redirects are not followed.
"""

from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from evalkit.errors import warn
from evalkit.redact import redact_url


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is raised as an HTTPError


def _retryable(e: BaseException) -> bool:
    if isinstance(e, urllib.error.HTTPError):
        return e.code == 429 or e.code >= 500
    return isinstance(e, OSError)


class Webhook:
    """Posts messages to ``url`` in order, each retried up to ``attempts`` times."""

    def __init__(
        self, url: str, attempts: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0, timeout_s: float = 10.0
    ) -> None:
        self.url = url
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
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
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
                    f"alert webhook {redact_url(self.url)} failed after {self.attempts} attempts ({e}); "
                    "the verdict is in the history and /metrics"
                )
