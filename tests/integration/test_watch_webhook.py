"""The watch's alert webhook at exit and on a refusal, against a real local HTTP receiver: an alert whose receiver
is down when the watch ends is delivered within the retry schedule (the old close waited 5 s, the schedule needs
more), or said to be undelivered in one line naming how many and why; a 4xx is reported as the refusal it is,
after the one POST it took."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from evalkit.watch import Webhook
from tests.integration.test_watch_failclosed import closed_port

pytestmark = pytest.mark.slow


class Receiver(BaseHTTPRequestHandler):
    """Answers each POST with the next code of ``answers`` (then 200) and keeps the bodies."""

    answers: ClassVar[list[int]] = []
    got: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        type(self).got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(type(self).answers.pop(0) if type(self).answers else 200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def serve(port: int) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def receiver() -> Iterator[type[Receiver]]:
    Receiver.answers, Receiver.got = [], []
    yield Receiver


def test_an_alert_to_a_receiver_down_at_exit_is_delivered_within_the_retry_schedule(receiver: Any) -> None:
    """Attempts at 0, 2 and 6 s (backoff 2 s, 4 s); the receiver comes up at 3 s: close() waits for the third
    attempt (the old close gave up after 5 s and the alert was lost without a word)."""
    port = closed_port()
    hook = Webhook(f"http://127.0.0.1:{port}/hook", attempts=3, backoff_s=2.0, timeout_s=2.0)
    assert hook.delivery_bound_s() == 3 * 2.0 + 2.0 + 4.0
    hook.post({"verdict": "fail"})
    up = threading.Timer(3.0, lambda: holder.append(serve(port)))
    holder: list[ThreadingHTTPServer] = []
    up.start()
    try:
        began = time.monotonic()
        hook.close()
        took = time.monotonic() - began
    finally:
        up.join()
        for httpd in holder:
            httpd.shutdown()
            httpd.server_close()
    assert receiver.got == [{"verdict": "fail"}]
    assert (hook.sent, hook.failed, hook.pending) == (1, 0, 0)
    assert 5.0 < took < hook.delivery_bound_s()


def test_a_4xx_answer_is_reported_as_a_refusal_after_one_attempt(
    receiver: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    httpd = serve(0)
    try:
        receiver.answers = [400]
        hook = Webhook(f"http://127.0.0.1:{httpd.server_port}/hook", attempts=5, backoff_s=0.01)
        hook.post({"verdict": "fail"})
        hook.close(timeout_s=10)
    finally:
        httpd.shutdown()
        httpd.server_close()
    err = capfd.readouterr().err
    assert len(receiver.got) == 1 and (hook.sent, hook.failed) == (0, 1)
    assert "refused with HTTP 400 after 1 attempt (Bad Request)" in err, err
    assert "5 attempts" not in err and "not delivered" not in err


pytestmark = pytest.mark.slow


def test_alerts_still_undelivered_when_close_gives_up_are_named_with_why(capfd: pytest.CaptureFixture[str]) -> None:
    hook = Webhook(f"http://alert:hunter2@127.0.0.1:{closed_port()}/hook", attempts=5, backoff_s=1.0)
    hook.post({"verdict": "fail"})
    hook.post({"verdict": "pass"})
    began = time.monotonic()
    hook.close(timeout_s=0.5)
    assert time.monotonic() - began < 2.0
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "2 alerts not delivered (given up at exit after 0.5 s; last attempt: " in lines[0]
    assert "Connection refused" in lines[0] and "hunter2" not in lines[0]
    time.sleep(1.5)  # the abandoned sender makes no further attempt and says nothing more
    assert capfd.readouterr().err == "" and hook.sent == 0
