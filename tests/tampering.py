"""A proxy in front of the test server that rewrites its non-streamed JSON answers: a hostile server's answer
of any shape, on a real HTTP hop, for the requests a test picks."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

# (path, the request's JSON body, the test server's answer) -> the answer sent instead
Tamper = Callable[[str, dict[str, Any], dict[str, Any]], dict[str, Any]]


class TamperingProxy:
    """Forwards every request to ``upstream`` (a test server's base URL, no ``/v1``); a JSON answer to a POST is
    passed through ``tamper`` first, each other answer as it came."""

    def __init__(self, upstream: str, tamper: Tamper) -> None:
        outer = self
        self.tampered = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *a: object) -> None:
                pass

            def _forward(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                res = httpx.request(self.command, upstream + self.path, content=raw, headers=headers, timeout=60)
                body = res.content
                if self.command == "POST" and res.headers.get("content-type", "").startswith("application/json"):
                    answer = tamper(self.path, json.loads(raw or b"{}"), res.json())
                    if answer != res.json():
                        outer.tampered += 1
                    body = json.dumps(answer).encode()
                self.send_response(res.status_code)
                self.send_header("Content-Type", res.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> TamperingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
