"""``--alert-webhook URL``: a JSON message POSTed when the verdict changes, from a thread of its own.

Each message is retried with exponential backoff (tenacity) on connection errors, 429 and 5xx, and given up
after ``attempts`` with one warning line; another 4xx refuses it at once ("refused with HTTP 400 after 1
attempt"). Ticks never wait for it. At exit, :meth:`Webhook.close` waits as long as the retry schedule of the
messages still queued can take (:meth:`Webhook.delivery_bound_s`), and says in one line how many were not
delivered and why if any are left (given up at that bound, or on Ctrl-C). Redirects are not followed. Only http(s)
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

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from tenacity.stop import stop_base

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
        self.posted = 0
        self.last_error: str | None = None  # why the latest attempt failed (None: it did not)
        self._given_up = threading.Event()  # set by close() once it stops waiting: no further attempt is made
        self._opener = urllib.request.build_opener(_NoRedirect)
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="evalkit-webhook", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Messages posted and neither delivered nor given up yet."""
        return self.posted - self.sent - self.failed

    def post(self, message: dict[str, Any]) -> None:
        """Queue ``message``; returns at once."""
        self.posted += 1
        self._queue.put(message)

    def delivery_bound_s(self, messages: int = 1) -> float:
        """The longest ``messages`` messages can take to be delivered or given up: every attempt timing out and
        every backoff wait of the retry schedule in full."""
        waits = sum(min(self.backoff_s * 2**i, self.max_backoff_s) for i in range(self.attempts - 1))
        return messages * (self.attempts * self.timeout_s + waits)

    def close(self, timeout_s: float | None = None) -> None:
        """Let queued messages go out for up to ``timeout_s`` seconds (default: :meth:`delivery_bound_s` of those
        still pending), then stop; one warning line names how many were not delivered, and why, if any are
        left (also when Ctrl-C ends the wait, which is then raised again)."""
        bound = self.delivery_bound_s(self.pending) if timeout_s is None else timeout_s
        self._queue.put(None)
        try:
            self._thread.join(bound)
        except KeyboardInterrupt:
            self._give_up("the wait for them was interrupted")
            raise
        if self._thread.is_alive():
            self._give_up(f"given up at exit after {bound:.3g} s")

    def _give_up(self, why: str) -> None:
        self._given_up.set()
        left = self.pending
        if left <= 0:
            return
        last = f"; last attempt: {self.last_error}" if self.last_error else ""
        warn(
            redact_url(
                f"alert webhook {self.shown}: {left} alert{'s' if left != 1 else ''} not delivered ({why}{last}); "
                "the verdicts are in the history and /metrics"
            )
        )

    def _send(self, message: dict[str, Any]) -> None:
        if self._given_up.is_set():
            raise _GivenUp
        body = json.dumps(message).encode()
        req = urllib.request.Request(self.url, data=body, headers=self._headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                resp.read()
        except Exception as e:
            self.last_error = str(e)
            raise
        self.last_error = None

    def _loop(self) -> None:
        while (message := self._queue.get()) is not None:
            retrying = Retrying(
                stop=stop_after_attempt(self.attempts) | _StopWhen(self._given_up),
                wait=wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
                retry=retry_if_exception(_retryable),
                sleep=self._sleep,
                reraise=True,
            )
            try:
                retrying(self._send, message)
                self.sent += 1
            except _GivenUp:
                return  # close() has said how many were left
            except Exception as e:
                if self._given_up.is_set():
                    return
                self.failed += 1
                tries = retrying.statistics.get("attempt_number", 1)
                if isinstance(e, urllib.error.HTTPError) and not _retryable(e):
                    what = f"refused with HTTP {e.code} after {tries} attempt{'s' if tries != 1 else ''} ({e.reason})"
                else:
                    what = f"failed after {tries} attempt{'s' if tries != 1 else ''} ({e})"
                warn(redact_url(f"alert webhook {self.shown} {what}; the verdict is in the history and /metrics"))

    def _sleep(self, seconds: float) -> None:
        """tenacity's wait between attempts, cut short when close() gives up."""
        self._given_up.wait(seconds)


class _StopWhen(stop_base):
    """Stops retrying once ``event`` is set."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()


class _GivenUp(Exception):
    """close() stopped waiting: the message is counted as not delivered."""
